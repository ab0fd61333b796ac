/* aclnn_gpu: scaled masked softmax forward (CANN's aclnnop/aclnn_scaled_masked_softmax.h). */
#ifndef ACLNN_GPU_ACLNNOP_SCALED_MASKED_SOFTMAX_H_
#define ACLNN_GPU_ACLNNOP_SCALED_MASKED_SOFTMAX_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnScaledMaskedSoftmaxGetWorkspaceSize(
    const aclTensor *x, const aclTensor *mask, double scale, bool fixTriuMask, aclTensor *y, uint64_t *workspaceSize,
    aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnScaledMaskedSoftmax(void *workspace, uint64_t workspaceSize,
                                                         aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_SCALED_MASKED_SOFTMAX_H_ */
