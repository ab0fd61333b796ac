/* HCCL calls beyond the core through the C ABI, a one-rank world: HcclReduce, HcclScatter,
 * HcclAlltoAll, HcclGetCommAsyncError, and a count of 0 with null buffers. Prints "hccl more ok". */
#include <stdio.h>

#include "acl/acl.h"
#include "hccl/hccl.h"

#define OK(call) do { int r_ = (int)(call); if (r_ != 0) { printf("%s: %d %s\n", #call, r_, aclGetRecentErrMsg()); return 1; } } while (0)

int main(void)
{
    HcclRootInfo root;
    HcclComm comm = NULL;
    aclrtStream stream = NULL;
    HcclResult async = HCCL_E_INTERNAL;
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    void *send = NULL, *recv = NULL;
    int i, step;
    OK(aclInit(NULL));
    OK(aclrtSetDevice(0));
    OK(aclrtCreateStream(&stream));
    OK(HcclGetRootInfo(&root));
    OK(HcclCommInitRootInfo(1, &root, 0, &comm));
    OK(aclrtMalloc(&send, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMalloc(&recv, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMemcpy(send, 16, host, 16, ACL_MEMCPY_HOST_TO_DEVICE));
    for (step = 0; step < 3; step++) {
        OK(aclrtMemset(recv, 16, 0, 16));
        if (step == 0) OK(HcclReduce(send, recv, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, 0, comm, stream));
        if (step == 1) OK(HcclScatter(send, recv, 4, HCCL_DATA_TYPE_FP32, 0, comm, stream));
        if (step == 2) OK(HcclAlltoAll(send, 4, HCCL_DATA_TYPE_FP32, recv, 4, HCCL_DATA_TYPE_FP32, comm, stream));
        OK(aclrtSynchronizeStream(stream));
        OK(aclrtMemcpy(back, 16, recv, 16, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < 4; i++) {
            if (back[i] != host[i]) { printf("step %d: %g != %g\n", step, back[i], host[i]); return 1; }
        }
    }
    OK(HcclReduce(NULL, NULL, 0, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, 0, comm, stream));
    i = HcclAlltoAll(send, 4, HCCL_DATA_TYPE_FP32, recv, 2, HCCL_DATA_TYPE_FP32, comm, stream);
    printf("counts differ -> %d %s\n", i, aclGetRecentErrMsg());
    if (i != HCCL_E_PARA) return 1;
    OK(HcclGetCommAsyncError(comm, &async));
    if (async != HCCL_SUCCESS) { printf("async error %d\n", (int)async); return 1; }
    OK(HcclCommDestroy(comm));
    printf("hccl more ok\n");
    return 0;
}
