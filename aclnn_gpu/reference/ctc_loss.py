"""CTC loss forward and backward in NumPy: the `cpu` device's implementation and the oracle of the
kernel tests (docs/OPERATORS.md §1, docs/API.md §7).

    ctc_loss_forward(log_probs, targets, input_lengths, target_lengths, blank=0,
                     zero_infinity=False) -> (neg_log_likelihood (N,), log_alpha (N, T, 2*maxL+1))
    ctc_loss_backward(grad_out, log_probs, targets, input_lengths, target_lengths,
                      neg_log_likelihood, log_alpha, blank=0, zero_infinity=False) -> grad (T, N, C)

Shapes: log_probs (T, N, C); targets 2-D padded (N, S >= maxL) or 1-D concatenated
(sum(target_lengths)), any integer dtype; lengths (N,) host ints (validated by the caller:
0 <= input_lengths <= T, target_lengths >= 0). Outputs have log_probs' dtype; math is float32 for
float16 / bfloat16 / float32 and float64 for float64.

Semantics (PyTorch's raw `_ctc_loss` / `_ctc_loss_backward`, CPU variant):
* forward: log_alpha is -inf wherever unreachable or outside the valid region (t >= Lin, s > 2L);
  an impossible alignment gives an infinite loss, returned as 0 with `zero_infinity` (CANN's
  forward rule); Lin == 0 gives loss 0 when L == 0, else inf.
* backward: out[t,b,c] = (exp(lp) - exp(lcab + nll - lp)) * g for t < Lin, 0 for t >= Lin; the whole
  sample is 0 when `zero_infinity` and either nll == +inf or the sample cannot align (log_alpha's
  final states (Lin-1, 2L) and (Lin-1, 2L-1) both -inf, or Lin == 0 < L: whatever nll is given, so
  the 0 that CANN's forward returns for it works as well as PyTorch's inf); NaN where lp = -inf
  (t < Lin), as the formula gives. log_alpha is read only at t < Lin-1, s <= 2L and at t = Lin-1, s in {2L-1, 2L}
  (any X >= 2*maxL+1; padding like -99999 is never read). The label term is evaluated as the state
  occupancy sum_s exp(alpha + beta - lp + nll), which is the same quantity without a scale shift
  that could underflow labels with tiny probability. Non-finite inputs give PyTorch's values: the
  samples whose log_alpha is not what its own recursion gives (a NaN, an infinity, a -inf where a
  predecessor is above -inf) or whose log-probs hold +inf take PyTorch's log-space beta.
* a label outside [0, C) makes that sample's loss, log_alpha slice and gradient slice NaN; it is
  never used as an index.
* float16 / bfloat16: the backward computes alpha and the loss again in float32 from the log-probs
  and uses them in place of the log_alpha and nll it is given, rounded to 16 bits (a half ulp of an
  alpha near 30 is 1.6% of an occupancy in float16, 12% in bfloat16); the given nll still decides
  zero_infinity (+inf zeroes the sample). The gradient is then PyTorch's float32 CTC on the same
  log-probs, rounded once (docs/API.md §7).

Vectorised over batch and extended-label states; the only Python loop runs over time. The forward's
alpha recursion runs in float32 (float64 for float64 data) log space, eight NumPy calls per step, or
for small calls (N * (2*maxL+1) <= 512 states, where those calls' overhead dominates) in scaled
float64 linear space, one call per step, with the samples linear space cannot hold (underflow, -inf,
NaN, overflow) redone in log space. The backward splits a large batch into slices of samples that run
in parallel (reference/parallel.py); each sample's arithmetic, and so the result, is the same for any
split.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from . import lowp, parallel

__all__ = ["ctc_loss_forward", "ctc_loss_backward", "math_dtype"]


def math_dtype(dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _labels(targets, input_lengths, target_lengths, n, c):
    """(labels (N, maxL) int64 safe to index with, bad (N,) bool, il, tl, maxL)."""
    il = np.asarray(input_lengths, dtype=np.int64).reshape(-1)
    tl = np.asarray(target_lengths, dtype=np.int64).reshape(-1)
    if il.shape[0] != n or tl.shape[0] != n:
        raise ValueError("input_lengths / target_lengths must have N entries")
    max_l = int(tl.max()) if n else 0
    tg = np.asarray(targets)
    k = np.arange(max_l, dtype=np.int64)
    inside = k[None, :] < tl[:, None]
    if tg.ndim == 2:
        s = tg.shape[1]
        raw = np.zeros((n, max_l), dtype=np.int64)
        w = min(s, max_l)
        raw[:, :w] = tg[:n, :w].astype(np.int64)
        inside_src = inside & (k[None, :] < s)
    else:
        flat = tg.reshape(-1).astype(np.int64)
        off = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64)
        idx = off[:, None] + k[None, :]
        inside_src = inside & (idx < flat.shape[0])
        raw = np.where(inside_src, flat[np.clip(idx, 0, max(flat.shape[0] - 1, 0))] if flat.size else 0, 0)
    valid = (raw >= 0) & (raw < c) & inside_src
    bad = np.any(inside & ~valid, axis=1)
    labels = np.where(valid & inside, raw, 0)
    return labels, bad, il, tl, max_l


def _extended(labels, tl, blank, max_l):
    """l' (N, S) with S = 2*maxL+1, and the skip mask l'(s) != l'(s-2)."""
    n = labels.shape[0]
    S = 2 * max_l + 1
    lp_ = np.full((n, S), blank, dtype=np.int64)
    lp_[:, 1::2] = labels
    skip = np.zeros((n, S), dtype=bool)      # transition s-2 -> s allowed
    skip[:, 2:] = lp_[:, 2:] != lp_[:, :-2]
    return lp_, skip


