"""A CuPy-shaped layer over host memory and the CPU emulator: just the names `device/cuda.py`
uses (`cuda.Device`, `cuda.alloc`, `cuda.alloc_pinned_memory`, `cuda.Stream`, `cuda.Event`,
`cuda.get_elapsed_time`, `cuda.runtime.*`, `RawModule`), so that the emulated device is the cuda
device's own code.

Device memory is host memory; each stream is a `HostStream` worker; a kernel launch compiles the
`.cu` source for the CPU (cached by source hash) and queues its execution on the current stream.
Several GPUs are mirrored as CuPy has them: `cuda.Device(i)` is a context manager that makes `i`
the calling thread's current device (a per-thread stack, as CuPy's), streams belong to the device
current when they were made, `runtime.deviceSynchronize()` drains only the current device's
streams, and `runtime.getDeviceCount()` is `ACLNN_GPU_DEVICE_COUNT` (default 1). `SM_COUNTS` gives
a virtual device its own SM count (tests give devices different ones to see which one a plan reads).
Stream capture as CuPy has it: `Stream.begin_capture(mode)`, `end_capture()` -> `Graph`,
`Graph.launch(stream)`; what a capturing stream is given (launches, copies, memsets, event records
and waits) is recorded by its worker (`hoststream.CapturedWork`), and a launch replays the list as
one task on the target stream's worker.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from .base import virtual_device_count
from .cpu import aligned_buffer
from .hoststream import CapturedWork, HostEventMark, HostStream

SM_COUNT = 4  # small on purpose: grids sized from it keep emulated launches short
SM_COUNTS: dict[int, int] = {}  # device id -> SM count, where it differs from SM_COUNT


_local = threading.local()   # per thread: `stack` of current streams, `devices` stack of device ids


def _current_device() -> int:
    devices = getattr(_local, "devices", None)
    return devices[-1] if devices else 0


class Device:
    """Like cupy.cuda.Device: `with Device(i):` makes device i current for the calling thread."""

    __slots__ = ("id",)

    def __init__(self, device: int | None = None):
        self.id = _current_device() if device is None else int(device)

    def __enter__(self) -> "Device":
        devices = getattr(_local, "devices", None)
        if devices is None:
            devices = _local.devices = []
        devices.append(self.id)
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.devices.pop()

    def use(self) -> None:
        devices = getattr(_local, "devices", None)
        if devices:
            devices[-1] = self.id
        else:
            _local.devices = [self.id]

    def synchronize(self) -> None:
        with self:
            _Runtime.deviceSynchronize()

    @property
    def compute_capability(self) -> str:
        return "90"


class MemoryPointer:
    """Like cupy.cuda.MemoryPointer: owns a buffer, exposes `.ptr` and the `.device_id` it was made on."""

    __slots__ = ("ptr", "size", "buffer", "device_id", "__weakref__")

    def __init__(self, size: int):
        self.ptr, self.buffer = aligned_buffer(size)
        self.size = size
        self.device_id = _current_device()

    def __getitem__(self, index: slice) -> np.ndarray:
        """Bytes of the host buffer behind the "device" memory (Registry.host_bytes slices it)."""
        return self.buffer[index]


def alloc(size: int) -> MemoryPointer:
    return MemoryPointer(size)


_pinned_allocations: "weakref.WeakValueDictionary[int, MemoryPointer]" = weakref.WeakValueDictionary()
_registered: dict[int, int] = {}   # hostRegister'ed start -> end


def alloc_pinned_memory(size: int) -> MemoryPointer:
    """Whole pages, as cudaHostAlloc gives: no pageable byte shares a page with pinned memory."""
    memory = MemoryPointer(0)
    pages = -(-max(size, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
    raw = np.empty(pages + mmap.PAGESIZE, np.uint8)
    start = (-raw.ctypes.data) % mmap.PAGESIZE
    memory.buffer = raw[start:start + pages]
    memory.ptr, memory.size = memory.buffer.ctypes.data, pages
    _pinned_allocations[memory.ptr] = memory
    return memory


def _page_locked(ptr: int, end: int) -> bool:
    """Whether [ptr, end) overlaps pinned or registered host memory (as CUDA tracks it)."""
    spans = [(start, start + memory.size) for start, memory in list(_pinned_allocations.items())]
    return any(start < end and ptr < stop for start, stop in spans + list(_registered.items()))

_streams: "weakref.WeakValueDictionary[int, Stream]" = weakref.WeakValueDictionary()
_stream_ids = iter(range(1, 1 << 62))


class Stream:
    def __init__(self, non_blocking: bool = False, null: bool = False):
        self.device_id = _current_device()
        self.worker = HostStream(f"emulated-stream-dev{self.device_id}")
        self.ptr = next(_stream_ids)
        _streams[self.ptr] = self

    def __enter__(self) -> "Stream":
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.stack.pop()

    def synchronize(self) -> None:
        self.worker.synchronize()

    def wait_event(self, event: "Event") -> None:
        if event.mark is not None:
            self.worker.wait_mark(event.mark)

    def submit(self, fn: Any) -> None:
        self.worker.submit(fn)

    def begin_capture(self, mode: int | None = None) -> None:
        if self.worker.capture is not None:
            raise RuntimeError("cudaErrorIllegalState: the stream is already capturing")
        self.worker.begin_capture()

    def end_capture(self) -> "Graph":
        if self.worker.capture is None:
            raise RuntimeError("cudaErrorIllegalState: the stream is not capturing")
        return Graph(self.worker.end_capture())

    def is_capturing(self) -> bool:
        return self.worker.capture is not None

    def close(self) -> None:
        """Stop the worker thread (the queue is drained first)."""
        self.worker.close()

    def __del__(self) -> None:
        try:
            self.worker.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_null_streams: dict[int, Stream] = {}   # device id -> its legacy default stream
_null_lock = threading.Lock()


def get_current_stream() -> Stream:
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    device = _current_device()
    with _null_lock:
        stream = _null_streams.get(device)
        if stream is None:
            stream = _null_streams[device] = Stream()
        return stream


def _stream(ptr: int) -> Stream:
    return _streams[ptr] if ptr else get_current_stream()


class Graph:
    """Like cupy.cuda.Graph: the work a stream captured; `launch` replays it on a stream."""

    def __init__(self, work: CapturedWork):
        self.work = work

    def launch(self, stream: Stream | None = None) -> None:
        (stream or get_current_stream()).worker.replay(self.work)


class Event:
    """Like cupy.cuda.Event. As in CUDA, a plain record in a capturing stream is a graph-internal node:
    the event is unusable outside the capture (cudaErrorCapturedEvent) until recorded again outside;
    `runtime.eventRecordWithFlags(..., EXTERNAL)` records it at every replay instead."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.mark: HostEventMark | None = None
        self.captured = False   # its latest record was a plain record in a capture

    def record(self, stream: Stream | None = None) -> None:
        worker = (stream or get_current_stream()).worker
        self.captured = worker.capture is not None
        self.mark = worker.record()

    def _usable(self) -> None:
        if self.captured:
            raise RuntimeError("cudaErrorCapturedEvent: the event was last recorded in a capturing stream")

    def synchronize(self) -> None:
        self._usable()
        if self.mark is not None:
            self.mark.done.wait()

    @property
    def done(self) -> bool:
        self._usable()
        return self.mark is None or self.mark.done.is_set()


