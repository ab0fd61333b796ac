/* aclnn_gpu: what every aclnnop header includes (CANN's aclnn/aclnn_base.h): the meta API. */
#ifndef ACLNN_GPU_ACLNN_ACLNN_BASE_H_
#define ACLNN_GPU_ACLNN_ACLNN_BASE_H_

#include "acl_meta.h"

#endif /* ACLNN_GPU_ACLNN_ACLNN_BASE_H_ */
