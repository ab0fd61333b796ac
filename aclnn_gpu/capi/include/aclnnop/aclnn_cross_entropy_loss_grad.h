/* aclnn_gpu: cross-entropy loss gradient (CANN's aclnnop/aclnn_cross_entropy_loss_grad.h). */
#ifndef ACLNN_GPU_ACLNNOP_CROSS_ENTROPY_LOSS_GRAD_H_
#define ACLNN_GPU_ACLNNOP_CROSS_ENTROPY_LOSS_GRAD_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *gradLoss, const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_CROSS_ENTROPY_LOSS_GRAD_H_ */
