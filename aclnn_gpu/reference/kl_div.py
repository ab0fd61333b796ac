"""KL divergence in NumPy: the cpu device's implementation and the tests' second reference.

Semantics (docs/OPERATORS.md §3): on B = broadcast(self, target),
forward  `t * (log t - x)` (0 where t == 0, as PyTorch's xlogy) or, with log_target,
`exp(t) * (t - x)`, reduced by none / mean (1/numel B) / sum / batchmean (1/B[0]);
backward `-(e * g) * coef` with e = t or exp(t), summed back to self's shape.
Math runs in `math_dtype` (float32 unless a float64 tensor is involved).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

NONE, MEAN, SUM, BATCHMEAN = 0, 1, 2, 3


def coefficient(reduction: int, broadcast_shape: Sequence[int]) -> float:
    if reduction == MEAN:
        return 1.0 / max(math.prod(broadcast_shape), 1)
    if reduction == BATCHMEAN:
        return 1.0 / (broadcast_shape[0] if len(broadcast_shape) and broadcast_shape[0] else 1)
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
