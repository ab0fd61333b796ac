"""The ten operators as the profiler drives them: inputs of a given shape, the public `functional`
call that runs on the emulated device, and the operator's minimum bytes (bench/README.md's formulas;
for ConvTbc, the bytes of its operands, read once and written once).

Each case is a named set of dimensions with small defaults (`dims`), the dtype, and `run(dims, dtype,
rng) -> (prepare, call)`: `prepare()` runs what the call needs first (a forward, outside the profile)
and `call()` is the profiled operator call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
          "fp64": np.dtype(np.float64)}


@dataclass(frozen=True)
class Operator:
    name: str                    # the aclnn name
    dims: dict[str, int]         # default (small) shape
    dtype: str
    doc: str                     # what the dimensions mean
    setup: Callable              # (dims, dtype, rng) -> call() (prepare work done inside setup)
    min_bytes: Callable          # (dims, itemsize) -> int
    memory_bound: bool = True


def _log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def aligned(a: np.ndarray, align: int = 256) -> np.ndarray:
    """A copy of `a` whose data start `align`-byte aligned, like cudaMalloc's (the functional API lends
    the caller's arrays to the emulated device; NumPy's own 16-byte alignment would make every warp's
    16-byte request straddle one more 32-byte sector than on a GPU)."""
    a = np.asarray(a)
    raw = np.empty(a.nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _rand(rng, shape, dtype) -> np.ndarray:
    return aligned(rng.standard_normal(shape, dtype=np.float32).astype(dtype))


def _F():
    from aclnn_gpu import functional
    return functional


def _kl(d, dt, rng):
    x = aligned(np.log(rng.uniform(0.05, 1.0, (d["N"], d["C"])).astype(np.float32)).astype(dt))
    t = aligned(rng.uniform(0.0, 1.0, (d["N"], d["C"])).astype(dt))
    return lambda: _F().kl_div(x, t, "mean")


def _kl_bwd(d, dt, rng):
    x = aligned(np.log(rng.uniform(0.05, 1.0, (d["N"], d["C"])).astype(np.float32)).astype(dt))
    t = aligned(rng.uniform(0.0, 1.0, (d["N"], d["C"])).astype(dt))
    g = np.array(1.0, dtype=dt)
    return lambda: _F().kl_div_backward(g, x, t, "mean")


def _targets(d, rng):
    return aligned(rng.integers(0, d["C"], d["N"]).astype(np.int64))


def _ce(d, dt, rng):
    x, t = _rand(rng, (d["N"], d["C"]), dt), _targets(d, rng)
    return lambda: _F().cross_entropy_loss(x, t)


def _ce_grad(d, dt, rng):
    lp = aligned(_log_softmax(rng.standard_normal((d["N"], d["C"]), dtype=np.float32)).astype(dt))
    t = _targets(d, rng)
    g = np.array(1.0, dtype=dt)
    return lambda: _F().cross_entropy_loss_grad(g, lp, t)


def _softmax_inputs(d, dt, rng):
    x = _rand(rng, (d["B"], d["H"], d["S1"], d["S2"]), dt)
    mask = aligned(rng.random((d["MB"], d["MH"], d["S1"], d["S2"])) < 0.1)
    return x, mask


def _smsm(d, dt, rng):
    x, mask = _softmax_inputs(d, dt, rng)
    return lambda: _F().scaled_masked_softmax(x, mask, 0.5)


def _smsm_bwd(d, dt, rng):
    x, mask = _softmax_inputs(d, dt, rng)
    y = aligned(np.exp(_log_softmax(x.astype(np.float32))).astype(dt))
    g = _rand(rng, x.shape, dt)
    return lambda: _F().scaled_masked_softmax_backward(g, y, mask, 0.5)


def _ctc_inputs(d, dt, rng):
    T, N, C, L = d["T"], d["N"], d["C"], d["L"]
    lp = aligned(_log_softmax(rng.standard_normal((T, N, C), dtype=np.float32)).astype(dt))
    targets = aligned(rng.integers(1, C, (N, L)).astype(np.int64))
    return lp, targets, [T] * N, [L] * N


def _ctc(d, dt, rng):
    lp, tg, il, tl = _ctc_inputs(d, dt, rng)
    return lambda: _F().ctc_loss(lp, tg, il, tl)


def _ctc_bwd(d, dt, rng):
    lp, tg, il, tl = _ctc_inputs(d, dt, rng)
    nll, alpha = (aligned(a) for a in _F().ctc_loss(lp, tg, il, tl))   # the forward runs before the profile
    g = aligned(np.ones(d["N"], dtype=dt))
    return lambda: _F().ctc_loss_backward(g, lp, tg, il, tl, nll, alpha)


def _conv_inputs(d, dt, rng):
    x = _rand(rng, (d["T"], d["B"], d["Cin"]), dt)
    w = aligned((_rand(rng, (d["K"], d["Cin"], d["Cout"]), np.float32) / np.sqrt(d["Cin"] * d["K"])).astype(dt))
    b = _rand(rng, (d["Cout"],), dt)
    return x, w, b


def _t_out(d):
    return d["T"] + 2 * d["pad"] - d["K"] + 1


def _conv(d, dt, rng):
    x, w, b = _conv_inputs(d, dt, rng)
    return lambda: _F().conv_tbc(x, w, b, d["pad"])


def _conv_bwd(d, dt, rng):
    x, w, b = _conv_inputs(d, dt, rng)
    g = _rand(rng, (_t_out(d), d["B"], d["Cout"]), dt)
    return lambda: _F().conv_tbc_backward(g, x, w, b, d["pad"])


def _conv_operands(d, e, backward):
    x, w, b = d["T"] * d["B"] * d["Cin"], d["K"] * d["Cin"] * d["Cout"], d["Cout"]
    y = _t_out(d) * d["B"] * d["Cout"]
    # forward: read x, w, b, write y; backward: read grad, x, w, write gradInput, gradWeight, gradBias
    return (x + w + b + y) * e if not backward else (y + 2 * x + 2 * w + b) * e


M = lambda d: int(np.prod([d[k] for k in ("B", "H", "S1", "S2")]))  # noqa: E731
MASK = lambda d: d["MB"] * d["MH"] * d["S1"] * d["S2"]  # noqa: E731

OPERATORS: dict[str, Operator] = {op.name: op for op in [
    Operator("KlDiv", {"N": 256, "C": 1024}, "fp32", "self/target (N, C), reduction mean", _kl,
             lambda d, e: 2 * d["N"] * d["C"] * e),
    Operator("KlDivBackward", {"N": 256, "C": 1024}, "fp32", "gradOutput 0-D, self/target (N, C), mean",
             _kl_bwd, lambda d, e: 2 * d["N"] * d["C"] * e),
    Operator("CrossEntropyLoss", {"N": 64, "C": 4096}, "bf16", "logits (N, C), int64 targets", _ce,
             lambda d, e: 2 * d["N"] * d["C"] * e + 8 * d["N"]),
    Operator("CrossEntropyLossGrad", {"N": 64, "C": 4096}, "bf16", "logProb (N, C), int64 targets, mean",
             _ce_grad, lambda d, e: 2 * d["N"] * d["C"] * e + 8 * d["N"]),
    Operator("ScaledMaskedSoftmax", {"B": 2, "H": 4, "S1": 64, "S2": 256, "MB": 2, "MH": 1}, "fp16",
             "x (B, H, S1, S2), bool mask (MB, MH, S1, S2)", _smsm, lambda d, e: 2 * M(d) * e + MASK(d)),
    Operator("ScaledMaskedSoftmaxBackward", {"B": 2, "H": 4, "S1": 64, "S2": 256, "MB": 2, "MH": 1}, "fp16",
             "gradOutput/y (B, H, S1, S2), bool mask (MB, MH, S1, S2)", _smsm_bwd,
             lambda d, e: 3 * M(d) * e + MASK(d)),
    Operator("CtcLoss", {"T": 50, "N": 4, "C": 200, "L": 10}, "fp32", "logProbs (T, N, C), targets (N, L)", _ctc,
             lambda d, e: d["T"] * d["N"] * (min(d["C"], d["L"] + 1) + 2 * d["L"] + 1) * e + 8 * d["N"] * d["L"]),
    Operator("CtcLossBackward", {"T": 50, "N": 4, "C": 200, "L": 10}, "fp32",
             "logProbs (T, N, C), targets (N, L); the forward runs before the profile", _ctc_bwd,
             lambda d, e: (2 * d["T"] * d["N"] * d["C"] + d["T"] * d["N"] * (2 * d["L"] + 1)) * e + 8 * d["N"] * d["L"]),
    Operator("ConvTbc", {"T": 64, "B": 4, "Cin": 64, "Cout": 64, "K": 3, "pad": 1}, "fp16",
             "input (T, B, Cin), weight (K, Cin, Cout); min bytes = operands", _conv,
             lambda d, e: _conv_operands(d, e, False), memory_bound=False),
    Operator("ConvTbcBackward", {"T": 64, "B": 4, "Cin": 64, "Cout": 64, "K": 3, "pad": 1}, "fp16",
             "grad (Tout, B, Cout), input, weight, bias; min bytes = operands", _conv_bwd,
             lambda d, e: _conv_operands(d, e, True), memory_bound=False),
]}


def conv_flops(d: dict, backward: bool) -> int:
    """bench/README.md's FLOP counts of ConvTbc (forward) and ConvTbcBackward."""
    base = 2 * d["K"] * d["Cin"] * d["Cout"]
    return base * (_t_out(d) * d["B"] + (d["T"] * d["B"] if backward else 0))
