"""ConvTbc's samples: the demo's cases (aclnnConvTbcBackward and aclnnConvTbc with padding) against
reference/conv_tbc.py in float64, and the profiler's cases (inputs; minimum bytes = the operands, read
once and written once; FLOP counts) with the variants its coverage needs. The traffic budget of its
kernels is traffic_budget.json beside this file."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...reference import conv_tbc
from ..samples import CoverageCase, DemoCase, DemoEntry, Drivers, ProfileCase, aligned, f64, rand
from . import api


def demo_cases(rng: np.random.Generator, small: bool) -> list[DemoEntry]:
    f32 = np.dtype(np.float32)
    T, B, Cin, Cout, K, pad = 32 * (1 if small else 4), 4, 16, 24, 3, 1
    xi = rng.standard_normal((T, B, Cin)).astype(f32)
    w = rng.standard_normal((K, Cin, Cout)).astype(f32) * 0.2
    b = rng.standard_normal(Cout).astype(f32)
    dy = rng.standard_normal((T + 2 * pad - K + 1, B, Cout)).astype(f32)
    outs: dict[str, Any] = {}

    def backward_args(sess):
        outs["gi"], outs["gw"], outs["gb"] = sess.empty(xi.shape, f32), sess.empty(w.shape, f32), \
            sess.empty(b.shape, f32)
        return (sess.tensor(dy), sess.tensor(xi), sess.tensor(w), sess.tensor(b), pad, 0, outs["gi"], outs["gw"],
                outs["gb"])

    def forward_args(sess):
        outs["y"] = sess.empty(dy.shape, f32)
        return (sess.tensor(xi), sess.tensor(w), sess.tensor(b), pad, outs["y"], 0)

    shapes = f"input {xi.shape}, weight {w.shape}, pad {pad}"
    return [
        (DemoCase("aclnnConvTbcBackward", shapes, f32,
                  lambda sess: [sess.read(outs["gi"]), sess.read(outs["gw"]), sess.read(outs["gb"])],
                  lambda: list(conv_tbc.conv_tbc_backward(f64(dy), f64(xi), f64(w), f64(b), pad)), 1e-4),
         api.aclnnConvTbcBackwardGetWorkspaceSize, api.aclnnConvTbcBackward, backward_args),
        (DemoCase("aclnnConvTbc", shapes, f32, lambda sess: [sess.read(outs["y"])],
                  lambda: [conv_tbc.conv_tbc(f64(xi), f64(w), f64(b), pad)], 1e-4),
         api.aclnnConvTbcGetWorkspaceSize, api.aclnnConvTbc, forward_args),
    ]


def _inputs(d, dt, rng):
    x = rand(rng, (d["T"], d["B"], d["Cin"]), dt)
    w = aligned((rand(rng, (d["K"], d["Cin"], d["Cout"]), np.float32) / np.sqrt(d["Cin"] * d["K"])).astype(dt))
    b = rand(rng, (d["Cout"],), dt)
    return x, w, b


def _t_out(d):
    return d["T"] + 2 * d["pad"] - d["K"] + 1


def _forward(d, dt, rng, drivers: Drivers):
    x, w, b = _inputs(d, dt, rng)
    return lambda: drivers.functional.conv_tbc(x, w, b, d["pad"])


def _backward(d, dt, rng, drivers: Drivers):
    x, w, b = _inputs(d, dt, rng)
    g = rand(rng, (_t_out(d), d["B"], d["Cout"]), dt)
    return lambda: drivers.functional.conv_tbc_backward(g, x, w, b, d["pad"])


def _operands(d, e, backward):
    x, w, b = d["T"] * d["B"] * d["Cin"], d["K"] * d["Cin"] * d["Cout"], d["Cout"]
    y = _t_out(d) * d["B"] * d["Cout"]
    # forward: read x, w, b, write y; backward: read grad, x, w, write gradInput, gradWeight, gradBias
    return (x + w + b + y) * e if not backward else (y + 2 * x + 2 * w + b) * e


def conv_flops(d: dict, backward: bool) -> int:
    """bench/README.md's FLOP counts of ConvTbc (forward) and ConvTbcBackward."""
    base = 2 * d["K"] * d["Cin"] * d["Cout"]
    return base * (_t_out(d) * d["B"] + (d["T"] * d["B"] if backward else 0))


PROFILE_CASES = [
    ProfileCase("ConvTbc", {"T": 64, "B": 4, "Cin": 64, "Cout": 64, "K": 3, "pad": 1}, "fp16",
                "input (T, B, Cin), weight (K, Cin, Cout); min bytes = operands", _forward,
                lambda d, e: _operands(d, e, False), memory_bound=False),
    ProfileCase("ConvTbcBackward", {"T": 64, "B": 4, "Cin": 64, "Cout": 64, "K": 3, "pad": 1}, "fp16",
                "grad (Tout, B, Cout), input, weight, bias; min bytes = operands", _backward,
                lambda d, e: _operands(d, e, True), memory_bound=False),
]

# Besides the defaults, the cases that launch the rest of the family's kernels.
COVERAGE: list[CoverageCase] = [
    ("ConvTbcBackward", {"T": 0, "K": 2}),
    ("ConvTbcBackward", {"T": 2048}),          # split gradWeight, gradBias in row chunks: tbc_reduce
]
