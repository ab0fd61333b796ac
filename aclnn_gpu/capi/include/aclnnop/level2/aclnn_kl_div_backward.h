/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_kl_div_backward.h (`#include "aclnnop/level2/aclnn_kl_div_backward.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_KL_DIV_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_KL_DIV_BACKWARD_H_

#include "../aclnn_kl_div_backward.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_KL_DIV_BACKWARD_H_ */
