"""Streams and events (acl_rt.h): create, destroy (and its force variant), synchronise (and the
timeout variants), query, ids, the failure mode; record, wait, synchronise, query, reset and time
events. The handle types and their checks are `handles.py`'s.

A stream or event belongs to the device current when it was made. Work is enqueued only on a stream
of the device that does it, and an event is recorded on a stream of its own device (CUDA's rule);
any thread may wait for any device's stream, and any stream for any event.

Capture (`graph/`): while a stream captures (`DeviceStream.capture` is set), the calls its rules
forbid are refused here, each behind one check of the stream's or the event's `capture`
(`capture.py` holds the rules).
"""
from __future__ import annotations

import itertools
import numbers
import threading
import weakref
from typing import Any

from ..base.errors import c_api, fail
from ..base.status import aclError, aclrtEventRecordedStatus
from ..device.current import get_device
from . import capture
from .calls import forward_status, timeout_ms
from .handles import aclrtEvent, aclrtStream, event_impl, resolve_stream, stream_owner, sync_stream

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID


# ---------------------------------------------------------------------------- streams
@c_api(n_out=1)
def aclrtCreateStream() -> tuple[int, aclrtStream]:
    device = get_device()
    return OK, aclrtStream(device.create_stream(), device)


@c_api(n_out=1)
def aclrtCreateStreamWithConfig(priority: int = 0, flag: int = 0) -> tuple[int, aclrtStream]:
    return aclrtCreateStream()  # priorities and flags change nothing here


@c_api()
def aclrtDestroyStream(stream: aclrtStream) -> int:
    if stream is None:
        fail(PARAM, "aclrtDestroyStream: stream is null (the default stream cannot be destroyed)")
    stream_owner(stream, "aclrtDestroyStream")
    if stream.impl.capture is not None:
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED, f"aclrtDestroyStream: {stream.impl.capture.describe()}; end the "
                                                    "capture (aclmdlRICaptureEnd) before destroying the stream")
    stream.destroyed = True
    stream.impl.close()
    return OK


@c_api()
def aclrtDestroyStreamForce(stream: aclrtStream) -> int:
    """The stream's queued work is waited for, then it is destroyed (nothing here can abort a task)."""
    fn = "aclrtDestroyStreamForce"
    if stream is None:
        fail(PARAM, f"{fn}: stream is nullptr (the default stream cannot be destroyed)")
    stream_owner(stream, fn)
    sync_stream(stream.impl, fn)
    return forward_status(fn, aclrtDestroyStream(stream))


@c_api()
def aclrtSynchronizeStream(stream: aclrtStream | None) -> int:
    if stream is None:
        impl = get_device().default_stream
    else:   # any thread may wait for any device's stream
        stream_owner(stream, "aclrtSynchronizeStream")
        impl = stream.impl
        if impl.capture is not None:
            capture.refuse_stream_sync("aclrtSynchronizeStream", impl)
    sync_stream(impl, "aclrtSynchronizeStream")
    return OK


@c_api()
def aclrtSynchronizeStreamWithTimeout(stream: aclrtStream | None, timeout: int) -> int:
    timeout_ms(timeout, "aclrtSynchronizeStreamWithTimeout")
    return forward_status("aclrtSynchronizeStreamWithTimeout", aclrtSynchronizeStream(stream))


@c_api(n_out=1)
def aclrtStreamQuery(stream: aclrtStream | None) -> tuple[int, int]:
    """ACL_STREAM_STATUS_COMPLETE (0) when everything queued on the stream has run, else NOT_READY (1)."""
    fn = "aclrtStreamQuery"
    if stream is None:
        impl = get_device().default_stream
    else:
        stream_owner(stream, fn)
        impl = stream.impl
    if impl.capture is not None:
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED, f"{fn}: the stream is capturing (aclmdlRICaptureBegin); "
                                                    "a capturing stream has no completion to query")
    cupy_stream: Any = getattr(impl, "cupy", None)
    # a host stream (cpu; emulated's CuPy stand-in) is idle when its worker ran all it was given; a
    # CUDA stream answers cudaStreamQuery (CuPy's `done`)
    worker = getattr(impl, "worker", None) or getattr(cupy_stream, "worker", None)
    done = worker.finished_all() if worker is not None else bool(cupy_stream.done)
    return OK, 0 if done else 1


_stream_ids: "weakref.WeakKeyDictionary[aclrtStream, int]" = weakref.WeakKeyDictionary()
_stream_ids_lock = threading.Lock()
_next_stream_id = itertools.count(1)


@c_api(n_out=1)
def aclrtStreamGetId(stream: aclrtStream | None) -> tuple[int, int]:
    """A stream's id, stable for its life and unique in the process; 0 for the default stream."""
    if stream is None:
        return OK, 0
    stream_owner(stream, "aclrtStreamGetId")
    with _stream_ids_lock:
        found = _stream_ids.get(stream)
        if found is None:
            found = _stream_ids[stream] = next(_next_stream_id)
    return OK, found


