"""Phase 1's frozen launch list: what a plan's kernels do, recorded once, replayed by every execute.

`freeze(plan, sm_count, arch)` runs the plan's launcher (`plan.launch_kernels`) once against `Recorder`,
a KernelContext that keeps every upload, kernel launch and GEMM instead of running it, with the
workspace at a sentinel base address. The result, a `FrozenLaunch` (a frozen dataclass), holds the
bytes of every upload, the kernel name, geometry and argument tuple of every launch, and the
positions of the arguments that point into the workspace (and of the words of an uploaded uint64
table that do: a GEMM's pointer array; int64 tiling tables are never patched). Phase 2
(`run_plan`) only rebases those few values on the real workspace and enqueues the steps on
the stream: no shape arithmetic, no dtype tables, no tiling built again. The cuda device resolves the
steps further, once per workspace, stream and cuBLAS handle, into a replay program kept on the frozen
launch (the last one used in `FrozenLaunch.program`, up to PROGRAMS_KEPT in `FrozenLaunch.programs`:
device/cuda_context.CudaKernelContext.run_frozen), so threads or streams taking turns on one cached launch
each find theirs; a device's reset drops its programs from the cached launches (`drop_programs`).

The recorder also checks that every workspace range a step touches lies inside the size
GetWorkspaceSize reported, so the workspace size and the launches cannot disagree, and that every
kernel launched is one the plan type declares (`Plan.kernel_files`) and the manifest lists.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import manifest
from ..kernels.gemm import native_arguments
from ..kernels.occupancy import DEFAULT_ARCH

# The workspace base while recording: far above any user-space or CUDA virtual address (47-49 bits)
# yet below 2**63, so it survives int64 tiling words; real pointers never fall in its range.
SENTINEL = 0x7EAD_0000_0000_0000
SENTINEL_SPAN = 1 << 48
ALIGN = 16  # the launchers choose vector paths on 16-byte alignment: a base this aligned keeps their choices


_POINTER_TYPES = frozenset({int, np.uint64, np.int64})


def _in_workspace(value: Any) -> bool:
    """Whether a launch argument or uploaded word is a workspace pointer: pointers are np.uint64
    (kernels, uploaded tables) or int (GEMMs); the exact-type test first keeps this cheap and leaves
    bools and narrower integers out. The one rule for arguments and uploads."""
    return type(value) in _POINTER_TYPES and SENTINEL <= value < SENTINEL + SENTINEL_SPAN


@dataclass(frozen=True)
class Upload:
    offset: int            # into the workspace
    data: np.ndarray       # read-only, C-contiguous; the words at `patches` hold workspace offsets
    patches: tuple[int, ...] = ()   # flat indices of 8-byte words that point into the workspace

    def __post_init__(self) -> None:
        if self.patches:   # 1 at the patched words: rebasing is one multiply-add (no indexing per execute)
            mask = np.zeros(self.data.shape, self.data.dtype)
            mask.reshape(-1)[list(self.patches)] = 1
            object.__setattr__(self, "_mask", mask)
            object.__setattr__(self, "_last", (None, self.data, 0))
        else:   # the bytes never change: their address is read once (an ndarray's .ctypes costs ~1 us)
            object.__setattr__(self, "_last", (None, self.data, self.data.ctypes.data))

    def rebased(self, workspace: int) -> np.ndarray:
        """The table with its workspace words pointing into the workspace at `workspace`."""
        return self.rebased_at(workspace)[0]

    def rebased_at(self, workspace: int) -> tuple[np.ndarray, int]:
        """`rebased(workspace)` and the address of its bytes. The last workspace's table is kept (a
        training loop passes the same workspace every step), read-only, so it is never rebuilt for it."""
        last = self._last
        if not self.patches or last[0] == workspace:
            return last[1], last[2]
        data = self._mask * self.data.dtype.type(workspace)
        data += self.data
        data.setflags(write=False)
        address = data.ctypes.data
        object.__setattr__(self, "_last", (workspace, data, address))   # one tuple: threads see a whole one
        return data, address


def _rebased_args(step: Launch | Gemm, workspace: int, pointer: Any) -> tuple[Any, ...]:
    """A step's arguments with its workspace pointers (`pointer(address)`) at `workspace`. The last
    workspace's tuple is kept (a training loop passes the same workspace every step)."""
    last = step._last
    if last[0] == workspace:
        return last[1]
    patched = list(step.args)
    for i, offset in step.patches:
        patched[i] = pointer(workspace + offset)
    args = tuple(patched)
    object.__setattr__(step, "_last", (workspace, args))   # one tuple: threads see a whole one
    return args


