/* aclnn_gpu: the graph engine's return codes (CANN's acl/error_codes/ge_error_codes.h subset). The
 * graph engine (model loading) is not part of this library; the codes are here for programs that
 * name them. */
#ifndef ACLNN_GPU_ACL_GE_ERROR_CODES_H_
#define ACLNN_GPU_ACL_GE_ERROR_CODES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

static const uint32_t ACL_ERROR_GE_PARAM_INVALID = 145000U;
static const uint32_t ACL_ERROR_GE_EXEC_NOT_INIT = 145001U;
static const uint32_t ACL_ERROR_GE_FORMAT_INVALID = 145020U;
static const uint32_t ACL_ERROR_GE_SHAPE_INVALID = 145021U;
static const uint32_t ACL_ERROR_GE_DATATYPE_INVALID = 145022U;
static const uint32_t ACL_ERROR_GE_MEMORY_ALLOCATION = 245000U;
static const uint32_t ACL_ERROR_GE_MEMORY_OPERATE_FAILED = 245001U;
static const uint32_t ACL_ERROR_GE_DEVICE_MEMORY_OPERATE_FAILED = 245002U;
static const uint32_t ACL_ERROR_GE_INTERNAL_ERROR = 545000U;
static const uint32_t ACL_ERROR_GE_LOAD_MODEL = 545001U;

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACL_GE_ERROR_CODES_H_ */
