"""The C ABI's argument conversions that are more than a handle look-up: int64 arrays with their
lengths (bounded before anything is read), and the caller's host memory behind the copies and
aclCreateScalar (`ADAPTERS`, by C function name), turned into what a Python caller would pass.
`bridge.py` applies them to the C arguments before the Python API is called.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu.meta.tensor import MAX_DIMS

from .custom import CError
from .table import Entry

INVALID = int(acl.ACLNN_ERR_PARAM_INVALID)
RT_PARAM = int(acl.ACL_ERROR_RT_PARAM_INVALID)
# The most items the C ABI reads from a caller's array (aclCreateIntArray, aclCreateTensorList, ...):
# a count beyond it is refused before anything is read (a length of UINT64_MAX would otherwise walk
# off the caller's array until the process dies).
MAX_ARRAY_ITEMS = 1 << 24


def int_array(ffi: Any, entry: Entry, p: Any, length: str) -> Callable[[Any, int], Any]:
    """The converter of int64 array `p` (C pointer and its length) to a list."""
    dims, NULL, unpack = entry.name == "aclCreateTensor", ffi.NULL, ffi.unpack

    def array(pointer: Any, n: int) -> Any:
        if dims and n > MAX_DIMS:
            raise CError(INVALID, f"{entry.name}: {length} {n} exceeds {MAX_DIMS} dims")
        if n > MAX_ARRAY_ITEMS:
            raise CError(INVALID, f"{entry.name}: {length} {n} exceeds {MAX_ARRAY_ITEMS} items, the most the C ABI "
                                  "reads from an array")
        if pointer == NULL:
            if n and p.name in ("viewDims", "storageDims"):
                raise CError(INVALID, f"{entry.name}: {p.name} is null but {length} is {n}")
            return None
        return unpack(pointer, n)
    return array


# (destination, source) of each copy kind: which sides may be the caller's host memory
_HOST_SIDES = {0: (True, True), 1: (False, True), 2: (True, False), 4: (True, True), 5: (False, True)}


def _host_buffers(ffi: Any, args: list, kind: Any, reaches: tuple[int, int], fn: str) -> list:
    """A copy's dst (args[0]) and src (args[2]) that may be host memory under `kind` become buffers of
    `reaches` bytes when they are the caller's: no device of this process holds them (another device's
    pointer, under ACL_MEMCPY_DEFAULT, is device memory the CPU must not read). A reach beyond any
    address space (count SIZE_MAX, a height of 2^61) is refused before a buffer is made of it."""
    host = _HOST_SIDES.get(kind, (False, False))
    try:
        acl.runtime.get_device()
    except Exception:  # noqa: BLE001 - no device: the Python API reports it with its own code
        return args
    find = acl.runtime.find_allocation
    for position, is_host, reach in ((0, host[0], reaches[0]), (2, host[1], reaches[1])):
        addr = args[position]
        if is_host and addr is not None and reach > 0 and find(addr, 0) is None:
            if reach > sys.maxsize:
                raise CError(RT_PARAM, f"{fn}: {'dst' if position == 0 else 'src'} would span {reach} bytes of host "
                                       f"memory from {hex(addr)}, more than an address space holds ({sys.maxsize})")
            args[position] = ffi.buffer(ffi.cast("char *", addr), reach)
    return args


def _memcpy_host_sides(ffi: Any, args: list) -> list:
    """aclrtMemcpy(Async)(dst, destMax, src, count, kind[, stream]): a C host pointer that is not an
    allocation of this library (a std::vector's data()) is the caller's memory: it is handed to the
    Python API as a buffer of `count` bytes, as a Python caller hands a NumPy array."""
    count, kind = args[3], args[4]
    return _host_buffers(ffi, args, kind, (count, count), "aclrtMemcpy")


def _scalar_value(ffi: Any, args: list) -> list:
    """aclCreateScalar(value, dataType): the value is read from host memory as `dataType`."""
    addr, dtype = args
    if addr is not None and dtypes.has_numpy(dtype):
        import numpy as np
        args[0] = np.frombuffer(ffi.buffer(ffi.cast("char *", addr), dtypes.itemsize(dtype)),
                                dtypes.to_numpy(dtype))[0].item()
    return args


def _memcpy2d_host_sides(ffi: Any, args: list) -> list:
    """aclrtMemcpy2d(Async)(dst, dpitch, src, spitch, width, height, kind[, stream]): a host side that is
    not an allocation of this library is the caller's memory, a buffer of the bytes its rows reach."""
    _, dpitch, _, spitch, width, height, kind = args[:7]

    def reach(pitch: int) -> int:
        return pitch * (height - 1) + width if height else 0
    return _host_buffers(ffi, args, kind, (reach(dpitch), reach(spitch)), "aclrtMemcpy2d")


ADAPTERS: dict[str, Callable[[Any, list], list]] = {
    "aclrtMemcpy": _memcpy_host_sides, "aclrtMemcpyAsync": _memcpy_host_sides, "aclCreateScalar": _scalar_value,
    "aclrtMemcpy2d": _memcpy2d_host_sides, "aclrtMemcpy2dAsync": _memcpy2d_host_sides,
}
