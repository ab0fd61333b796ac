/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_cross_entropy_loss.h (`#include "aclnnop/level2/aclnn_cross_entropy_loss.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_CROSS_ENTROPY_LOSS_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_CROSS_ENTROPY_LOSS_H_

#include "../aclnn_cross_entropy_loss.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_CROSS_ENTROPY_LOSS_H_ */
