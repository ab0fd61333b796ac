"""GPU plan of ConvTBC forward and backward: plain functions over a KernelContext.

Tensors are contiguous and of one storage dtype (float32, float16, bfloat16): input x (T, B, Cin),
weight w (K, Cin, Cout), bias (Cout), grad / output dy (Tout, B, Cout), Tout = T + 2*pad - K + 1.
The glue has validated everything, staged strided views into contiguous copies and promoted mixed
dtypes; this module lays out the workspace, launches the kernels of `kernels/conv_tbc.cu` and runs
the products through `ctx.gemm_strided_batched` (cuBLAS on the cuda device, NumPy on emulated).

Precision (`kernels/gemm.compute_mode`): fp32 with cubeMathType 0 -> true fp32 (COMPUTE_32F);
1, 3 -> TF32 (COMPUTE_32F_FAST_TF32); 2 -> operands converted to fp16 by `tbc_pad_copy<float,
__half>` while they are staged, fp32 accumulation, fp32 results. fp16/bf16 inputs: their own
tensor-core GEMM with fp32 accumulation whatever cubeMathType says.

Backward (dy = grad), row-major, R = Tout*B, q = K-1-pad, q+ = max(q, 0):
  xp  = x padded in time by `pad` zero rows at each end, (T+2pad, B, Cin)   [x itself if pad == 0]
  D   = dy padded by q+ rows at each end, (Tout+2q+, B, Cout)               [dy itself if q+ == 0]
  gradWeight[k] = xp[k : k+Tout]^T @ dy          ONE strided-batched GEMM, batch = K taps:
        A_k = xp + k*B*Cin (stride B*Cin), B = dy (stride 0), C_k = gw + k*Cin*Cout,
        M = Cin, N = Cout, depth R -- written straight into gradWeight (no zero fill, no reduce).
  gradInput = sum_k D[K-1-k+q+-q : ... + T] @ w[k]^T   K GEMMs (M = T*B, N = Cin, depth Cout), the
        first with beta = 0, the rest beta = 1 into the same accumulator (gradInput itself for
        fp32, an fp32 workspace buffer for fp16/bf16, converted once by tbc_bias_epilogue).
        Every tap covers the whole output range thanks to the padded grad, so nothing is ever
        zero-filled, and the K accumulations run in stream order (deterministic).
  gradBias = column sums of dy (R x Cout): tbc_col_sum, (32-column tile, row chunk) per block,
        fixed order; S > 1 chunks write fp32 partials, a second tbc_col_sum over the (S, Cout)
        partials finishes. No atomics.
Forward: y = bias + sum_k xp[k : k+Tout] @ w[k]: K GEMMs into one accumulator (y itself for fp32),
  the first with beta = 0; tbc_bias_epilogue adds the bias (in place for fp32) and converts.

Why a batched gradWeight plus accumulated gradInput beats PyTorch's conv_tbc backward (2K separate
products, a zero-filled gradInput and per-tap narrow/addmm on clipped ranges):
  * gradWeight's K products each have a small output (Cin x Cout, e.g. 512 x 512 = 16 tiles of
    128 x 128) and a huge depth (R = Tout*B): one product cannot fill an H100's 132 SMs. The
    strided-batched call runs all K taps as one launch, K times the tiles in flight (and cuBLAS
    can still split the depth), with no per-tap launch/heuristics overhead.
  * gradInput is never zero-filled and then re-read: the first tap writes with beta = 0 over the
    whole range (the padded grad makes every tap full-range, no clipped narrow()s whose ranges
    differ per tap), so the accumulator is touched K times instead of K + 1 (one full write of
    T*B*Cin saved, about 1/(K+1) of its traffic), and all taps are identical, large, well-shaped
    GEMMs.
  * fp16/bf16 accumulate across taps in fp32 and round once (PyTorch rounds after every addmm_).
  * gradBias is one deterministic reduction kernel instead of a generic sum.
  The padded copies cost one read + write of x and dy (cheap next to the GEMMs' 2*K*R*Cin*Cout
  flops) and they double as the fp16 conversion of cubeMathType 2, which needs a copy anyway.

Workspace (bytes; every region rounded up to 256; o = operand itemsize: 2 for fp32 with
cubeMathType 2 ("conv"), else the storage itemsize):
  backward = Xp + D + W' + Acc + Part
    Xp   = (T + 2*pad) * B * Cin * o        if pad > 0 or conv, else 0
    D    = (Tout + 2*q+) * B * Cout * o     if q+ > 0 or conv, else 0     (q+ = max(0, K-1-pad))
    W'   = K * Cin * Cout * 2               if conv, else 0
    Acc  = T * B * Cin * 4                  if dtype is fp16/bf16, else 0
    Part = S * Cout * 4                     if S > 1, else 0
           S = min(ceil(R / 512), max(1, ceil(512 / ceil(Cout / 32))))  (row chunks of gradBias)
  forward = Xp + W' + Tout * B * Cout * 4 (only for fp16/bf16)
  Empty input/weight (T, Cin or K == 0): gradInput = gradWeight = 0 (tbc_fill_zero), gradBias =
  column sums of dy (docs/API.md §7); workspace = Part only. Forward: y = bias broadcast.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes
from ...kernels.context import KernelContext, ptr
from ...kernels.gemm import F32, compute_mode, rm_gemm

FILE = "conv_tbc.cu"
BLOCK = 256                 # threads per block, every kernel (tbc_col_sum requires 256)
ALIGN = 256
COL_TILE = 32
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
    """(S, rows_per_chunk) of the gradBias reduction over R rows and C columns."""
    if R <= 0:
        return 1, 1
    tiles = max(1, -(-C // COL_TILE))
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
    qp = max(0, K - 1 - pad)
    return _layout([
        ("xp", (T + 2 * pad) * B * Cin * o if (pad > 0 or conv) else 0),
        ("dp", (Tout + 2 * qp) * B * Cout * o if (qp > 0 or conv) else 0),
        ("w", K * Cin * Cout * o if conv else 0),
        ("acc", T * B * Cin * 4 if dtype != F32 else 0),
        ("part", part),
    ])


def _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type) -> _Layout:
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    if _is_empty(T, Cin, K):
        return _layout([])
    odt, _ = compute_mode(cube_math_type, dtype)
    conv = odt != dtype
    o = odt.itemsize
    return _layout([
        ("xp", (T + 2 * pad) * B * Cin * o if (pad > 0 or conv) else 0),
        ("w", K * Cin * Cout * o if conv else 0),
        ("acc", Tout * B * Cout * 4 if dtype != F32 else 0),
    ])


def backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cube_math_type=0, *,
                             min_chunk_rows=MIN_CHUNK_ROWS) -> int:
    return _backward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type, min_chunk_rows).size


def forward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cube_math_type=0) -> int:
    return _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type).size


def check_gemm_limits(T, B, Cin, Cout, K, pad) -> str | None:
    """cuBLAS takes 32-bit m, n, k, ld: a message when a product would exceed them, else None."""
    Tout = T + 2 * pad - K + 1
    big = max(Tout * B, T * B, Cin, Cout)
    if big > INT32_MAX:
        return f"a matrix dimension ({big}) exceeds cuBLAS's 32-bit limit {INT32_MAX}"
    return None


# ------------------------------------------------------------------------------ launches
def _grid(ctx: KernelContext, n: int) -> tuple[int, int, int]:
    return (max(1, min(-(-n // BLOCK), ctx.sm_count * BLOCKS_PER_SM)), 1, 1)


def convert_copy(ctx: KernelContext, src_dtype, dst_dtype, shape: tuple[int, int, int],
                 src_strides: tuple[int, int, int], src: int, dst: int) -> None:
    """dst, a contiguous (R, B, C) array of dst_dtype = src, an (R, B, C) view of src_dtype with the
    given element strides (one tbc_pad_copy: gathers a strided operand and converts its dtype)."""
    R, B, C = shape
    if R * B * C == 0:
        return
    st, sb, sc = src_strides
    ctx.launch(FILE, f"tbc_pad_copy<{_ct(src_dtype)}, {_ct(dst_dtype)}>", _grid(ctx, R * B * C), (BLOCK, 1, 1),
               (ptr(src), ptr(dst), np.int64(R), np.int64(0), np.int64(R), np.int64(B), np.int64(C),
                np.int64(st), np.int64(sb), np.int64(sc)))


def _operand(ctx, lay, workspace_ptr, name, tin, tout, src, rows_out, lead, rows_src, B, C) -> int:
    """Where a GEMM reads operand `name`: its padded / converted copy in the workspace when the layout
    made one (`_pad_copy`), else the caller's tensor itself."""
    if name not in lay.offsets:
        return src
    dst = workspace_ptr + lay.offsets[name]
    _pad_copy(ctx, tin, tout, src, dst, rows_out, lead, rows_src, B, C)
    return dst


