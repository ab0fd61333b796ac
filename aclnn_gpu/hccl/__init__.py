"""HCCL (Huawei's collective communication library, `hccl.h`) on established engines: PyTorch's
gloo backend on the cpu and emulated devices, NCCL through CuPy on cuda.

Modules: `types` (the enums), `bootstrap` (root info, rank table, timeouts, the cross-rank
agreement over a TCP store), `comm` (the communicator), `api` (the entry points), `gloo` and
`nccl` (the two engines: the only code that differs between devices).
"""
from __future__ import annotations

from .api import (
    HcclAllGather, HcclAllReduce, HcclBarrier, HcclBroadcast, HcclCommDestroy, HcclCommInitClusterInfo,
    HcclCommInitRootInfo, HcclGetRankId, HcclGetRankSize, HcclGetRootInfo, HcclRecv, HcclReduceScatter, HcclSend,
)
from .comm import HcclComm
from .types import *  # noqa: F401,F403 - the enums and their members as constants
from .types import __all__ as _types_all

__all__ = ["HcclAllGather", "HcclAllReduce", "HcclBarrier", "HcclBroadcast", "HcclComm", "HcclCommDestroy",
           "HcclCommInitClusterInfo", "HcclCommInitRootInfo", "HcclGetRankId", "HcclGetRankSize", "HcclGetRootInfo",
           "HcclRecv", "HcclReduceScatter", "HcclSend"] + [name for name in _types_all]