@c_api()
def aclrtSetStreamFailureMode(stream: aclrtStream | None, mode: int) -> int:
    """ACL_STOP_ON_FAILURE (1) is how every stream here behaves: after a failed task the stream runs
    nothing more until the failure is reported (its synchronize, or the next call on it), as a CUDA
    error is sticky. ACL_CONTINUE_ON_FAILURE (0) is refused as unsupported."""
    fn = "aclrtSetStreamFailureMode"
    if stream is not None:
        stream_owner(stream, fn)
    if not isinstance(mode, numbers.Integral) or isinstance(mode, bool) or int(mode) not in (0, 1):
        fail(PARAM, f"{fn}: mode {mode!r} must be ACL_CONTINUE_ON_FAILURE (0) or ACL_STOP_ON_FAILURE (1)")
    if int(mode) == 0:
        fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
             f"{fn}: ACL_CONTINUE_ON_FAILURE: a stream here stops at its first failed task until the failure is "
             "reported (ACL_STOP_ON_FAILURE is the mode every stream has)")
    return OK


# ---------------------------------------------------------------------------- events
@c_api(n_out=1)
def aclrtCreateEvent() -> tuple[int, aclrtEvent]:
    device = get_device()
    return OK, aclrtEvent(device.create_event(), device)


@c_api(n_out=1)
def aclrtCreateEventWithFlag(flag: int) -> tuple[int, aclrtEvent]:
    return aclrtCreateEvent()


@c_api()
def aclrtDestroyEvent(event: aclrtEvent) -> int:
    event_impl(event, "aclrtDestroyEvent")
    event.destroyed = True
    return OK


@c_api()
def aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream | None) -> int:
    impl = event_impl(event, "aclrtRecordEvent")
    # recorded on a stream of the event's own device (CUDA's rule); any stream may wait for it
    target = resolve_stream(stream, "aclrtRecordEvent", device=event.device)
    if target.capture is not None:
        capture.refuse_invalidated("aclrtRecordEvent", target.capture)
    impl.record(target)
    event.capture = target.capture
    return OK


@c_api()
def aclrtStreamWaitEvent(stream: aclrtStream | None, event: aclrtEvent) -> int:
    impl = event_impl(event, "aclrtStreamWaitEvent")
    device = get_device()
    target = resolve_stream(stream, "aclrtStreamWaitEvent", device=device)
    if target.capture is not None or event.capture is not None:
        capture.refuse_wait("aclrtStreamWaitEvent", target, event)
        if target.capture is not None:
            capture.refuse_invalidated("aclrtStreamWaitEvent", target.capture)
    device.stream_wait_event(target, impl)
    return OK


@c_api()
def aclrtSynchronizeEvent(event: aclrtEvent) -> int:
    impl = event_impl(event, "aclrtSynchronizeEvent")
    if event.capture is not None:
        capture.refuse_captured_event("aclrtSynchronizeEvent", event)
    impl.synchronize()
    return OK


@c_api()
def aclrtSynchronizeEventWithTimeout(event: Any, timeout: int) -> int:
    timeout_ms(timeout, "aclrtSynchronizeEventWithTimeout")
    return forward_status("aclrtSynchronizeEventWithTimeout", aclrtSynchronizeEvent(event))


@c_api(n_out=1)
def aclrtQueryEventStatus(event: aclrtEvent) -> tuple[int, int]:
    impl = event_impl(event, "aclrtQueryEventStatus")
    if event.capture is not None:
        capture.refuse_captured_event("aclrtQueryEventStatus", event)
    done = impl.query()
    status = aclrtEventRecordedStatus
    return OK, status.ACL_EVENT_RECORDED_STATUS_COMPLETE if done else status.ACL_EVENT_RECORDED_STATUS_NOT_READY


@c_api(n_out=1)
def aclrtQueryEvent(event: Any) -> tuple[int, int]:
    """ACL_EVENT_STATUS_COMPLETE (0) or NOT_READY (1): the older spelling of aclrtQueryEventStatus."""
    impl = event_impl(event, "aclrtQueryEvent")
    return OK, 0 if impl.query() else 1


@c_api(n_out=1)
def aclrtQueryEventWaitStatus(event: Any) -> tuple[int, int]:
    """ACL_EVENT_WAIT_STATUS_COMPLETE (0) once what the event recorded has run, else NOT_READY (1)."""
    impl = event_impl(event, "aclrtQueryEventWaitStatus")
    return OK, 0 if impl.query() else 1


@c_api()
def aclrtResetEvent(event: Any, stream: aclrtStream | None) -> int:
    """Valid on any live event and stream; the event keeps its last record (a later record replaces
    it), which is what a reset event's waits and queries see on an NPU once it is recorded again."""
    event_impl(event, "aclrtResetEvent")
    if stream is not None:
        stream_owner(stream, "aclrtResetEvent")
    return OK


@c_api(n_out=1)
def aclrtEventElapsedTime(start: aclrtEvent, end: aclrtEvent) -> tuple[int, float]:
    first = event_impl(start, "aclrtEventElapsedTime", "startEvent")
    last = event_impl(end, "aclrtEventElapsedTime", "endEvent")
    for impl, what, handle in ((first, "startEvent", start), (last, "endEvent", end)):
        if handle.capture is not None:
            capture.refuse_captured_event(f"aclrtEventElapsedTime ({what})", handle)
        if not impl.recorded():
            fail(PARAM, f"aclrtEventElapsedTime: {what} was never recorded")
        if not impl.query():
            fail(aclError.ACL_ERROR_RT_EVENT_NOT_COMPLETE, f"aclrtEventElapsedTime: {what} has not completed yet")
    return OK, float(first.elapsed_ms(last))
