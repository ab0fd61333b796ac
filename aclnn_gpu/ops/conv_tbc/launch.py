"""GPU plan of ConvTBC forward and backward: plain functions over a KernelContext.

Tensors are contiguous and of one storage dtype (float32, float16, bfloat16): input x (T, B, Cin),
weight w (K, Cin, Cout), bias (Cout), grad / output dy (Tout, B, Cout), Tout = T + 2*pad - K + 1.
The glue has validated everything, staged strided views into contiguous copies and promoted mixed
dtypes; this module lays out the workspace, launches the kernels of `kernels/conv_tbc.cu` and runs
the products through `ctx.gemm_strided_batched` (cuBLAS on the cuda device, NumPy on emulated).

Precision (`kernels/gemm.compute_mode`): fp32 with cubeMathType 0 -> true fp32 (COMPUTE_32F);
1, 3 -> TF32 (COMPUTE_32F_FAST_TF32); 2 -> operands converted to fp16 by one tbc_copy each, fp32
accumulation, fp32 results. fp16/bf16: tensor cores with fp32 accumulation (COMPUTE_32F and
CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, kernels/gemm.py).

The products are ATen's (aten/src/ATen/native/ConvolutionTBC.cpp): one GEMM per tap on row-shifted
views of the time-major layout, no copy of x or dy. Tap k pairs output row o with input row
i = o + k - pad for o in [o0, o0 + n) (o0 = max(0, pad - k), o0 + n = min(Tout, T + pad - k)): the
(n*B, C) blocks of rows are contiguous, so each product is a plain GEMM of M = n*B rows. Only rows
that exist are multiplied (no padding zeros: an inf/NaN meets exactly the outputs it meets in
PyTorch).
  * Forward: y = bias (one tbc_copy broadcast), then the K taps' GEMMs with beta = 1: K + 1 launches,
    ATen's sequence (cuBLAS reads y, adds its fp32 product, rounds once per tap).
  * gradInput: dx[i] += dy[o] @ w[k]^T over the same pairs; the tap that covers every input row (it
    exists when 2*pad >= K - 1) first with beta = 0 (no zero-fill), else a tbc_fill_zero first.
    fp16 / bf16 outputs round once per tap, as ATen's addmm_ sequence does: an fp32 accumulator
    rounded once would move 1.3x the bytes at the realistic shape (T=1024, B=32, C=1024: fp32 reads
    and writes per tap plus a rounding pass; 594 us against ATen's 495 us in the roofline model), so
    only gradWeight, whose split sums are fp32 anyway, and the unsplit GEMMs round once.
  * gradWeight: dw[k] = x[i0 : i0 + n]^T @ dy[o0 : o0 + n], depth D = n*B. When a tap's 128x128
    output tiles cannot fill the GPU (`weight_split`), each tap's GEMM is split along its depth into S
    chunks of c = D // S rows, one strided batch of S GEMMs per tap into fp32 partials, and tbc_reduce
    adds the S partials and the D - S*c remainder rows in a fixed order and rounds once (split-k
    without atomics; the same bits on every run and every GPU). Without a split: one GEMM per tap
    straight into gradWeight (cuBLAS accumulates in fp32 and rounds once), a tap without rows
    zero-filled.
  * gradBias: column sums of dy by tbc_col_sums over (tile of columns, chunk of rows) blocks, enough
    chunks to fill the GPU when dy is large (`bias_chunks`); with several chunks the fp32 chunk sums
    are added up by the same tbc_reduce launch as gradWeight's partials.
Launches at the bench shape (2530, 16, 128), K = 3, pad = 1, every dtype: forward 4 (ATen's
conv_tbc: 4), backward 8 (1 column-sum pass, 3 split gradWeight GEMMs, 1 reduce, 3 gradInput GEMMs;
ATen's: two zero-fills, 6 GEMMs and its bias reduction).

Workspace (bytes; every region rounded up to 256):
  forward  = X16 + W16 (cubeMathType 2: fp16 copies of x and w; else nothing)
  backward = X16 + DY16 + W16 (cubeMathType 2) + PART_W (split gradWeight: S * K * Cin * Cout * 4)
             + PART_B (gradBias chunks: Sb * Cout * 4)
  Empty input/weight (T, Cin or K == 0): gradInput = gradWeight = 0 (tbc_fill_zero), gradBias = the
  column sums of dy (docs/API.md §7); forward: y = bias broadcast.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...base import dtypes
from ...kernels import manifest
from ...kernels.context import KernelContext, KernelFile, ptr
from ...kernels.gemm import F32, compute_mode, rm_gemm

FILE = "conv_tbc.cu"
BLOCK = 256                 # threads per block, every kernel (tbc_col_sums requires 256)
ALIGN = 256
WARP = 32
BLOCKS_PER_SM = 8
INT32_MAX = 2**31 - 1
# gradBias: a pass over at least SUM_SPLIT_BYTES of dy takes row chunks of at least SUM_MIN_ROWS rows
# until it has SUM_TARGET_BLOCKS (tile, chunk) blocks: a large dy fills any GPU's SMs
SUM_SPLIT_BYTES = 256 << 10
SUM_MIN_ROWS = 8
SUM_TARGET_BLOCKS = 512
# gradWeight split-k: aim one split GEMM at SPLIT_TARGET 128x128 output tiles (one wave on 108-148 SM
# GPUs), chunks of at least SPLIT_MIN_ROWS depth rows, only for taps of at least SPLIT_MIN_FLOP; a reduce
# with fewer blocks than SPLIT_TARGET reads at most REDUCE_SMALL_BYTES of partials
TILE = 128
SPLIT_TARGET = 160
SPLIT_MIN_ROWS = 128
SPLIT_MIN_FLOP = 1 << 26
REDUCE_SMALL_BYTES = 512 << 10

_CTYPE = dtypes.cuda_types("float32", "float16", "bfloat16")


def _ctype(dt) -> str:
    return _CTYPE[np.dtype(dt).name]


def _aligned(n: int) -> int:
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
            off += _aligned(nbytes)
    return _Layout(offs, off)


@dataclass(frozen=True)
class Tap:
    """Tap k's rows: outputs [o0, o0 + n) pair with inputs [i0, i0 + n) (i = o + k - pad), n > 0."""
    k: int
    o0: int
    i0: int
    n: int


