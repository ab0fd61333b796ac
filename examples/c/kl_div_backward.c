/* aclnnKlDivBackward from plain C (C99): proves the headers are C. It includes every header of the
 * C ABI, runs CANN's sample flow for the KL divergence backward (reduction "sum", logTarget true)
 * and prints the inputs and the gradient, which tests/capi checks against PyTorch. */
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "aclnnop/aclnn_conv_tbc.h"
#include "aclnnop/aclnn_conv_tbc_backward.h"
#include "aclnnop/aclnn_cross_entropy_loss.h"
#include "aclnnop/aclnn_cross_entropy_loss_grad.h"
#include "aclnnop/aclnn_ctc_loss.h"
#include "aclnnop/aclnn_ctc_loss_backward.h"
#include "aclnnop/aclnn_kl_div.h"
#include "aclnnop/aclnn_kl_div_backward.h"
#include "aclnnop/aclnn_scaled_masked_softmax.h"
#include "aclnnop/aclnn_scaled_masked_softmax_backward.h"
#include "hccl/hccl.h"

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int ret_ = (int)(call);                                                              \
        if (ret_ != 0) {                                                                     \
            printf("%s failed. ERROR: %d\n  aclGetRecentErrMsg: %s\n", #call, ret_, aclGetRecentErrMsg()); \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

#define N 6

static aclTensor *upload(const float *host, int64_t *dims, uint64_t rank, void **dev)
{
    size_t bytes = sizeof(float);
    uint64_t i;
    for (i = 0; i < rank; i++) {
        bytes *= (size_t)dims[i];
    }
    if (aclrtMalloc(dev, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS ||
        aclrtMemcpy(*dev, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS) {
        return NULL;
    }
    return aclCreateTensor(dims, rank, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, rank, *dev);
}

int main(void)
{
    float gradOutputHost[1] = {1.5f};
    float selfHost[N] = {-1.2f, -0.4f, -2.1f, -0.7f, -0.3f, -1.5f};
    float targetHost[N] = {-1.0f, -0.2f, -2.5f, -0.9f, -0.1f, -1.1f}; /* log-probabilities: logTarget */
    float outHost[N] = {0};
    int64_t scalarDims[1] = {1}, dims[2] = {2, 3};
    void *gradOutputDev = NULL, *selfDev = NULL, *targetDev = NULL, *outDev = NULL, *workspace = NULL;
    aclrtStream stream = NULL;
    aclOpExecutor *executor = NULL;
    uint64_t workspaceSize = 0;
    aclTensor *gradOutput, *self, *target, *out;
    int i;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&stream));
    gradOutput = upload(gradOutputHost, scalarDims, 0, &gradOutputDev);
    self = upload(selfHost, dims, 2, &selfDev);
    target = upload(targetHost, dims, 2, &targetDev);
    out = upload(outHost, dims, 2, &outDev);
    if (gradOutput == NULL || self == NULL || target == NULL || out == NULL) {
        printf("creating the tensors failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    printf("input gradOutput [] : %.9g\ninput self [2,3] :", gradOutputHost[0]);
    for (i = 0; i < N; i++) printf(" %.9g", selfHost[i]);
    printf("\ninput target [2,3] :");
    for (i = 0; i < N; i++) printf(" %.9g", targetHost[i]);
    printf("\ninput reduction [] : 2\ninput logTarget [] : 1\n");

    CHECK(aclnnKlDivBackwardGetWorkspaceSize(gradOutput, self, target, 2, true, out, &workspaceSize, &executor));
    if (workspaceSize > 0) {
        CHECK(aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST));
    }
    CHECK(aclnnKlDivBackward(workspace, workspaceSize, executor, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(outHost, sizeof(outHost), outDev, sizeof(outHost), ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < N; i++) {
        printf("result[%d] is: %.9g\n", i, outHost[i]);
    }

    CHECK(aclDestroyTensor(gradOutput));
    CHECK(aclDestroyTensor(self));
    CHECK(aclDestroyTensor(target));
    CHECK(aclDestroyTensor(out));
    CHECK(aclrtFree(gradOutputDev));
    CHECK(aclrtFree(selfDev));
    CHECK(aclrtFree(targetDev));
    CHECK(aclrtFree(outDev));
    if (workspace != NULL) {
        CHECK(aclrtFree(workspace));
    }
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    return EXIT_SUCCESS;
}
