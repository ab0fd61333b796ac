/* aclnn_gpu: an alias header (not a CANN name): CANN declares aclnnConvTbc in aclnnop/aclnn_convolution.h. */
#ifndef ACLNN_GPU_ACLNNOP_CONV_TBC_H_
#define ACLNN_GPU_ACLNNOP_CONV_TBC_H_

#include "aclnn_convolution.h"

#endif /* ACLNN_GPU_ACLNNOP_CONV_TBC_H_ */
