// aclnnCrossEntropyLoss: CANN's sample program flow in C++ (see kl_div.cpp for the steps).
// input (4, 5) logits, INT64 target with an ignored row (-100), weight (5), reduction "mean",
// labelSmoothing 0, no z-loss: lossOut 0-D and logProbOut (4, 5).
// The target's device buffer is allocated the way CANN's own CrossEntropyLossGrad sample allocates
// its target: sized from a float vector (4 bytes an element) although the tensor is INT64 (8 bytes).
// That runs on an NPU because aclrtMalloc rounds every size up to a multiple of 32 bytes and adds
// 32 (16 bytes asked, 64 usable, 32 read), and it runs here because aclrtMalloc keeps that rule.
#include "acl_sample.h"
#include "aclnnop/aclnn_cross_entropy_loss.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t N = 4, C = 5;
    std::vector<int64_t> inputShape = {N, C}, targetShape = {N}, weightShape = {C}, lossShape = {};
    std::vector<float> inputHostData = Uniform(N * C, -2.0f, 2.0f, 51);
    std::vector<int64_t> targetHostData = {1, 4, -100, 0};
    std::vector<float> targetSizing(N, 0.0f);  // what sizes the target's buffer (see above)
    std::vector<float> weightHostData = Uniform(C, 0.5f, 1.5f, 52);
    std::vector<float> lossHostData = {0.0f}, logProbHostData(N * C, 0.0f);
    char reduction[] = "mean";
    int64_t ignoreIndex = -100;
    double labelSmoothing = 0.0, lseSquareScaleForZloss = 0.0;
    bool returnZloss = false;
    PrintInput("input", inputShape, inputHostData);
    PrintInput("target", targetShape, targetHostData);
    PrintInput("weight", weightShape, weightHostData);
    LOG_PRINT("input ignoreIndex [] : %ld\n", static_cast<long>(ignoreIndex));

    void *inputDeviceAddr = nullptr, *targetDeviceAddr = nullptr, *weightDeviceAddr = nullptr;
    void *lossDeviceAddr = nullptr, *logProbDeviceAddr = nullptr;
    aclTensor *input = nullptr, *target = nullptr, *weight = nullptr, *loss = nullptr, *logProb = nullptr;
    ret = CreateAclTensor(inputHostData, inputShape, &inputDeviceAddr, aclDataType::ACL_FLOAT, &input);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = aclrtMalloc(&targetDeviceAddr, targetSizing.size() * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(targetDeviceAddr, N * sizeof(int64_t), targetHostData.data(), N * sizeof(int64_t),
                      ACL_MEMCPY_HOST_TO_DEVICE);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
    std::vector<int64_t> targetStrides = {1};
    target = aclCreateTensor(targetShape.data(), targetShape.size(), aclDataType::ACL_INT64, targetStrides.data(), 0,
                             ACL_FORMAT_ND, targetShape.data(), targetShape.size(), targetDeviceAddr);
    CHECK_RET(target != nullptr, LOG_PRINT("aclCreateTensor failed.\n"); return ACL_ERROR_BAD_ALLOC);
    ret = CreateAclTensor(weightHostData, weightShape, &weightDeviceAddr, aclDataType::ACL_FLOAT, &weight);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(lossHostData, lossShape, &lossDeviceAddr, aclDataType::ACL_FLOAT, &loss);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(logProbHostData, inputShape, &logProbDeviceAddr, aclDataType::ACL_FLOAT, &logProb);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3. first phase: the workspace size and the executor (no z-loss: its two outputs are null)
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnCrossEntropyLossGetWorkspaceSize(input, target, weight, reduction, ignoreIndex, labelSmoothing,
                                                lseSquareScaleForZloss, returnZloss, loss, logProb, nullptr, nullptr,
                                                &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnCrossEntropyLossGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnCrossEntropyLoss(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnCrossEntropyLoss failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the results back and print them
    ret = CopyToHost<float>(lossDeviceAddr, lossShape, "loss");
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CopyToHost<float>(logProbDeviceAddr, inputShape, "logProb");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(input);
    aclDestroyTensor(target);
    aclDestroyTensor(weight);
    aclDestroyTensor(loss);
    aclDestroyTensor(logProb);
    aclrtFree(inputDeviceAddr);
    aclrtFree(targetDeviceAddr);
    aclrtFree(weightDeviceAddr);
    aclrtFree(lossDeviceAddr);
    aclrtFree(logProbDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
