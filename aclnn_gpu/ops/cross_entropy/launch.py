"""GPU plan of cross-entropy (kernels/cross_entropy.cu) as plain functions over a KernelContext.

Tensors are contiguous (the glue copies strided views): input/logProb/out (N, C) of `dtype`,
target (N,) int32/int64, weight (C,) float32 or pointer 0, gradLoss (N,) for 'none' else one
element. C > 0 (checked by the glue); N == 0 launches nothing but the reduced forward loss (0).
z-loss (`zscale` != 0, docs/API.md §7): lse / lseForZloss (N,) and gradZloss (shaped like gradLoss,
or pointer 0) of `dtype`; zlossOut like the loss.

Workspace (bytes):
    grad:     16 when reduction == 'mean' or (label_smoothing != 0 and a weight is given), else 0;
              24 for 'mean' with the z-loss
              -> double red[3] at offset 0: red[0] = D (sum of w[t_i] over counted rows),
                 red[1] = W (sum_c w[c]), red[2] = n (rows whose target != ignore_index, z-loss
                 'mean' only); written by ce_weight_sums, read by ce_grad.
    forward:  16 * N when reduction is 'mean' or 'sum' (32 * N with the z-loss), else 0
              -> double rows[2N] (rows[4N]): per-row loss, then per-row weight w[t_i] (0 if not
                 counted) (, per-row z-loss, then 1 for rows that count in its mean); written by
                 ce_forward, reduced by ce_loss_reduce.
              + 8 * N * (4 * S + 4) when the rows are split (forward_split: S > 1)
              -> double part[3][S][N] (each chunk's max, sum-exp, NaN vote; rows fastest) and
                 part[N] (each row's target logit) after the rows, then double acc[S][N] (each
                 chunk's label-smoothing sum), then double row[3][N] (each row's merged max,
                 sum-exp, NaN vote); written by ce_forward_stats / ce_forward_write, read by
                 ce_forward_write / ce_forward_finish.
No tiling data: every launch parameter is a scalar kernel argument.

Launches: grad = [ce_weight_sums<I> (1 block, only when red is needed)] + ce_grad<T, I>;
forward = ce_forward<T, I> (one block per row) + [ce_loss_reduce<T> (1 block, mean/sum)], or for few
long rows (forward_split) ce_forward_stats + ce_forward_write (one block per (row, chunk)) +
ce_forward_finish (one thread per row; for mean/sum one block that also reduces). Deterministic
(fixed-order sums and merges, no atomics; the split is a function of the shape only).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...base import dtypes
from ...kernels import manifest
from ...kernels.context import KernelContext, KernelFile, ptr
from ...kernels.occupancy import blocks_per_sm, context_arch

FILE = "cross_entropy.cu"
REGISTERS = Path(__file__).with_name("registers.json")   # its kernels' register counts (kernels/occupancy.py)
REDUCE_THREADS = 256
# the forward's row split (forward_split): a pure function of the shape
SPLIT_TARGET_BLOCKS = 256   # split rows when there are fewer; aim at about this many (row, chunk) blocks
SPLIT_MIN_ELEMENTS = 1 << 16   # logits below this stay one block per row (one launch, not three)
SPLIT_MIN_CHUNK = 512       # elements of a chunk, at least (a block of 32 or more threads, 4 vectors each)
SPLIT_ALIGN = 64            # chunk lengths: a multiple of this many elements
_PART_FIELDS = 3            # doubles per chunk record, besides the row's target logit (kernels: ce::kPartFields)
_ROW_FIELDS = 3             # doubles of a split row's merged state (kernels: ce::kRowFields)
_RED_CODE = {"none": 0, "mean": 1, "sum": 2}
_T = dtypes.cuda_types("float32", "float64", "float16", "bfloat16")
_I = dtypes.cuda_types("int32", "int64")
_ITEM = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def _tname(dtype) -> str:
    return dtypes.supported_name(dtype, _T, "cross-entropy: unsupported dtype")


def _iname(dtype) -> str:
    return dtypes.supported_name(dtype, _I, "cross-entropy: unsupported target dtype")


def _kernel_names() -> tuple[str, ...]:
    out = [f"ce_weight_sums<{i}>" for i in _I.values()]
    out += [f"ce_grad<{t}, {i}>" for t in _T.values() for i in _I.values()]
    out += [f"ce_forward<{t}, {i}>" for t in _T.values() for i in _I.values()]
    out += [f"ce_forward_{k}<{t}, {i}>" for k in ("stats", "write", "finish") for t in _T.values() for i in _I.values()]
    out += [f"ce_loss_reduce<{t}>" for t in _T.values()]
    return tuple(out)


# every instantiation the launchers below can launch, and their register counts
KERNELS = manifest.register(KernelFile(FILE, _kernel_names()), registers=REGISTERS)


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def _needs_red(reduction: str, label_smoothing: float, has_weight: bool) -> bool:
    return reduction == "mean" or (float(label_smoothing) != 0.0 and has_weight)


def grad_workspace_bytes(N: int, C: int, reduction: str, label_smoothing: float = 0.0,
                         has_weight: bool = False, zloss: bool = False) -> int:
    if N == 0 or C == 0:
        return 0
    if zloss and reduction == "mean":
        return 24
    return 16 if _needs_red(reduction, label_smoothing, has_weight) else 0


def forward_split(N: int, C: int) -> tuple[int, int]:
    """(S, chunk): the forward cuts each row into S chunks of `chunk` elements (the last one shorter),
    one block each, when there are fewer rows than SPLIT_TARGET_BLOCKS and the logits hold at least
    SPLIT_MIN_ELEMENTS: S brings the blocks to about SPLIT_TARGET_BLOCKS with chunks of at least
    SPLIT_MIN_CHUNK elements (multiples of SPLIT_ALIGN: every chunk starts on a 16-byte boundary of
    its row, whatever the type). A function of the shape only (never of the GPU), so a result's bits
    are the same on every device. (1, C): one block per row (ce_forward)."""
    if N <= 0 or C <= 0 or N >= SPLIT_TARGET_BLOCKS or N * C < SPLIT_MIN_ELEMENTS:
        return 1, max(C, 0)
    S = min(-(-SPLIT_TARGET_BLOCKS // N), C // SPLIT_MIN_CHUNK)
    if S < 2:
        return 1, C
    per = -(-C // S)
    chunk = -(-per // SPLIT_ALIGN) * SPLIT_ALIGN
    return -(-C // chunk), chunk


def _split_layout(N: int, C: int, reduction: str, zloss: bool) -> tuple[int, int, int, int]:
    """(part, acc, row, size): byte offsets of the split's chunk records, chunk sums and merged row
    states in the forward's workspace (after the per-row values of mean / sum at offset 0), and the
    workspace's size."""
    rows = (32 if zloss else 16) * N if reduction in ("mean", "sum") and N > 0 and C > 0 else 0
    S, _ = forward_split(N, C)
    if S == 1:
        return rows, rows, rows, rows
    part = rows
    acc = part + 8 * N * (_PART_FIELDS * S + 1)
    row = acc + 8 * N * S
    return part, acc, row, row + 8 * N * _ROW_FIELDS


