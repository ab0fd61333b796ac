"""The live allocations, and the check every pointer handed to the library goes through.

A pointer is a plain int. It is accepted only when the byte range it names lies wholly inside one
live allocation made by this library (`aclrtMalloc` / `aclrtMallocHost`); a freed, foreign or
too-short range is refused with a status code before anything touches memory.

Each device has its own registry. A range that is not in it may be another device's memory: the
runtime installs `Registry.foreign`, which accepts it when peer access from this device to the
owner is enabled and otherwise refuses it with a message naming the owning device.

`Registry.generation` is one process-wide value that changes with every removal from any device's
registry and every peer-access change (`Registry.bump`): a range that passed the check while it was
g is still usable while it is g, which lets phase 2 of an operator skip re-checking its pointers
(plans/plan.py `check_plan_memory`). It is shared by all devices because a tensor may live in a peer
device's memory: a free there, or peer access disabled, must invalidate this device's cached checks.
"""
from __future__ import annotations

import bisect
import ctypes
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import numpy as np

from ..base.errors import fail
from ..base.status import aclError


_GENERATIONS = itertools.count(1)


@dataclass(eq=False)
class Allocation:
    base: int
    size: int
    on_device: bool          # aclrtMalloc (True) or aclrtMallocHost (False)
    buffer: Any              # what keeps the memory alive (a NumPy array, a CuPy MemoryPointer ...)
    models: Any = None       # the live captured models (aclmdlRI) whose work uses it: not freeable meanwhile
    origin: str = ""         # how its size came about (aclrtMalloc's CANN rule), for the too-short message


