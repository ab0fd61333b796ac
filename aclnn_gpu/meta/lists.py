"""The meta API's other host descriptors (acl_meta.h): `aclFloatArray`, `aclBoolArray`,
`aclTensorList` and `aclScalarList`, their create / destroy functions, and the size getters of
every array and list (aclIntArray's too).

As CANN's: an array copies its values at creation; a list holds the caller's tensors or scalars and
takes them over: destroying the list destroys its members (CANN's aclDestroyTensorList: the
aclTensors in the list need no release of their own). No operator of
this library takes one yet: they exist so that programs written against CANN's meta API run.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from ..base.errors import c_api, fail, live_handle
from ..base.status import aclnnStatus
from .tensor import aclDestroyScalar, aclDestroyTensor, aclIntArray, aclScalar, aclTensor

SUCCESS = aclnnStatus.ACLNN_SUCCESS
NULLPTR = aclnnStatus.ACLNN_ERR_PARAM_NULLPTR
INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID


class _HostList:
    """A read-only tuple of items with CANN's descriptor life (`destroyed`)."""

    __slots__ = ("_items", "destroyed", "__weakref__")

    def __init__(self, items: tuple):
        self._items = items
        self.destroyed = False

    @property
    def values(self) -> tuple:
        return self._items

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._items)}{', destroyed' if self.destroyed else ''})"


class aclFloatArray(_HostList):
    """float values (stored as C floats: float32-rounded)."""


class aclBoolArray(_HostList):
    """bool values."""


class aclTensorList(_HostList):
    """aclTensor objects (destroyed with the list)."""


class aclScalarList(_HostList):
    """aclScalar objects (destroyed with the list)."""


def _items(fn: str, values: Any, what: str) -> tuple:
    if values is None:
        fail(NULLPTR, f"{fn}: value is nullptr")
    try:
        return tuple(values)
    except TypeError:
        fail(INVALID, f"{fn}: value must be a sequence of {what}, got {type(values).__name__}")


def _float32(value: float) -> float:
    import numpy as np
    return float(np.float32(value))


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER, null_result=True)
def aclCreateFloatArray(value: Sequence[float]) -> aclFloatArray | None:
    items = _items("aclCreateFloatArray", value, "floats")
    for v in items:
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            fail(INVALID, f"aclCreateFloatArray: {v!r} is not a float")
    return aclFloatArray(tuple(_float32(v) if math.isfinite(v) else float(v) for v in items))


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER, null_result=True)
def aclCreateBoolArray(value: Sequence[bool]) -> aclBoolArray | None:
    items = _items("aclCreateBoolArray", value, "bools")
    for v in items:
        if not isinstance(v, (bool, numbers.Integral)):
            fail(INVALID, f"aclCreateBoolArray: {v!r} is not a bool")
    return aclBoolArray(tuple(bool(v) for v in items))


def _members(fn: str, value: Any, cls: type, what: str) -> tuple:
    items = _items(fn, value, what)
    for i, item in enumerate(items):
        if item is None:
            fail(NULLPTR, f"{fn}: value[{i}] is nullptr")
        if not isinstance(item, cls):
            fail(INVALID, f"{fn}: value[{i}] is not an {cls.__name__} (a handle that was never created)")
        if getattr(item, "destroyed", False):
            fail(INVALID, f"{fn}: value[{i}] was already destroyed")
    return items


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER, null_result=True)
def aclCreateTensorList(value: Sequence[aclTensor]) -> aclTensorList | None:
    return aclTensorList(_members("aclCreateTensorList", value, aclTensor, "aclTensor"))


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER, null_result=True)
def aclCreateScalarList(value: Sequence[aclScalar]) -> aclScalarList | None:
    return aclScalarList(_members("aclCreateScalarList", value, aclScalar, "aclScalar"))


def _destroy(fn: str, obj: Any, cls: type[_HostList], destroy_member: Any = None) -> int:
    if obj is None:   # CANN: destroying nullptr is a no-op
        return SUCCESS
    live_handle(obj, cls, fn, "array", INVALID)
    obj.destroyed = True
    if destroy_member is not None:   # a list's members go with it (once each: a list may name one twice)
        for member in obj._items:
            if not member.destroyed:
                destroy_member(member)
    return SUCCESS


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclDestroyFloatArray(array: aclFloatArray | None) -> int:
    return _destroy("aclDestroyFloatArray", array, aclFloatArray)


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclDestroyBoolArray(array: aclBoolArray | None) -> int:
    return _destroy("aclDestroyBoolArray", array, aclBoolArray)


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclDestroyTensorList(array: aclTensorList | None) -> int:
    return _destroy("aclDestroyTensorList", array, aclTensorList, aclDestroyTensor)


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclDestroyScalarList(array: aclScalarList | None) -> int:
    return _destroy("aclDestroyScalarList", array, aclScalarList, aclDestroyScalar)


def _size_getter(name: str, cls: type[Any], what: str):
    def get(obj: Any) -> tuple[int, int]:
        if obj is None:
            fail(NULLPTR, f"{name}: {what} is nullptr")
        if not isinstance(obj, cls):
            fail(INVALID, f"{name}: {what} is not an {cls.__name__} (a handle that was never created)")
        if obj.destroyed:
            fail(INVALID, f"{name}: {what} was already destroyed")
        return SUCCESS, len(obj)

    get.__name__ = get.__qualname__ = name
    return c_api(n_out=1, internal=aclnnStatus.ACLNN_ERR_INNER)(get)


aclGetIntArraySize = _size_getter("aclGetIntArraySize", aclIntArray, "array")
aclGetFloatArraySize = _size_getter("aclGetFloatArraySize", aclFloatArray, "array")
aclGetBoolArraySize = _size_getter("aclGetBoolArraySize", aclBoolArray, "array")
aclGetTensorListSize = _size_getter("aclGetTensorListSize", aclTensorList, "tensorList")
aclGetScalarListSize = _size_getter("aclGetScalarListSize", aclScalarList, "scalarList")
