"""GPU plan of scaled masked softmax (forward and backward): plain functions over a KernelContext.

Inputs are contiguous (B, N, S1, S2) tensors of one dtype (float16, bfloat16, float32); the mask is
contiguous bool (Bm, Nm, S1, S2), Bm in {B, 1}, Nm in {N, 1}, or absent (pointer 0). The glue has
validated everything and copied strided views; this module only picks kernels and launches them.

Row mapping, picked by the row length S2 (E = elements one thread keeps in registers):

| S2                  | kernel                              | mapping                                       |
| ------------------- | ----------------------------------- | --------------------------------------------- |
| <= 1024             | smsm_*_rows<T, VW, C, false>        | a warp per row, 4 rows per block, E = C*VW <= 32 |
| 1025 .. 8192        | smsm_*_rows<T, VW, C, true>         | a block per row (<= 512 threads), E <= 16     |
| > 8192              | smsm_*_long<T, VW, true>            | a block (512 threads) per row, two passes (*) |
| beyond that         | smsm_*_long<T, VW, false>           | two passes, pass 2 re-reads the row (L2)      |

(*) the row staged in shared memory (read once) while the staged tensors fit 48 KiB: S2 <= 12288
(bwd fp16/bf16), 24576 (fwd fp16/bf16), 12288 (fwd fp32); bwd fp32 never (6144 < 8192).

VW = 16 / sizeof(T) (16-byte vectors) when S2 % VW == 0 and every pointer is 16-byte aligned (the mask
VW-byte aligned), else 1. C is the smallest instantiated chunk count that covers the row. The two
register and staged variants read every input once and write once; the unstaged two-pass variant
reads g, y (x) twice, the second time mostly from L2 (one row is at most a few hundred KB).

Workspace: none (0 bytes); all launch parameters are kernel scalars. Grids are capped at
sm_count * (2048 // threads per block) blocks; kernels use grid-stride loops over rows. The warp-per-row
variant puts fewer than 4 rows in a block when rows < 4 * sm_count, so its grid reaches every SM.
"""
from __future__ import annotations

import numpy as np

from ...base import dtypes
from ...kernels import manifest
from ...kernels.context import KernelFile

FILE = "scaled_masked_softmax.cu"

WARP_BLOCK = 128            # threads per block of the warp-per-row variant (4 rows per block)
WARP_MAX_ELEMS = 32         # elements per lane in registers -> warp variant up to S2 = 1024
ROW_BLOCK_MAX = 512         # threads per block of the block-per-row variants
BLOCK_MAX_ELEMS = 16        # elements per thread in registers -> block variant up to S2 = 8192
LONG_BLOCK = 512
WARP_MAX_S2 = 32 * WARP_MAX_ELEMS            # 1024
BLOCK_MAX_S2 = ROW_BLOCK_MAX * BLOCK_MAX_ELEMS  # 8192
THREADS_PER_SM = 2048
# Static + dynamic shared memory of a block without the opt-in attribute is 48 KiB; the long-row
# kernels also hold a static scratch of 2 * 32 floats (smsm_fwd_long; smsm_bwd_long 32), so their
# staged row may take 48 KiB minus that (the emulator checks only the dynamic part).
LONG_STATIC_SMEM = 2 * 32 * 4
STAGE_MAX_BYTES = 48 * 1024 - LONG_STATIC_SMEM

_CTYPES = dtypes.cuda_types("float32", "float16", "bfloat16")
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def _dtype_name(dtype) -> str:
    return dtypes.supported_name(dtype, _CTYPES, "scaled masked softmax: unsupported dtype")


def vec_width(dtype) -> int:
    return 16 // _ITEMSIZE[_dtype_name(dtype)]


def _warp_chunks(vw: int) -> list[int]:
    return [c for c in (1, 2, 4, 8) if c * vw <= WARP_MAX_ELEMS] if vw > 1 else [1, 4, 32]


def _block_chunks(vw: int) -> list[int]:
    return [c for c in (1, 2, 4) if c * vw <= BLOCK_MAX_ELEMS] if vw > 1 else [4, 16]


def _kernel_names() -> tuple[str, ...]:
    out = []
    for direction in ("bwd", "fwd"):
        for name in ("float32", "float16", "bfloat16"):
            t = _CTYPES[name]
            for vw in (vec_width(name), 1):
                out += [f"smsm_{direction}_rows<{t}, {vw}, {c}, false>" for c in _warp_chunks(vw)]
                out += [f"smsm_{direction}_rows<{t}, {vw}, {c}, true>" for c in _block_chunks(vw)]
                # staging g and y of an fp32 row beyond the register range never fits 48 KiB
                stages = ("false",) if (direction, name) == ("bwd", "float32") else ("true", "false")
                out += [f"smsm_{direction}_long<{t}, {vw}, {st}>" for st in stages]
    return tuple(out)


KERNELS = manifest.register(KernelFile(FILE, _kernel_names()))   # every instantiation the launchers below can launch


