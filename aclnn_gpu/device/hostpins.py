"""The caller host memory a device has page-locked in place (cudaHostRegister) for captured copies:
one reference-counted table of page-aligned ranges per device.

A captured copy from or to a Python buffer object reads or writes it at every replay, so the
buffer is page-locked for as long as a model uses it. CUDA refuses to register memory twice
(cudaErrorHostMemoryAlreadyRegistered: the same buffer in a second model's capture, overlapping
views) and memory already pinned (cudaHostAlloc / aclrtMallocHost), so a request registers only the
pages of its range that no range of the table covers and that are not pinned already, and every
model holds a reference on each range covering its buffer; the last reference unregisters it.
"""
from __future__ import annotations

import mmap
import threading
from typing import Any, Callable

PAGE = mmap.PAGESIZE
MEMORY_TYPE_HOST = 1   # cudaMemoryTypeHost: pinned (cudaHostAlloc) or registered host memory


class HostPins:
    def __init__(self, runtime: Callable[[], Any]):
        self._runtime = runtime                      # cupy.cuda.runtime (or fakecupy's), in the device's scope
        self._ranges: dict[int, list[int]] = {}      # start -> [end, references]
        self._lock = threading.Lock()

    def _pinned(self, address: int) -> bool:
        runtime = self._runtime()
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
                    self._runtime().hostRegister(start, end - start, 0)
                    self._ranges[start] = [end, 0]
                    made.append(start)
            except BaseException:
                for start in made:
                    del self._ranges[start]
                    self._runtime().hostUnregister(start)
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
                    self._runtime().hostUnregister(start)