# Below this many state-steps (tmax * N * S) the backward runs in one thread: it makes two NumPy
# calls per time step (and a few per block of 32 steps); on slices that small the call overhead,
# under the GIL, dominates.
_PARALLEL_MIN_STATE_STEPS = 1 << 18
# Samples per slice at most: the working set of a slice stays in the L2 cache, and the slices keep
# every core busy.
_SLICE_SAMPLES = 32
# Batches of at most this many states (N * (2*maxL+1)) sum the backward's three terms per step with
# np.vecdot (one call) instead of a multiply and a reduction (two calls): 0.47 against 0.61 ms at N = 1,
# 1.04 against 1.12 ms at N = 5 (L = 40), even at N = 8, slower from N = 16 (the 2-core bench machine).
# Both add the same products in the same order: the choice changes no bit (tested).
_VECDOT_MAX_STATES = 512
# Bytes of the backward's per-block factor buffer (3 planes of float32 per state and step): small
# batches take many steps per block (fewer NumPy calls per step), large ones at least 32.
_BLOCK_BYTES = 1 << 18


# Up to this many samples the forward clears each sample's rows past its input length and states past
# 2L by slices (two calls per sample), above by one masked copy over a mask of the log_alpha's size.
_CUT_LOOP_SAMPLES = 128
# Time steps of the forward's label log-probs gathered per NumPy call (bounded scratch).
_GATHER_STEPS = 64
# Calls of at most this many states (N * (2*maxL+1)) run the forward's alpha recursion in scaled float64
# linear space (_alpha_linear: one NumPy call per time step instead of eight; 1.3-1.9x faster at N = 1-5,
# L = 40), larger ones in log space (_alpha: linear space needs float64 and an exp and a log per state
# besides the steps, slower from about N = 16). Chosen for the whole call: a sample's log_alpha rounds
# alike in every call of either kind, but differently in a small call than in a large one (float64
# linear space, the more accurate, against float32 log space for float32 data; both within the tests'
# tolerances of PyTorch float64).
_LINEAR_MAX_STATES = 512
# Samples longer than this many steps, or with a log-prob below _LINEAR_MIN_LOG_PROB in their rows (the
# peaked outputs of a trained model: other classes at e^-20), take log space directly: the states of a
# row drift apart beyond float64's range there (random log-probs at T = 1000, L = 100; logits with a
# margin of 20 at T = 200), and the linear attempt would be wasted. Both are properties of the sample.
# The linear recursion also stops once every sample has failed or ended.
_LINEAR_MAX_STEPS = 512
_LINEAR_MIN_LOG_PROB = -15.0
# The linear recursion rescales each sample's row to a maximum of 1 every _RESCALE_STEPS rows (rows
# t = 8k, whatever the batch; a sample that underflows resumes in log space from the first row of its
# failing segment of 8 rows) and works in blocks of _LINEAR_BLOCK_ROWS rows (a multiple of 8): a block
# costs some 25 NumPy calls besides its steps, and its float64 buffers at most 3 MiB each.
_RESCALE_STEPS = 8
_LINEAR_BLOCK_ROWS = 256
# A reachable state whose scaled alpha falls below _LINEAR_FLOOR (float64's normal range ends at 2.2e-308:
# below it bits are lost) sends its sample to the log-space recursion; the divisors are at least the floor
# (a row of zeros, past the sample's input length, stays zeros).
_LINEAR_FLOOR = 1e-300


