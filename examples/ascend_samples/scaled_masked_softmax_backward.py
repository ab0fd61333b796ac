#!/usr/bin/env python3
"""aclnnScaledMaskedSoftmaxBackward: CANN's sample program (acl_runtime.md §6), step by step, in Python.

The C++ sample's flow, call for call (see ctc_loss_backward.py): gradOutput, y and out (2, 2, 4, 8)
FLOAT16, mask (2, 2, 4, 8) BOOL (true = masked out), scale 0.5, fixTriuMask false. y is the forward
softmax of random scores (computed here in float64 and rounded to float16). The printed gradient is
checked against float64 NumPy: scale * y * (gradOutput - rowsum(gradOutput * y)), 0 where masked.
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
    shape = [2, 2, 4, 8]
    rng = np.random.default_rng(0)
    maskHostData = rng.random(shape) < 0.25
    maskHostData[..., 0] = False                        # no fully masked row
    scale = 0.5
    fixTriuMask = False
    scores = np.where(maskHostData, -np.inf, scale * rng.standard_normal(shape))
    yHostData = np.exp(scores - scores.max(-1, keepdims=True))
    yHostData = (yHostData / yHostData.sum(-1, keepdims=True)).astype(np.float16)
    gradOutputHostData = rng.standard_normal(shape).astype(np.float16)
    outHostData = np.zeros(shape, np.float16)

    gradOutput, gradOutputDeviceAddr = CreateAclTensor(gradOutputHostData, shape, acl.ACL_FLOAT16)
    y, yDeviceAddr = CreateAclTensor(yHostData, shape, acl.ACL_FLOAT16)
    mask, maskDeviceAddr = CreateAclTensor(maskHostData, shape, acl.ACL_BOOL)
    out, outDeviceAddr = CreateAclTensor(outHostData, shape, acl.ACL_FLOAT16)

    # 3. first phase: the workspace size and the executor
    ret, workspaceSize, executor = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(
        gradOutput, y, mask, scale, fixTriuMask, out)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize failed. ERROR: {ret}")
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        CHECK_RET(ret == acl.ACL_SUCCESS, f"allocate workspace failed. ERROR: {ret}")

    # 4. second phase: run on the stream
    ret = acl.aclnnScaledMaskedSoftmaxBackward(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnScaledMaskedSoftmaxBackward failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the result back and print it
    size = GetShapeSize(shape)
    resultData = np.zeros(size, np.float16)
    ret = acl.aclrtMemcpy(resultData, size * 2, outDeviceAddr, size * 2, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"copy result from device to host failed. ERROR: {ret}")
    for i in range(size):
        LOG_PRINT(f"result[{i}] is: {float(resultData[i]):.6f}")

    # 7. destroy the descriptors, free the device memory
    for tensor in (gradOutput, y, mask, out):
        acl.aclDestroyTensor(tensor)
    for addr in (gradOutputDeviceAddr, yDeviceAddr, maskDeviceAddr, outDeviceAddr):
        acl.aclrtFree(addr)
    if workspaceSize > 0:
        acl.aclrtFree(workspaceAddr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()

    # the check: float64 formula on the float16 inputs
    g64, y64 = gradOutputHostData.astype(np.float64), yHostData.astype(np.float64)
    expected = np.where(maskHostData, 0.0, scale * y64 * (g64 - (g64 * y64).sum(-1, keepdims=True)))
    error = np.abs(resultData.reshape(shape).astype(np.float64) - expected).max()
    LOG_PRINT(f"max |result - float64 formula| = {error:.2e} (device {acl.current_device_kind()})")
    if not error < 2e-3:  # float16 output rounding
        LOG_PRINT("FAILED: aclnnScaledMaskedSoftmaxBackward result is wrong")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