def forward_workspace_bytes(N: int, C: int, reduction: str, zloss: bool = False) -> int:
    return _split_layout(N, C, reduction, zloss)[3]


def _wave(ctx: KernelContext, expr: str, block: int) -> int:
    """Blocks of one full wave of `expr` on ctx's device (kernels/occupancy.py)."""
    return int(ctx.sm_count) * blocks_per_sm(context_arch(ctx), FILE, expr, block)


def grad_geometry(ctx: KernelContext, expr: str, N: int, C: int, itemsize: int, block: int | None = None,
                  max_blocks: int | None = None) -> tuple[int, int, int]:
    """(grid, block, group) of ce_grad instantiation `expr`: `group` threads (a power of two) share a
    row; a group may span blocks when there are few rows, so that a long row still fills the GPU. The
    grid is at most one full wave at the kernel's occupancy (or `max_blocks`)."""
    V = 16 // itemsize
    want = _pow2_ceil(-(-C // V))                      # one 16-byte vector per thread
    if block is None:
        block = max(32, min(256, _pow2_ceil(N * min(want, 256))))
    cap = max_blocks or _wave(ctx, expr, block)
    group = min(want, block)
    if want > block and N * group < cap * block:       # few rows: spread each over several blocks
        group = max(block, min(want, _pow2_floor(cap * block // max(N, 1))))
    per = max(1, group // block)                       # blocks per group
    grid = min(cap, -(-N * group // block))
    grid = max(per, grid // per * per)                 # grid_threads % group == 0
    return grid, block, group


def launch_grad(ctx: KernelContext, *, grad_loss_ptr: int, log_prob_ptr: int, target_ptr: int,
                weight_ptr: int, out_ptr: int, workspace_ptr: int, N: int, C: int, dtype,
                target_dtype, reduction: str, ignore_index: int, label_smoothing: float,
                grad_zloss_ptr: int = 0, lse_ptr: int = 0, zscale: float = 0.0,
                block: int | None = None, max_blocks: int | None = None) -> None:
    """zscale != 0: the z-loss term, from lse_ptr (N,) (required) and grad_zloss_ptr (or 0)."""
    t, i = _tname(dtype), _iname(target_dtype)
    if reduction not in _RED_CODE:
        raise ValueError(f"cross-entropy: reduction {reduction!r}")
    zscale = float(zscale)
    if zscale != 0.0 and not lse_ptr:
        raise ValueError("cross-entropy: the z-loss gradient needs lse")
    if N == 0 or C == 0:
        return
    ls = float(label_smoothing)
    has_w = bool(weight_ptr)
    need_n = zscale != 0.0 and reduction == "mean"
    red = 0
    if _needs_red(reduction, ls, has_w):
        red = int(workspace_ptr)
        ctx.launch(FILE, KERNELS.name("ce_weight_sums", _I[i]), (1,), (REDUCE_THREADS,),
                   (ptr(target_ptr), ptr(weight_ptr or 0), ptr(red), np.int64(N), np.int64(C),
                    np.int64(ignore_index), np.int32(reduction == "mean"), np.int32(ls != 0.0 and has_w),
                    np.int32(need_n)))
    expr = KERNELS.name("ce_grad", _T[t], _I[i])
    grid, blk, group = grad_geometry(ctx, expr, N, C, _ITEM[t], block, max_blocks)
    vec = int((int(log_prob_ptr) - int(out_ptr)) % 16 == 0)
    z = zscale != 0.0
    ctx.launch(FILE, expr, (grid,), (blk,),
               (ptr(grad_loss_ptr), ptr(log_prob_ptr), ptr(target_ptr), ptr(weight_ptr or 0), ptr(out_ptr),
                ptr(red), ptr(grad_zloss_ptr if z else 0), ptr(lse_ptr if z else 0), np.int64(N), np.int64(C),
                np.int64(ignore_index), np.int32(_RED_CODE[reduction]), np.float64(ls), np.float64(zscale),
                np.int64(group), np.int32(vec)))


def forward_geometry(ctx: KernelContext, expr: str, N: int, C: int, itemsize: int, block: int | None = None,
                     max_blocks: int | None = None) -> tuple[int, int]:
    """(grid, block) of ce_forward instantiation `expr`: one block per row, grid-stride over rows
    beyond one full wave at the kernel's occupancy (or `max_blocks`)."""
    V = 16 // itemsize
    if block is None:
        block = max(32, min(256, _pow2_ceil(-(-C // (4 * V)))))   # about 4 vectors per thread
    grid = max(1, min(N, max_blocks or _wave(ctx, expr, block)))
    return grid, block


def _launch_split_forward(ctx: KernelContext, t: str, i: str, S: int, chunk: int, *, input_ptr: int,
                          target_ptr: int, weight_ptr: int, log_prob_ptr: int, loss_ptr: int, zloss_ptr: int,
                          lse_ptr: int, workspace_ptr: int, N: int, C: int, reduction: str, ignore_index: int,
                          label_smoothing: float, zscale: float) -> None:
    """The forward of few long rows (forward_split): ce_forward_stats and ce_forward_write over N * S
    (row, chunk) blocks, then ce_forward_finish: one thread per row, and for mean / sum one block of
    REDUCE_THREADS that also reduces (no ce_loss_reduce launch)."""
    reduced = reduction != "none"
    part_off, acc_off, row_off, _ = _split_layout(N, C, reduction, float(zscale) != 0.0)
    part, acc, row = ptr(workspace_ptr + part_off), ptr(workspace_ptr + acc_off), ptr(workspace_ptr + row_off)
    V = 16 // _ITEM[t]
    blk = max(32, min(256, _pow2_ceil(-(-chunk // (4 * V)))))   # about 4 vectors per thread, as ce_forward
    vec = int((int(input_ptr) - int(log_prob_ptr)) % 16 == 0)
    units, i64 = N * S, np.int64
    ctx.launch(FILE, KERNELS.name("ce_forward_stats", _T[t], _I[i]), (units,), (blk,),
               (ptr(input_ptr), ptr(target_ptr), part, i64(N), i64(C), i64(S), i64(chunk), np.int32(vec)))
    ctx.launch(FILE, KERNELS.name("ce_forward_write", _T[t], _I[i]), (units,), (blk,),
               (ptr(input_ptr), ptr(weight_ptr or 0), ptr(log_prob_ptr), part, acc, row, i64(N), i64(C), i64(S),
                i64(chunk), np.float64(label_smoothing), np.int32(vec)))
    fin = REDUCE_THREADS if reduced else max(32, min(REDUCE_THREADS, _pow2_ceil(N)))
    ctx.launch(FILE, KERNELS.name("ce_forward_finish", _T[t], _I[i]), (1 if reduced else -(-N // fin),), (fin,),
               (ptr(target_ptr), ptr(weight_ptr or 0), part, acc, row, ptr(0 if reduced else loss_ptr),
                ptr(workspace_ptr if reduced else 0), ptr(0 if reduced else zloss_ptr), ptr(lse_ptr), i64(N), i64(C),
                i64(S), i64(ignore_index), np.float64(label_smoothing), np.float64(zscale),
                np.int32(_RED_CODE[reduction]), ptr(loss_ptr if reduced else 0),
                ptr(zloss_ptr if reduced else 0)))


def launch_forward(ctx: KernelContext, *, input_ptr: int, target_ptr: int, weight_ptr: int,
                   loss_ptr: int, log_prob_ptr: int, workspace_ptr: int, N: int, C: int, dtype,
                   target_dtype, reduction: str, ignore_index: int, label_smoothing: float,
                   zscale: float = 0.0, zloss_ptr: int = 0, lse_ptr: int = 0,
                   block: int | None = None, max_blocks: int | None = None) -> None:
    """loss_ptr: (N,) for 'none', one element for 'mean'/'sum' (0 when N == 0). zscale != 0 adds the
    z-loss to the loss; zloss_ptr (or 0): the z-loss, shaped like the loss (0 when zscale == 0);
    lse_ptr (or 0): (N,) log-sum-exp of each row. The workspace is forward_workspace_bytes(...,
    zloss=zscale != 0)."""
    t, i = _tname(dtype), _iname(target_dtype)
    if reduction not in _RED_CODE:
        raise ValueError(f"cross-entropy: reduction {reduction!r}")
    reduced = reduction != "none"
    zl = float(zscale) != 0.0
    S, chunk = forward_split(N, C)
    if N > 0 and C > 0 and S > 1:
        _launch_split_forward(ctx, t, i, S, chunk, input_ptr=input_ptr, target_ptr=target_ptr, weight_ptr=weight_ptr,
                              log_prob_ptr=log_prob_ptr, loss_ptr=loss_ptr, zloss_ptr=zloss_ptr, lse_ptr=lse_ptr,
                              workspace_ptr=workspace_ptr, N=N, C=C, reduction=reduction,
                              ignore_index=ignore_index, label_smoothing=label_smoothing, zscale=zscale)
        return
    if N > 0 and C > 0:
        expr = KERNELS.name("ce_forward", _T[t], _I[i])
        grid, blk = forward_geometry(ctx, expr, N, C, _ITEM[t], block, max_blocks)
        vec = int((int(input_ptr) - int(log_prob_ptr)) % 16 == 0)
        ctx.launch(FILE, expr, (grid,), (blk,),
                   (ptr(input_ptr), ptr(target_ptr), ptr(weight_ptr or 0), ptr(log_prob_ptr),
                    ptr(0 if reduced else loss_ptr), ptr(workspace_ptr if reduced else 0),
                    ptr(0 if reduced else zloss_ptr), ptr(lse_ptr), np.int64(N), np.int64(C),
                    np.int64(ignore_index), np.float64(label_smoothing), np.float64(zscale), np.int32(vec)))
    if reduced:
        n = N if C > 0 else 0
        ctx.launch(FILE, KERNELS.name("ce_loss_reduce", _T[t]), (1,), (REDUCE_THREADS,),
                   (ptr(workspace_ptr if n else 0), np.int64(n), np.int32(_RED_CODE[reduction]), ptr(loss_ptr),
                    np.int32(zl and n > 0), ptr(zloss_ptr)))
