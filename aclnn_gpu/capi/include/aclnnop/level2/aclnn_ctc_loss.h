/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_ctc_loss.h (`#include "aclnnop/level2/aclnn_ctc_loss.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_CTC_LOSS_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_CTC_LOSS_H_

#include "../aclnn_ctc_loss.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_CTC_LOSS_H_ */
