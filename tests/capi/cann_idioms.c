/* CANN's idioms from C99 and C++17 (tests/capi/test_capi.py compiles this file both ways): tagged
 * enums, the level2/ include paths, aclnn_util.h's macro, op_errno.h, ge_error_codes.h, the runtime
 * and meta functions of acl.h / acl_rt.h / acl_meta.h / aclnn_base.h, the runtime's init rules, and
 * a repeatable executor rebound with aclSetInputTensorAddr / aclSetOutputTensorAddr. Prints
 * "idioms ok" when every check passed, else the failed check and the recent error message. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "acl/acl_op.h"
#include "acl/error_codes/ge_error_codes.h"
#include "acl/error_codes/rt_error_codes.h"
#include "aclnn/aclnn_base.h"
#include "aclnn/opdev/op_errno.h"
#include "aclnnop/aclnn_util.h"
#include "aclnnop/level2/aclnn_convolution.h"
#include "aclnnop/level2/aclnn_convolution_backward.h"
#include "aclnnop/level2/aclnn_cross_entropy_loss.h"
#include "aclnnop/level2/aclnn_cross_entropy_loss_grad.h"
#include "aclnnop/level2/aclnn_ctc_loss.h"
#include "aclnnop/level2/aclnn_ctc_loss_backward.h"
#include "aclnnop/level2/aclnn_kl_div.h"
#include "aclnnop/level2/aclnn_kl_div_backward.h"
#include "aclnnop/level2/aclnn_scaled_masked_softmax.h"
#include "aclnnop/level2/aclnn_scaled_masked_softmax_backward.h"
#include "aclnnop/level2/aclnn_util.h"
#include "hccl/hccl.h"

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            printf("FAILED line %d: %s [%s]\n", __LINE__, #cond, aclGetRecentErrMsg());          \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)
#define HAS(text) (strstr(aclGetRecentErrMsg(), (text)) != NULL)
#define PYTHON_WORDS (HAS("None") || HAS("UnknownHandle"))

ACLNN_API int idioms_exported(void);   /* aclnn_util.h's export macro, as CANN's operator headers use it */
int idioms_exported(void) { return 0; }

static void release(int64_t *values)
{
#ifdef __cplusplus
    delete[] values;   /* what CANN's documentation tells C++ callers */
#else
    free(values);
#endif
}

static void count_call(void *userData)
{
    *(int *)userData += 1;
}

static int run_kl(aclOpExecutor *executor, uint64_t workspaceSize, void *workspace, aclrtStream stream)
{
    if (aclnnKlDivBackward(workspace, workspaceSize, executor, stream) != ACLNN_SUCCESS)
        return 1;
    return aclrtSynchronizeStream(stream) != ACL_SUCCESS;
}

