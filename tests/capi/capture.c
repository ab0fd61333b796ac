/* ACL graph capture through the C ABI: capture a KlDivBackward and an asynchronous memset on a stream,
 * check GetInfo's states, replay the model 3 times on another stream, read the result back, and the
 * refusals (End on a stream not capturing, a synchronize of the capturing stream invalidating the
 * capture, a destroyed model). Prints "capture ok" and the replayed values. */
#include <stdio.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_kl_div_backward.h"

#define OK(call) do { int r_ = (int)(call); if (r_ != 0) { printf("%s: %d %s\n", #call, r_, aclGetRecentErrMsg()); return 1; } } while (0)
#define EXPECT(call, code) do { int r_ = (int)(call); if (r_ != (code)) { printf("%s: %d, expected %d (%s)\n", #call, r_, (int)(code), aclGetRecentErrMsg()); return 1; } } while (0)

int main(void)
{
    float grad = 1.0f, self[4] = {0.1f, 0.2f, 0.3f, 0.4f}, target[4] = {0.5f, 0.25f, 0.125f, 1.0f}, out[4];
    int64_t scalarDims[1] = {1}, dims[1] = {4};
    void *d[4], *hostTarget;
    aclTensor *t[4];
    aclOpExecutor *executor;
    uint64_t workspaceSize = 0;
    void *workspace = NULL;
    aclrtStream stream, other;
    aclmdlRICaptureStatus status;
    aclmdlRI model = NULL, during = NULL, none = (aclmdlRI)1;
    int i, replay;

    OK(aclInit(NULL));
    OK(aclrtSetDevice(0));
    OK(aclrtCreateStream(&stream));
    OK(aclrtCreateStream(&other));
    for (i = 0; i < 4; i++) OK(aclrtMalloc(&d[i], 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMallocHost(&hostTarget, 16));
    OK(aclrtMemcpy(d[0], 4, &grad, 4, ACL_MEMCPY_HOST_TO_DEVICE));
    OK(aclrtMemcpy(d[1], 16, self, 16, ACL_MEMCPY_HOST_TO_DEVICE));
    OK(aclrtMemcpy(hostTarget, 16, target, 16, ACL_MEMCPY_HOST_TO_HOST));
    t[0] = aclCreateTensor(scalarDims, 0, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, scalarDims, 0, d[0]);
    for (i = 1; i < 4; i++) t[i] = aclCreateTensor(dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 1, d[i]);
    OK(aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 0 /* none */, false, t[3], &workspaceSize, &executor));
    if (workspaceSize > 0) OK(aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST));

    OK(aclmdlRICaptureGetInfo(stream, &status, &none));
    if (status != ACL_MODEL_RI_CAPTURE_STATUS_NONE || none != NULL) { printf("GetInfo before Begin\n"); return 1; }
    EXPECT(aclmdlRICaptureEnd(stream, &model), ACL_ERROR_RT_STREAM_NOT_CAPTURED);

    /* a capture invalidated by a synchronize of the capturing stream gives no model */
    OK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    EXPECT(aclrtSynchronizeStream(stream), ACL_ERROR_RT_STREAM_CAPTURED);
    OK(aclmdlRICaptureGetInfo(stream, &status, &during));
    if (status != ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED) { printf("GetInfo after the invalidation\n"); return 1; }
    EXPECT(aclmdlRICaptureEnd(stream, &model), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);

    OK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    OK(aclmdlRICaptureGetInfo(stream, &status, &during));
    if (status != ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE || during == NULL) { printf("GetInfo while capturing\n"); return 1; }
    EXPECT(aclrtMemset(d[3], 16, 0, 16), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    OK(aclrtMemsetAsync(d[3], 16, 0xFF, 16, stream));
    OK(aclrtMemcpyAsync(d[2], 16, hostTarget, 16, ACL_MEMCPY_HOST_TO_DEVICE, stream));
    OK(aclnnKlDivBackward(workspace, workspaceSize, executor, stream));
    OK(aclmdlRICaptureEnd(stream, &model));
    if (model != during) { printf("the model differs from GetInfo's\n"); return 1; }
    EXPECT(aclrtFree(d[3]), ACL_ERROR_RT_MEMORY_FREE);

    for (replay = 0; replay < 3; replay++) OK(aclmdlRIExecuteAsync(model, other));
    OK(aclrtSynchronizeStream(other));
    OK(aclrtMemcpy(out, 16, d[3], 16, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("replayed:");
    for (i = 0; i < 4; i++) printf(" %.6f", out[i]);
    printf("\n");
    OK(aclmdlRIDestroy(model));
    EXPECT(aclmdlRIExecuteAsync(model, other), ACL_ERROR_RT_PARAM_INVALID);

    OK(aclDestroyAclOpExecutor(executor));
    for (i = 0; i < 4; i++) OK(aclDestroyTensor(t[i]));
    for (i = 0; i < 4; i++) OK(aclrtFree(d[i]));
    if (workspace != NULL) OK(aclrtFree(workspace));
    OK(aclrtFreeHost(hostTarget));
    OK(aclrtDestroyStream(other));
    OK(aclrtDestroyStream(stream));
    OK(aclrtResetDevice(0));
    OK(aclFinalize());
    printf("capture ok\n");
    return 0;
}
