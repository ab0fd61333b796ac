"""NumPy scaled masked softmax (forward) and its backward: what the cpu device runs.

Semantics (docs/OPERATORS.md §5, docs/API.md §7):

    forward : y = softmax(scale * x) over the last axis, masked positions excluded (y == 0 there);
              a fully masked row gives zeros.
    backward: out = scale * y * (g - sum_row(g * y)), then exactly 0 wherever masked. The row sum
              runs over the whole row, masked positions included.

The mask is bool, 4-D (Bm, Nm, S1, S2) with Bm in {B, 1}, Nm in {N, 1}; true means "masked out".
`fix_triu_mask=True` additionally masks j > i (i = row index within S1); the mask may then be None.

Math is float32 for float16 / bfloat16 / float32 storage (never float64); inputs are never written;
a broadcast mask is used through NumPy broadcasting (`where=`), never materialised at full size.
Everything is done in one float32 result buffer, in place.
"""
from __future__ import annotations

import threading

import numpy as np

from . import lowp, parallel

_F32 = np.float32
_SUM_MIN = _F32(2.0 ** -64)   # the smallest row sum of exp the unshifted forward takes as it is


def _combined_mask(mask, s1: int, s2: int, fix_triu_mask: bool):
    """The effective mask, broadcastable to (B, N, S1, S2), or None when nothing is masked. With
    fix_triu_mask the causal mask (S1, S2) is or-ed in; the result is at most the mask's own size."""
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            mask = mask != 0
    if fix_triu_mask:
        i = np.arange(s1, dtype=np.int64)[:, None]
        j = np.arange(s2, dtype=np.int64)[None, :]
        triu = j > i
        mask = triu if mask is None else np.logical_or(mask, triu)
    return mask


def _keep_bits(mask: np.ndarray) -> np.ndarray:
    """uint32 AND-masks of a bool mask: masked -> 0, kept -> 0xFFFFFFFF."""
    keep = mask.astype(np.uint32)
    keep -= np.uint32(1)
    return keep


