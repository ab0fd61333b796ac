"""A CuPy-shaped layer over host memory and the CPU emulator: just the names `device/cuda.py`
uses (`cuda.alloc`, `cuda.alloc_pinned_memory`, `cuda.Stream`, `cuda.Event`,
`cuda.get_elapsed_time`, `cuda.runtime.*`, `RawModule`), so that the emulated device is the cuda
device's own code.

Device memory is host memory; each stream is a `HostStream` worker; a kernel launch compiles the
`.cu` source for the CPU (cached by source hash) and queues its execution on the current stream.
"""
from __future__ import annotations

import ctypes
import threading
import weakref
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from .cpu import aligned_buffer
from .hoststream import HostEventMark, HostStream

SM_COUNT = 4  # small on purpose: grids sized from it keep emulated launches short


class MemoryPointer:
    """Like cupy.cuda.MemoryPointer: owns a buffer, exposes `.ptr`."""

    __slots__ = ("ptr", "size", "buffer")

    def __init__(self, size: int):
        self.ptr, self.buffer = aligned_buffer(size)
        self.size = size

    def __getitem__(self, index: slice) -> np.ndarray:
        """Bytes of the host buffer behind the "device" memory (Registry.host_bytes slices it)."""
        return self.buffer[index]


def alloc(size: int) -> MemoryPointer:
    return MemoryPointer(size)


alloc_pinned_memory = alloc

_local = threading.local()
_streams: "weakref.WeakValueDictionary[int, Stream]" = weakref.WeakValueDictionary()
_stream_ids = iter(range(1, 1 << 62))


class Stream:
    def __init__(self, non_blocking: bool = False, null: bool = False):
        self.worker = HostStream("emulated-stream")
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

    def close(self) -> None:
        """Stop the worker thread (the queue is drained first)."""
        self.worker.close()

    def __del__(self) -> None:
        try:
            self.worker.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_null_stream: Stream | None = None
_null_lock = threading.Lock()


def get_current_stream() -> Stream:
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    global _null_stream
    with _null_lock:
        if _null_stream is None:
            _null_stream = Stream()
        return _null_stream


def _stream(ptr: int) -> Stream:
    return _streams[ptr] if ptr else get_current_stream()


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.mark: HostEventMark | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.mark = (stream or get_current_stream()).worker.record()

    def synchronize(self) -> None:
        if self.mark is not None:
            self.mark.done.wait()

    @property
    def done(self) -> bool:
        return self.mark is None or self.mark.done.is_set()


def get_elapsed_time(start: Event, end: Event) -> float:
    assert start.mark is not None and end.mark is not None
    return (end.mark.time - start.mark.time) * 1e3


def _all_streams() -> list[Stream]:
    return list(_streams.values())


class _Runtime:
    """cupy.cuda.runtime: the memcpy/memset/synchronise calls the cuda device makes."""

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:
        return {"multiProcessorCount": SM_COUNT, "name": b"CUDA emulator (CPU)", "totalGlobalMem": 0}

    @staticmethod
    def deviceSynchronize() -> None:
        for stream in _all_streams():
            stream.worker.drain()

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


cuda = SimpleNamespace(alloc=alloc, alloc_pinned_memory=alloc_pinned_memory, Stream=Stream, Event=Event,
                       get_elapsed_time=get_elapsed_time, get_current_stream=get_current_stream,
                       runtime=_Runtime(), MemoryPointer=MemoryPointer)