int main(void)
{
    enum aclrtMemcpyKind kind = ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE;
    enum aclrtMemMallocPolicy policy = ACL_MEM_MALLOC_HUGE_FIRST;
    enum aclrtStreamStatus streamStatus = ACL_STREAM_STATUS_RESERVED;
    enum aclrtRunMode runMode = ACL_DEVICE;
    enum aclrtMemAttr attr = ACL_HBM_MEM;
    HcclResult suspending = HCCL_E_SUSPENDING;
    uint32_t geCode = ACL_ERROR_GE_PARAM_INVALID;
    int32_t major = 0, minor = 0, patch = 0;
    size_t freeBytes = 0, totalBytes = 0;
    void *a = NULL, *b = NULL, *c = NULL, *target2 = NULL, *out2 = NULL;
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
    aclrtContext ctx = NULL, cur = NULL;
    aclrtStream stream = NULL;
    int64_t dims[2] = {2, 3}, *values = NULL;
    uint64_t n = 0, size = 0;
    aclFormat format = ACL_FORMAT_UNDEFINED;
    int i;

    CHECK(suspending == 22 && HCCL_E_RESERVED == 23 && HCCL_DATA_TYPE_INT128 == 12 && HCCL_REDUCE_RESERVED == 255);
    CHECK(geCode == 145000U && ACLNN_ERR_PARAM_NULLPTR == 161001 && ACL_ERROR_RT_PARAM_INVALID == 107000);
    CHECK(strcmp(HcclGetErrorString(HCCL_E_PARA), "parameter error") == 0);

    /* before aclInit: the runtime is refused, descriptors and queries are not */
    CHECK(aclrtMalloc(&a, 64, policy) == ACL_ERROR_UNINITIALIZE && HAS("aclrtMalloc: called before aclInit"));
    CHECK(aclrtGetVersion(&major, &minor, &patch) == ACL_SUCCESS);
    CHECK(major == ACL_MAJOR_VERSION && minor == ACL_MINOR_VERSION && patch == ACL_PATCH_VERSION);
    CHECK(aclFloatToFloat16(1.0f) == 0x3C00 && aclFloatToFloat16(-2.5f) == 0xC100);
    CHECK(aclFloatToFloat16(65520.0f) == 0x7C00 && aclFloat16ToFloat(0xC100) == -2.5f);
    CHECK(isnan(aclFloat16ToFloat(0x7E00)) && aclFloat16ToFloat(0x0001) > 5.9e-8f && aclFloat16ToFloat(0x0001) < 6.0e-8f);
    CHECK(aclDataTypeSize(ACL_FLOAT16) == 2 && aclDataTypeSize(ACL_INT64) == 8 && aclDataTypeSize(ACL_BF16) == 2);
    CHECK(aclDataTypeSize(ACL_STRING) == 0 && aclDataTypeSize(ACL_DT_UNDEFINED) == 0);

    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtGetSocName() != NULL && strlen(aclrtGetSocName()) > 0);
    CHECK(aclrtGetRunMode(&runMode) == ACL_SUCCESS && runMode == ACL_HOST);
    CHECK(aclrtGetMemInfo(attr, &freeBytes, &totalBytes) == ACL_SUCCESS && totalBytes > 0 && freeBytes <= totalBytes);

    /* contexts */
    CHECK(aclrtCreateContext(&ctx, 0) == ACL_SUCCESS && ctx != NULL);
    CHECK(aclrtGetCurrentContext(&cur) == ACL_SUCCESS && cur == ctx);
    CHECK(aclrtSetCurrentContext(ctx) == ACL_SUCCESS);
    CHECK(aclrtDestroyContext(ctx) == ACL_SUCCESS);
    CHECK(aclrtDestroyContext(ctx) == ACL_ERROR_RT_PARAM_INVALID && HAS("already destroyed") && !PYTHON_WORDS);
    CHECK(aclrtGetCurrentContext(&cur) == ACL_SUCCESS && cur != NULL && cur != ctx);
    CHECK(aclrtDestroyContext(cur) == ACL_ERROR_RT_PARAM_INVALID && HAS("default context"));
    CHECK(aclrtDestroyContext(NULL) == ACL_ERROR_RT_PARAM_INVALID && HAS("nullptr") && !PYTHON_WORDS);

    /* memory and the copy kinds 5-7 */
    CHECK(aclrtMallocAlign32(&a, sizeof(host), policy) == ACL_SUCCESS);
    CHECK(aclrtMalloc(&b, sizeof(host), policy) == ACL_SUCCESS && aclrtMalloc(&c, sizeof(host), policy) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(a, sizeof(host), host, sizeof(host), kind) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(b, sizeof(host), a, sizeof(host), ACL_MEMCPY_INNER_DEVICE_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(c, sizeof(host), b, sizeof(host), ACL_MEMCPY_INTER_DEVICE_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(back, sizeof(back), c, sizeof(back), ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(back, host, sizeof(host)) == 0);
    CHECK(aclrtMemcpy(c, sizeof(host), b, sizeof(host), (aclrtMemcpyKind)8) == ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtMemFlush(a, sizeof(host)) == ACL_SUCCESS && aclrtMemInvalidate(a, sizeof(host)) == ACL_SUCCESS);
    {
        /* a 2x3 block of floats out of a 4-float pitch, back into a dense 3-float pitch */
        float rows[8] = {1, 2, 3, -1, 4, 5, 6, -1}, dense[6] = {0};
        aclrtPtrAttributes attributes;
        enum aclrtDeviceStatus deviceStatus = ACL_RT_DEVICE_STATUS_END;
        int32_t pid = 0;
        CHECK(aclrtMemcpy2d(b, 3 * sizeof(float), rows, 4 * sizeof(float), 3 * sizeof(float), 2,
                            ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
        CHECK(aclrtMemcpy(dense, sizeof(dense), b, sizeof(dense), ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
        CHECK(dense[2] == 3 && dense[3] == 4 && dense[5] == 6);
        CHECK(aclrtMemcpy2d(b, 8, rows, 16, 12, 2, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_ERROR_RT_PARAM_INVALID &&
              HAS("width 12 exceeds dpitch 8"));
        CHECK(aclrtPointerGetAttributes((const char *)b + 4, &attributes) == ACL_SUCCESS);
        CHECK(attributes.location.type == ACL_MEM_LOCATION_TYPE_DEVICE && attributes.location.id == 0);
        CHECK(aclrtPointerGetAttributes(rows, &attributes) == ACL_SUCCESS &&
              attributes.location.type == ACL_MEM_LOCATION_TYPE_HOST);
        CHECK(aclrtQueryDeviceStatus(0, &deviceStatus) == ACL_SUCCESS && deviceStatus == ACL_RT_DEVICE_STATUS_NORMAL);
        CHECK(aclrtDeviceGetBareTgid(&pid) == ACL_SUCCESS && pid > 0);
    }

    /* streams */
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    CHECK(aclrtStreamQuery(stream, &streamStatus) == ACL_SUCCESS && streamStatus == ACL_STREAM_STATUS_COMPLETE);
    CHECK(aclrtSynchronizeStreamWithTimeout(stream, -1) == ACL_SUCCESS);
    {
        int32_t streamId = -1, defaultId = -1;
        CHECK(aclrtStreamGetId(stream, &streamId) == ACL_SUCCESS && streamId > 0);
        CHECK(aclrtStreamGetId(NULL, &defaultId) == ACL_SUCCESS && defaultId == 0);
    }
    CHECK(aclrtSynchronizeStreamWithTimeout(stream, 0) == ACL_ERROR_RT_PARAM_INVALID && HAS("timeout"));
    CHECK(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) == ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtGetLastError(ACL_RT_THREAD_LEVEL) == ACL_ERROR_RT_PARAM_INVALID);
    CHECK(aclrtGetLastError(ACL_RT_THREAD_LEVEL) == ACL_SUCCESS);
    CHECK(aclrtSetStreamFailureMode(stream, ACL_STOP_ON_FAILURE) == ACL_SUCCESS);
    CHECK(aclrtSetStreamFailureMode(stream, ACL_CONTINUE_ON_FAILURE) == ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK(aclrtSetOpExecuteTimeOut(0) == ACL_SUCCESS && aclrtSetOpWaitTimeout(5) == ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    {
        /* a host callback, CANN's way: this thread subscribes, the stream hands it over, this thread runs it */
        int calls = 0;
        uint64_t me = (uint64_t)pthread_self();
        CHECK(aclrtLaunchCallback(count_call, &calls, ACL_CALLBACK_BLOCK, stream) == ACL_ERROR_STREAM_NOT_SUBSCRIBE);
        CHECK(aclrtSubscribeReport(me, stream) == ACL_SUCCESS);
        CHECK(aclrtSubscribeReport(me, stream) == ACL_ERROR_REPEAT_SUBSCRIBE);
        CHECK(aclrtLaunchCallback(count_call, &calls, ACL_CALLBACK_BLOCK, stream) == ACL_SUCCESS);
        CHECK(aclrtLaunchCallback(count_call, &calls, ACL_CALLBACK_NO_BLOCK, stream) == ACL_SUCCESS);
        CHECK(aclrtProcessReport(5000) == ACL_SUCCESS && aclrtProcessReport(5000) == ACL_SUCCESS && calls == 2);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
        CHECK(aclrtProcessReport(20) == ACL_ERROR_WAIT_CALLBACK_TIMEOUT);
        CHECK(aclrtUnSubscribeReport(me, stream) == ACL_SUCCESS);
        CHECK(aclrtProcessReport(20) == ACL_ERROR_THREAD_NOT_SUBSCRIBE);
    }

    /* descriptors: getters, arrays and lists */
    {
        aclTensor *t = aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, a);
        bool flags[3] = {true, false, true};
        float floats[2] = {0.5f, 1.5f};
        const aclTensor *members[2];
        aclBoolArray *boolArray = aclCreateBoolArray(flags, 3);
        aclFloatArray *floatArray = aclCreateFloatArray(floats, 2);
        aclTensorList *list = NULL;
        void *raw = NULL;
        CHECK(t != NULL && boolArray != NULL && floatArray != NULL);
        members[0] = t;
        members[1] = t;
        list = aclCreateTensorList(members, 2);
        CHECK(list != NULL);
        CHECK(aclGetViewShape(t, &values, &n) == ACLNN_SUCCESS && n == 2 && values[0] == 2 && values[1] == 3);
        release(values);
        CHECK(aclGetViewStrides(t, &values, &n) == ACLNN_SUCCESS && n == 2 && values[0] == 3 && values[1] == 1);
        release(values);
        CHECK(aclGetStorageShape(t, &values, &n) == ACLNN_SUCCESS && n == 2 && values[1] == 3);
        release(values);
        CHECK(aclGetFormat(t, &format) == ACLNN_SUCCESS && format == ACL_FORMAT_ND);
        CHECK(aclGetViewShape(NULL, &values, &n) == ACLNN_ERR_PARAM_NULLPTR && HAS("nullptr") && !PYTHON_WORDS);
        CHECK(aclGetViewShape(t, NULL, &n) == ACLNN_ERR_PARAM_NULLPTR);
        CHECK(aclGetBoolArraySize(boolArray, &size) == ACLNN_SUCCESS && size == 3);
        CHECK(aclGetFloatArraySize(floatArray, &size) == ACLNN_SUCCESS && size == 2);
        CHECK(aclGetTensorListSize(list, &size) == ACLNN_SUCCESS && size == 2);
        CHECK(aclGetRawTensorAddr(t, &raw) == ACLNN_SUCCESS && raw == a);
        /* CANN: the list's tensors need no release of their own: they go with the list */
        CHECK(aclDestroyTensorList(list) == ACLNN_SUCCESS);
        CHECK(aclGetFormat(t, &format) == ACLNN_ERR_PARAM_INVALID && HAS("live"));
        CHECK(aclDestroyBoolArray(boolArray) == ACLNN_SUCCESS && aclDestroyFloatArray(floatArray) == ACLNN_SUCCESS);
        CHECK(aclDestroyBoolArray(boolArray) == ACLNN_ERR_PARAM_INVALID && HAS("already destroyed"));
        CHECK(aclDestroyTensor((const aclTensor *)(uintptr_t)0x1230) == ACLNN_ERR_PARAM_INVALID && !PYTHON_WORDS);
        CHECK(HAS("never created"));
    }

    /* a repeatable executor rebound, as torch_npu's cache does: out = -target * gradOutput ("none") */
    {
        float ones[6] = {1, 1, 1, 1, 1, 1}, tgt[6] = {0.5f, 1, 2, 3, 4, 5}, result[6];
        aclTensor *grad = aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, b);
        aclTensor *self = aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, b);
        aclTensor *target = aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, c);
        aclTensor *out = aclCreateTensor(dims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 2, a);
        aclOpExecutor *executor = NULL;
        uint64_t workspaceSize = 0;
        void *workspace = NULL;
        CHECK(grad && self && target && out);
        CHECK(aclrtMalloc(&target2, sizeof(tgt), policy) == ACL_SUCCESS);
        CHECK(aclrtMalloc(&out2, sizeof(tgt), policy) == ACL_SUCCESS);
        CHECK(aclrtMemcpy(b, sizeof(ones), ones, sizeof(ones), ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
        CHECK(aclrtMemcpy(c, sizeof(tgt), tgt, sizeof(tgt), ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
        for (i = 0; i < 6; i++)
            tgt[i] *= 2;
        CHECK(aclrtMemcpy(target2, sizeof(tgt), tgt, sizeof(tgt), ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
        CHECK(aclnnKlDivBackwardGetWorkspaceSize(grad, self, target, 0, false, out, &workspaceSize, &executor) == 0);
        CHECK(aclSetAclOpExecutorRepeatable(executor) == ACLNN_SUCCESS);
        if (workspaceSize > 0)
            CHECK(aclrtMalloc(&workspace, workspaceSize, policy) == ACL_SUCCESS);
        CHECK(run_kl(executor, workspaceSize, workspace, stream) == 0);
        CHECK(aclrtMemcpy(result, sizeof(result), a, sizeof(result), ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
        CHECK(result[0] == -0.5f && result[5] == -5.0f);
        CHECK(aclSetInputTensorAddr(executor, 2, target, target2) == ACLNN_SUCCESS);
        CHECK(aclSetOutputTensorAddr(executor, 0, out, out2) == ACLNN_SUCCESS);
        CHECK(run_kl(executor, workspaceSize, workspace, stream) == 0);
        CHECK(aclrtMemcpy(result, sizeof(result), out2, sizeof(result), ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
        CHECK(result[0] == -1.0f && result[5] == -10.0f);
        CHECK(aclSetInputTensorAddr(executor, 3, target, target2) == ACLNN_ERR_PARAM_INVALID && HAS("out of range"));
        CHECK(aclSetInputTensorAddr(executor, 0, target, target2) == ACLNN_ERR_PARAM_INVALID && HAS("gradOutput"));
        CHECK(aclDestroyAclOpExecutor(executor) == ACLNN_SUCCESS);
        aclDestroyTensor(grad);
        aclDestroyTensor(self);
        aclDestroyTensor(target);
        aclDestroyTensor(out);
        if (workspace != NULL)
            aclrtFree(workspace);
    }

    /* HCCL's C-only pieces */
    {
        HcclCommConfig config;
        char name[COMM_NAME_MAX_LENGTH];
        HcclCommConfigInit(&config);
        CHECK(config.hcclBufferSize == HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET && config.hcclCommName[0] == '\0');
        CHECK(HcclGetCommName(NULL, name) != HCCL_SUCCESS && !PYTHON_WORDS);
    }

    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
    CHECK(aclrtFree(a) == ACL_SUCCESS && aclrtFree(b) == ACL_SUCCESS && aclrtFree(c) == ACL_SUCCESS);
    CHECK(aclrtFree(target2) == ACL_SUCCESS && aclrtFree(out2) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);

    /* after aclFinalize: refused until an init; aclnnInit opens the runtime for aclnn programs */
    CHECK(aclrtMalloc(&a, 64, policy) == ACL_ERROR_UNINITIALIZE && HAS("after aclFinalize"));
    CHECK(aclnnKlDivBackward(NULL, 0, NULL, NULL) == ACLNN_ERR_RUNTIME_ERROR && HAS("after aclFinalize"));
    CHECK(aclnnInit(NULL) == ACLNN_SUCCESS);
    CHECK(aclrtMalloc(&a, 64, policy) == ACL_SUCCESS && aclrtFree(a) == ACL_SUCCESS);
    CHECK(aclnnFinalize() == ACLNN_SUCCESS);
    printf("idioms ok\n");
    return 0;
}
