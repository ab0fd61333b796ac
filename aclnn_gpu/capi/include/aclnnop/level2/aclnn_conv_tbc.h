/* aclnn_gpu: CANN's level-2 path of aclnnop/aclnn_conv_tbc.h (`#include "aclnnop/level2/aclnn_conv_tbc.h"`). */
#ifndef ACLNN_GPU_ACLNNOP_LEVEL2_CONV_TBC_H_
#define ACLNN_GPU_ACLNNOP_LEVEL2_CONV_TBC_H_

#include "../aclnn_conv_tbc.h"

#endif /* ACLNN_GPU_ACLNNOP_LEVEL2_CONV_TBC_H_ */
