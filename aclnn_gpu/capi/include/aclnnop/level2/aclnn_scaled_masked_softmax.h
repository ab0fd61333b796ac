/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_scaled_masked_softmax.h (`#include "aclnnop/level2/aclnn_scaled_masked_softmax.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_SCALED_MASKED_SOFTMAX_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_SCALED_MASKED_SOFTMAX_H_

#include "../aclnn_scaled_masked_softmax.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_SCALED_MASKED_SOFTMAX_H_ */
