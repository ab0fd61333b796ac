"""The GPU plan of KL divergence (aclnnKlDiv forward, aclnnKlDivBackward): plain functions over a
`KernelContext` that build the int64 tiling block, upload it to the workspace head and launch the
kernels of `kernels/kl_div.cu`. The host side (`ops/kl_div/api.py`) has already validated everything.

Tensors are `(ptr, shape, strides, dtype)`: device address with the view offset already folded in,
shape and element strides (sequences of int), aclDataType code (ACL_FLOAT, ACL_FLOAT16, ACL_DOUBLE,
ACL_BF16).

Paths (chosen here, from the layouts):
* fast: after dropping size-1 dims and merging contiguous dims, the iteration space is one dense
  run over which every operand has stride 1 (gradOutput may be a broadcast scalar, stride 0), and
  every operand has the same dtype -> `*_contig<T>`, with 16-byte vectors when all used pointers are
  16-byte aligned. No tiling (backward workspace 0).
* general: anything else -> `*_strided<M>` (M = double if any operand is fp64, else float), strides
  and sizes from the tiling block, runtime dtype codes.

Workspace formulas (bytes):
  backward: 0 if out is empty or the fast path applies; else TILING_BYTES (512: 58 int64 words).
  forward:  TILING_BYTES (0 when B is empty or the fast path applies and reduction is none)
            + (reduction sum/mean/batchmean: MAX_PARTIALS * sizeof(M), M = 8 for fp64 else 4).
  i.e. none: 0 or 512; reduction: 512 + 1024 * 4 (or * 8 with any fp64 operand).
Layout: tiling at offset 0, the forward's per-block partials at offset TILING_BYTES.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...base import dtypes
from ...base.status import aclDataType
from ...kernels import manifest
from ...kernels.context import KernelContext, KernelFile, ptr
from ...kernels.occupancy import wave_grid
from ...plans.checks import broadcast_shapes

FILE = "kl_div.cu"
REGISTERS = Path(__file__).with_name("registers.json")   # its kernels' register counts (kernels/occupancy.py)
BLOCK = 256
MAX_RANK = 8
TILING_BYTES = 512
MAX_PARTIALS = 1024
# a block per out element only pays when each would have at least this many elements to sum
BLOCK_REDUCE_MIN = 2 * BLOCK

FLOAT, FLOAT16, DOUBLE, BF16 = (aclDataType.ACL_FLOAT, aclDataType.ACL_FLOAT16, aclDataType.ACL_DOUBLE,
                               aclDataType.ACL_BF16)   # the storage types of the kernels
_STORAGE: dict[int, str] = {code: dtypes.CUDA_TYPE[code] for code in (FLOAT, FLOAT16, DOUBLE, BF16)}
_ITEMSIZE: dict[int, int] = {FLOAT: 4, FLOAT16: 2, DOUBLE: 8, BF16: 2}

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM, REDUCTION_BATCHMEAN = 0, 1, 2, 3


def _kernel_names() -> tuple[str, ...]:
    storage = [_STORAGE[code] for code in (FLOAT, FLOAT16, BF16, DOUBLE)]
    math_types = ["float", "double"]
    return tuple([f"kl_bwd_contig<{t}>" for t in storage] + [f"kl_bwd_strided<{m}>" for m in math_types]
                 + [f"kl_bwd_strided_block<{m}>" for m in math_types] + [f"kl_fwd_contig<{t}>" for t in storage]
                 + [f"kl_fwd_strided<{m}>" for m in math_types] + [f"kl_fwd_partial_contig<{t}>" for t in storage]
                 + [f"kl_fwd_partial_strided<{m}>" for m in math_types] + [f"kl_fwd_final<{m}>" for m in math_types])


# every instantiation the launchers below can launch, and their register counts
KERNELS = manifest.register(KernelFile(FILE, _kernel_names()), registers=REGISTERS)


@dataclass(frozen=True)
class Operand:
    """A tensor as the kernels see it: address (view offset folded in), shape, element strides, ACL
    dtype code."""
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: int


def as_operand(x: Operand | tuple) -> Operand:
    """An Operand from `(ptr, shape, strides, dtype)`; the host checks refused ranks over 8 and other
    dtypes already (the asserts state the invariant, they are not checks)."""
    if isinstance(x, Operand):
        return x
    p, shape, strides, dtype = x
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    assert len(shape) == len(strides) <= MAX_RANK and int(dtype) in _STORAGE, x
    return Operand(int(p), shape, strides, int(dtype))


def _bstrides(t: Operand, shape: Sequence[int]) -> list:
    """t's element strides over the broadcast space `shape` (0 along broadcast dims)."""
    rank = len(shape)
    out = []
    for d in range(rank):
        k = d - (rank - len(t.shape))
        out.append(0 if k < 0 or t.shape[k] == 1 else t.strides[k])
    return out


