// aclnnScaledMaskedSoftmaxBackward: CANN's sample program flow in C++ (see kl_div_backward.cpp for the
// steps). y = softmax(scale * x) with masked positions (mask true) excluded, (1, 2, 4, 8) FLOAT; BOOL
// mask of the same shape; gradOutput random; scale 0.5; fixTriuMask false.
#include <cmath>

#include "acl_sample.h"
#include "aclnnop/aclnn_scaled_masked_softmax_backward.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t B = 1, H = 2, S1 = 4, S2 = 8, rows = B * H * S1;
    std::vector<int64_t> shape = {B, H, S1, S2};
    std::vector<float> gradOutputHostData = Uniform(rows * S2, -1.0f, 1.0f, 8);
    std::vector<float> xHostData = Uniform(rows * S2, -3.0f, 3.0f, 9);
    std::vector<float> coin = Uniform(rows * S2, 0.0f, 1.0f, 10);
    std::vector<uint8_t> maskHostData(rows * S2);
    std::vector<float> yHostData(rows * S2), outHostData(rows * S2, 0.0f);
    double scale = 0.5;
    bool fixTriuMask = false;
    for (int64_t r = 0; r < rows; r++) {  // y: the forward's softmax of the unmasked positions of each row
        double maxValue = -1e300, sum = 0.0;
        for (int64_t j = 0; j < S2; j++) {
            maskHostData[r * S2 + j] = (j > 0 && coin[r * S2 + j] < 0.25f) ? 1 : 0;  // column 0 always kept
            if (!maskHostData[r * S2 + j]) maxValue = std::fmax(maxValue, scale * xHostData[r * S2 + j]);
        }
        for (int64_t j = 0; j < S2; j++) {
            double e = maskHostData[r * S2 + j] ? 0.0 : std::exp(scale * xHostData[r * S2 + j] - maxValue);
            yHostData[r * S2 + j] = static_cast<float>(e);
            sum += e;
        }
        for (int64_t j = 0; j < S2; j++) yHostData[r * S2 + j] = static_cast<float>(yHostData[r * S2 + j] / sum);
    }
    PrintInput("gradOutput", shape, gradOutputHostData);
    PrintInput("y", shape, yHostData);
    PrintInput("mask", shape, maskHostData);
    LOG_PRINT("input scale [] : %.9g\n", scale);

    void *gradOutputDeviceAddr = nullptr, *yDeviceAddr = nullptr, *maskDeviceAddr = nullptr;
    void *outDeviceAddr = nullptr;
    aclTensor *gradOutput = nullptr, *y = nullptr, *mask = nullptr, *out = nullptr;
    ret = CreateAclTensor(gradOutputHostData, shape, &gradOutputDeviceAddr, aclDataType::ACL_FLOAT, &gradOutput);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(yHostData, shape, &yDeviceAddr, aclDataType::ACL_FLOAT, &y);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(maskHostData, shape, &maskDeviceAddr, aclDataType::ACL_BOOL, &mask);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(outHostData, shape, &outDeviceAddr, aclDataType::ACL_FLOAT, &out);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(gradOutput, y, mask, scale, fixTriuMask, out,
                                                           &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnScaledMaskedSoftmaxBackward(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnScaledMaskedSoftmaxBackward failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the result back and print it
    ret = CopyToHost<float>(outDeviceAddr, shape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(gradOutput);
    aclDestroyTensor(y);
    aclDestroyTensor(mask);
    aclDestroyTensor(out);
    aclrtFree(gradOutputDeviceAddr);
    aclrtFree(yDeviceAddr);
    aclrtFree(maskDeviceAddr);
    aclrtFree(outDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
