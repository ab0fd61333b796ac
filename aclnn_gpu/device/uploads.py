"""Uploads of the cuda device's host tables (tiling data) into the workspace, asynchronous and without
allocating in steady state: `UploadRing`, slots of one pinned buffer for the usual small tables, and
`LargeUploads`, pinned staging buffers of a size that grows for tables larger than a slot; both reuse
pinned memory only after the event of the copy that last read it has completed. While a stream
captures, neither is used: a captured copy reads its source at every replay, after the ring has
handed the slot to someone else, so `captured_upload` copies into a pinned buffer of its own,
which the model keeps for its lifetime."""
from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any, Callable

import numpy as np

from .capture_mode import thread_local_capture_mode

MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: unified addressing works the direction out
UPLOAD_RING_BYTES = 1 << 20
UPLOAD_SLOT_BYTES = 4096
LARGE_UPLOAD_BUFFERS = 8


def captured_upload(cp: Any, dst: int, host: np.ndarray, stream: Any,
                    pinned: Callable[[int], tuple[Any, int]] | None = None) -> Any:
    """Queue the upload of `host` to `dst` from a fresh pinned buffer; returns the buffer, which
    the caller (the capture's model) must keep alive as long as the graph can be launched.
    `pinned(nbytes)` -> (buffer, address) allocates it (default: CuPy's pinned memory, cudaHostAlloc,
    which the ACL capture's relaxed mode allows; a PyTorch capture passes `TorchStream`'s, which
    allocates through PyTorch with the thread in relaxed mode, so a global-mode capture holds too)."""
    host = np.ascontiguousarray(host)
    if pinned is None:
        with thread_local_capture_mode(cp):   # cudaHostAlloc: another thread's global-mode capture stays valid
            buffer = cp.cuda.alloc_pinned_memory(max(host.nbytes, 1))
        address = int(buffer.ptr)
    else:
        buffer, address = pinned(max(host.nbytes, 1))
    ctypes.memmove(address, host.ctypes.data, host.nbytes)
    cp.cuda.runtime.memcpyAsync(dst, address, host.nbytes, MEMCPY_DEFAULT, stream.ptr)
    return buffer


class LargeUploads:
    """Pinned staging buffers for uploads larger than a ring slot, reused without a stream
    synchronize: each buffer carries the event recorded after the copy that last read it, and an
    upload takes a buffer whose event has completed. A buffer is allocated (a power of two, at
    least the table) only when none is free and big enough -- while the pool grows to the number of
    large uploads in flight, or for a larger table than before -- so steady state allocates
    nothing. With LARGE_UPLOAD_BUFFERS buffers all in flight the oldest copy is waited for (an
    event: the GPU is that many uploads behind); the caller's host array is free on return."""

    def __init__(self, cp: Any):
        self.cp = cp
        self.buffers: list[_Staging] = []   # least recently used first
        self.lock = threading.Lock()

    def _take(self, nbytes: int) -> _Staging:
        free = [b for b in self.buffers if b.event is None or b.event.done]
        fitting = [b for b in free if b.capacity >= nbytes]
        if fitting:
            buffer = min(fitting, key=lambda b: b.capacity)
            self.buffers.remove(buffer)
        elif free or len(self.buffers) >= LARGE_UPLOAD_BUFFERS:
            buffer = free[0] if free else self.buffers[0]
            self.buffers.remove(buffer)
            if buffer.event is not None:
                buffer.event.synchronize()   # only when every buffer is in flight
            if buffer.capacity < nbytes:     # grows a free buffer: the copy that read it is done
                buffer = _Staging(self.cp, nbytes, buffer.event)
        else:
            buffer = _Staging(self.cp, nbytes, None)
        self.buffers.append(buffer)
        return buffer

    def upload(self, dst: int, host: np.ndarray, stream: Any) -> None:
        # the event queries and waits and a new buffer's cudaHostAlloc: unsafe calls (device/capture_mode.py)
        with self.lock, thread_local_capture_mode(self.cp):
            buffer = self._take(host.nbytes)
            ctypes.memmove(buffer.memory.ptr, host.ctypes.data, host.nbytes)
            self.cp.cuda.runtime.memcpyAsync(dst, buffer.memory.ptr, host.nbytes, MEMCPY_DEFAULT, stream.ptr)
            buffer.event = buffer.event or self.cp.cuda.Event(disable_timing=True)
            buffer.event.record(stream)


class _Staging:
    """One pinned staging buffer of LargeUploads (a power of two bytes) and its last copy's event."""

    __slots__ = ("capacity", "event", "memory")

    def __init__(self, cp: Any, nbytes: int, event: Any):
        self.capacity = 1 << max(0, nbytes - 1).bit_length()
        self.memory = cp.cuda.alloc_pinned_memory(self.capacity)
        self.event = event


class UploadRing:
    """Pinned host memory for tiling uploads: each upload takes a slot, copies into it, and queues an
    asynchronous copy; a slot is reused only after the copy that used it has completed (an event),
    so uploads never block the host in steady state and never allocate. Tables larger than a slot
    (CTC's per-sample table from N = 171 on) go through `LargeUploads`, the same scheme with
    buffers of a size that grows."""

    def __init__(self, cp: Any):
        self.cp = cp
        self.memory = cp.cuda.alloc_pinned_memory(UPLOAD_RING_BYTES)
        self.slots = UPLOAD_RING_BYTES // UPLOAD_SLOT_BYTES
        self.events: list[Any] = [None] * self.slots
        self.taken = itertools.count()   # the next slot, lock-free (next() on a count is atomic under the GIL)
        self.slot_locks = [threading.Lock() for _ in range(self.slots)]
        self.large = LargeUploads(cp)

    def upload(self, dst: int, host: np.ndarray, stream: Any, source: int | None = None) -> None:
        """`source`: the address of `host`'s bytes when the caller knows it (C-contiguous then)."""
        if source is None:
            host = np.ascontiguousarray(host)
            source = host.ctypes.data
        if host.nbytes > UPLOAD_SLOT_BYTES:
            self.large.upload(dst, host, stream)
            return
        slot = next(self.taken) % self.slots
        with self.slot_locks[slot]:   # a thread that wrapped around to this slot waits here, then for our copy
            event = self.events[slot]
            if event is not None:
                with thread_local_capture_mode(self.cp):   # cudaEventSynchronize: an unsafe call
                    event.synchronize()
            address = self.memory.ptr + slot * UPLOAD_SLOT_BYTES
            ctypes.memmove(address, source, host.nbytes)
            self.cp.cuda.runtime.memcpyAsync(dst, address, host.nbytes, MEMCPY_DEFAULT, stream.ptr)
            if event is None:
                event = self.events[slot] = self.cp.cuda.Event(disable_timing=True)
            event.record(stream)
