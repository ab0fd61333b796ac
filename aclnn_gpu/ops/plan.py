"""What every operator's phase 1 produces: a `Plan`, plus the tools plans are built from.

A plan is frozen when GetWorkspaceSize returns: the tensors it reads and writes, its workspace
size, and two ways to run: `run_host(device, workspace)` (the cpu device: NumPy on host views) and
`run_kernels(ctx, workspace)` (cuda and emulated: launches through a `KernelContext`).
`WorkspaceLayout` hands out aligned byte ranges of the workspace; `Staging` gives a kernel written
for contiguous tensors a contiguous copy of any strided view; `StagedIo` is the usual workspace of
a GPU plan: staging copies of its operands, then the plan's own bytes.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import dtypes
from ..errors import fail
from ..kernels.context import KernelContext, ptr
from ..status import aclnnStatus
from ..tensor import aclTensor

INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID
ALIGN = 256  # bytes: every workspace range starts on a 256-byte boundary (vector loads want 16)


class Plan:
    """Base of every operator plan. Subclasses set `op`, `tensors`, `workspace_size` and the runs."""

    op: str = "?"
    tensors: dict[str, aclTensor | None] = {}  # C parameter name -> tensor (None: an absent optional)
    workspace_size: int = 0
    has_work: bool = True

    def run_host(self, device: Any, workspace: int) -> None:
        raise NotImplementedError

    def run_kernels(self, ctx: KernelContext, workspace: int) -> None:
        raise NotImplementedError


class EmptyPlan(Plan):
    """Nothing to do (empty outputs): workspace 0, execute succeeds without queueing anything."""

    has_work = False

    def __init__(self, op: str):
        self.op = op


def check_plan_memory(op: str, plan: Plan, device: Any) -> None:
    """Phase 2 re-checks that every tensor's memory is still live (it may have been freed since)."""
    for name, tensor in plan.tensors.items():
        if tensor is not None:
            check_tensor_memory(op, name, tensor, device)


