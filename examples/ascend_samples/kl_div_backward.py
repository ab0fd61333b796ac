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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # acl_sample.py: the helpers beside this file
from acl_sample import (CHECK_RET, CheckResult, CopyToHost, CreateAclTensor, Destroy, Finalize,  # noqa: E402
                        Init, MallocWorkspace, acl)


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
    workspaceAddr = MallocWorkspace(workspaceSize)

    # 4. second phase: run on the stream
    ret = acl.aclnnKlDivBackward(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnKlDivBackward failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the result back and print it
    resultData = CopyToHost(outDeviceAddr, outShape, acl.ACL_FLOAT)

    # 7. destroy the descriptors, free the device memory
    Destroy((gradOutput, self_, target, out),
            (gradOutputDeviceAddr, selfDeviceAddr, targetDeviceAddr, outDeviceAddr), workspaceAddr)
    Finalize(deviceId, stream)

    # the check: float64 closed form
    expected = -np.array(targetHostData, np.float64) * gradOutputHostData[0] / resultData.size
    error = np.abs(resultData - expected).max()
    return CheckResult(error, 1e-6, "|result - float64 closed form|", "aclnnKlDivBackward")


if __name__ == "__main__":
    sys.exit(main())