@dataclass(frozen=True)
class Launch:
    file: str
    expr: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Any, ...]                    # workspace pointers hold their offsets (see `patches`)
    patches: tuple[tuple[int, int], ...]     # (argument index, workspace offset)
    shared_mem: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "_last", (None if self.patches else 0, self.args))
        object.__setattr__(self, "kernel_key", (self.file, self.expr))   # a device's kernel table key

    def rebased(self, workspace: int) -> tuple[Any, ...]:
        """The arguments with the workspace at `workspace` (pointers as np.uint64, as recorded)."""
        return self.args if not self.patches else _rebased_args(self, workspace, np.uint64)


@dataclass(frozen=True)
class Gemm:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]                   # never mutated (no workspace pointers: see Recorder)
    patches: tuple[tuple[int, int], ...]
    batched: bool = False                    # gemm_batched (pointer arrays), else gemm_strided_batched

    def __post_init__(self) -> None:
        object.__setattr__(self, "_last", (None if self.patches else 0, self.args))
        object.__setattr__(self, "_native", (_UNSET, None))

    def rebased(self, workspace: int) -> tuple[Any, ...]:
        """The arguments with the workspace at `workspace` (pointers as int, as recorded)."""
        return self.args if not self.patches else _rebased_args(self, workspace, int)

    def native(self, workspace: int, ints: bool = False) -> tuple[Any, ...] | None:
        """The C arguments of the cuBLAS call after its handle (kernels/gemm.native_arguments, in its int form
        with `ints`; None: an empty product) with the workspace at `workspace`: converted once, kept for the
        last workspace (and for good when no argument points into the workspace)."""
        key = (workspace if self.patches else 0, ints)
        last = self._native
        if last[0] == key:
            return last[1]
        arguments = native_arguments(self.batched, self.rebased(workspace), self.kwargs, ints)
        object.__setattr__(self, "_native", (key, arguments))   # one tuple: threads see a whole one
        return arguments


_UNSET = object()   # no workspace converted yet


PROGRAMS_KEPT = 4   # replay programs kept per frozen launch (least recently used dropped first)