def taps(T: int, Tout: int, K: int, pad: int) -> list[Tap]:
    """The taps that read at least one input row, in tap order."""
    out = []
    for k in range(K):
        o0, o1 = max(0, pad - k), min(Tout, T + pad - k)
        if o1 > o0:
            out.append(Tap(k, o0, o0 + k - pad, o1 - o0))
    return out


def _covering_first(tap_list: list[Tap], T: int) -> tuple[list[Tap], bool]:
    """gradInput's taps with one whose input rows are all [0, T) moved first, and whether there is one
    (its GEMM then writes with beta = 0: no zero-fill)."""
    for t in tap_list:
        if t.i0 == 0 and t.n == T:
            return [t, *[u for u in tap_list if u is not t]], True
    return tap_list, False


def bias_chunks(R: int, C: int, itemsize: int) -> tuple[int, int]:
    """(S, rows_per_chunk) of the gradBias column sums over R rows and C columns of `itemsize` bytes:
    one chunk for a small dy, else chunks of at least SUM_MIN_ROWS rows until the fewest (tile, chunk)
    blocks (16-byte tiles of 32 lanes) reach SUM_TARGET_BLOCKS."""
    if R <= 0 or R * C * itemsize < SUM_SPLIT_BYTES:
        return 1, max(R, 1)
    tiles = max(1, -(-C // (WARP * max(1, 16 // itemsize))))
    S = max(1, min(-(-R // SUM_MIN_ROWS), -(-SUM_TARGET_BLOCKS // tiles)))
    rpc = -(-R // S)
    return -(-R // rpc), rpc


def weight_split(tap_list: list[Tap], B: int, Cin: int, Cout: int, K: int) -> int:
    """S, the number of depth chunks of each gradWeight tap GEMM (1: no split). Split when one tap's
    128x128 output tiles are fewer than SPLIT_TARGET and its product is worth a second launch."""
    if not tap_list:
        return 1
    tiles = -(-Cin // TILE) * -(-Cout // TILE)
    depth = max(t.n for t in tap_list) * B
    if tiles >= SPLIT_TARGET or 2 * Cin * Cout * depth < SPLIT_MIN_FLOP:
        return 1
    S = min(-(-SPLIT_TARGET // tiles), depth // SPLIT_MIN_ROWS)
    outputs = K * Cin * Cout
    if -(-outputs // WARP) < SPLIT_TARGET:       # a reduce of few blocks (32 outputs each): bound what it reads
        S = min(S, max(2, REDUCE_SMALL_BYTES // (outputs * 4)))
    return S if S >= 2 else 1


def _is_empty(T, Cin, K) -> bool:
    return T == 0 or Cin == 0 or K == 0


@dataclass(frozen=True)
class _BackwardPlan:
    taps: list
    S: int                # gradWeight depth chunks (1: no split)
    Sb: int               # gradBias row chunks
    rpc: int              # gradBias rows per chunk
    layout: _Layout


def _backward_plan(T, B, Cin, Cout, K, pad, dtype, cube_math_type) -> _BackwardPlan:
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    Sb, rpc = bias_chunks(Tout * B, Cout, dtype.itemsize)
    part_b = Sb * Cout * 4 if Sb > 1 else 0
    if _is_empty(T, Cin, K):
        return _BackwardPlan([], 1, Sb, rpc, _layout([("part_b", part_b)]))
    odt, _ = compute_mode(cube_math_type, dtype)
    conv = odt != dtype
    tl = taps(T, Tout, K, pad)
    S = weight_split(tl, B, Cin, Cout, K)
    o = odt.itemsize
    return _BackwardPlan(tl, S, Sb, rpc, _layout([
        ("x16", T * B * Cin * o if conv else 0),
        ("dy16", Tout * B * Cout * o if conv else 0),
        ("w16", K * Cin * Cout * o if conv else 0),
        ("part_w", S * K * Cin * Cout * 4 if S > 1 else 0),
        ("part_b", part_b),
    ]))


def _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type) -> _Layout:
    dtype = np.dtype(dtype)
    if _is_empty(T, Cin, K):
        return _layout([])
    odt, _ = compute_mode(cube_math_type, dtype)
    conv = odt != dtype
    o = odt.itemsize
    return _layout([
        ("x16", T * B * Cin * o if conv else 0),
        ("w16", K * Cin * Cout * o if conv else 0),
    ])


def backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cube_math_type=0) -> int:
    return _backward_plan(T, B, Cin, Cout, K, pad, dtype, cube_math_type).layout.size


def forward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cube_math_type=0) -> int:
    return _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type).size


def check_gemm_limits(T, B, Cin, Cout, K, pad) -> str | None:
    """cuBLAS takes 32-bit m, n, k, ld: a message when a product would exceed them, else None."""
    Tout = T + 2 * pad - K + 1
    big = max(Tout * B, T * B, Cin, Cout)      # a tap's rows (M or depth), the channels (N, ld)
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
    ctx.launch(FILE, f"tbc_copy<{_ctype(tin)}, {_ctype(tout)}>", _grid(ctx, R * B * C), (BLOCK, 1, 1),
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
    ctx.launch(FILE, f"tbc_fill_zero<{_ctype(dt)}>", _grid(ctx, n), (BLOCK, 1, 1), (ptr(p), np.int64(n)))


def _col_sums(ctx, dt, src, R, C, target, sum_dtype, S, rpc):
    """target[s, :] = the column sums of src's rows [s*rpc, (s+1)*rpc) for s < S, in sum_dtype."""
    if R * C == 0:
        return
    packet = 16 // np.dtype(dt).itemsize
    vec = int(C % packet == 0 and src % 16 == 0)
    tiles = -(-C // (WARP * (packet if vec else 1)))
    gx = max(1, min(tiles, max(1, ctx.sm_count * BLOCKS_PER_SM // S)))
    ctx.launch(FILE, f"tbc_col_sums<{_ctype(dt)}, {_ctype(sum_dtype)}>", (gx, S, 1), (BLOCK, 1, 1),
               (ptr(src), ptr(target), np.int64(R), np.int64(C), np.int64(rpc), np.int32(vec)))


def _tap_gemm(gemm, tap: Tap, *, B, src, src_row, src_c, w, w_trans, odt, out, out_row, out_c, cdt, beta, compute):
    """out rows [out_row, out_row + n) as an (n*B, out_c) matrix = beta * out + the src rows
    [src_row, src_row + n) as (n*B, src_c) @ op(w): w row-major (src_c, out_c), or (out_c, src_c)
    transposed when w_trans. One GEMM: the rows of a time-major block are contiguous."""
    rm_gemm(gemm, tap.n * B, out_c, src_c, src + src_row * B * src_c * odt.itemsize, odt, src_c, False,
            w, odt, src_c if w_trans else out_c, w_trans, out + out_row * B * out_c * cdt.itemsize, cdt, out_c,
            alpha=1.0, beta=beta, compute=compute)


def _grad_weight(ctx, gemm, plan: _BackwardPlan, *, T, B, Cin, Cout, K, pad, x, dy, odt, dtype, grad_weight,
                 part_w, part_b, grad_bias, compute):
    """gradWeight (and, with several gradBias chunks, gradBias's final sums). Split: per tap one strided
    batch of S depth chunks into the fp32 partials part_w[s, k], then tbc_reduce; else one GEMM per tap
    straight into gradWeight, a tap without rows zero-filled."""
    Tout = T + 2 * pad - K + 1
    o, CC = odt.itemsize, Cin * Cout
    if plan.S > 1:
        for tap in plan.taps:
            c = tap.n * B // plan.S
            if c > 0:    # (a tap with fewer rows than chunks is summed by tbc_reduce alone)
                rm_gemm(gemm, Cin, Cout, c, x + tap.i0 * B * Cin * o, odt, Cin, True,
                        dy + tap.o0 * B * Cout * o, odt, Cout, False, part_w + tap.k * CC * 4, F32, Cout,
                        alpha=1.0, beta=0.0, batch=plan.S, stride_a=c * Cin, stride_b=c * Cout, stride_c=K * CC,
                        compute=compute)
    else:
        rows = {tap.k: tap for tap in plan.taps}
        for k in range(K):
            if k not in rows:
                _fill_zero(ctx, dtype, grad_weight + k * CC * dtype.itemsize, CC)
                continue
            tap = rows[k]
            rm_gemm(gemm, Cin, Cout, tap.n * B, x + tap.i0 * B * Cin * o, odt, Cin, True,
                    dy + tap.o0 * B * Cout * o, odt, Cout, False, grad_weight + k * CC * dtype.itemsize, dtype,
                    Cout, alpha=1.0, beta=0.0, compute=compute)
    _reduce(ctx, odt, dtype, part_w=part_w if plan.S > 1 else 0, x=x, dy=dy, dw=grad_weight,
            part_b=part_b if plan.Sb > 1 else 0, gb=grad_bias, K=K, Cin=Cin, Cout=Cout, S=plan.S, Sb=plan.Sb,
            T=T, Tout=Tout, B=B, pad=pad)


def _reduce(ctx, odt, dtype, *, part_w, x, dy, dw, part_b, gb, K, Cin, Cout, S, Sb, T, Tout, B, pad):
    """One tbc_reduce launch for what has partials (gradWeight's split, gradBias's chunks), if any."""
    n = (K * Cin * Cout if part_w else 0) + (Cout if part_b else 0)
    if n == 0:
        return
    if not part_w:   # gradBias alone: the gradWeight operands are not read
        x = dy = dw = 0
    tiles = -(-n // WARP)            # a block adds 32 outputs (its 8 warps split the chunks)
    grid = (max(1, min(tiles, ctx.sm_count * BLOCKS_PER_SM)), 1, 1)
    ctx.launch(FILE, f"tbc_reduce<{_ctype(odt)}, {_ctype(dtype)}>", grid, (BLOCK, 1, 1),
               (ptr(part_w), ptr(x), ptr(dy), ptr(dw), ptr(part_b), ptr(gb), np.int64(K), np.int64(Cin),
                np.int64(Cout), np.int64(S), np.int64(Sb), np.int64(T), np.int64(Tout), np.int64(B),
                np.int64(pad)))


def launch_backward(ctx: KernelContext, *, T, B, Cin, Cout, K, pad, dtype, cube_math_type, grad, input,
                    weight, grad_input, grad_weight, grad_bias, workspace_ptr: int) -> None:
    """Enqueue ConvTBC backward. Pointers are device addresses of contiguous tensors of `dtype`."""
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    plan = _backward_plan(T, B, Cin, Cout, K, pad, dtype, cube_math_type)
    ws = lambda name: workspace_ptr + plan.layout.offsets[name] if name in plan.layout.offsets else 0  # noqa: E731
    # gradBias: the column sums of dy (the final sums, or chunk sums tbc_reduce adds up)
    _col_sums(ctx, dtype, grad, Tout * B, Cout, ws("part_b") if plan.Sb > 1 else grad_bias,
              F32 if plan.Sb > 1 else dtype, plan.Sb, plan.rpc)
    if _is_empty(T, Cin, K):
        _reduce(ctx, dtype, dtype, part_w=0, x=0, dy=0, dw=0, part_b=ws("part_b"), gb=grad_bias, K=K, Cin=Cin,
                Cout=Cout, S=1, Sb=plan.Sb, T=T, Tout=Tout, B=B, pad=pad)
        _fill_zero(ctx, dtype, grad_input, T * B * Cin)
        _fill_zero(ctx, dtype, grad_weight, K * Cin * Cout)
        return
    odt, compute = compute_mode(cube_math_type, dtype)
    gemm = ctx.gemm_strided_batched
    x, dy, w = input, grad, weight
    if odt != dtype:   # cubeMathType 2: fp16 copies of the operands
        x, dy, w = ws("x16"), ws("dy16"), ws("w16")
        _copy(ctx, dtype, odt, input, x, (T, B, Cin), _dense((T, B, Cin)))
        _copy(ctx, dtype, odt, grad, dy, (Tout, B, Cout), _dense((Tout, B, Cout)))
        _copy(ctx, dtype, odt, weight, w, (K, Cin, Cout), _dense((K, Cin, Cout)))
    _grad_weight(ctx, gemm, plan, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, x=x, dy=dy, odt=odt, dtype=dtype,
                 grad_weight=grad_weight, part_w=ws("part_w"), part_b=ws("part_b"), grad_bias=grad_bias,
                 compute=compute)
    # gradInput: dx[i0 : i0 + n] += dy[o0 : o0 + n] @ w[k]^T per tap, the covering tap first with beta = 0
    order, covered = _covering_first(plan.taps, T)
    if not covered:
        _fill_zero(ctx, dtype, grad_input, T * B * Cin)
    for j, tap in enumerate(order):
        _tap_gemm(gemm, tap, B=B, src=dy, src_row=tap.o0, src_c=Cout, w=w + tap.k * Cin * Cout * odt.itemsize,
                  w_trans=True, odt=odt, out=grad_input, out_row=tap.i0, out_c=Cin, cdt=dtype,
                  beta=0.0 if covered and j == 0 else 1.0, compute=compute)


def launch_forward(ctx: KernelContext, *, T, B, Cin, Cout, K, pad, dtype, cube_math_type, input, weight,
                   bias, out, workspace_ptr: int) -> None:
    """Enqueue y = conv_tbc(x, w, bias, pad). Pointers are device addresses of contiguous tensors."""
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    if _is_empty(T, Cin, K):
        _copy(ctx, dtype, dtype, bias, out, (Tout, B, Cout), (0, 0, 1))
        return
    lay = _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type)
    ws = lambda name: workspace_ptr + lay.offsets[name] if name in lay.offsets else 0  # noqa: E731
    odt, compute = compute_mode(cube_math_type, dtype)
    gemm = ctx.gemm_strided_batched
    x, w = input, weight
    if odt != dtype:   # cubeMathType 2: fp16 copies of the operands
        x, w = ws("x16"), ws("w16")
        _copy(ctx, dtype, odt, input, x, (T, B, Cin), _dense((T, B, Cin)))
        _copy(ctx, dtype, odt, weight, w, (K, Cin, Cout), _dense((K, Cin, Cout)))
    # y = bias, then every tap adds: cuBLAS reads y, adds its fp32 product and rounds (ATen's sequence)
    _copy(ctx, dtype, dtype, bias, out, (Tout, B, Cout), (0, 0, 1))
    for tap in taps(T, Tout, K, pad):
        _tap_gemm(gemm, tap, B=B, src=x, src_row=tap.i0, src_c=Cin, w=w + tap.k * Cin * Cout * odt.itemsize,
                  w_trans=False, odt=odt, out=out, out_row=tap.o0, out_c=Cout, cdt=dtype, beta=1.0, compute=compute)


def all_name_expressions() -> list[str]:
    """Every instantiation this plan can launch (registered with kernels/manifest.py)."""
    types = list(_CTYPE.values())
    # operand staging / output conversion of mixed dtypes (ops/conv_tbc/api.py), the fp16 copies of
    # cubeMathType 2, the bias broadcast
    exprs = [f"tbc_copy<{a}, {b}>" for a in types for b in types]
    # gradBias column sums: final sums in the dtype, or fp32 chunk sums
    exprs += [f"tbc_col_sums<{c}, {c}>" for c in types]
    exprs += [f"tbc_col_sums<{c}, float>" for c in types if c != "float"]
    exprs += [f"tbc_fill_zero<{c}>" for c in types]
    # split gradWeight / gradBias chunk sums: operands of the storage dtype, or fp16 (cubeMathType 2)
    exprs += [f"tbc_reduce<{c}, {c}>" for c in types]
    exprs += ["tbc_reduce<__half, float>"]
    return exprs


# registered last: the name list is built from the tables above
manifest.register(KernelFile(FILE, tuple(all_name_expressions())))
