/* aclnn_gpu: an alias header (not a CANN name): CANN declares aclnnConvTbcBackward in aclnnop/aclnn_convolution_backward.h. */
#ifndef ACLNN_GPU_ACLNNOP_CONV_TBC_BACKWARD_H_
#define ACLNN_GPU_ACLNNOP_CONV_TBC_BACKWARD_H_

#include "aclnn_convolution_backward.h"

#endif /* ACLNN_GPU_ACLNNOP_CONV_TBC_BACKWARD_H_ */
