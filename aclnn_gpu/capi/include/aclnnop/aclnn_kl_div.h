/* aclnn_gpu: KL divergence forward (CANN's aclnnop/aclnn_kl_div.h). */
#ifndef ACLNN_GPU_ACLNNOP_KL_DIV_H_
#define ACLNN_GPU_ACLNNOP_KL_DIV_H_

#include "../aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnKlDivGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, int64_t reduction, bool logTarget, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnKlDiv(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNNOP_KL_DIV_H_ */
