"""The `cpu` device: host buffers as "device" memory, NumPy as the kernels, and a stream per
worker thread, so an execute call returns before its work is done, as on a GPU.

Stream capture: a capturing stream's worker appends what it is given (plans, copies, memsets, event
marks and waits) to a `CapturedWork` list (`hoststream.py`); the graph is that list, and a replay is
one task on the worker of the stream it is launched on."""
from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

import numpy as np

from .base import Device, DeviceEvent, DeviceStream
from ..host.memory import aligned_buffer
from ..host.stream import CapturedWork, HostEventMark, HostStream
from .registry import Allocation, Registry

class CpuStream(DeviceStream):
    """A stream handle's device side. Its worker belongs to the device (`CpuDevice.workers`): when
    the wrapper is collected without a close (an aclrtStream dropped, never destroyed), the worker
    runs what is queued and then stops, and the device still waits for it until then."""

    def __init__(self, name: str = "stream") -> None:
        self.worker = HostStream(name)
        # not at interpreter exit: there hoststream.stop_all abandons every queue instead
        weakref.finalize(self, self.worker.retire).atexit = False

    def synchronize(self) -> None:
        self.worker.synchronize()

    def close(self) -> None:
        self.worker.close()


class HostEvent(DeviceEvent):
    """An event over host streams: each record() queues a mark; the event refers to the latest."""

    def __init__(self) -> None:
        self.mark: HostEventMark | None = None

    def record(self, stream: DeviceStream) -> None:
        self.mark = stream.worker.record(self)  # type: ignore[attr-defined]

    def synchronize(self) -> None:
        if self.mark is not None:
            self.mark.done.wait()

    def recorded(self) -> bool:
        return self.mark is not None

    def query(self) -> bool:
        return self.mark is None or self.mark.done.is_set()

    def elapsed_ms(self, end: DeviceEvent) -> float:
        assert isinstance(end, HostEvent) and self.mark is not None and end.mark is not None
        return (end.mark.time - self.mark.time) * 1e3


class CpuDevice(Device):
    kind = "cpu"

    def __init__(self, device_id: int = 0) -> None:
        self.id = device_id
        self.registry = Registry(device_id)
        self._streams: "weakref.WeakSet[CpuStream]" = weakref.WeakSet()   # the handles' side, for errors
        # The workers of every stream made here, handle dropped or not, until each has ended: what a
        # synchronize, a free and the reset wait for (CUDA's streams belong to their context alike).
        self._workers: set[HostStream] = set()
        self._lock = threading.Lock()
        self.default_stream = self.create_stream()

    # ------------------------------------------------------------------ memory
    def _alloc(self, size: int, on_device: bool) -> int:
        ptr, buf = aligned_buffer(size)
        self.registry.add(Allocation(ptr, size, on_device, buf))
        return ptr

    def malloc(self, size: int) -> int:
        return self._alloc(size, True)

    def malloc_host(self, size: int) -> int:
        return self._alloc(size, False)

    def zero_fresh(self, ptr: int, count: int) -> None:
        self.host_view(ptr, count).fill(0)   # a new host buffer: no queued work can use it yet

    def free(self, ptr: int) -> None:
        self.synchronize_quietly()  # like cudaFree: no queued work may still use the memory
        self.registry.remove(ptr)

    def host_view(self, ptr: int, nbytes: int) -> np.ndarray:
        return self.registry.host_bytes(ptr, nbytes)

    def _run(self, stream: DeviceStream | None, fn: Any) -> None:
        if stream is None:  # synchronous: ordered after all queued work, as cudaMemcpy is
            self.synchronize_quietly()
            fn()
        else:
            stream.worker.submit(fn)  # type: ignore[attr-defined]

    def copy(self, dst: int, src: int, count: int, stream: DeviceStream | None) -> None:
        self._run(stream, lambda: ctypes.memmove(dst, src, count))

    def copy_from_host(self, dst: int, host: memoryview, stream: DeviceStream | None) -> None:
        if stream is not None and stream.capture is None:
            host = memoryview(bytes(host))  # the caller may reuse its buffer at once
        # (captured: the buffer is read when the replay runs, as a CUDA graph's copy node reads it)
        target = self.host_view(dst, host.nbytes)
        self._run(stream, lambda: target.__setitem__(slice(None), np.frombuffer(host, np.uint8)))

    def copy_to_host(self, host: memoryview, src: int, stream: DeviceStream | None) -> None:
        source = self.host_view(src, host.nbytes)
        target = np.frombuffer(host, np.uint8)
        self._run(stream, lambda: target.__setitem__(slice(None), source))

    def memset(self, ptr: int, value: int, count: int, stream: DeviceStream | None) -> None:
        target = self.host_view(ptr, count)
        self._run(stream, lambda: target.fill(value & 0xFF))

    # ------------------------------------------------------------------ streams and events
    def create_stream(self) -> CpuStream:
        with self._lock:
            self._workers = {worker for worker in self._workers if not worker.ended()}
            stream = CpuStream(f"cpu{self.id}-stream-{len(self._workers)}")
            self._workers.add(stream.worker)
            self._streams.add(stream)
        return stream

    def workers(self) -> list[HostStream]:
        """The workers of this device's streams that have not ended (dropped handles' included)."""
        with self._lock:
            return [worker for worker in self._workers if not worker.ended()]

    def live_streams(self) -> list[DeviceStream]:
        return [s for s in list(self._streams) if not s.worker.closed]

    def synchronize_quietly(self) -> None:
        """Drain every stream, dropped handles' included, without consuming their pending errors."""
        for worker in self.workers():
            worker.drain()

    def create_event(self) -> HostEvent:
        return HostEvent()

    def stream_wait_event(self, stream: DeviceStream, event: DeviceEvent) -> None:
        assert isinstance(event, HostEvent)
        if event.mark is not None:
            stream.worker.wait_mark(event.mark)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ operators
    def enqueue(self, stream: DeviceStream, plan: Any, workspace: int) -> None:
        if stream.capture is not None:   # the model keeps the plan and its memory (runtime/capture.py)
            stream.capture.hold_plan(plan, workspace)
        stream.worker.submit(lambda: run_quietly(plan, self, workspace))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ stream capture
    def begin_capture(self, stream: DeviceStream) -> None:
        stream.worker.begin_capture()  # type: ignore[attr-defined]

    def end_capture(self, stream: DeviceStream) -> CapturedWork:
        return stream.worker.end_capture()  # type: ignore[attr-defined]

    def launch_graph(self, graph: CapturedWork, stream: DeviceStream) -> None:
        stream.worker.replay(graph)  # type: ignore[attr-defined]

    def graph_busy(self, graph: CapturedWork) -> bool:
        return graph.pending > 0

    def can_access_peer(self, peer: int) -> bool:
        return True   # every virtual device's memory is this process's memory

    def enable_peer_access(self, peer: int) -> None:
        pass

    def disable_peer_access(self, peer: int) -> None:
        pass

    def describe(self) -> str:
        return f"cpu device {self.id}"

    def close(self) -> None:
        """Every stream's queued work runs (dropped handles' included), then its worker stops."""
        for worker in self.workers():
            worker.close()


def run_quietly(plan: Any, device: Any, workspace: int) -> None:
    """A plan on the host, with NumPy's floating-point warnings off: NaN and inf in the data give NaN
    and inf in the results, as on a GPU, not RuntimeWarnings from inside the library. `device` is
    the cpu device, or a stand-in with its host_view (the functional call cache's HostViews)."""
    with np.errstate(all="ignore"):
        plan.run_host(device, workspace)
