"""The main job: every operator, forward and backward, on the best device present, through the
two-phase API as Ascend's samples call it. Prints a table (operator, shapes, dtype, device, max
error against a float64 reference, time) and returns non-zero if any result is wrong.

Layer 17 of docs/DESIGN.md, "Import layers" (demo): it calls the public API as a user would;
`samples` holds the sample-program helpers (host arrays in and out of device tensors).

`python -m aclnn_gpu [--device cpu|cuda|emulated] [--repeat N]`
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..base import dtypes


@dataclass
class Case:
    name: str
    shapes: str
    dtype: np.dtype
    run: Callable[[Any], list[np.ndarray]]          # device arrays session -> results (as float64)
    reference: Callable[[], list[np.ndarray]]        # float64 reference results
    tolerance: float


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64)


def _timed_run(session: Any, get_workspace_size: Callable, execute: Callable, args: tuple, repeat: int) -> float:
    """Median milliseconds of execute + synchronize with one repeatable executor, after one untimed
    run (the first call of a kernel on the emulated device may build it: seconds, not the kernel)."""
    import aclnn_gpu as acl
    status, workspace, size, executor = session.prepare(get_workspace_size, *args)
    if status:
        raise RuntimeError(acl.aclGetRecentErrMsg())
    acl.aclSetAclOpExecutorRepeatable(executor)
    times = []
    for run in range(repeat + 1):
        start = time.perf_counter()
        if execute(workspace, size, executor, session.stream):
            raise RuntimeError(acl.aclGetRecentErrMsg())
        if acl.aclrtSynchronizeStream(session.stream):
            raise RuntimeError(acl.aclGetRecentErrMsg())
        if run:
            times.append(time.perf_counter() - start)
    acl.aclDestroyAclOpExecutor(executor)
    return float(np.median(times) * 1e3)


def build_cases(rng: np.random.Generator, small: bool) -> list[tuple[Case, Callable, Callable, Callable]]:
    """(case, get_workspace_size, execute, args builder) for the ten operators."""
    import aclnn_gpu as acl
    from ..reference import conv_tbc, cross_entropy, ctc_loss, kl_div, scaled_masked_softmax as smsm

    f32 = np.dtype(np.float32)
    cases = []
    s = 1 if small else 4

    # KL divergence: target broadcasts beyond self
    x = rng.standard_normal((8 * s, 1, 64)).astype(f32)
    t = rng.random((8 * s, 16, 64)).astype(f32)
    g = rng.standard_normal(()).astype(f32)
    outs: dict[str, Any] = {}

    def kl_args(sess):
        outs["kl_bwd"] = sess.empty(x.shape, f32)
        return (sess.tensor(g), sess.tensor(x), sess.tensor(t), 3, False, outs["kl_bwd"])

    cases.append((Case("aclnnKlDivBackward", f"self {x.shape}, target {t.shape}", f32,
                       lambda sess: [sess.read(outs["kl_bwd"])],
                       lambda: [kl_div.kl_div_backward(_f64(g), _f64(t), x.shape, 3, False, np.dtype(np.float64))],
                       1e-5), acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward, kl_args))

    def kl_fwd_args(sess):
        outs["kl"] = sess.empty((), f32)
        return (sess.tensor(x), sess.tensor(t), 3, False, outs["kl"])

    cases.append((Case("aclnnKlDiv", f"self {x.shape}, target {t.shape}", f32,
                       lambda sess: [sess.read(outs["kl"])],
                       lambda: [kl_div.kl_div(_f64(x), _f64(t), 3, False, np.dtype(np.float64))], 1e-4),
                  acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, kl_fwd_args))

    # cross-entropy with weights, ignore_index and label smoothing
    n, c = 64 * s, 1000
    logits = rng.standard_normal((n, c)).astype(f32)
    target = rng.integers(0, c, n).astype(np.int64)
    target[::7] = -100
    weight = rng.random(c).astype(f32)
    _, log_prob64 = cross_entropy.cross_entropy_loss(_f64(logits), target, _f64(weight), "mean", -100, 0.1)
    log_prob = log_prob64.astype(f32)

    def ce_args(sess):
        outs["ce_bwd"] = sess.empty((n, c), f32)
        return (sess.tensor(np.float32(1.0)), sess.tensor(log_prob), sess.tensor(target), sess.tensor(weight),
                None, None, "mean", -100, 0.1, 0.0, outs["ce_bwd"])

    cases.append((Case("aclnnCrossEntropyLossGrad", f"logProb ({n}, {c})", f32,
                       lambda sess: [sess.read(outs["ce_bwd"])],
                       lambda: [cross_entropy.cross_entropy_loss_grad(np.float64(1.0), _f64(log_prob), target,
                                                                      _f64(weight), "mean", -100, 0.1)], 1e-5),
                  acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad, ce_args))

    def ce_fwd_args(sess):
        outs["ce_loss"], outs["ce_lp"] = sess.empty((), f32), sess.empty((n, c), f32)
        return (sess.tensor(logits), sess.tensor(target), sess.tensor(weight), "mean", -100, 0.1, 0.0, False,
                outs["ce_loss"], outs["ce_lp"], None, None)

    cases.append((Case("aclnnCrossEntropyLoss", f"input ({n}, {c})", f32,
                       lambda sess: [sess.read(outs["ce_loss"]), sess.read(outs["ce_lp"])],
                       lambda: list(cross_entropy.cross_entropy_loss(_f64(logits), target, _f64(weight), "mean",
                                                                     -100, 0.1)), 1e-5),
                  acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, ce_fwd_args))

    # CTC loss: a batch of mixed lengths
    T, N, C, L = 50, 4 * s, 20, 12
    lp = rng.standard_normal((T, N, C))
    lp = (lp - np.log(np.exp(lp).sum(-1, keepdims=True))).astype(f32)
    tl = rng.integers(1, L + 1, N)
    il = rng.integers(2 * L + 1, T + 1, N)
    targets = rng.integers(1, C, (N, L)).astype(np.int64)
    nll64, alpha64 = ctc_loss.ctc_loss_forward(_f64(lp), targets, il, tl, 0, False)
    grad_out = rng.random(N).astype(f32)

    def ctc_fwd_args(sess):
        outs["nll"], outs["alpha"] = sess.empty((N,), f32), sess.empty((N, T, 2 * int(tl.max()) + 1), f32)
        return (sess.tensor(lp), sess.tensor(targets), sess.int_array(il), sess.int_array(tl), 0, False,
                outs["nll"], outs["alpha"])

    cases.append((Case("aclnnCtcLoss", f"logProbs ({T}, {N}, {C}), L<={L}", f32,
                       lambda sess: [sess.read(outs["nll"])], lambda: [nll64], 1e-4),
                  acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss, ctc_fwd_args))

    def ctc_args(sess):
        outs["ctc_bwd"] = sess.empty((T, N, C), f32)
        return (sess.tensor(grad_out), sess.tensor(lp), sess.tensor(targets), sess.int_array(il), sess.int_array(tl),
                sess.tensor(nll64.astype(f32)), sess.tensor(alpha64.astype(f32)), 0, False, outs["ctc_bwd"])

    cases.append((Case("aclnnCtcLossBackward", f"logProbs ({T}, {N}, {C}), L<={L}", f32,
                       lambda sess: [sess.read(outs["ctc_bwd"])],
                       lambda: [ctc_loss.ctc_loss_backward(_f64(grad_out), _f64(lp), targets, il, tl, nll64,
                                                           alpha64, 0, False)], 1e-4),
                  acl.aclnnCtcLossBackwardGetWorkspaceSize, acl.aclnnCtcLossBackward, ctc_args))

    # ConvTBC
    T2, B2, Cin, Cout, K, pad = 32 * s, 4, 16, 24, 3, 1
    xi = rng.standard_normal((T2, B2, Cin)).astype(f32)
    w = rng.standard_normal((K, Cin, Cout)).astype(f32) * 0.2
    b = rng.standard_normal(Cout).astype(f32)
    dy = rng.standard_normal((T2 + 2 * pad - K + 1, B2, Cout)).astype(f32)

    def conv_args(sess):
        outs["gi"], outs["gw"], outs["gb"] = sess.empty(xi.shape, f32), sess.empty(w.shape, f32), \
            sess.empty(b.shape, f32)
        return (sess.tensor(dy), sess.tensor(xi), sess.tensor(w), sess.tensor(b), pad, 0, outs["gi"], outs["gw"],
                outs["gb"])

    cases.append((Case("aclnnConvTbcBackward", f"input {xi.shape}, weight {w.shape}, pad {pad}", f32,
                       lambda sess: [sess.read(outs["gi"]), sess.read(outs["gw"]), sess.read(outs["gb"])],
                       lambda: list(conv_tbc.conv_tbc_backward(_f64(dy), _f64(xi), _f64(w), _f64(b), pad)), 1e-4),
                  acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward, conv_args))

    def conv_fwd_args(sess):
        outs["y"] = sess.empty(dy.shape, f32)
        return (sess.tensor(xi), sess.tensor(w), sess.tensor(b), pad, outs["y"], 0)

    cases.append((Case("aclnnConvTbc", f"input {xi.shape}, weight {w.shape}, pad {pad}", f32,
                       lambda sess: [sess.read(outs["y"])],
                       lambda: [conv_tbc.conv_tbc(_f64(xi), _f64(w), _f64(b), pad)], 1e-4),
                  acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, conv_fwd_args))

    # scaled masked softmax, bf16, a mask broadcast over heads
    bf16 = dtypes.bfloat16
    shape = (2, 4, 32 * s, 128)
    xs = rng.standard_normal(shape).astype(bf16)
    mask = rng.random((2, 1, shape[2], shape[3])) < 0.2
    ys = smsm.scaled_masked_softmax(_f64(xs), mask, 0.125, False).astype(bf16)
    gs = rng.standard_normal(shape).astype(bf16)

    def sms_args(sess):
        outs["sms_bwd"] = sess.empty(shape, bf16)
        return (sess.tensor(gs), sess.tensor(ys), sess.tensor(mask), 0.125, False, outs["sms_bwd"])

    cases.append((Case("aclnnScaledMaskedSoftmaxBackward", f"{shape}, mask (2, 1, ...)", bf16,
                       lambda sess: [sess.read(outs["sms_bwd"])],
                       lambda: [smsm.scaled_masked_softmax_backward(_f64(gs), _f64(ys), mask, 0.125, False)], 2e-2),
                  acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, acl.aclnnScaledMaskedSoftmaxBackward,
                  sms_args))

    def sms_fwd_args(sess):
        outs["sms"] = sess.empty(shape, bf16)
        return (sess.tensor(xs), sess.tensor(mask), 0.125, False, outs["sms"])

    cases.append((Case("aclnnScaledMaskedSoftmax", f"{shape}, mask (2, 1, ...)", bf16,
                       lambda sess: [sess.read(outs["sms"])],
                       lambda: [smsm.scaled_masked_softmax(_f64(xs), mask, 0.125, False)], 2e-2),
                  acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax, sms_fwd_args))
    return cases


def max_error(results: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """Largest |result - expected| / (1 + |expected|) over all outputs (NaN where one was unwritten)."""
    worst = 0.0
    for got, want in zip(results, expected):
        got64, want64 = _f64(got), _f64(want)
        if got64.shape != want64.shape or np.isnan(got64).any() != np.isnan(want64).any():
            return float("nan")
        finite = np.isfinite(want64)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(got64[finite] - want64[finite]) / (1 + np.abs(want64[finite])))))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aclnn_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda", "emulated"], default=None,
                        help="device kind (default: ACLNN_GPU_DEVICE, else auto)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per operator (median reported)")
    args = parser.parse_args(argv)
    if args.device:
        os.environ["ACLNN_GPU_DEVICE"] = args.device
    import aclnn_gpu as acl
    if acl.aclrtSetDevice(0) != 0:
        print(f"error: {acl.aclGetRecentErrMsg()}", file=sys.stderr)
        return 2
    from ..runtime import get_device
    from .samples import DeviceArrays
    device = get_device()
    small = device.kind == "emulated"
    repeat = args.repeat or (2 if small else 10)
    print(f"aclnn_gpu {acl.__version__} demo on {device.describe()}\n")
    header = f"| {'operator':34} | {'shapes':46} | {'dtype':8} | {'device':8} | {'max error':>9} | {'ms':>8} | ok |"
    print(header)
    print("|" + "|".join("-" * (len(p)) for p in header.split("|")[1:-1]) + "|")
    failures = 0
    rng = np.random.default_rng(2026)
    with DeviceArrays() as session:
        for case, get_ws, execute, build_args in build_cases(rng, small):
            try:
                ms = _timed_run(session, get_ws, execute, build_args(session), repeat)
                error = max_error(case.run(session), case.reference())
                ok = error <= case.tolerance
            except Exception as e:  # noqa: BLE001 - the demo reports, then fails
                ms, error, ok = float("nan"), float("nan"), False
                print(f"  {case.name}: {e}", file=sys.stderr)
            failures += not ok
            print(f"| {case.name:34} | {case.shapes[:46]:46} | {case.dtype.name:8} | {device.kind:8} | "
                  f"{error:9.2e} | {ms:8.2f} | {'ok' if ok else 'NO'} |")
    print(f"\n{10 - failures} of 10 operators correct (max error is relative: |got - ref| / (1 + |ref|)).")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
