// aclnnScaledMaskedSoftmax: CANN's sample program flow in C++ (see kl_div.cpp for the steps).
// x (1, 2, 4, 8) FLOAT, BOOL mask of the same shape (true: excluded), scale 0.5, fixTriuMask false:
// y = softmax(scale * x) over the last axis with the masked positions set to 0.
#include "acl_sample.h"
#include "aclnnop/aclnn_scaled_masked_softmax.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t B = 1, H = 2, S1 = 4, S2 = 8, n = B * H * S1 * S2;
    std::vector<int64_t> shape = {B, H, S1, S2};
    std::vector<float> xHostData = Uniform(n, -3.0f, 3.0f, 31);
    std::vector<float> coin = Uniform(n, 0.0f, 1.0f, 32);
    std::vector<uint8_t> maskHostData(n);
    for (int64_t i = 0; i < n; i++) {
        maskHostData[i] = (i % S2 > 0 && coin[i] < 0.25f) ? 1 : 0;  // column 0 of every row is kept
    }
    std::vector<float> yHostData(n, 0.0f);
    double scale = 0.5;
    bool fixTriuMask = false;
    PrintInput("x", shape, xHostData);
    PrintInput("mask", shape, maskHostData);
    LOG_PRINT("input scale [] : %.9g\n", scale);

    void *xDeviceAddr = nullptr, *maskDeviceAddr = nullptr, *yDeviceAddr = nullptr;
    aclTensor *x = nullptr, *mask = nullptr, *y = nullptr;
    ret = CreateAclTensor(xHostData, shape, &xDeviceAddr, aclDataType::ACL_FLOAT, &x);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(maskHostData, shape, &maskDeviceAddr, aclDataType::ACL_BOOL, &mask);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(yHostData, shape, &yDeviceAddr, aclDataType::ACL_FLOAT, &y);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnScaledMaskedSoftmaxGetWorkspaceSize(x, mask, scale, fixTriuMask, y, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnScaledMaskedSoftmaxGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnScaledMaskedSoftmax(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnScaledMaskedSoftmax failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the result back and print it
    ret = CopyToHost<float>(yDeviceAddr, shape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(x);
    aclDestroyTensor(mask);
    aclDestroyTensor(y);
    aclrtFree(xDeviceAddr);
    aclrtFree(maskDeviceAddr);
    aclrtFree(yDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
