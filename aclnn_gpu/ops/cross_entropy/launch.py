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
No tiling data: every launch parameter is a scalar kernel argument.

Launches: grad = [ce_weight_sums<I> (1 block, only when red is needed)] + ce_grad<T, I>;
forward = ce_forward<T, I> + [ce_loss_reduce<T> (1 block, mean/sum)]. Deterministic (fixed-order
sums, no atomics).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes
from ...kernels import manifest
from ...kernels.context import KernelContext, KernelFile, ptr
from ...kernels.occupancy import blocks_per_sm, context_arch

FILE = "cross_entropy.cu"
REDUCE_THREADS = 256
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
    out += [f"ce_loss_reduce<{t}>" for t in _T.values()]
    return tuple(out)


KERNELS = manifest.register(KernelFile(FILE, _kernel_names()))   # every instantiation the launchers below can launch


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


def forward_workspace_bytes(N: int, C: int, reduction: str, zloss: bool = False) -> int:
    return (32 if zloss else 16) * N if reduction in ("mean", "sum") and N > 0 and C > 0 else 0


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
