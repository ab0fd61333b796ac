"""The KL divergence's samples: the demo's cases (aclnnKlDivBackward with a target that broadcasts
beyond self, aclnnKlDiv) against reference/kl_div.py in float64, and the profiler's cases (inputs,
layouts and minimum bytes: self and target read once) with the layout variants its coverage needs.
The traffic budget of its kernels is traffic_budget.json beside this file."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...reference import kl_div
from ..samples import CoverageCase, DemoCase, DemoEntry, Drivers, ProfileCase, f64, layout
from . import api


def demo_cases(rng: np.random.Generator, small: bool) -> list[DemoEntry]:
    f32 = np.dtype(np.float32)
    s = 1 if small else 4
    x = rng.standard_normal((8 * s, 1, 64)).astype(f32)
    t = rng.random((8 * s, 16, 64)).astype(f32)
    g = rng.standard_normal(()).astype(f32)
    outs: dict[str, Any] = {}

    def backward_args(sess):
        outs["kl_bwd"] = sess.empty(x.shape, f32)
        return (sess.tensor(g), sess.tensor(x), sess.tensor(t), 3, False, outs["kl_bwd"])

    def forward_args(sess):
        outs["kl"] = sess.empty((), f32)
        return (sess.tensor(x), sess.tensor(t), 3, False, outs["kl"])

    shapes = f"self {x.shape}, target {t.shape}"
    return [
        (DemoCase("aclnnKlDivBackward", shapes, f32, lambda sess: [sess.read(outs["kl_bwd"])],
                  lambda: [kl_div.kl_div_backward(f64(g), f64(t), x.shape, 3, False, np.dtype(np.float64))], 1e-5),
         api.aclnnKlDivBackwardGetWorkspaceSize, api.aclnnKlDivBackward, backward_args),
        (DemoCase("aclnnKlDiv", shapes, f32, lambda sess: [sess.read(outs["kl"])],
                  lambda: [kl_div.kl_div(f64(x), f64(t), 3, False, np.dtype(np.float64))], 1e-4),
         api.aclnnKlDivGetWorkspaceSize, api.aclnnKlDiv, forward_args),
    ]


# Profiler dimensions besides sizes: `strided` (self and target as transposed views), `none` (KlDiv:
# reduction none), `bcast` (KlDivBackward: self (1, C) against target (N, C), a reduced gradient).

def _inputs(d, dt, rng, x_rows=None):
    x = np.log(rng.uniform(0.05, 1.0, (x_rows or d["N"], d["C"])).astype(np.float32)).astype(dt)
    t = rng.uniform(0.0, 1.0, (d["N"], d["C"])).astype(dt)
    return layout(x, d["strided"]), layout(t, d["strided"])


def _forward(d, dt, rng, drivers: Drivers):
    x, t = _inputs(d, dt, rng)
    return lambda: drivers.functional.kl_div(x, t, "none" if d["none"] else "mean")


def _backward(d, dt, rng, drivers: Drivers):
    x, t = _inputs(d, dt, rng, 1 if d["bcast"] else None)
    g = np.array(1.0, dtype=dt)
    return lambda: drivers.functional.kl_div_backward(g, x, t, "mean")


PROFILE_CASES = [
    ProfileCase("KlDiv", {"N": 256, "C": 1024, "strided": 0, "none": 0}, "fp32", "self/target (N, C), mean", _forward,
                lambda d, e: 2 * d["N"] * d["C"] * e),
    ProfileCase("KlDivBackward", {"N": 256, "C": 1024, "strided": 0, "bcast": 0}, "fp32",
                "gradOutput 0-D, self/target (N, C), mean",
                _backward, lambda d, e: 2 * d["N"] * d["C"] * e),
]

# Besides the defaults, the cases that launch the rest of the family's kernels.
COVERAGE: list[CoverageCase] = [
    ("KlDiv", {"none": 1}), ("KlDiv", {"strided": 1}), ("KlDiv", {"strided": 1, "none": 1}),
    ("KlDivBackward", {"strided": 1}), ("KlDivBackward", {"bcast": 1, "N": 1024, "C": 64}),
]