def _pad_copy(ctx, tin, tout, src, dst, rows_out, lead, rows_src, B, C):
    n = rows_out * B * C
    if n == 0:
        return
    ctx.launch(FILE, f"tbc_pad_copy<{_ct(tin)}, {_ct(tout)}>", _grid(ctx, n), (BLOCK, 1, 1),
               (ptr(src), ptr(dst), np.int64(rows_out), np.int64(lead), np.int64(rows_src), np.int64(B),
                np.int64(C), np.int64(B * C), np.int64(C), np.int64(1)))


def _broadcast_rows(ctx, dt, vec, dst, rows, C):
    """dst (rows, C) = vec (C) on every row (tbc_pad_copy with zero row strides)."""
    n = rows * C
    if n == 0:
        return
    ctx.launch(FILE, f"tbc_pad_copy<{_ct(dt)}, {_ct(dt)}>", _grid(ctx, n), (BLOCK, 1, 1),
               (ptr(vec), ptr(dst), np.int64(rows), np.int64(0), np.int64(rows), np.int64(1), np.int64(C),
                np.int64(0), np.int64(0), np.int64(1)))


def _epilogue(ctx, dt, acc, bias, y, rows, C):
    n = rows * C
    if n == 0:
        return
    ctx.launch(FILE, f"tbc_bias_epilogue<{_ct(dt)}>", _grid(ctx, n), (BLOCK, 1, 1),
               (ptr(acc), ptr(bias), ptr(y), np.int64(rows), np.int64(C)))


