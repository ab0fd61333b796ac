// aclnnCtcLoss: CANN's sample program flow in C++ (see kl_div.cpp for the steps).
// logProbs (T=12, N=4, C=5) = log_softmax of random logits, INT64 targets (4, 5) padded, lengths as
// aclIntArray, blank 0: negLogLikelihood (N) and logAlpha in the layout of Atlas A2/A3, where CANN
// pads logAlpha's last dimension 2*maxL+1 = 11 up to a multiple of 8 (16); the padding is never
// read, and the first 11 columns are the alignment's log-probabilities.
#include <cmath>

#include "acl_sample.h"
#include "aclnnop/aclnn_ctc_loss.h"

int main()
{
    // 1. (Init) device and stream
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == 0, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // 2. construct the inputs and outputs
    const int64_t T = 12, N = 4, C = 5, maxL = 5, blank = 0;
    const int64_t alphaWidth = (2 * maxL + 1 + 7) / 8 * 8;  // Atlas A2/A3: 2*maxL+1 rounded up to 8
    std::vector<int64_t> logProbsShape = {T, N, C}, targetsShape = {N, maxL}, nllShape = {N};
    std::vector<int64_t> logAlphaShape = {N, T, alphaWidth};
    std::vector<float> logProbsHostData = Uniform(T * N * C, -2.0f, 2.0f, 61);
    for (int64_t r = 0; r < T * N; r++) {  // log_softmax over the classes
        double sum = 0.0;
        for (int64_t c = 0; c < C; c++) sum += std::exp(static_cast<double>(logProbsHostData[r * C + c]));
        for (int64_t c = 0; c < C; c++) logProbsHostData[r * C + c] -= static_cast<float>(std::log(sum));
    }
    std::vector<int64_t> targetsHostData = {2, 1, 3, 3, 4, 4, 2, 0, 0, 0, 1, 0, 0, 0, 0, 3, 1, 2, 4, 1};
    std::vector<int64_t> inputLengthsData = {12, 11, 7, 12}, targetLengthsData = {5, 2, 1, 5};
    std::vector<float> nllHostData(N, 0.0f), logAlphaHostData(N * T * alphaWidth, 0.0f);
    bool zeroInfinity = false;
    PrintInput("logProbs", logProbsShape, logProbsHostData);
    PrintInput("targets", targetsShape, targetsHostData);
    PrintInput("inputLengths", {N}, inputLengthsData);
    PrintInput("targetLengths", {N}, targetLengthsData);
    LOG_PRINT("input blank [] : %ld\n", static_cast<long>(blank));

    void *logProbsDeviceAddr = nullptr, *targetsDeviceAddr = nullptr, *nllDeviceAddr = nullptr;
    void *logAlphaDeviceAddr = nullptr;
    aclTensor *logProbs = nullptr, *targets = nullptr, *negLogLikelihood = nullptr, *logAlpha = nullptr;
    ret = CreateAclTensor(logProbsHostData, logProbsShape, &logProbsDeviceAddr, aclDataType::ACL_FLOAT, &logProbs);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(targetsHostData, targetsShape, &targetsDeviceAddr, aclDataType::ACL_INT64, &targets);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(nllHostData, nllShape, &nllDeviceAddr, aclDataType::ACL_FLOAT, &negLogLikelihood);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CreateAclTensor(logAlphaHostData, logAlphaShape, &logAlphaDeviceAddr, aclDataType::ACL_FLOAT, &logAlpha);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    aclIntArray *inputLengths = aclCreateIntArray(inputLengthsData.data(), inputLengthsData.size());
    CHECK_RET(inputLengths != nullptr, return ACL_ERROR_BAD_ALLOC);
    aclIntArray *targetLengths = aclCreateIntArray(targetLengthsData.data(), targetLengthsData.size());
    CHECK_RET(targetLengths != nullptr, return ACL_ERROR_BAD_ALLOC);

    // 3. first phase: the workspace size and the executor
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor;
    ret = aclnnCtcLossGetWorkspaceSize(logProbs, targets, inputLengths, targetLengths, blank, zeroInfinity,
                                       negLogLikelihood, logAlpha, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnCtcLossGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspaceAddr = nullptr;
    ret = MallocWorkspace(workspaceSize, &workspaceAddr);
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 4. second phase: run on the stream
    ret = aclnnCtcLoss(workspaceAddr, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnCtcLoss failed. ERROR: %d\n", ret); return ret);

    // 5. wait for the stream
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // 6. copy the results back and print them
    ret = CopyToHost<float>(nllDeviceAddr, nllShape, "negLogLikelihood");
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    ret = CopyToHost<float>(logAlphaDeviceAddr, logAlphaShape, "logAlpha");
    CHECK_RET(ret == ACL_SUCCESS, return ret);

    // 7. destroy the descriptors, free the device memory, release the device
    aclDestroyTensor(logProbs);
    aclDestroyTensor(targets);
    aclDestroyTensor(negLogLikelihood);
    aclDestroyTensor(logAlpha);
    aclDestroyIntArray(inputLengths);
    aclDestroyIntArray(targetLengths);
    aclrtFree(logProbsDeviceAddr);
    aclrtFree(targetsDeviceAddr);
    aclrtFree(nllDeviceAddr);
    aclrtFree(logAlphaDeviceAddr);
    if (workspaceSize > 0) {
        aclrtFree(workspaceAddr);
    }
    Finalize(deviceId, stream);
    return 0;
}
