"""In-order asynchronous streams and events on the host: what the `cpu` device (and the
emulated device's CuPy-shaped layer) use where a GPU has hardware queues.

A `HostStream` is one worker thread draining a FIFO of callables, so enqueuing returns at once and
work runs in submission order. The first failure of queued work is kept and re-raised by the next
`synchronize()`; work queued after a failure is skipped (like a CUDA stream after a fault) until
the failure has been reported.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

_STOP = object()


class HostEventMark:
    """One recording of an event: completes when the stream reaches it."""

    __slots__ = ("done", "time")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.time = 0.0


class HostStream:
    def __init__(self, name: str = "stream") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._put_lock = threading.Lock()  # orders puts against close(): nothing is queued after _STOP
        self._thread = threading.Thread(target=self._run, name=f"aclnn_gpu-{name}", daemon=True)
        self._thread.start()
        self.closed = False

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            if task is _STOP:
                return
            if self._error is not None and not isinstance(task, (HostEventMark, threading.Event)):
                continue
            try:
                if isinstance(task, HostEventMark):
                    task.time = time.perf_counter()
                    task.done.set()
                elif isinstance(task, threading.Event):
                    task.set()
                else:
                    task()
            except BaseException as e:  # noqa: BLE001 - reported at synchronize()
                with self._error_lock:
                    if self._error is None:
                        self._error = e

    def _put(self, task: object) -> None:
        with self._put_lock:
            if not self.closed:
                self._queue.put(task)
                return
        # A stream closed by another thread meanwhile: its queue has drained, so markers complete at
        # once; new work cannot run.
        if isinstance(task, HostEventMark):
            task.time = time.perf_counter()
            task.done.set()
        elif isinstance(task, threading.Event):
            task.set()
        else:
            raise RuntimeError("the stream was destroyed")

    def submit(self, fn: Callable[[], None]) -> None:
        self._put(fn)

    def record(self) -> HostEventMark:
        mark = HostEventMark()
        self._put(mark)
        return mark

    def wait_mark(self, mark: HostEventMark) -> None:
        self._put(lambda: mark.done.wait())

    def synchronize(self) -> None:
        """Wait until everything queued so far has run; re-raise the first failure, once."""
        self.drain()
        with self._error_lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def drain(self) -> None:
        """Wait until everything queued so far has run, leaving a failure pending."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a stream cannot wait for itself from its own queued work")
        flag = threading.Event()
        self._put(flag)
        flag.wait()

    def idle(self) -> bool:
        return self._queue.empty()

    def close(self) -> None:
        """Finish the queued work and stop the worker (errors still pending are dropped)."""
        with self._put_lock:
            if self.closed:
                return
            self.closed = True
            self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()
