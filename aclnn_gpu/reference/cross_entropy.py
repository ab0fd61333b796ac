"""NumPy cross-entropy (the cpu device's implementation and the kernels' test oracle).

    cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing,
                       lse_square_scale_for_zloss=0.0, return_zloss=False, lse_out=None)
        -> (loss, log_prob) or, with return_zloss, (loss, log_prob, zloss)
    cross_entropy_loss_grad(grad_loss, log_prob, target, weight, reduction, ignore_index,
                            label_smoothing, grad_zloss=None, lse_for_zloss=None,
                            lse_square_scale_for_zloss=0.0) -> grad   (w.r.t. the logits, spec ops.md §2.2)

Math in float32 for float16 / bfloat16 / float32 storage, float64 for float64; results are
returned in the input's dtype. Sums over rows (the "mean"/"sum" loss and the "mean" divisor D)
accumulate in float64, like the kernels.

Rules (docs/OPERATORS.md §2, §2, docs/API.md §7):
- row i is ignored iff target[i] == ignore_index (any sign): loss 0, gradient row 0;
- a target outside [0, C) that is not ignore_index is never used as an index: its loss and its
  gradient row are NaN (so are "mean"/"sum" losses that include it); it adds nothing to D;
- "mean" divides by D = sum of w[target[i]] over the rows that count; when D == 0 (every row
  ignored, or only zero-weight targets) the gradient is all zeros and the forward loss is 0
  (sum * 0: still NaN when a bad row is present). PyTorch's forward gives NaN there (0/0); we
  give 0, consistent with the zero gradient of docs/API.md §7;
- label smoothing ls: loss_i = (1-ls) w[t_i] (-lp[i,t_i]) + ls/C * sum_c w[c] (-lp[i,c]).
- non-finite logits follow PyTorch's log_softmax (x - max - log(sum exp(x - max))) in float64: a NaN
  or a +inf anywhere in a row, or an all -inf row, makes the whole log_prob row and its loss NaN; a
  -inf logit alone gives log_prob -inf there and a finite loss unless the target or the smoothing
  term reads it (inf; NaN where its weight is 0: 0 * inf). Ignored rows stay 0 whatever they hold;
  the gradient of a -inf log_prob entry is finite, like autograd's (p = 0, expm1 = -1).
- The gradient's target column is computed as b*expm1(lp_t) + s*(p_t*W - w_t) so that bf16 / fp16
  rows near a one-hot keep fp32 accuracy until the final rounding; where b is infinite (an infinite
  gradLoss or weight) as p_t*b - b, NaN, which is what PyTorch's log_softmax backward gives there.
- z-loss (lse_square_scale_for_zloss = k != 0; docs/API.md §7, CANN's formulas): row i with
  target != ignore_index (out-of-range targets included: CANN's ignoreMask) adds z_i = k lse_i^2,
  unweighted, to its loss; "mean" divides the z-loss sum by n = the number of such rows (not by D),
  "sum" sums it; zloss is that term alone, reduced like the loss. lse follows torch.logsumexp (+inf
  for a row holding +inf, -inf for an all -inf row, NaN for a row holding NaN). The gradient adds
  2 k lse_i (G_i + gradZloss_i) [/ n] p[i, j] to every counted row (also when D == 0). k == 0: no
  z-loss term at all (not k * lse^2: an infinite lse must not give NaN).
- Finite rows of ordinary magnitude take an unshifted log-softmax, x - log(sum exp(x)), with the
  log-sum split into float32 hi + lo (three to four passes instead of five; see _forward_rows): the
  same accuracy as the shifted form (measured against float64: max and mean errors at or below
  PyTorch float32's), not its exact bits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import lowp, parallel

_CHUNK = 1 << 17  # elements per row block: the per-block scratch stays in the L2 cache, and
# Python overhead per block (a few NumPy calls) stays small beside the work (1 << 16: 15% slower)
_FORWARD_CHUNK = 1 << 18  # the forward's blocks: three passes over a block read its logits from
# the L2 cache or L3; 1 MiB blocks were 5-10% faster than 512 KiB ones at 600 x 8192 (2 threads)

_PARALLEL_MIN = 1 << 20  # elements: below this a single thread is faster

# The smallest log(sum_c exp(x)) the forward's unshifted form accepts (float32: 2^-64: the terms
# within rounding of the sum are then normal numbers); rows below are redone in the shifted form.
_LSE_MIN = {np.float32: -64 * np.log(2.0), np.float64: -960 * np.log(2.0)}


def _block_rows(N: int, C: int, chunk: int) -> int:
    """Rows per block: about `chunk` elements, evened out to an even number of equal blocks so that
    two threads get the same work (600 rows of 32 would split 320 / 280). It depends on N and C
    only: every thread split (whole blocks per piece) gives the same blocks, hence the same bits
    (a weighted row's b @ w may round by its place in a BLAS block)."""
    R = max(1, min(N, chunk // max(C, 1)))
    blocks = -(-N // R)
    blocks += blocks % 2
    return -(-N // blocks)


def _parallel(N: int, C: int) -> bool:
    return N * C >= _PARALLEL_MIN and N >= 2


def _parallel_rows(block, N: int, C: int, R: int) -> None:
    """Run block(r0, r1) over [0, N) split into row ranges (multiples of R rows), in parallel when
    the problem is large enough to pay for it."""
    if not _parallel(N, C):
        block(0, N)
        return
    # whole blocks of R rows per piece: every block has the rows it would have in one piece
    parallel.run_pieces(lambda rows: block(*rows), parallel.ranges(N, parallel.workers(), R), here_last=True)


def _math(dt) -> type:
    return np.float64 if np.dtype(dt) == np.float64 else np.float32


def _rows(target, N, C, ignore_index):
    t = np.asarray(target).reshape(N).astype(np.int64, copy=False)
    ignored = t == np.int64(ignore_index)
    valid = (t >= 0) & (t < C)
    active = valid & ~ignored
    bad = ~valid & ~ignored
    tc = np.where(active, t, 0)  # a safe index for every row
    return active, bad, tc


def _check_reduction(reduction):
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def cross_entropy_loss(input, target, weight=None, reduction="mean", ignore_index=-100,
                       label_smoothing=0.0, log_prob_out=None, *, lse_square_scale_for_zloss=0.0,
                       return_zloss=False, lse_out=None):
    """Forward: returns (loss, log_prob), or (loss, log_prob, zloss) with `return_zloss`; loss and
    zloss are (N,) for 'none', else 0-D arrays.

    `log_prob_out`: an (N, C) array of input's dtype (any strides, not overlapping input) that
    receives log_prob instead of a new array (no page faults of a fresh N*C array, no extra copy).
    `lse_square_scale_for_zloss` != 0 adds the z-loss to the loss (module docstring); `lse_out`: an
    (N,) array of input's dtype (any strides) that receives lse (CANN's lseForZlossOut)."""
    _check_reduction(reduction)
    x = np.asarray(input)
    N, C = x.shape
    dt = x.dtype
    M = _math(dt)
    ls = float(label_smoothing)
    active, bad, tc = _rows(target, N, C, ignore_index)
    w = None if weight is None else np.asarray(weight).reshape(C).astype(M, copy=False)

    if log_prob_out is not None and (log_prob_out.shape != (N, C) or log_prob_out.dtype != dt):
        raise ValueError(f"log_prob_out must be an {(N, C)} array of {dt}, got {log_prob_out.shape} "
                         f"{log_prob_out.dtype}")
    # rows are reduced in place, so a strided output would change their summation order: the work
    # happens in a C-order array and is copied out
    direct_out = log_prob_out is not None and log_prob_out.flags.c_contiguous
    log_prob = log_prob_out if direct_out else np.empty((N, C), dt)
    nll = np.empty(N, M)
    smooth = np.zeros(N, M) if ls != 0.0 else None
    zscale = float(lse_square_scale_for_zloss)
    lse = np.empty(N, M) if (zscale != 0.0 or lse_out is not None) else None
    with np.errstate(invalid="ignore"):  # inf - inf in rows holding +-inf: NaN, as in PyTorch
        _forward_rows(x, dt, M, N, C, tc, w, log_prob, nll, smooth, lse)
    if log_prob_out is not None and not direct_out:
        np.copyto(log_prob_out, log_prob)
        log_prob = log_prob_out

    wt = np.where(active, M(1) if w is None else (w[tc] if C else M(0)), M(0)).astype(M, copy=False)
    with np.errstate(invalid="ignore"):  # 0 * inf (zero-weight target on a -inf log_prob): NaN
        row = nll * wt
        if ls != 0.0:
            row *= M(1.0 - ls)
            row += M(ls / C) * np.where(active, smooth, M(0))
    row[~active] = 0  # ignored rows: 0 even when their logits hold NaN / inf (PyTorch never reads them)
    row[bad] = np.nan
    if lse_out is not None:
        np.copyto(lse_out, lse, casting="unsafe")
    z = None
    counted = active | bad   # CANN's ignoreMask: the rows whose target != ignore_index
    if zscale != 0.0:   # z of ignored rows: 0, their lse never read (it may be NaN or inf)
        with np.errstate(invalid="ignore", over="ignore"):
            z = np.where(counted, M(zscale) * lse * lse, M(0)).astype(M, copy=False)

    if reduction == "none":
        if z is not None:
            row += z
        loss = row.astype(dt)
        if not return_zloss:
            return loss, log_prob
        return loss, log_prob, (np.zeros(N, dt) if z is None else z.astype(dt))
    total = row.sum(dtype=np.float64)
    if reduction == "mean":
        D = wt.sum(dtype=np.float64)
        total = total / D if D != 0 else total * 0.0
    ztotal = 0.0
    if z is not None:
        ztotal = z.sum(dtype=np.float64)
        if reduction == "mean":
            n = float(np.count_nonzero(counted))
            ztotal = ztotal / n if n != 0 else ztotal * 0.0
        total = total + ztotal
    loss = np.asarray(total, dtype=np.float64).astype(dt).reshape(())
    if not return_zloss:
        return loss, log_prob
    return loss, log_prob, np.asarray(ztotal, dtype=np.float64).astype(dt).reshape(())


def _forward_rows(x, dt, M, N, C, tc, w, log_prob, nll, smooth, lse=None):
    """log_prob = log_softmax(x) by row blocks; nll = -log_prob[i, tc[i]]; smooth (when not None)
    = -sum_c w[c] log_prob[i, c] (both from the float32 / float64 values, before any rounding to
    half precision); lse (when not None) = log(sum_c exp(x[i, c])) in the math type, with
    torch.logsumexp's values for rows holding inf or NaN.

    Rows take the unshifted form log_prob = x - lse, lse = log(sum_c exp(x)): three passes over a
    block (exp, pairwise row sum, subtract) and a fourth (below) where PyTorch's shifted form
    (x - max) - log(sum_c exp(x - max)) makes five (max, subtract, exp, sum, subtract), of which the
    max is the pass that first reads the logits from memory. Each exp is rounded to about an ulp
    either way and the sums have the same relative rounding, so the two agree to float rounding
    wherever the sum lies in [2^-64, overflow): the terms within rounding of the largest are then
    normal numbers. lse is taken in a wider type (float64 for float32 math, long double for float64)
    and split into hi + lo (hi = lse rounded to the math type): (x - hi) - lo is exact in its first
    step for the logits near the row's largest (Sterbenz), so their log-probs err by the sum's
    rounding (~1e-7 in float32) instead of half an ulp of lse (1e-6 at lse = 30). The other rows (a
    logit above ~88 or all below ~-44 in float32, a NaN or +-inf: the sum is then inf, NaN, 0 or
    tiny) and every row when C == 1 (PyTorch's exact 0) are redone afterwards in the shifted form,
    which gives PyTorch's special values. The choice is per row, so results never depend on the
    blocking or the thread split.

    Row blocks of about _FORWARD_CHUNK elements (cache-resident scratch, kept by each worker); large
    problems run their blocks on the small thread pool (NumPy's ufuncs release the GIL)."""
    if not (N and C):
        return
    R = _block_rows(N, C, _FORWARD_CHUNK)
    direct = dt == M  # fp32 / fp64: work in log_prob itself
    half = dt == np.float16
    wide = np.float64 if M == np.float32 else np.longdouble   # lse's log (x86: 64-bit mantissa)
    hi = np.empty((N, 1), M)  # lse rounded to M
    lo = np.empty((N, 1), M)  # lse - hi

    def block(r0: int, r1: int) -> None:
        with np.errstate(all="ignore"):  # exp overflow, log(0), inf - inf: such rows are redone below
            _block(r0, r1)

    def _block(r0: int, r1: int) -> None:
        n = min(R, r1 - r0)
        buf: Any = None if direct else parallel.kept("ce_forward_f32", (n, C), M)
        ex = parallel.kept("ce_forward_exp", (n, C), M)
        sa: Any = None   # set (and read) only for half-precision input
        sc: Any = None
        if half:
            sa, sc = ex.reshape(-1), parallel.kept("ce_forward_round", (n * C,), M)
        for q0 in range(r0, r1, R):
            q1 = min(r1, q0 + R)
            k = q1 - q0
            if direct:
                xb, b = x[q0:q1], log_prob[q0:q1]
            else:  # float16 through lowp's table, bfloat16 through ml_dtypes' cast (both exact)
                xb = b = lowp.to_f32(x[q0:q1], buf[:k])
            e, h = ex[:k], hi[q0:q1]
            np.exp(xb, out=e)
            np.add.reduce(e, axis=1, keepdims=True, out=h)
            lse = np.log(h, dtype=wide)
            np.copyto(h, lse, casting="unsafe")
            np.subtract(lse, h, out=lo[q0:q1], casting="unsafe")
            np.subtract(xb, h, out=b)
            b -= lo[q0:q1]
            # a near-certain row (true log-prob above about -2e-7) may come out slightly positive at
            # its largest logit: the float32 sum's rounding, ~1e-7 of it, where the shifted form's
            # exp(0) = 1 is exact. Clamped to 0, as PyTorch gives there, whatever the target: a
            # positive log-prob would survive rounding to fp16 / bf16 and give the gradient p - 1 at
            # that column the wrong sign (NaN stays NaN; such rows are redone below anyway). The
            # check is a read-only pass (0.04 ns per element here) where the clamp costs as much as
            # the exp, and is rarely needed; NaN (from a row redone later) takes the clamp too.
            if not np.maximum.reduce(b, axis=None) <= 0:
                np.minimum(b, 0, out=b)
            if not direct:
                nll[q0:q1] = b[np.arange(k), tc[q0:q1]]
            if smooth is not None:
                smooth[q0:q1] = b.sum(axis=1) if w is None else b @ w
            if not direct:  # e is free now: rounding scratch
                lowp.from_f32(b, log_prob[q0:q1], sa, sc)

    if C == 1:
        redo = np.arange(N)
    else:
        _parallel_rows(block, N, C, R)
        if direct:
            nll[:] = log_prob[np.arange(N), tc]
        hi_n = hi.reshape(N)
        if lse is not None:
            lse[:] = hi_n
        redo = None
        if not (hi_n.min() >= _LSE_MIN[M] and hi_n.max() < np.inf):  # the common case in two calls
            with np.errstate(invalid="ignore"):  # NaN: redone
                redo = np.nonzero(~((hi_n >= _LSE_MIN[M]) & (hi_n < np.inf)))[0]
    if redo is not None and redo.size:
        _shifted_rows(x, dt, M, redo, tc, w, log_prob, nll, smooth, lse)
    np.negative(nll, out=nll)
    if smooth is not None:
        np.negative(smooth, out=smooth)


def _shifted_rows(x, dt, M, rows, tc, w, log_prob, nll, smooth, lse=None):
    """The rows `rows` of _forward_rows in PyTorch's shifted form (x - max) - log(sum exp(x - max)),
    which gives its special values for rows holding inf or NaN and stays accurate for logits of any
    magnitude. lse (when not None): torch.logsumexp's form, the max taken as 0 where it is infinite
    (+inf for a row holding +inf, -inf for an all -inf row, NaN for a row holding NaN)."""
    b = lowp.to_f32(x[rows], np.empty((rows.size, x.shape[1]), M))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # inf - inf: NaN, as in PyTorch
        m = np.maximum.reduce(b, axis=1, keepdims=True)
        if lse is not None:
            m0 = np.where(np.isinf(m), M(0), m)
            lse[rows] = (m0 + np.log(np.add.reduce(np.exp(b - m0), axis=1, keepdims=True))).reshape(-1)
        b -= m
        b -= np.log(np.add.reduce(np.exp(b), axis=1, keepdims=True))
    nll[rows] = b[np.arange(rows.size), tc[rows]]
    if smooth is not None:
        smooth[rows] = b.sum(axis=1) if w is None else b @ w
    log_prob[rows] = b if dt == M else lowp.from_f32(b, np.empty(b.shape, dt))


def cross_entropy_loss_grad(grad_loss, log_prob, target, weight=None, reduction="mean",
                            ignore_index=-100, label_smoothing=0.0, out=None, *, grad_zloss=None,
                            lse_for_zloss=None, lse_square_scale_for_zloss=0.0):
    """Gradient of the loss w.r.t. the logits (docs/OPERATORS.md §2), shape (N, C), log_prob's dtype.

    `out`: an (N, C) array of log_prob's dtype (any strides, not overlapping log_prob) to write the
    result into instead of a new array; it is returned. Large problems run their row blocks on a
    small thread pool (NumPy's ufuncs and casts release the GIL).
    `lse_square_scale_for_zloss` != 0: the z-loss term from `lse_for_zloss` (N,) (required then) and
    `grad_zloss` (shaped like grad_loss, or None), folded into the same pass (module docstring)."""
    _check_reduction(reduction)
    lp = np.asarray(log_prob)
    N, C = lp.shape
    dt = lp.dtype
    M = _math(dt)
    ls = float(label_smoothing)
    active, bad, tc = _rows(target, N, C, ignore_index)
    w = None if weight is None else np.asarray(weight).reshape(C).astype(M, copy=False)
    if out is None:
        out = np.empty((N, C), dt)
    elif out.shape != (N, C) or out.dtype != dt:
        raise ValueError(f"out must be an {(N, C)} array of {dt}, got {out.shape} {out.dtype}")
    if N == 0 or C == 0:
        return out

    g = np.asarray(grad_loss).astype(M)
    G = g.reshape(N) if reduction == "none" else np.full(N, g.reshape(-1)[0], M)
    zscale = float(lse_square_scale_for_zloss)
    zc = None
    if zscale != 0.0:   # 2 k lse_i (G_i + gradZloss_i) [/ n], CANN's lseGrad (0 for ignored rows)
        if lse_for_zloss is None:
            raise ValueError("lse_for_zloss is required when lse_square_scale_for_zloss != 0")
        Gz = G
        if grad_zloss is not None:
            gz = np.asarray(grad_zloss).astype(M)
            Gz = G + (gz.reshape(N) if reduction == "none" else gz.reshape(-1)[0])
        if reduction == "mean":
            n = np.count_nonzero(active | bad)
            Gz = Gz * M(1.0 / n if n else 0.0)
        with np.errstate(invalid="ignore", over="ignore"):
            zc = M(2.0 * zscale) * np.asarray(lse_for_zloss).reshape(N).astype(M) * Gz
        zc = np.where(active, zc, M(0)).astype(M, copy=False)
    wt = np.where(active, M(1) if w is None else w[tc], M(0)).astype(M, copy=False)
    if reduction == "mean":
        D = wt.sum(dtype=np.float64)
        if D == 0:  # every row ignored (or zero-weight targets only): zeros (docs/API.md §7) ...
            if zc is None:
                active = np.zeros(N, bool)
            G = np.zeros(N, M)   # ... but for the z-loss term, whose mean divides by n
        else:
            G = G * M(1.0 / D)
    G = np.where(active, G, M(0))  # ignored / bad rows: no contribution (bad rows set NaN below)
    b = G * M(1.0 - ls) * wt                       # nllg_i; out = a*p - s*w_j - [j==t] b
    if ls != 0.0:
        s = G * M(ls / C)                          # sm_i
        W = M(C) if w is None else M(w.sum(dtype=np.float64))
        a = b + s * W
    else:   # no smoothing terms at all (not times 0: an infinite G must not give 0 * inf = NaN)
        a = b
    if zc is not None:   # z-loss: absent, not + 0 * p, when the scale is 0
        a = a + zc

    R = _block_rows(N, C, _CHUNK)
    direct = dt == M  # fp32 / fp64: work in out itself
    sw = None if ls == 0.0 or w is None else w
    half = dt == np.float16  # float16 <-> float32 through lowp (NumPy's float16 casts are scalar)

    def block(r0: int, r1: int) -> None:
        if direct:
            buf: Any = None   # the output itself is the scratch
            sa: Any = None
            sc: Any = None
        else:
            n = min(R, r1 - r0) * C
            buf = parallel.kept("ce_grad_f32", (n // C, C), M)
            sa, sc = ((parallel.kept("ce_grad_round_a", (n,), M), parallel.kept("ce_grad_round_b", (n,), M))
                      if half else (None, None))  # rounding scratch
        for q0 in range(r0, r1, R):
            q1 = min(r1, q0 + R)
            p = out[q0:q1] if direct else buf[: q1 - q0]
            if direct:
                np.exp(lp[q0:q1], out=p)
            else:  # bfloat16: ml_dtypes' vectorised cast; float16: lowp's table
                lowp.to_f32(lp[q0:q1], p)
                np.exp(p, out=p)
            p *= a[q0:q1, None]
            if ls != 0.0:
                if sw is None:
                    p -= s[q0:q1, None]
                else:
                    p -= np.multiply.outer(s[q0:q1], sw)
            if not direct:
                lowp.from_f32(p, out[q0:q1], sa, sc)
        # ignored rows (and D == 0): zeros whatever log_prob holds (p * 0 is NaN where it is NaN
        # or +inf); here, by the piece that wrote them, rather than by one thread after the join
        out[r0:r1][~active[r0:r1]] = 0

    _parallel_rows(block, N, C, R)

    rows = np.nonzero(active)[0]
    if rows.size:
        t = tc[rows]
        lpt = lp[rows, t].astype(M)
        with np.errstate(invalid="ignore", over="ignore"):
            br = b[rows]
            col = br * np.expm1(lpt)
            # an infinite b: PyTorch's log_softmax backward form -b + p * b, NaN (b * expm1: an infinity)
            col = np.where(np.isfinite(br), col, np.exp(lpt) * br - br)
            if ls != 0.0:
                col += s[rows] * (np.exp(lpt) * W - (M(1) if w is None else w[t]))
            if zc is not None:
                col += zc[rows] * np.exp(lpt)
        out[rows, t] = col.astype(dt)
    if bad.any():
        out[bad] = np.nan
    return out
