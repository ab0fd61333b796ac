"""GPU plan of CTC loss (forward `aclnnCtcLoss`, backward `aclnnCtcLossBackward`) over a
KernelContext. Inputs and outputs are contiguous device buffers (the glue copies strided views).

    backward_workspace_bytes(N) / forward_workspace_bytes(N) -> int
    launch_backward(ctx, *, grad_out_ptr, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr,
                    log_alpha_ptr, out_ptr, workspace_ptr, T, N, C, X, dtype, target_dtype,
                    targets_2d_stride, targets_numel, input_lengths, target_lengths, blank,
                    zero_infinity)
    launch_forward(ctx, *, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr, log_alpha_ptr,
                   workspace_ptr, T, N, C, dtype, target_dtype, targets_2d_stride, targets_numel,
                   input_lengths, target_lengths, blank, zero_infinity)   # writes X = 2*maxL+1

dtype: "float32" | "float64" | "float16" | "bfloat16" (numpy dtype names accepted);
target_dtype: int32 | int64 (the glue casts BOOL/FLOAT/FLOAT16 targets to int64 first).
targets_2d_stride: S for 2-D padded targets (N, S), 0 for 1-D concatenated targets.

Workspace (both directions): the tiling block at the workspace head,
    8 * 3 * N      (int64 [input_length, target_length, target_offset] per sample)
(0 when N == 0); on the long-target path (below) followed, at the next 256-byte boundary, by
min(N, LONG_SLOTS) slots of long_slot_bytes(maxL, math size) each (one per block of the grid:
alpha/beta of two steps, odd-state occupancies of two steps, labels and their chains). The short
path needs nothing beyond log_alpha.

Launches. Backward: `ctc_dense<T>` (grid-stride, 256 threads, 16-byte vectors when C is a
multiple of 16/sizeof(T) and both pointers are 16-byte aligned) then the beta recursion (one block
per sample, grid-stride over samples); forward: the alpha recursion. Short path (`ctc_alpha`,
`ctc_beta`): threads = min(512, roundup32(2*maxL+1)) and per = ceil((2*maxL+1) / threads) <= 8
(fp64 math: 5) states per thread in registers, dynamic shared memory = shared_bytes(maxL, math
size) < 48 KiB, i.e. 2*maxL+1 <= 4096 states for fp32 math (maxL <= 2047), <= 2560 for fp64
(maxL <= 1279). Beyond, the long path (`ctc_alpha_long`, `ctc_beta_long`, 512 threads, states
strided over the block, recursion state in the workspace slots): any maxL, same results (the
blank column's sum excepted, see the kernel).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ... import dtypes
from ...kernels.context import ptr

FILE = "ctc_loss.cu"
K_PER = {4: 8, 8: 5}   # max states per thread by math size (kernels: PerOf<M>)
K_MAX_WARPS = 16
MAX_THREADS = 512
SMEM_LIMIT = 48 * 1024
DENSE_BLOCK = 256
LONG_SLOTS = 256   # most blocks (and workspace slots) of the long-target recursions
ALIGN = 256

_CTYPE = dtypes.cuda_types("float32", "float64", "float16", "bfloat16")
_ITYPE = dtypes.cuda_types("int32", "int64")


def all_name_expressions() -> list[str]:
    """Every instantiation the launchers below can launch (kernels/manifest.py takes this list)."""
    return ([f"aclg::ctc_dense<{t}>" for t in _CTYPE.values()]
            + [f"aclg::ctc_beta<{t}, {i}>" for t in _CTYPE.values() for i in _ITYPE.values()]
            + [f"aclg::ctc_alpha<{t}, {i}>" for t in _CTYPE.values() for i in _ITYPE.values()]
            + [f"aclg::ctc_{k}_long<{t}, {i}>" for k in ("alpha", "beta") for t in _CTYPE.values()
               for i in _ITYPE.values()]
            + ["aclg::ctc_cast_targets"])
_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def _dname(dtype) -> str:
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in _CTYPE and name not in _ITYPE:
        raise ValueError(f"unsupported dtype {dtype}")
    return name


def _math_size(dtype_name: str) -> int:
    return 8 if dtype_name == "float64" else 4


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def long_slot_bytes(max_l: int, math_size: int) -> int:
    """One block's workspace slot on the long path (kernels: ctc::LongSlot)."""
    return _round((2 * (2 * max_l + 1) + 2 * max_l) * math_size + 3 * max_l * 4)


def backward_workspace_bytes(N: int, max_l: int = 0, math_size: int = 4, long_path: bool | None = None) -> int:
    head = 8 * 3 * int(N)
    if N == 0 or not recursion_geometry(max_l, math_size, long_path).long:
        return head
    return _round(head) + min(int(N), LONG_SLOTS) * long_slot_bytes(max_l, math_size)


forward_workspace_bytes = backward_workspace_bytes


def shared_bytes(max_l: int, math_size: int) -> int:
    m = (2 * (K_MAX_WARPS + 1) * 3 + 2 * K_MAX_WARPS + 2 + 2 * max_l) * math_size
    return m + 4 * (3 * max_l + 4)


class Geometry(NamedTuple):
    threads: int
    per: int      # states per thread (short path)
    smem: int     # dynamic shared bytes (short path)
    long: bool    # the long-target path (ctc_*_long): recursion state in workspace slots


