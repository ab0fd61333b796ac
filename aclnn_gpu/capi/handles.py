"""The C ABI's handle table: C's opaque pointers <-> the Python objects they stand for.

Handles are integers from a counter, never Python object addresses, multiples of 16 above
HANDLE_BASE; the table is keyed by `key_of(handle)` (the value rotated right by HANDLE_SHIFT bits,
as the generated C passes it: build.py writes that rotation out). A handle the table does not know
(never created, or destroyed long ago) turns into an `UnknownHandle` object, which the Python API's
own type checks refuse with their usual code; a recently destroyed or spent handle turns into a dead
stand-in of its class (`destroyed` / `spent` set), so the message says what happened. Nothing a C
program passes can make the C ABI dereference an object that is gone. `bridge.py` reads the table
(its written-out wrappers reach into `Handles`' dicts directly, for speed).
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import aclnn_gpu as acl
from aclnn_gpu.executor import aclOpExecutor

HANDLE_BASE = 0x5A0000000000       # handles look like (aligned) pointers and are never NULL
HANDLE_SHIFT = 4                   # handles are multiples of 16 (the generated C rotates by as much)
_MASK64 = (1 << 64) - 1
TOMBSTONES = 1 << 14               # the tombstone ring: a retired handle keeps saying why it is dead
                                   # until a handle created this many handles later retires in its place


class UnknownHandle:
    """What a handle the table does not know becomes: an object of no API type."""

    __slots__ = ("value",)

    def __init__(self, value: int):
        self.value = value

    def __repr__(self) -> str:
        return f"UnknownHandle({hex(self.value)})"


_stand_ins: dict[type, Any] = {}


def _dead_stand_in(obj: Any) -> Any:
    """What a retired handle remembers: for an executor its operator and state (a fresh dead executor
    is made at each use, since the Python API may mark it destroyed), for any other class one shared
    dead object (the API only refuses those); `obj` itself is released."""
    if isinstance(obj, aclOpExecutor):
        return ("executor", obj.op, obj.repeatable, obj.spent, obj.destroyed)
    cls: Any = type(obj)
    dead = _stand_ins.get(cls)
    if dead is None:
        if cls is acl.aclTensor:
            dead = acl.aclTensor((), acl.aclDataType.ACL_FLOAT, (), 0, int(acl.ACL_FORMAT_ND), (), None)
        elif cls is acl.aclIntArray:
            dead = acl.aclIntArray(())
        elif cls in (acl.aclrtStream, acl.aclrtEvent):
            dead = cls(None, None)
        else:
            try:
                dead = cls.__new__(cls)
            except TypeError:
                return obj
            if hasattr(dead, "__dict__"):   # the flags its class's checks read before `destroyed` (HcclComm's forked)
                vars(dead).update({k: v for k, v in vars(obj).items() if type(v) is bool})
        try:
            dead.destroyed = True
        except AttributeError:  # a class with no `destroyed`: remember the object itself
            return obj
        _stand_ins[cls] = dead
    return dead


def _revive(remembered: Any) -> Any:
    if type(remembered) is str:   # a spent single-use executor (its operator: see Handles._remember)
        dead = aclOpExecutor(remembered, None, None)
        dead.spent = True
        return dead
    if type(remembered) is tuple:
        _, op, repeatable, spent, destroyed = remembered
        dead = aclOpExecutor(op, None, None)
        dead.repeatable, dead.spent, dead.destroyed = repeatable, spent, destroyed
        return dead
    return remembered


def key_of(handle: int) -> int:
    """The table's key of a C handle value: the value rotated right by HANDLE_SHIFT bits (the
    generated C passes handle arguments this way). A handle's low bits are zero, so its key is
    HANDLE_BASE's key plus the handle's serial number: consecutive integers, which a dict spreads over
    its whole table (the handles themselves, multiples of 16, share one slot in 16 and collide). An
    unaligned value keeps its low bits in the key's top bits: it never meets a live key."""
    return ((handle >> HANDLE_SHIFT) | (handle << (64 - HANDLE_SHIFT))) & _MASK64


def handle_of(key: int) -> int:
    return ((key << HANDLE_SHIFT) | (key >> (64 - HANDLE_SHIFT))) & _MASK64


class Handles:
    """Live handles -> objects, objects -> their handle, and a bounded memory of retired handles, keyed
    by `key_of(handle)` (what the generated C passes: the look-up is one dict get of that integer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(key_of(HANDLE_BASE) + 1)
        self._live: dict[int, Any] = {}
        self._of: dict[int, int] = {}          # id(obj) -> handle (objects in _live stay alive)
        # retired keys and what they remember, at place key % TOMBSTONES (keys are consecutive, so a
        # place is taken again only by a handle created TOMBSTONES handles later): two list stores a
        # retirement, where a bounded dict of tombstones cost ~3k instructions a call in its churn
        self._dead_key: list[int] = [0] * TOMBSTONES
        self._dead_record: list[Any] = [None] * TOMBSTONES

    def new(self, obj: Any) -> int:
        """The handle (the C value) of `obj`: the one it has, or a new one."""
        if obj is None:
            return 0
        with self._lock:
            handle = self._of.get(id(obj))
            if handle is None:
                key = next(self._counter)
                self._live[key] = obj
                handle = self._of[id(obj)] = key << HANDLE_SHIFT
            return handle

    def _remember(self, key: int, record: Any) -> None:
        """Retired `key` remembers `record` (the generated execute wrappers write this out for a spent
        executor, whose record is its operator's name: `_revive` knows the rest, and a str is not
        tracked by the cyclic collector as a tuple per call would be)."""
        place = key % TOMBSTONES
        self._dead_key[place] = key
        self._dead_record[place] = record

    def get(self, handle: int) -> Any:
        """The object of C handle value `handle` (None for NULL, a stand-in or UnknownHandle)."""
        return self.get_key(key_of(handle))

    def get_key(self, key: int) -> Any:
        if key == 0:
            return None
        obj = self._live.get(key)
        if obj is None:
            place = key % TOMBSTONES
            if self._dead_key[place] == key:
                return _revive(self._dead_record[place])
            return UnknownHandle(handle_of(key))
        return obj

    def retire(self, key: int, obj: Any) -> None:
        """The handle of `key` (whose object, or revived stand-in, is `obj`) is destroyed or spent."""
        with self._lock:
            if self._live.pop(key, None) is not None:
                self._of.pop(id(obj), None)   # (a GetWorkspaceSize executor has no reverse entry)
            elif self._dead_key[key % TOMBSTONES] != key:
                return
            self._remember(key, _dead_stand_in(obj))   # (a stand-in's new state too: spent, then destroyed)

    def retire_object(self, obj: Any) -> None:
        """`obj`'s handle, if it has one, is destroyed (a list's members, destroyed with the list)."""
        handle = self._of.get(id(obj))
        if handle is not None:
            self.retire(key_of(handle), obj)

    def counts(self) -> tuple[int, int]:
        """(live handles, remembered retired handles): for the leak tests."""
        return len(self._live), sum(1 for key in self._dead_key if key)


handles = Handles()


def _reinit_lock_in_child() -> None:
    """A fork() child: a thread of the parent may have held the handle table's lock at fork time."""
    handles._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_lock_in_child)