class Registry:
    # (registry, ptr, nbytes, what, status) -> the other device's allocation when this device may use
    # it, None when no device has it; raises OpError when another device has it but may not be used
    foreign: ClassVar[Optional[Callable[["Registry", int, int, str, int], Optional[Allocation]]]] = None
    generation: ClassVar[int] = 0   # see the module docstring; each value is used once

    @staticmethod
    def bump() -> None:
        """Invalidate every cached pointer check (a removal or a peer-access change). `next` on a
        count is atomic under the GIL, so no two bumps publish the same value, and a value never
        comes back: a cached check equal to the current value saw no change since."""
        Registry.generation = next(_GENERATIONS)

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = device_id
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._by_base: dict[int, Allocation] = {}
        self.host_allocations = 0   # live aclrtMallocHost ranges (the functional cache looks up only then)
        self._passed: tuple[int, set] = (-1, set())   # (generation, ranges that passed): check_remembered

    def reinit_after_fork(self) -> None:
        """A fork() child: a thread of the parent may have held the lock at fork time."""
        self._lock = threading.Lock()

    def add(self, alloc: Allocation) -> None:
        with self._lock:
            bisect.insort(self._bases, alloc.base)
            self._by_base[alloc.base] = alloc
            self.host_allocations += not alloc.on_device

    def remove(self, base: int) -> Allocation | None:
        with self._lock:
            alloc = self._by_base.pop(base, None)
            if alloc is not None:
                Registry.bump()
                self.host_allocations -= not alloc.on_device
                del self._bases[bisect.bisect_left(self._bases, base)]
            return alloc

    def clear(self) -> None:
        """Forget every allocation (the device was reset): their ranges are refused from now on."""
        with self._lock:
            self._bases.clear()
            self._by_base.clear()
            self.host_allocations = 0
            Registry.bump()

    def get(self, base: int) -> Allocation | None:
        return self._by_base.get(base)

    def find(self, ptr: int, nbytes: int) -> Allocation | None:
        """The allocation holding [ptr, ptr + nbytes), or None."""
        if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0 or nbytes < 0:
            return None
        with self._lock:
            i = bisect.bisect_right(self._bases, ptr) - 1
            if i < 0:
                return None
            alloc = self._by_base[self._bases[i]]
        return alloc if ptr + nbytes <= alloc.base + alloc.size else None

    def check(self, ptr: Any, nbytes: int, what: str, *, status: int = aclError.ACL_ERROR_RT_PARAM_INVALID,
              on_device: bool | None = None) -> Allocation:
        """The allocation holding [ptr, ptr+nbytes), or OpError(status) with a message naming `what`."""
        alloc = self.find(ptr, nbytes)
        if alloc is None and Registry.foreign is not None:
            alloc = Registry.foreign(self, ptr, nbytes, what, status)
        if alloc is None:
            shown = hex(ptr) if isinstance(ptr, int) and not isinstance(ptr, bool) else repr(ptr)
            start = self.find(ptr, 0)
            if start is not None and nbytes > 0:   # it starts inside one: runs past its end
                fail(status, f"{what}: address {shown} with {nbytes} bytes is not inside a live allocation "
                             f"of this library: it runs {ptr + nbytes - start.base - start.size} bytes past the "
                             f"end of the allocation at {hex(start.base)} of {start.size} bytes"
                             + (f" ({start.origin})" if start.origin else ""))
            fail(status, f"{what}: address {shown} with {nbytes} bytes is not inside a live allocation "
                         "of this library (freed, foreign or too short)")
        if on_device is not None and alloc.on_device != on_device:
            fail(status, f"{what}: address {hex(ptr)} is {'device' if alloc.on_device else 'host'} memory, "
                         f"expected {'device' if on_device else 'host'} memory")
        return alloc

    def check_remembered(self, ptr: Any, nbytes: int, what: str, *, status: int, on_device: bool) -> None:
        """`check`, remembering a range that passed until the next removal or peer-access change
        (`generation`): phase 2's workspace check, made for a fresh executor at every call that
        GetWorkspaceSize's executor cache answers (the training loop's one workspace)."""
        generation = Registry.generation   # read first: a removal during the check voids what it remembers
        passed = self._passed
        if passed[0] != generation:
            passed = self._passed = (generation, set())
        key = (ptr, nbytes, on_device)
        if type(ptr) is int and key in passed[1]:
            return
        self.check(ptr, nbytes, what, status=status, on_device=on_device)
        if type(ptr) is int and len(passed[1]) < 64:
            passed[1].add(key)

    def borrow(self, ptr: int, size: int, owner: Any) -> Allocation | None:
        """Register memory the library does not own (a caller's array) for the length of one call.
        Returns the new allocation, or None when the range is already inside a live allocation.
        Raises ValueError when it partly overlaps one (the caller then copies instead)."""
        with self._lock:
            i = bisect.bisect_right(self._bases, ptr) - 1
            if i >= 0:
                alloc = self._by_base[self._bases[i]]
                if ptr + size <= alloc.base + alloc.size:
                    return None
                if ptr < alloc.base + alloc.size:
                    raise ValueError("range partly overlaps a live allocation")
            j = bisect.bisect_left(self._bases, ptr)
            if j < len(self._bases) and self._bases[j] < ptr + size:
                raise ValueError("range partly overlaps a live allocation")
            alloc = Allocation(ptr, size, True, owner)
            bisect.insort(self._bases, ptr)
            self._by_base[ptr] = alloc
            return alloc

    def host_bytes(self, ptr: int, nbytes: int) -> Any:
        """The bytes [ptr, ptr + nbytes) of a host-memory allocation, as a slice of its buffer (for
        devices whose memory is host memory; the range was validated before it got here)."""
        alloc = self.find(ptr, nbytes)
        if alloc is None:   # a peer device's memory (validated by the runtime): host memory all the same
            return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr)) if nbytes else \
                np.empty(0, np.uint8)
        start = ptr - alloc.base
        return alloc.buffer[start:start + nbytes]

    def __len__(self) -> int:
        return len(self._by_base)

    def snapshot(self) -> list[Allocation]:
        with self._lock:
            return [self._by_base[b] for b in self._bases]
