"""The scaled masked softmax's samples: the demo's cases (bf16, a mask broadcast over heads) against
reference/scaled_masked_softmax.py in float64, and the profiler's cases (inputs, minimum bytes) with
the long rows its coverage needs. The traffic budget of its kernels is traffic_budget.json beside this
file."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...base import dtypes
from ...reference import scaled_masked_softmax as smsm
from ..samples import CoverageCase, DemoCase, DemoEntry, Drivers, ProfileCase, aligned, f64, log_softmax, rand
from . import api


def demo_cases(rng: np.random.Generator, small: bool) -> list[DemoEntry]:
    bf16 = dtypes.bfloat16
    shape = (2, 4, 32 * (1 if small else 4), 128)
    xs = rng.standard_normal(shape).astype(bf16)
    mask = rng.random((2, 1, shape[2], shape[3])) < 0.2
    ys = smsm.scaled_masked_softmax(f64(xs), mask, 0.125, False).astype(bf16)
    gs = rng.standard_normal(shape).astype(bf16)
    outs: dict[str, Any] = {}

    def backward_args(sess):
        outs["sms_bwd"] = sess.empty(shape, bf16)
        return (sess.tensor(gs), sess.tensor(ys), sess.tensor(mask), 0.125, False, outs["sms_bwd"])

    def forward_args(sess):
        outs["sms"] = sess.empty(shape, bf16)
        return (sess.tensor(xs), sess.tensor(mask), 0.125, False, outs["sms"])

    shapes = f"{shape}, mask (2, 1, ...)"
    return [
        (DemoCase("aclnnScaledMaskedSoftmaxBackward", shapes, bf16, lambda sess: [sess.read(outs["sms_bwd"])],
                  lambda: [smsm.scaled_masked_softmax_backward(f64(gs), f64(ys), mask, 0.125, False)], 2e-2),
         api.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, api.aclnnScaledMaskedSoftmaxBackward, backward_args),
        (DemoCase("aclnnScaledMaskedSoftmax", shapes, bf16, lambda sess: [sess.read(outs["sms"])],
                  lambda: [smsm.scaled_masked_softmax(f64(xs), mask, 0.125, False)], 2e-2),
         api.aclnnScaledMaskedSoftmaxGetWorkspaceSize, api.aclnnScaledMaskedSoftmax, forward_args),
    ]


def _inputs(d, dt, rng):
    x = rand(rng, (d["B"], d["H"], d["S1"], d["S2"]), dt)
    mask = aligned(rng.random((d["MB"], d["MH"], d["S1"], d["S2"])) < 0.1)
    return x, mask


def _forward(d, dt, rng, drivers: Drivers):
    x, mask = _inputs(d, dt, rng)
    return lambda: drivers.functional.scaled_masked_softmax(x, mask, 0.5)


def _backward(d, dt, rng, drivers: Drivers):
    x, mask = _inputs(d, dt, rng)
    y = aligned(np.exp(log_softmax(x.astype(np.float32))).astype(dt))
    g = rand(rng, x.shape, dt)
    return lambda: drivers.functional.scaled_masked_softmax_backward(g, y, mask, 0.5)


def _elements(d):
    return int(np.prod([d[k] for k in ("B", "H", "S1", "S2")]))


def _mask_bytes(d):
    return d["MB"] * d["MH"] * d["S1"] * d["S2"]


PROFILE_CASES = [
    ProfileCase("ScaledMaskedSoftmax", {"B": 2, "H": 4, "S1": 64, "S2": 256, "MB": 2, "MH": 1}, "fp16",
                "x (B, H, S1, S2), bool mask (MB, MH, S1, S2)", _forward,
                lambda d, e: 2 * _elements(d) * e + _mask_bytes(d)),
    ProfileCase("ScaledMaskedSoftmaxBackward", {"B": 2, "H": 4, "S1": 64, "S2": 256, "MB": 2, "MH": 1}, "fp16",
                "gradOutput/y (B, H, S1, S2), bool mask (MB, MH, S1, S2)", _backward,
                lambda d, e: 3 * _elements(d) * e + _mask_bytes(d)),
]

# Besides the defaults, the long rows that launch the rest of the family's kernels.
COVERAGE: list[CoverageCase] = [
    ("ScaledMaskedSoftmax", {"B": 1, "H": 1, "S1": 2, "S2": 12288, "MB": 1}),
    ("ScaledMaskedSoftmax", {"B": 1, "H": 1, "S1": 2, "S2": 32768, "MB": 1}),
    ("ScaledMaskedSoftmaxBackward", {"B": 1, "H": 1, "S1": 2, "S2": 12288, "MB": 1}),
    ("ScaledMaskedSoftmaxBackward", {"B": 1, "H": 1, "S1": 2, "S2": 16384, "MB": 1}),
]
