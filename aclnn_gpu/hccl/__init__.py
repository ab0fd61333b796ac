"""HCCL (Huawei's collective communication library, `hccl.h`) on established engines: PyTorch's
gloo backend on the cpu and emulated devices, NCCL through CuPy on cuda.

Layer 13 of docs/DESIGN.md, "Import layers" (collectives): above the runtime and the graphs, below
functional.

Modules: `types` (the enums and structs), `bootstrap` (root info, timeouts, the TCP store's
server and clients), `addresses` (where a rank listens and binds), `rank_table` (the rank-table
file), `rendezvous` (the cross-rank agreement over the store), `liveness` (heartbeats: dead peers
found in bounded time), `comm` (the communicator), `api` (communicator entry points),
`collectives` (the collectives and point-to-point calls), `gloo` and `nccl` (the two engines: the
only code that differs between devices).
"""
from __future__ import annotations

from .api import (
    HcclCommConfigInit,
    HcclCommDestroy,
    HcclCommInitAll,
    HcclCommInitClusterInfo,
    HcclCommInitClusterInfoConfig,
    HcclCommInitRootInfo,
    HcclCommInitRootInfoConfig,
    HcclCreateSubCommConfig,
    HcclGetCommAsyncError,
    HcclGetCommConfigCapability,
    HcclGetCommName,
    HcclGetErrorString,
    HcclGetRankId,
    HcclGetRankSize,
    HcclGetRootInfo,
)
from .collectives import (
    HcclAllGather,
    HcclAllGatherV,
    HcclAllReduce,
    HcclAlltoAll,
    HcclAlltoAllV,
    HcclBarrier,
    HcclBatchSendRecv,
    HcclBroadcast,
    HcclRecv,
    HcclReduce,
    HcclReduceScatter,
    HcclReduceScatterV,
    HcclScatter,
    HcclSend,
)
from .comm import HcclComm
from .types import *  # noqa: F401,F403 - the enums and their members as constants, the structs
from .types import __all__ as _types_all

__all__ = ["HcclAllGather", "HcclAllGatherV", "HcclAllReduce", "HcclAlltoAll", "HcclAlltoAllV", "HcclBarrier",
           "HcclBatchSendRecv", "HcclBroadcast", "HcclComm", "HcclCommConfigInit", "HcclCommDestroy", "HcclCommInitAll",
           "HcclCommInitClusterInfo", "HcclCommInitClusterInfoConfig", "HcclCommInitRootInfo",
           "HcclCommInitRootInfoConfig", "HcclCreateSubCommConfig", "HcclGetCommAsyncError",
           "HcclGetCommConfigCapability", "HcclGetCommName",
           "HcclGetErrorString", "HcclGetRankId", "HcclGetRankSize", "HcclGetRootInfo", "HcclRecv", "HcclReduce",
           "HcclReduceScatter", "HcclReduceScatterV", "HcclScatter", "HcclSend"] + [name for name in _types_all]
