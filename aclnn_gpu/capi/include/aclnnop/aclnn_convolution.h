/* aclnn_gpu: ConvTbc forward (CANN declares it with the convolution) (CANN's aclnnop/aclnn_convolution.h). */
#ifndef ACLNN_GPU_ACLNNOP_CONVOLUTION_H_
#define ACLNN_GPU_ACLNNOP_CONVOLUTION_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnConvTbcGetWorkspaceSize(
    const aclTensor *self, const aclTensor *weight, const aclTensor *bias, const int64_t pad, aclTensor *out,
    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnConvTbc(void *workspace, const uint64_t workspaceSize, aclOpExecutor *executor,
                                             const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_CONVOLUTION_H_ */
