/* aclnn_gpu: what every aclnnop header includes (CANN's aclnn/aclnn_base.h): the meta API and
 * aclnn's own initialisation (a lighter aclInit for programs that only run aclnn operators). */
#ifndef ACLNN_GPU_ACLNN_ACLNN_BASE_H_
#define ACLNN_GPU_ACLNN_ACLNN_BASE_H_

#include "acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnInit(const char *configPath);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNN_ACLNN_BASE_H_ */
