/* aclnn_gpu: CANN's aclnnop/level2/aclnn_util.h: the same export macro as aclnnop/aclnn_util.h. */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_ACLNN_UTIL_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_ACLNN_UTIL_H_

#include "../aclnn_util.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_ACLNN_UTIL_H_ */
