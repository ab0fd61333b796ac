/* aclnn_gpu: HCCL collectives (CANN's hccl/hccl.h subset). */
#ifndef ACLNN_GPU_HCCL_HCCL_H_
#define ACLNN_GPU_HCCL_HCCL_H_

#include <string.h>

#include "hccl_types.h"
#include "../acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
ACL_FUNC_VISIBILITY HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                                    HcclComm *comm);
ACL_FUNC_VISIBILITY HcclResult HcclCommInitClusterInfo(const char *clusterInfo, uint32_t rank, HcclComm *comm);
ACL_FUNC_VISIBILITY HcclResult HcclCommDestroy(HcclComm comm);
ACL_FUNC_VISIBILITY HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
ACL_FUNC_VISIBILITY HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
ACL_FUNC_VISIBILITY HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                                             HcclReduceOp op, HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
                                             HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType,
                                             HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
                                                 HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                                 aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                                        HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                                        HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                                          HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                                           uint32_t root, HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
                                            const void *recvBuf, uint64_t recvCount, HcclDataType recvType,
                                            HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError);

/* configured and multi-device communicators; commName holds COMM_NAME_MAX_LENGTH bytes */
ACL_FUNC_VISIBILITY HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                                          const HcclCommConfig *config, HcclComm *comm);
ACL_FUNC_VISIBILITY HcclResult HcclCommInitClusterInfoConfig(const char *clusterInfo, uint32_t rank,
                                                             HcclCommConfig *config, HcclComm *comm);
ACL_FUNC_VISIBILITY HcclResult HcclCreateSubCommConfig(HcclComm *comm, uint32_t rankNum, uint32_t *rankIds,
                                                       uint64_t subCommId, uint32_t subCommRankId,
                                                       HcclCommConfig *config, HcclComm *subComm);
ACL_FUNC_VISIBILITY HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms);
ACL_FUNC_VISIBILITY HcclResult HcclGetCommName(HcclComm comm, char *commName);
ACL_FUNC_VISIBILITY const char *HcclGetErrorString(HcclResult code);
ACL_FUNC_VISIBILITY uint32_t HcclGetCommConfigCapability(void);

/* the V collectives: sendCounts, sendDispls, recvCounts, recvDispls, sdispls, rdispls are host arrays
   of one uint64_t per rank */
ACL_FUNC_VISIBILITY HcclResult HcclReduceScatterV(void *sendBuf, const void *sendCounts, const void *sendDispls,
                                                  void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                                                  HcclReduceOp op, HcclComm comm, aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf, const void *recvCounts,
                                              const void *recvDispls, HcclDataType dataType, HcclComm comm,
                                              aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclAlltoAllV(const void *sendBuf, const void *sendCounts, const void *sdispls,
                                             HcclDataType sendType, const void *recvBuf, const void *recvCounts,
                                             const void *rdispls, HcclDataType recvType, HcclComm comm,
                                             aclrtStream stream);
ACL_FUNC_VISIBILITY HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum, HcclComm comm,
                                                 aclrtStream stream);

/* HCCL's defaults into *config (a null config is ignored), as CANN's inline function */
static inline void HcclCommConfigInit(HcclCommConfig *config)
{
    struct HcclCommConfigInfo {
        size_t size;
        uint32_t magicWord;
        uint32_t version;
        uint64_t reserved;
    } info;
    if (config == NULL) {
        return;
    }
    info.size = sizeof(HcclCommConfig);
    info.magicWord = HCCL_COMM_CONFIG_MAGIC_WORD;
    info.version = HCCL_COMM_CONFIG_VERSION;
    info.reserved = 0;
    memcpy(config->reserved, &info, sizeof(info));
    config->hcclBufferSize = HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET;
    config->hcclDeterministic = HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET;
    config->hcclCommName[0] = '\0';
    config->hcclUdi[0] = '\0';
    config->hcclOpExpansionMode = HCCL_COMM_DEFAULT_OP_EXPANSION_MODE;
    config->hcclRdmaTrafficClass = HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET;
    config->hcclRdmaServiceLevel = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET;
}

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_HCCL_HCCL_H_ */
