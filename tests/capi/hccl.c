/* HCCL through the C ABI, a one-rank world: root info, communicator, rank queries, an all-reduce on
 * device memory, destroy, then the destroyed communicator refused. Prints "hccl ok" or the failure. */
#include <stdio.h>

#include "acl/acl.h"
#include "hccl/hccl.h"

#define OK(call) do { int r_ = (int)(call); if (r_ != 0) { printf("%s: %d %s\n", #call, r_, aclGetRecentErrMsg()); return 1; } } while (0)

int main(void)
{
    HcclRootInfo root;
    HcclComm comm = NULL;
    aclrtStream stream = NULL;
    uint32_t size = 0, rank = 7;
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    void *send = NULL, *recv = NULL;
    int i;
    OK(aclInit(NULL));
    OK(aclrtSetDevice(0));
    OK(aclrtCreateStream(&stream));
    OK(HcclGetRootInfo(&root));
    OK(HcclCommInitRootInfo(1, &root, 0, &comm));
    OK(HcclGetRankSize(comm, &size));
    OK(HcclGetRankId(comm, &rank));
    OK(aclrtMalloc(&send, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMalloc(&recv, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMemcpy(send, 16, host, 16, ACL_MEMCPY_HOST_TO_DEVICE));
    OK(HcclAllReduce(send, recv, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    OK(aclrtSynchronizeStream(stream));
    OK(aclrtMemcpy(back, 16, recv, 16, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < 4; i++) {
        if (back[i] != host[i]) { printf("all-reduce of one rank: %g != %g\n", back[i], host[i]); return 1; }
    }
    OK(HcclCommDestroy(comm));
    i = HcclGetRankSize(comm, &size);
    printf("destroyed comm -> %d %s\n", i, aclGetRecentErrMsg());
    if (i == HCCL_SUCCESS) return 1;
    i = HcclGetRankSize(NULL, NULL);
    printf("null out -> %d\n", i);
    if (i != HCCL_E_PTR) return 1;
    printf("size %u rank %u\nhccl ok\n", size, rank);
    return 0;
}
