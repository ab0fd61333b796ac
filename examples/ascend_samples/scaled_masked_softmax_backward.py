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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # acl_sample.py: the helpers beside this file
from acl_sample import (CHECK_RET, CheckResult, CopyToHost, CreateAclTensor, Destroy, Finalize,  # noqa: E402
                        Init, MallocWorkspace, acl)


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
    workspaceAddr = MallocWorkspace(workspaceSize)

    # 4. second phase: run on the stream
    ret = acl.aclnnScaledMaskedSoftmaxBackward(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnScaledMaskedSoftmaxBackward failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the result back and print it
    resultData = CopyToHost(outDeviceAddr, shape, acl.ACL_FLOAT16)

    # 7. destroy the descriptors, free the device memory
    Destroy((gradOutput, y, mask, out), (gradOutputDeviceAddr, yDeviceAddr, maskDeviceAddr, outDeviceAddr),
            workspaceAddr)
    Finalize(deviceId, stream)

    # the check: float64 formula on the float16 inputs
    g64, y64 = gradOutputHostData.astype(np.float64), yHostData.astype(np.float64)
    expected = np.where(maskHostData, 0.0, scale * y64 * (g64 - (g64 * y64).sum(-1, keepdims=True)))
    error = np.abs(resultData.reshape(shape).astype(np.float64) - expected).max()
    return CheckResult(error, 2e-3, "|result - float64 formula|",  # float16 output rounding
                       "aclnnScaledMaskedSoftmaxBackward")


if __name__ == "__main__":
    sys.exit(main())
