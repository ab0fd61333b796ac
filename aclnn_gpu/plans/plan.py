"""What every operator's phase 1 produces: a typed, frozen `Plan`, and the one workspace builder.

A plan is a frozen dataclass per operator direction (`ops/<op>/api.py`), complete when
GetWorkspaceSize returns: the tensors it reads and writes (`tensors`, C parameter names), the
operator's typed parameters (sizes, C element types, flags), its `Workspace`, and two ways to run:
`run_host(device, workspace)` (the cpu device: NumPy on host views) and `run_kernels(ctx, workspace)`
(cuda and emulated). On a kernel device phase 1 records the operator's launcher (`launch_kernels`)
once into `frozen` (`plans/frozen.py`: every upload, kernel name, grid, block and argument tuple), so
phase 2 only rebases the workspace pointers and enqueues on the stream.

`WorkspaceBuilder` is how every operator lays out its workspace, in one order of calls: `stage`
(a contiguous copy of a strided view: `strided_gather` before the kernels, `strided_scatter` after),
`convert` (a copy the operator's own kernel makes: CTC's int64 target cast, ConvTbc's dtype
conversion), `reserve` (the plan's own named bytes). `build()` returns the frozen `Workspace`, the
one object both the size GetWorkspaceSize reports and the launches' addresses come from.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from ..base import dtypes
from ..base.errors import fail
from ..kernels import manifest
from ..kernels.context import KERNEL_DIR, KernelContext, KernelFile, ptr
from ..kernels.occupancy import wave_grid
from ..base.status import aclnnStatus
from ..meta.tensor import REBINDS, aclTensor
from .frozen import FrozenLaunch, freeze_cached, run_plan

INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID
ALIGN = 256  # bytes: every workspace range starts on a 256-byte boundary (vector loads want 16)


# ------------------------------------------------------------------------------ plans
@dataclass(frozen=True, eq=False, kw_only=True)
class Plan:
    """Base of every operator plan: subclasses are frozen dataclasses that add their typed fields,
    set `op` and `outputs` and write `run_host` and `launch_kernels`."""

    op: ClassVar[str] = "?"
    # the operator's output parameters: its C declaration's trailing aclTensor parameters (a test reads
    # them from the headers); aclSetOutputTensorAddr counts these, aclSetInputTensorAddr the other tensors
    outputs: ClassVar[tuple[str, ...]] = ()
    kernel_files: ClassVar[tuple[str, ...]] = ()   # the kernel files its launcher launches from (recorder-checked)
    has_work: ClassVar[bool] = True
    tensors: Mapping[str, aclTensor | None]   # C parameter name -> tensor (None: an absent optional)
    workspace: Workspace
    frozen: FrozenLaunch | None = None          # the launcher's record (kernel devices, `with_frozen_launch`)
    workspace_size: int = field(init=False, repr=False)   # workspace.size, a plain field: phase 2 reads it thrice

    def __post_init__(self) -> None:
        object.__setattr__(self, "workspace_size", self.workspace.size)
        # the tensors but absent optionals: what phase 2 checks (not a field: no part of the launch key)
        present = tuple(t for t in self.tensors.values() if t is not None)
        object.__setattr__(self, "present", present)
        # the rebind count, then the descriptions the plan was made from: a tensor rebound since (a new
        # version) makes execute plan again on its new address (executor.follow_rebinds)
        object.__setattr__(self, "rebinds", REBINDS[0])
        object.__setattr__(self, "versions", tuple(t.version for t in present))

    def run_host(self, device: Any, workspace: int) -> None:
        raise NotImplementedError

    def launch_kernels(self, ctx: KernelContext, workspace: int) -> None:
        """The whole launcher (recorded in phase 1): the workspace's staged and converted inputs, the
        operator's own launches, then its staged and converted outputs."""
        self.workspace.gather(ctx, workspace)
        self.launch_operator(ctx, workspace)
        self.workspace.scatter(ctx, workspace)

    def launch_operator(self, ctx: KernelContext, workspace: int) -> None:
        """The operator's uploads, launches and GEMMs through `ctx`, on the workspace's addresses."""
        raise NotImplementedError

    def with_frozen_launch(self, sm_count: int, arch: str) -> Plan:
        """Phase 1 on a kernel device: this plan with its launcher recorded (`plans/frozen.py`) for a
        device of `sm_count` multiprocessors of architecture `arch`, or the record of an earlier plan
        with the same `launch_key`."""
        frozen = freeze_cached(self, sm_count, arch)
        # a copy sharing every field but `frozen` (dataclasses.replace would re-run __init__ over all)
        plan = object.__new__(type(self))
        plan.__dict__.update(self.__dict__, frozen=frozen)
        return plan

    def launch_key(self) -> tuple:
        """What the launcher's calls depend on: the plan type and every field but the tensors mapping,
        the workspace and the launcher's derived layouts (a tensor by its address and layout)."""
        names = _KEY_FIELDS.get(type(self))
        if names is None:
            names = _KEY_FIELDS[type(self)] = tuple(
                f.name for f in fields(self) if f.name not in _NOT_KEYED and not f.metadata.get("derived"))
        return (type(self), self.workspace.size, *[_key_of(getattr(self, name)) for name in names])

    def run_kernels(self, ctx: KernelContext, workspace: int) -> None:
        """Phase 2 on a kernel device: replay the frozen launch on the real workspace. A workspace
        base less aligned than the recording's reruns the launcher (its alignment choices differ)."""
        run_plan(self, ctx, workspace)


