"""Host callbacks in stream order (acl_rt.h): `aclrtSubscribeReport`, `aclrtLaunchCallback`,
`aclrtProcessReport`, `aclrtUnSubscribeReport`.

As in CANN, a callback does not run on the stream itself: when the stream reaches it, it is handed
to the thread subscribed to that stream (a host thread id, `pthread_self()` in C, which is what
`threading.get_ident()` answers), which runs it inside its next `aclrtProcessReport`. With
ACL_CALLBACK_BLOCK the stream waits until the callback has run; with ACL_CALLBACK_NO_BLOCK it goes
on. A blocked stream gives up waiting when the process exits (the streams' exit rule,
`hoststream.stop_all`) or when its subscription is withdrawn, so no exit hangs on a callback that
nobody will process.

On the cuda (and emulated) device the callback is a host function in the stream (cudaLaunchHostFunc).
CUDA runs host functions on threads of its own and "host functions without a mandated order (such
as in independent streams) execute in undefined order and may be serialized" (CUDA Runtime API,
cudaLaunchHostFunc), so a host function that waits for the subscribed thread could hold up every
other stream's callbacks, blocking or not, and deadlock a thread that waits for one of those. So
the host function never waits: it hands the callback over and returns, and a blocking callback holds
its stream on the GPU instead (`device/cuda.py`, `StreamGate`: cuStreamWaitValue32 on a pinned
counter), released when the callback has run, or, as above, when the subscription is withdrawn, the
process exits or a reset has waited its bound (a watcher thread looks every WAIT_SLICE_S). Where
CUDA refuses the stream memory operation, the host function waits, as on the cpu device.
"""
from __future__ import annotations

import collections
import numbers
import os
import threading
import time
from typing import Any, Callable

from ..base.errors import c_api, fail
from ..base.status import aclError
from ..device.current import get_device
from ..host import stream as hoststream
from .handles import aclrtStream, resolve_stream

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID
BLOCK = 1            # ACL_CALLBACK_BLOCK
WAIT_SLICE_S = 0.05  # how often a blocked stream looks whether it should stop waiting


class _Report:
    __slots__ = ("fn", "user_data", "done", "release")

    def __init__(self, fn: Callable[[Any], Any], user_data: Any):
        self.fn, self.user_data, self.done = fn, user_data, threading.Event()
        self.release: Callable[[], None] | None = None   # lets its stream go on (a StreamGate hold)

    def finish(self) -> None:
        """The callback has run (or will never run): its stream may go on."""
        self.done.set()
        release = self.release
        if release is not None:
            release()


_lock = threading.Condition()
_subscriber: dict[Any, int] = {}                              # device stream -> subscribed thread id
_reports: dict[int, collections.deque[_Report]] = {}           # thread id -> its callbacks due, in order
_held: dict[Any, tuple[Any, list[_Report]]] = {}               # device stream -> (device, reports holding it)
_watcher: threading.Thread | None = None                        # releases _held reports nobody will run


def _after_fork_in_child() -> None:
    """A fork() child: the parent's streams and threads are not its own (a parent thread may have held the lock)."""
    global _lock
    _lock = threading.Condition()
    global _watcher
    _subscriber.clear()
    _reports.clear()
    _held.clear()
    _watcher = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _thread_id(value: Any, fn: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 0 <= int(value) < 2 ** 64:
        fail(PARAM, f"{fn}: threadId {value!r} must be a host thread id (a uint64_t)")
    return int(value)


@c_api()
def aclrtSubscribeReport(threadId: int, stream: aclrtStream | None) -> int:
    """Callbacks launched on `stream` are run by thread `threadId` (in its aclrtProcessReport)."""
    fn = "aclrtSubscribeReport"
    tid = _thread_id(threadId, fn)
    impl = resolve_stream(stream, fn)
    with _lock:
        if impl in _subscriber:
            fail(aclError.ACL_ERROR_REPEAT_SUBSCRIBE, f"{fn}: the stream is already subscribed by thread "
                                                      f"{_subscriber[impl]}")
        _subscriber[impl] = tid
        _reports.setdefault(tid, collections.deque())
    return OK


@c_api()
def aclrtUnSubscribeReport(threadId: int, stream: aclrtStream | None) -> int:
    fn = "aclrtUnSubscribeReport"
    tid = _thread_id(threadId, fn)
    impl = resolve_stream(stream, fn)
    with _lock:
        if _subscriber.get(impl) != tid:
            fail(aclError.ACL_ERROR_STREAM_NOT_SUBSCRIBE, f"{fn}: the stream is not subscribed by thread {tid}")
        del _subscriber[impl]
        _lock.notify_all()   # a stream blocked on one of its callbacks stops waiting
        held = _held.pop(impl, None)
    for report in held[1] if held is not None else ():   # and one held on the GPU goes on
        report.finish()
    return OK


def _deliver(impl: Any, device: Any, report: _Report, block: bool) -> None:
    """The task the stream runs: hand the callback to its thread; wait for it when it blocks (until
    the process exits, the subscription is withdrawn, or a reset / aclFinalize of `device` has
    waited its bound: Device.drain_overdue, counted in device.callbacks_stopped)."""
    with _lock:
        tid = _subscriber.get(impl)
        if tid is None:   # unsubscribed meanwhile: nobody would ever run it
            report.finish()
            return
        _reports[tid].append(report)
        _lock.notify_all()
    while block and not report.done.wait(WAIT_SLICE_S):
        if hoststream._exiting or _subscriber.get(impl) is None:
            return
        if device.drain_overdue():
            device.callbacks_stopped += 1
            return


@c_api()
def aclrtLaunchCallback(fn: Callable[[Any], Any], userData: Any, blockType: int, stream: aclrtStream | None) -> int:
    """Queue `fn(userData)` on `stream`, for the thread subscribed to it."""
    name = "aclrtLaunchCallback"
    if fn is None or not callable(fn):
        fail(PARAM, f"{name}: fn must be a callback function, got {'nullptr' if fn is None else type(fn).__name__}")
    if not isinstance(blockType, numbers.Integral) or isinstance(blockType, bool) or int(blockType) not in (0, 1):
        fail(PARAM, f"{name}: blockType {blockType!r} must be ACL_CALLBACK_NO_BLOCK (0) or ACL_CALLBACK_BLOCK (1)")
    device = get_device()
    impl = resolve_stream(stream, name, device=device)
    if impl.capture is not None:
        fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"{name}: the stream is capturing; a host callback is "
                                                        "not recorded into a model")
    with _lock:
        if impl not in _subscriber:
            fail(aclError.ACL_ERROR_STREAM_NOT_SUBSCRIBE, f"{name}: no thread is subscribed to the stream "
                                                          "(aclrtSubscribeReport first)")
    report = _Report(fn, userData)
    block = int(blockType) == BLOCK

    def task() -> None:
        _deliver(impl, device, report, block)

    worker = getattr(impl, "worker", None)
    cupy_stream: Any = getattr(impl, "cupy", None)
    if worker is not None:                              # cpu: the stream's host worker
        worker.submit(task)
        return OK
    # cuda, emulated: a host function (cudaLaunchHostFunc) that only hands the callback over; a blocking
    # one holds the stream on the GPU after it (see the module docstring)
    try:
        gate = device.stream_gate(impl) if block else None
    except Exception:  # noqa: BLE001 - no pinned counter (CUDA's refusal): the host function waits
        gate = None
    if gate is None:
        cupy_stream.launch_host_func(lambda _arg: task(), None)
        return OK
    cupy_stream.launch_host_func(lambda _arg: _deliver(impl, device, report, False), None)
    try:
        number = gate.hold()
    except Exception:  # noqa: BLE001 - no stream memory operations here (or no cuda-bindings): the host function waits
        device._no_stream_waits = True
        cupy_stream.launch_host_func(lambda _arg: _wait_for(impl, device, report), None)
        return OK
    report.release = lambda: gate.release(number)
    with _lock:
        _held.setdefault(impl, (device, []))[1].append(report)
        _watch()
    if report.done.is_set():   # run (or dropped) before its release was set
        report.finish()
    return OK


