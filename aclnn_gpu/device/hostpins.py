"""The caller host memory page-locked in place (cudaHostRegister) for captured copies: one
reference-counted table of page-aligned ranges per process (`shared_pins`), whichever device's
capture asked.

A registration belongs to the process, not to a device: cudaHostUnregister from one device's
release would unlock pages another device's graph still copies from, so every device of a process
uses the same table. The pages are registered cudaHostRegisterPortable, so that every device's
context sees them page-locked (without it only the context that registered them does: cudaHostRegister
in the CUDA runtime API reference), as CuPy's pinned memory is allocated portable
(cupy/cuda/pinned_memory.pyx: hostAllocPortable). A fork() child starts with an empty table: page
locks are not inherited.

A captured copy from or to a Python buffer object reads or writes it at every replay, so the
buffer is page-locked for as long as a model uses it. CUDA refuses to register memory twice
(cudaErrorHostMemoryAlreadyRegistered: the same buffer in a second model's capture, overlapping
views) and memory already pinned (cudaHostAlloc / aclrtMallocHost), so a request registers only the
pages of its range that no range of the table covers and that are not pinned already, and every
model holds a reference on each range covering its buffer; the last reference unregisters it.
"""
from __future__ import annotations

import mmap
import os
import threading
from typing import Any

PAGE = mmap.PAGESIZE
MEMORY_TYPE_HOST = 1   # cudaMemoryTypeHost: pinned (cudaHostAlloc) or registered host memory
HOST_REGISTER_PORTABLE = 1   # cudaHostRegisterPortable


class HostPins:
    def __init__(self, runtime: Any):
        self.runtime = runtime                       # cupy.cuda.runtime (or fakecupy's)
        self._ranges: dict[int, list[int]] = {}      # start -> [end, references]
        self._lock = threading.Lock()

    def _pinned(self, address: int) -> bool:
        runtime = self.runtime
        try:
            kind = runtime.pointerGetAttributes(address).type
        except Exception:  # noqa: BLE001 - an address CUDA knows nothing of: pageable memory
            return False
        return int(kind) == getattr(runtime, "memoryTypeHost", MEMORY_TYPE_HOST)

    def acquire(self, address: int, nbytes: int) -> list[int]:
        """Page-lock [address, address + nbytes): the starts of the ranges now referenced (for `release`)."""
        lo, hi = address // PAGE * PAGE, -(-(address + nbytes) // PAGE) * PAGE
        with self._lock:
            held, gaps, cursor = [], [], lo
            for start in sorted(self._ranges):
                end = self._ranges[start][0]
                if end <= lo or start >= hi:
                    continue
                if start > cursor:
                    gaps.append((cursor, start))
                held.append(start)
                cursor = max(cursor, end)
            if cursor < hi:
                gaps.append((cursor, hi))
            made: list[int] = []
            try:
                for start, end in gaps:
                    if self._pinned(start) or self._pinned(end - 1):   # aclrtMallocHost memory: nothing to do
                        continue
                    self.runtime.hostRegister(start, end - start, HOST_REGISTER_PORTABLE)
                    self._ranges[start] = [end, 0]
                    made.append(start)
            except BaseException:
                for start in made:
                    del self._ranges[start]
                    self.runtime.hostUnregister(start)
                raise
            for start in held + made:
                self._ranges[start][1] += 1
            return held + made

    def release(self, starts: list[int]) -> None:
        """Drop one reference on each range; the last one unregisters it."""
        with self._lock:
            for start in starts:
                entry = self._ranges[start]
                entry[1] -= 1
                if entry[1] == 0:
                    del self._ranges[start]
                    self.runtime.hostUnregister(start)


_tables: dict[int, HostPins] = {}   # id(runtime module) -> its process-wide table
_tables_lock = threading.Lock()


def shared_pins(runtime: Any) -> HostPins:
    """The process's table for a CUDA runtime (CuPy's, or fakecupy's on the emulated device)."""
    with _tables_lock:
        table = _tables.get(id(runtime))
        if table is None or table.runtime is not runtime:
            table = _tables[id(runtime)] = HostPins(runtime)
        return table


def _after_fork_in_child() -> None:
    """A fork() child: no page locks of the parent's, and a lock a parent thread may have held is new."""
    global _tables_lock
    _tables.clear()
    _tables_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
