"""Host arrays in and out of device tensors through the public C-style API, the way Ascend's sample
programs do it (aclrtMalloc, aclrtMemcpy, aclCreateTensor, the two phases, aclrtSynchronizeStream).

`DeviceArrays` is what the demo, the benchmarks, the example programs and the tests build on: it
owns a stream and every allocation it makes, and frees them all at `close()`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..base import dtypes
from ..base.errors import aclGetRecentErrMsg
from ..runtime import (aclrtCreateStream, aclrtDestroyStream, aclrtFree, aclrtMalloc, aclrtMemcpy,
                      aclrtSynchronizeStream)
from ..base.status import aclFormat, aclrtMemcpyKind, aclrtMemMallocPolicy
from ..meta.tensor import aclCreateIntArray, aclCreateTensor, aclDestroyIntArray, aclDestroyTensor, aclTensor

H2D = aclrtMemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE
D2H = aclrtMemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST


class SampleError(RuntimeError):
    pass


def _check(status: int, what: str) -> None:
    if status != 0:
        raise SampleError(f"{what} failed with {int(status)}: {aclGetRecentErrMsg()}")


class DeviceArrays:
    def __init__(self) -> None:
        status, self.stream = aclrtCreateStream()
        _check(status, "aclrtCreateStream")
        self.pointers: list[int] = []
        self.tensors: list[aclTensor] = []
        self.arrays: list[Any] = []

    def malloc(self, nbytes: int) -> int:
        status, ptr = aclrtMalloc(max(int(nbytes), 1), aclrtMemMallocPolicy.ACL_MEM_MALLOC_HUGE_FIRST)
        _check(status, "aclrtMalloc")
        self.pointers.append(ptr)
        return ptr

    def tensor(self, array: Any, *, strided: bool = False, offset: int = 0, fmt: int = aclFormat.ACL_FORMAT_ND,
               dtype_code: int | None = None) -> aclTensor:
        """A device tensor holding `array`. `strided`: a non-contiguous view (every other element of
        the last dim of a wider storage) with `offset` leading elements."""
        array = np.asarray(array)
        code = dtypes.from_numpy(array.dtype) if dtype_code is None else dtype_code
        if strided and array.ndim:
            storage_shape = array.shape[:-1] + (array.shape[-1] * 2 + 1,)
            storage = np.full(storage_shape, np.nan if array.dtype.kind == "f" else 0, array.dtype)
            storage[..., 1::2][..., :array.shape[-1]] = array
            flat = np.concatenate([np.zeros(offset, array.dtype), storage.reshape(-1)])
            strides = [int(s) for s in np.array(storage.strides) // array.itemsize]
            strides[-1] = 2
            view_offset, storage_dims = offset + 1, [flat.size]
        else:
            flat = np.concatenate([np.zeros(offset, array.dtype), np.ascontiguousarray(array).reshape(-1)])
            strides, view_offset, storage_dims = None, offset, list(array.shape)
        ptr = self.malloc(flat.nbytes)
        if flat.nbytes:
            _check(aclrtMemcpy(ptr, flat.nbytes, flat, flat.nbytes, H2D), "aclrtMemcpy")
        tensor = aclCreateTensor(array.shape, code, strides, view_offset, fmt, storage_dims, ptr)
        if tensor is None:
            raise SampleError(f"aclCreateTensor failed: {aclGetRecentErrMsg()}")
        self.tensors.append(tensor)
        return tensor

    def empty(self, shape: Sequence[int], dtype: Any, fill: float = np.nan, **kwargs: Any) -> aclTensor:
        """An output tensor filled with `fill` (NaN by default, so an unwritten element shows)."""
        return self.tensor(np.full(tuple(shape), fill, np.dtype(dtype)), **kwargs)

    def int_array(self, values: Sequence[int]) -> Any:
        array = aclCreateIntArray([int(v) for v in values])
        if array is None:
            raise SampleError(f"aclCreateIntArray failed: {aclGetRecentErrMsg()}")
        self.arrays.append(array)
        return array

    def read(self, tensor: aclTensor) -> np.ndarray:
        """The values of a (possibly strided) device tensor, as a new host array."""
        dtype = dtypes.to_numpy(tensor.dtype)
        if tensor.numel == 0:
            return np.empty(tensor.shape, dtype)
        _, hi = tensor.element_span()
        host = np.empty(hi, dtype)
        _check(aclrtMemcpy(host, host.nbytes, tensor.data, host.nbytes, D2H), "aclrtMemcpy")
        return np.lib.stride_tricks.as_strided(host[tensor.offset:], tensor.shape,
                                               [s * dtype.itemsize for s in tensor.strides]).copy()

    def raw(self, tensor: aclTensor) -> bytes:
        """Every byte of the storage a tensor spans (to prove a failed call left it untouched)."""
        _, hi = tensor.element_span()
        nbytes = max(hi, 1) * tensor.itemsize
        host = bytearray(nbytes)
        aclrtMemcpy(host, nbytes, tensor.data, nbytes, D2H)
        return bytes(host)

    def prepare(self, get_workspace_size: Callable[..., Any], *args: Any) -> tuple[int, int | None, int, Any]:
        """Phase 1 and the workspace: (status, workspace, workspace_size, executor)."""
        status, workspace_size, executor = get_workspace_size(*args)
        if status:
            return status, None, 0, None
        workspace = self.malloc(workspace_size) if workspace_size else None
        return 0, workspace, workspace_size, executor

    def run(self, get_workspace_size: Callable[..., Any], execute: Callable[..., int], *args: Any) -> int:
        """Both phases and a synchronize; returns the first non-zero status (0 on success)."""
        status, workspace, workspace_size, executor = self.prepare(get_workspace_size, *args)
        if status:
            return status
        status = execute(workspace, workspace_size, executor, self.stream)
        if status:
            return status
        return aclrtSynchronizeStream(self.stream)

    def close(self) -> None:
        aclrtSynchronizeStream(self.stream)
        for tensor in self.tensors:
            aclDestroyTensor(tensor)
        for array in self.arrays:
            aclDestroyIntArray(array)
        for ptr in self.pointers:
            aclrtFree(ptr)
        aclrtDestroyStream(self.stream)
        self.tensors, self.arrays, self.pointers = [], [], []

    def __enter__(self) -> "DeviceArrays":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
