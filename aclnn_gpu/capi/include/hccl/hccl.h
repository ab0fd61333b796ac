/* aclnn_gpu: HCCL collectives (CANN's hccl/hccl.h subset). */
#ifndef ACLNN_GPU_HCCL_HCCL_H_
#define ACLNN_GPU_HCCL_HCCL_H_

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

#ifdef __cplusplus
}
#endif

#endif /* ACLNN_GPU_HCCL_HCCL_H_ */
