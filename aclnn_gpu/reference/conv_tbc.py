"""ConvTBC forward and backward in NumPy (the `cpu` device runs these; docs/OPERATORS.md §4).

Layouts are time-batch-channel: input (T, B, Cin), weight (K, Cin, Cout), bias (Cout),
output / grad (Tout, B, Cout) with Tout = T + 2*pad - K + 1.

Speed: every product is a large BLAS GEMM over whole time ranges. For tap k only the time range
where the shifted index lands inside the real (unpadded) tensor contributes, so each tap is one
GEMM between contiguous slices `x[a:b]` / `dy[c:d]` reshaped to 2-D views (no padded copies, no
im2col): K GEMMs for the forward, 2K for the backward, each with B*rows as the long dimension.
The first tap that covers the whole output range (there is one whenever K-1 <= 2*pad, i.e. the
usual "same" padding) writes with `out=` so the accumulator is never zero-filled and re-read;
otherwise the accumulator starts from zeros (np.zeros is calloc: free pages).

Math is float32 for float32/float16/bfloat16 storage (BLAS sgemm, fp32 accumulation), float64 only
for float64 arrays (tests). Results are returned in the storage dtype of the matching operand
(forward: input's dtype; gradients: the dtype of input / weight / bias), rounded to nearest even.

Empty input or weight (T == 0, Cin == 0 or K == 0 while grad is non-empty): gradInput and
gradWeight are 0 and gradBias is the sum of grad (docs/API.md §7; CANN writes B*Tout there).
"""
from __future__ import annotations

import numpy as np

from . import lowp

__all__ = ["conv_tbc", "conv_tbc_backward", "out_len"]


def out_len(T: int, K: int, pad: int) -> int:
    return T + 2 * pad - K + 1


def _math_dtype(*arrays) -> np.dtype:
    return np.dtype(np.float64) if any(np.asarray(a).dtype == np.float64 for a in arrays) else np.dtype(np.float32)


def _as(a, dt) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.float16 and dt == np.float32:   # NumPy's float16 cast is scalar: lowp's table
        return lowp.f16_to_f32(np.ascontiguousarray(a))
    return np.ascontiguousarray(a, dtype=dt)


def _cast(a: np.ndarray, dt) -> np.ndarray:
    """The math-dtype result in storage dtype `dt`, rounded to nearest even (float16 via lowp)."""
    if a.dtype == np.float32 and np.dtype(dt) == np.float16:
        return lowp.f32_to_f16(np.ascontiguousarray(a))
    return a.astype(dt, copy=False)


def _tap_range(k: int, pad: int, n_out: int, n_src: int) -> tuple[int, int]:
    """Output rows t in [lo, hi) whose source row t + k - pad lies in [0, n_src)."""
    lo = max(0, pad - k)
    hi = min(n_out, n_src + pad - k)
    return lo, max(lo, hi)