def _wait_for(impl: Any, device: Any, report: _Report) -> None:
    """`_deliver`'s wait for a blocking callback, without the hand-over (already made)."""
    while not report.done.wait(WAIT_SLICE_S):
        if hoststream._exiting or _subscriber.get(impl) is None:
            return
        if device.drain_overdue():
            device.callbacks_stopped += 1
            return


def _watch() -> None:
    """Start the watcher once (called under _lock): every WAIT_SLICE_S it lets streams held for
    callbacks go on when their callback has run (a release already made is harmless), when the
    process exits, when the subscription went, or when a reset of the device has waited its bound."""
    global _watcher
    if _watcher is not None:
        return

    def loop() -> None:
        while True:
            time.sleep(WAIT_SLICE_S)
            with _lock:
                held = [(impl, device, list(reports)) for impl, (device, reports) in _held.items()]
            for impl, device, reports in held:
                for report in reports:
                    stopped = not report.done.is_set() and device.drain_overdue()
                    if report.done.is_set() or hoststream._exiting or _subscriber.get(impl) is None or stopped:
                        if stopped:
                            device.callbacks_stopped += 1
                        report.finish()
                        with _lock:
                            entry = _held.get(impl)
                            if entry is not None and report in entry[1]:
                                entry[1].remove(report)
                                if not entry[1]:
                                    del _held[impl]
    _watcher = threading.Thread(target=loop, name="aclnn_gpu-callback-watcher", daemon=True)
    _watcher.start()


@c_api()
def aclrtProcessReport(timeout: int) -> int:
    """Run the calling thread's next callback, waiting up to `timeout` ms for one (-1: no limit);
    ACL_ERROR_WAIT_CALLBACK_TIMEOUT when none came, ACL_ERROR_THREAD_NOT_SUBSCRIBE when the thread
    is subscribed to no stream."""
    fn = "aclrtProcessReport"
    if not isinstance(timeout, numbers.Integral) or isinstance(timeout, bool) or int(timeout) == 0 or \
            int(timeout) < -1:
        fail(PARAM, f"{fn}: timeout {timeout!r} must be -1 (no limit) or a positive number of milliseconds")
    tid = threading.get_ident()
    deadline = None if int(timeout) == -1 else time.monotonic() + int(timeout) / 1000
    with _lock:
        while True:
            if tid not in _subscriber.values() and not _reports.get(tid):
                fail(aclError.ACL_ERROR_THREAD_NOT_SUBSCRIBE, f"{fn}: this thread ({tid}) is subscribed to no "
                                                              "stream (aclrtSubscribeReport)")
            queue = _reports.get(tid)
            if queue:
                report = queue.popleft()
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                fail(aclError.ACL_ERROR_WAIT_CALLBACK_TIMEOUT, f"{fn}: no callback came within {timeout} ms")
            _lock.wait(WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S))
    try:
        report.fn(report.user_data)
    finally:   # the stream goes on even when the callback raised (C callbacks cannot)
        report.finish()
    return OK
