"""The `functional` layer's per-signature cache on the cpu device: phase 1 once per call signature,
then every call of that signature runs the cached plan on its own arrays, on the calling thread.

What a call's plan depends on is its signature: the operator, the device, the layout of every
array (shape, byte strides, dtype), every scalar argument (type and value) and the lengths given
as integer lists (by value). The first call of a signature takes the uncached path (descriptors,
lending, GetWorkspaceSize, execute on the stream, synchronize, result) and leaves behind an
`Entry`: its aclTensor / aclIntArray descriptors, the checked `Plan`, and where each operand lay.
A later call of the same signature skips all of phase 1 and the stream hand-off.

How a cached plan reaches the new arrays: translation, not rebinding. On a host-memory device a
plan touches memory only through `device.host_view(ptr, nbytes)` (plans/plan.py `host_array`). The
addresses inside the cached plan are those of the first call's operands, each owning one byte
range (a slot: inputs and outputs in the order the call described them). The workspace is not a
slot: the cpu device's NumPy plans never read it (a plan that did would read outside its slots and
take the uncached path), so a cached call allocates none. A later call hands the plan
`HostViews` instead of the device: its `host_view` maps a range inside slot k to the same bytes of
this call's k-th operand. The plan is never modified, so whatever it
derived from the first call's addresses stays consistent; a read outside every slot is refused
(`OutsideSlots`, after which the call takes the uncached path), never a read of stale memory.
Signatures whose first call could not give each operand a range of its own (arguments sharing
memory, an operand copied because it straddled an allocation) are not cached.

Why phase 2's checks still hold without running them: the executor is this module's own (never
destroyed, run by one call at a time: an entry is taken out of the cache while a call uses it);
every operand is an array
the call holds for its whole length, of exactly the layout the plan was checked against (the
signature, and checked again per operand); the outputs are fresh arrays, so they alias no input.

Streams: the call first synchronizes its stream (earlier queued work runs first, and its failure
is reported as the uncached path reports it), then runs the plan on the calling thread while it
holds the stream (`HostStream.hold`): work another thread queues meanwhile starts after it, never
beside it. A capturing stream is never run this way.

Bounded (MAX_ENTRIES least recently used per device), thread-safe, emptied in a fork() child, and
void for a reset device: a reset device is never current again, and its entries are dropped at
the next miss. `disabled()` turns the cache off (the tests compare against the uncached path).
"""
from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
from typing import Any, Iterator, Sequence

import numpy as np

from ..device.cpu import run_quietly


MAX_ENTRIES = 64   # per device


class OutsideSlots(RuntimeError):
    """A cached plan asked for memory outside its operands' ranges: the call is re-run uncached."""


class Entry:
    """One signature's cached phase 1 (see the module docstring); `plan` None: the signature is
    known not to be cacheable, and its calls take the uncached path without recording again."""

    __slots__ = ("plan", "tensors", "layouts", "outputs", "int_arrays", "bases", "ends", "written",
                 "workspace_address")

    def __init__(self, plan: Any, tensors: list, layouts: list, outputs: list, int_arrays: list,
                 slots: list[tuple[int, int]], written: int, workspace_address: int):
        self.plan = plan
        self.tensors = tensors          # the described inputs' aclTensors, in call order
        self.layouts = layouts          # per input: (shape, byte strides, dtype) of the array described
        self.outputs = outputs          # per output: (aclTensor, shape, dtype)
        self.int_arrays = int_arrays    # the aclIntArrays, in call order
        self.bases = tuple(base for base, _ in slots)   # operands in call order
        self.ends = tuple(end for _, end in slots)
        self.written = written          # bit k set: slot k is an output with bytes (a run must reach it)
        self.workspace_address = workspace_address   # the first call's: passed on, never read (see above)

    @classmethod
    def uncacheable(cls) -> "Entry":
        return cls(None, [], [], [], [], [], 0, 0)


