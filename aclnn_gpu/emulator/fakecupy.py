"""A CuPy-shaped layer over host memory and the CPU emulator: just the names `device/cuda.py`
uses (`cuda.Device`, `cuda.alloc`, `cuda.alloc_pinned_memory`, `cuda.Stream`, `cuda.Event`,
`cuda.get_elapsed_time`, `cuda.runtime.*`, `RawModule` from source or from a shipped cubin), so that
the emulated device is the cuda device's own code.

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

As strict as CUDA and CuPy where the cuda device's code could go wrong on a GPU (a suite green over
this layer must not fail on the driver's rules there). Refusals raise `CUDARuntimeError` (CuPy's
shape: a RuntimeError whose `status` is the cudaError_t and whose message starts with its name) and,
where CUDA invalidates the capture, invalidate it (its `end_capture` then raises
cudaErrorStreamCaptureInvalidated). CUDA Programming Guide, "Prohibited and Unhandled Operations" of
stream capture, and "Stream and Event Behavior" of multi-device programming:
- cudaDeviceSynchronize while a stream of the device captures, and a synchronize of a capturing stream:
  cudaErrorStreamCaptureUnsupported, the capture invalidated;
- the legacy stream (ptr 0: the synchronous memcpy / memset, async work given stream 0) while a
  blocking stream of the device captures: cudaErrorStreamCaptureImplicit, the capture invalidated;
- `begin_capture` on the legacy stream: CuPy's RuntimeError (cupy/cuda/stream.pyx, begin_capture);
- `with stream:` / `stream.use()` under another current device: CuPy's RuntimeError
  (check_stream_device_match in cupy/cuda/stream.pyx); a kernel launched on a stream of another
  device: CUDA_ERROR_INVALID_HANDLE; an event recorded on a stream of another device:
  cudaErrorInvalidResourceHandle; a launch with more than 48 KiB of dynamic shared memory without
  `max_dynamic_shared_size_bytes`: CUDA_ERROR_INVALID_VALUE;
- cudaHostRegister without cudaHostRegisterPortable page-locks the range for the registering
  device's context only (cudaHostRegister's documentation), which `pointerGetAttributes` reflects;
- capture modes (cudaThreadExchangeStreamCaptureMode): a potentially unsafe call from a thread whose
  mode forbids it during a global or thread-local capture fails with cudaErrorStreamCaptureUnsupported
  and invalidates that capture (`_unsafe`).
With ACLNN_GPU_EMU_LATE=1 (the late stand-in, at the end of this module, and emulator/fakepool.py) it is
also as late as a GPU may be: streams start late, pinned sources are read when the copy runs, freed
memory comes back poisoned in CuPy's pool order, and the legacy stream orders with blocking streams.
CuPy's runtime has no cudaEventRecordWithFlags: `cuda_bindings_runtime` stands in for
`cuda.bindings.runtime` instead, with its signature (handles as ints, a `(cudaError_t,)` tuple back).
"""
from __future__ import annotations

import ctypes
import enum
import mmap
import os
import random
import sys
import threading
import time
import weakref
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from ..host.memory import aligned_buffer, host_memory_info, virtual_device_count
from . import fakepool
from ..host.stream import CapturedWork, HostEventMark, HostStream

SM_COUNT = 4  # small on purpose: grids sized from it keep emulated launches short
SM_COUNTS: dict[int, int] = {}  # device id -> SM count, where it differs from SM_COUNT
COMPUTE_CAPABILITY = (9, 0)   # every device's (major, minor), where COMPUTE_CAPABILITIES does not say
COMPUTE_CAPABILITIES: dict[int, tuple[int, int]] = {}   # device id -> its own (tests of the cubin choice)
DRIVER_VERSION = 13000   # cudaDriverGetVersion: the CUDA major whose shipped cubins the device loads
# What each RawModule was made from, in order: ("nvrtc", source) for code compiled (NVRTC on a GPU),
# ("load", path) for a shipped cubin or PTX loaded (tests read which path the cuda device took)
module_loads: list[tuple[str, str]] = []
DEVICE_ALIGN = 512   # CuPy's memory pool hands out multiples of its 512-byte allocation unit (cupy/cuda/memory.pyx)
STATIC_SHARED_LIMIT = 48 * 1024   # dynamic shared memory a launch may use without the function attribute


class cudaError_t(enum.IntEnum):
    """The cudaError_t values this layer raises (driver_types.h), with CUDA's descriptions below."""

    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorInvalidResourceHandle = 400
    cudaErrorIllegalState = 401
    cudaErrorHostMemoryAlreadyRegistered = 712
    cudaErrorHostMemoryNotRegistered = 713
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901
    cudaErrorStreamCaptureImplicit = 906
    cudaErrorCapturedEvent = 907


_DESCRIPTIONS = {
    cudaError_t.cudaErrorInvalidValue: "invalid argument",
    cudaError_t.cudaErrorInvalidResourceHandle: "invalid resource handle",
    cudaError_t.cudaErrorIllegalState: "the operation cannot be performed in the present state",
    cudaError_t.cudaErrorHostMemoryAlreadyRegistered: "part or all of the requested memory range is already mapped",
    cudaError_t.cudaErrorHostMemoryNotRegistered: "pointer does not correspond to a registered memory region",
    cudaError_t.cudaErrorStreamCaptureUnsupported: "operation not permitted when stream is capturing",
    cudaError_t.cudaErrorStreamCaptureInvalidated: "operation failed due to a previous error during capture",
    cudaError_t.cudaErrorStreamCaptureImplicit: "operation would make the legacy stream depend on a capturing "
                                                "blocking stream",
    cudaError_t.cudaErrorCapturedEvent: "operation not permitted on an event last recorded in a capturing stream",
}


