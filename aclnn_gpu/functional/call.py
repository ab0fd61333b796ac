"""One functional call through the two-phase API (`Call`): the caller's arrays lent to the library
(zero-copy where their memory already lives where the device computes) and described as aclTensors,
fresh outputs, GetWorkspaceSize, the execute call on the stream, the wait, the results as the caller's
array kind, and what the call cache (functional/cache.py) keeps of a first call.

An operator's body (aclnn_gpu/ops/<family>/functional.py) sees only `tensor`, `output`, `int_array`,
`run` and `result`: a `Replay` (functional/replay.py) and aclnn_gpu.torch's `TorchCall` offer the same.

Part of layer 14, "functional" (docs/DESIGN.md, "Import layers").
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import numpy as np

from . import cache as call_cache
from .arrays import GpuOutput, INVALID, array_kind, from_numpy, gpu_of, host_operand, int_list, to_cupy
from ..base import dtypes
from ..base.errors import AclnnError, OpError, aclGetRecentErrMsg, check_status
from ..base.status import aclError, aclFormat
from ..executor import aclOpExecutor
from ..meta.tensor import aclCreateIntArray, aclCreateTensor, aclIntArray, aclTensor
from ..runtime import aclrtStream, get_device, resolve_stream


def synchronize(impl: Any, name: str) -> None:
    """Wait for a call's stream; a failure of its queued work is the call's AclnnError."""
    waited(impl.synchronize, name)


def waited(wait: Callable[[], Any], name: str) -> Any:
    """`wait()`, with a failure of the stream's queued work raised as the call's AclnnError."""
    try:
        return wait()
    except OpError as e:
        raise AclnnError(e.status, e.message) from None
    except Exception as e:  # noqa: BLE001
        raise AclnnError(aclError.ACL_ERROR_RT_INTERNAL_ERROR, f"{name}: queued work failed: {e}") from None


class Call:
    """One functional call: lends the caller's arrays to the library, runs the two phases, cleans up.

    Memory that already lives where the device computes is lent zero-copy (host arrays on the cpu
    and emulated devices; CuPy arrays and CUDA tensors on the cuda device): its range is registered
    with the device's allocation registry for the length of the call. Anything else is copied.
    With `record` (the first call of a signature on the cpu device) it also notes what call_cache
    keeps: the descriptors, the plan and each operand's byte range (`entry()`).
    """

    def __init__(self, name: str, stream: aclrtStream | None, record: bool = False,
                 prepared: dict[int, np.ndarray] | None = None):
        self.name = name
        self.prepared = prepared or {}   # id(argument) -> its host array, from the call's signature
        self.device = get_device()
        self.on_gpu = self.device.kind == "cuda"
        self.stream = stream
        self.borrowed: list[int] = []
        self.owned: list[int] = []
        self.keep: list[Any] = []
        self.kind = "numpy"
        self.gpu_inputs = False    # an array argument lives on a GPU (the results stay there)
        self.record = record       # False once anything makes the signature uncacheable
        self.tensors: list[aclTensor] = []
        self.layouts: list[tuple] = []
        self.outputs: list[tuple[aclTensor, tuple[int, ...], np.dtype]] = []
        self.int_arrays: list[aclIntArray] = []
        self.slots: list[tuple[int, int]] = []   # each operand's byte range, in call order
        self.written = 0                         # bit k: slot k is an output with bytes
        self.plan: Any = None
        self.workspace = 0                       # the workspace's address (0: none)

    def _lend(self, address: int, shape: Sequence[int], byte_strides: Sequence[int], itemsize: int,
              owner: Any) -> bool:
        """Register [address, address + span) for this call; False when it partly overlaps an allocation."""
        span = call_cache.span(shape, byte_strides, itemsize)
        if span == 0:
            return True
        raw = owner if self.on_gpu else np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(address))
        try:
            if self.device.registry.borrow(address, span, raw) is not None:
                self.borrowed.append(address)
        except ValueError:
            return False
        self.keep.append(owner)
        return True

    def _host_address(self, array: np.ndarray) -> tuple[int, np.ndarray]:
        """(address, the array actually described) of a host array on a host-memory device."""
        if array.size and not self._lend(array.ctypes.data, array.shape, array.strides, array.itemsize, array):
            array = np.ascontiguousarray(array).copy()
            self._lend(array.ctypes.data, array.shape, array.strides, array.itemsize, array)
        return (array.ctypes.data if array.size else 0), array

    def _gpu_address(self, array: Any) -> tuple[int, Any]:
        if any(s < 0 or s % array.itemsize for s in array.strides):
            import cupy
            array = cupy.ascontiguousarray(array)
        if array.size and not self._lend(array.data.ptr, array.shape, array.strides, array.itemsize, array):
            array = array.copy()
            self._lend(array.data.ptr, array.shape, array.strides, array.itemsize, array)
        return (array.data.ptr if array.size else 0), array

    def _describe(self, address: int, shape: Sequence[int], byte_strides: Sequence[int], dtype: np.dtype,
                  fmt: int, name: str) -> aclTensor:
        try:
            code = dtypes.from_numpy(dtype)
        except KeyError:
            raise AclnnError(INVALID, f"{self.name}: {name} has unsupported dtype {dtype}") from None
        strides = [s // dtype.itemsize for s in byte_strides]
        tensor = aclCreateTensor(tuple(shape), code, strides, 0, fmt, tuple(shape), address or None)
        if tensor is None:
            raise AclnnError(INVALID, f"{self.name}: {name}: {aclGetRecentErrMsg()}")
        return tensor

    def tensor(self, array: Any, name: str, fmt: int = aclFormat.ACL_FORMAT_ND) -> aclTensor:
        if array is None:
            return None  # type: ignore[return-value]
        if self.kind == "numpy":
            self.kind = array_kind(array)
        if self.on_gpu:
            self.gpu_inputs = self.gpu_inputs or gpu_of(array) is not None
            gpu, dtype = to_cupy(array)
            address, gpu = self._gpu_address(gpu)
            return self._describe(address, gpu.shape, gpu.strides, dtype, fmt, name)
        operand = self.prepared.get(id(array))
        if operand is None:
            operand = host_operand(array)
        address, host = self._host_address(operand)
        tensor = self._describe(address, host.shape, host.strides, host.dtype, fmt, name)
        if self.record:
            self.record = host is operand   # a copy (it straddled an allocation) is not the caller's layout
            self.tensors.append(tensor)
            self.layouts.append((host.shape, host.strides, host.dtype))
            self.slots.append((address, address + call_cache.span(host.shape, host.strides, host.itemsize)))
        return tensor

    def output(self, shape: Sequence[int], dtype: np.dtype, fmt: int = aclFormat.ACL_FORMAT_ND
               ) -> tuple[aclTensor, Any]:
        """A fresh output tensor and its handle for `result()`."""
        dtype = np.dtype(dtype)
        if self.on_gpu:
            import cupy
            storage = np.uint16 if dtype == dtypes.bfloat16 else dtype
            handle: Any = GpuOutput(cupy.empty(tuple(shape), storage), dtype)
            address, _ = self._gpu_address(handle.array)
            strides = tuple(handle.array.strides)
        else:
            handle = np.empty(tuple(shape), dtype)
            address, _ = self._host_address(handle)
            strides = handle.strides
        tensor = self._describe(address, tuple(shape), strides, dtype, fmt, "output")
        if self.record:
            self.outputs.append((tensor, tuple(shape), dtype))
            self.written |= (1 << len(self.slots)) if handle.nbytes else 0
            self.slots.append((address, address + handle.nbytes))
        return tensor, handle

    def int_array(self, values: Any, name: str) -> aclIntArray:
        array = aclCreateIntArray(int_list(self.name, name, values))
        if array is None:
            raise AclnnError(INVALID, f"{self.name}: {name}: {aclGetRecentErrMsg()}")
        self.int_arrays.append(array)
        return array

    def run(self, get_workspace_size: Callable[..., tuple[int, int, aclOpExecutor]],
            execute: Callable[..., int], *args: Any) -> None:
        # new descriptors at every call: never an executor_cache hit, so not offered to it
        status, workspace_size, executor = getattr(get_workspace_size, "uncached", get_workspace_size)(*args)
        check_status(status)
        self.plan = executor.plan
        workspace = None
        if workspace_size:
            workspace = self.device.malloc(workspace_size)
            self.owned.append(workspace)
            self.workspace = workspace
        impl = resolve_stream(self.stream, self.name)
        gpu: Any = self.device   # a CudaDevice when on_gpu
        if self.on_gpu:   # the inputs were made (and the outputs allocated) on CuPy's current stream
            gpu.follow_current_stream(impl)
        check_status(execute(workspace, workspace_size, executor, self.stream))
        if self.on_gpu:   # the results, handed back to CuPy's current stream after the kernels that write them
            gpu.lead_current_stream(impl)
        synchronize(impl, self.name)

    def result(self, handle: Any) -> Any:
        """An output as the caller's array kind (torch in, torch out; on the GPU it stays there)."""
        if isinstance(handle, GpuOutput):
            return handle.as_kind(self.kind, on_host=not self.gpu_inputs)
        return from_numpy(handle, self.kind)

    def entry(self) -> call_cache.Entry:
        """What call_cache keeps of this (successful, recorded) call: its phase 1, or the note that
        the signature cannot be cached (an operand copied, or two operands sharing memory)."""
        if not self.record or self.plan is None or not call_cache.disjoint(self.slots):
            return call_cache.Entry.uncacheable()
        return call_cache.Entry(self.plan, self.tensors, self.layouts, self.outputs, self.int_arrays, self.slots,
                                self.written, self.workspace)

    def close(self) -> None:
        for address in self.borrowed:
            self.device.registry.remove(address)
        for address in self.owned:
            self.device.free(address)


__all__ = ["Call", "synchronize", "waited"]