def get_elapsed_time(start: Event, end: Event) -> float:
    start._usable()
    end._usable()
    assert start.mark is not None and end.mark is not None
    return (end.mark.time - start.mark.time) * 1e3


def _all_streams() -> list[Stream]:
    return list(_streams.values())


class _Runtime:
    """cupy.cuda.runtime: the memcpy/memset/synchronise calls the cuda device makes."""

    streamCaptureModeGlobal, streamCaptureModeThreadLocal, streamCaptureModeRelaxed = 0, 1, 2

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:
        return {"multiProcessorCount": SM_COUNTS.get(device, SM_COUNT), "name": b"CUDA emulator (CPU)",
                "totalGlobalMem": 0, "major": 9, "minor": 0}

    @staticmethod
    def getDeviceCount() -> int:
        return virtual_device_count()

    @staticmethod
    def getDevice() -> int:
        return _current_device()

    @staticmethod
    def deviceCanAccessPeer(device: int, peer: int) -> int:
        return 1   # every virtual device's memory is the same host memory

    @staticmethod
    def deviceEnablePeerAccess(peer: int) -> None:
        pass

    @staticmethod
    def deviceDisablePeerAccess(peer: int) -> None:
        pass

    @staticmethod
    def deviceSynchronize() -> None:
        device = _current_device()
        streams = [stream for stream in _all_streams() if stream.device_id == device]
        if any(stream.worker.capture is not None for stream in streams):   # as CUDA refuses it
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: cudaDeviceSynchronize while a stream captures")
        for stream in streams:
            stream.worker.drain()

    @staticmethod
    def hostRegister(ptr: int, size: int, flags: int) -> None:
        # host memory is all the emulator has; what CUDA refuses is refused alike
        if _page_locked(ptr, ptr + size):
            raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered: part of the range is already page-locked")
        _registered[ptr] = ptr + size

    @staticmethod
    def hostUnregister(ptr: int) -> None:
        if _registered.pop(ptr, None) is None:
            raise RuntimeError("cudaErrorHostMemoryNotRegistered: no registration starts there")

    memoryTypeUnregistered, memoryTypeHost = 0, 1
    eventRecordDefault, eventRecordExternal = 0, 1

    @staticmethod
    def eventRecordWithFlags(event: Event, stream: int, flags: int) -> None:
        """cudaEventRecordWithFlags (fakecupy takes the Event object): EXTERNAL in a capture records the
        event at every replay (each replay points it at its own mark)."""
        worker = _stream(stream).worker
        external = bool(flags & 1) and worker.capture is not None
        event.captured = worker.capture is not None and not external
        event.mark = worker.record(event if external else None)

    @staticmethod
    def pointerGetAttributes(ptr: int) -> SimpleNamespace:
        return SimpleNamespace(type=1 if _page_locked(ptr, ptr + 1) else 0)

    @staticmethod
    def memcpy(dst: int, src: int, size: int, kind: int) -> None:
        ctypes.memmove(dst, src, size)

    @staticmethod
    def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        _stream(stream).submit(lambda: ctypes.memmove(dst, src, size))

    @staticmethod
    def memset(ptr: int, value: int, size: int) -> None:
        ctypes.memset(ptr, value, size)

    @staticmethod
    def memsetAsync(ptr: int, value: int, size: int, stream: int) -> None:
        _stream(stream).submit(lambda: ctypes.memset(ptr, value, size))


