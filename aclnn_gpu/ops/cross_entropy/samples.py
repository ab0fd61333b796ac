"""Cross-entropy's samples: the demo's cases (aclnnCrossEntropyLossGrad and aclnnCrossEntropyLoss with
weights, ignore_index and label smoothing) against reference/cross_entropy.py in float64, and the
profiler's cases (inputs, layouts, z-loss, minimum bytes) with the variants its coverage needs. The
traffic budget of its kernels is traffic_budget.json beside this file."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...reference import cross_entropy
from ..samples import CoverageCase, DemoCase, DemoEntry, Drivers, ProfileCase, aligned, f64, layout, log_softmax
from . import api


def demo_cases(rng: np.random.Generator, small: bool) -> list[DemoEntry]:
    f32 = np.dtype(np.float32)
    n, c = 64 * (1 if small else 4), 1000
    logits = rng.standard_normal((n, c)).astype(f32)
    target = rng.integers(0, c, n).astype(np.int64)
    target[::7] = -100
    weight = rng.random(c).astype(f32)
    _, log_prob64 = cross_entropy.cross_entropy_loss(f64(logits), target, f64(weight), "mean", -100, 0.1)
    log_prob = log_prob64.astype(f32)
    outs: dict[str, Any] = {}

    def grad_args(sess):
        outs["ce_bwd"] = sess.empty((n, c), f32)
        return (sess.tensor(np.float32(1.0)), sess.tensor(log_prob), sess.tensor(target), sess.tensor(weight),
                None, None, "mean", -100, 0.1, 0.0, outs["ce_bwd"])

    def loss_args(sess):
        outs["ce_loss"], outs["ce_lp"] = sess.empty((), f32), sess.empty((n, c), f32)
        return (sess.tensor(logits), sess.tensor(target), sess.tensor(weight), "mean", -100, 0.1, 0.0, False,
                outs["ce_loss"], outs["ce_lp"], None, None)

    return [
        (DemoCase("aclnnCrossEntropyLossGrad", f"logProb ({n}, {c})", f32, lambda sess: [sess.read(outs["ce_bwd"])],
                  lambda: [cross_entropy.cross_entropy_loss_grad(np.float64(1.0), f64(log_prob), target, f64(weight),
                                                                 "mean", -100, 0.1)], 1e-5),
         api.aclnnCrossEntropyLossGradGetWorkspaceSize, api.aclnnCrossEntropyLossGrad, grad_args),
        (DemoCase("aclnnCrossEntropyLoss", f"input ({n}, {c})", f32,
                  lambda sess: [sess.read(outs["ce_loss"]), sess.read(outs["ce_lp"])],
                  lambda: list(cross_entropy.cross_entropy_loss(f64(logits), target, f64(weight), "mean", -100,
                                                                0.1)), 1e-5),
         api.aclnnCrossEntropyLossGetWorkspaceSize, api.aclnnCrossEntropyLoss, loss_args),
    ]


# Profiler dimensions besides sizes: `strided` (CrossEntropyLoss: logits as a transposed view),
# `stridedout` (CrossEntropyLossGrad through the two-phase API into a non-contiguous output), `zloss`
# (CANN's z-loss, scale 1e-4: lse (N,) out of the loss, into the gradient).
ZLOSS_SCALE = 1e-4


def _targets(d, rng):
    return aligned(rng.integers(0, d["C"], d["N"]).astype(np.int64))


def _loss(d, dt, rng, drivers: Drivers):
    x, t = layout(rng.standard_normal((d["N"], d["C"]), dtype=np.float32).astype(dt), d["strided"]), _targets(d, rng)
    k = ZLOSS_SCALE if d.get("zloss") else 0.0
    return lambda: drivers.functional.cross_entropy_loss(x, t, lse_square_scale_for_zloss=k)


def _grad(d, dt, rng, drivers: Drivers):
    x = rng.standard_normal((d["N"], d["C"]), dtype=np.float32)
    lp = aligned(log_softmax(x).astype(dt))
    t = _targets(d, rng)
    g = np.array(1.0, dtype=dt)
    F = drivers.functional
    if d["stridedout"]:
        return _grad_strided_out(g, lp, t, drivers)
    if d.get("zloss"):
        m = x.max(axis=1)
        lse = aligned((m + np.log(np.exp(x - m[:, None]).sum(axis=1))).astype(dt))
        return lambda: F.cross_entropy_loss_grad(g, lp, t, lse_square_scale_for_zloss=ZLOSS_SCALE, lse_for_zloss=lse)
    return lambda: F.cross_entropy_loss_grad(g, lp, t)


def _grad_strided_out(g, lp, t, drivers: Drivers):
    """The two-phase API with a non-contiguous gradient (functional's outputs are contiguous): the
    kernel writes a contiguous staging copy that strided_scatter spreads out."""
    from ...base.errors import aclGetRecentErrMsg

    def call():
        with drivers.device_arrays() as dev:
            out = dev.empty(lp.shape, lp.dtype, strided=True)
            status = dev.run(api.aclnnCrossEntropyLossGradGetWorkspaceSize, api.aclnnCrossEntropyLossGrad,
                             dev.tensor(g), dev.tensor(lp), dev.tensor(t), None, None, None, "mean", -100, 0.0,
                             0.0, out)
            if status:
                raise RuntimeError(f"aclnnCrossEntropyLossGrad: {status}: {aclGetRecentErrMsg()}")
    return call


PROFILE_CASES = [
    ProfileCase("CrossEntropyLoss", {"N": 64, "C": 4096, "strided": 0, "zloss": 0}, "bf16",
                "logits (N, C), int64 targets (zloss: + lse (N,) out)", _loss,
                lambda d, e: 2 * d["N"] * d["C"] * e + 8 * d["N"] + d.get("zloss", 0) * d["N"] * e),
    ProfileCase("CrossEntropyLossGrad", {"N": 64, "C": 4096, "stridedout": 0, "zloss": 0}, "bf16",
                "logProb (N, C), int64 targets, mean (zloss: + lse (N,) in)",
                _grad, lambda d, e: 2 * d["N"] * d["C"] * e + 8 * d["N"] + d.get("zloss", 0) * d["N"] * e),
]

# Besides the defaults, the cases that launch the rest of the family's kernels.
COVERAGE: list[CoverageCase] = [
    ("CrossEntropyLossGrad", {"stridedout": 1}),
    ("CrossEntropyLoss", {"strided": 1}),
    ("CrossEntropyLoss", {"N": 4, "C": 1024}),   # few short rows: one block per row (the defaults split)
]