class CUDARuntimeError(RuntimeError):
    """CuPy's cupy_backends.cuda.api.runtime.CUDARuntimeError: `status`, and "name: description"."""

    def __init__(self, status: int, detail: str = ""):
        self.status = int(status)
        code = cudaError_t(status)
        super().__init__(f"{code.name}: {_DESCRIPTIONS[code]}" + (f" ({detail})" if detail else ""))


class CUDADriverError(RuntimeError):
    """CuPy's cupy_backends.cuda.api.driver.CUDADriverError (what a RawKernel launch raises)."""

    def __init__(self, status: int, name: str, description: str):
        self.status = int(status)
        super().__init__(f"{name}: {description}")


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
        self.ptr, self.buffer = aligned_buffer(size, DEVICE_ALIGN)
        self.size = size
        self.device_id = _current_device()

    def __getitem__(self, index: slice) -> np.ndarray:
        """Bytes of the host buffer behind the "device" memory (Registry.host_bytes slices it)."""
        return self.buffer[index]


def alloc(size: int) -> MemoryPointer:
    """cupy.cuda.alloc: from CuPy's memory pool in the late stand-in (emulator/fakepool.py), else a fresh buffer."""
    if _late is None or not size:
        return MemoryPointer(size)
    device = _current_device()
    pool = _pools.get(device)
    if pool is None:
        pool = _pools.setdefault(device, fakepool.Pool(DEVICE_ALIGN, lambda stream_ptr, ptr, size:
                                                       _poison(device, stream_ptr, ptr, size),
                                                       lambda: _unsafe("cudaMalloc")))

    def empty() -> MemoryPointer:
        pointer = MemoryPointer.__new__(MemoryPointer)
        pointer.device_id = device
        return pointer
    # CuPy's arena is the current stream's (cupy/cuda/memory.pyx, SingleDeviceMemoryPool._malloc)
    stack = getattr(_local, "stack", None)
    return fakepool.pooled_pointer(pool, empty, size, stack[-1].ptr if stack else 0)


_pools: dict[int, fakepool.Pool] = {}   # device id -> its memory pool (late stand-in)


def _poison(device: int, stream_ptr: int, ptr: int, size: int) -> bool:
    """Poison a freed pool chunk in its arena stream's order; False when that stream is gone."""
    stream = _null_streams.get(device) if stream_ptr == 0 else _streams.get(stream_ptr)
    if stream is None and stream_ptr == 0:   # a legacy stream never used holds no work
        ctypes.memset(ptr, fakepool.POISON, size)
        return True
    if stream is None or stream.worker.closed:
        return False
    if stream.worker.capture is not None:   # not into the graph: left as it is
        return True
    def poison() -> None:
        ctypes.memset(ptr, fakepool.POISON, size)
    if stream.worker.finished_all():   # the last user's work has run: the bytes are garbage from now
        poison()
        return True
    try:
        stream.worker.submit(poison)
    except Exception:  # noqa: BLE001 - destroyed meanwhile: its arena goes with it
        return False
    return True


_pinned_allocations: "weakref.WeakValueDictionary[int, MemoryPointer]" = weakref.WeakValueDictionary()
# hostRegister'ed start -> (end, the device whose context alone sees the pages locked, None: portable)
_registered: dict[int, tuple[int, int | None]] = {}
HOST_REGISTER_PORTABLE = 1   # cudaHostRegisterPortable