def _fill_zero(ctx, dt, p, n):
    if n == 0:
        return
    ctx.launch(FILE, f"tbc_fill_zero<{_ct(dt)}>", _grid(ctx, n), (BLOCK, 1, 1), (ptr(p), np.int64(n)))


def launch_backward(ctx: KernelContext, *, T, B, Cin, Cout, K, pad, dtype, cube_math_type, grad, input,
                    weight, grad_input, grad_weight, grad_bias, workspace_ptr: int,
                    min_chunk_rows: int = MIN_CHUNK_ROWS) -> None:
    """Enqueue the backward. Pointers are device addresses of contiguous tensors of `dtype`."""
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    R = Tout * B
    lay = _backward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type, min_chunk_rows)
    ws = lambda name: workspace_ptr + lay.offsets[name]  # noqa: E731

    # gradBias (also on the empty path)
    _bias_sum(ctx, dtype, grad, grad_bias, R, Cout, ws("part") if "part" in lay.offsets else 0,
              min_chunk_rows)

    if _is_empty(T, Cin, K):
        _fill_zero(ctx, dtype, grad_input, T * B * Cin)
        _fill_zero(ctx, dtype, grad_weight, K * Cin * Cout)
        return

    odt, compute = compute_mode(cube_math_type, dtype)
    o = odt.itemsize
    gemm = ctx.gemm_strided_batched
    qp = max(0, K - 1 - pad)
    q = K - 1 - pad

    # operands
    xp = _operand(ctx, lay, workspace_ptr, "xp", dtype, odt, input, T + 2 * pad, pad, T, B, Cin)
    dp = _operand(ctx, lay, workspace_ptr, "dp", dtype, odt, grad, Tout + 2 * qp, qp, Tout, B, Cout)
    wop = _operand(ctx, lay, workspace_ptr, "w", dtype, odt, weight, K, 0, K, Cin, Cout)
    dy_op = dp + qp * B * Cout * o          # the unpadded grad inside D

    # gradWeight: one strided-batched GEMM over the K taps
    rm_gemm(gemm, Cin, Cout, R, xp, odt, Cin, True, dy_op, odt, Cout, False, grad_weight, dtype, Cout,
            alpha=1.0, beta=0.0, batch=K, stride_a=B * Cin, stride_b=0, stride_c=Cin * Cout, compute=compute)

    # gradInput: K full-range accumulating GEMMs
    acc = ws("acc") if "acc" in lay.offsets else grad_input
    dyp = dp + (qp - q) * B * Cout * o      # dyp[j] = dy[j - q]
    for k in range(K):
        a = dyp + (K - 1 - k) * B * Cout * o
        rm_gemm(gemm, T * B, Cin, Cout, a, odt, Cout, False, wop + k * Cin * Cout * o, odt, Cout, True,
                acc, F32, Cin, alpha=1.0, beta=0.0 if k == 0 else 1.0, compute=compute)
    if acc != grad_input:
        _epilogue(ctx, dtype, acc, 0, grad_input, T * B, Cin)


