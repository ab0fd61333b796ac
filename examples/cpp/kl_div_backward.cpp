// aclnnKlDivBackward: CANN's sample program flow in C++ (aclInit, aclrtSetDevice, stream, aclrtMalloc +
// aclrtMemcpy of the inputs, aclCreateTensor, GetWorkspaceSize, workspace, execute,
// aclrtSynchronizeStream, copy back, print, destroy, aclFinalize).
// gradOutput 0-D, self (4, 3) log-probabilities, target (4, 3) probabilities, reduction 1 (mean).
#include <cmath>

#include "acl_sample.h"
#include "aclnnop/aclnn_kl_div_backward.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    std::vector<int64_t> gradOutputShape = {}, selfShape = {4, 3}, targetShape = {4, 3}, outShape = {4, 3};
    std::vector<float> gradOutputHostData = {0.5f};
    std::vector<float> selfHostData = Uniform(12, -2.5f, -0.1f, 1);
    std::vector<float> targetHostData = Uniform(12, 0.05f, 1.0f, 2);
    std::vector<float> outHostData(12, 0.0f);
    int64_t reduction = 1;  // 0 none, 1 mean, 2 sum, 3 batchmean
    bool logTarget = false;
    PrintInput("gradOutput", gradOutputShape, gradOutputHostData);
    PrintInput("self", selfShape, selfHostData);
    PrintInput("target", targetShape, targetHostData);
    LOG_PRINT("input reduction [] : %ld\ninput logTarget [] : %d\n", static_cast<long>(reduction), logTarget ? 1 : 0);

    void *gradOutputDeviceAddr = nullptr, *selfDeviceAddr = nullptr, *targetDeviceAddr = nullptr;
    void *outDeviceAddr = nullptr;
    aclTensor *gradOutput = nullptr, *self = nullptr, *target = nullptr, *out = nullptr;
    ret = CreateAclTensor(gradOutputHostData, gradOutputShape, &gradOutputDeviceAddr, aclDataType::ACL_FLOAT, &gradOutput);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(selfHostData, selfShape, &selfDeviceAddr, aclDataType::ACL_FLOAT, &self);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetHostData, targetShape, &targetDeviceAddr, aclDataType::ACL_FLOAT, &target);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(outHostData, outShape, &outDeviceAddr, aclDataType::ACL_FLOAT, &out);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnKlDivBackwardGetWorkspaceSize(gradOutput, self, target, reduction, logTarget, out, &workspaceSize,
                                             &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnKlDivBackwardGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnKlDivBackward(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnKlDivBackward failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the result back and print it
    ret = CopyToHost<float>(outDeviceAddr, outShape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(gradOutput);
    aclDestroyTensor(self);
    aclDestroyTensor(target);
    aclDestroyTensor(out);
    aclrtFree(gradOutputDeviceAddr);
    aclrtFree(selfDeviceAddr);
    aclrtFree(targetDeviceAddr);
    aclrtFree(outDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