def check_tensor_memory(op: str, name: str, tensor: aclTensor, device: Any) -> None:
    if tensor.destroyed:
        fail(INVALID, f"{op}: {name} was destroyed")
    if tensor.numel == 0:
        return
    if tensor.negative_strides:
        fail(INVALID, f"{op}: {name} has negative strides {list(tensor.strides)}, which are not supported")
    data = tensor.data
    if data is None:
        fail(aclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{op}: {name} has no data address but {tensor.numel} elements")
    lo, nbytes = tensor.byte_span()
    device.registry.check(data + lo, nbytes, f"{op}: {name} data", status=INVALID, on_device=True)


def check_no_self_overlap(op: str, name: str, tensor: aclTensor) -> None:
    """An output whose elements share memory would be written twice in an undefined order."""
    if tensor.numel == 0:
        return
    dims = sorted((s, n) for n, s in zip(tensor.shape, tensor.strides) if n > 1)
    reach = 1
    for stride, n in dims:
        if stride < reach:
            fail(INVALID, f"{op}: {name} is a view whose elements overlap (strides {list(tensor.strides)}, "
                          f"shape {list(tensor.shape)}); an output must not overlap itself")
        reach = stride * (n - 1) + reach
    return None


def byte_range(tensor: aclTensor) -> tuple[int, int]:
    lo, nbytes = tensor.byte_span()
    data: int = tensor.data or 0   # a null tensor never gets here: the checks refused it
    return data + lo, data + lo + nbytes


def check_no_alias(op: str, out_name: str, out: aclTensor, inputs: Sequence[tuple[str, aclTensor | None]]) -> None:
    """Refuse an output that shares memory with an input (the kernels read while they write)."""
    if out.numel == 0:
        return
    o_lo, o_hi = byte_range(out)
    for name, tensor in inputs:
        if tensor is None or tensor.numel == 0 or tensor.data is None:
            continue
        lo, hi = byte_range(tensor)
        if lo < o_hi and o_lo < hi:
            fail(INVALID, f"{op}: {out_name} overlaps the memory of {name}; outputs must not alias inputs")


# ------------------------------------------------------------------------------ host (cpu) views
def host_array(device: Any, tensor: aclTensor) -> np.ndarray:
    """A NumPy view of a tensor on a host-memory device (cpu)."""
    dtype = dtypes.to_numpy(tensor.dtype)
    if tensor.numel == 0:
        return np.empty(tensor.shape, dtype)
    size = dtype.itemsize
    lo, nbytes = tensor.byte_span()
    raw = device.host_view((tensor.data or 0) + lo, nbytes)
    return np.ndarray(tensor.shape, dtype, buffer=raw, offset=tensor.offset * size - lo,
                      strides=tuple(s * size for s in tensor.strides))


def host_workspace(device: Any, workspace: int, nbytes: int) -> np.ndarray:
    return device.host_view(workspace, nbytes) if nbytes else np.empty(0, np.uint8)


def write_out(dst: np.ndarray, value: np.ndarray | float) -> None:
    """Store a result into an output view, rounding to the output's dtype."""
    np.copyto(dst, value, casting="unsafe")


# ------------------------------------------------------------------------------ workspace layout
class WorkspaceLayout:
    """Hands out 256-byte aligned ranges of one workspace; `size` is the total to ask for."""

    def __init__(self) -> None:
        self.size = 0

    def take(self, nbytes: int) -> int:
        offset = self.size
        self.size += -(-max(int(nbytes), 0) // ALIGN) * ALIGN
        return offset


# ------------------------------------------------------------------------------ strided staging (GPU)
MAX_RANK = 8
COPY_BLOCK = 256


def strided_tiling(shape: Sequence[int], *operand_strides: Sequence[int]) -> np.ndarray:
    """The tiling words common.cuh's `Shape` reads: [rank, size[8], stride_k[8] ...]."""
    rank = len(shape)
    assert rank <= MAX_RANK
    words = np.ones(1 + MAX_RANK * (1 + len(operand_strides)), np.int64)
    words[0] = rank
    words[1:1 + rank] = shape
    for k, strides in enumerate(operand_strides):
        base = 1 + MAX_RANK * (1 + k)
        words[base:base + MAX_RANK] = 0
        words[base:base + rank] = strides
    return words


def tensor_ptr(tensor: aclTensor) -> int:
    return tensor.data + tensor.offset * tensor.itemsize if tensor.data else 0


class Staging:
    """Contiguous copies of strided tensors in the workspace, for kernels that want contiguous data.

    Built in phase 1 (`need_in` / `need_out` reserve workspace); in phase 2 `gather` runs before the
    operator's kernels and `scatter` after them. A contiguous tensor is used in place.
    """

    def __init__(self, layout: WorkspaceLayout):
        self.layout = layout
        self.entries: dict[int, tuple[aclTensor, int, int]] = {}  # id -> (tensor, data offset, tiling offset)

    def _reserve(self, tensor: aclTensor) -> None:
        if tensor.is_contiguous() or tensor.numel == 0 or id(tensor) in self.entries:
            return
        if tensor.rank > MAX_RANK:
            fail(INVALID, f"strided tensors of rank {tensor.rank} > {MAX_RANK} are not supported")
        data = self.layout.take(tensor.numel * tensor.itemsize)
        tiling = self.layout.take(strided_tiling(tensor.shape, tensor.strides).nbytes)
        self.entries[id(tensor)] = (tensor, data, tiling)

    need_in = _reserve
    need_out = _reserve

    def address(self, tensor: aclTensor, workspace: int) -> int:
        """Where kernels find the contiguous data of `tensor`."""
        entry = self.entries.get(id(tensor))
        return workspace + entry[1] if entry else tensor_ptr(tensor)

    def _copy(self, ctx: KernelContext, tensor: aclTensor, workspace: int, gather: bool) -> None:
        entry = self.entries.get(id(tensor))
        if entry is None:
            return
        _, data, tiling = entry
        ctx.upload(workspace + tiling, strided_tiling(tensor.shape, tensor.strides))
        n = tensor.numel
        grid = max(1, min(-(-n // COPY_BLOCK), ctx.sm_count * 8))
        expr = f"strided_{'gather' if gather else 'scatter'}<{tensor.itemsize}>"
        ctx.launch("strided_copy.cu", expr, (grid,), (COPY_BLOCK,),
                   (ptr(tensor_ptr(tensor)), ptr(workspace + data), ptr(workspace + tiling), np.int64(n)))

    def gather(self, ctx: KernelContext, tensors: Sequence[aclTensor | None], workspace: int) -> None:
        for tensor in tensors:
            if tensor is not None:
                self._copy(ctx, tensor, workspace, True)

    def scatter(self, ctx: KernelContext, tensors: Sequence[aclTensor | None], workspace: int) -> None:
        for tensor in tensors:
            if tensor is not None:
                self._copy(ctx, tensor, workspace, False)


class StagedIo:
    """The workspace of a GPU plan that wants contiguous operands: Staging copies of its strided inputs
    (gathered before its kernels) and outputs (scattered after them), then the plan's own bytes
    (`reserve_plan`). An operator that needs more ranges takes them from `layout` before that."""

    def __init__(self, inputs: Sequence[aclTensor | None], outputs: Sequence[aclTensor]):
        self.layout = WorkspaceLayout()
        self.staging = Staging(self.layout)
        self.inputs = [t for t in inputs if t is not None]   # optional inputs may be absent
        self.outputs = list(outputs)
        for tensor in self.inputs:
            self.staging.need_in(tensor)
        for tensor in self.outputs:
            self.staging.need_out(tensor)
        self.plan_offset = 0

    def reserve_plan(self, plan_bytes: int) -> int:
        """Reserves the GPU plan's own bytes; returns the workspace size to ask for."""
        self.plan_offset = self.layout.take(plan_bytes)
        return self.layout.size

    def address(self, tensor: aclTensor | None, workspace: int) -> int:
        """Where kernels find `tensor` (its staging copy when strided); 0 for an absent or empty one."""
        if tensor is None or tensor.numel == 0:
            return 0
        return self.staging.address(tensor, workspace)

    def plan_workspace(self, workspace: int) -> int:
        """The GPU plan's own bytes; 0 when there is no workspace."""
        return workspace + self.plan_offset if workspace else 0

    def gather(self, ctx: KernelContext, workspace: int) -> None:
        self.staging.gather(ctx, self.inputs, workspace)

    def scatter(self, ctx: KernelContext, workspace: int) -> None:
        self.staging.scatter(ctx, self.outputs, workspace)


def grid_for(n: int, block: int, sm_count: int, waves: int = 8) -> int:
    return max(1, min(math.ceil(n / block), sm_count * waves))
