/* aclnn_gpu: KL divergence backward (CANN's aclnnop/aclnn_kl_div_backward.h). */
#ifndef ACLNN_GPU_ACLNNOP_KL_DIV_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_KL_DIV_BACKWARD_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnKlDivBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, int64_t reduction, bool logTarget,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnKlDivBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                   aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_KL_DIV_BACKWARD_H_ */
