"""Phase 1's executor cache: a GetWorkspaceSize whose arguments equal an earlier call's returns that
call's workspace size and a fresh executor over its plan, without running the checks or the plan
again (CANN's nnopbase does the same: `OpExecCacheManager`, keyed by a hash of the
GetWorkspaceSize arguments, which torch_npu's op-plugin relies on).

When a call hits. The key is the operator (its `build`), the calling thread's current device (the
object: a reset or a fork() child makes a new one), the exact type of every argument and the
arguments themselves: a tensor or an int array by identity, a scalar by value (an int, bool, str or
None; a float by value and, for a zero, its sign: `0.0 == -0.0` but the two may give different
bits). Any other argument (a NumPy scalar, a list, a keyword) is never cached. An entry found under
the key is used only when it proves that nothing the checks read has changed since it was made:
  - every tensor and int array is unchanged: its `version` (meta/tensor.py: a process-wide counter, new at
    every change of its description: `rebind` for aclSetInputTensorAddr / aclSetRawTensorAddr,
    `describe` for aclInitTensor, `set_values`, and at destroy; the fields cannot be written any other
    way) is the one read before the entry's checks ran: a destroyed, rebound or re-described object
    misses;
  - the memory is still live: the registry's generation (which every free, reset and peer-access
    change bumps) is the one the entry last proved its tensors at; otherwise every tensor of the
    plan is checked again exactly as the uncached path's memory check does (`check_tensor_memory`:
    a range inside a live device allocation, this device's or an enabled peer's), and any failure
    makes the call a miss, so the uncached path reports it with its own code and message. A buffer
    freed and allocated again at the same address passes when the new allocation holds the range,
    as the uncached checks would, and the plan they would build is the same.
Phase 1 reads nothing else: no device memory, no stream, no global setting. The plan is a function
of the arguments' descriptions and values, the device (kind, SM count, architecture) and the live
allocations, so a hit returns what the uncached path would return (tested bit for bit). A failing
GetWorkspaceSize is never cached: any bad argument is a different key or a failed proof, so it
always reaches the checks.

The executor a hit returns is new (not repeatable, not spent) and shares the entry's plan: plans
are frozen, and nothing may modify one in place (a rebinding API must give its executor a new
plan). It starts with the memory check proven at the generation the hit checked, so its execute
re-checks only the tensors' destroyed flags while nothing is freed.

Bounded (`ACLNN_CACHE_LIMIT` entries, CANN's variable, least recently used dropped first; 0 turns
the cache off; read at import and again once every device was reset), thread-safe (a hit takes
no lock; inserting and evicting take one), emptied by aclrtResetDevice of the entry's device and in
a fork() child.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import math
import operator
import os
import threading
from typing import Any, Iterator

from ..meta import tensor as tensor_module
from ..device import current
from ..device.registry import Registry
from ..base.errors import OpError
from ..meta.tensor import aclIntArray, aclTensor

LIMIT_ENV = "ACLNN_CACHE_LIMIT"
DEFAULT_LIMIT = 10000   # CANN's default for ACLNN_CACHE_LIMIT

_KEYABLE = frozenset({aclTensor, aclIntArray, type(None), int, bool, str, float})
_VERSION = operator.attrgetter("version")   # aclTensor's and aclIntArray's: new at every change (meta/tensor.py)

_log = logging.getLogger("aclnn_gpu")


def _limit_from_env() -> int:
    text = os.environ.get(LIMIT_ENV)
    if text is None or not text.strip():
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        _log.warning("%s=%r is not a non-negative integer; using %d", LIMIT_ENV, text, DEFAULT_LIMIT)
        return DEFAULT_LIMIT
    return value


class Entry:
    """One successful GetWorkspaceSize: its plan and what proves a later call equal to it."""

    __slots__ = ("plan", "device", "objects", "versions", "zeros", "memory", "generation")

    def __init__(self, plan: Any, device: Any, args: tuple, zeros: tuple, versions: tuple):
        self.plan = plan
        self.device = device
        self.objects = tuple(a for a in args if type(a) is aclTensor or type(a) is aclIntArray)
        self.versions = versions   # of `objects`, read before the checks ran (a change during them misses)
        self.zeros = zeros    # (position, sign) of every float argument equal to zero
        # the plan's tensors: exactly those its checks proved live (tests/test_executor_cache.py)
        self.memory = tuple((name, t) for name, t in plan.tensors.items() if t is not None)
        self.generation = -1  # the registry generation `memory` was last proven at (-1: not yet)

    def proven(self, args: tuple) -> int | None:
        """The registry generation at which this entry holds for `args` (the same objects as its key's),
        or None when anything the checks read differs."""
        if tuple(map(_VERSION, self.objects)) != self.versions:   # described, rebound or destroyed since
            return None
        for i, sign in self.zeros:
            if math.copysign(1.0, args[i]) != sign:
                return None
        generation = Registry.generation   # read first: a free during the checks below invalidates them
        if self.generation == generation:
            return generation
        from ..plans.plan import check_tensor_memory
        op = self.plan.op
        try:
            for name, tensor in self.memory:
                check_tensor_memory(op, name, tensor, self.device)
        except OpError:
            return None   # the uncached path reports it
        self.generation = generation
        return generation


class ExecutorCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[tuple, Entry] = collections.OrderedDict()
        self.limit = _limit_from_env()
        self.switched_off = 0       # `disabled()` blocks in force: the limit stays 0 whatever configure reads
        self.hits = self.misses = 0   # for the tests and the bench (not exact across threads)

    @staticmethod
    def key(build: Any, device: Any, args: tuple) -> tuple | None:
        """The key of a call, or None when an argument is of a type the cache does not take."""
        types = tuple(map(type, args))
        if not _KEYABLE.issuperset(types):
            return None
        return build, device, types, args

    def lookup(self, key: tuple, args: tuple) -> tuple[Entry, int] | None:
        """The entry of `key` and the generation it was proven at, or None (a miss)."""
        entry = self._entries.get(key)
        if entry is not None:
            generation = entry.proven(args)
            if generation is not None:
                try:
                    self._entries.move_to_end(key)
                except KeyError:   # evicted meanwhile by another thread: still a valid result
                    pass
                self.hits += 1
                return entry, generation
        self.misses += 1
        return None

    @staticmethod
    def versions(args: tuple) -> tuple:
        """The versions of the tensors and int arrays among `args`, in order (read before phase 1 runs)."""
        return tuple(a.version for a in args if type(a) is aclTensor or type(a) is aclIntArray)

    def insert(self, key: tuple, plan: Any, device: Any, args: tuple, versions: tuple) -> None:
        zeros = []
        for i, value in enumerate(args):
            if type(value) is float:
                if value != value:   # NaN: never equal to itself, such a key would never hit
                    return
                if value == 0.0:
                    zeros.append((i, math.copysign(1.0, value)))
        entry = Entry(plan, device, args, tuple(zeros), versions)
        with self._lock:
            if not self.limit:
                return
            if self._entries.get(key) is None:   # a new key: its tensors and arrays drop it when destroyed
                for obj in entry.objects:   # (a dict as an ordered set: O(1) whatever an object's entries)
                    if obj.cache_keys is None:
                        obj.cache_keys = {key: None}
                    else:
                        obj.cache_keys[key] = None
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._evict(self._entries.popitem(last=False))

    @staticmethod
    def _evict(item: tuple[tuple, Entry]) -> None:
        """An entry leaving the cache: its key leaves its objects' lists."""
        key, entry = item
        for obj in entry.objects:
            keys = obj.cache_keys
            if keys is not None:
                keys.pop(key, None)

    def forget(self, keys: dict) -> None:
        """aclDestroyTensor / aclDestroyIntArray: the entries naming that object can never hit again."""
        with self._lock:
            for key in list(keys):
                entry = self._entries.pop(key, None)
                if entry is not None:
                    self._evict((key, entry))

    def drop_device(self, device: Any) -> None:
        """aclrtResetDevice: its entries go (they can never hit again: the device object is stale)."""
        with self._lock:
            for key, entry in [(k, e) for k, e in list(self._entries.items()) if e.device is device]:
                del self._entries[key]
                self._evict((key, entry))

    def clear(self) -> None:
        with self._lock:
            while self._entries:
                self._evict(self._entries.popitem(last=False))

    def configure(self, limit: int | None = None) -> None:
        """Set the bound (None: from ACLNN_CACHE_LIMIT again); entries over it go."""
        with self._lock:
            self.limit = 0 if self.switched_off else _limit_from_env() if limit is None else limit
            while len(self._entries) > self.limit:
                self._evict(self._entries.popitem(last=False))

    def __len__(self) -> int:
        return len(self._entries)

    def after_fork_in_child(self) -> None:
        """A fork() child: the parent's devices are stale there, and a parent thread may have held the lock."""
        self._lock = threading.Lock()
        self._entries = collections.OrderedDict()


cache = ExecutorCache()
tensor_module.forget = cache.forget


def _on_device_reset(device: Any, last: bool) -> None:
    """aclrtResetDevice: the device's entries go; once no device is left, ACLNN_CACHE_LIMIT is read
    again, as the device kind is."""
    if device is not None:
        cache.drop_device(device)
    if last:
        cache.configure()


current.on_reset(_on_device_reset)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=cache.after_fork_in_child)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Every GetWorkspaceSize in the block runs the checks and the plan (and caches nothing), even
    across a reset of every device (which reads ACLNN_CACHE_LIMIT again)."""
    previous = cache.limit
    cache.switched_off += 1
    cache.configure(0)
    try:
        yield
    finally:
        cache.switched_off -= 1
        cache.configure(previous)
