#!/usr/bin/env python3
"""aclnnConvTbcBackward: CANN's sample program (acl_runtime.md §6), step by step, in Python.

The C++ sample's flow, call for call (see ctc_loss_backward.py), with the doc sample's shapes:
self (the output gradient) (5, 1, 2), input (5, 1, 2) in (time, batch, channel), weight (1, 2, 2)
(K, Cin, Cout), bias (2,), pad 0, cubeMathType 1 (ALLOW_FP32_DOWN_PRECISION: TF32 on a GPU), and
gradInput / gradWeight / gradBias in the shapes of input / weight / bias. The 3-D tensors are ND.
The three printed gradients are checked against float64 NumPy loops over
y[t, b, o] = bias[o] + sum_k sum_i x[t + k - pad, b, i] * weight[k, i, o].
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
    selfShape, inputShape, weightShape, biasShape = [5, 1, 2], [5, 1, 2], [1, 2, 2], [2]
    selfHostData = [0.5, -1.0, 1.5, 2.0, -0.5, 0.25, 1.0, -2.0, 0.75, 0.125]
    inputHostData = [1.0, 2.0, -1.0, 0.5, 3.0, -2.0, 0.25, 1.5, -0.75, 1.0]
    weightHostData = [0.5, -0.25, 1.0, 2.0]
    biasHostData = [0.1, -0.2]
    pad = 0
    cubeMathType = 1

    self_, selfDeviceAddr = CreateAclTensor(selfHostData, selfShape, acl.ACL_FLOAT)
    input_, inputDeviceAddr = CreateAclTensor(inputHostData, inputShape, acl.ACL_FLOAT)
    weight, weightDeviceAddr = CreateAclTensor(weightHostData, weightShape, acl.ACL_FLOAT)
    bias, biasDeviceAddr = CreateAclTensor(biasHostData, biasShape, acl.ACL_FLOAT)
    gradInput, gradInputDeviceAddr = CreateAclTensor([0.0] * GetShapeSize(inputShape), inputShape, acl.ACL_FLOAT)
    gradWeight, gradWeightDeviceAddr = CreateAclTensor([0.0] * GetShapeSize(weightShape), weightShape,
                                                       acl.ACL_FLOAT)
    gradBias, gradBiasDeviceAddr = CreateAclTensor([0.0] * GetShapeSize(biasShape), biasShape, acl.ACL_FLOAT)

    # 3. first phase: the workspace size and the executor
    ret, workspaceSize, executor = acl.aclnnConvTbcBackwardGetWorkspaceSize(
        self_, input_, weight, bias, pad, cubeMathType, gradInput, gradWeight, gradBias)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnConvTbcBackwardGetWorkspaceSize failed. ERROR: {ret}")
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        CHECK_RET(ret == acl.ACL_SUCCESS, f"allocate workspace failed. ERROR: {ret}")

    # 4. second phase: run on the stream
    ret = acl.aclnnConvTbcBackward(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnConvTbcBackward failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the results back and print them
    results = {}
    for name, addr, shape in (("gradInput", gradInputDeviceAddr, inputShape),
                              ("gradWeight", gradWeightDeviceAddr, weightShape),
                              ("gradBias", gradBiasDeviceAddr, biasShape)):
        size = GetShapeSize(shape)
        resultData = np.zeros(size, np.float32)
        ret = acl.aclrtMemcpy(resultData, size * 4, addr, size * 4, acl.ACL_MEMCPY_DEVICE_TO_HOST)
        CHECK_RET(ret == acl.ACL_SUCCESS, f"copy {name} from device to host failed. ERROR: {ret}")
        for i in range(size):
            LOG_PRINT(f"{name}[{i}] is: {resultData[i]:.6f}")
        results[name] = resultData.reshape(shape)

    # 7. destroy the descriptors, free the device memory
    for tensor in (self_, input_, weight, bias, gradInput, gradWeight, gradBias):
        acl.aclDestroyTensor(tensor)
    for addr in (selfDeviceAddr, inputDeviceAddr, weightDeviceAddr, biasDeviceAddr, gradInputDeviceAddr,
                 gradWeightDeviceAddr, gradBiasDeviceAddr):
        acl.aclrtFree(addr)
    if workspaceSize > 0:
        acl.aclrtFree(workspaceAddr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()

    # the check: float64 loops over the convolution's definition
    g = np.array(selfHostData, np.float64).reshape(selfShape)
    x = np.array(inputHostData, np.float64).reshape(inputShape)
    w = np.array(weightHostData, np.float64).reshape(weightShape)
    T, B, Cin = inputShape
    K, _, Cout = weightShape
    gx, gw = np.zeros_like(x), np.zeros_like(w)
    for t in range(selfShape[0]):
        for k in range(K):
            s = t + k - pad
            if 0 <= s < T:
                gx[s] += g[t] @ w[k].T
                gw[k] += x[s].T @ g[t]
    expected = {"gradInput": gx, "gradWeight": gw, "gradBias": g.sum((0, 1))}
    error = max(float(np.abs(results[k] - v).max() / (1 + np.abs(v).max())) for k, v in expected.items())
    LOG_PRINT(f"max relative |result - float64 loops| = {error:.2e} (device {acl.current_device_kind()})")
    if not error < 5e-3:  # TF32 on a GPU (cubeMathType 1)
        LOG_PRINT("FAILED: aclnnConvTbcBackward result is wrong")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
