/* aclnn_gpu: CTC loss backward (CANN's aclnnop/aclnn_ctc_loss_backward.h). */
#ifndef ACLNN_GPU_ACLNNOP_CTC_LOSS_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_CTC_LOSS_BACKWARD_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnCtcLossBackwardGetWorkspaceSize(
    const aclTensor *gradOut, const aclTensor *logProbs, const aclTensor *targets, const aclIntArray *inputLengths,
    const aclIntArray *targetLengths, const aclTensor *negLogLikelihood, const aclTensor *logAlpha, int64_t blank,
    bool zeroInfinity, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnCtcLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                     aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_CTC_LOSS_BACKWARD_H_ */
