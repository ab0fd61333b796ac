// aclnnCrossEntropyLossGrad: CANN's sample program flow in C++ (see kl_div_backward.cpp for the steps).
// gradLoss 0-D, logProb (4, 5) = log_softmax of random logits, INT64 target with an ignored row (-100),
// weight (5), reduction "mean", no label smoothing, no zloss.
#include <cmath>

#include "acl_sample.h"
#include "aclnnop/aclnn_cross_entropy_loss_grad.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t N = 4, C = 5;
    std::vector<int64_t> gradLossShape = {}, logProbShape = {N, C}, targetShape = {N}, weightShape = {C};
    std::vector<int64_t> outShape = {N, C};
    std::vector<float> gradLossHostData = {1.0f};
    std::vector<float> logProbHostData = Uniform(N * C, -2.0f, 2.0f, 3);
    for (int64_t n = 0; n < N; n++) {  // log_softmax of the random logits, row by row
        double sum = 0.0;
        for (int64_t c = 0; c < C; c++) sum += std::exp(static_cast<double>(logProbHostData[n * C + c]));
        for (int64_t c = 0; c < C; c++) logProbHostData[n * C + c] -= static_cast<float>(std::log(sum));
    }
    std::vector<int64_t> targetHostData = {1, 4, -100, 0};
    std::vector<float> weightHostData = {0.5f, 1.0f, 2.0f, 1.5f, 0.25f};
    std::vector<float> outHostData(N * C, 0.0f);
    char reductionOptional[] = "mean";
    int64_t ignoreIndex = -100;
    double labelSmoothing = 0.0;
    double lseSquareScaleForZloss = 0.0;
    PrintInput("gradLoss", gradLossShape, gradLossHostData);
    PrintInput("logProb", logProbShape, logProbHostData);
    PrintInput("target", targetShape, targetHostData);
    PrintInput("weight", weightShape, weightHostData);
    LOG_PRINT("input ignoreIndex [] : %ld\n", static_cast<long>(ignoreIndex));

    void *gradLossDeviceAddr = nullptr, *logProbDeviceAddr = nullptr, *targetDeviceAddr = nullptr;
    void *weightDeviceAddr = nullptr, *outDeviceAddr = nullptr;
    aclTensor *gradLoss = nullptr, *logProb = nullptr, *target = nullptr, *weight = nullptr, *out = nullptr;
    ret = CreateAclTensor(gradLossHostData, gradLossShape, &gradLossDeviceAddr, aclDataType::ACL_FLOAT, &gradLoss);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(logProbHostData, logProbShape, &logProbDeviceAddr, aclDataType::ACL_FLOAT, &logProb);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetHostData, targetShape, &targetDeviceAddr, aclDataType::ACL_INT64, &target);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(weightHostData, weightShape, &weightDeviceAddr, aclDataType::ACL_FLOAT, &weight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(outHostData, outShape, &outDeviceAddr, aclDataType::ACL_FLOAT, &out);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnCrossEntropyLossGradGetWorkspaceSize(gradLoss, logProb, target, weight, nullptr, nullptr,
                                                    reductionOptional, ignoreIndex, labelSmoothing,
                                                    lseSquareScaleForZloss, out, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnCrossEntropyLossGradGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnCrossEntropyLossGrad(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnCrossEntropyLossGrad failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the result back and print it
    ret = CopyToHost<float>(outDeviceAddr, outShape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(gradLoss);
    aclDestroyTensor(logProb);
    aclDestroyTensor(target);
    aclDestroyTensor(weight);
    aclDestroyTensor(out);
    aclrtFree(gradLossDeviceAddr);
    aclrtFree(logProbDeviceAddr);
    aclrtFree(targetDeviceAddr);
    aclrtFree(weightDeviceAddr);
    aclrtFree(outDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
