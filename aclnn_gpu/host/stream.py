"""In-order asynchronous streams and events on the host: what the `cpu` device (and the
emulated device's CuPy-shaped layer) use where a GPU has hardware queues.

A `HostStream` is one worker thread draining a FIFO of callables, so enqueuing returns at once and
work runs in submission order. The first failure of queued work is kept and re-raised by the next
`synchronize()`; work queued after a failure is skipped (like a CUDA stream after a fault) until
the failure has been reported.

Capture: between `begin_capture()` and `end_capture()` whatever is put on the stream (tasks, event
marks, waits) is appended to a `CapturedWork` instead of the queue; `replay(work)` later queues the
whole list as ONE task, on this stream or another (the cpu device's and fakecupy's stream capture).

Fork: a child process has none of the parent's worker threads (and may inherit their locks held),
so a stream made before fork() is dead in the child: submitting to it or waiting on it raises
`StreamForked` at once instead of waiting for ever, and closing it only marks it closed.

Process exit: the workers are daemon threads, so nothing waits for them, and at exit the memory a
queued kernel uses goes away under it (Python's module teardown frees the buffers; a C program's
exit() runs the destructors of the libraries a kernel runs in). `stop_all()`, called at exit before
any of that (device/current.py: Python's atexit, and the C ABI's atexit hook), abandons every
stream's queued work, waits for the task each worker is running, and stops the workers; work
queued afterwards is refused (`ProcessExiting`).
"""
from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from typing import Callable

from ..base.errors import CallerNamed, fail
from ..base.status import aclError

_STOP = object()
_generation = 0   # bumped in every fork() child: streams of an older generation have no worker here
_live: "weakref.WeakSet[HostStream]" = weakref.WeakSet()   # every stream made, for stop_all()
_live_lock = threading.Lock()
_exiting = False  # set once by stop_all(): the process is ending


class ProcessExiting(CallerNamed):
    """Work queued after stop_all(): the process is exiting and its streams have stopped."""

    def __init__(self) -> None:
        super().__init__(aclError.ACL_ERROR_UNINITIALIZE, "the process is exiting: its streams were stopped at "
                         "exit (queued work abandoned), new work is not run")


class StreamForked(RuntimeError):
    """A stream created in the parent process, used in a fork() child."""

    def __init__(self) -> None:
        super().__init__("the stream was created in the parent process before fork(); its worker thread "
                         "does not exist in this child process (create new streams in the child)")


def _forked() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class HostEventMark:
    """One recording of an event: completes when the stream reaches it. A mark recorded in a capture
    is a template: it knows its event (`owner`, the object whose `.mark` it is), and each replay
    queued makes a fresh mark and points the event at it, as a direct record would."""

    __slots__ = ("done", "time", "owner")

    def __init__(self, owner: object = None) -> None:
        self.done = threading.Event()
        self.time = 0.0
        self.owner = owner

    def complete(self) -> None:
        self.time = time.perf_counter()
        self.done.set()


class CapturedWork:
    """The tasks and event marks a stream received while it captured, in order. `replay_task()` makes
    the one task that runs them all (a `Replay`)."""

    __slots__ = ("steps", "invalidated", "pending", "lock", "last", "__weakref__")   # (fakecupy's user objects)

    def __init__(self) -> None:
        self.steps: list[object] = []
        self.invalidated: str | None = None   # why, once the capture was invalidated
        self.pending = 0                      # replays queued and not finished
        self.lock = threading.Lock()
        self.last: threading.Event | None = None   # set when the latest replay queued has finished

    def add(self, task: object) -> None:
        if self.invalidated is not None:   # CUDA: cudaErrorStreamCaptureInvalidated
            fail(aclError.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                 "the stream's capture was invalidated (" + self.invalidated + "): work queued on it (an aclnn "
                 "call, aclrtMemcpyAsync, aclrtMemsetAsync, aclrtRecordEvent...) is refused; end it with "
                 "aclmdlRICaptureEnd")
        self.steps.append(task)

    def replay_task(self) -> "Replay":
        """One replay, counted pending and chained after the previous replay of this work (see `Replay`)."""
        with self.lock:
            replay = Replay(self, self.last)
            self.last = replay.finished
            self.pending += 1
        return replay