def workspace_bytes(B: int = 0, N: int = 0, S1: int = 0, S2: int = 0, dtype=None) -> int:
    """Workspace the plan needs: none, in both directions (every parameter is a kernel scalar)."""
    return 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def stage_bytes(S2: int, dtype, direction: str) -> int:
    """Dynamic shared memory the staged two-pass variant needs (bwd stages g and y, fwd stages x)."""
    return (2 if direction == "bwd" else 1) * S2 * _ITEMSIZE[_dtype_name(dtype)]


def choose(S2: int, dtype, rows: int, sm_count: int, aligned: bool, direction: str):
    """(name expression, grid, block, dynamic shared bytes) for one launch over `rows` rows of
    length S2."""
    name = _dtype_name(dtype)
    t = _CTYPES[name]
    vw = vec_width(name) if (aligned and S2 % vec_width(name) == 0) else 1
    nchunks = S2 // vw
    if S2 <= WARP_MAX_S2:
        c = next(c for c in _warp_chunks(vw) if 32 * c >= nchunks)
        # 4 rows per block, fewer when that would leave SMs without a block (the kernel takes its
        # warps per block from blockDim: 1-3 warps when rows < 4 * sm_count)
        rows_per_block = max(1, min(WARP_BLOCK // 32, rows // max(1, sm_count)))
        block = 32 * rows_per_block
        grid = min(_ceil_div(rows, rows_per_block), sm_count * (THREADS_PER_SM // WARP_BLOCK))
        return KERNELS.name(f"smsm_{direction}_rows", t, vw, c, "false"), grid, block, 0
    if S2 <= BLOCK_MAX_S2:
        c = next(c for c in _block_chunks(vw) if ROW_BLOCK_MAX * c >= nchunks)
        threads = min(ROW_BLOCK_MAX, 32 * _ceil_div(_ceil_div(nchunks, c), 32))
        grid = min(rows, sm_count * max(1, THREADS_PER_SM // threads))
        return KERNELS.name(f"smsm_{direction}_rows", t, vw, c, "true"), grid, threads, 0
    grid = min(rows, sm_count * (THREADS_PER_SM // LONG_BLOCK))
    smem = stage_bytes(S2, name, direction)
    if smem <= STAGE_MAX_BYTES:
        return KERNELS.name(f"smsm_{direction}_long", t, vw, "true"), grid, LONG_BLOCK, smem
    return KERNELS.name(f"smsm_{direction}_long", t, vw, "false"), grid, LONG_BLOCK, 0


def _common(B, N, S1, S2, Bm, Nm, scale, fix_triu_mask, mask_ptr):
    rows = B * N * S1
    mrow_b = Nm * S1 if Bm != 1 else 0
    mrow_n = S1 if Nm != 1 else 0
    tail = (np.int64(rows), np.int64(S1), np.int64(S2), np.int64(N), np.int64(mrow_b), np.int64(mrow_n),
            np.float32(scale), np.int32(1 if fix_triu_mask else 0))
    return rows, tail


def _aligned(dtype, ptrs, mask_ptr) -> bool:
    return all(int(p) % 16 == 0 for p in ptrs) and (int(mask_ptr) % vec_width(dtype) == 0)


def launch_backward(ctx, *, grad_ptr, y_ptr, mask_ptr, out_ptr, workspace_ptr=0, B, N, S1, S2, Bm=1, Nm=1,
                    dtype, scale=1.0, fix_triu_mask=False) -> None:
    """out = scale * y * (grad - rowsum(grad * y)), 0 where masked (mask_ptr 0: no mask)."""
    mask_ptr = 0 if mask_ptr is None else int(mask_ptr)
    rows, tail = _common(B, N, S1, S2, Bm, Nm, scale, fix_triu_mask, mask_ptr)
    if rows == 0 or S2 == 0:
        return
    aligned = _aligned(dtype, (grad_ptr, y_ptr, out_ptr), mask_ptr)
    expr, grid, block, smem = choose(S2, dtype, rows, ctx.sm_count, aligned, "bwd")
    ctx.launch(FILE, expr, (grid,), (block,),
               (np.uint64(int(grad_ptr)), np.uint64(int(y_ptr)), np.uint64(mask_ptr), np.uint64(int(out_ptr))) + tail,
               shared_mem=smem)


def launch_forward(ctx, *, x_ptr, mask_ptr, y_ptr, workspace_ptr=0, B, N, S1, S2, Bm=1, Nm=1,
                   dtype, scale=1.0, fix_triu_mask=False) -> None:
    """y = softmax(scale * x) with masked positions excluded; fully masked rows give zeros."""
    mask_ptr = 0 if mask_ptr is None else int(mask_ptr)
    rows, tail = _common(B, N, S1, S2, Bm, Nm, scale, fix_triu_mask, mask_ptr)
    if rows == 0 or S2 == 0:
        return
    aligned = _aligned(dtype, (x_ptr, y_ptr), mask_ptr)
    expr, grid, block, smem = choose(S2, dtype, rows, ctx.sm_count, aligned, "fwd")
    ctx.launch(FILE, expr, (grid,), (block,),
               (np.uint64(int(x_ptr)), np.uint64(mask_ptr), np.uint64(int(y_ptr))) + tail,
               shared_mem=smem)