def alloc_pinned_memory(size: int) -> MemoryPointer:
    """Whole pages, as cudaHostAlloc gives: no pageable byte shares a page with pinned memory (portable,
    as CuPy's pinned memory pool allocates it: cupy/cuda/pinned_memory.pyx, hostAllocPortable)."""
    _unsafe("cudaHostAlloc")
    memory = MemoryPointer(0)
    pages = -(-max(size, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
    raw = np.empty(pages + mmap.PAGESIZE, np.uint8)
    start = (-raw.ctypes.data) % mmap.PAGESIZE
    memory.buffer = raw[start:start + pages]
    memory.ptr, memory.size = memory.buffer.ctypes.data, pages
    _pinned_allocations[memory.ptr] = memory
    return memory


def _page_locked(ptr: int, end: int, device: int | None = None) -> bool:
    """Whether [ptr, end) overlaps pinned or registered host memory (as CUDA tracks it); with `device`,
    only registrations that device's context sees (portable ones, or its own)."""
    spans = [(start, start + memory.size) for start, memory in list(_pinned_allocations.items())]
    spans += [(start, stop) for start, (stop, owner) in list(_registered.items())
              if device is None or owner is None or owner == device]
    return any(start < end and ptr < stop for start, stop in spans)


_streams: "weakref.WeakValueDictionary[int, Stream]" = weakref.WeakValueDictionary()
# device id -> the workers of its streams until each has ended: a stream collected without close()
# (cudaStreamDestroy returns before the stream's work is done) still runs its queue, and
# cudaDeviceSynchronize waits for it, as CUDA's device-wide synchronize waits for every stream.
_workers: dict[int, set[HostStream]] = {}
_workers_lock = threading.Lock()
_stream_ids = iter(range(1, 1 << 62))


def _capturing(streams: list["Stream"]) -> list["Stream"]:
    return [stream for stream in streams if stream.worker.capture is not None]


def _invalidate(streams: list["Stream"], why: str) -> None:
    """CUDA's rule for an illegal call during capture: the capture is invalidated (it can only fail)."""
    for stream in streams:
        work = stream.worker.capture
        if work is not None and work.invalidated is None:
            work.invalidated = why


def _use_legacy(what: str) -> None:
    """`what` uses the current device's legacy stream: refused while a blocking stream of the device
    captures (cudaErrorStreamCaptureImplicit), which invalidates that capture."""
    device = _current_device()
    blocking = _capturing([s for s in _all_streams() if s.device_id == device and not s.non_blocking])
    if blocking:
        _invalidate(blocking, f"{what} used the legacy stream")
        raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureImplicit, what)


class Stream:
    """Like cupy.cuda.Stream (a new stream of the current device; blocking unless `non_blocking`). The
    legacy stream of each device is `get_current_stream()` outside a `with stream:` block; its `ptr`
    is 0, as CuPy's `Stream.null`."""

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                 priority: int | None = None):
        if null or ptds:
            raise NotImplementedError("fakecupy: the legacy stream is get_current_stream() outside `with stream:`")
        self._start(_current_device(), next(_stream_ids), non_blocking)
        _streams[self.ptr] = self

    capture_mode = 2          # of the capture in progress: cudaStreamCaptureMode (relaxed: CuPy's default)
    capture_thread = 0        # the thread that began it

    def _start(self, device: int, ptr: int, non_blocking: bool) -> None:
        self.device_id = device
        self.non_blocking = non_blocking
        self.worker = HostStream(f"emulated-stream-dev{device}")
        if _late is not None:
            self.worker.delay = _late.delay
        self.ptr = ptr
        with _workers_lock:
            kept = {worker for worker in _workers.get(device, ()) if not worker.ended()}
            kept.add(self.worker)
            _workers[device] = kept

    @classmethod
    def _legacy(cls, device: int) -> "Stream":
        stream = cls.__new__(cls)
        stream._start(device, 0, False)
        return stream

    def _check_device(self) -> None:
        """CuPy's check_stream_device_match (cupy/cuda/stream.pyx): a stream is made current only
        under the device it was created on."""
        if self.device_id != _current_device():
            raise RuntimeError(f"The device that the stream is created on ({self.device_id}) does not match "
                               f"with the current device ({_current_device()})")

    def __enter__(self) -> "Stream":
        self._check_device()
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.stack.pop()

    def use(self) -> "Stream":
        self._check_device()
        stack = getattr(_local, "stack", None)
        if stack:
            stack[-1] = self
        else:
            _local.stack = [self]
        return self

    def _submit_check(self, what: str) -> None:
        if self.ptr == 0:
            _use_legacy(what)
        if _late is not None:
            self._late_order()

    def _late_order(self) -> None:
        """The late stand-in's legacy-stream rule (CUDA Runtime API, "Stream synchronization behavior",
        default stream): work given to the legacy stream waits for all the work queued before it on
        the blocking streams of its device, and work given to a blocking stream waits for the legacy
        stream's work queued before it. Non-blocking streams order with neither. (Without it fakecupy's
        legacy stream would be one more independent queue; the runtime's synchronous paths drain the
        device first, so nothing else noticed.)"""
        worker = self.worker
        if worker.capture is not None:
            return   # a capture records no implicit dependency (legacy use then is refused: _use_legacy)
        if self.ptr == 0:
            for stream in _all_streams():
                other = stream.worker
                if (stream.ptr and not stream.non_blocking and stream.device_id == self.device_id
                        and other.capture is None and not other.finished_all()):
                    worker.wait_mark(other.record())
        elif not self.non_blocking:
            legacy = _null_streams.get(self.device_id)
            if legacy is not None and legacy.worker.capture is None and not legacy.worker.finished_all():
                worker.wait_mark(legacy.worker.record())

    def synchronize(self) -> None:
        if self.worker.capture is not None:   # cudaStreamSynchronize of a capturing stream
            _invalidate([self], "cudaStreamSynchronize of the capturing stream")
            raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize")
        if self.ptr == 0:
            _use_legacy("cudaStreamSynchronize(0)")
            if _late is not None:   # the legacy stream's wait covers the blocking streams' work before it
                self._late_order()
        _unsafe("cudaStreamSynchronize")
        self.worker.synchronize()

    def wait_event(self, event: "Event") -> None:
        self._submit_check("cudaStreamWaitEvent")
        if event.mark is not None:
            self.worker.wait_mark(event.mark)

    def submit(self, fn: Any) -> None:
        self._submit_check("work queued")
        self.worker.submit(fn)

    def launch_host_func(self, callback: Any, arg: Any) -> None:
        """cupy.cuda.Stream.launch_host_func (cudaLaunchHostFunc): `callback(arg)` in the stream's order,
        serialized with every other stream's host functions. CUDA Runtime API, cudaLaunchHostFunc: "Host
        functions without a mandated order (such as in independent streams) execute in undefined order
        and may be serialized"; the stand-in always serializes them (one at a time, process-wide), so a
        host function that blocks holds up the host functions of every other stream, as it may on a GPU."""
        def run() -> None:
            with _host_functions:
                callback(arg)
        self.submit(run)

    def begin_capture(self, mode: int | None = None) -> None:
        """`mode` None is relaxed, CuPy's default (cupy/cuda/stream.pyx, begin_capture: its pool may
        cudaMalloc while capturing)."""
        if self.ptr == 0:   # CuPy refuses it before CUDA would (cupy/cuda/stream.pyx, begin_capture)
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if self.worker.capture is not None:
            raise CUDARuntimeError(cudaError_t.cudaErrorIllegalState, "the stream is already capturing")
        self.capture_mode = _Runtime.streamCaptureModeRelaxed if mode is None else int(mode)
        self.capture_thread = threading.get_ident()
        self.worker.begin_capture()
        if self.capture_mode != _Runtime.streamCaptureModeRelaxed:
            global _strict_captures
            _strict_captures += 1

    def end_capture(self) -> "Graph":
        work = self.worker.capture
        if work is None:
            raise CUDARuntimeError(cudaError_t.cudaErrorIllegalState, "the stream is not capturing")
        self.worker.end_capture()
        if self.capture_mode != _Runtime.streamCaptureModeRelaxed:
            global _strict_captures
            _strict_captures -= 1
        self.capture_mode = _Runtime.streamCaptureModeRelaxed
        if work.invalidated is not None:   # cudaStreamEndCapture of an invalidated capture: no graph
            raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureInvalidated, work.invalidated)
        return Graph(work)

    def is_capturing(self) -> bool:
        """cupy.cuda.Stream.is_capturing (cudaStreamIsCapturing): raises once the capture was invalidated."""
        work = self.worker.capture
        if work is not None and work.invalidated is not None:
            raise RuntimeError("the stream was capturing, but an error has invalidated the capture sequence")
        return work is not None

    def close(self) -> None:
        """Stop the worker thread (the queue is drained first)."""
        self.worker.close()

    def __del__(self) -> None:
        try:   # cudaStreamDestroy: the queued work still runs (device_workers keeps the worker)
            self.worker.retire()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_host_functions = threading.Lock()   # held while a host function runs (Stream.launch_host_func)