def _coalesce(sizes: Sequence[int], strides: Sequence[Sequence[int]]):
    """Drop size-1 dims and merge neighbours that are contiguous for every operand (row-major)."""
    dims = [d for d in range(len(sizes)) if sizes[d] != 1]
    out_sizes: list = []
    out_strides: list = [[] for _ in strides]
    for d in dims:
        if out_sizes and all(st[-1] == s[d] * sizes[d] for st, s in zip(out_strides, strides)):
            out_sizes[-1] *= sizes[d]
            for st, s in zip(out_strides, strides):
                st[-1] = s[d]
        else:
            out_sizes.append(sizes[d])
            for st, s in zip(out_strides, strides):
                st.append(s[d])
    return out_sizes, out_strides


def _space_words(sizes: Sequence[int], strides: Sequence[Sequence[int]]) -> list:
    """[rank, size[8], stride_k[8]...] (unused dims size 1, stride 0)."""
    rank = len(sizes)
    words = [rank] + list(sizes) + [1] * (MAX_RANK - rank)
    for st in strides:
        words += list(st) + [0] * (MAX_RANK - rank)
    return words


def _grid(ctx: KernelContext, expr: str, work: int) -> int:
    """One block per BLOCK work items, capped at one full wave of `expr` (grid-stride loops)."""
    return wave_grid(ctx, FILE, expr, -(-work // BLOCK), BLOCK)


def _aligned(*ptrs: int) -> bool:
    return all(p % 16 == 0 for p in ptrs)


def _math_double(*dtypes: int) -> bool:
    return any(d == DOUBLE for d in dtypes)


def _coef(reduction: int, b_shape: Sequence[int], double: bool):
    n = math.prod(b_shape)
    if reduction == REDUCTION_MEAN:
        c = 1.0 / n if n else math.inf
    elif reduction == REDUCTION_BATCHMEAN:
        b0 = b_shape[0] if b_shape else 1
        c = 1.0 / b0 if b0 else math.inf
    else:
        c = 1.0
    return np.float64(c) if double else np.float32(c)


# ============================================================================ backward
@dataclass(frozen=True, eq=False)
class BackwardLayout:
    """The backward's decisions, made once in phase 1 (`plan_backward`): the workspace size and the
    launch both read them."""
    n_out: int
    fast: bool
    g_scalar: bool
    kept: tuple      # (sizes, [stride_g, stride_t, stride_out])
    red: tuple       # (sizes, [stride_g, stride_t])
    b_shape: tuple


def _plan_backward(grad_output, target, out, self_shape) -> BackwardLayout:
    g, t, o = as_operand(grad_output), as_operand(target), as_operand(out)
    self_shape = tuple(int(s) for s in self_shape)
    b = broadcast_shapes(self_shape, t.shape)   # out is self's shape and g broadcasts to b: checked by api.py
    assert b is not None, (self_shape, t.shape)
    rank = len(b)
    lead = rank - len(self_shape)
    sg, st = _bstrides(g, b), _bstrides(t, b)
    so = [0] * lead + list(o.strides)
    kept_d: list[int] = []
    red_d: list[int] = []
    for d in range(rank):
        self_size = self_shape[d - lead] if d >= lead else None
        (red_d if self_size is None or (self_size == 1 and b[d] != 1) else kept_d).append(d)
    kept = _coalesce([b[d] for d in kept_d], [[s[d] for d in kept_d] for s in (sg, st, so)])
    red = _coalesce([b[d] for d in red_d], [[s[d] for d in red_d] for s in (sg, st)])
    n_out = math.prod(self_shape)
    ksizes, (kg, kt, ko) = kept
    fast = (len(red[0]) == 0 and len(ksizes) <= 1 and g.dtype == t.dtype == o.dtype
            and all(s == 1 for s in kt + ko) and all(s in (0, 1) for s in kg))
    g_scalar = fast and (len(kg) == 0 or kg[0] == 0)
    return BackwardLayout(n_out, fast, g_scalar, kept, red, b)


def plan_backward(*, grad_output, target, out, self_shape, reduction=0, log_target=False) -> BackwardLayout:
    """The backward's layout decisions, made once: the workspace size and the launch both read them
    (memoised: phase 1 of a training loop meets the same operands again)."""
    return _cached_backward(as_operand(grad_output), as_operand(target), as_operand(out),
                            tuple(int(s) for s in self_shape))


@functools.lru_cache(maxsize=256)
def _cached_backward(g: Operand, t: Operand, o: Operand, self_shape: tuple[int, ...]) -> BackwardLayout:
    return _plan_backward(g, t, o, self_shape)


def backward_workspace_bytes(*, grad_output, target, out, self_shape, reduction=0, log_target=False,
                             layout: BackwardLayout | None = None) -> int:
    p = layout or _plan_backward(grad_output, target, out, self_shape)
    return 0 if p.n_out == 0 or p.fast else TILING_BYTES


def launch_backward(ctx: KernelContext, *, grad_output, target, out, self_shape, reduction: int,
                    log_target: bool, workspace_ptr: int, layout: BackwardLayout | None = None) -> None:
    """out = sum over self's broadcast axes of -(e * g) * coef, cast to out's dtype."""
    g, t, o = as_operand(grad_output), as_operand(target), as_operand(out)
    p = layout or _plan_backward(g, t, o, self_shape)
    if p.n_out == 0:
        return
    lt = np.int32(1 if log_target else 0)
    double = _math_double(g.dtype, t.dtype, o.dtype)
    coef = _coef(int(reduction), p.b_shape, double)
    if p.fast:
        n = p.n_out
        vec = _aligned(t.ptr, o.ptr) and (p.g_scalar or _aligned(g.ptr))
        nv = n // (16 // _ITEMSIZE[o.dtype])
        expr = KERNELS.name("kl_bwd_contig", _STORAGE[o.dtype])
        ctx.launch(FILE, expr, (_grid(ctx, expr, nv if vec and nv else n),), (BLOCK,),
                   (ptr(g.ptr), ptr(t.ptr), ptr(o.ptr), np.int64(n), np.int32(p.g_scalar), lt,
                    np.int32(vec), coef))
        return
    words = _space_words(*p.kept) + _space_words(*p.red)
    ctx.upload(workspace_ptr, np.asarray(words, dtype=np.int64))
    n_red = math.prod(p.red[0])
    m = "double" if double else "float"
    args = (ptr(g.ptr), np.int32(g.dtype), ptr(t.ptr), np.int32(t.dtype), ptr(o.ptr), np.int32(o.dtype),
            ptr(workspace_ptr), np.int64(p.n_out), np.int64(n_red), lt, coef)
    per_thread = KERNELS.name("kl_bwd_strided", m)
    wave_threads = _grid(ctx, per_thread, 2**62) * BLOCK   # threads of one full wave of the per-thread kernel
    if n_red >= BLOCK_REDUCE_MIN and p.n_out < 2 * wave_threads:
        per_block = KERNELS.name("kl_bwd_strided_block", m)   # a block per out element, up to one wave
        ctx.launch(FILE, per_block, (wave_grid(ctx, FILE, per_block, p.n_out, BLOCK),), (BLOCK,), args)
    else:
        ctx.launch(FILE, per_thread, (_grid(ctx, per_thread, p.n_out),), (BLOCK,), args)


# ============================================================================ forward
@dataclass(frozen=True, eq=False)
class ForwardLayout:
    """The forward's decisions, made once in phase 1 (`plan_forward`)."""
    n: int
    fast: bool
    space: tuple     # (sizes, [stride_s, stride_t, stride_out])
    b_shape: tuple
    reduce: bool
    double: bool


def _plan_forward(self, target, out, reduction) -> ForwardLayout:
    s, t, o = as_operand(self), as_operand(target), as_operand(out)
    b = broadcast_shapes(s.shape, t.shape)   # checked by api.py
    assert b is not None, (s.shape, t.shape)
    reduce = int(reduction) in (REDUCTION_MEAN, REDUCTION_SUM, REDUCTION_BATCHMEAN)
    # out: one element for a reduction, else shape b (checked by api.py)
    so = [0] * len(b) if reduce else list(o.strides)
    space = _coalesce(list(b), [_bstrides(s, b), _bstrides(t, b), so])
    sizes, (ss, st, so2) = space
    dt_same = s.dtype == t.dtype and (reduce or o.dtype == s.dtype)
    fast = (dt_same and len(sizes) <= 1 and all(x == 1 for x in ss + st)
            and (reduce or all(x == 1 for x in so2)))
    return ForwardLayout(math.prod(b), fast, space, b, reduce, _math_double(s.dtype, t.dtype, o.dtype))


def plan_forward(*, self, target, out, reduction=1, log_target=False) -> ForwardLayout:
    """The forward's layout decisions, made once: the workspace size and the launch both read them
    (memoised like `plan_backward`)."""
    return _cached_forward(as_operand(self), as_operand(target), as_operand(out), int(reduction))


@functools.lru_cache(maxsize=256)
def _cached_forward(s: Operand, t: Operand, o: Operand, reduction: int) -> ForwardLayout:
    return _plan_forward(s, t, o, reduction)


def forward_workspace_bytes(*, self, target, out, reduction=1, log_target=False,
                            layout: ForwardLayout | None = None) -> int:
    p = layout or _plan_forward(self, target, out, reduction)
    tiling = 0 if p.fast or p.n == 0 else TILING_BYTES
    if not p.reduce:
        return tiling
    return TILING_BYTES + MAX_PARTIALS * (8 if p.double else 4)


def launch_forward(ctx: KernelContext, *, self, target, out, reduction: int, log_target: bool,
                   workspace_ptr: int, layout: ForwardLayout | None = None) -> None:
    """none: out[B] = elementwise KL; sum/mean/batchmean: out (one element) = sum / div, by per-block
    partials (workspace + TILING_BYTES) combined in index order by one block."""
    s, t, o = as_operand(self), as_operand(target), as_operand(out)
    p = layout or _plan_forward(s, t, o, reduction)
    lt = np.int32(1 if log_target else 0)
    m = "double" if p.double else "float"
    sizes, strides = p.space
    if not p.reduce:
        if p.n == 0:
            return
        if p.fast:
            vec = _aligned(s.ptr, t.ptr, o.ptr)
            nv = p.n // (16 // _ITEMSIZE[o.dtype])
            expr = KERNELS.name("kl_fwd_contig", _STORAGE[o.dtype])
            ctx.launch(FILE, expr, (_grid(ctx, expr, nv if vec and nv else p.n),), (BLOCK,),
                       (ptr(s.ptr), ptr(t.ptr), ptr(o.ptr), np.int64(p.n), lt, np.int32(vec)))
        else:
            ctx.upload(workspace_ptr, np.asarray(_space_words(sizes, strides), dtype=np.int64))
            expr = KERNELS.name("kl_fwd_strided", m)
            ctx.launch(FILE, expr, (_grid(ctx, expr, p.n),), (BLOCK,),
                       (ptr(s.ptr), np.int32(s.dtype), ptr(t.ptr), np.int32(t.dtype), ptr(o.ptr),
                        np.int32(o.dtype), ptr(workspace_ptr), np.int64(p.n), lt))
        return
    partials = workspace_ptr + TILING_BYTES
    red = int(reduction)
    if red == REDUCTION_MEAN:
        div = float(p.n)
    elif red == REDUCTION_BATCHMEAN:
        div = float(p.b_shape[0] if p.b_shape else 1)
    else:
        div = 1.0
    count = 0
    if p.n:
        if p.fast and s.dtype != DOUBLE and p.double:
            fast = False  # fp64 out with narrower inputs: the contig partial would accumulate in fp32
        else:
            fast = p.fast
        if fast:
            vec = _aligned(s.ptr, t.ptr)
            nv = p.n // (16 // _ITEMSIZE[s.dtype])
            expr = KERNELS.name("kl_fwd_partial_contig", _STORAGE[s.dtype])
            count = min(_grid(ctx, expr, nv if vec and nv else p.n), MAX_PARTIALS)
            ctx.launch(FILE, expr, (count,), (BLOCK,),
                       (ptr(s.ptr), ptr(t.ptr), np.int64(p.n), lt, np.int32(vec), ptr(partials)))
        else:
            ctx.upload(workspace_ptr, np.asarray(_space_words(sizes, strides[:2]), dtype=np.int64))
            expr = KERNELS.name("kl_fwd_partial_strided", m)
            count = min(_grid(ctx, expr, p.n), MAX_PARTIALS)
            ctx.launch(FILE, expr, (count,), (BLOCK,),
                       (ptr(s.ptr), np.int32(s.dtype), ptr(t.ptr), np.int32(t.dtype), ptr(workspace_ptr),
                        np.int64(p.n), lt, ptr(partials)))
    dv = np.float64(div) if p.double else np.float32(div)
    ctx.launch(FILE, KERNELS.name("kl_fwd_final", m), (1,), (BLOCK,),
               (ptr(partials), np.int64(count), dv, ptr(o.ptr), np.int32(o.dtype)))
