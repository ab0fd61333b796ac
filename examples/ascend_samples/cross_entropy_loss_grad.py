#!/usr/bin/env python3
"""aclnnCrossEntropyLossGrad: CANN's sample program (acl_runtime.md §6), step by step, in Python.

The C++ sample's flow, call for call (see ctc_loss_backward.py). The gradient of the weighted "mean"
cross-entropy with respect to the logits, given logProb = log_softmax(logits): gradLoss 0-D,
logProb (4, 5), target (4,) INT64 with one row equal to ignoreIndex, weight (5,), reductionOptional
"mean", ignoreIndex -100, labelSmoothing 0.0, lseSquareScaleForZloss 0.0, the zloss operands null.
CANN's doc sample creates its INT64 target from a float host vector sized numel*sizeof(float),
half the bytes the tensor needs (acl_runtime.md §6); here every buffer is sized from its aclDataType.
The printed gradient is checked against the closed form in float64 NumPy:
    grad[i] = gradLoss * w[t_i] * (softmax(logits)[i] - onehot(t_i)) / sum_{i not ignored} w[t_i].
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
    N, C = 4, 5
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((N, C))
    logProbHostData = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
    targetHostData = [1, 4, -100, 0]
    weightHostData = [0.5, 1.0, 2.0, 1.5, 0.25]
    gradLossHostData = [1.0]
    outHostData = np.zeros((N, C), np.float32)
    gradLossShape, logProbShape, targetShape, weightShape, outShape = [], [N, C], [N], [C], [N, C]

    gradLoss, gradLossDeviceAddr = CreateAclTensor(gradLossHostData, gradLossShape, acl.ACL_FLOAT)
    logProb, logProbDeviceAddr = CreateAclTensor(logProbHostData, logProbShape, acl.ACL_FLOAT)
    target, targetDeviceAddr = CreateAclTensor(targetHostData, targetShape, acl.ACL_INT64)
    weight, weightDeviceAddr = CreateAclTensor(weightHostData, weightShape, acl.ACL_FLOAT)
    out, outDeviceAddr = CreateAclTensor(outHostData, outShape, acl.ACL_FLOAT)
    gradZlossOptional = None
    lseForZlossOptional = None
    reductionOptional = "mean"
    ignoreIndex = -100
    labelSmoothing = 0.0
    lseSquareScaleForZloss = 0.0

    # 3. first phase: the workspace size and the executor
    ret, workspaceSize, executor = acl.aclnnCrossEntropyLossGradGetWorkspaceSize(
        gradLoss, logProb, target, weight, gradZlossOptional, lseForZlossOptional, reductionOptional,
        ignoreIndex, labelSmoothing, lseSquareScaleForZloss, out)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnCrossEntropyLossGradGetWorkspaceSize failed. ERROR: {ret}")
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        CHECK_RET(ret == acl.ACL_SUCCESS, f"allocate workspace failed. ERROR: {ret}")

    # 4. second phase: run on the stream
    ret = acl.aclnnCrossEntropyLossGrad(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnCrossEntropyLossGrad failed. ERROR: {ret}")

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
    for tensor in (gradLoss, logProb, target, weight, out):
        acl.aclDestroyTensor(tensor)
    for addr in (gradLossDeviceAddr, logProbDeviceAddr, targetDeviceAddr, weightDeviceAddr, outDeviceAddr):
        acl.aclrtFree(addr)
    if workspaceSize > 0:
        acl.aclrtFree(workspaceAddr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()

    # the check: the closed form in float64
    p = np.exp(logProbHostData.astype(np.float64))
    t = np.array(targetHostData)
    w = np.array(weightHostData)
    kept = t != ignoreIndex
    onehot = np.zeros((N, C))
    onehot[np.arange(N)[kept], t[kept]] = 1.0
    row_weight = np.where(kept, w[np.where(kept, t, 0)], 0.0)
    expected = gradLossHostData[0] * row_weight[:, None] * (p - onehot) / row_weight.sum()
    error = np.abs(resultData.reshape(outShape) - expected).max()
    LOG_PRINT(f"max |result - float64 closed form| = {error:.2e} (device {acl.current_device_kind()})")
    if not error < 1e-5:
        LOG_PRINT("FAILED: aclnnCrossEntropyLossGrad result is wrong")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