@dataclass(frozen=True)
class FrozenLaunch:
    steps: tuple[Upload | Launch | Gemm, ...]
    sm_count: int          # the device's, which the recorded grids were sized for
    rebased: bool          # recorded against the sentinel workspace (False: workspace 0, nothing to patch)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gemms", sum(type(step) is Gemm for step in self.steps))
        # a device's replay program for its last (workspace, stream, cuBLAS handle): the cuda device's
        # `run_frozen` keeps here the steps resolved to calls (kernels, C arguments with the handle in
        # front), so an execute with the same workspace on the same stream and thread only makes them
        object.__setattr__(self, "program", (None, ()))
        # up to PROGRAMS_KEPT of them, key -> (key, program), least recently used first; replaced whole
        # (copy on write), never changed in place, so a reader without the lock sees a whole dict
        object.__setattr__(self, "programs", {})

    def find_program(self, key: tuple) -> tuple | None:
        """The kept replay program for `key` (workspace, context, handle) made the current one (and the
        most recently used), or None."""
        entry = self.programs.get(key)
        if entry is None:
            return None
        self.keep_program(key, entry[1])
        return entry[1]

    def keep_program(self, key: tuple, program: tuple) -> None:
        """Make `program` the current replay program for `key`, kept among the PROGRAMS_KEPT most recently
        used (the least recently used dropped)."""
        with _programs_lock:
            programs = {k: v for k, v in self.programs.items() if k != key}
            while len(programs) >= PROGRAMS_KEPT:
                del programs[next(iter(programs))]
            programs[key] = (key, program)
            object.__setattr__(self, "programs", programs)
            object.__setattr__(self, "program", (key, program))   # one tuple: threads see a whole one

    def run_steps(self, ctx: Any, workspace: int) -> None:
        """The recorded steps at `workspace` through the context's `launch`, `upload` (or `upload_at`) and
        GEMM methods, step by step (a context with its own replay program, the cuda device's, is handed
        the launch instead: `run_plan`)."""
        upload_at = getattr(ctx, "upload_at", None)   # a context that takes a host address
        for step in self.steps:
            kind = type(step)
            if kind is Launch:
                launch: Launch = step   # type: ignore[assignment]
                ctx.launch(launch.file, launch.expr, launch.grid, launch.block,
                           launch.rebased(workspace) if launch.patches else launch.args, launch.shared_mem)
            elif kind is Upload:
                data, address = step.rebased_at(workspace)
                if upload_at is None:
                    ctx.upload(workspace + step.offset, data)
                else:
                    upload_at(workspace + step.offset, data, address)
            else:
                gemm: Gemm = step   # type: ignore[assignment]
                (ctx.gemm_batched if gemm.batched else ctx.gemm_strided_batched)(*gemm.rebased(workspace),
                                                                                 **gemm.kwargs)


def run_plan(plan: Any, ctx: Any, workspace: int) -> None:
    """Phase 2 of `plan` on a kernel context, the one fast path (`Plan.run_kernels`, and the cuda device's
    `enqueue` directly: the host hot path): its frozen launch replayed at `workspace` (the context's own replay
    program, else `FrozenLaunch.run_steps`); with no record, or a workspace base less aligned than the
    recording's (ALIGN: the launcher's vector-path choices would differ), the launcher runs again."""
    frozen = plan.frozen
    if frozen is None or workspace % ALIGN:
        plan.launch_kernels(ctx, workspace)
        return
    try:   # a method call, no getattr() and no frame of `run`: the host hot path pays nothing more
        ctx.run_frozen(frozen, workspace)
    except AttributeError:
        if hasattr(ctx, "run_frozen"):   # raised inside the context's replay: not a missing method
            raise
        frozen.run_steps(ctx, workspace)   # a context without its own replay program


