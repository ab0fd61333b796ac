"""CTC loss's samples: the demo's cases (aclnnCtcLoss and aclnnCtcLossBackward on a batch of mixed
lengths) against reference/ctc_loss.py in float64, and the profiler's cases (inputs, float targets,
minimum bytes) with the variants its coverage needs (long targets, the split recursions, 16-bit
storage). The traffic budget of its kernels is traffic_budget.json beside this file."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...reference import ctc_loss
from ..samples import CoverageCase, DemoCase, DemoEntry, Drivers, ProfileCase, aligned, f64, log_softmax
from . import api


def demo_cases(rng: np.random.Generator, small: bool) -> list[DemoEntry]:
    f32 = np.dtype(np.float32)
    T, N, C, L = 50, 4 * (1 if small else 4), 20, 12
    lp = rng.standard_normal((T, N, C))
    lp = (lp - np.log(np.exp(lp).sum(-1, keepdims=True))).astype(f32)
    tl = rng.integers(1, L + 1, N)
    il = rng.integers(2 * L + 1, T + 1, N)
    targets = rng.integers(1, C, (N, L)).astype(np.int64)
    nll64, alpha64 = ctc_loss.ctc_loss_forward(f64(lp), targets, il, tl, 0, False)
    grad_out = rng.random(N).astype(f32)
    outs: dict[str, Any] = {}

    def forward_args(sess):
        outs["nll"], outs["alpha"] = sess.empty((N,), f32), sess.empty((N, T, 2 * int(tl.max()) + 1), f32)
        return (sess.tensor(lp), sess.tensor(targets), sess.int_array(il), sess.int_array(tl), 0, False,
                outs["nll"], outs["alpha"])

    def backward_args(sess):
        outs["ctc_bwd"] = sess.empty((T, N, C), f32)
        return (sess.tensor(grad_out), sess.tensor(lp), sess.tensor(targets), sess.int_array(il), sess.int_array(tl),
                sess.tensor(nll64.astype(f32)), sess.tensor(alpha64.astype(f32)), 0, False, outs["ctc_bwd"])

    shapes = f"logProbs ({T}, {N}, {C}), L<={L}"
    return [
        (DemoCase("aclnnCtcLoss", shapes, f32, lambda sess: [sess.read(outs["nll"])], lambda: [nll64], 1e-4),
         api.aclnnCtcLossGetWorkspaceSize, api.aclnnCtcLoss, forward_args),
        (DemoCase("aclnnCtcLossBackward", shapes, f32, lambda sess: [sess.read(outs["ctc_bwd"])],
                  lambda: [ctc_loss.ctc_loss_backward(f64(grad_out), f64(lp), targets, il, tl, nll64, alpha64, 0,
                                                      False)], 1e-4),
         api.aclnnCtcLossBackwardGetWorkspaceSize, api.aclnnCtcLossBackward, backward_args),
    ]


# Profiler dimension besides sizes: `fptargets` (float targets, cast on the device).

def _inputs(d, dt, rng):
    T, N, C, L = d["T"], d["N"], d["C"], d["L"]
    lp = aligned(log_softmax(rng.standard_normal((T, N, C), dtype=np.float32)).astype(dt))
    targets = aligned(rng.integers(1, C, (N, L)).astype(np.float32 if d["fptargets"] else np.int64))
    return lp, targets, [T] * N, [L] * N


def _forward(d, dt, rng, drivers: Drivers):
    lp, tg, il, tl = _inputs(d, dt, rng)
    return lambda: drivers.functional.ctc_loss(lp, tg, il, tl)


def _backward(d, dt, rng, drivers: Drivers):
    F = drivers.functional
    lp, tg, il, tl = _inputs(d, dt, rng)
    nll, alpha = (aligned(a) for a in F.ctc_loss(lp, tg, il, tl))   # the forward runs before the profile
    g = aligned(np.ones(d["N"], dtype=dt))
    return lambda: F.ctc_loss_backward(g, lp, tg, il, tl, nll, alpha)


PROFILE_CASES = [
    ProfileCase("CtcLoss", {"T": 50, "N": 4, "C": 200, "L": 10, "fptargets": 0}, "fp32",
                "logProbs (T, N, C), targets (N, L)", _forward,
                lambda d, e: d["T"] * d["N"] * (min(d["C"], d["L"] + 1) + 2 * d["L"] + 1) * e + 8 * d["N"] * d["L"]),
    ProfileCase("CtcLossBackward", {"T": 50, "N": 4, "C": 200, "L": 10, "fptargets": 0}, "fp32",
                "logProbs (T, N, C), targets (N, L); the forward runs before the profile", _backward,
                lambda d, e: (2 * d["T"] * d["N"] * d["C"] + d["T"] * d["N"] * (2 * d["L"] + 1)) * e
                + 8 * d["N"] * d["L"]),
]

# Besides the defaults, the cases that launch the rest of the family's kernels (the backward of 16-bit
# storage has kernels of its own).
COVERAGE: list[CoverageCase] = [
    ("CtcLoss", {"fptargets": 1}),
    ("CtcLoss", {"T": 4, "N": 1, "L": 2100}), ("CtcLossBackward", {"T": 4, "N": 1, "L": 2100}),   # long targets
    ("CtcLossBackward", {}, "fp16"), ("CtcLossBackward", {"T": 4, "N": 1, "L": 2100}, "bf16"),
    # few samples, many steps: the split recursions (ops/ctc_loss/launch.recursion_split)
    ("CtcLoss", {"T": 256, "N": 4, "L": 40}), ("CtcLossBackward", {"T": 256, "N": 4, "L": 40}),
    # (fp16: 2 * N * J = 66 blocks, all resident on the emulated device's 4 SMs at 19 blocks each)
    ("CtcLossBackward", {"T": 300, "N": 3, "L": 40}, "fp16"),
]