def _by_slices(work, N, state_steps):
    """work(b0, b1) over slices of the batch, in parallel when the problem is large enough. Samples
    are independent and every slice keeps the global state count S, so each sample's arithmetic,
    and result, is the same whatever the split."""
    if state_steps < _PARALLEL_MIN_STATE_STEPS:
        work(0, N)
        return
    pieces = max(parallel.workers(), -(-N // _SLICE_SAMPLES))
    parallel.run_pieces(lambda samples: work(*samples), parallel.ranges(N, pieces))


def _alpha(lp_in, md, lprime, skip, tmax, lt, start=0):
    """The alpha recursion in log space: lt[t, n, 2 + s] = log_alpha for start <= t < tmax, from row
    start - 1 of lt when start > 0 (rows past a sample's own input length are cleared by the caller).
    It stays on one thread: its eight small NumPy calls per time step contend for the GIL when batch
    slices run in parallel (measured 1.5-2x slower on 2 cores); the log-probs at the extended labels
    are gathered for _GATHER_STEPS steps in one call."""
    T, n, C = lp_in.shape
    S = lprime.shape[1]
    ninf = md.type(-np.inf)
    gidx = (np.arange(n)[:, None] * C + lprime).reshape(-1)   # gather of lp[t] at l'
    lpf = lp_in.reshape(T, n * C)

    def gather(t0: int) -> np.ndarray:
        """lp[t, n, l'(s)] in the math dtype for _GATHER_STEPS steps from t0, in one call."""
        t1 = min(tmax, t0 + _GATHER_STEPS)
        g = np.take(lpf[t0:t1], gidx, axis=1).reshape(t1 - t0, n, S)
        if g.dtype == np.float16:                    # exact casts (float16: lowp's table)
            return lowp.f16_to_f32(g)
        return g.astype(md, copy=False)

    lpg = gather(start - start % _GATHER_STEPS)
    if start == 0:
        lt[0, :, 2:] = ninf
        lt[0, :, 2:4] = lpg[0, :, :2]
    # the s-2 predecessor where s-2 -> s is not allowed is -inf (PyTorch never reads it): added as -inf
    # when no alpha can be +inf (every log-prob below finfo.max / (T + 1): a step adds at most
    # log 3 + max lp), else set by bit masks (-inf added to an alpha of +inf is NaN; a masked copy is
    # slower than the masks, which are slower than the add)
    addk = np.zeros((3, n, S), dtype=md)
    addk[2][~skip] = ninf
    bounded = bool(np.max(lpf[start:tmax]) < np.finfo(md).max / (tmax + 1)) if tmax > start else True
    ut = np.dtype(f"u{md.itemsize}")
    keep = np.where(skip, ~ut.type(0), ut.type(0)).astype(ut)
    setb = np.where(skip, ut.type(0), np.array(-np.inf, md).view(ut)).astype(ut)
    m = np.empty((n, S), dtype=md)
    r = np.empty((n, S), dtype=md)
    buf = np.empty((3, n, S), dtype=md)
    bits = buf[2].view(ut)
    st = lt.strides
    # V[t, k, n, s] = lt[t, n, 2 + s - k] (k = 0, 1, 2: from s, s-1, s-2)
    V = np.lib.stride_tricks.as_strided(lt[:, :, 2:], shape=(lt.shape[0], 3, n, S),
                                        strides=(st[0], -st[2], st[1], st[2]))
    low = md.type(-np.finfo(md).max)                # the max's floor: all -inf keeps -inf - m = -inf
    sub, add, ex, lg = np.subtract, np.add, np.exp, np.log
    rmax, red = np.maximum.reduce, np.add.reduce
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for t in range(max(start, 1), tmax):
            if t % _GATHER_STEPS == 0:
                lpg = gather(t)
            if bounded:                                  # (p_s, p_s-1, p_s-2 or -inf)
                add(V[t - 1], addk, out=buf)
            else:
                np.copyto(buf[:2], V[t - 1, :2])
                np.bitwise_and(V[t - 1, 2].view(ut), keep, out=bits)
                np.bitwise_or(bits, setb, out=bits)
            rmax(buf, 0, None, m, False, low)
            sub(buf, m, out=buf)
            ex(buf, out=buf)
            red(buf, 0, None, r)
            lg(r, out=r)
            add(r, m, out=r)
            add(r, lpg[t % _GATHER_STEPS], out=lt[t, :, 2:])


def _first_steps(skip, tl):
    """(n, S) int64: the first time step at which state s can carry probability (from s = 0 or 1 at
    t = 0, moving by one state per step, or by two where skip allows it); a value past any time step
    at s > 2L. A blank state follows its label one step later; a label state follows the previous
    label one step later when it may skip the blank between them, two otherwise."""
    n, S = skip.shape
    first = np.zeros((n, S), dtype=np.int64)
    if S > 1:
        first[:, 3::2] = np.cumsum(2 - skip[:, 3::2], axis=1)
        first[:, 2::2] = first[:, 1::2] + 1
    first[np.arange(S)[None, :] > 2 * tl[:, None]] = np.iinfo(np.int64).max
    return first


def _alpha_linear(lp_in, lprime, skip, il, tl, tmax, lt):
    """The alpha recursion in scaled float64 linear space, one NumPy call per time step:
        a[t, s] = a[t-1, s] p[t, s] + a[t-1, s-1] p[t, s] + a[t-1, s-2] skip(s) p[t, s],  p = exp(lp[t, l'(s)])
    with each sample's row divided by its maximum every _RESCALE_STEPS rows (the logs of the divisors
    summed in row order). Every operation is elementwise or per sample: a sample's bits do not depend
    on the other samples of the call. Writes lt[t, n, 2 + s] = log(a) + log-scale for t < tmax, in lt's
    dtype (garbage at t >= Lin and s > 2L, which the caller clears). Returns, per sample, the first row
    the caller must redo in log space (-1: none): where a reachable state (t >= _first_steps, t < Lin,
    s <= 2L) holds a scaled alpha below _LINEAR_FLOOR (underflow: float64 keeps about 690 nats below the
    row's maximum, log space everything; or a -inf log-prob), the first row of the first segment of
    _RESCALE_STEPS rows where one does, the rows before it being exact; row 0 where a row turns
    infinite or NaN (an overflow from log-probs far above 0, a NaN log-prob). For the rest the result
    is the log-space value within float64 rounding, and -inf exactly where log space gives -inf (the
    states not reachable yet)."""
    T, n, C = lp_in.shape
    S = lprime.shape[1]
    f8 = np.dtype(np.float64)
    R = _RESCALE_STEPS
    G = _LINEAR_BLOCK_ROWS
    # p by an exp over the log-probs' C columns and a gather when C < S (fewer exps), else the other way
    # round: the same float64 exp of the same values either way
    by_columns = C < S
    gidx = (np.arange(n)[:, None] * C + lprime).reshape(-1)
    lpf = lp_in.reshape(T, n * C)
    first = _first_steps(skip, tl)
    outside = (np.arange(S)[None, :] > 2 * tl[:, None])[None]                  # (1, n, S): s > 2L
    reach_all = int(np.where(outside[0], 0, first).max())   # from here every state s <= 2L is reachable
    K = skip.astype(f8)
    # scratch the thread keeps (parallel.kept: fresh arrays of this size page-fault on every call)
    A = parallel.kept("ctc_alpha_rows", (G + 1, n, S + 2), f8)   # row 0: the previous block's last row
    A.fill(0)                                                    # a[s-1], a[s-2] = 0 at s = 0, 1
    W = parallel.kept("ctc_alpha_weights", (G, 3, n, S), f8)    # (p, p, skip p) of each row
    E = parallel.kept("ctc_alpha_exps", (G, n * C), f8)
    logs = parallel.kept("ctc_alpha_logs", (G, n, S), f8)
    buf = parallel.kept("ctc_alpha_products", (3, n, S), f8)
    Lc = np.zeros((G // R + 1, n), dtype=f8)      # [log-scale so far, log divisors of the block's segments]
    st = A.strides
    # V[i, k, n, s] = A[i, n, 2 + s - k] (k = 0, 1, 2: from s, s-1, s-2)
    V = np.lib.stride_tricks.as_strided(A[:, :, 2:], shape=(G + 1, 3, n, S), strides=(st[0], -st[2], st[1], st[2]))
    Ar = A[:, :, 2:]
    bad = np.zeros(n, dtype=bool)
    resume = np.full(n, -1, dtype=np.int64)       # first row to redo in log space (-1: none)
    vecdot = getattr(np, "vecdot", None)          # NumPy >= 2.0; else a multiply and a reduction, same sums
    mul, red, rmax, div = np.multiply, np.add.reduce, np.maximum.reduce, np.divide
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for t0 in range(0, tmax, G):
            t1 = min(tmax, t0 + G)
            steps = t1 - t0
            Pb = W[:steps, 0]
            src = lpf[t0:t1] if by_columns else np.take(lpf[t0:t1], gidx, axis=1)
            if src.dtype == np.float16:
                src = lowp.f16_to_f32(src)
            if by_columns:
                np.exp(src, out=E[:steps], dtype=f8)
                np.take(E[:steps], gidx, axis=1, out=Pb.reshape(steps, n * S))
            else:
                np.exp(src.reshape(steps, n, S), out=Pb, dtype=f8)
            # rows past a sample's input length and states past 2L get probability 0: they never set a
            # divisor nor reach the checks (whatever the log-probs hold there); exp and log take their
            # slow paths on infinities and zeros, so neither sees one here in the common case
            np.copyto(Pb, 0, where=(np.arange(t0, t1)[:, None] >= il[None, :])[:, :, None] | outside)
            W[:steps, 1] = Pb
            np.multiply(Pb, K, out=W[:steps, 2])
            cs = Lc[1:]
            cs[:] = 1
            if t0 == 0:
                Ar[1, :, :2] = Pb[0, :, :2]
                start = 1
            else:
                A[0] = A[G]
                start = 0
            for i in range(start, steps):
                if vecdot is not None:
                    vecdot(V[i], W[i], axis=0, out=Ar[i + 1])
                else:
                    mul(V[i], W[i], out=buf)
                    red(buf, 0, None, Ar[i + 1])
                if i % R == 0:                                   # rows t = 8k, k >= 1 (t0 is a multiple of 8)
                    c = cs[i // R]
                    rmax(Ar[i + 1], 1, None, c, False, _LINEAR_FLOOR)
                    div(Ar[i + 1], c[:, None], out=Ar[i + 1])
            rows = Ar[1:steps + 1]
            # every reachable state at t < Lin holds at least the floor: count them per segment of 8 rows
            # (NaN is not counted); a sample that underflows resumes at its first failing segment
            seg0 = np.arange(t0, t1, R)                                         # segments' first rows
            held = np.add.reduceat(np.count_nonzero(rows >= _LINEAR_FLOOR, axis=2), seg0 - t0, axis=0)
            ends = np.minimum(il[None, :], np.minimum(seg0 + R, t1)[:, None])  # (segments, n)
            due = np.clip(ends[:, :, None] - np.maximum(first[None], seg0[:, None, None]), 0, None).sum(axis=2)
            short_of = held != due                                             # (segments, n)
            lost = short_of.any(axis=0)
            np.log(cs, out=cs)
            np.add.accumulate(Lc, axis=0, out=Lc)                # running log-scale, in row order
            lg = logs[:steps]
            np.maximum(rows, _LINEAR_FLOOR, out=lg)              # zeros: unreachable, or cleared by the caller
            np.log(lg, out=lg)
            if t0 < reach_all:                                   # states not reachable yet: -inf
                np.copyto(lg, -np.inf, where=np.arange(t0, t1)[:, None, None] < first)
            seg = np.repeat(Lc[1:], R, axis=0)[:steps]           # (steps, n): each row's log-scale
            np.add(lg, seg[:, :, None], out=lt[t0:t1, :, 2:])
            Lc[0] = Lc[-1]
            # an overflow (a log-prob far above 0) or a NaN makes the rest of the sample's rows infinite
            # or NaN (infinity times a probability stays infinite, times a cleared 0 is NaN): all of it
            # is redone; an underflow from its failing segment on, the rows before it being exact
            broken = ~np.isfinite(Lc[0]) | ~np.isfinite(rmax(Ar[steps], 1))
            resume[~bad & broken] = 0
            resume[~bad & ~broken & lost] = seg0[short_of.argmax(axis=0)][~bad & ~broken & lost]
            bad |= broken | lost
            if (bad | (il <= t1)).all():                         # every sample failed or ended
                break
    return resume


def ctc_loss_forward(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    lp_in = np.ascontiguousarray(log_probs)
    nll, la = _forward_math(lp_in, targets, input_lengths, target_lengths, blank, zero_infinity)
    if lp_in.dtype == np.float16:
        return nll.astype(lp_in.dtype), lowp.f32_to_f16(la)
    return nll.astype(lp_in.dtype), la.astype(lp_in.dtype, copy=False)


def _forward_math(lp_in, targets, input_lengths, target_lengths, blank, zero_infinity):
    """(nll (N,), log_alpha (N, T, 2*maxL+1)) in the math dtype, before the cast to the storage type."""
    T, N, C = lp_in.shape
    md = math_dtype(lp_in.dtype)
    labels, bad, il, tl, max_l = _labels(targets, input_lengths, target_lengths, N, C)
    lprime, skip = _extended(labels, tl, blank, max_l)
    S = 2 * max_l + 1
    ninf = md.type(-np.inf)
    tmax = int(il.max()) if N else 0
    # log_alpha (n, t, s) lives in ext (n, t, 2 + s), whose two leading -inf columns make the s-1 / s-2
    # predecessors plain views; the recursion writes it through the (t, n, 2 + s) view, so no copy or
    # transposition follows. Only rows t < tmax are computed.
    ext = np.empty((N, T, S + 2), dtype=md)
    ext[:, :, :2] = ninf
    if tmax:
        lt = ext.transpose(1, 0, 2)
        if N * S > _LINEAR_MAX_STATES:
            _alpha(lp_in, md, lprime, skip, tmax, lt)
        else:
            with np.errstate(invalid="ignore"):
                fit = (il <= _LINEAR_MAX_STEPS) & (lp_in[:tmax].min(axis=(0, 2)) >= _LINEAR_MIN_LOG_PROB)
            short = np.where(fit, il, 0)                            # no row in linear space for the others
            resume = np.where(fit, -1, 0)
            if short.any():
                resume = np.maximum(resume, _alpha_linear(lp_in, lprime, skip, short, tl, int(short.max()), lt))
            # the samples linear space cannot take, in log space on their own, grouped by the row they
            # resume from (the linear rows before it are exact)
            for r in np.unique(resume[resume >= 0]):
                redo = np.nonzero(resume == r)[0]
                tr = int(il[redo].max())
                if tr <= r:
                    continue
                sub = np.empty((tr, redo.size, S + 2), dtype=md)
                sub[:, :, :2] = ninf
                if r:
                    sub[r - 1] = lt[r - 1, redo]
                _alpha(np.ascontiguousarray(lp_in[:, redo]), md, lprime[redo], skip[redo], tr, sub, int(r))
                lt[r:tr, redo] = sub[r:]
    la = ext[:, :, 2:]
    la[:, tmax:] = ninf
    # -inf at t >= Lin (those rows only feed later rows) and at s > 2L (those states only feed higher
    # states): per sample while that is a few calls, else by one masked copy
    if N <= _CUT_LOOP_SAMPLES:
        for b in range(N):
            la[b, il[b]:tmax] = ninf
            la[b, :il[b], 2 * tl[b] + 1:] = ninf
    else:
        cut = (np.arange(T)[None, :] >= il[:, None])[:, :, None] | (np.arange(S)[None, :] > 2 * tl[:, None])[:, None, :]
        np.copyto(la, ninf, where=cut)
    # loss from the last row t = Lin-1
    last = np.clip(il - 1, 0, max(T - 1, 0))
    row = la[np.arange(N), last]                      # (N, S)
    l1 = row[np.arange(N), 2 * tl] if N else np.zeros(0, md)
    l2 = np.where(tl > 0, row[np.arange(N), np.maximum(2 * tl - 1, 0)], ninf) if N else np.zeros(0, md)
    m = np.maximum(l1, l2)
    m = np.where(m == -np.inf, 0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = np.log(np.exp(l1 - m) + np.exp(l2 - m)) + m
    nll = -ll
    nll = np.where(il == 0, np.where(tl == 0, 0, np.inf), nll).astype(md)
    if zero_infinity:
        nll = np.where(nll == np.inf, 0, nll).astype(md)
    nll = np.where(bad, np.nan, nll).astype(md)
    la[bad] = np.nan
    return nll, la


def ctc_loss_backward(grad_out, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                      log_alpha, blank=0, zero_infinity=False):
    lp_in = np.asarray(log_probs)
    T, N, C = lp_in.shape
    md = math_dtype(lp_in.dtype)
    lp = np.ascontiguousarray(lp_in.astype(md, copy=False))
    g = np.broadcast_to(np.asarray(grad_out).astype(md).reshape(-1), (N,))   # a scalar serves every sample
    given_nll = np.asarray(neg_log_likelihood).astype(md).reshape(-1)
    labels, bad, il, tl, max_l = _labels(targets, input_lengths, target_lengths, N, C)
    lprime, skip = _extended(labels, tl, blank, max_l)
    S = 2 * max_l + 1
    la_all = np.asarray(log_alpha)
    if la_all.shape[2] < S:
        raise ValueError("log_alpha.shape[2] must be >= 2*max(target_lengths)+1")
    nll = given_nll
    if lp_in.dtype.itemsize == 2:
        # 16-bit storage: alpha and the loss again in float32 from the log-probs, in place of the
        # log_alpha and nll given, rounded to 16 bits (the given nll still decides zero_infinity)
        nll, la_all = _forward_math(np.ascontiguousarray(lp_in), targets, il, tl, blank, False)
    grad = np.zeros((T, N, C), dtype=md)
    tmax = int(il.max()) if N else 0
    if tmax:
        # the step's three-term sums by one np.vecdot call for small batches (two calls otherwise, faster
        # from about 16 samples on), the same bits either way
        by_vecdot = N * S <= _VECDOT_MAX_STATES and hasattr(np, "vecdot")   # NumPy >= 2.0
        _by_slices(partial(_gradient, lp, g, nll, labels, lprime, skip, il, tl, la_all, blank, by_vecdot, grad), N,
                   tmax * N * S)
    zero = zero_infinity & ((given_nll == np.inf) | (_cannot_align(la_all, il, tl) & ~bad))
    grad[:, zero, :] = 0
    grad[:, bad & ~zero, :] = np.nan
    return grad.astype(lp_in.dtype, copy=False)


def _cannot_align(log_alpha, il, tl):
    """(N,) bool: the samples whose labels no alignment produces, read from log_alpha itself: both
    final states, (Lin-1, 2L) and (Lin-1, 2L-1), are -inf (Lin = 0: any L > 0). zero_infinity zeroes
    them whatever nll it is given, as CANN's forward hands the backward 0 for such a sample."""
    n = il.shape[0]
    last = np.maximum(il - 1, 0)
    bidx = np.arange(n)
    with np.errstate(invalid="ignore"):
        end = log_alpha[bidx, last, 2 * tl] == -np.inf
        before = np.where(tl > 0, log_alpha[bidx, last, np.maximum(2 * tl - 1, 0)] == -np.inf, True)
    return np.where(il == 0, tl > 0, end & before)


def _gradient(lp, g, nll, labels, lprime, skip, il, tl, la_all, blank, by_vecdot, grad, b0, b1):
    """The gradient of the samples [b0, b1), written into grad[:, b0:b1] (rows t >= Lin stay 0; the
    caller applies zero_infinity and bad labels afterwards)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        _gradient_samples(lp, g[b0:b1], nll[b0:b1], labels[b0:b1], lprime[b0:b1], skip[b0:b1], il[b0:b1],
                      tl[b0:b1], la_all[b0:b1], blank, by_vecdot, grad[:, b0:b1], b0)


def _gradient_samples(lp, g, nll, labels, lprime, skip, il, tl, la_all, blank, by_vecdot, grad, b0):
    C = lp.shape[2]
    md = lp.dtype
    ninf = md.type(-np.inf)
    n, S = lprime.shape
    max_l = labels.shape[1]
    tmax = int(il.max()) if n else 0
    if tmax == 0:
        return
    bidx = np.arange(n)
    # log_alpha as (t, n, s) in the math dtype, -inf outside t < Lin, s <= 2L (never read there)
    # the call's working arrays are scratch the thread keeps (parallel.kept): fresh ones of this size
    # come from mmap and page-fault on every call
    la = parallel.kept("ctc_log_alpha", (tmax, n, S), md)
    np.copyto(la, la_all[:, :tmax, :S].transpose(1, 0, 2), casting="unsafe")
    for b in range(n):
        la[il[b]:, b, :] = ninf
        la[:, b, 2 * tl[b] + 1:] = ninf
        if il[b] > 0:   # PyTorch reads the last step at s = 2L-1, 2L only: garbage elsewhere there would
            # reach the result through the factors of the next step (0 * NaN) only when the batch
            # has longer inputs, so a sample's result would depend on the batch it came in
            la[il[b] - 1, b, :max(2 * tl[b] - 1, 0)] = ninf
    # log-probs gathered at the extended labels: (tmax, n, S)
    lpg = parallel.kept("ctc_label_log_probs", (tmax, n, S), md)
    np.take(lp[:tmax].reshape(tmax, -1), ((b0 + bidx)[:, None] * C + lprime).reshape(-1), axis=1,
            out=lpg.reshape(tmax, n * S))
    # -inf where log_alpha was cleared above (states PyTorch's beta never reaches), so that a -inf of
    # log_alpha with a log-prob above -inf (lpg - la = +inf) marks an entry the recursion cannot take
    for b in range(n):
        lpg[il[b]:, b, :] = ninf
        lpg[:, b, 2 * tl[b] + 1:] = ninf
        if il[b] > 0:
            lpg[il[b] - 1, b, :max(2 * tl[b] - 1, 0)] = ninf
    # one reduction tells whether any log-prob is infinite or NaN (the sum of finite ones may overflow:
    # then the checks below run for nothing); rare, so the masks themselves run only then
    lps = lp[:tmax, b0:b0 + n]
    lp_nonfinite = not np.isfinite(np.add.reduce(lps, axis=None))
    # a log-prob of +inf at a state: PyTorch's beta is +inf (or NaN) there and at every state before it
    # that reaches it, which the recursion's factors cannot carry: such samples take log space
    inconsistent = np.zeros(n, bool)
    if lp_nonfinite:
        inconsistent |= (lpg == np.inf).any(axis=(0, 2))
    # where log_alpha may be -inf in its own recursion with finite log-probs: before a state's first
    # reachable step (inside the valid region; outside it lpg - la is NaN, not +inf)
    first = _first_steps(skip, tl)
    reach_all = int(np.where(np.arange(S)[None, :] > 2 * tl[:, None], 0, first).max())   # all reachable from here
    # gamma[t, n, s] = exp(alpha + beta - lp + nll) (state occupancy), by the posterior recursion
    #   gamma[t, s] = sum_{s' in {s, s+1, s+2}} gamma[t+1, s'] * exp(la[t, s] - la[t+1, s'] + lp[t+1, s'])
    # which telescopes to PyTorch's expression for any finite log_alpha (la[t+1] cancels), and whose
    # factors are <= 1 (the exponent is <= 0 for a consistent log_alpha): no scale that could under-
    # or overflow, and two NumPy calls per time step instead of the ten of a log-space recursion.
    skipadd = np.full((n, S), ninf, dtype=md)       # 0 where s -> s+2 is allowed, else -inf
    if S > 2:
        skipadd[:, :-2][skip[:, 2:]] = 0
    # start at t = Lin-1 from s = 2L and 2L-1 (beta = lp there)
    nll_eff = nll.copy()
    nf = ~np.isfinite(nll)
    # G[t, n, s] for s < S + 2 (two 0 columns past the last state). For np.vecdot its state axis runs
    # backwards in memory (Gm): the (s, s+1, s+2) view of the recursion then has a negative stride,
    # which vecdot sums in a plain loop (a positive one goes to BLAS's dot, one call per state: 1.2-1.6x
    # slower at N = 1-2); the multiply of larger batches wants it forwards (SIMD). Same bits either way.
    Gm = parallel.kept("ctc_occupancy", (tmax, n, S + 2), md)
    Gm.fill(0)
    G = Gm[:, :, ::-1] if by_vecdot else Gm
    last = np.maximum(il - 1, 0)
    s2 = 2 * tl
    s1 = np.maximum(2 * tl - 1, 0)
    e2 = la[last, bidx, s2]
    e1 = np.where(tl > 0, la[last, bidx, s1], ninf)
    if nf.any():
        m = np.maximum(e1, e2)
        m = np.where(np.isfinite(m), m, 0)
        nll_eff[nf] = -(np.log(np.exp(e1 - m) + np.exp(e2 - m)) + m)[nf]
        nll_eff[nf & ~np.isfinite(nll_eff)] = 0
    v2 = np.exp(e2 + nll_eff)
    v1 = np.where(tl > 0, np.exp(e1 + nll_eff), 0)
    starts = {}
    for b in range(n):
        if il[b] > 0:
            starts.setdefault(int(il[b]) - 1, []).append(b)
    for t, bs in starts.items():
        bs = np.array(bs)
        G[t, bs, s2[bs]] = v2[bs]
        G[t, bs, s1[bs]] += v1[bs]
    if tmax > 1:
        # factors F[t, k, n, s] = exp(la[t, s] + lp[t+1, s+k] - la[t+1, s+k]), built per block of time
        # steps into reused buffers, consumed right after (cache-resident)
        nb = max(1, min(tmax - 1, max(32, _BLOCK_BYTES // (12 * n * S))))
        Fb = parallel.kept("ctc_factors", (nb, 3, n, S), md)
        Db = parallel.kept("ctc_differences", (nb, n, S + 2), md)
        Db[:, :, S:] = ninf                              # the s+1, s+2 neighbours past the last state
        mb = parallel.kept("ctc_mask", (nb, n, S), bool)
        above = parallel.kept("ctc_above", (nb, n, S), bool)        # la[t, s] > -inf
        reach = parallel.kept("ctc_reach", (nb, n, S), bool)        # some predecessor of (t+1, s) above -inf
        tmp = parallel.kept("ctc_products", (3, n, S), md)
        st = G.strides
        V = np.lib.stride_tricks.as_strided(G, shape=(tmax, 3, n, S), strides=(st[0], st[2], st[1], st[2]))
        Gs = G[:, :, :S]
        mul, red, vecdot = np.multiply, np.add.reduce, getattr(np, "vecdot", None)
        big = md.type(np.finfo(md).max)
        t1 = tmax - 1
        while t1 > 0:
            t0 = max(0, t1 - nb)
            steps = t1 - t0
            Fx, Dx, mx = Fb[:steps], Db[:steps, :, :S], mb[:steps]
            np.subtract(lpg[t0 + 1:t1 + 1], la[t0 + 1:t1 + 1], out=Dx)
            # la[t+1, s] = -inf although a predecessor la[t, s'] is above -inf and lp is not -inf: the
            # factors would divide by exp(-inf) (PyTorch's beta never reads la, the recursion does):
            # a given log_alpha that its own recursion does not produce; such samples take log space
            # (candidates: a -inf at or after the state's first reachable step, which a consistent
            # log_alpha holds only where a log-prob of -inf cut every path; rare, then checked in full)
            ab, rc = above[:steps], reach[:steps]
            np.equal(Dx, np.inf, out=mx)
            if t0 + 1 < reach_all:
                np.greater_equal(np.arange(t0 + 1, t1 + 1)[:, None, None], first[None], out=rc)
                np.logical_and(rc, mx, out=rc)
            if (rc if t0 + 1 < reach_all else mx).any():
                np.greater(la[t0:t1], ninf, out=ab)
                rc[:, :, :2] = False
                np.logical_and(ab[:, :, :-2], skip[:, 2:], out=rc[:, :, 2:])
                np.logical_or(rc[:, :, 1:], ab[:, :, :-1], out=rc[:, :, 1:])
                np.logical_or(rc, ab, out=rc)
                np.logical_and(rc, mx, out=rc)
                inconsistent |= rc.any(axis=(0, 2))
            np.less(Dx, big, out=mx)                     # False for +inf (la = -inf) and NaN
            np.logical_not(mx, out=mx)
            np.copyto(Dx, ninf, where=mx)
            for k in range(3):
                np.add(la[t0:t1], Db[:steps, :, k:k + S], out=Fx[:, k])
            np.add(Fx[:, 2], skipadd, out=Fx[:, 2])
            np.exp(Fx, out=Fx)
            if by_vecdot:
                for t in range(t1 - 1, t0 - 1, -1):
                    if t in starts:
                        Gs[t] += vecdot(Fx[t - t0], V[t + 1], axis=0)
                    else:
                        vecdot(Fx[t - t0], V[t + 1], axis=0, out=Gs[t])
            else:
                for t in range(t1 - 1, t0 - 1, -1):
                    mul(Fx[t - t0], V[t + 1], out=tmp)
                    if t in starts:
                        Gs[t] += red(tmp, 0)
                    else:
                        red(tmp, 0, None, Gs[t])
            t1 = t0
    # The factors cancel log_alpha exactly only while it is finite and of moderate size: a NaN or an
    # infinite entry inside the valid region (garbage) makes the recursion non-finite, and log-probs
    # like -1e30 cancel at 1e30 into factors of exactly 1 (finite, and wrong). For consistent inputs
    # the occupancies of every time step sum to the same mass (1: the probability of the labels), so
    # a sample whose mass is non-finite or drifts over time is redone with PyTorch's log-space beta
    # recursion, which gives the formula's own value for any input (an inconsistent logAlpha or nll
    # only costs that slower path).
    mass = G[:, :, :S].sum(axis=2)                                          # (tmax, n)
    final = mass[last, bidx]
    drift = np.abs(mass - final[None, :]) > md.type(1e-2 if md == np.float32 else 1e-8) * np.abs(final)
    live = np.arange(tmax)[:, None] < il[None, :]
    redo = np.nonzero(((drift | ~np.isfinite(mass)) & live).any(axis=0) | ~np.isfinite(final) | inconsistent)[0]
    if redo.size:
        G[:, redo, :S] = _occupancy_from_log_beta(la[:, redo], lpg[:, redo], skipadd[redo], il[redo], tl[redo],
                                                  nll_eff[redo])
    # PyTorch CPU assigns (not accumulates) at t = Lin-1: with last label == blank, the blank column
    # there comes from s = 2L-1 alone
    last_lab = np.where(tl > 0, labels[bidx, np.maximum(tl - 1, 0)] if max_l else 0, -1)
    drop = np.nonzero((tl > 0) & (last_lab == blank) & (il > 0))[0]
    if drop.size:
        G[last[drop], drop, s2[drop]] = 0
    # blank column: the even states; label columns: the odd states, added with np.add.at, which adds
    # repeated indices one after another: a label occurring twice gets its occupancies summed in
    # label order, on top of the blank sum when the label is the blank
    sums = parallel.kept("ctc_column_sums", (tmax, n, C), md)
    sums.fill(0)
    sums[:, bidx, blank] = np.ascontiguousarray(G[:, :, 0:S:2]).sum(axis=2)     # in state order
    if max_l:
        bb, jj = np.nonzero(np.arange(max_l)[None, :] < tl[:, None])
        occupancy = np.take(Gm.reshape(tmax, -1), bb * (S + 2) + (S - 2 * jj if by_vecdot else 2 * jj + 1), axis=1)
        columns = np.arange(tmax)[:, None] * (n * C) + (bb * C + labels[bb, jj])
        np.add.at(sums.reshape(-1), columns.reshape(-1), occupancy.reshape(-1))
    out = grad[:tmax]
    np.exp(lp[:tmax, b0:b0 + n], out=out)
    np.subtract(out, sums, out=out)
    if nf.any():
        lp_nf = lp[:tmax, b0:b0 + n][:, nf, :]
        out[:, nf, :] = np.exp(lp_nf) - np.exp(np.log(sums[:, nf, :]) + (nll - nll_eff)[None, nf, None])
    out *= g[None, :, None]
    # PyTorch's formula where lp = -inf: exp(-inf) - exp(lcab + nll + inf) is NaN (-inf - -inf in the
    # exponent) at every column, label or not; the occupancy recursion would give its limit, 0
    if lp_nonfinite:                                    # -inf is rare: its mask only then
        np.copyto(out, md.type(np.nan), where=lps == -np.inf)
    for b in range(n):
        if il[b] < tmax:
            out[il[b]:, b, :] = 0


def _occupancy_from_log_beta(la, lpg, skipadd, il, tl, nll):
    """exp(alpha + beta - lp + nll) of shape (tmax, m, S), with beta by PyTorch's log-space recursion
    (docs/OPERATORS.md §1 step 2), for the samples the posterior recursion cannot take. la is -inf
    outside each sample's valid region; skipadd (m, S) is 0 where s -> s+2 is allowed, else -inf."""
    tmax, m, S = la.shape
    md = la.dtype
    ninf = md.type(-np.inf)
    rows = np.arange(tmax)[:, None] < il[None, :]                          # (tmax, m): t < Lin
    states = np.arange(S)[None, :] <= 2 * tl[:, None]                      # (m, S): s <= 2L
    beta = np.full((tmax, m, S + 2), ninf, dtype=md)  # two -inf columns: s+1 and s+2 stay views
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for t in range(tmax - 1, -1, -1):
            if t + 1 < tmax:
                nxt = beta[t + 1]
                # a skip not allowed reads -inf (selected, not added: beta = +inf there gives no NaN)
                terms = np.stack([nxt[:, :S], nxt[:, 1:S + 1], np.where(skipadd == 0, nxt[:, 2:], ninf)])
                mx = terms.max(axis=0)
                mx = np.where(mx == ninf, md.type(0), mx)                  # all -inf: stays -inf
                beta[t, :, :S] = np.log(np.exp(terms - mx).sum(axis=0)) + mx + lpg[t]
            first = np.nonzero(il - 1 == t)[0]                             # each sample's last step
            if first.size:
                beta[t, first, :S] = ninf
                beta[t, first, 2 * tl[first]] = lpg[t, first, 2 * tl[first]]
                odd = first[tl[first] > 0]
                beta[t, odd, 2 * tl[odd] - 1] = lpg[t, odd, 2 * tl[odd] - 1]
            beta[t, ~rows[t], :] = ninf
            beta[t, :, :S][~states] = ninf
        # alpha + beta = -inf: occupancy 0, also where lpg is -inf (cleared with la outside the valid
        # region; inside it PyTorch's NaN for lp = -inf is the caller's)
        ab = la + beta[:, :, :S]
        occupancy = np.exp(ab - lpg + nll[None, :, None])
        np.copyto(occupancy, 0, where=ab == ninf)
        return occupancy
