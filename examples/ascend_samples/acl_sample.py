"""The common helpers of the Ascend sample programs beside this file (CANN's C++ samples have theirs
too): CHECK_RET / LOG_PRINT, GetShapeSize, Init (aclInit, aclrtSetDevice, aclrtCreateStream),
CreateAclTensor (aclrtMalloc + aclrtMemcpy H2D + contiguous strides + aclCreateTensor),
MallocWorkspace, CopyToHost (aclrtMemcpy D2H + print every element), Destroy (aclDestroyTensor /
aclDestroyIntArray, aclrtFree) and Finalize (aclrtDestroyStream, aclrtResetDevice, aclFinalize).

Not a sample itself: each program imports it by path (`sys.path.insert` of its own folder) and keeps
the sample's sequence of steps in its main().
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

try:
    import aclnn_gpu as acl
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import aclnn_gpu as acl

ELEMENT_SIZE = {acl.ACL_FLOAT: 4, acl.ACL_FLOAT16: 2, acl.ACL_INT64: 8, acl.ACL_BOOL: 1}
NUMPY_TYPE = {acl.ACL_FLOAT: np.float32, acl.ACL_FLOAT16: np.float16, acl.ACL_INT64: np.int64, acl.ACL_BOOL: np.bool_}


def LOG_PRINT(message: str) -> None:
    print(message, flush=True)


def CHECK_RET(ok: bool, message: str) -> None:
    """CANN's CHECK_RET(cond, LOG_PRINT(...); return ret): report with the recent error, exit non-zero."""
    if not ok:
        LOG_PRINT(f"{message}\n  aclGetRecentErrMsg: {acl.aclGetRecentErrMsg()}")
        sys.exit(1)


def GetShapeSize(shape: list[int]) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def Init(deviceId: int):
    ret = acl.aclInit(None)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclInit failed. ERROR: {ret}")
    ret = acl.aclrtSetDevice(deviceId)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSetDevice failed. ERROR: {ret}")
    ret, stream = acl.aclrtCreateStream()
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtCreateStream failed. ERROR: {ret}")
    return stream


def CreateAclTensor(hostData, shape: list[int], dataType: int, format: int = acl.ACL_FORMAT_ND):
    """aclrtMalloc + aclrtMemcpy H2D + hand-computed contiguous strides + aclCreateTensor.
    The byte size comes from the aclDataType, not from the host list (the doc sample pitfall)."""
    size = GetShapeSize(shape) * ELEMENT_SIZE[dataType]
    ret, deviceAddr = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtMalloc failed. ERROR: {ret}")
    host = np.asarray(hostData, dtype=NUMPY_TYPE[dataType]).reshape(-1)
    ret = acl.aclrtMemcpy(deviceAddr, size, host, size, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtMemcpy failed. ERROR: {ret}")
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = shape[i + 1] * strides[i + 1]
    tensor = acl.aclCreateTensor(shape, dataType, strides, 0, format, shape, deviceAddr)
    CHECK_RET(tensor is not None, "aclCreateTensor failed")
    return tensor, deviceAddr


def CreateAclIntArray(values: list[int]):
    array = acl.aclCreateIntArray(values)
    CHECK_RET(array is not None, f"aclCreateIntArray failed. ERROR: {acl.ACL_ERROR_BAD_ALLOC}")
    return array


def MallocWorkspace(workspaceSize: int):
    """aclrtMalloc of the workspace if GetWorkspaceSize asked for one (None otherwise)."""
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        CHECK_RET(ret == acl.ACL_SUCCESS, f"allocate workspace failed. ERROR: {ret}")
    return workspaceAddr


def CopyToHost(deviceAddr, shape: list[int], dataType: int, name: str = "result") -> np.ndarray:
    """aclrtMemcpy device to host into a flat host array, then print every element."""
    size = GetShapeSize(shape)
    resultData = np.zeros(size, NUMPY_TYPE[dataType])
    nbytes = size * ELEMENT_SIZE[dataType]
    ret = acl.aclrtMemcpy(resultData, nbytes, deviceAddr, nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"copy {name} from device to host failed. ERROR: {ret}")
    for i in range(size):
        LOG_PRINT(f"{name}[{i}] is: {float(resultData[i]):.6f}")
    return resultData


def Destroy(tensors, deviceAddrs, workspaceAddr, intArrays=()) -> None:
    """aclDestroyTensor / aclDestroyIntArray every descriptor, aclrtFree every buffer and the workspace."""
    for tensor in tensors:
        acl.aclDestroyTensor(tensor)
    for array in intArrays:
        acl.aclDestroyIntArray(array)
    for addr in deviceAddrs:
        acl.aclrtFree(addr)
    if workspaceAddr is not None:
        acl.aclrtFree(workspaceAddr)


def Finalize(deviceId: int, stream) -> None:
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()


def CheckResult(error: float, tolerance: float, what: str, opName: str) -> int:
    """Print the largest difference to the independent float64 computation; 1 (and FAILED) if too large."""
    LOG_PRINT(f"max {what} = {error:.2e} (device {acl.current_device_kind()})")
    if not error < tolerance:
        LOG_PRINT(f"FAILED: {opName} result is wrong")
        return 1
    return 0


if __name__ == "__main__":
    print("acl_sample.py holds the sample programs' common helpers; run one of the samples beside it")