_null_streams: dict[int, Stream] = {}   # device id -> its legacy default stream
_null_lock = threading.Lock()


def _legacy_stream(device: int) -> Stream:
    with _null_lock:
        stream = _null_streams.get(device)
        if stream is None:
            stream = _null_streams[device] = Stream._legacy(device)
        return stream


def get_current_stream() -> Stream:
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return _legacy_stream(_current_device())


def _stream(ptr: int) -> Stream:
    """The stream of a handle (0: the current device's legacy stream, as CUDA reads a null cudaStream_t)."""
    if not ptr:
        return _legacy_stream(_current_device())
    stream = _streams.get(ptr)
    if stream is None:
        raise CUDARuntimeError(cudaError_t.cudaErrorInvalidResourceHandle, f"no stream {ptr:#x}")
    return stream


class Graph:
    """Like cupy.cuda.Graph: the work a stream captured; `launch` replays it on a stream."""

    def __init__(self, work: CapturedWork):
        self.work = work

    def launch(self, stream: Stream | None = None) -> None:
        target = stream or get_current_stream()
        target._submit_check("cudaGraphLaunch")
        target.worker.replay(self.work)


_events: "weakref.WeakValueDictionary[int, Event]" = weakref.WeakValueDictionary()
_event_ids = iter(range(1, 1 << 62))


