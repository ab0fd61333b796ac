/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_convolution.h (`#include "aclnnop/level2/aclnn_convolution.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_CONVOLUTION_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_CONVOLUTION_H_

#include "../aclnn_convolution.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_CONVOLUTION_H_ */
