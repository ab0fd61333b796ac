/* aclnn_gpu: cross-entropy loss forward (CANN's aclnnop/aclnn_cross_entropy_loss.h). */
#ifndef ACLNN_GPU_ACLNNOP_CROSS_ENTROPY_LOSS_H_
#define ACLNN_GPU_ACLNNOP_CROSS_ENTROPY_LOSS_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(
    const aclTensor *input, const aclTensor *target, const aclTensor *weightOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, bool returnZloss,
    const aclTensor *lossOut, const aclTensor *logProbOut, const aclTensor *zlossOut, const aclTensor *lseForZlossOut,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                      aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_CROSS_ENTROPY_LOSS_H_ */
