/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_cross_entropy_loss_grad.h (`#include "aclnnop/level2/aclnn_cross_entropy_loss_grad.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_CROSS_ENTROPY_LOSS_GRAD_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_CROSS_ENTROPY_LOSS_GRAD_H_

#include "../aclnn_cross_entropy_loss_grad.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_CROSS_ENTROPY_LOSS_GRAD_H_ */
