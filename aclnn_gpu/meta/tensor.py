"""Descriptors over device memory: `aclTensor` (a strided view of a storage), `aclIntArray` and
`aclScalar`, with CANN's create/destroy functions and getters (acl_meta.h).

A descriptor never owns memory. Creating one validates only its own fields (as CANN does); the
memory range a tensor names is checked against the live allocations by each operator, when the
tensor is used.
"""
from __future__ import annotations

import itertools
import math
import numbers
import operator
from typing import Any, Sequence

import numpy as np

from ..base import dtypes
from ..base.errors import c_api, fail, live_handle
from ..base.status import aclDataType, aclFormat, aclnnStatus

INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID
MAX_DIMS = 64


def forget(keys: dict) -> None:
    """Drop executor_cache's entries under `keys` (replaced by executor_cache when it is imported)."""
    return None
  # a descriptor sanity bound; operators enforce their own rank limits


def _int_list(values: Any, what: str) -> tuple[int, ...]:
    if values is None:
        return ()
    if isinstance(values, np.ndarray):
        values = values.tolist()
    try:
        out = tuple(values)
    except TypeError:
        fail(INVALID, f"aclCreateTensor: {what} must be a sequence of integers")
    for v in out:
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            fail(INVALID, f"aclCreateTensor: {what} must hold integers, got {v!r}")
    return tuple(int(v) for v in out)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


_VERSIONS = itertools.count(1)   # every value used once: a description never gets an old version back
# How many rebinds the process has made (one cell, read by phase 2): an executor whose count is current
# has no tensor that moved since it last looked, so execute compares versions only after a rebind.
REBINDS = [0]


def _field(name: str) -> Any:
    """A read-only view of a private slot (a C-level getter: about as fast as the slot itself)."""
    return property(operator.attrgetter(name), doc="(read-only: see the class docstring)")


def _set_destroyed(obj: Any, value: bool) -> None:
    obj._destroyed = value
    obj.version = next(_VERSIONS)


# destroyed: read as fast as a slot; setting it (aclDestroyTensor, aclDestroyIntArray) is a change
_DESTROYED: Any = property(operator.attrgetter("_destroyed"), _set_destroyed)


class aclTensor:
    """A view `storage[offset + sum(i_k * stride_k)]` of `dtype` elements starting at `data`.

    The description (shape, dtype, strides, offset, format, storage shape, data address) is read-only:
    it changes only through `rebind` (a new data address: what aclSetInputTensorAddr and
    aclSetRawTensorAddr do) or `describe` (everything: aclInitTensor), and being destroyed. Each change
    gives the tensor a new `version` (a process-wide counter, never reused), so phase 1's executor
    cache proves a tensor unchanged by one number (executor/cache.py), and forgets the tensor's last
    memory check (`memory_checked`: it was for the old range)."""

    __slots__ = ("_shape", "_dtype", "_strides", "_offset", "_format", "_storage_shape", "_data", "_destroyed",
                 "version", "rank", "numel", "negative_strides", "_itemsize", "_span", "_byte_span", "_contiguous",
                 "memory_checked", "cache_keys", "__weakref__")

    shape: tuple[int, ...] = _field("_shape")
    dtype: aclDataType = _field("_dtype")
    strides: tuple[int, ...] = _field("_strides")
    offset: int = _field("_offset")
    format: int = _field("_format")
    storage_shape: tuple[int, ...] = _field("_storage_shape")
    data: int | None = _field("_data")

    # The derived values the checks of both phases need are computed once per description: rank,
    # numel, itemsize, and the element and byte spans (lazily).
    def __init__(self, shape: tuple[int, ...], dtype: aclDataType, strides: tuple[int, ...], offset: int,
                 fmt: int, storage_shape: tuple[int, ...], data: int | None):
        self._destroyed = False
        self.cache_keys: dict | None = None       # the executor_cache keys naming it (dropped at destroy)
        self.describe(shape, dtype, strides, offset, fmt, storage_shape, data)

    def describe(self, shape: tuple[int, ...], dtype: aclDataType, strides: tuple[int, ...], offset: int,
                 fmt: int, storage_shape: tuple[int, ...], data: int | None) -> None:
        """Set the whole description (validated by the caller, as aclCreateTensor validates it)."""
        self._shape = shape
        self._dtype = dtype
        self._strides = strides
        self._offset = offset
        self._format = fmt
        self._storage_shape = storage_shape
        self._data = data
        self.version = next(_VERSIONS)
        self.memory_checked: tuple | None = None  # (registry, generation) of the last passed memory check
        self.rank = len(shape)
        self.numel = math.prod(shape)
        self.negative_strides = any(s < 0 for s in strides)
        self._itemsize = dtypes.itemsize(dtype) if dtypes.has_numpy(dtype) else None
        self._span: tuple[int, int] | None = None
        self._byte_span: tuple[int, int] | None = None
        self._contiguous: bool | None = None

    def rebind(self, data: int | None) -> None:
        """The same view of another storage address (executors planned on the old one follow it at
        their next execute: `executor.follow_rebinds`)."""
        self._data = data
        self.memory_checked = None
        self.version = next(_VERSIONS)
        REBINDS[0] += 1   # (a lost update between racing threads still changes the count)

    destroyed: bool = _DESTROYED

    @property
    def itemsize(self) -> int:
        size = self._itemsize
        return dtypes.itemsize(self.dtype) if size is None else size  # (raises for a dtype with no itemsize)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The NumPy dtype of its elements (base/dtypes.py's table; raises for a dtype NumPy lacks)."""
        return np.dtype(dtypes.to_numpy(self.dtype))

    def element_span(self) -> tuple[int, int]:
        """[lo, hi) in elements from `data` that the view touches (hi == lo for an empty view)."""
        span = self._span
        if span is None:
            if self.numel == 0:
                span = (self.offset, self.offset)
            else:
                lo = hi = self.offset
                for n, s in zip(self.shape, self.strides):
                    reach = (n - 1) * s
                    lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
                span = (lo, hi + 1)
            self._span = span
        return span

    def byte_span(self) -> tuple[int, int]:
        """(offset of the first byte from `data`, number of bytes) of the memory the view touches."""
        span = self._byte_span
        if span is None:
            lo, hi = self.element_span()
            size = self.itemsize
            span = self._byte_span = (lo * size, (hi - lo) * size)
        return span

    def is_contiguous(self) -> bool:
        dense = self._contiguous   # computed once: phase 1 asks it of every operand on every call
        if dense is None:
            dense = self._contiguous = all(s == c for n, s, c in zip(self.shape, self.strides,
                                                                    contiguous_strides(self.shape)) if n != 1)
        return dense

    def __repr__(self) -> str:
        state = " destroyed" if self.destroyed else ""
        return (f"aclTensor(shape={self.shape}, dtype={dtypes.name(self.dtype)}, strides={self.strides}, "
                f"offset={self.offset}, data={hex(self.data) if self.data else None}{state})")