def recursion_geometry(max_l: int, math_size: int, long_path: bool | None = None) -> Geometry:
    """Block geometry of the alpha / beta recursions: the register path while its states fit
    (per <= K_PER, shared tables < 48 KiB), else the long path. long_path forces a path (tests)."""
    S = 2 * max_l + 1
    threads = min(MAX_THREADS, (S + 31) // 32 * 32)
    per = -(-S // threads)
    smem = shared_bytes(max_l, math_size)
    if long_path is None:
        long_path = per > K_PER[math_size] or smem > SMEM_LIMIT
    if long_path:
        return Geometry(MAX_THREADS, 0, 0, True)   # kernels: ctc::kLongThreads
    return Geometry(threads, per, smem, False)


def tiling(input_lengths, target_lengths, targets_2d_stride: int) -> np.ndarray:
    il = np.asarray(input_lengths, dtype=np.int64).reshape(-1)
    tl = np.asarray(target_lengths, dtype=np.int64).reshape(-1)
    if targets_2d_stride:
        off = np.arange(il.shape[0], dtype=np.int64) * targets_2d_stride
    else:
        off = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64) if tl.size else tl
    return np.ascontiguousarray(np.stack([il, tl, off], axis=1).reshape(-1))


def _common(ctx, workspace_ptr, N, input_lengths, target_lengths, targets_2d_stride):
    tab = tiling(input_lengths, target_lengths, targets_2d_stride)
    ctx.upload(workspace_ptr, tab)
    tl = np.asarray(target_lengths, dtype=np.int64)
    return int(tl.max()) if tl.size else 0


def _recursion(ctx, kernel: str, geo: Geometry, N: int, args: tuple, workspace_ptr: int, max_l: int,
               msize: int) -> None:
    """Launches the alpha or beta recursion on the short or the long path."""
    i64 = np.int64
    if geo.long:
        slots = min(N, LONG_SLOTS)
        ctx.launch(FILE, kernel.replace("<", "_long<", 1), (slots,), (geo.threads,),
                   args + (ptr(workspace_ptr + _round(8 * 3 * N)), i64(long_slot_bytes(max_l, msize))))
    else:
        ctx.launch(FILE, kernel, (max(1, min(N, 32 * ctx.sm_count)),), (geo.threads,), args + (np.int32(geo.per),),
                   shared_mem=geo.smem)


def launch_backward(ctx, *, grad_out_ptr, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr, log_alpha_ptr,
                    out_ptr, workspace_ptr, T, N, C, X, dtype, target_dtype, targets_2d_stride, targets_numel,
                    input_lengths, target_lengths, blank, zero_infinity, long_path=None):
    dt, it = _dname(dtype), _dname(target_dtype)
    if N == 0 or T == 0 or C == 0:
        return
    max_l = _common(ctx, workspace_ptr, N, input_lengths, target_lengths, targets_2d_stride)
    msize = _math_size(dt)
    geo = recursion_geometry(max_l, msize, long_path)
    ct = _CTYPE[dt]
    V = 16 // _SIZE[dt]
    vec = int(C % V == 0 and log_probs_ptr % 16 == 0 and out_ptr % 16 == 0)
    work = T * N * C // (V if vec else 1)
    grid = max(1, min(-(-work // DENSE_BLOCK), 4 * ctx.sm_count))
    i64 = np.int64
    ctx.launch(FILE, f"aclg::ctc_dense<{ct}>", (grid,), (DENSE_BLOCK,),
               (ptr(log_probs_ptr), ptr(grad_out_ptr), ptr(neg_log_likelihood_ptr), ptr(out_ptr),
                ptr(workspace_ptr), i64(T), i64(N), i64(C), np.int32(bool(zero_infinity)), np.int32(vec)))
    _recursion(ctx, f"aclg::ctc_beta<{ct}, {_ITYPE[it]}>", geo, N,
               (ptr(log_probs_ptr), ptr(grad_out_ptr), ptr(neg_log_likelihood_ptr), ptr(log_alpha_ptr),
                ptr(targets_ptr), ptr(out_ptr), ptr(workspace_ptr), i64(T), i64(N), i64(C), i64(X), i64(blank),
                i64(max_l), i64(targets_numel), i64(targets_2d_stride), np.int32(bool(zero_infinity))),
               workspace_ptr, max_l, msize)


def launch_forward(ctx, *, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr, log_alpha_ptr, workspace_ptr,
                   T, N, C, dtype, target_dtype, targets_2d_stride, targets_numel, input_lengths, target_lengths,
                   blank, zero_infinity, long_path=None):
    dt, it = _dname(dtype), _dname(target_dtype)
    if N == 0 or T == 0:
        return
    max_l = _common(ctx, workspace_ptr, N, input_lengths, target_lengths, targets_2d_stride)
    X = 2 * max_l + 1
    msize = _math_size(dt)
    geo = recursion_geometry(max_l, msize, long_path)
    i64 = np.int64
    _recursion(ctx, f"aclg::ctc_alpha<{_CTYPE[dt]}, {_ITYPE[it]}>", geo, N,
               (ptr(log_probs_ptr), ptr(targets_ptr), ptr(neg_log_likelihood_ptr), ptr(log_alpha_ptr),
                ptr(workspace_ptr), i64(T), i64(N), i64(C), i64(X), i64(blank), i64(max_l), i64(targets_numel),
                i64(targets_2d_stride), np.int32(bool(zero_infinity))), workspace_ptr, max_l, msize)
