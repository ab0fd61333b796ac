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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # acl_sample.py: the helpers beside this file
from acl_sample import (CHECK_RET, CheckResult, CopyToHost, CreateAclTensor, Destroy, Finalize,  # noqa: E402
                        Init, MallocWorkspace, acl)


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
    workspaceAddr = MallocWorkspace(workspaceSize)

    # 4. second phase: run on the stream
    ret = acl.aclnnCrossEntropyLossGrad(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnCrossEntropyLossGrad failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the result back and print it
    resultData = CopyToHost(outDeviceAddr, outShape, acl.ACL_FLOAT)

    # 7. destroy the descriptors, free the device memory
    Destroy((gradLoss, logProb, target, weight, out),
            (gradLossDeviceAddr, logProbDeviceAddr, targetDeviceAddr, weightDeviceAddr, outDeviceAddr), workspaceAddr)
    Finalize(deviceId, stream)

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
    return CheckResult(error, 1e-5, "|result - float64 closed form|", "aclnnCrossEntropyLossGrad")


if __name__ == "__main__":
    sys.exit(main())