@c_api(null_result=True)
def aclCreateTensor(viewDims: Sequence[int], dataType: int, stride: Sequence[int] | None, offset: int,
                    format: int, storageDims: Sequence[int] | None, tensorData: int | None) -> aclTensor | None:
    """CANN's aclCreateTensor: returns the tensor, or None (C's NULL) with a recent-error message."""
    shape = _int_list(viewDims, "viewDims")
    if len(shape) > MAX_DIMS or any(n < 0 for n in shape):
        fail(INVALID, f"aclCreateTensor: viewDims {list(shape)} must be non-negative (at most {MAX_DIMS} dims)")
    if not isinstance(dataType, numbers.Integral) or not dtypes.is_known(int(dataType)):
        fail(INVALID, f"aclCreateTensor: dataType {dataType!r} is not an aclDataType")
    strides = contiguous_strides(shape) if stride is None else _int_list(stride, "stride")
    if len(strides) != len(shape):
        fail(INVALID, f"aclCreateTensor: stride has {len(strides)} entries for {len(shape)} viewDims")
    if not isinstance(offset, numbers.Integral) or isinstance(offset, bool) or offset < 0:
        fail(INVALID, f"aclCreateTensor: offset {offset!r} must be a non-negative integer (elements)")
    if not isinstance(format, numbers.Integral) or int(format) not in aclFormat._value2member_map_:
        fail(INVALID, f"aclCreateTensor: format {format!r} is not an aclFormat")
    storage = shape if storageDims is None else _int_list(storageDims, "storageDims")
    if any(n < 0 for n in storage):
        fail(INVALID, f"aclCreateTensor: storageDims {list(storage)} must be non-negative")
    if tensorData is not None and (not isinstance(tensorData, numbers.Integral) or isinstance(tensorData, bool)
                                   or tensorData < 0):
        fail(INVALID, f"aclCreateTensor: tensorData {tensorData!r} must be an address (int) or None")
    return aclTensor(shape, aclDataType(int(dataType)), strides, int(offset), int(format), storage,
                     int(tensorData) if tensorData else None)


@c_api()
def aclDestroyTensor(tensor: aclTensor | None) -> int:
    if tensor is None:
        return aclnnStatus.ACLNN_SUCCESS
    live_handle(tensor, aclTensor, "aclDestroyTensor", "tensor", INVALID)
    _set_destroyed(tensor, True)   # (the `destroyed` property's setter)
    if tensor.cache_keys:   # its cache entries can never hit again: they go now
        forget(tensor.cache_keys)
        tensor.cache_keys = None
    return aclnnStatus.ACLNN_SUCCESS


