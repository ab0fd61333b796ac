/* aclnn_gpu: the header an Ascend program includes first (CANN's acl/acl.h): the base types and
 * codes, the runtime and model-runtime capture. ACL_MAJOR_VERSION etc. name the CANN headers'
 * version this subset follows. */
#ifndef ACLNN_GPU_ACL_ACL_H_
#define ACLNN_GPU_ACL_ACL_H_

#include "acl_rt.h"
#include "acl_op.h"
#include "acl_mdl.h"

#define ACL_MAJOR_VERSION 1
#define ACL_MINOR_VERSION 17
#define ACL_PATCH_VERSION 0

#ifdef __cplusplus
extern "C" {
#endif

/* the CANN header version above (ACL_MAJOR_VERSION, ...), which this library follows */
ACL_FUNC_VISIBILITY aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACL_ACL_H_ */