DERIVED = {"derived": True}   # field metadata: computed from the other fields, left out of `launch_key`
_NOT_KEYED = ("tensors", "workspace", "frozen")
_KEY_FIELDS: dict[type, tuple[str, ...]] = {}


_TENSOR_KEY = operator.attrgetter("_data", "_offset", "_shape", "_strides", "_dtype")   # one C call


def _key_of(value: Any) -> Any:
    kind = type(value)
    if kind is aclTensor:   # (data, offset, shape, strides, dtype): what a launcher reads of a tensor
        return _TENSOR_KEY(value)
    if kind is tuple:
        return tuple(_key_of(v) for v in value)
    return value


@dataclass(frozen=True)
class EmptyPlan:
    """Nothing to do (empty outputs): workspace 0, execute succeeds without queueing anything."""

    op: str
    tensors: Mapping[str, aclTensor | None] = field(default_factory=dict)
    workspace_size: ClassVar[int] = 0
    has_work: ClassVar[bool] = False
    frozen: ClassVar[None] = None
    present: ClassVar[tuple] = ()   # (its tensors, if given, are never checked in phase 2: nothing runs)
    rebinds: ClassVar[int] = 0
    versions: ClassVar[tuple] = ()

    def with_frozen_launch(self, sm_count: int, arch: str) -> EmptyPlan:
        return self


DESTROYED = operator.attrgetter("_destroyed")   # a tensor's flag, read in C (phase 2's fast path)


def check_plan_memory(op: str, plan: Any, device: Any, checked_generation: int) -> int:
    """Phase 2 re-checks that every tensor's memory is still live (it may have been freed since) and
    returns the registry generation the check passed at (the executor keeps it). When nothing was
    freed since the last pass (`checked_generation` is current), only the tensors' destroyed flags
    can have changed: O(1) per tensor, no registry look-up (run_executor inlines that case)."""
    generation = device.registry.generation  # read first: a free during the check invalidates it
    if checked_generation == generation:
        if any(map(DESTROYED, plan.present)):
            for name, tensor in plan.tensors.items():
                if tensor is not None and tensor.destroyed:
                    fail(INVALID, f"{op}: {name} was destroyed")
        return generation
    for name, tensor in plan.tensors.items():
        if tensor is not None:
            check_tensor_memory(op, name, tensor, device)
    return generation


