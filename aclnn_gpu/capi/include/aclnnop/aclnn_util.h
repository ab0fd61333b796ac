/* aclnn_gpu: CANN's aclnnop/aclnn_util.h: the export macro of the operator headers. */
#ifndef ACLNN_GPU_ACLNNOP_ACLNN_UTIL_H_
#define ACLNN_GPU_ACLNNOP_ACLNN_UTIL_H_

#ifndef ACLNN_API
#if defined(__GNUC__) || defined(__clang__)
#define ACLNN_API __attribute__((visibility("default")))
#else
#define ACLNN_API
#endif
#endif

#endif /* ACLNN_GPU_ACLNNOP_ACLNN_UTIL_H_ */