class Replay:
    """One queued replay of a CapturedWork. Its event marks are fresh (each event recorded in the
    capture now refers to this replay's mark: a wait queued later orders after THIS replay); it first
    waits for the previous replay of the same work (CUDA orders successive launches of one graph: the
    replays share the plans' workspaces); after a failing step the rest is skipped, its marks still
    complete, and the failure is the replay's. A replay the stream skips (queued behind a failure) or
    that could not be queued still finishes: marks completed, pending count decremented."""

    __slots__ = ("work", "steps", "previous", "finished", "_once")

    def __init__(self, work: CapturedWork, previous: threading.Event | None) -> None:
        self.work = work
        self.previous = previous
        self.finished = threading.Event()
        self._once = threading.Lock()
        steps: list[object] = []
        for step in work.steps:
            if isinstance(step, HostEventMark):
                step = HostEventMark()
            steps.append(step)
        self.steps = tuple(steps)

    def point_events(self) -> None:
        """The events recorded in the capture now refer to this replay's marks (at queue time)."""
        for template, step in zip(self.work.steps, self.steps):
            if isinstance(template, HostEventMark) and template.owner is not None:
                template.owner.mark = step   # type: ignore[attr-defined]

    def __call__(self) -> None:
        try:
            if self.previous is not None:
                self.previous.wait()
            _run_steps(self.steps)
        finally:
            self.finish()

    def skip(self) -> None:
        """Queued behind a failure: nothing runs, but the bookkeeping completes (after the previous replay)."""
        try:
            if self.previous is not None:
                self.previous.wait()
        finally:
            self.finish()

    def finish(self) -> None:
        if not self._once.acquire(blocking=False):
            return
        for step in self.steps:
            if isinstance(step, HostEventMark) and not step.done.is_set():
                step.complete()
        with self.work.lock:
            self.work.pending -= 1
        self.finished.set()


def _run_steps(steps: tuple[object, ...]) -> None:
    error: BaseException | None = None
    for step in steps:
        if isinstance(step, HostEventMark):
            step.complete()
        elif error is None:
            try:
                step()  # type: ignore[operator]
            except BaseException as e:  # noqa: BLE001 - the replay's failure, raised after the marks
                error = e
    if error is not None:
        raise error