def _as_f32(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == _F32 else a.astype(_F32)


def scaled_masked_softmax(x: np.ndarray, mask, scale: float = 1.0, fix_triu_mask: bool = False) -> np.ndarray:
    """y = softmax(scale * x) over the last axis with masked positions excluded; x is (B, N, S1, S2)
    float16 / bfloat16 / float32; returns y in x's dtype. Fully masked rows are zeros.

    4-D inputs run in chunks of whole rows (CHUNK_ELEMS elements, cache-resident float32 scratch),
    on the thread pool when large, in the unshifted form exp(t) / sum exp(t) (rows outside its range
    redone in the max-shifted form, row by row); every row gets the same operations whatever its
    chunk, so the result does not depend on the chunking."""
    x = np.asarray(x)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            mask = mask != 0
    if x.ndim != 4 or x.size == 0 or (mask is not None and mask.ndim != 4):
        return _scaled_masked_softmax_whole(x, mask, scale, fix_triu_mask)
    dtype = x.dtype
    out = np.empty(x.shape, dtype)
    S1, S2 = x.shape[-2], x.shape[-1]
    sc = _F32(scale)
    direct = dtype == _F32
    cm = _combined_mask(mask, S1, S2, fix_triu_mask)
    if cm is not None:
        if cm.ndim == 2:
            cm = cm[None, None]
        if cm.shape[2:] != (S1, S2) or cm.shape[0] not in (1, x.shape[0]) or cm.shape[1] not in (1, x.shape[1]):
            return _scaled_masked_softmax_whole(x, mask, scale, fix_triu_mask)
        # bit masks at the mask's own size: t = (t & keep) | ninf_bits sets -inf exactly where masked
        keep = _keep_bits(cm)
        setb = np.invert(keep)
        setb &= np.uint32(0xFF800000)                    # masked -> the bits of -inf, kept -> 0
        whole_row = cm.all(axis=-1, keepdims=True)       # fully masked rows: a zero sum is right there

    def scaled(xc, t, midx):
        """t = scale * x, -inf where masked."""
        if dtype == np.float16:
            lowp.f16_to_f32(xc, t)
            t *= sc
        else:
            np.multiply(xc, sc, out=t, dtype=_F32)
        if cm is not None:                               # the mask broadcasts over the chunk
            bits = t.view(np.uint32)
            np.bitwise_and(bits, keep[midx], out=bits)
            np.bitwise_or(bits, setb[midx], out=bits)

    def work(piece):
        idx, midx, (i0, i1) = piece
        xc, oc = x[idx], out[idx]
        n = oc.size
        A, Bf, Cf = _scratch(n)
        t = oc if direct else A[:n].reshape(oc.shape)
        scaled(xc, t, midx)
        # unshifted: exp(t) / sum exp(t), two passes fewer than the max-shifted form (no max, no
        # subtraction) and as accurate (each exp within about an ulp, the same relative rounding of
        # the sum) wherever the sum lies in [2^-64, overflow); the other rows (a scaled logit above
        # ~88, all below ~-44, NaN, +inf; a fully masked row's zero sum is right as it is) are redone
        # in the shifted form, row by row, so no row depends on the others of its chunk
        with np.errstate(all="ignore"):                  # overflow, inf / inf: rows redone below
            np.exp(t, out=t)
            sm = t.sum(axis=-1, keepdims=True)
            redo = None
            if not (sm.min() >= _SUM_MIN and sm.max() < np.inf):
                bad = ~((sm >= _SUM_MIN) & (sm < np.inf))
                if cm is not None:
                    bad &= ~(np.broadcast_to(whole_row[midx], sm.shape) & (sm == 0))
                redo = np.flatnonzero(bad)
            np.copyto(sm, _F32(1), where=sm == 0)        # fully masked row stays all zeros
            t /= sm
        if redo is not None and redo.size:
            again = Bf[:n].reshape(oc.shape)             # free until the final rounding
            scaled(xc, again, midx)
            rows = again.reshape(-1, S2)[redo]
            _shifted_softmax(rows)
            t.reshape(-1, S2)[redo] = rows
        if not direct:
            lowp.from_f32(t, oc, Bf, Cf)

    _run_chunks(work, list(_chunks(x.shape, None if cm is None else cm.shape)))
    return out


def _shifted_softmax(t: np.ndarray) -> None:
    """t = softmax(t) over the last axis in place, by the max-shifted form (fully masked rows: 0)."""
    mx = t.max(axis=-1, keepdims=True)
    np.copyto(mx, _F32(0), where=mx == _F32(-np.inf))         # fully masked row: exp(-inf) = 0, no NaN
    t -= mx
    np.exp(t, out=t)
    sm = t.sum(axis=-1, keepdims=True)
    np.copyto(sm, _F32(1), where=sm == 0)            # fully masked row stays all zeros
    t /= sm


def _scaled_masked_softmax_whole(x, mask, scale, fix_triu_mask):
    """Softmax over the whole tensor at once in the max-shifted form (shapes other than 4-D)."""
    dtype = x.dtype
    t = np.multiply(x, _F32(scale), dtype=_F32)          # the one float32 buffer (x is not written)
    if t.size == 0:
        return t.astype(dtype, copy=False)
    s1, s2 = x.shape[-2], x.shape[-1]
    m = _combined_mask(mask, s1, s2, fix_triu_mask)
    if m is not None:
        np.copyto(t, _F32(-np.inf), where=m)              # broadcasts the mask, no full-size copy
    _shifted_softmax(t)
    return t if dtype == _F32 else t.astype(dtype)


# Elements per chunk: each chunk costs ~40 us of Python and pool handoff besides its NumPy work, so
# chunks are large; 2 MiB fp32 buffers still stay in the last-level cache (measured on the 2-core
# bench machine, fp32 and fp16: 1 << 19 is 1.7-2x faster than 1 << 16).
CHUNK_ELEMS = 1 << 19
_TLS = threading.local()


def _scratch(n: int):
    """Three float32 buffers of at least n elements, reused by the calling thread (no per-chunk
    allocation, no page faults)."""
    bufs = getattr(_TLS, "bufs", None)
    if bufs is None or bufs[0].size < n:
        bufs = _TLS.bufs = tuple(np.empty(max(n, CHUNK_ELEMS), _F32) for _ in range(3))
    return bufs


def _run_chunks(work, pieces) -> None:
    """Run `work` over the chunks, on every core when there are enough of them (the chunks write
    disjoint rows, so the result does not depend on the order)."""
    if len(pieces) < 4:
        for piece in pieces:
            work(piece)
        return
    parallel.run_pieces(work, pieces)


def _chunks(shape, mask_shape):
    """(data index, mask index, row range) triples tiling a (B, N, S1, S2) tensor into chunks of
    about CHUNK_ELEMS elements along whole rows; the mask index follows its broadcast dims."""
    B, N, S1, S2 = shape
    Bm, Nm = (mask_shape[0], mask_shape[1]) if mask_shape is not None else (1, 1)
    rows = max(1, CHUNK_ELEMS // max(S2, 1))
    full = slice(None)

    def mb(b0, b1):
        return slice(b0, b1) if Bm != 1 else full

    def mn(n0, n1):
        return slice(n0, n1) if Nm != 1 else full

    if rows >= N * S1:
        step = max(1, rows // (N * S1))
        for b0 in range(0, B, step):
            b1 = min(B, b0 + step)
            yield (slice(b0, b1),), (mb(b0, b1),), (0, S1)
    elif rows >= S1:
        step = max(1, rows // S1)
        for b in range(B):
            for n0 in range(0, N, step):
                n1 = min(N, n0 + step)
                yield (slice(b, b + 1), slice(n0, n1)), (mb(b, b + 1), mn(n0, n1)), (0, S1)
    else:
        for b in range(B):
            for n in range(N):
                for i0 in range(0, S1, rows):
                    i1 = min(S1, i0 + rows)
                    yield ((slice(b, b + 1), slice(n, n + 1), slice(i0, i1)),
                           (mb(b, b + 1), mn(n, n + 1), slice(i0, i1)), (i0, i1))


def scaled_masked_softmax_backward(grad_output: np.ndarray, y: np.ndarray, mask, scale: float = 1.0,
                                   fix_triu_mask: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """out = scale * y * (g - sum_row(g * y)), then 0 where masked (the row sum includes masked
    positions). grad_output and y share one (B, N, S1, S2) shape and dtype; returns that dtype
    (written into `out`, any float dtype and strides, when given).

    Runs in chunks of whole rows (CHUNK_ELEMS elements) so that the float32 temporaries stay in
    cache: each input is converted to float32 once and every output element is stored once."""
    g = np.asarray(grad_output)
    y = np.asarray(y)
    if out is None:
        out = np.empty(g.shape, g.dtype)
    if g.size == 0:
        return out
    S1, S2 = g.shape[-2], g.shape[-1]
    s = _F32(scale)
    convert = g.dtype != _F32
    cm = _combined_mask(mask, S1, S2, fix_triu_mask)
    if cm is not None and cm.ndim == 2:
        cm = cm[None, None]
    # AND-masks of a broadcast mask, made once (every head's chunks reuse them); a full-size mask is
    # converted chunk by chunk instead (its uint32 masks would be as large as the data)
    keep_bits = _keep_bits(cm) if cm is not None and cm.size < g.size else None

    def work(piece):
        idx, midx, _ = piece
        gc, yc, oc = g[idx], y[idx], out[idx]
        n = oc.size
        if convert:                                      # float16 through lowp's table / bit tricks
            G, Y, T = _scratch(n)
            gc = lowp.to_f32(gc, G[:n].reshape(oc.shape))
            yc = lowp.to_f32(yc, Y[:n].reshape(oc.shape))
            t = T[:n].reshape(oc.shape)
        else:
            t = oc if (oc.dtype == _F32 and oc.flags.c_contiguous) else _scratch(n)[2][:n].reshape(oc.shape)
        np.multiply(gc, yc, out=t)
        dot = t.sum(axis=-1, keepdims=True)              # float32 pairwise row sums
        np.subtract(gc, dot, out=t)
        t *= yc
        if scale != 1.0:                                 # CANN skips the multiply for scale == 1
            t *= s
        if cm is not None:                               # exact zeros (even over inf/NaN): t &= keep bits
            keep = keep_bits[midx] if keep_bits is not None else _keep_bits(cm[midx])
            bits = t.view(np.uint32)
            np.bitwise_and(bits, keep, out=bits)
        if t is not oc:
            if convert:                                  # gc / yc are free now: scratch of the rounding
                lowp.from_f32(t, oc, G, Y)
            else:
                lowp.from_f32(t, oc)

    _run_chunks(work, list(_chunks(g.shape, None if cm is None else cm.shape)))
    return out


__all__ = ["scaled_masked_softmax", "scaled_masked_softmax_backward"]
