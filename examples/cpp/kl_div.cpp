// aclnnKlDiv: CANN's sample program flow in C++ (aclInit, aclrtSetDevice, stream, aclrtMalloc +
// aclrtMemcpy of the inputs, aclCreateTensor, GetWorkspaceSize, workspace, execute,
// aclrtSynchronizeStream, copy back, print, destroy, aclFinalize).
// self (4, 3) log-probabilities, target (4, 3) probabilities, reduction 3 (batchmean): out is 0-D.
#include "acl_sample.h"
#include "aclnnop/aclnn_kl_div.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    std::vector<int64_t> selfShape = {4, 3}, targetShape = {4, 3}, outShape = {};
    std::vector<float> selfHostData = Uniform(12, -2.5f, -0.1f, 21);
    std::vector<float> targetHostData = Uniform(12, 0.05f, 1.0f, 22);
    std::vector<float> outHostData = {0.0f};
    int64_t reduction = 3;  // 0 none, 1 mean, 2 sum, 3 batchmean
    bool logTarget = false;
    PrintInput("self", selfShape, selfHostData);
    PrintInput("target", targetShape, targetHostData);
    LOG_PRINT("input reduction [] : %ld\ninput logTarget [] : %d\n", static_cast<long>(reduction), logTarget ? 1 : 0);

    void *selfDeviceAddr = nullptr, *targetDeviceAddr = nullptr, *outDeviceAddr = nullptr;
    aclTensor *self = nullptr, *target = nullptr, *out = nullptr;
    ret = CreateAclTensor(selfHostData, selfShape, &selfDeviceAddr, aclDataType::ACL_FLOAT, &self);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetHostData, targetShape, &targetDeviceAddr, aclDataType::ACL_FLOAT, &target);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(outHostData, outShape, &outDeviceAddr, aclDataType::ACL_FLOAT, &out);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnKlDivGetWorkspaceSize(self, target, reduction, logTarget, out, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnKlDivGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnKlDiv(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnKlDiv failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the result back and print it
    ret = CopyToHost<float>(outDeviceAddr, outShape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(self);
    aclDestroyTensor(target);
    aclDestroyTensor(out);
    aclrtFree(selfDeviceAddr);
    aclrtFree(targetDeviceAddr);
    aclrtFree(outDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
