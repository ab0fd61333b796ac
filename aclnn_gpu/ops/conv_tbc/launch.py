"""GPU plan of ConvTBC forward and backward: plain functions over a KernelContext.

Tensors are contiguous and of one storage dtype (float32, float16, bfloat16): input x (T, B, Cin),
weight w (K, Cin, Cout), bias (Cout), grad / output dy (Tout, B, Cout), Tout = T + 2*pad - K + 1.
The glue has validated everything, staged strided views into contiguous copies and promoted mixed
dtypes; this module lays out the workspace, launches the kernels of `kernels/conv_tbc.cu` and runs
the products through `ctx.gemm_strided_batched` and `ctx.gemm_batched` (cuBLAS on the cuda device,
NumPy on emulated).

Precision (`kernels/gemm.compute_mode`): fp32 with cubeMathType 0 -> true fp32 (COMPUTE_32F);
1, 3 -> TF32 (COMPUTE_32F_FAST_TF32); 2 -> operands converted to fp16 while they are copied anyway
(or by one tbc_copy), fp32 accumulation, fp32 results. fp16/bf16: tensor cores with fp32
accumulation (COMPUTE_32F and CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, kernels/gemm.py).

No padded copies, no padding multiplied: every product covers only the (time, tap) pairs whose
rows exist, as PyTorch's narrow()s do, so an inf/NaN in one operand never meets a padding zero.

Every sum over the K taps of gradInput and of the forward happens inside ONE GEMM's depth, so it
accumulates in fp32 and is rounded once, straight into the output (no fp32 accumulator in memory, no
cast pass). The trick is the batch-major copy S (B, Tn, C) of the time-major operand
(`tbc_batch_major`): for one sample, the K time rows a tap window reads are contiguous, K*C elements,
so "the K rows of the window" is one GEMM row of depth K*C. out[t] = sum_{j<K} src[t + first + j] @ Wj
(Wj = the tap that reads window row j):
  * interior rows (every tap valid) t0 + r + K*u, u < q = (t1 - t0) // K, for each residue r < K: rows
    of one residue read non-overlapping windows, so A = S + (b*Tn + t0 + r + first)*C with lda = K*C
    (cuBLAS needs lda >= depth: overlapping windows of stride C are not a legal matrix). ONE
    pointer-array GEMM (cublasGemmBatchedEx; `ctx.gemm_batched`) over the B*K entries (sample b,
    residue r), residue fastest; M = q, N, depth K*C; C rows every K*B*N. Its three pointer arrays are
    uploaded into the workspace on the stream (the frozen launch rebases their workspace words). A
    strided batch cannot express it: the entries' A offsets (b*Tn*C + r*C) and C offsets
    ((r*B + b)*N) need two strides. cuBLAS cannot check the alignment of pointers it reads from
    device memory, so the pointer-array GEMM runs only when every entry is 16-byte aligned (C and N
    multiples of 8 in fp16 / bf16, of 4 in fp32); otherwise one strided batch over the samples per
    residue (K launches);
  * the last (t1 - t0) % K interior rows: one strided batch over those rows (stride C in S, B*N in
    out), each a GEMM over the B samples (lda = Tn*C) of depth K*C;
  * boundary rows (some taps read outside [0, Tn)): one GEMM per row t over its valid taps j0..j1-1,
    rows = the B samples (lda = Tn*C), depth (j1 - j0)*C -- at most 2*(K-1) small launches.
gradInput = that with src = dy, first = pad - K + 1, Wj = w[K-1-j]^T: W (K*Cout, Cin) is the
  tap-reversed transposed weight in the workspace; beta = 0.
Forward y = the same with src = x, first = -pad, Wj = w[j] (w itself is the (K*Cin, Cout) stack),
  y pre-filled with the bias (a tbc_copy broadcast) and beta = 1: one rounding of bias + taps.
gradWeight[k] = x[lo_k + k - pad : hi_k + k - pad]^T @ dy[lo_k : hi_k] over its valid output rows
  [lo_k, hi_k) (lo_k = max(0, pad - k), hi_k = min(Tout, T + pad - k)), in fp32: ONE strided-batched
  GEMM over the K taps on the rows [pad, Tout - pad) every tap reads (A = x shifted by one time row
  B*Cin per tap, B = dy with stride 0: the taps' overlapping operands are read once), then each
  remaining row t (at most K - 1 at either end) adds its taps [k0, k1) with one strided-batched GEMM
  of depth B and beta = 1 (a tap whose rows are all common gets none). fp32 gradWeight is the
  accumulator itself; fp16 / bf16 sum into a workspace dW32 that `tbc_weights` rounds once into
  gradWeight in the launch that also writes W (so W's reorder costs no launch of its own). With no
  common row (T < K) dW32 is zero-filled and every row adds.
gradBias = the column sums of dy, taken by the same tbc_batch_major pass that makes dy's batch-major
  copy (16-byte packets, fixed order, S > 1 row chunks -> fp32 partials + a second launch).
  The pass runs its row chunks in reverse block order (partials still indexed by chunk: same sums,
  same bits), so it ends on the head of dy: gradWeight's GEMM, the next big launch, reads dy first
  (its column-major A) from the head and finds what the L2 still holds of it.

Launches, backward K=3 pad=1 fp16: 1 (+1 partial sums) copy+bias, 1 gradWeight + 2 boundary rows,
1 tbc_weights, 1 interior gradInput + 1 leftover rows (when (T - K + 1) % K != 0) + 2 boundary rows:
10 at T=1024 B=32 C=1024 (PyTorch's conv_tbc_backward: 12). Traffic there (profiler, L2 model; X =
T*B*C*2 bytes = 67.1 MB, the operands x, dy, dx, w, dW = 213.9 MB): the copy reads dy and writes S
(2X), the interior GEMM reads S once and writes dx (2X), gradWeight reads x and dy once (2X, of which
25.4 MB of dy's head is still in L2 after the reversed copy) and writes dW32, tbc_weights moves the
weights: 415.5 MB = 1.94x the operands (with a forward-order copy: 440.9 MB, 2.06x; before this
plan's batched GEMMs: 849 MB, 3.97x; PyTorch's sequence: 1165 MB). See bench/README.md ("ConvTbc
backward, modelled").

Workspace (bytes; every region rounded up to 256; o = operand itemsize: 2 for fp32 with
cubeMathType 2 ("conv"), else the storage itemsize):
  backward = Sdy + W + X16 + D16 + DW32 + P + Part
    Sdy  = B * Tout * Cout * o               batch-major copy of dy
    W    = K * Cout * Cin * o                tap-reversed transposed weights
    X16  = T * B * Cin * 2, D16 = Tout * B * Cout * 2     fp16 copies for gradWeight, conv only
    DW32 = K * Cin * Cout * 4                fp32 gradWeight sums, fp16 / bf16 only
    P    = 3 * B * K * 8                     the interior GEMM's pointer arrays (A, B, C)
    Part = S * Cout * 4                      if S > 1 (gradBias row chunks, `bias_chunks`)
  forward = Sx + W16 + P: Sx = B * T * Cin * o, W16 = K * Cin * Cout * 2 (conv only)
  Empty input/weight (T, Cin or K == 0): gradInput = gradWeight = 0 (tbc_fill_zero), gradBias =
  column sums of dy (docs/API.md §7); workspace = Part only. Forward: y = bias broadcast.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ... import dtypes
from ...kernels import manifest
from ...kernels.context import KernelContext, KernelFile, ptr
from ...kernels.gemm import F32, compute_mode, rm_gemm, rm_gemm_batched

FILE = "conv_tbc.cu"
BLOCK = 256                 # threads per block, every kernel (tbc_batch_major requires 256)
ALIGN = 256
WARP = 32
MIN_CHUNK_ROWS = 512        # gradBias: rows per block at least this many
TARGET_BLOCKS = 512         # gradBias: aim for this many (tile, chunk) blocks
BLOCKS_PER_SM = 8
INT32_MAX = 2**31 - 1

_CTYPE = dtypes.cuda_types("float32", "float16", "bfloat16")


def _ct(dt) -> str:
    return _CTYPE[np.dtype(dt).name]


def _al(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class _Layout:
    offsets: dict
    size: int


def _layout(regions: list[tuple[str, int]]) -> _Layout:
    off, offs = 0, {}
    for name, nbytes in regions:
        if nbytes > 0:
            offs[name] = off
            off += _al(nbytes)
    return _Layout(offs, off)


def bias_chunks(R: int, C: int, min_rows: int = MIN_CHUNK_ROWS) -> tuple[int, int]:
    """(S, rows_per_chunk) of the gradBias reduction over R rows and C columns (tiles of 32 columns,
    the scalar path's, so that the workspace does not depend on pointer alignment)."""
    if R <= 0:
        return 1, 1
    tiles = max(1, -(-C // WARP))
    S = min(-(-R // min_rows), max(1, -(-TARGET_BLOCKS // tiles)))
    S = max(1, S)
    rpc = -(-R // S)
    return -(-R // rpc), rpc


def _is_empty(T, Cin, K) -> bool:
    return T == 0 or Cin == 0 or K == 0


def _backward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type, min_chunk_rows=MIN_CHUNK_ROWS) -> _Layout:
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    S, _ = bias_chunks(Tout * B, Cout, min_chunk_rows)
    part = S * Cout * 4 if S > 1 else 0
    if _is_empty(T, Cin, K):
        return _layout([("part", part)])
    odt, _ = compute_mode(cube_math_type, dtype)
    conv = odt != dtype
    o = odt.itemsize
    return _layout([
        ("sdy", B * Tout * Cout * o),
        ("w", K * Cout * Cin * o),
        ("x16", T * B * Cin * o if conv else 0),
        ("dy16", Tout * B * Cout * o if conv else 0),
        ("dw32", K * Cin * Cout * 4 if dtype != F32 else 0),
        ("ptrs", pointer_table_bytes(B, K)),
        ("part", part),
    ])


def _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type) -> _Layout:
    dtype = np.dtype(dtype)
    if _is_empty(T, Cin, K):
        return _layout([])
    odt, _ = compute_mode(cube_math_type, dtype)
    conv = odt != dtype
    o = odt.itemsize
    return _layout([
        ("sx", B * T * Cin * o),
        ("w", K * Cin * Cout * o if conv else 0),
        ("ptrs", pointer_table_bytes(B, K)),
    ])


def backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cube_math_type=0, *,
                             min_chunk_rows=MIN_CHUNK_ROWS) -> int:
    return _backward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type, min_chunk_rows).size


def forward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cube_math_type=0) -> int:
    return _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type).size


def check_gemm_limits(T, B, Cin, Cout, K, pad) -> str | None:
    """cuBLAS takes 32-bit m, n, k, ld: a message when a product would exceed them, else None."""
    Tout = T + 2 * pad - K + 1
    big = max(Tout * B, T * B, Cin, Cout,
              Tout * Cout, T * Cin,                 # boundary rows: lda = Tn * C of the batch-major copy
              K * B * Cin, K * B * Cout)            # interior rows: ldc = K * B * N
    if big > INT32_MAX:
        return f"a matrix dimension ({big}) exceeds cuBLAS's 32-bit limit {INT32_MAX}"
    return None


# ------------------------------------------------------------------------------ launches
def _grid(ctx: KernelContext, n: int) -> tuple[int, int, int]:
    return (max(1, min(-(-n // BLOCK), ctx.sm_count * BLOCKS_PER_SM)), 1, 1)


def _copy(ctx, tin, tout, src, dst, shape, strides):
    """dst (R, B, C) contiguous of tout = the (R, B, C) view of src (element strides, any sign)."""
    R, B, C = shape
    if R * B * C == 0:
        return
    st, sb, sc = strides
    ctx.launch(FILE, f"tbc_copy<{_ct(tin)}, {_ct(tout)}>", _grid(ctx, R * B * C), (BLOCK, 1, 1),
               (ptr(src), ptr(dst), np.int64(R), np.int64(B), np.int64(C), np.int64(st), np.int64(sb),
                np.int64(sc)))


def convert_copy(ctx: KernelContext, src_dtype, dst_dtype, shape: tuple[int, int, int],
                 src_strides: tuple[int, int, int], src: int, dst: int) -> None:
    """dst, a contiguous (R, B, C) array of dst_dtype = src, an (R, B, C) view of src_dtype with the
    given element strides (one tbc_copy: gathers a strided operand and converts its dtype)."""
    _copy(ctx, src_dtype, dst_dtype, src, dst, shape, src_strides)


def _dense(shape) -> tuple[int, int, int]:
    return (shape[1] * shape[2], shape[2], 1)


def _fill_zero(ctx, dt, p, n):
    if n == 0:
        return
    ctx.launch(FILE, f"tbc_fill_zero<{_ct(dt)}>", _grid(ctx, n), (BLOCK, 1, 1), (ptr(p), np.int64(n)))


def _batch_major(ctx, tin, tout, src, dst, Tn, B, C, *, sums=0, sum_dtype=None, part=0,
                 min_chunk_rows=MIN_CHUNK_ROWS):
    """dst (B, Tn, C) = src (Tn, B, C) (dst 0: none) and, with `sums`, its column sums over the Tn*B
    rows in sum_dtype (through fp32 partials at `part` when the rows take several chunks)."""
    R = Tn * B
    if R * C == 0:
        return
    sum_dtype = np.dtype(sum_dtype or tin)
    packet = 16 // np.dtype(tin).itemsize
    vec = int(np.dtype(tin) == np.dtype(tout) and C % packet == 0 and src % 16 == 0 and dst % 16 == 0)
    S, rpc = bias_chunks(R, C, min_chunk_rows) if sums else (1, R)
    tiles = -(-C // (WARP * (packet if vec else 1)))
    gx = max(1, min(tiles, max(1, ctx.sm_count * BLOCKS_PER_SM // S)))
    first_sum = sum_dtype if S == 1 else F32
    target = sums if S == 1 else part
    ctx.launch(FILE, f"tbc_batch_major<{_ct(tin)}, {_ct(tout)}, {_ct(first_sum)}>", (gx, S, 1), (BLOCK, 1, 1),
               (ptr(src), ptr(dst), ptr(target), np.int64(Tn), np.int64(B), np.int64(C), np.int64(rpc),
                np.int32(vec)))
    if S > 1:
        # second pass: fixed-order sum of the S fp32 partial rows, rounded once to the bias dtype
        _batch_major(ctx, F32, F32, part, 0, S, 1, C, sums=sums, sum_dtype=sum_dtype)


def pointer_table_bytes(B: int, K: int) -> int:
    """The A, B and C pointer arrays of the interior GEMM (one entry per sample and tap residue)."""
    return 3 * B * K * 8


def _interior(rows_out: int, Tn: int, K: int, first: int) -> tuple[int, int]:
    """[t0, t1): the output rows t < rows_out whose K taps all read a row of src, i.e. for which
    0 <= t + first + j < Tn for every j < K (empty when no row has all its taps)."""
    t0 = max(0, -first)
    return t0, max(t0, min(rows_out, Tn - K - first + 1))


def _boundary(rows_out: int, Tn: int, K: int, first: int, t0: int, t1: int) -> Iterator[tuple[int, int, int]]:
    """(t, j0, j1) for the output rows outside the interior [t0, t1) that have a valid tap, in
    ascending t: taps j0 <= j < j1 read rows of src (0 <= t + first + j < Tn)."""
    for t in [*range(0, min(t0, rows_out)), *range(t1, rows_out)]:
        j0, j1 = max(0, -(t + first)), min(K, Tn - t - first)
        if j1 > j0:
            yield t, j0, j1


def _tap_rows(ctx, *, rows_out, Tn, B, C, N, K, first, src, wstack, out, odt, cdt, beta, compute, ptrs):
    """out[t, b, :] = beta*out[t, b, :] + sum over valid j < K of src[b, t + first + j, :] @ wstack[j]
    for t < rows_out, where src (B, Tn, C) is batch-major, wstack (K*C, N) row-major, out (rows_out, B,
    N) time-major, and j is valid when 0 <= t + first + j < Tn (rows without one are left alone).
    `ptrs`: workspace for the interior GEMM's pointer arrays (pointer_table_bytes)."""
    o, oc = odt.itemsize, cdt.itemsize
    gemm = ctx.gemm_strided_batched
    t0, t1 = _interior(rows_out, Tn, K, first)
    q, rem = divmod(t1 - t0, K)
    # cuBLAS cannot see the alignment of pointers held in device memory: the pointer-array GEMM only
    # when every entry is 16-byte aligned, else one strided batch (over the samples) per residue
    aligned = src % 16 == 0 and out % 16 == 0 and wstack % 16 == 0 and C * o % 16 == 0 and N * oc % 16 == 0
    if q > 0 and B > 0 and not aligned:
        for r in range(K):
            rm_gemm(gemm, q, N, K * C, src + (t0 + r + first) * C * o, odt, K * C, False, wstack, odt, N, False,
                    out + (t0 + r) * B * N * oc, cdt, K * B * N, alpha=1.0, beta=beta, batch=B,
                    stride_a=Tn * C, stride_b=0, stride_c=N, compute=compute)
    elif q > 0 and B > 0:
        # interior rows t0 + r + K*u (u < q) of sample b, every residue r < K: non-overlapping windows,
        # A = S + (b*Tn + t0 + r + first)*C with lda = K*C; ONE pointer-array GEMM over the B*K entries
        # (residue fastest: a sample's entries read the same rows of S), pointers uploaded on the stream
        entries = [(b, r) for b in range(B) for r in range(K)]
        table = np.array([src + (b * Tn + t0 + r + first) * C * o for b, r in entries] +
                         [wstack] * len(entries) +
                         [out + ((t0 + r) * B + b) * N * oc for b, r in entries], dtype=np.uint64)
        ctx.upload(ptrs, table)
        n = len(entries) * 8
        rm_gemm_batched(ctx.gemm_batched, q, N, K * C, ptrs, odt, K * C, False, ptrs + n, odt, N, False,
                        ptrs + 2 * n, cdt, K * B * N, len(entries), alpha=1.0, beta=beta, compute=compute)
    if rem > 0:
        # the last rem interior rows (u = q of the first rem residues): one strided batch over those
        # rows, each a GEMM over the B samples (lda = Tn*C) of depth K*C
        t = t0 + K * q
        rm_gemm(gemm, B, N, K * C, src + (t + first) * C * o, odt, Tn * C, False, wstack, odt, N, False,
                out + t * B * N * oc, cdt, N, alpha=1.0, beta=beta, batch=rem, stride_a=C, stride_b=0,
                stride_c=B * N, compute=compute)
    for t, j0, j1 in _boundary(rows_out, Tn, K, first, t0, t1):    # boundary rows: their valid taps
        rm_gemm(gemm, B, N, (j1 - j0) * C, src + (t + first + j0) * C * o, odt, Tn * C, False,
                wstack + j0 * C * N * o, odt, N, False, out + t * B * N * oc, cdt, N, alpha=1.0, beta=beta,
                compute=compute)


def _grad_weight(ctx, gemm, *, T, B, Cin, Cout, K, pad, x, dy, acc, acc_dt, odt, compute):
    """acc[k] = x[rows of tap k]^T @ dy[valid output rows of tap k] for every tap k, in acc_dt (gradWeight
    itself, or the fp32 workspace a conversion pass rounds once): ONE strided-batched GEMM over the K
    taps on the rows every tap reads (A = x shifted by one time row per tap, B = dy shared, stride 0),
    then each remaining row t (at most K - 1 at either end) adds its taps with beta = 1. Tap k of output
    row t reads input row t + k - pad: _tap_rows' geometry with src = x (Tn = T) and first = -pad."""
    Tout = T + 2 * pad - K + 1
    o, oa = odt.itemsize, acc_dt.itemsize
    lo, hi = _interior(Tout, T, K, -pad)                      # [pad, Tout - pad): rows every tap reads
    if hi > lo:
        rm_gemm(gemm, Cin, Cout, (hi - lo) * B, x + (lo - pad) * B * Cin * o, odt, Cin, True,
                dy + lo * B * Cout * o, odt, Cout, False, acc, acc_dt, Cout, alpha=1.0, beta=0.0, batch=K,
                stride_a=B * Cin, stride_b=0, stride_c=Cin * Cout, compute=compute)
    else:   # no row every tap reads (T < K): every row is a boundary row, added to zeros
        _fill_zero(ctx, acc_dt, acc, K * Cin * Cout)
    for t, k0, k1 in _boundary(Tout, T, K, -pad, lo, hi):
        rm_gemm(gemm, Cin, Cout, B, x + (t + k0 - pad) * B * Cin * o, odt, Cin, True,
                dy + t * B * Cout * o, odt, Cout, False, acc + k0 * Cin * Cout * oa, acc_dt, Cout, alpha=1.0,
                beta=1.0, batch=k1 - k0, stride_a=B * Cin, stride_b=0, stride_c=Cin * Cout, compute=compute)


def launch_backward(ctx: KernelContext, *, T, B, Cin, Cout, K, pad, dtype, cube_math_type, grad, input,
                    weight, grad_input, grad_weight, grad_bias, workspace_ptr: int,
                    min_chunk_rows: int = MIN_CHUNK_ROWS) -> None:
    """Enqueue ConvTBC backward. Pointers are device addresses of contiguous tensors of `dtype`."""
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    lay = _backward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type, min_chunk_rows)
    ws = lambda name: workspace_ptr + lay.offsets[name] if name in lay.offsets else 0  # noqa: E731
    if _is_empty(T, Cin, K):
        _batch_major(ctx, dtype, dtype, grad, 0, Tout, B, Cout, sums=grad_bias, part=ws("part"),
                     min_chunk_rows=min_chunk_rows)
        _fill_zero(ctx, dtype, grad_input, T * B * Cin)
        _fill_zero(ctx, dtype, grad_weight, K * Cin * Cout)
        return
    odt, compute = compute_mode(cube_math_type, dtype)
    gemm = ctx.gemm_strided_batched
    # dy's batch-major copy (in the operand dtype) and gradBias, one pass over dy
    _batch_major(ctx, dtype, odt, grad, ws("sdy"), Tout, B, Cout, sums=grad_bias, part=ws("part"),
                 min_chunk_rows=min_chunk_rows)
    x, dy = input, grad
    if odt != dtype:   # cubeMathType 2: fp16 copies of the gradWeight operands
        x, dy = ws("x16"), ws("dy16")
        _copy(ctx, dtype, odt, input, x, (T, B, Cin), _dense((T, B, Cin)))
        _copy(ctx, dtype, odt, grad, dy, (Tout, B, Cout), _dense((Tout, B, Cout)))
    # gradWeight: fp32 sums, straight into gradWeight when that is fp32, else into the workspace
    acc = ws("dw32") if dtype != F32 else grad_weight
    _grad_weight(ctx, gemm, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, x=x, dy=dy, acc=acc, acc_dt=F32, odt=odt,
                 compute=compute)
    # W[j] = w[K-1-j]^T: (K, Cout, Cin) from w (K, Cin, Cout) read backwards over the taps; fp16 / bf16:
    # the same launch rounds gradWeight once from its fp32 sums
    if acc != grad_weight:
        tiles = K * -(-Cin // WARP) * -(-Cout // WARP)
        ctx.launch(FILE, f"tbc_weights<{_ct(dtype)}>", _grid(ctx, tiles * BLOCK), (BLOCK, 1, 1),
                   (ptr(weight), ptr(ws("w")), ptr(acc), ptr(grad_weight), np.int64(K), np.int64(Cin),
                    np.int64(Cout)))
    else:
        _copy(ctx, dtype, odt, weight + (K - 1) * Cin * Cout * dtype.itemsize, ws("w"), (K, Cout, Cin),
              (-Cin * Cout, 1, Cout))
    _tap_rows(ctx, rows_out=T, Tn=Tout, B=B, C=Cout, N=Cin, K=K, first=pad - K + 1, src=ws("sdy"),
              wstack=ws("w"), out=grad_input, odt=odt, cdt=dtype, beta=0.0, compute=compute, ptrs=ws("ptrs"))


def launch_forward(ctx: KernelContext, *, T, B, Cin, Cout, K, pad, dtype, cube_math_type, input, weight,
                   bias, out, workspace_ptr: int) -> None:
    """Enqueue y = conv_tbc(x, w, bias, pad). Pointers are device addresses of contiguous tensors."""
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    _copy(ctx, dtype, dtype, bias, out, (Tout, B, Cout), (0, 0, 1))      # y = bias, then beta = 1
    if _is_empty(T, Cin, K):
        return
    lay = _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type)
    odt, compute = compute_mode(cube_math_type, dtype)
    sx = workspace_ptr + lay.offsets["sx"]
    _batch_major(ctx, dtype, odt, input, sx, T, B, Cin)
    wop = weight
    if odt != dtype:
        wop = workspace_ptr + lay.offsets["w"]
        _copy(ctx, dtype, odt, weight, wop, (K, Cin, Cout), _dense((K, Cin, Cout)))
    _tap_rows(ctx, rows_out=Tout, Tn=T, B=B, C=Cin, N=Cout, K=K, first=-pad, src=sx, wstack=wop, out=out,
              odt=odt, cdt=dtype, beta=1.0, compute=compute, ptrs=workspace_ptr + lay.offsets.get("ptrs", 0))


def all_name_expressions() -> list[str]:
    """Every instantiation this plan can launch (registered with kernels/manifest.py)."""
    types = list(_CTYPE.values())
    # operand staging / output conversion of mixed dtypes (ops/conv_tbc/api.py), the weight reorder,
    # the fp16 copies of cubeMathType 2, the bias broadcast
    exprs = [f"tbc_copy<{a}, {b}>" for a in types for b in types]
    # batch-major copy + column sums: same type (sums in it, or fp32 partials), fp32 -> fp16 (cubeMathType
    # 2: sums from the fp32 values), and the partials' second pass (fp32 -> the bias dtype)
    exprs += [f"tbc_batch_major<{c}, {c}, {c}>" for c in types]
    exprs += [f"tbc_batch_major<{c}, {c}, float>" for c in types if c != "float"]
    exprs += ["tbc_batch_major<float, __half, float>"]
    exprs += [f"tbc_batch_major<float, float, {c}>" for c in types if c != "float"]
    exprs += [f"tbc_fill_zero<{c}>" for c in types]
    # the weight reorder + gradWeight's rounding of the fp16 / bf16 backward
    exprs += [f"tbc_weights<{c}>" for c in types if c != "float"]
    return exprs


# registered last: the name list is built from the tables above
manifest.register(KernelFile(FILE, tuple(all_name_expressions())))
