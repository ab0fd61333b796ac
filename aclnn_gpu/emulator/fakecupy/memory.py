"""fakecupy's device and pinned memory (cupy.cuda.alloc, alloc_pinned_memory, MemoryPointer): device
memory is host memory (CuPy's pool, emulator/fakepool.py, in the late stand-in), pinned memory is
whole pages, and the page-lock table of cudaHostRegister (`_registered`) is what
`pointerGetAttributes` reads (runtime.py). `_device_memory` is set by the emulated device: whether a
range is device memory (a pageable source of an asynchronous copy is staged at the call).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from typing import Any

import numpy as np

from ...host.memory import aligned_buffer
from .. import fakepool
from . import streams
from .streams import _current_device, _null_streams, _streams, _unsafe

DEVICE_ALIGN = 512   # CuPy's memory pool hands out multiples of its 512-byte allocation unit (cupy/cuda/memory.pyx)
_device_memory: Any = None   # (ptr, size) -> whether it is device memory: set by the emulated device


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
    if streams._late is None or not size:
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
    stack = getattr(streams._local, "stack", None)
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



def _pageable(ptr: int, size: int) -> bool:
    """Host memory that is neither page-locked nor device memory (as the emulated device's registry says)."""
    if _page_locked(ptr, ptr + size) or any(pool.owns(ptr) for pool in list(_pools.values())):
        return False
    return _device_memory is not None and not _device_memory(ptr, size)



def _forget_after_fork() -> None:
    """A fork() child: page locks are per process, the child has none of the parent's registrations."""
    _registered.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
