#!/usr/bin/env python3
"""aclnnKlDivBackward: CANN's sample program (acl_runtime.md §6), step by step, in Python.

The C++ sample's flow, call for call (see ctc_loss_backward.py): gradOutput 0-D, self (4, 2),
target (4, 2) probabilities, reduction 1 (mean), logTarget false, out (4, 2). The printed gradient
is checked against float64 NumPy: d/dself mean(target * (log(target) - self)) * gradOutput
= -target * gradOutput / numel.
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


def main() -> int:
    # 1. (Init) device and stream
    deviceId = 0
    stream = Init(deviceId)

    # 2. construct the inputs and outputs
    selfShape, targetShape, gradOutputShape, outShape = [4, 2], [4, 2], [], [4, 2]
    gradOutputHostData = [0.5]
    selfHostData = [-1.2, -0.4, -2.1, -0.7, -0.3, -1.5, -0.9, -0.6]
    targetHostData = [0.3, 0.7, 0.1, 0.9, 0.6, 0.4, 0.25, 0.75]
    outHostData = [0.0] * 8

    gradOutput, gradOutputDeviceAddr = CreateAclTensor(gradOutputHostData, gradOutputShape, acl.ACL_FLOAT)
    self_, selfDeviceAddr = CreateAclTensor(selfHostData, selfShape, acl.ACL_FLOAT)
    target, targetDeviceAddr = CreateAclTensor(targetHostData, targetShape, acl.ACL_FLOAT)
    out, outDeviceAddr = CreateAclTensor(outHostData, outShape, acl.ACL_FLOAT)
    reduction = 1          # 0 none, 1 mean, 2 sum, 3 batchmean
    logTarget = False

    # 3. first phase: the workspace size and the executor
    ret, workspaceSize, executor = acl.aclnnKlDivBackwardGetWorkspaceSize(
        gradOutput, self_, target, reduction, logTarget, out)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnKlDivBackwardGetWorkspaceSize failed. ERROR: {ret}")
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        CHECK_RET(ret == acl.ACL_SUCCESS, f"allocate workspace failed. ERROR: {ret}")

    # 4. second phase: run on the stream
    ret = acl.aclnnKlDivBackward(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnKlDivBackward failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the result back and print it
    size = GetShapeSize(outShape)
    resultData = np.zeros(size, np.float32)
    ret = acl.aclrtMemcpy(resultData, size * 4, outDeviceAddr, size * 4, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"copy result from device to host failed. ERROR: {ret}")
    for i in range(size):
        LOG_PRINT(f"result[{i}] is: {resultData[i]:.6f}")

    # 7. destroy the descriptors, free the device memory
    for tensor in (gradOutput, self_, target, out):
        acl.aclDestroyTensor(tensor)
    for addr in (gradOutputDeviceAddr, selfDeviceAddr, targetDeviceAddr, outDeviceAddr):
        acl.aclrtFree(addr)
    if workspaceSize > 0:
        acl.aclrtFree(workspaceAddr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()

    # the check: float64 closed form
    expected = -np.array(targetHostData, np.float64) * gradOutputHostData[0] / size
    error = np.abs(resultData - expected).max()
    LOG_PRINT(f"max |result - float64 closed form| = {error:.2e} (device {acl.current_device_kind()})")
    if not error < 1e-6:
        LOG_PRINT("FAILED: aclnnKlDivBackward result is wrong")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
