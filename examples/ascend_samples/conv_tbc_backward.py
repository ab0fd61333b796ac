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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # acl_sample.py: the helpers beside this file
from acl_sample import (CHECK_RET, CheckResult, CopyToHost, CreateAclTensor, Destroy, Finalize,  # noqa: E402
                        GetShapeSize, Init, MallocWorkspace, acl)


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
    workspaceAddr = MallocWorkspace(workspaceSize)

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
        results[name] = CopyToHost(addr, shape, acl.ACL_FLOAT, name).reshape(shape)

    # 7. destroy the descriptors, free the device memory
    Destroy((self_, input_, weight, bias, gradInput, gradWeight, gradBias),
            (selfDeviceAddr, inputDeviceAddr, weightDeviceAddr, biasDeviceAddr, gradInputDeviceAddr,
             gradWeightDeviceAddr, gradBiasDeviceAddr), workspaceAddr)
    Finalize(deviceId, stream)

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
    return CheckResult(error, 5e-3, "relative |result - float64 loops|",  # TF32 on a GPU (cubeMathType 1)
                       "aclnnConvTbcBackward")


if __name__ == "__main__":
    sys.exit(main())
