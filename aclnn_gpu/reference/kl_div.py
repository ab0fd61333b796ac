"""KL divergence in NumPy: the cpu device's implementation and the tests' second reference.

Semantics (docs/OPERATORS.md §3): on B = broadcast(self, target),
forward  `t * (log t - x)` (0 where t == 0, as PyTorch's xlogy) or, with log_target,
`exp(t) * (t - x)`, reduced by none / mean (1/numel B) / sum / batchmean (1/B[0]; 0/0 = NaN for an
empty B, as PyTorch);
backward `-(e * g) * coef` with e = t or exp(t), summed back to self's shape.
Math runs in `math_dtype` (float32 unless a float64 tensor is involved).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import lowp, parallel

NONE, MEAN, SUM, BATCHMEAN = 0, 1, 2, 3

# Elements per chunk of the reduced forward: its float32 scratch (three chunks) stays in the L2 cache
# and no full-size temporary is made (fresh arrays of a few MiB page-fault on every call: the forward
# at 400 x 1024 took 4x PyTorch's time that way).
_CHUNK = 1 << 16
_PARALLEL_MIN = 1 << 19   # elements: below this one thread is faster


def coefficient(reduction: int, broadcast_shape: Sequence[int]) -> float:
    """The reduction's divisor as a factor. Dividing by 0 (mean of an empty B, batchmean with B[0] = 0)
    gives NaN for the loss, 0 / 0, as PyTorch and the cuda kernels give (docs/API.md §7 lists no
    departure here)."""
    if reduction == MEAN:
        count = math.prod(broadcast_shape)
        return 1.0 / count if count else math.nan
    if reduction == BATCHMEAN:
        if not len(broadcast_shape):
            return 1.0
        return 1.0 / broadcast_shape[0] if broadcast_shape[0] else math.nan
    return 1.0


def sum_to_shape(values: np.ndarray, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """Sum a broadcast result back to `shape` (the axes along which `shape` was broadcast)."""
    lead = values.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and values.shape[lead + i] != 1)
    if axes:
        values = values.sum(axis=axes, dtype=dtype, keepdims=True)
        values = values.reshape(values.shape[lead:])
    return values.reshape(shape)


def kl_div_backward(grad_output: np.ndarray, target: np.ndarray, self_shape: Sequence[int], reduction: int,
                    log_target: bool, math_dtype: np.dtype = np.dtype(np.float32),
                    out: np.ndarray | None = None) -> np.ndarray:
    """d(kl_div)/d(self), shape `self_shape`, in `math_dtype`; or stored into `out` (an array of
    `self_shape`, any float dtype and strides, not overlapping the inputs), which is returned."""
    broadcast = np.broadcast_shapes(tuple(self_shape), target.shape, grad_output.shape)
    coef = coefficient(reduction, broadcast)
    if (out is not None and grad_output.size == 1 and target.shape == broadcast == tuple(self_shape)
            and target.dtype == out.dtype == math_dtype):
        # the common case (a scalar loss gradient): straight into out, no temporary, and the kernels'
        # rounding: -(e * g) * coef (the sign flip is exact)
        g = grad_output.astype(math_dtype).reshape(())
        if log_target:
            np.exp(target, out=out)
            np.multiply(out, g, out=out)
        else:
            np.multiply(target, g, out=out)
        np.multiply(out, math_dtype.type(-coef), out=out)
        return out
    result = _kl_div_backward(grad_output, target, self_shape, coef, broadcast, log_target, math_dtype)
    if out is None:
        return result
    np.copyto(out, result, casting="unsafe")
    return out


def _kl_div_backward(grad_output, target, self_shape, coef, broadcast, log_target, math_dtype):
    result = target.astype(math_dtype)            # always a fresh array: safe to work in place
    if log_target:
        np.exp(result, out=result)
    grad = grad_output.astype(math_dtype, copy=False)
    if grad.shape == result.shape:
        np.multiply(result, grad, out=result)
    else:
        result = result * grad
    np.multiply(result, math_dtype.type(-coef), out=result)
    if result.shape != broadcast:
        result = np.broadcast_to(result, broadcast)
    return sum_to_shape(result, self_shape, math_dtype)


def kl_div(self: np.ndarray, target: np.ndarray, reduction: int, log_target: bool,
           math_dtype: np.dtype = np.dtype(np.float32)) -> np.ndarray:
    """The KL divergence loss: shape B for none, 0-D otherwise, in `math_dtype`."""
    math_dtype = np.dtype(math_dtype)
    if (reduction != NONE and self.shape == target.shape and self.size and self.flags.c_contiguous
            and target.flags.c_contiguous):
        total = _reduced_sum(self, target, log_target, math_dtype)
        return np.asarray(total * coefficient(reduction, self.shape) if reduction != SUM else total, dtype=math_dtype)
    x = self.astype(math_dtype, copy=False)
    t = target.astype(math_dtype, copy=False)
    if log_target:
        loss = np.exp(t) * (t - x)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            log_t = np.asarray(np.log(t))         # asarray: a 0-D target gives a NumPy scalar
        log_t[t == 0] = 0                         # xlogy: 0 * log 0 = 0
        # xlogy(t, t) - t * x, PyTorch's form (and the kernels'): t = inf gives inf - inf = NaN, where
        # t * (log t - x) would give inf
        loss = t * log_t - t * x
    broadcast = loss.shape
    if reduction == NONE:
        return loss
    total = loss.sum(dtype=np.float64 if math_dtype == np.float64 else math_dtype)
    return np.asarray(total * coefficient(reduction, broadcast) if reduction != SUM else total, dtype=math_dtype)


def _reduced_sum(self: np.ndarray, target: np.ndarray, log_target: bool, md: np.dtype) -> float:
    """sum of the pointwise loss over same-shape C-contiguous operands, as a float64: chunks of _CHUNK
    elements in cache-resident scratch, each summed pairwise in the math dtype (the formula and rounding
    of the whole-array path, element by element), the chunk sums then added in float64 in chunk order.
    The chunks are fixed by the size alone, so the result does not depend on the threads."""
    xf, tf = self.reshape(-1), target.reshape(-1)
    n = xf.size
    chunks = -(-n // _CHUNK)
    partial = np.empty(chunks, np.float64)

    def work(piece: tuple[int, int]) -> None:
        a, b, xc, tc = (parallel.kept(f"kl_div_chunk_{k}", (_CHUNK,), md) for k in "abxt")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for ci in range(*piece):
                lo, hi = ci * _CHUNK, min(n, (ci + 1) * _CHUNK)
                k = hi - lo
                x = xf[lo:hi] if xf.dtype == md else lowp.to_f32(xf[lo:hi], xc[:k]) if md == np.float32 else \
                    xf[lo:hi].astype(md)
                t = tf[lo:hi] if tf.dtype == md else lowp.to_f32(tf[lo:hi], tc[:k]) if md == np.float32 else \
                    tf[lo:hi].astype(md)
                ak, bk = a[:k], b[:k]
                if log_target:                          # exp(t) * (t - x)
                    np.exp(t, out=ak)
                    np.subtract(t, x, out=bk)
                    ak *= bk
                else:                                   # xlogy(t, t) - t * x (PyTorch's form, see kl_div)
                    np.log(t, out=ak)
                    if not t.min() > 0:                 # zeros (NaN, negatives: the same pass)
                        np.copyto(ak, 0, where=t == 0)  # (a masked copy: 0.1 ns per element)
                    ak *= t
                    np.multiply(t, x, out=bk)
                    ak -= bk
                partial[ci] = np.add.reduce(ak, dtype=md)

    if n < _PARALLEL_MIN:
        work((0, chunks))
    else:
        parallel.run_pieces(work, parallel.ranges(chunks, parallel.workers()))
    return float(np.add.reduce(partial))
