"""fakecupy's streams, events and graphs (cupy.cuda.Stream, Event, Graph), the calling thread's
current device and stream, and CUDA's rules of stream capture and of the legacy stream.

Each stream is a `HostStream` worker (host/stream.py) of the device current when it was made; the
legacy stream of each device is `get_current_stream()` outside a `with stream:` block (`ptr` 0).
What a capturing stream is given is recorded by its worker (`CapturedWork`), and `Graph.launch`
replays the list as one task on the target stream's worker. The capture-mode rule (`_unsafe`: a
potentially unsafe call during a global or thread-local capture) and the late stand-in's state
(`set_late`, late.py) are here because every stream reads them.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from ...host.stream import CapturedWork, HostEventMark, HostStream
from .errors import CUDARuntimeError, cudaError_t
from .late import LateRules, late_from_environment

# cudaStreamCaptureMode (what Stream.begin_capture and cudaThreadExchangeStreamCaptureMode take)
CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL, CAPTURE_MODE_RELAXED = 0, 1, 2

_local = threading.local()   # per thread: `stack` of current streams, `devices` stack of device ids


def _current_device() -> int:
    devices = getattr(_local, "devices", None)
    return devices[-1] if devices else 0



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
        self.capture_mode = CAPTURE_MODE_RELAXED if mode is None else int(mode)
        self.capture_thread = threading.get_ident()
        self.worker.begin_capture()
        if self.capture_mode != CAPTURE_MODE_RELAXED:
            global _strict_captures
            _strict_captures += 1

    def end_capture(self) -> "Graph":
        work = self.worker.capture
        if work is None:
            raise CUDARuntimeError(cudaError_t.cudaErrorIllegalState, "the stream is not capturing")
        self.worker.end_capture()
        if self.capture_mode != CAPTURE_MODE_RELAXED:
            global _strict_captures
            _strict_captures -= 1
        self.capture_mode = CAPTURE_MODE_RELAXED
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



_late: LateRules | None = None
_strict_captures = 0   # captures begun in global or thread-local mode and not ended (`_unsafe` reads none otherwise)


def set_late(rules: LateRules | None) -> LateRules | None:
    """Turn the late stand-in on (`rules`) or off (None); returns the previous setting. Streams that exist
    take the new delay; allocations keep the pool (or not) they came from."""
    global _late
    previous, _late = _late, rules
    for stream in _all_streams():
        stream.worker.delay = None if rules is None else rules.delay
    return previous



def _legacy_now(what: str, fn: Any) -> None:
    """A synchronous legacy-stream call (cudaMemcpy, cudaMemset: API synchronization behavior), `what`:
    refused as a legacy-stream use and an unsafe call where CUDA refuses it; then `fn` runs on the
    calling thread, in the late stand-in once the legacy stream's queued work, and the blocking
    streams' (the default-stream rule), has run (the prompt stand-in has nothing queued to wait for).
    Done on return, it precedes whatever is queued later."""
    _use_legacy(what)
    _unsafe(what)
    if _late is not None:
        device = _current_device()
        marks = [stream.worker.record() for stream in _all_streams()
                 if stream.device_id == device and not stream.non_blocking and stream.worker.capture is None
                 and not stream.worker.finished_all()]
        for mark in marks:
            mark.done.wait()
    fn()


def _unsafe(what: str) -> None:
    """A potentially unsafe call (CUDA Runtime API, cudaThreadExchangeStreamCaptureMode): in the calling
    thread's mode (global unless exchanged), global forbids it while the thread has a capture of its
    own not begun in relaxed mode, or while any thread has one begun in global mode; thread-local only
    for the thread's own; relaxed never. A forbidden call fails with cudaErrorStreamCaptureUnsupported
    and invalidates those captures (the capture's end then fails: PyTorch's NCCL watchdog met it with
    its event queries during a user's graph capture)."""
    if not _strict_captures:
        return
    mode = getattr(_local, "capture_mode", CAPTURE_MODE_GLOBAL)
    if mode == CAPTURE_MODE_RELAXED:
        return
    me = threading.get_ident()
    culprits = [stream for stream in _all_streams()
                if stream.worker.capture is not None and stream.capture_mode != CAPTURE_MODE_RELAXED
                and (stream.capture_thread == me or (mode == CAPTURE_MODE_GLOBAL
                                                      and stream.capture_mode == CAPTURE_MODE_GLOBAL))]
    if culprits:
        which = "global" if mode == CAPTURE_MODE_GLOBAL else "thread-local"
        _invalidate(culprits, f"{what}, a potentially unsafe call, was made during a {which}-mode capture")
        raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureUnsupported, what)



_late = late_from_environment()


def _forget_after_fork() -> None:
    """A fork() child: the parent's streams have no worker threads here; forget them (never drain)."""
    global _local, _null_lock, _workers_lock, _strict_captures
    _strict_captures = 0
    _streams.clear()
    _null_streams.clear()
    _workers.clear()
    _local, _null_lock, _workers_lock = threading.local(), threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
