"""The ten operators as the profiler drives them: inputs of a given shape, the public `functional`
call that runs on the emulated device, and the operator's minimum bytes (bench/README.md's formulas;
for ConvTbc, the bytes of its operands, read once and written once).

Each case is a named set of dimensions with small defaults (`dims`), the dtype, and `setup(dims,
dtype, rng) -> call`: setup runs what the call needs first (a forward, outside the profile) and
`call()` is the profiled operator call. Besides sizes, some dimensions are layout switches (0/1):
`strided` (the main inputs are transposed views: the strided kernels or the gather copies),
`stridedout` (CrossEntropyLossGrad through the two-phase API into a non-contiguous output), `zloss`
(CrossEntropyLoss / CrossEntropyLossGrad with CANN's z-loss, scale 1e-4: lse (N,) out / in), `none`
(KlDiv: reduction none), `bcast` (KlDivBackward: self (1, C) against target (N, C), a reduced
gradient), `fptargets` (CTC: float targets, cast on the device). COVERAGE lists the cases that
together launch every kernel family of the ten operators (the minimum bytes of a layout variant are
those of the contiguous call: a reference, not a bound).
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


def _layout(a: np.ndarray, strided: int) -> np.ndarray:
    """`a` itself, or (strided) the same values as a transposed view of a contiguous aligned array."""
    if not strided:
        return aligned(a)
    return aligned(np.ascontiguousarray(np.swapaxes(a, -1, -2))).swapaxes(-1, -2)


def _kl_inputs(d, dt, rng, x_rows=None):
    x = np.log(rng.uniform(0.05, 1.0, (x_rows or d["N"], d["C"])).astype(np.float32)).astype(dt)
    t = rng.uniform(0.0, 1.0, (d["N"], d["C"])).astype(dt)
    return _layout(x, d["strided"]), _layout(t, d["strided"])


def _kl(d, dt, rng):
    x, t = _kl_inputs(d, dt, rng)
    return lambda: _F().kl_div(x, t, "none" if d["none"] else "mean")


def _kl_bwd(d, dt, rng):
    x, t = _kl_inputs(d, dt, rng, 1 if d["bcast"] else None)
    g = np.array(1.0, dtype=dt)
    return lambda: _F().kl_div_backward(g, x, t, "mean")


def _targets(d, rng):
    return aligned(rng.integers(0, d["C"], d["N"]).astype(np.int64))


ZLOSS_SCALE = 1e-4


def _ce(d, dt, rng):
    x, t = _layout(rng.standard_normal((d["N"], d["C"]), dtype=np.float32).astype(dt), d["strided"]), _targets(d, rng)
    k = ZLOSS_SCALE if d.get("zloss") else 0.0
    return lambda: _F().cross_entropy_loss(x, t, lse_square_scale_for_zloss=k)


def _ce_grad(d, dt, rng):
    x = rng.standard_normal((d["N"], d["C"]), dtype=np.float32)
    lp = aligned(_log_softmax(x).astype(dt))
    t = _targets(d, rng)
    g = np.array(1.0, dtype=dt)
    if d["stridedout"]:
        return _ce_grad_strided_out(g, lp, t)
    if d.get("zloss"):
        m = x.max(axis=1)
        lse = aligned((m + np.log(np.exp(x - m[:, None]).sum(axis=1))).astype(dt))
        return lambda: _F().cross_entropy_loss_grad(g, lp, t, lse_square_scale_for_zloss=ZLOSS_SCALE,
                                                    lse_for_zloss=lse)
    return lambda: _F().cross_entropy_loss_grad(g, lp, t)


def _ce_grad_strided_out(g, lp, t):
    """The two-phase API with a non-contiguous gradient (functional's outputs are contiguous): the
    kernel writes a contiguous staging copy that strided_scatter spreads out."""
    import aclnn_gpu as acl
    from aclnn_gpu.demo.samples import DeviceArrays

    def call():
        with DeviceArrays() as dev:
            out = dev.empty(lp.shape, lp.dtype, strided=True)
            status = dev.run(acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad,
                             dev.tensor(g), dev.tensor(lp), dev.tensor(t), None, None, None, "mean", -100, 0.0,
                             0.0, out)
            if status:
                raise RuntimeError(f"aclnnCrossEntropyLossGrad: {status}: {acl.aclGetRecentErrMsg()}")
    return call


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
    targets = aligned(rng.integers(1, C, (N, L)).astype(np.float32 if d["fptargets"] else np.int64))
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
    Operator("KlDiv", {"N": 256, "C": 1024, "strided": 0, "none": 0}, "fp32", "self/target (N, C), mean", _kl,
             lambda d, e: 2 * d["N"] * d["C"] * e),
    Operator("KlDivBackward", {"N": 256, "C": 1024, "strided": 0, "bcast": 0}, "fp32",
             "gradOutput 0-D, self/target (N, C), mean",
             _kl_bwd, lambda d, e: 2 * d["N"] * d["C"] * e),
    Operator("CrossEntropyLoss", {"N": 64, "C": 4096, "strided": 0, "zloss": 0}, "bf16",
             "logits (N, C), int64 targets (zloss: + lse (N,) out)", _ce,
             lambda d, e: 2 * d["N"] * d["C"] * e + 8 * d["N"] + d.get("zloss", 0) * d["N"] * e),
    Operator("CrossEntropyLossGrad", {"N": 64, "C": 4096, "stridedout": 0, "zloss": 0}, "bf16",
             "logProb (N, C), int64 targets, mean (zloss: + lse (N,) in)",
             _ce_grad, lambda d, e: 2 * d["N"] * d["C"] * e + 8 * d["N"] + d.get("zloss", 0) * d["N"] * e),
    Operator("ScaledMaskedSoftmax", {"B": 2, "H": 4, "S1": 64, "S2": 256, "MB": 2, "MH": 1}, "fp16",
             "x (B, H, S1, S2), bool mask (MB, MH, S1, S2)", _smsm, lambda d, e: 2 * M(d) * e + MASK(d)),
    Operator("ScaledMaskedSoftmaxBackward", {"B": 2, "H": 4, "S1": 64, "S2": 256, "MB": 2, "MH": 1}, "fp16",
             "gradOutput/y (B, H, S1, S2), bool mask (MB, MH, S1, S2)", _smsm_bwd,
             lambda d, e: 3 * M(d) * e + MASK(d)),
    Operator("CtcLoss", {"T": 50, "N": 4, "C": 200, "L": 10, "fptargets": 0}, "fp32",
             "logProbs (T, N, C), targets (N, L)", _ctc,
             lambda d, e: d["T"] * d["N"] * (min(d["C"], d["L"] + 1) + 2 * d["L"] + 1) * e + 8 * d["N"] * d["L"]),
    Operator("CtcLossBackward", {"T": 50, "N": 4, "C": 200, "L": 10, "fptargets": 0}, "fp32",
             "logProbs (T, N, C), targets (N, L); the forward runs before the profile", _ctc_bwd,
             lambda d, e: (2 * d["T"] * d["N"] * d["C"] + d["T"] * d["N"] * (2 * d["L"] + 1)) * e
             + 8 * d["N"] * d["L"]),
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


# Cases that together launch every kernel family of the ten operators (tests/kernels/test_traffic_budget.py
# checks them against kernels/manifest.py): the defaults, plus layout variants and long softmax rows; a
# third item is the element type when it is not the operator's (the CTC backward of 16-bit storage
# has kernels of its own).
_Case = tuple[str, dict] | tuple[str, dict, str]
COVERAGE: list[_Case] = [(name, {}) for name in OPERATORS]
COVERAGE += [
    ("KlDiv", {"none": 1}), ("KlDiv", {"strided": 1}), ("KlDiv", {"strided": 1, "none": 1}),
    ("KlDivBackward", {"strided": 1}), ("KlDivBackward", {"bcast": 1, "N": 1024, "C": 64}),
    ("CrossEntropyLossGrad", {"stridedout": 1}),
    ("CrossEntropyLoss", {"strided": 1}),
    ("CrossEntropyLoss", {"N": 4, "C": 1024}),   # few short rows: one block per row (the defaults split)
    ("ScaledMaskedSoftmax", {"B": 1, "H": 1, "S1": 2, "S2": 12288, "MB": 1}),
    ("ScaledMaskedSoftmax", {"B": 1, "H": 1, "S1": 2, "S2": 32768, "MB": 1}),
    ("ScaledMaskedSoftmaxBackward", {"B": 1, "H": 1, "S1": 2, "S2": 12288, "MB": 1}),
    ("ScaledMaskedSoftmaxBackward", {"B": 1, "H": 1, "S1": 2, "S2": 16384, "MB": 1}),
    ("CtcLoss", {"fptargets": 1}),
    ("CtcLoss", {"T": 4, "N": 1, "L": 2100}), ("CtcLossBackward", {"T": 4, "N": 1, "L": 2100}),   # long targets
    ("CtcLossBackward", {}, "fp16"), ("CtcLossBackward", {"T": 4, "N": 1, "L": 2100}, "bf16"),
    # few samples, many steps: the split recursions (ops/ctc_loss/launch.recursion_split)
    ("CtcLoss", {"T": 256, "N": 4, "L": 40}), ("CtcLossBackward", {"T": 256, "N": 4, "L": 40}),
    # (fp16: 2 * N * J = 66 blocks, all resident on the emulated device's 4 SMs at 19 blocks each)
    ("CtcLossBackward", {"T": 300, "N": 3, "L": 40}, "fp16"),
    ("ConvTbcBackward", {"T": 0, "K": 2}),
    ("ConvTbcBackward", {"T": 2048}),          # split gradWeight, gradBias in row chunks: tbc_reduce
]