class Recorder:
    """A KernelContext that records instead of running (see the module docstring)."""

    def __init__(self, sm_count: int, workspace_size: int, known: dict[str, frozenset[str]] | None = None,
                 arch: str = DEFAULT_ARCH):
        self.sm_count = sm_count
        self.arch = arch      # the device's, for grids sized from occupancy (kernels/occupancy.py)
        self.size = workspace_size
        self.known = known    # file -> the instantiations the plan may launch (None: not checked)
        self.steps: list[Upload | Launch | Gemm] = []

    def _offset(self, address: int, nbytes: int = 0) -> int:
        offset = int(address) - SENTINEL
        if offset < 0 or offset + nbytes > self.size:
            raise AssertionError(f"a kernel step uses workspace bytes [{offset}, {offset + nbytes}) outside "
                                 f"the {self.size} bytes GetWorkspaceSize reported")
        return offset

    def _patches(self, values: Sequence[Any]) -> tuple[tuple[int, int], ...]:
        return tuple((i, self._offset(v)) for i, v in enumerate(values) if _in_workspace(v))

    def upload(self, dst: int, host: np.ndarray) -> None:
        data = np.array(host, copy=True, order="C")
        patches: tuple[int, ...] = ()
        # only uint64 tables hold pointers (a GEMM's pointer arrays); the int64 tiling tables carry
        # user-derived sizes, lengths and strides, which are never read as workspace addresses
        if data.dtype == np.uint64:
            flat = data.reshape(-1)
            inside = np.flatnonzero((flat >= flat.dtype.type(SENTINEL)) &
                                    (flat < flat.dtype.type(SENTINEL + SENTINEL_SPAN)))
            for i in inside:
                self._offset(int(flat[i]))           # a pointer past the workspace is an error
            flat[inside] -= flat.dtype.type(SENTINEL)
            patches = tuple(int(i) for i in inside)
        data.setflags(write=False)
        self.steps.append(Upload(self._offset(dst, data.nbytes), data, patches))

    def launch(self, file: str, expr: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               shared_mem: int = 0) -> None:
        if self.known is not None and expr not in self.known.get(file, ()):
            raise AssertionError(f"a launch of {file}: {expr}, which the plan type's kernel files "
                                 f"{sorted(self.known)} (kernels/manifest.py) do not list")
        self.steps.append(Launch(file, expr, tuple(int(g) for g in grid), tuple(int(b) for b in block),
                                 tuple(args), self._patches(args), int(shared_mem)))

    def gemm_strided_batched(self, *args: Any, **kwargs: Any) -> None:
        self._gemm(args, kwargs, batched=False)

    def gemm_batched(self, *args: Any, **kwargs: Any) -> None:
        self._gemm(args, kwargs, batched=True)

    def _gemm(self, args: tuple, kwargs: dict, batched: bool) -> None:
        if any(_in_workspace(v) for v in kwargs.values()):
            raise AssertionError("GEMM workspace pointers must be positional to be rebased")
        self.steps.append(Gemm(tuple(args), dict(kwargs), self._patches(args), batched))


_programs_lock = threading.Lock()   # the frozen launches' program dicts (FrozenLaunch.keep_program)
CACHE_SIZE = 256   # frozen launches kept by freeze_cached (oldest dropped first)
_cache: dict[tuple, FrozenLaunch] = {}
_cache_lock = threading.Lock()


def freeze_cached(plan: Any, sm_count: int, arch: str = DEFAULT_ARCH) -> FrozenLaunch:
    """`freeze`, reusing the record of an earlier plan with the same `plan.launch_key()` on a device of
    the same SM count and architecture: the launcher is a function of exactly those values, so a
    training loop that calls GetWorkspaceSize again with the same tensors pays the recording once
    (CANN's aclnn cache does the same for its executors)."""
    key = (plan.launch_key(), sm_count, arch)
    frozen = _cache.get(key)
    if frozen is None:
        frozen = freeze(plan, sm_count, arch)
        with _cache_lock:
            if len(_cache) >= CACHE_SIZE:
                del _cache[next(iter(_cache))]
            _cache[key] = frozen
    return frozen


def drop_programs(device: Any) -> None:
    """Forget the replay programs a device made on the cached frozen launches (its reset: they hold its
    kernels and cuBLAS handles, which would otherwise live as long as the cache)."""
    with _cache_lock:
        frozen_launches = list(_cache.values())
    with _programs_lock:
        for frozen in frozen_launches:
            key = frozen.program[0]
            if key is not None and getattr(key[1](), "device", None) is device:
                object.__setattr__(frozen, "program", (None, ()))
            kept = {k: v for k, v in frozen.programs.items() if getattr(k[1](), "device", None) is not device}
            if len(kept) != len(frozen.programs):
                object.__setattr__(frozen, "programs", kept)


def freeze(plan: Any, sm_count: int, arch: str = DEFAULT_ARCH) -> FrozenLaunch:
    """Record `plan.launch_kernels` once for a device with `sm_count` multiprocessors of `arch`."""
    size = plan.workspace_size
    files = getattr(plan, "kernel_files", ())
    known = None
    if files:
        known = {file: manifest.KNOWN[file] for file in files}
    recorder = Recorder(sm_count, size, known, arch)
    plan.launch_kernels(recorder, SENTINEL if size else 0)
    return FrozenLaunch(tuple(recorder.steps), sm_count, rebased=bool(size))