class Event:
    """Like cupy.cuda.Event (of the device current when made; `ptr` its handle). As in CUDA, a plain
    record in a capturing stream is a graph-internal node: the event is unusable outside the capture
    (cudaErrorCapturedEvent) until recorded again outside; cudaEventRecordWithFlags(..., EXTERNAL)
    (`cuda_bindings_runtime`) records it at every replay instead."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.mark: HostEventMark | None = None
        self.captured = False   # its latest record was a plain record in a capture
        self.device_id = _current_device()
        self.ptr = next(_event_ids)
        _events[self.ptr] = self

    def _recordable_on(self, stream: Stream) -> HostStream:
        if stream.ptr and stream.device_id != self.device_id:   # CUDA: event and stream of one device
            raise CUDARuntimeError(cudaError_t.cudaErrorInvalidResourceHandle,
                                   f"an event of device {self.device_id} recorded on a stream of device "
                                   f"{stream.device_id}")
        stream._submit_check("cudaEventRecord")
        return stream.worker

    def record(self, stream: Stream | None = None) -> None:
        worker = self._recordable_on(stream or get_current_stream())
        self.captured = worker.capture is not None
        self.mark = worker.record()

    def _usable(self) -> None:
        if self.captured:
            raise CUDARuntimeError(cudaError_t.cudaErrorCapturedEvent, "the event was last recorded in a capture")

    def synchronize(self) -> None:
        self._usable()
        _unsafe("cudaEventSynchronize")
        if self.mark is not None:
            self.mark.done.wait()

    @property
    def done(self) -> bool:
        self._usable()
        _unsafe("cudaEventQuery")
        return self.mark is None or self.mark.done.is_set()


def get_elapsed_time(start: Event, end: Event) -> float:
    start._usable()
    end._usable()
    assert start.mark is not None and end.mark is not None
    return (end.mark.time - start.mark.time) * 1e3


def device_workers(device: int) -> list[HostStream]:
    """The workers of every stream of `device` that have not ended (collected streams' included)."""
    with _workers_lock:
        return [worker for worker in _workers.get(device, ()) if not worker.ended()]


def _all_streams() -> list[Stream]:
    """The live streams (a closed one is destroyed: it neither captures nor holds work)."""
    return [stream for stream in list(_streams.values()) + list(_null_streams.values()) if not stream.worker.closed]


class _Runtime:
    """cupy.cuda.runtime: the memcpy/memset/synchronise calls the cuda device makes."""

    CUDARuntimeError = CUDARuntimeError
    streamCaptureModeGlobal, streamCaptureModeThreadLocal, streamCaptureModeRelaxed = 0, 1, 2

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:
        major, minor = COMPUTE_CAPABILITIES.get(device, COMPUTE_CAPABILITY)
        return {"multiProcessorCount": SM_COUNTS.get(device, SM_COUNT), "name": b"CUDA emulator (CPU)",
                "totalGlobalMem": 0, "major": major, "minor": minor}

    @staticmethod
    def driverGetVersion() -> int:
        return DRIVER_VERSION

    @staticmethod
    def runtimeGetVersion() -> int:
        return DRIVER_VERSION

    @staticmethod
    def memGetInfo() -> tuple[int, int]:
        """The host's physical memory: the emulated device's memory is the host's."""
        return host_memory_info()

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
        capturing = _capturing(streams)
        if capturing:   # a device-wide wait includes the capturing stream: refused, the capture invalidated
            _invalidate(capturing, "cudaDeviceSynchronize")
            raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize")
        _unsafe("cudaDeviceSynchronize")
        for worker in device_workers(device):
            worker.drain()

    @staticmethod
    def hostRegister(ptr: int, size: int, flags: int) -> None:
        # host memory is all the emulator has; what CUDA refuses is refused alike
        _unsafe("cudaHostRegister")
        if _page_locked(ptr, ptr + size):
            raise CUDARuntimeError(cudaError_t.cudaErrorHostMemoryAlreadyRegistered)
        _registered[ptr] = (ptr + size, None if flags & HOST_REGISTER_PORTABLE else _current_device())

    @staticmethod
    def hostUnregister(ptr: int) -> None:
        if _registered.pop(ptr, None) is None:
            raise CUDARuntimeError(cudaError_t.cudaErrorHostMemoryNotRegistered)

    memoryTypeUnregistered, memoryTypeHost = 0, 1
    hostRegisterDefault, hostRegisterPortable = 0, HOST_REGISTER_PORTABLE

    @staticmethod
    def pointerGetAttributes(ptr: int) -> SimpleNamespace:
        return SimpleNamespace(type=1 if _page_locked(ptr, ptr + 1, _current_device()) else 0)

    @staticmethod
    def threadExchangeStreamCaptureMode(mode: int) -> int:
        """cudaThreadExchangeStreamCaptureMode: set the calling thread's capture interaction mode (global
        by default), return the previous one (what `_unsafe` reads)."""
        previous = getattr(_local, "capture_mode", _Runtime.streamCaptureModeGlobal)
        _local.capture_mode = int(mode)
        return previous

    @staticmethod
    def memcpy(dst: int, src: int, size: int, kind: int) -> None:
        _use_legacy("cudaMemcpy")
        _unsafe("cudaMemcpy")
        if _late is None:
            ctypes.memmove(dst, src, size)
            return
        _legacy_now(lambda: ctypes.memmove(dst, src, size))

    @staticmethod
    def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        target = _stream(stream)
        if _late is not None and target.worker.capture is None and _pageable(src, size):
            # CUDA Runtime API, "API synchronization behavior", memcpy asynchronous: a pageable host
            # source is staged at the call (the caller may reuse it on return); a pinned one (or device
            # memory) is read when the copy runs
            staged = np.frombuffer(ctypes.string_at(src, size), np.uint8)
            target.submit(lambda: ctypes.memmove(dst, staged.ctypes.data, size))
            return
        target.submit(lambda: ctypes.memmove(dst, src, size))

    @staticmethod
    def memset(ptr: int, value: int, size: int) -> None:
        _use_legacy("cudaMemset")
        _unsafe("cudaMemset")
        if _late is None:
            ctypes.memset(ptr, value, size)
            return
        _legacy_now(lambda: ctypes.memset(ptr, value, size))

    @staticmethod
    def streamSynchronize(stream: int) -> None:
        _stream(stream).synchronize()

    @staticmethod
    def memsetAsync(ptr: int, value: int, size: int, stream: int) -> None:
        _stream(stream).submit(lambda: ctypes.memset(ptr, value, size))


class _UserObject:
    """A CUDA user object (cudaUserObjectCreate): a destructor (a C function's address) and its
    argument, called once when the last reference goes."""

    __slots__ = ("handle", "ptr", "destroy", "refs", "lock")

    def __init__(self, handle: int, ptr: int, destroy: int, refs: int):
        self.handle, self.ptr, self.destroy, self.refs, self.lock = handle, ptr, destroy, refs, threading.Lock()

    def release(self, count: int) -> None:
        with self.lock:
            self.refs -= count
            last = self.refs == 0
        if last:   # CUDA calls it on an internal thread, later; here at once (the caller polls either way)
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.destroy)(self.ptr)


_user_objects: dict[int, _UserObject] = {}          # handle -> user object with references left
_graph_handles: "weakref.WeakValueDictionary[int, CapturedWork]" = weakref.WeakValueDictionary()
_graph_ids: "weakref.WeakKeyDictionary[CapturedWork, int]" = weakref.WeakKeyDictionary()
_graph_users: dict[int, list[tuple[_UserObject, int]]] = {}   # graph handle -> (user object, references)
_handle_ids = iter(range(1, 1 << 62))
_user_lock = threading.Lock()


def _graph_handle(work: CapturedWork) -> int:
    """The cudaGraph_t (and capture id) of a stream's captured work: one per capture, unique in the
    process. The graph is the work: it lives while the capture, a `Graph` (CUDA's graph and its
    instance in one) or a replay in flight holds it, and its user-object references go with it."""
    with _user_lock:
        handle = _graph_ids.get(work)
        if handle is None:
            handle = _graph_ids[work] = next(_handle_ids)
            _graph_handles[handle] = work
            _graph_users[handle] = []
            weakref.finalize(work, _graph_destroyed, handle)
        return handle


def _graph_destroyed(handle: int) -> None:
    with _user_lock:
        held = _graph_users.pop(handle, [])
    for user, count in held:
        _release_user(user, count)