def _bias_sum(ctx, dtype, grad, grad_bias, R, Cout, part, min_chunk_rows):
    if Cout == 0:
        return
    S, rpc = bias_chunks(R, Cout, min_chunk_rows)
    tiles = -(-Cout // COL_TILE)
    gx = max(1, min(tiles, max(1, ctx.sm_count * BLOCKS_PER_SM // S)))
    ct = _ct(dtype)
    if S == 1:
        ctx.launch(FILE, f"tbc_col_sum<{ct}, {ct}>", (gx, 1, 1), (BLOCK, 1, 1),
                   (ptr(grad), ptr(grad_bias), np.int64(R), np.int64(Cout), np.int64(max(R, 1))))
        return
    ctx.launch(FILE, f"tbc_col_sum<{ct}, float>", (gx, S, 1), (BLOCK, 1, 1),
               (ptr(grad), ptr(part), np.int64(R), np.int64(Cout), np.int64(rpc)))
    gx2 = max(1, min(tiles, ctx.sm_count * BLOCKS_PER_SM))
    # second pass: fixed-order sum of the S partial rows (fp32), rounded once to the bias dtype
    ctx.launch(FILE, f"tbc_col_sum<float, {ct}>", (gx2, 1, 1), (BLOCK, 1, 1),
               (ptr(part), ptr(grad_bias), np.int64(S), np.int64(Cout), np.int64(S)))


def launch_forward(ctx: KernelContext, *, T, B, Cin, Cout, K, pad, dtype, cube_math_type, input, weight,
                   bias, out, workspace_ptr: int) -> None:
    """Enqueue y = conv_tbc(x, w, bias, pad). Pointers are device addresses of contiguous tensors."""
    dtype = np.dtype(dtype)
    Tout = T + 2 * pad - K + 1
    R = Tout * B
    if _is_empty(T, Cin, K):
        _broadcast_rows(ctx, dtype, bias, out, R, Cout)
        return
    lay = _forward_layout(T, B, Cin, Cout, K, pad, dtype, cube_math_type)
    ws = lambda name: workspace_ptr + lay.offsets[name]  # noqa: E731
    odt, compute = compute_mode(cube_math_type, dtype)
    o = odt.itemsize
    gemm = ctx.gemm_strided_batched
    xp = _operand(ctx, lay, workspace_ptr, "xp", dtype, odt, input, T + 2 * pad, pad, T, B, Cin)
    wop = _operand(ctx, lay, workspace_ptr, "w", dtype, odt, weight, K, 0, K, Cin, Cout)
    acc = ws("acc") if "acc" in lay.offsets else out
    for k in range(K):
        rm_gemm(gemm, R, Cout, Cin, xp + k * B * Cin * o, odt, Cin, False, wop + k * Cin * Cout * o, odt, Cout,
                False, acc, F32, Cout, alpha=1.0, beta=0.0 if k == 0 else 1.0, compute=compute)
    _epilogue(ctx, dtype, acc, bias, out, R, Cout)


def all_name_expressions() -> list[str]:
    """Every instantiation this plan can launch (kernels/manifest.py lists exactly these)."""
    exprs = [f"tbc_pad_copy<{c}, {c}>" for c in _CTYPE.values()] + ["tbc_pad_copy<float, __half>"]
    # dtype conversions of mixed-dtype operands / outputs (ops/conv_tbc/api.py stages them)
    exprs += [f"tbc_pad_copy<{a}, {b}>" for a in _CTYPE.values() for b in _CTYPE.values()
              if a != b and (a, b) != ("float", "__half")]
    exprs += [f"tbc_bias_epilogue<{c}>" for c in _CTYPE.values()]
    exprs += ["tbc_col_sum<float, float>"] + [f"tbc_col_sum<{c}, float>" for c in ("__half", "__nv_bfloat16")]
    exprs += [f"tbc_col_sum<{c}, {c}>" for c in ("__half", "__nv_bfloat16")]
    exprs += [f"tbc_col_sum<float, {c}>" for c in ("__half", "__nv_bfloat16")]
    exprs += [f"tbc_fill_zero<{c}>" for c in _CTYPE.values()]
    return exprs
