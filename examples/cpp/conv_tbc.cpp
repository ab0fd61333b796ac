// aclnnConvTbc: CANN's sample program flow in C++ (see kl_div.cpp for the steps).
// self (T=5, B=2, Cin=3), weight (K=2, Cin, Cout=4), bias (Cout), pad 1: out (Tout=6, B, Cout);
// cubeMathType 0 (KEEP_DTYPE: fp32 products on every device, TF32 excluded).
#include "acl_sample.h"
#include "aclnnop/aclnn_convolution.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t T = 5, B = 2, Cin = 3, Cout = 4, K = 2, pad = 1, Tout = T + 2 * pad - K + 1;
    std::vector<int64_t> selfShape = {T, B, Cin}, weightShape = {K, Cin, Cout}, biasShape = {Cout};
    std::vector<int64_t> outShape = {Tout, B, Cout};
    std::vector<float> selfHostData = Uniform(T * B * Cin, -1.0f, 1.0f, 41);
    std::vector<float> weightHostData = Uniform(K * Cin * Cout, -1.0f, 1.0f, 42);
    std::vector<float> biasHostData = Uniform(Cout, -1.0f, 1.0f, 43);
    std::vector<float> outHostData(Tout * B * Cout, 0.0f);
    int8_t cubeMathType = 0;
    PrintInput("input", selfShape, selfHostData);
    PrintInput("weight", weightShape, weightHostData);
    PrintInput("bias", biasShape, biasHostData);
    LOG_PRINT("input pad [] : %ld\n", static_cast<long>(pad));

    void *selfDeviceAddr = nullptr, *weightDeviceAddr = nullptr, *biasDeviceAddr = nullptr;
    void *outDeviceAddr = nullptr;
    aclTensor *self = nullptr, *weight = nullptr, *bias = nullptr, *out = nullptr;
    ret = CreateAclTensor(selfHostData, selfShape, &selfDeviceAddr, aclDataType::ACL_FLOAT, &self);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(weightHostData, weightShape, &weightDeviceAddr, aclDataType::ACL_FLOAT, &weight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(biasHostData, biasShape, &biasDeviceAddr, aclDataType::ACL_FLOAT, &bias);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(outHostData, outShape, &outDeviceAddr, aclDataType::ACL_FLOAT, &out);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnConvTbcGetWorkspaceSize(self, weight, bias, pad, out, cubeMathType, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvTbcGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnConvTbc(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvTbc failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the result back and print it
    ret = CopyToHost<float>(outDeviceAddr, outShape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(self);
    aclDestroyTensor(weight);
    aclDestroyTensor(bias);
    aclDestroyTensor(out);
    aclrtFree(selfDeviceAddr);
    aclrtFree(weightDeviceAddr);
    aclrtFree(biasDeviceAddr);
    aclrtFree(outDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