class HostStream:
    """One worker thread over a FIFO guarded by one lock and two conditions.

    The handoff is kept cheap: a submit wakes the worker only when it sleeps (a busy worker picks
    the task up itself), and `drain()` compares two counters instead of queueing a marker, so a
    synchronize of a stream whose work is done costs no thread switch, and one that must wait is
    woken once, by the worker, when its last task finishes.
    """

    delay: Callable[[], None] | None = None   # called before a batch of work starts (the worker slept)

    def __init__(self, name: str = "stream") -> None:
        self._lock = threading.Lock()
        self._running = threading.Lock()   # held by the worker while it runs a task, or by `hold()`
        self._work = threading.Condition(self._lock)   # the worker waits here for tasks
        self._done = threading.Condition(self._lock)   # drain() waits here for the finished count
        self._tasks: collections.deque = collections.deque()
        self._submitted = 0     # tasks queued so far (markers and _STOP included)
        self._finished = 0      # tasks taken off the queue and run (or skipped)
        self._draining = 0      # threads blocked in drain()
        self._sleeping = False  # the worker waits on _work
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self.closed = False
        self.capture: CapturedWork | None = None   # set while the stream captures
        self.generation = _generation
        self._thread = threading.Thread(target=self._run, name=f"aclnn_gpu-{name}", daemon=True)
        with _live_lock:
            if _exiting:              # made during exit: refuses work, has no worker
                self.closed = True
                return
            _live.add(self)
        self._thread.start()

    def _run(self) -> None:
        lock, work, done, tasks, running = self._lock, self._work, self._done, self._tasks, self._running
        finished = False
        while True:
            slept = False
            with lock:
                if finished:
                    self._finished += 1
                    if self._draining:
                        done.notify_all()
                while not tasks:
                    self._sleeping = slept = True
                    work.wait()
                self._sleeping = False
                task = tasks.popleft()
            finished = True
            if slept and self.delay is not None:   # a batch of work starts late (fakecupy's late stand-in)
                self.delay()
            with running:   # not while a `hold()` runs host code as this stream's task
                if self._step(task):
                    return
            task = None  # drop the reference before sleeping

    def _step(self, task: object) -> bool:
        """Run one task taken off the queue; True for the stop marker."""
        if task is _STOP:
            with self._lock:
                self._finished += 1
                self._done.notify_all()
            return True
        if isinstance(task, HostEventMark):  # marks complete even after a failure
            task.complete()
        elif self._error is not None:
            if isinstance(task, Replay):   # its marks complete and its model is no longer pending
                task.skip()
        else:
            try:
                task()  # type: ignore[operator]
            except BaseException as e:  # noqa: BLE001 - reported at synchronize()
                with self._error_lock:
                    if self._error is None:
                        self._error = e
        return False

    def _put(self, task: object) -> None:
        if self.generation != _generation:
            raise StreamForked()
        with self._lock:
            if not self.closed:
                self._tasks.append(task)
                self._submitted += 1
                if self._sleeping:
                    self._sleeping = False
                    self._work.notify()
                return
        # A stream closed by another thread meanwhile: its queue has drained, so a mark completes at
        # once; new work cannot run.
        if not isinstance(task, HostEventMark):
            if _exiting:
                raise ProcessExiting()
            raise RuntimeError("the stream was destroyed")
        task.complete()

    def submit(self, fn: Callable[[], None]) -> None:
        self._put(fn)

    def finished_all(self) -> bool:
        """True when every task queued so far has run, the running one included (aclrtStreamQuery)."""
        with self._lock:
            return self._finished >= self._submitted

    def record(self, owner: object = None) -> HostEventMark:
        """A mark of event `owner` (the object whose `.mark` it becomes; a capture's replays repoint it)."""
        mark = HostEventMark(owner if self.capture is not None else None)
        self._put(mark)
        return mark

    def wait_mark(self, mark: HostEventMark) -> None:
        if self.capture is not None and any(step is mark for step in self.capture.steps):
            return   # recorded earlier in this capture: the replay runs in order, and a wait on the mark
            # could outlive it (a later replay's queueing re-arms the marks)
        self._put(lambda: mark.done.wait())

    def begin_capture(self) -> None:
        """From now on `_put` appends to a CapturedWork: an instance attribute shadowing the method, so
        a stream that does not capture pays nothing for capture."""
        self.capture = CapturedWork()
        self._put = self.capture.add   # type: ignore[method-assign]

    def end_capture(self) -> CapturedWork:
        """The captured list; its event marks read as complete until a replay re-arms them (an event
        recorded in a capture that is never replayed must not make its waiters hang)."""
        work, self.capture = self.capture, None
        assert work is not None
        del self._put   # the class's method again
        for step in work.steps:
            if isinstance(step, HostEventMark):
                step.complete()
        return work

    def replay(self, work: CapturedWork) -> None:
        """Queue a captured list as one task (on any stream). A replay that cannot be queued (destroyed
        stream, StreamForked) finishes at once, so its model is not left pending."""
        replay = work.replay_task()
        try:
            self._put(replay)
        except BaseException:
            replay.finish()
            raise
        replay.point_events()

    def synchronize(self) -> None:
        """Wait until everything queued so far has run; re-raise the first failure, once."""
        if self.capture is not None:   # CUDA: cudaErrorStreamCaptureUnsupported (the runtime refuses it first)
            fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED, "aclrtSynchronizeStream: stream is capturing; its work is "
                 "recorded, not run, so it cannot be waited for (end the capture with aclmdlRICaptureEnd first)")
        self.drain()
        if self._error is not None:  # set by the worker before it counted the task finished
            with self._error_lock:
                error, self._error = self._error, None
            if error is not None:
                raise error

    def hold(self) -> None:
        """Make the calling thread this stream's next task, until `unhold()`: everything queued
        before has run (its failure is raised, as `synchronize` raises it), and the worker starts
        nothing queued meanwhile, so work other threads queue runs after the holder's, never beside it."""
        while True:
            self.synchronize()
            self._running.acquire()
            with self._lock:
                if self._finished >= self._submitted:   # drained, and the worker is between tasks
                    return
            self._running.release()   # work was queued (or the worker is counting a task): wait again

    def unhold(self) -> None:
        self._running.release()

    def drain(self) -> None:
        """Wait until everything queued so far has run, leaving a failure pending."""
        if self.generation != _generation:
            raise StreamForked()
        if threading.current_thread() is self._thread:
            raise RuntimeError("a stream cannot wait for itself from its own queued work")
        with self._lock:
            # A closed stream still counts: its queue ends with _STOP, which the worker counts too,
            # so a drain racing with close() from another thread waits for the queued work.
            target = self._submitted
            if self._finished >= target:
                return
            self._draining += 1
            try:
                while self._finished < target:
                    self._done.wait()
            finally:
                self._draining -= 1

    def idle(self) -> bool:
        return not self._tasks

    def abandon(self) -> None:
        """Process exit: drop the queued work (its event marks complete and its replays finish, so no
        waiter hangs on them) and queue the stop after the task the worker is running."""
        with self._lock:
            dropped = [task for task in self._tasks if task is not _STOP]
            stop_queued = len(dropped) != len(self._tasks)   # closed (or retired): its stop stays queued
            self._tasks.clear()
            self._finished += len(dropped)   # counted as skipped: a drain() does not wait for them
            if stop_queued:
                self._tasks.append(_STOP)
            if not self.closed:
                self._queue_stop()
            elif self._sleeping:
                self._sleeping = False
                self._work.notify()
            self._done.notify_all()
        for task in dropped:
            if isinstance(task, HostEventMark):
                task.complete()
            elif isinstance(task, Replay):
                task.finish()

    def _queue_stop(self) -> None:
        """(Lock held.) Mark the stream closed, queue the worker's stop after what is queued, wake it."""
        self.closed = True
        self._tasks.append(_STOP)
        self._submitted += 1
        if self._sleeping:
            self._sleeping = False
            self._work.notify()

    def retire(self) -> None:
        """Its handle is gone (dropped without a destroy; cudaStreamDestroy returns at once too): the
        queued work still runs, then the worker stops. Nothing waits here; the device that made the
        stream keeps it (and waits for it at a synchronize, a free or a reset) until its worker ends."""
        if self.generation != _generation:
            self.closed = True
            return
        with self._lock:
            if not self.closed:
                self._queue_stop()

    def ended(self) -> bool:
        """True once the worker has stopped (or never ran: made at exit, or in the parent before fork())."""
        return self.generation != _generation or not self._thread.is_alive()

    def close(self) -> None:
        """Finish the queued work and stop the worker (errors still pending are dropped)."""
        if self.generation != _generation:   # the parent's stream in a fork() child: nothing runs it
            self.closed = True
            return
        with self._lock:
            if not self.closed:   # a retired stream (its handle dropped) is still waited for here
                self._queue_stop()
        if threading.current_thread() is not self._thread and self._thread.ident is not None:
            self._thread.join()


def stop_all() -> None:
    """At process exit: every stream of this process abandons its queued work, then its worker
    finishes the task it is running (a kernel is never left running into memory the exit frees) and
    stops. Idempotent; work queued afterwards raises ProcessExiting."""
    global _exiting
    with _live_lock:
        _exiting = True
        streams = [s for s in list(_live) if s.generation == _generation]
    for stream in streams:   # all queues first: a running task may wait on another stream's mark
        stream.abandon()
    me = threading.current_thread()
    for stream in streams:
        if stream._thread is not me and stream._thread.ident is not None:
            stream._thread.join()
