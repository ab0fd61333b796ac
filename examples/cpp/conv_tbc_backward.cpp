// aclnnConvTbcBackward: CANN's sample program flow in C++ (see kl_div_backward.cpp for the steps).
// input (T=5, B=2, Cin=3), weight (K=2, Cin, Cout=4), bias (Cout), pad 1, so self (the gradient of
// the output) is (Tout=6, B, Cout); cubeMathType 0 (KEEP_DTYPE: true fp32 products; the docs' sample
// passes 1, ALLOW_FP32_DOWN_PRECISION, which lets a GPU use TF32).
#include <cmath>

#include "acl_sample.h"
#include "aclnnop/aclnn_convolution_backward.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t T = 5, B = 2, Cin = 3, Cout = 4, K = 2, pad = 1, Tout = T + 2 * pad - K + 1;
    std::vector<int64_t> selfShape = {Tout, B, Cout}, inputShape = {T, B, Cin}, weightShape = {K, Cin, Cout};
    std::vector<int64_t> biasShape = {Cout};
    std::vector<float> selfHostData = Uniform(Tout * B * Cout, -1.0f, 1.0f, 4);
    std::vector<float> inputHostData = Uniform(T * B * Cin, -1.0f, 1.0f, 5);
    std::vector<float> weightHostData = Uniform(K * Cin * Cout, -1.0f, 1.0f, 6);
    std::vector<float> biasHostData = Uniform(Cout, -1.0f, 1.0f, 7);
    std::vector<float> gradInputHostData(T * B * Cin, 0.0f), gradWeightHostData(K * Cin * Cout, 0.0f);
    std::vector<float> gradBiasHostData(Cout, 0.0f);
    int8_t cubeMathType = 0;
    PrintInput("self", selfShape, selfHostData);
    PrintInput("input", inputShape, inputHostData);
    PrintInput("weight", weightShape, weightHostData);
    PrintInput("bias", biasShape, biasHostData);
    LOG_PRINT("input pad [] : %ld\n", static_cast<long>(pad));

    void *selfDeviceAddr = nullptr, *inputDeviceAddr = nullptr, *weightDeviceAddr = nullptr;
    void *biasDeviceAddr = nullptr, *gradInputDeviceAddr = nullptr, *gradWeightDeviceAddr = nullptr;
    void *gradBiasDeviceAddr = nullptr;
    aclTensor *self = nullptr, *input = nullptr, *weight = nullptr, *bias = nullptr;
    aclTensor *gradInput = nullptr, *gradWeight = nullptr, *gradBias = nullptr;
    ret = CreateAclTensor(selfHostData, selfShape, &selfDeviceAddr, aclDataType::ACL_FLOAT, &self);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(inputHostData, inputShape, &inputDeviceAddr, aclDataType::ACL_FLOAT, &input);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(weightHostData, weightShape, &weightDeviceAddr, aclDataType::ACL_FLOAT, &weight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(biasHostData, biasShape, &biasDeviceAddr, aclDataType::ACL_FLOAT, &bias);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(gradInputHostData, inputShape, &gradInputDeviceAddr, aclDataType::ACL_FLOAT, &gradInput);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(gradWeightHostData, weightShape, &gradWeightDeviceAddr, aclDataType::ACL_FLOAT, &gradWeight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(gradBiasHostData, biasShape, &gradBiasDeviceAddr, aclDataType::ACL_FLOAT, &gradBias);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnConvTbcBackwardGetWorkspaceSize(self, input, weight, bias, pad, cubeMathType, gradInput, gradWeight,
                                               gradBias, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvTbcBackwardGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnConvTbcBackward(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvTbcBackward failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the results back and print them
    ret = CopyToHost<float>(gradInputDeviceAddr, inputShape, "gradInput");
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CopyToHost<float>(gradWeightDeviceAddr, weightShape, "gradWeight");
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CopyToHost<float>(gradBiasDeviceAddr, biasShape, "gradBias");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    for (aclTensor *t : {self, input, weight, bias, gradInput, gradWeight, gradBias}) {
        aclDestroyTensor(t);
    }
    for (void *addr : {selfDeviceAddr, inputDeviceAddr, weightDeviceAddr, biasDeviceAddr, gradInputDeviceAddr,
                       gradWeightDeviceAddr, gradBiasDeviceAddr}) {
        aclrtFree(addr);
    }
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