def _getter(name: str, attr: str):
    def get(tensor: aclTensor) -> tuple[int, Any]:
        if tensor is None:
            fail(aclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{name}: tensor is null")
        if not isinstance(tensor, aclTensor) or tensor.destroyed:
            fail(INVALID, f"{name}: not a live aclTensor")
        value = getattr(tensor, attr)
        return aclnnStatus.ACLNN_SUCCESS, list(value) if isinstance(value, tuple) else value

    get.__name__ = get.__qualname__ = name  # before c_api, whose messages name the function
    return c_api(n_out=1, internal=aclnnStatus.ACLNN_ERR_INNER)(get)


aclGetViewShape = _getter("aclGetViewShape", "shape")
aclGetViewStrides = _getter("aclGetViewStrides", "strides")
aclGetViewOffset = _getter("aclGetViewOffset", "offset")
aclGetStorageShape = _getter("aclGetStorageShape", "storage_shape")
aclGetDataType = _getter("aclGetDataType", "dtype")
aclGetFormat = _getter("aclGetFormat", "format")


class aclIntArray:
    """A host-side array of int64 values (copied at creation, as CANN does). `values` is read-only
    (`set_values` changes them, giving the array a new `version`, as aclTensor's)."""

    __slots__ = ("_values", "_destroyed", "version", "cache_keys", "__weakref__")

    values: tuple[int, ...] = _field("_values")
    destroyed: bool = _DESTROYED

    def __init__(self, values: tuple[int, ...]):
        self._destroyed = False
        self.cache_keys: dict | None = None   # as aclTensor's
        self.set_values(values)

    def set_values(self, values: tuple[int, ...]) -> None:
        self._values = values
        self.version = next(_VERSIONS)

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"aclIntArray({list(self.values)})"


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


@c_api(null_result=True)
def aclCreateIntArray(values: Sequence[int]) -> aclIntArray | None:
    if values is None:
        fail(aclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "aclCreateIntArray: values is null")
    if isinstance(values, np.ndarray):
        values = values.tolist()
    try:
        items = tuple(values)
    except TypeError:
        fail(INVALID, "aclCreateIntArray: values must be a sequence of integers")
    for v in items:
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or not INT64_MIN <= v <= INT64_MAX:
            fail(INVALID, f"aclCreateIntArray: {v!r} is not an int64 value")
    return aclIntArray(tuple(int(v) for v in items))


@c_api()
def aclDestroyIntArray(array: aclIntArray | None) -> int:
    if array is None:
        return aclnnStatus.ACLNN_SUCCESS
    live_handle(array, aclIntArray, "aclDestroyIntArray", "array", INVALID)
    _set_destroyed(array, True)
    if array.cache_keys:
        forget(array.cache_keys)
        array.cache_keys = None
    return aclnnStatus.ACLNN_SUCCESS


class aclScalar:
    __slots__ = ("value", "dtype", "destroyed")

    def __init__(self, value: Any, dtype: aclDataType):
        self.value = value
        self.dtype = dtype
        self.destroyed = False


@c_api(null_result=True)
def aclCreateScalar(value: Any, dataType: int) -> aclScalar | None:
    """The value is given directly (Python has no void*); it is converted to `dataType` and kept."""
    if value is None:
        fail(aclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "aclCreateScalar: value is null")
    if not dtypes.has_numpy(dataType):
        fail(INVALID, f"aclCreateScalar: dataType {dataType!r} is not supported")
    return aclScalar(dtypes.to_numpy(dataType).type(value), aclDataType(dataType))


@c_api()
def aclDestroyScalar(scalar: aclScalar | None) -> int:
    if scalar is None:   # CANN: destroying nullptr is a no-op
        return aclnnStatus.ACLNN_SUCCESS
    live_handle(scalar, aclScalar, "aclDestroyScalar", "scalar", INVALID)
    scalar.destroyed = True
    return aclnnStatus.ACLNN_SUCCESS


def _live_tensor(tensor: Any, fn: str) -> aclTensor:
    if tensor is None:
        fail(aclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{fn}: tensor is nullptr")
    if not isinstance(tensor, aclTensor):
        fail(INVALID, f"{fn}: tensor is not an aclTensor (a handle that was never created)")
    if tensor.destroyed:
        fail(INVALID, f"{fn}: tensor was already destroyed (aclDestroyTensor)")
    return tensor


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclSetRawTensorAddr(tensor: aclTensor, addr: int | None) -> int:
    """The tensor's data address becomes `addr` (`rebind`: a new version, which executor_cache sees)."""
    t = _live_tensor(tensor, "aclSetRawTensorAddr")
    if addr is not None and (not isinstance(addr, numbers.Integral) or isinstance(addr, bool) or addr < 0):
        fail(INVALID, f"aclSetRawTensorAddr: addr {addr!r} must be a device address or nullptr")
    t.rebind(int(addr) if addr else None)
    return aclnnStatus.ACLNN_SUCCESS


@c_api(n_out=1, internal=aclnnStatus.ACLNN_ERR_INNER)
def aclGetRawTensorAddr(tensor: aclTensor) -> tuple[int, int | None]:
    return aclnnStatus.ACLNN_SUCCESS, _live_tensor(tensor, "aclGetRawTensorAddr").data