def _release_user(user: _UserObject, count: int) -> None:
    user.release(count)
    if user.refs <= 0:
        with _user_lock:
            _user_objects.pop(user.handle, None)


class _CaptureStatus(enum.IntEnum):
    """cuda-bindings' cudaStreamCaptureStatus."""

    cudaStreamCaptureStatusNone = 0
    cudaStreamCaptureStatusActive = 1
    cudaStreamCaptureStatusInvalidated = 2


class _UserObjectFlags(enum.IntEnum):
    cudaUserObjectNoDestructorSync = 1


class _UserObjectRetainFlags(enum.IntEnum):
    cudaGraphUserObjectMove = 1


class _CudaBindingsRuntime:
    """The part of cuda-bindings' `cuda.bindings.runtime` the cuda device calls, with its signature:
    handles as ints, every call returning a tuple whose first item is a cudaError_t. User objects as
    CUDA has them (CUDA Programming Guide, "CUDA User Objects"): cudaStreamGetCaptureInfo gives the
    graph a capture records into, cudaGraphRetainUserObject gives it references, and the destructor
    runs once the graph and every instance of it (here one object, `CapturedWork`) are gone."""

    cudaError_t = cudaError_t
    cudaEventRecordDefault, cudaEventRecordExternal = 0, 1
    cudaStreamCaptureStatus = _CaptureStatus
    cudaUserObjectFlags = _UserObjectFlags
    cudaUserObjectRetainFlags = _UserObjectRetainFlags
    cudaHostFn_t = int   # cuda-bindings wraps a C function's address in cudaHostFn_t(address)

    @staticmethod
    def cudaStreamGetCaptureInfo(stream: int) -> tuple[Any, ...]:
        """(err, status, capture id, graph, dependencies, edge data, number of dependencies)."""
        try:
            work = _stream(int(stream)).worker.capture
        except CUDARuntimeError as e:
            return (cudaError_t(e.status), _CaptureStatus(0), 0, None, None, None, 0)
        if work is None:
            return (cudaError_t.cudaSuccess, _CaptureStatus(0), 0, None, None, None, 0)
        handle = _graph_handle(work)
        status = _CaptureStatus(2 if work.invalidated is not None else 1)
        return (cudaError_t.cudaSuccess, status, handle, handle, None, None, 0)

    @staticmethod
    def cudaUserObjectCreate(ptr: int, destroy: int, initialRefcount: int, flags: int) -> tuple[Any, Any]:
        if flags != 1 or initialRefcount < 1 or not int(destroy):   # NoDestructorSync is required
            return (cudaError_t.cudaErrorInvalidValue, None)
        handle = next(_handle_ids)
        with _user_lock:
            _user_objects[handle] = _UserObject(handle, int(ptr), int(destroy), int(initialRefcount))
        return (cudaError_t.cudaSuccess, handle)

    @staticmethod
    def cudaGraphRetainUserObject(graph: int, obj: int, count: int, flags: int) -> tuple[Any]:
        """Move (flags 1) or add `count` references of the user object to the graph."""
        with _user_lock:
            user, held = _user_objects.get(int(obj or 0)), _graph_users.get(int(graph or 0))
            if user is None or held is None or count < 1:
                return (cudaError_t.cudaErrorInvalidValue,)
            with user.lock:
                if not flags & 1:
                    user.refs += count
            held.append((user, count))
        return (cudaError_t.cudaSuccess,)

    @staticmethod
    def cudaUserObjectRelease(obj: int, count: int) -> tuple[Any]:
        user = _user_objects.get(int(obj or 0))
        if user is None or count < 1:
            return (cudaError_t.cudaErrorInvalidValue,)
        _release_user(user, count)
        return (cudaError_t.cudaSuccess,)

    cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed = 0, 1, 2
    # cuda-bindings' enum (cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal), as the device reads it
    cudaStreamCaptureMode = SimpleNamespace(cudaStreamCaptureModeGlobal=0, cudaStreamCaptureModeThreadLocal=1,
                                            cudaStreamCaptureModeRelaxed=2)

    @staticmethod
    def cudaThreadExchangeStreamCaptureMode(mode: int) -> tuple[Any, int]:
        """(cudaSuccess, the calling thread's previous capture interaction mode); CuPy's runtime has no
        binding of it (see `_Runtime.threadExchangeStreamCaptureMode`, which this is)."""
        return cudaError_t.cudaSuccess, _Runtime.threadExchangeStreamCaptureMode(int(mode))

    @staticmethod
    def cudaEventRecordWithFlags(event: int, stream: int, flags: int) -> tuple[Any]:
        """EXTERNAL in a capture records the event at every replay (each replay points it at its own mark)."""
        target, handle = _stream(int(stream)), _events.get(int(event))
        if handle is None:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        try:
            worker = handle._recordable_on(target)
        except CUDARuntimeError as e:
            return (cudaError_t(e.status),)
        external = bool(flags & 1) and worker.capture is not None
        handle.captured = worker.capture is not None and not external
        handle.mark = worker.record(handle if external else None)
        return (cudaError_t.cudaSuccess,)


cuda_bindings_runtime = _CudaBindingsRuntime()


