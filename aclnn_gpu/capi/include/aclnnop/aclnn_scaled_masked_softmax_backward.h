/* aclnn_gpu: scaled masked softmax backward (CANN's aclnnop/aclnn_scaled_masked_softmax_backward.h). */
#ifndef ACLNN_GPU_ACLNNOP_SCALED_MASKED_SOFTMAX_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_SCALED_MASKED_SOFTMAX_BACKWARD_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *y, const aclTensor *mask, double scale, bool fixTriuMask,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnScaledMaskedSoftmaxBackward(void *workspace, uint64_t workspaceSize,
                                                                 aclOpExecutor *executor, const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_SCALED_MASKED_SOFTMAX_BACKWARD_H_ */
