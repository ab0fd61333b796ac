"""HCCL's enums and structs (`hccl_types.h`) with CANN's numbers, the root-info size, and what each
data type is in NumPy: the one table every other module of the package reads."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

HCCL_ROOT_INFO_BYTES = 4108   # sizeof(HcclRootInfo): the opaque bytes rank 0 hands to every rank


class HcclResult(enum.IntEnum):
    HCCL_SUCCESS = 0
    HCCL_E_PARA = 1
    HCCL_E_PTR = 2
    HCCL_E_MEMORY = 3
    HCCL_E_INTERNAL = 4
    HCCL_E_NOT_SUPPORT = 5
    HCCL_E_NOT_FOUND = 6
    HCCL_E_UNAVAIL = 7
    HCCL_E_SYSCALL = 8
    HCCL_E_TIMEOUT = 9
    HCCL_E_OPEN_FILE_FAILURE = 10
    HCCL_E_TCP_CONNECT = 11
    HCCL_E_ROCE_CONNECT = 12
    HCCL_E_TCP_TRANSFER = 13
    HCCL_E_ROCE_TRANSFER = 14
    HCCL_E_RUNTIME = 15
    HCCL_E_DRV = 16
    HCCL_E_PROFILING = 17
    HCCL_E_CCE = 18
    HCCL_E_NETWORK = 19
    HCCL_E_AGAIN = 20
    HCCL_E_REMOTE = 21
    HCCL_E_SUSPENDING = 22


class HcclDataType(enum.IntEnum):
    HCCL_DATA_TYPE_INT8 = 0
    HCCL_DATA_TYPE_INT16 = 1
    HCCL_DATA_TYPE_INT32 = 2
    HCCL_DATA_TYPE_FP16 = 3
    HCCL_DATA_TYPE_FP32 = 4
    HCCL_DATA_TYPE_INT64 = 5
    HCCL_DATA_TYPE_UINT64 = 6
    HCCL_DATA_TYPE_UINT8 = 7
    HCCL_DATA_TYPE_UINT16 = 8
    HCCL_DATA_TYPE_UINT32 = 9
    HCCL_DATA_TYPE_FP64 = 10
    HCCL_DATA_TYPE_BFP16 = 11


class HcclReduceOp(enum.IntEnum):
    HCCL_REDUCE_SUM = 0
    HCCL_REDUCE_PROD = 1
    HCCL_REDUCE_MAX = 2
    HCCL_REDUCE_MIN = 3


NUMPY_DTYPE: dict[HcclDataType, np.dtype] = {
    HcclDataType.HCCL_DATA_TYPE_INT8: np.dtype(np.int8),
    HcclDataType.HCCL_DATA_TYPE_INT16: np.dtype(np.int16),
    HcclDataType.HCCL_DATA_TYPE_INT32: np.dtype(np.int32),
    HcclDataType.HCCL_DATA_TYPE_FP16: np.dtype(np.float16),
    HcclDataType.HCCL_DATA_TYPE_FP32: np.dtype(np.float32),
    HcclDataType.HCCL_DATA_TYPE_INT64: np.dtype(np.int64),
    HcclDataType.HCCL_DATA_TYPE_UINT64: np.dtype(np.uint64),
    HcclDataType.HCCL_DATA_TYPE_UINT8: np.dtype(np.uint8),
    HcclDataType.HCCL_DATA_TYPE_UINT16: np.dtype(np.uint16),
    HcclDataType.HCCL_DATA_TYPE_UINT32: np.dtype(np.uint32),
    HcclDataType.HCCL_DATA_TYPE_FP64: np.dtype(np.float64),
    HcclDataType.HCCL_DATA_TYPE_BFP16: np.dtype(ml_dtypes.bfloat16),
}

class HcclSendRecvType(enum.IntEnum):
    HCCL_SEND = 0
    HCCL_RECV = 1


COMM_NAME_MAX_LENGTH = 128                       # hcclCommName's bytes, its terminating NUL included
HCCL_COMM_CONFIG_INFO_BYTES = 24
HCCL_COMM_CONFIG_MAGIC_WORD = 0xF0F0F0F0
HCCL_COMM_CONFIG_VERSION = 5
HCCL_COMM_DEFAULT_BUFFSIZE = 200                 # MB
HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET = 0xFFFFFFFF
HCCL_COMM_DEFAULT_DETERMINISTIC = 0
HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET = 0xFFFFFFFF
HCCL_COMM_DEFAULT_OP_EXPANSION_MODE = 0
HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET = 0xFFFFFFFF
HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET = 0xFFFFFFFF


@dataclass
class HcclCommConfig:
    """C's HcclCommConfig, made with HCCL's defaults (what HcclCommConfigInit sets)."""
    hcclBufferSize: int = HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET
    hcclDeterministic: int = HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET
    hcclCommName: str = ""
    hcclUdi: str = ""
    hcclOpExpansionMode: int = HCCL_COMM_DEFAULT_OP_EXPANSION_MODE
    hcclRdmaTrafficClass: int = HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET
    hcclRdmaServiceLevel: int = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET


@dataclass
class HcclSendRecvItem:
    """C's HcclSendRecvItem: one send or receive of HcclBatchSendRecv."""
    sendRecvType: int
    buf: Any
    count: int
    dataType: int
    remoteRank: int


ENUMS = (HcclResult, HcclDataType, HcclReduceOp, HcclSendRecvType)

# Every member as a module constant: `acl.HCCL_REDUCE_SUM`, `acl.HCCL_DATA_TYPE_FP32`, ...
globals().update({name: member for enum_type in ENUMS for name, member in enum_type.__members__.items()})

__all__ = [e.__name__ for e in ENUMS] + [
    "HCCL_ROOT_INFO_BYTES", "HcclCommConfig", "HcclSendRecvItem", "COMM_NAME_MAX_LENGTH", "HCCL_COMM_CONFIG_INFO_BYTES",
    "HCCL_COMM_CONFIG_MAGIC_WORD", "HCCL_COMM_CONFIG_VERSION", "HCCL_COMM_DEFAULT_BUFFSIZE",
    "HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET", "HCCL_COMM_DEFAULT_DETERMINISTIC", "HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET",
    "HCCL_COMM_DEFAULT_OP_EXPANSION_MODE", "HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET",
    "HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET"] + [name for enum_type in ENUMS for name in enum_type.__members__]