class _CudaBindingsDriver:
    """The part of cuda-bindings' `cuda.bindings.driver` the cuda device calls, with its signature:
    cuStreamWaitValue32 (a stream memory operation), a `(CUresult,)` tuple back."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0, CUDA_ERROR_NOT_SUPPORTED=801)
    CUstreamWaitValue_flags = SimpleNamespace(CU_STREAM_WAIT_VALUE_GEQ=0)
    CUstream = CUdeviceptr = int

    @staticmethod
    def cuStreamWaitValue32(stream: int, addr: int, value: int, flags: int) -> tuple[int]:
        """The stream's later work waits until the 32-bit word at `addr` (host memory here, as pinned
        memory is on a GPU with unified addressing) is cyclically >= `value` (flags: GEQ only)."""
        if int(flags) != 0:
            return (_CudaBindingsDriver.CUresult.CUDA_ERROR_NOT_SUPPORTED,)
        cell, target = ctypes.c_uint32.from_address(int(addr)), int(value) & 0xFFFFFFFF

        def wait() -> None:
            while (cell.value - target) & 0xFFFFFFFF >= 0x80000000:   # (int32_t)(*addr - value) < 0
                time.sleep(0.0005)
        _stream(int(stream)).submit(wait)
        return (_CudaBindingsDriver.CUresult.CUDA_SUCCESS,)


cuda_bindings_driver = _CudaBindingsDriver()


class RawKernel:
    """A kernel of a RawModule; calling it queues the emulated launch on the current stream."""

    def __init__(self, module: Any, expr: str):
        self.function = module.get_function(expr)
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Stream | None = None) -> None:
        target = stream or get_current_stream()
        if target.ptr and target.device_id != _current_device():   # cuLaunchKernel: another context's stream
            raise CUDADriverError(400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle")
        if shared_mem > max(STATIC_SHARED_LIMIT, self.max_dynamic_shared_size_bytes):
            raise CUDADriverError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument")
        function, packed = self.function, tuple(args)
        target.submit(lambda: function(tuple(grid), tuple(block), packed, shared_mem=shared_mem))


class RawModule:
    """CuPy's RawModule (cupy/_core/raw.pyx): keyword-only, exactly one of `code` (a str, `options` a
    tuple: Cython-typed there) and `path`; `name_expressions` only with `code`.

    `code` is compiled for the CPU (cached by source hash) where CuPy runs NVRTC. `path` is a shipped
    binary (kernels/shipped.py): loaded as the driver would (a missing file: CUDA_ERROR_FILE_NOT_FOUND;
    a cubin of another major architecture or a newer minor, or PTX of a newer architecture than the
    current device: CUDA_ERROR_NO_BINARY_FOR_GPU; neither ELF nor PTX: CUDA_ERROR_INVALID_IMAGE), and
    then stands in for the module compiled from its kernel file's current source, its functions found
    by the lowered names the build stored (index.json)."""

    def __init__(self, *, code: str | None = None, path: str | None = None, options: tuple[str, ...] = (),
                 name_expressions: Sequence[str] | None = None):
        if (code is None) == (path is None):
            raise TypeError("Exactly one of `code` and `path` keyword arguments must be given.")
        if path is not None and name_expressions is not None:
            raise ValueError("need CUDA C++ code for the requested kernels")
        from . import EmuModule
        self.lowered: dict[str, str] = {}   # lowered name -> name expression (a loaded binary's)
        if path is not None:
            file, self.lowered = _load_binary(path)
            from ..kernels import loader
            code, options, name_expressions = loader.source(file), (), loader.name_expressions(file)
            module_loads.append(("load", str(path)))
        elif not isinstance(code, str) or not isinstance(options, tuple):
            raise TypeError(f"RawModule: code must be a str and options a tuple, got {type(code).__name__} and "
                            f"{type(options).__name__}")
        else:
            module_loads.append(("nvrtc", code))
        self.module = EmuModule(code, options=tuple(o for o in options if o.startswith(("-D", "-U"))),
                                name_expressions=list(name_expressions or ()))

    def compile(self, log_stream: Any = None) -> None:
        """Compiled at construction here (CuPy: at the first get_function, or now)."""

    def get_function(self, name: str) -> RawKernel:
        return RawKernel(self.module, self.lowered.get(name, name))


def _load_binary(path: str) -> tuple[str, dict[str, str]]:
    """(kernel file, {lowered name: name expression}) of a shipped binary as kernels/shipped.py unpacks
    it (`.../cuda13/<stem>.<target>.<hash>.<cubin|ptx>`), checked as cuModuleLoad checks it against the
    current device."""
    from pathlib import Path

    from ..kernels import shipped
    binary = Path(path)
    if not binary.is_file():
        raise CUDADriverError(301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found")
    data = binary.read_bytes()
    stem, target, *_, ext = binary.name.split(".")
    if not (data.startswith(b"\x7fELF") and target.startswith("sm_")) and \
            not (b".version" in data[:4096] and target.startswith("compute_")):
        raise CUDADriverError(200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid")
    major, minor = COMPUTE_CAPABILITIES.get(_current_device(), COMPUTE_CAPABILITY)
    number = int(target.rpartition("_")[2])
    runs = number // 10 == major and number % 10 <= minor if target.startswith("sm_") else number <= major * 10 + minor
    if not runs:
        raise CUDADriverError(209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution "
                                   "on the device")
    packed = f"{binary.parent.name}/{stem}.{target}.{ext}.xz"
    for build in shipped.read_index().get("builds", {}).values():
        for file, entry in build["files"].items():
            if packed in entry["binaries"].values():
                return file, {lowered: expr for expr, lowered in entry["names"].items()}
    raise CUDADriverError(200, "CUDA_ERROR_INVALID_IMAGE", f"{packed} is no shipped binary of index.json")


# ---------------------------------------------------------------------------- the late stand-in
# ACLNN_GPU_EMU_LATE=1: what a GPU does and the prompt host queues above do not (docs/TESTING.md):
# - each stream's batch of work starts after a random delay (seeded: ACLNN_GPU_EMU_LATE_SEED, printed):
#   a launch, an async copy or memset returns before the device has done it, and work of different
#   streams may run in any order (CUDA Programming Guide, "Asynchronous Concurrent Execution", streams);
# - a pageable host source of cudaMemcpyAsync is read at the call, a pinned one when the copy runs
#   (memcpyAsync above);
# - cupy.cuda.alloc is CuPy's pool (emulator/fakepool.py): freed chunks poisoned and handed out again
#   in cupy/cuda/memory.pyx's order;
# - the legacy stream orders with the blocking streams both ways (Stream._late_order), and cudaMemcpy /
#   cudaMemset run on it;
# - (always on, late or not) capture modes: `_unsafe` below.

class LateRules:
    """The late stand-in's settings: its seed and the range of each batch's delay (seconds)."""

    def __init__(self, seed: int, max_delay: float = 0.002, min_delay: float = 0.0):
        self.seed = seed
        self.min_delay, self.max_delay = min_delay, max_delay
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def delay(self) -> None:
        with self._lock:
            seconds = self._random.uniform(self.min_delay, self.max_delay)
        if seconds > 0:
            time.sleep(seconds)


_late: LateRules | None = None
_strict_captures = 0   # captures begun in global or thread-local mode and not ended (`_unsafe` reads none otherwise)
_device_memory: Any = None   # (ptr, size) -> whether it is device memory: set by the emulated device


def set_late(rules: LateRules | None) -> LateRules | None:
    """Turn the late stand-in on (`rules`) or off (None); returns the previous setting. Streams that exist
    take the new delay; allocations keep the pool (or not) they came from."""
    global _late
    previous, _late = _late, rules
    for stream in _all_streams():
        stream.worker.delay = None if rules is None else rules.delay
    return previous


def late_from_environment() -> LateRules | None:
    """ACLNN_GPU_EMU_LATE=1, seeded by ACLNN_GPU_EMU_LATE_SEED. Without a seed one is drawn, printed
    (stderr) and put in the environment, so the processes this one starts share it and print nothing."""
    if os.environ.get("ACLNN_GPU_EMU_LATE", "") in ("", "0"):
        return None
    seed_text = os.environ.get("ACLNN_GPU_EMU_LATE_SEED", "")
    if seed_text:
        return LateRules(int(seed_text))
    seed = random.SystemRandom().randrange(1 << 31)
    os.environ["ACLNN_GPU_EMU_LATE_SEED"] = str(seed)
    print(f"aclnn_gpu emulated device: late stand-in on, ACLNN_GPU_EMU_LATE_SEED={seed}", file=sys.stderr)
    return LateRules(seed)


def _legacy_now(fn: Any) -> None:
    """A synchronous legacy-stream call in the late stand-in (cudaMemcpy, cudaMemset: API synchronization
    behavior): `fn` runs on the calling thread once the legacy stream's queued work, and the blocking
    streams' (the default-stream rule), has run; done on return, it precedes whatever is queued later."""
    device = _current_device()
    marks = [stream.worker.record() for stream in _all_streams()
             if stream.device_id == device and not stream.non_blocking and stream.worker.capture is None
             and not stream.worker.finished_all()]
    for mark in marks:
        mark.done.wait()
    fn()