def _shifted_sum(src: np.ndarray, w: np.ndarray, n_out: int, shift, transpose_w: bool) -> np.ndarray:
    """acc[t] = sum_k src[t + shift(k)] @ W_k over valid rows, W_k = w[k] (or w[k].T).

    src (n_src, B, C1) contiguous, returns (n_out, B, C2) in the math dtype. All K taps are ONE GEMM
    Z = src @ [W_0 | W_1 | ... ] (n_src*B x K*C2), then the shifted slices Z[t + shift(k), :, k] are
    summed (memory-bound adds); the first full-range tap is copied, never zero-fill + add."""
    n_src, B, C1 = src.shape
    K = w.shape[0]
    C2 = w.shape[1] if transpose_w else w.shape[2]
    ranges = []
    for k in range(K):
        s = shift(k)                       # source row = t + s
        lo, hi = max(0, -s), min(n_out, n_src - s)
        if hi > lo:
            ranges.append((k, lo, hi, s))
    if C1 == 0 or C2 == 0 or B == 0 or not ranges:
        return np.zeros((n_out, B, C2), dtype=src.dtype)
    # (C1, K*C2): column block k is W_k
    wcat = (w.transpose(2, 0, 1) if transpose_w else w.transpose(1, 0, 2)).reshape(C1, K * C2)
    z = (src.reshape(n_src * B, C1) @ wcat).reshape(n_src, B, K, C2)
    full = next((r for r in ranges if r[1] == 0 and r[2] == n_out), None)
    if full is not None:
        k, lo, hi, s = full
        if K == 1:
            return z[s:s + n_out, :, 0, :] if s == 0 and n_src == n_out else \
                np.ascontiguousarray(z[lo + s:hi + s, :, 0, :])
        acc = np.empty((n_out, B, C2), dtype=src.dtype)
        np.copyto(acc, z[lo + s:hi + s, :, k, :])
    else:
        acc = np.zeros((n_out, B, C2), dtype=src.dtype)
    for k, lo, hi, s in ranges:
        if full is not None and k == full[0]:
            continue
        np.add(acc[lo:hi], z[lo + s:hi + s, :, k, :], out=acc[lo:hi])
    return acc


def conv_tbc(input, weight, bias, pad: int = 0) -> np.ndarray:
    """y[t,b,o] = bias[o] + sum_{k,i} x[t+k-pad, b, i] * w[k,i,o]  -> (Tout, B, Cout), input's dtype."""
    x0, w0, b0 = np.asarray(input), np.asarray(weight), np.asarray(bias)
    md = _math_dtype(x0, w0, b0)
    T, B, Cin = x0.shape
    K, _, Cout = w0.shape
    Tout = out_len(T, K, pad)
    if Tout < 0:
        raise ValueError(f"conv_tbc: Tout = T + 2*pad - K + 1 = {Tout} < 0")
    x, w, b = _as(x0, md), _as(w0, md), _as(b0, md)
    y = _shifted_sum(x, w, Tout, lambda k: k - pad, transpose_w=False)
    y += b
    return _cast(y, x0.dtype)


def conv_tbc_backward(grad, input, weight, bias, pad: int = 0):
    """Returns (grad_input (T,B,Cin), grad_weight (K,Cin,Cout), grad_bias (Cout)) in the dtypes of
    input, weight and bias."""
    g0, x0, w0, b0 = np.asarray(grad), np.asarray(input), np.asarray(weight), np.asarray(bias)
    md = _math_dtype(g0, x0, w0, b0)
    T, B, Cin = x0.shape
    K, _, Cout = w0.shape
    Tout = out_len(T, K, pad)
    if g0.shape != (Tout, B, Cout):
        raise ValueError(f"conv_tbc_backward: grad shape {g0.shape} != {(Tout, B, Cout)}")
    dy, x, w = _as(g0, md), _as(x0, md), _as(w0, md)

    # gradBias: column sums over all (t, b) rows (pairwise summation in the math dtype).
    gb = dy.reshape(Tout * B, Cout).sum(axis=0, dtype=md)

    # gradInput[s] = sum_k dy[s + pad - k] @ w[k]^T
    gi = _shifted_sum(dy, w, T, lambda k: pad - k, transpose_w=True)

    # gradWeight[k] = x[t + k - pad]^T @ dy[t] over valid t
    gw = np.empty((K, Cin, Cout), dtype=md)
    x2 = x.reshape(T * B, Cin)
    for k in range(K):
        lo, hi = _tap_range(k, pad, Tout, T)
        if hi <= lo or Cin == 0:
            gw[k] = 0
            continue
        a = x2[(lo + k - pad) * B:(hi + k - pad) * B]
        gw[k] = a.T @ dy[lo:hi].reshape((hi - lo) * B, Cout)   # (no out=: NumPy may skip BLAS then)
    return _cast(gi, x0.dtype), _cast(gw, w0.dtype), _cast(gb, b0.dtype)
