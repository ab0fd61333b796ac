/* aclnn_gpu: the aclnn meta API (CANN's aclnn/acl_meta.h subset): opaque descriptors over device
 * memory, their create/destroy functions and getters, executors, aclnnStatus and its codes. */
#ifndef ACLNN_GPU_ACLNN_ACL_META_H_
#define ACLNN_GPU_ACLNN_ACL_META_H_

#include "../acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t aclnnStatus;

typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000
#define ACLNN_ERR_INNER_INFERSHAPE_ERROR 561001
#define ACLNN_ERR_INNER_TILING_ERROR 561002
#define ACLNN_ERR_INNER_FIND_KERNEL_ERROR 561003
#define ACLNN_ERR_INNER_CREATE_EXECUTOR 561101
#define ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR 561102
#define ACLNN_ERR_INNER_NULLPTR 561103
#define ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE 561104
#define ACLNN_ERR_INNER_KEY_CONFLICT 561105
#define ACLNN_ERR_INNER_KEY_CONFILICT ACLNN_ERR_INNER_KEY_CONFLICT
#define ACLNN_ERR_INNER_INVALID_IMPL_MODE 561106
#define ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND 561107
#define ACLNN_ERR_INNER_LOAD_JSON_FAILED 561108
#define ACLNN_ERR_INNER_JSON_VALUE_NOT_FOUND 561109
#define ACLNN_ERR_INNER_JSON_FORMAT_INVALID 561110
#define ACLNN_ERR_INNER_JSON_DTYPE_INVALID 561111
#define ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND 561112
#define ACLNN_ERR_INNER_OP_FILE_INVALID 561113
#define ACLNN_ERR_INNER_ATTR_NUM_OUT_OF_BOUND 561114
#define ACLNN_ERR_INNER_ATTR_LEN_NOT_ENOUGH 561115
#define ACLNN_ERR_INNER_INPUT_NUM_IN_JSON_TOO_LARGE 561116
#define ACLNN_ERR_INNER_INPUT_JSON_IS_NULL 561117
#define ACLNN_ERR_INNER_STATIC_WORKSPACE_INVALID 561118
#define ACLNN_ERR_INNER_STATIC_BLOCK_DIM_INVALID 561119

/* stride and offset count elements; stride NULL means contiguous; NULL result on failure */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                               const int64_t *stride, int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum,
                                               void *tensorData);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor);
ACL_FUNC_VISIBILITY aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyIntArray(const aclIntArray *array);
ACL_FUNC_VISIBILITY aclScalar *aclCreateScalar(void *value, aclDataType dataType);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyScalar(const aclScalar *scalar);
ACL_FUNC_VISIBILITY aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset);
ACL_FUNC_VISIBILITY aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType);
ACL_FUNC_VISIBILITY aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format);

ACL_FUNC_VISIBILITY aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_ACLNN_ACL_META_H_ */
