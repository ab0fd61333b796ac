/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_scaled_masked_softmax_backward.h (`#include "aclnnop/level2/aclnn_scaled_masked_softmax_backward.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_SCALED_MASKED_SOFTMAX_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_SCALED_MASKED_SOFTMAX_BACKWARD_H_

#include "../aclnn_scaled_masked_softmax_backward.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_SCALED_MASKED_SOFTMAX_BACKWARD_H_ */