def disjoint(slots: list[tuple[int, int]]) -> bool:
    """True when no two non-empty [base, end) ranges overlap (each operand owns its range)."""
    ranges = sorted((base, end) for base, end in slots if end > base)
    return all(a_end <= b_base for (_, a_end), (b_base, _) in zip(ranges, ranges[1:]))


def span(shape: Sequence[int], byte_strides: Sequence[int], itemsize: int) -> int:
    """Bytes from the first element of a view with non-negative strides to the end of its last."""
    if math.prod(shape) == 0:
        return 0
    return sum((n - 1) * s for n, s in zip(shape, byte_strides)) + itemsize


def bytes_of(array: np.ndarray) -> np.ndarray | None:
    """The bytes of an array with non-negative strides in whole elements, from its first element to
    the end of its last, as a uint8 view of the array's own memory (None for an empty array)."""
    if not array.size:
        return None
    if array.flags.c_contiguous:
        return array.reshape(-1).view(np.uint8)
    count = span(array.shape, array.strides, array.itemsize) // array.itemsize
    elements = np.lib.stride_tricks.as_strided(array, shape=(count,), strides=(array.itemsize,))
    return elements.view(np.uint8)


class HostViews:
    """The device as a cached plan sees it during one call: `host_view` translates an address of
    the first call's operand k into this call's operand k (`views[k]`, its bytes as uint8)."""

    __slots__ = ("kind", "id", "bases", "ends", "views", "reached")

    def __init__(self, device: Any, entry: Entry, views: list):
        self.kind, self.id = device.kind, device.id
        self.bases, self.ends, self.views = entry.bases, entry.ends, views
        self.reached = 0   # bit k: slot k was asked for

    def host_view(self, ptr: int, nbytes: int) -> np.ndarray:
        for k, base in enumerate(self.bases):
            if base <= ptr and ptr + nbytes <= self.ends[k]:
                self.reached |= 1 << k
                start = ptr - base
                return self.views[k][start:start + nbytes]
        raise OutsideSlots(f"a cached plan read {nbytes} bytes at {hex(ptr)}, outside its operands")


def run(entry: Entry, device: Any, views: list) -> None:
    """Run an entry's plan on one call's operands (`views`: their bytes, in slot order) on the
    calling thread, with NumPy's floating-point warnings off as on the device's stream."""
    plan = entry.plan
    if not plan.has_work:
        return
    host = HostViews(device, entry, views)
    run_quietly(plan, host, entry.workspace_address)
    if host.reached & entry.written != entry.written:   # it wrote an output some other way
        raise OutsideSlots(f"a cached plan of {plan.op} did not write its outputs through host_view")


class CallCache:
    """Entries by device, then by signature, least recently used first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[Any, collections.OrderedDict] = {}
        self.enabled = True
        self.hits = self.misses = 0   # for the tests and the bench (not exact across threads)

    def take(self, device: Any, key: tuple) -> Entry | None:
        """The entry of `key`, taken out of the cache for the length of one call (None: a miss)."""
        with self._lock:
            entries = self._devices.get(device)
            entry = entries.pop(key, None) if entries is not None else None
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def give(self, device: Any, key: tuple, entry: Entry) -> None:
        """Put an entry (back) as the most recently used of its device; the oldest over the bound go."""
        with self._lock:
            entries = self._devices.get(device)
            if entries is None:
                # a new device: the entries of devices that were reset (never current again) go now
                for stale in [d for d in self._devices if d.stale is not None]:
                    del self._devices[stale]
                entries = self._devices[device] = collections.OrderedDict()
            entries[key] = entry
            entries.move_to_end(key)
            while len(entries) > MAX_ENTRIES:
                entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._devices.values())

    def clear(self) -> None:
        with self._lock:
            self._devices.clear()

    def after_fork_in_child(self) -> None:
        """A fork() child: a thread of the parent may have held the lock; the parent's devices are
        stale here anyway."""
        self._lock = threading.Lock()
        self._devices = {}


cache = CallCache()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=cache.after_fork_in_child)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Every functional call in the block takes the uncached path (and caches nothing)."""
    previous, cache.enabled = cache.enabled, False
    try:
        yield
    finally:
        cache.enabled = previous