class RawKernel:
    """A kernel of a RawModule; calling it queues the emulated launch on the current stream."""

    def __init__(self, module: Any, expr: str):
        self.function = module.get_function(expr)
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Stream | None = None) -> None:
        function, packed = self.function, tuple(args)
        (stream or get_current_stream()).submit(lambda: function(tuple(grid), tuple(block), packed,
                                                                 shared_mem=shared_mem))


class RawModule:
    """Compiles the source for the CPU (cached by source hash) on first use."""

    def __init__(self, code: str, options: Sequence[str] = (), name_expressions: Sequence[str] = ()):
        from ..kernels.emulator import EmuModule
        self.module = EmuModule(code, options=tuple(o for o in options if o.startswith(("-D", "-U"))),
                                name_expressions=list(name_expressions))

    def get_function(self, expr: str) -> RawKernel:
        return RawKernel(self.module, expr)


cuda = SimpleNamespace(Device=Device, alloc=alloc, alloc_pinned_memory=alloc_pinned_memory, Stream=Stream, Event=Event,
                       Graph=Graph,
                       get_elapsed_time=get_elapsed_time, get_current_stream=get_current_stream,
                       runtime=_Runtime(), MemoryPointer=MemoryPointer)


def _forget_after_fork() -> None:
    """A fork() child: the parent's streams have no worker threads here; forget them (never drain)."""
    global _local, _null_lock
    _streams.clear()
    _null_streams.clear()
    _local, _null_lock = threading.local(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