def check_tensor_memory(op: str, name: str, tensor: aclTensor, device: Any) -> None:
    if tensor._destroyed:   # (the slots read directly here and below: every phase-1 check runs these)
        fail(INVALID, f"{op}: {name} was destroyed")
    if tensor.numel == 0:
        return
    if tensor.negative_strides:
        fail(INVALID, f"{op}: {name} has negative strides {list(tensor.strides)}, which are not supported")
    data = tensor._data
    if data is None:
        fail(aclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{op}: {name} has no data address but {tensor.numel} elements")
    registry = device.registry
    passed = (registry, registry.generation)  # nothing freed since the last pass: still live
    if tensor.memory_checked == passed:
        return
    lo, nbytes = tensor.byte_span()
    registry.check(data + lo, nbytes, f"{op}: {name} data", status=INVALID, on_device=True)
    tensor.memory_checked = passed


def check_no_self_overlap(op: str, name: str, tensor: aclTensor) -> None:
    """An output whose elements share memory would be written twice in an undefined order."""
    if tensor.numel == 0:
        return
    dims = sorted((s, n) for n, s in zip(tensor._shape, tensor._strides) if n > 1)
    reach = 1
    for stride, n in dims:
        if stride < reach:
            fail(INVALID, f"{op}: {name} is a view whose elements overlap (strides {list(tensor.strides)}, "
                          f"shape {list(tensor.shape)}); an output must not overlap itself")
        reach = stride * (n - 1) + reach
    return None


def byte_range(tensor: aclTensor) -> tuple[int, int]:
    lo, nbytes = tensor.byte_span()
    data: int = tensor._data or 0   # a null tensor never gets here: the checks refused it
    return data + lo, data + lo + nbytes


def check_no_alias(op: str, out_name: str, out: aclTensor, inputs: Sequence[tuple[str, aclTensor | None]]) -> None:
    """Refuse an output that shares memory with an input (the kernels read while they write)."""
    if out.numel == 0:
        return
    o_lo, o_hi = byte_range(out)
    for name, tensor in inputs:
        if tensor is None or tensor.numel == 0 or tensor._data is None:
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


def write_out(dst: np.ndarray, value: np.ndarray | float) -> None:
    """Store a result into an output view, rounding to the output's dtype."""
    np.copyto(dst, value, casting="unsafe")


# ------------------------------------------------------------------------------ the workspace builder
MAX_RANK = 8
COPY_BLOCK = 256
STRIDED_COPY = manifest.register(KernelFile("strided_copy.cu", tuple(f"strided_{kind}<{size}>"
                                                                    for kind in ("gather", "scatter")
                                                                    for size in (1, 2, 4, 8))),
                                 registers=KERNEL_DIR / "registers.json")   # (the copies belong to no operator)

Copy = Callable[[KernelContext, int, int], None]   # (ctx, source address, destination address)


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
    data = tensor._data
    return data + tensor._offset * tensor.itemsize if data else 0


def _aligned_size(nbytes: int) -> int:
    return -(-max(int(nbytes), 0) // ALIGN) * ALIGN


@dataclass(frozen=True, eq=False)
class Staged:
    """A contiguous copy of a strided view: its data and its tiling words in the workspace."""
    tensor: aclTensor
    offset: int
    tiling: int
    output: bool

    def copy(self, ctx: KernelContext, base: int) -> None:
        tensor = self.tensor
        ctx.upload(base + self.tiling, strided_tiling(tensor.shape, tensor.strides))
        n = tensor.numel
        expr = STRIDED_COPY.name("strided_scatter" if self.output else "strided_gather", tensor.itemsize)
        grid = wave_grid(ctx, STRIDED_COPY.file, expr, -(-n // COPY_BLOCK), COPY_BLOCK)
        ctx.launch(STRIDED_COPY.file, expr, (grid,), (COPY_BLOCK,),
                   (ptr(tensor_ptr(tensor)), ptr(base + self.offset), ptr(base + self.tiling), np.int64(n)))


@dataclass(frozen=True, eq=False)
class Converted:
    """A copy the operator's own kernel makes (`copy(ctx, src, dst)`): of an input before the
    kernels (src: the input, or its staged copy), of an output after them (dst: likewise)."""
    tensor: aclTensor
    offset: int
    copy: Copy
    output: bool


@dataclass(frozen=True, eq=False)
class Workspace:
    """The frozen layout of one plan's workspace (`WorkspaceBuilder.build`)."""
    size: int
    staged: tuple[Staged, ...] = ()
    converted: tuple[Converted, ...] = ()
    ranges: Mapping[str, int] = field(default_factory=dict)   # the plan's own bytes, by name

    def _staged_address(self, tensor: aclTensor, base: int) -> int:
        for entry in self.staged:
            if entry.tensor is tensor:
                return base + entry.offset
        return tensor_ptr(tensor)

    def address(self, tensor: aclTensor | None, base: int) -> int:
        """Where kernels find `tensor`: its converted or staged copy, else the tensor itself; 0 for an
        absent or empty one."""
        if tensor is None or tensor.numel == 0:
            return 0
        for entry in self.converted:
            if entry.tensor is tensor:
                return base + entry.offset
        return self._staged_address(tensor, base)

    def at(self, name: str, base: int) -> int:
        """The plan's own range `name`; 0 when there is no workspace."""
        return base + self.ranges[name] if base else 0

    def gather(self, ctx: KernelContext, base: int) -> None:
        """Before the kernels: staged copies of strided inputs, then the inputs' conversions."""
        for staged in self.staged:
            if not staged.output:
                staged.copy(ctx, base)
        for converted in self.converted:
            if not converted.output:
                converted.copy(ctx, self._staged_address(converted.tensor, base), base + converted.offset)

    def scatter(self, ctx: KernelContext, base: int) -> None:
        """After the kernels: the outputs' conversions, then strided outputs scattered back."""
        for converted in self.converted:
            if converted.output:
                converted.copy(ctx, base + converted.offset, self._staged_address(converted.tensor, base))
        for staged in self.staged:
            if staged.output:
                staged.copy(ctx, base)


NO_WORKSPACE = Workspace(0)


class WorkspaceBuilder:
    """Phase 1: hands out 256-byte aligned ranges in call order; `build()` freezes them."""

    def __init__(self) -> None:
        self.size = 0
        self._staged: list[Staged] = []
        self._converted: list[Converted] = []
        self._ranges: dict[str, int] = {}

    def _take(self, nbytes: int) -> int:
        offset = self.size
        self.size += _aligned_size(nbytes)
        return offset

    def stage(self, tensor: aclTensor | None, *, output: bool = False) -> None:
        """A contiguous copy of `tensor` when it is strided (nothing for a contiguous, empty or absent
        one, or one staged already)."""
        if tensor is None or tensor.numel == 0 or tensor.is_contiguous():
            return
        if any(entry.tensor is tensor for entry in self._staged):
            return
        if tensor.rank > MAX_RANK:
            fail(INVALID, f"strided tensors of rank {tensor.rank} > {MAX_RANK} are not supported")
        data = self._take(tensor.numel * tensor.itemsize)
        tiling = self._take(strided_tiling(tensor.shape, tensor.strides).nbytes)
        self._staged.append(Staged(tensor, data, tiling, output))

    def stage_all(self, inputs: Sequence[aclTensor | None], outputs: Sequence[aclTensor | None]) -> None:
        for tensor in inputs:
            self.stage(tensor)
        for tensor in outputs:
            self.stage(tensor, output=True)

    def convert(self, tensor: aclTensor, nbytes: int, copy: Copy, *, output: bool = False) -> None:
        """`nbytes` for a copy of `tensor` that `copy` makes (see `Converted`)."""
        self._converted.append(Converted(tensor, self._take(nbytes), copy, output))

    def reserve(self, name: str, nbytes: int) -> None:
        """The plan's own range `name` (`Workspace.at`)."""
        self._ranges[name] = self._take(nbytes)

    def build(self) -> Workspace:
        if not self.size:
            return NO_WORKSPACE
        return Workspace(self.size, tuple(self._staged), tuple(self._converted), dict(self._ranges))

