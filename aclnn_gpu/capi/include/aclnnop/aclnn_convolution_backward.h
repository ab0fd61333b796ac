/* aclnn_gpu: ConvTbc backward (CANN declares it with the convolution backward) (CANN's aclnnop/aclnn_convolution_backward.h). */
#ifndef ACLNN_GPU_ACLNNOP_CONVOLUTION_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_CONVOLUTION_BACKWARD_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnConvTbcBackwardGetWorkspaceSize(
    const aclTensor *self, const aclTensor *input, const aclTensor *weight, const aclTensor *bias, int64_t pad,
    int8_t cubeMathType, aclTensor *gradInput, aclTensor *gradWeight, aclTensor *gradBias, uint64_t *workspaceSize,
    aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnConvTbcBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                     const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_CONVOLUTION_BACKWARD_H_ */
