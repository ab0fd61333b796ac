/* aclnn_gpu: CTC loss forward (CANN's aclnnop/aclnn_ctc_loss.h). */
#ifndef ACLNN_GPU_ACLNNOP_CTC_LOSS_H_
#define ACLNN_GPU_ACLNNOP_CTC_LOSS_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnCtcLossGetWorkspaceSize(
    const aclTensor *logProbs, const aclTensor *targets, const aclIntArray *inputLengths,
    const aclIntArray *targetLengths, int64_t blank, bool zeroInfinity, aclTensor *negLogLikelihoodOut,
    aclTensor *logAlphaOut, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnCtcLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_CTC_LOSS_H_ */
