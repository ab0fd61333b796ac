/* The HCCL declarations whose C arguments need hand-written conversions (capi/custom.py), in a
 * one-rank world: a configured communicator and its name, a sub-communicator (comm by pointer),
 * HcclCommInitAll's array of comms, the V collectives' per-rank count arrays, HcclBatchSendRecv's
 * items (one rank cannot send to itself: refused, naming the item). Prints "hccl more ok". */
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "hccl/hccl.h"

#define OK(call) do { int r_ = (int)(call); if (r_ != 0) { printf("%s: %d %s\n", #call, r_, aclGetRecentErrMsg()); return 1; } } while (0)
#define EXPECT(cond) do { if (!(cond)) { printf("FAILED %s [%s]\n", #cond, aclGetRecentErrMsg()); return 1; } } while (0)

static int equal(const void *device, const float *want, int n)
{
    float back[8] = {0};
    int i;
    if (aclrtMemcpy(back, sizeof(back), device, (size_t)n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST) != 0)
        return 0;
    for (i = 0; i < n; i++) {
        if (back[i] != want[i])
            return 0;
    }
    return 1;
}

int main(void)
{
    HcclRootInfo root;
    HcclCommConfig config;
    HcclComm comm = NULL, sub = NULL, all[1] = {NULL};
    HcclSendRecvItem item;
    aclrtStream stream = NULL;
    char name[COMM_NAME_MAX_LENGTH];
    uint32_t ids[1] = {0}, size = 0;
    int32_t devices[1] = {0};
    uint64_t counts[1] = {3}, displs[1] = {1};
    float host[4] = {1, 2, 3, 4}, shifted[4] = {0, 1, 2, 3};
    void *send = NULL, *recv = NULL;

    OK(aclInit(NULL));
    OK(aclrtSetDevice(0));
    OK(aclrtCreateStream(&stream));
    OK(aclrtMalloc(&send, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMalloc(&recv, 16, ACL_MEM_MALLOC_HUGE_FIRST));
    OK(aclrtMemcpy(send, 16, host, 16, ACL_MEMCPY_HOST_TO_DEVICE));

    HcclCommConfigInit(&config);
    strcpy(config.hcclCommName, "c_named");
    OK(HcclGetRootInfo(&root));
    OK(HcclCommInitRootInfoConfig(1, &root, 0, &config, &comm));
    OK(HcclGetCommName(comm, name));
    EXPECT(strcmp(name, "c_named") == 0);
    config.hcclDeterministic = 7;
    EXPECT(HcclCommInitRootInfoConfig(1, &root, 0, &config, &sub) == HCCL_E_PARA && strstr(aclGetRecentErrMsg(), "hcclDeterministic"));
    HcclCommConfigInit(&config);

    /* the V collectives: one rank, its block of 3 elements at displacement 1 */
    OK(aclrtMemset(recv, 16, 0, 16));
    OK(HcclAllGatherV(send, 3, recv, counts, displs, HCCL_DATA_TYPE_FP32, comm, stream));
    OK(aclrtSynchronizeStream(stream));
    EXPECT(equal(recv, shifted, 4));
    OK(HcclReduceScatterV(recv, counts, displs, send, 3, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    OK(aclrtSynchronizeStream(stream));
    EXPECT(equal(send, host, 3));
    OK(aclrtMemset(recv, 16, 0, 16));
    OK(HcclAlltoAllV(send, counts, displs, HCCL_DATA_TYPE_FP32, recv, counts, displs, HCCL_DATA_TYPE_FP32, comm, stream));
    OK(aclrtSynchronizeStream(stream));
    {
        float want[4] = {0, 2, 3, 4};   /* elements 1..3 of send land at 1..3 of recv */
        EXPECT(equal(recv, want, 4));
    }
    EXPECT(HcclAllGatherV(send, 3, recv, NULL, displs, HCCL_DATA_TYPE_FP32, comm, stream) == HCCL_E_PTR);

    /* batch send / recv: the items reach Python intact (a send to oneself is refused, naming it) */
    item.sendRecvType = HCCL_SEND;
    item.buf = send;
    item.count = 2;
    item.dataType = HCCL_DATA_TYPE_FP32;
    item.remoteRank = 0;
    EXPECT(HcclBatchSendRecv(&item, 1, comm, stream) == HCCL_E_PARA);
    printf("batch: %s\n", aclGetRecentErrMsg());

    /* a sub-communicator of the one rank; the comm passed by pointer */
    OK(HcclCreateSubCommConfig(&comm, 1, ids, 5, 0, &config, &sub));
    OK(HcclGetRankSize(sub, &size));
    EXPECT(size == 1);
    OK(HcclGetCommName(sub, name));
    printf("sub name: %s\n", name);
    EXPECT(HcclCreateSubCommConfig(NULL, 1, ids, 6, 0, &config, &sub) == HCCL_E_PTR);
    OK(HcclCommDestroy(sub));
    OK(HcclCommDestroy(comm));

    /* CANN's one-process multi-device init, one device */
    OK(HcclCommInitAll(1, devices, all));
    EXPECT(all[0] != NULL);
    OK(HcclGetRankSize(all[0], &size));
    EXPECT(size == 1);
    OK(HcclCommDestroy(all[0]));
    EXPECT(HcclCommInitAll(1, devices, NULL) == HCCL_E_PTR);
    EXPECT(HcclGetCommConfigCapability() == 4);
    OK(aclrtFree(send));
    OK(aclrtFree(recv));
    OK(aclrtDestroyStream(stream));
    OK(aclFinalize());
    printf("hccl more ok\n");
    return 0;
}
