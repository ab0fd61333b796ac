#!/usr/bin/env python3
"""aclnnCtcLossBackward: CANN's sample program (acl_runtime.md §6), step by step, in Python.

The C++ sample's flow, call for call: aclInit, aclrtSetDevice, aclrtCreateStream; per tensor
aclrtMalloc + aclrtMemcpy H2D + contiguous strides computed by hand + aclCreateTensor; aclCreateIntArray
for the lengths; GetWorkspaceSize; the workspace if > 0; execute; aclrtSynchronizeStream; aclrtMemcpy
D2H; print; destroy and free everything; aclrtDestroyStream, aclrtResetDevice, aclFinalize. The
repeated mechanics of those steps (CHECK_RET, Init, CreateAclTensor, ...) are in acl_sample.py beside
this file, as the C++ samples keep theirs in common helpers; main() below is the sequence.

Shapes of CANN's doc sample: logProbs (T=12, N=4, C=5), targets (4, 5) padded, max target length 5,
logAlpha in CANN's 8-aligned layout (4, 12, 16) (2*5+1 = 11 states padded to 16 with -99999). The
negLogLikelihood and logAlpha handed to the backward come from a float64 NumPy alpha recursion in
this file; the printed gradient is checked against central finite differences of
sum_n gradOut[n] * nll_n(log_softmax(z)) at z = logProbs (float64), and the program exits non-zero
if they disagree.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # acl_sample.py: the helpers beside this file
from acl_sample import (CHECK_RET, CheckResult, CopyToHost, CreateAclIntArray, CreateAclTensor,  # noqa: E402
                        Destroy, Finalize, Init, MallocWorkspace, acl)


# ------------------------------------------------------------------ float64 NumPy CTC (the check)
def ctc_alpha(lp: np.ndarray, targets: np.ndarray, il: list[int], tl: list[int], blank: int):
    """(nll (N,), logAlpha (N, T, 2*maxL+1)) by the textbook alpha recursion, float64."""
    T, N, _ = lp.shape
    S = 2 * max(tl) + 1
    alpha = np.full((N, T, S), -np.inf)
    nll = np.zeros(N)
    for n in range(N):
        ext = [blank]
        for c in targets[n, :tl[n]]:
            ext += [int(c), blank]
        s_n = len(ext)
        for t in range(il[n]):
            for s in range(s_n):
                if t == 0:
                    alpha[n, 0, s] = lp[0, n, ext[s]] if s < 2 else -np.inf
                    continue
                terms = [alpha[n, t - 1, s]]
                if s >= 1:
                    terms.append(alpha[n, t - 1, s - 1])
                if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                    terms.append(alpha[n, t - 1, s - 2])
                alpha[n, t, s] = np.logaddexp.reduce(terms) + lp[t, n, ext[s]]
        last = alpha[n, il[n] - 1]
        nll[n] = -np.logaddexp(last[s_n - 1], last[s_n - 2] if s_n > 1 else -np.inf)
    return nll, alpha


def log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def expected_gradient(lp, grad_out, targets, il, tl, blank) -> np.ndarray:
    """d/dz sum_n gradOut[n] * nll_n(log_softmax(z)) at z = lp, by central differences (float64)."""
    h = 1e-6
    grad = np.zeros_like(lp)
    for idx in np.ndindex(*lp.shape):
        plus, minus = lp.copy(), lp.copy()
        plus[idx] += h
        minus[idx] -= h
        f_plus = grad_out @ ctc_alpha(log_softmax(plus), targets, il, tl, blank)[0]
        f_minus = grad_out @ ctc_alpha(log_softmax(minus), targets, il, tl, blank)[0]
        grad[idx] = (f_plus - f_minus) / (2 * h)
    return grad


def main() -> int:
    # 1. (Init) device and stream
    deviceId = 0
    stream = Init(deviceId)

    # 2. construct the inputs and outputs
    T, N, C, maxL, blank = 12, 4, 5, 5, 0
    X = (2 * maxL + 1 + 7) // 8 * 8                       # CANN's 8-aligned logAlpha width: 16
    rng = np.random.default_rng(0)
    logProbs64 = log_softmax(rng.standard_normal((T, N, C)))
    logProbsHostData = logProbs64.astype(np.float32)
    targetsHostData = [[1, 2, 2, 3, 4],
                       [3, 1, 4, 0, 0],
                       [2, 2, 0, 0, 0],
                       [4, 3, 2, 1, 1]]
    inputLengthsData = [12, 10, 9, 12]
    targetLengthsData = [5, 3, 2, 5]
    gradOutHostData = [1.0, 0.5, 2.0, 1.0]
    nll64, alpha64 = ctc_alpha(logProbsHostData.astype(np.float64), np.array(targetsHostData),
                               inputLengthsData, targetLengthsData, blank)
    logAlphaHostData = np.full((N, T, X), -99999.0, np.float32)   # CANN's padding value
    logAlphaHostData[:, :, :2 * maxL + 1] = np.maximum(alpha64, -99999.0)
    outHostData = np.zeros((T, N, C), np.float32)

    gradOutShape, logProbsShape, targetsShape = [N], [T, N, C], [N, maxL]
    negLogLikelihoodShape, logAlphaShape, outShape = [N], [N, T, X], [T, N, C]

    gradOut, gradOutDeviceAddr = CreateAclTensor(gradOutHostData, gradOutShape, acl.ACL_FLOAT)
    logProbs, logProbsDeviceAddr = CreateAclTensor(logProbsHostData, logProbsShape, acl.ACL_FLOAT)
    targets, targetsDeviceAddr = CreateAclTensor(targetsHostData, targetsShape, acl.ACL_INT64)
    negLogLikelihood, negLogLikelihoodDeviceAddr = CreateAclTensor(nll64, negLogLikelihoodShape, acl.ACL_FLOAT)
    logAlpha, logAlphaDeviceAddr = CreateAclTensor(logAlphaHostData, logAlphaShape, acl.ACL_FLOAT)
    out, outDeviceAddr = CreateAclTensor(outHostData, outShape, acl.ACL_FLOAT)
    inputLengths = CreateAclIntArray(inputLengthsData)
    targetLengths = CreateAclIntArray(targetLengthsData)
    zeroInfinity = False

    # 3. first phase: the workspace size and the executor
    ret, workspaceSize, executor = acl.aclnnCtcLossBackwardGetWorkspaceSize(
        gradOut, logProbs, targets, inputLengths, targetLengths, negLogLikelihood, logAlpha, blank,
        zeroInfinity, out)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnCtcLossBackwardGetWorkspaceSize failed. ERROR: {ret}")
    workspaceAddr = MallocWorkspace(workspaceSize)

    # 4. second phase: run on the stream
    ret = acl.aclnnCtcLossBackward(workspaceAddr, workspaceSize, executor, stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclnnCtcLossBackward failed. ERROR: {ret}")

    # 5. wait for the stream
    ret = acl.aclrtSynchronizeStream(stream)
    CHECK_RET(ret == acl.ACL_SUCCESS, f"aclrtSynchronizeStream failed. ERROR: {ret}")

    # 6. copy the result back and print it
    resultData = CopyToHost(outDeviceAddr, outShape, acl.ACL_FLOAT)

    # 7. destroy the descriptors, free the device memory
    Destroy((gradOut, logProbs, targets, negLogLikelihood, logAlpha, out),
            (gradOutDeviceAddr, logProbsDeviceAddr, targetsDeviceAddr, negLogLikelihoodDeviceAddr,
             logAlphaDeviceAddr, outDeviceAddr), workspaceAddr, intArrays=(inputLengths, targetLengths))
    Finalize(deviceId, stream)

    # the check: float64 finite differences of the loss
    expected = expected_gradient(logProbsHostData.astype(np.float64), np.array(gradOutHostData),
                                 np.array(targetsHostData), inputLengthsData, targetLengthsData, blank)
    error = np.abs(resultData.reshape(outShape) - expected).max()
    return CheckResult(error, 1e-4, "|result - float64 finite differences|", "aclnnCtcLossBackward")


if __name__ == "__main__":
    sys.exit(main())
