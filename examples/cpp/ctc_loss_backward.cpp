// aclnnCtcLossBackward: CANN's sample program flow in C++ (see kl_div_backward.cpp for the steps).
// logProbs (T=12, N=4, C=5) = log_softmax of random logits, INT64 targets (4, 5) padded, lengths as
// aclIntArray, blank 0. The forward aclnnCtcLoss runs first (same flow) for negLogLikelihood and
// logAlpha (N, T, 2*5+1), which the backward takes; gradOut (N).
#include <cmath>

#include "acl_sample.h"
#include "aclnnop/aclnn_ctc_loss_backward.h"

#include "aclnnop/aclnn_ctc_loss.h"

// Phase 2 of either operator, then the stream synchronisation: the sample's steps 3-5.
template <typename Execute>
static int RunOp(const char *name, aclnnStatus phase1, uint64_t workspaceSize, aclOpExecutor *executor,
                 Execute execute, aclrtStream stream, void **workspaceAddr)
{
    CHECK_RET(phase1 == ACL_SUCCESS, LOG_PRINT("%sGetWorkspaceSize failed. ERROR: %d\n", name, phase1); return phase1);
    auto ret = MallocWorkspace(workspaceSize, workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = execute(*workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("%s failed. ERROR: %d\n", name, ret); return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
    return 0;
}

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t T = 12, N = 4, C = 5, maxL = 5, X = 2 * maxL + 1, blank = 0;
    std::vector<int64_t> logProbsShape = {T, N, C}, targetsShape = {N, maxL}, nllShape = {N};
    std::vector<int64_t> logAlphaShape = {N, T, X}, gradOutShape = {N};
    std::vector<float> logProbsHostData = Uniform(T * N * C, -2.0f, 2.0f, 11);
    for (int64_t r = 0; r < T * N; r++) {  // log_softmax over the classes
        double sum = 0.0;
        for (int64_t c = 0; c < C; c++) sum += std::exp(static_cast<double>(logProbsHostData[r * C + c]));
        for (int64_t c = 0; c < C; c++) logProbsHostData[r * C + c] -= static_cast<float>(std::log(sum));
    }
    std::vector<int64_t> targetsHostData = {1, 2, 2, 3, 4, 3, 1, 4, 0, 0, 2, 2, 0, 0, 0, 4, 3, 2, 1, 1};
    std::vector<int64_t> inputLengthsData = {12, 10, 9, 12}, targetLengthsData = {5, 3, 2, 5};
    std::vector<float> gradOutHostData = {1.0f, 0.5f, 2.0f, 1.0f};
    std::vector<float> nllHostData(N, 0.0f), logAlphaHostData(N * T * X, 0.0f), outHostData(T * N * C, 0.0f);
    bool zeroInfinity = false;
    PrintInput("logProbs", logProbsShape, logProbsHostData);
    PrintInput("targets", targetsShape, targetsHostData);
    PrintInput("inputLengths", {N}, inputLengthsData);
    PrintInput("targetLengths", {N}, targetLengthsData);
    PrintInput("gradOut", gradOutShape, gradOutHostData);
    LOG_PRINT("input blank [] : %ld\n", static_cast<long>(blank));

    void *logProbsDeviceAddr = nullptr, *targetsDeviceAddr = nullptr, *nllDeviceAddr = nullptr;
    void *logAlphaDeviceAddr = nullptr, *gradOutDeviceAddr = nullptr, *outDeviceAddr = nullptr;
    aclTensor *logProbs = nullptr, *targets = nullptr, *negLogLikelihood = nullptr, *logAlpha = nullptr;
    aclTensor *gradOut = nullptr, *out = nullptr;
    ret = CreateAclTensor(logProbsHostData, logProbsShape, &logProbsDeviceAddr, aclDataType::ACL_FLOAT, &logProbs);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetsHostData, targetsShape, &targetsDeviceAddr, aclDataType::ACL_INT64, &targets);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(nllHostData, nllShape, &nllDeviceAddr, aclDataType::ACL_FLOAT, &negLogLikelihood);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(logAlphaHostData, logAlphaShape, &logAlphaDeviceAddr, aclDataType::ACL_FLOAT, &logAlpha);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(gradOutHostData, gradOutShape, &gradOutDeviceAddr, aclDataType::ACL_FLOAT, &gradOut);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(outHostData, logProbsShape, &outDeviceAddr, aclDataType::ACL_FLOAT, &out);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    aclIntArray *inputLengths = aclCreateIntArray(inputLengthsData.data(), inputLengthsData.size());
    CHECK_RET(inputLengths != nullptr, return ACL_ERROR_BAD_ALLOC);
    aclIntArray *targetLengths = aclCreateIntArray(targetLengthsData.data(), targetLengthsData.size());
    CHECK_RET(targetLengths != nullptr, return ACL_ERROR_BAD_ALLOC);

    // 3-5. the forward: negLogLikelihood and logAlpha
    uint64_t forwardWorkspaceSize = 0;
    aclOpExecutor *forwardExecutor;
    void *forwardWorkspaceAddr = nullptr;
    ret = aclnnCtcLossGetWorkspaceSize(logProbs, targets, inputLengths, targetLengths, blank, zeroInfinity,
                                       negLogLikelihood, logAlpha, &forwardWorkspaceSize, &forwardExecutor);
    ret = RunOp("aclnnCtcLoss", ret, forwardWorkspaceSize, forwardExecutor, aclnnCtcLoss, stream,
                &forwardWorkspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 3-5. the backward
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    void *workspaceAddr = nullptr;
    ret = aclnnCtcLossBackwardGetWorkspaceSize(gradOut, logProbs, targets, inputLengths, targetLengths,
                                               negLogLikelihood, logAlpha, blank, zeroInfinity, out, &workspaceSize,
                                               &executor);
    ret = RunOp("aclnnCtcLossBackward", ret, workspaceSize, executor, aclnnCtcLossBackward, stream, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 6. copy the results back and print them
    ret = CopyToHost<float>(nllDeviceAddr, nllShape, "negLogLikelihood");
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CopyToHost<float>(outDeviceAddr, logProbsShape, "result");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    for (aclTensor *t : {logProbs, targets, negLogLikelihood, logAlpha, gradOut, out}) {
        aclDestroyTensor(t);
    }
    aclDestroyIntArray(inputLengths);
    aclDestroyIntArray(targetLengths);
    for (void *addr : {logProbsDeviceAddr, targetsDeviceAddr, nllDeviceAddr, logAlphaDeviceAddr, gradOutDeviceAddr,
                       outDeviceAddr, forwardWorkspaceAddr, workspaceAddr}) {
        if (addr != nullptr) {
            aclrtFree(addr);
        }
    }
    Finalize(deviceId, stream);
    return 0;
}