def _pageable(ptr: int, size: int) -> bool:
    """Host memory that is neither page-locked nor device memory (as the emulated device's registry says)."""
    if _page_locked(ptr, ptr + size) or any(pool.owns(ptr) for pool in list(_pools.values())):
        return False
    return _device_memory is not None and not _device_memory(ptr, size)


def _unsafe(what: str) -> None:
    """A potentially unsafe call (CUDA Runtime API, cudaThreadExchangeStreamCaptureMode): in the calling
    thread's mode (global unless exchanged), global forbids it while the thread has a capture of its
    own not begun in relaxed mode, or while any thread has one begun in global mode; thread-local only
    for the thread's own; relaxed never. A forbidden call fails with cudaErrorStreamCaptureUnsupported
    and invalidates those captures (the capture's end then fails: PyTorch's NCCL watchdog met it with
    its event queries during a user's graph capture)."""
    if not _strict_captures:
        return
    mode = getattr(_local, "capture_mode", _Runtime.streamCaptureModeGlobal)
    if mode == _Runtime.streamCaptureModeRelaxed:
        return
    me = threading.get_ident()
    culprits = [stream for stream in _all_streams()
                if stream.worker.capture is not None and stream.capture_mode != _Runtime.streamCaptureModeRelaxed
                and (stream.capture_thread == me or (mode == _Runtime.streamCaptureModeGlobal
                                                      and stream.capture_mode == _Runtime.streamCaptureModeGlobal))]
    if culprits:
        which = "global" if mode == _Runtime.streamCaptureModeGlobal else "thread-local"
        _invalidate(culprits, f"{what}, a potentially unsafe call, was made during a {which}-mode capture")
        raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureUnsupported, what)


_late = late_from_environment()


cuda = SimpleNamespace(Device=Device, alloc=alloc, alloc_pinned_memory=alloc_pinned_memory, Stream=Stream, Event=Event,
                       Graph=Graph,
                       get_elapsed_time=get_elapsed_time, get_current_stream=get_current_stream,
                       runtime=_Runtime(), MemoryPointer=MemoryPointer)


def _forget_after_fork() -> None:
    """A fork() child: the parent's streams have no worker threads here; forget them (never drain). Page
    locks are per process: the child has none of the parent's registrations."""
    global _local, _null_lock, _workers_lock, _strict_captures
    _strict_captures = 0
    _streams.clear()
    _null_streams.clear()
    _workers.clear()
    _registered.clear()
    _local, _null_lock, _workers_lock = threading.local(), threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
