"""The pythonic layer: arrays in, arrays out, exceptions instead of status codes.

Each function runs the very executors of the two-phase API: it describes the caller's arrays as
aclTensors (zero-copy: the arrays' own memory is lent to the library for the length of the call
when it already lives where the device computes), runs GetWorkspaceSize and the execute call on a
stream, waits, and returns arrays of the caller's kind (NumPy, CuPy, or PyTorch via DLPack).
Failures raise `AclnnError` carrying the status and the message, whatever went wrong: a status from
the two phases, a device that cannot run here, an argument of the wrong kind (161002), or (a bug of
the library) an internal error. No `aclInit` is needed.

Which device: on the cuda device a call runs on the GPU its arrays live on (a `cuda:3` tensor or a
CuPy array of device 3: device 3), and arrays on two different GPUs are refused, as PyTorch refuses
them; host arrays alone run on the calling thread's current device (`aclrtSetDevice`), which is
also the rule on the cpu and emulated devices.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import cache as call_cache
from ..base import dtypes
from ..device.capture_mode import thread_local_capture_mode
from ..base.errors import AclnnError, OpError, aclGetRecentErrMsg, check_status
from ..executor import aclOpExecutor
from ..runtime import aclrtStream, device_of, get_device, resolve_stream, using_device
from ..base.status import aclError, aclFormat
from ..meta.tensor import aclCreateIntArray, aclCreateTensor, aclIntArray, aclTensor

REDUCTION_CODES = {"none": 0, "mean": 1, "sum": 2, "batchmean": 3}


INVALID = 161002   # ACLNN_ERR_PARAM_INVALID


def _operator(*, values: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A functional entry point from its body `body(call, *args)`, which describes its arrays through
    `call` (a `_Call`, or a `_Replay` of a cached signature) and returns the results. The public
    function takes the body's parameters and a keyword-only `stream`. `values`: the parameters whose
    values (integer lists) shape the plan, as the lengths of CTC do (call_cache keys them by value).

    Every failure of a functional call surfaces as AclnnError naming the function: a user error
    found inside the library (a device that cannot run here) keeps its status; anything else
    escaping is a library bug, reported as an internal error rather than a bare exception. A call
    that does not fit the signature is Python's TypeError, as for any function."""
    def wrap(body: Callable[..., Any]) -> Callable[..., Any]:
        name = body.__name__
        signature = inspect.signature(body)
        params = list(signature.parameters.values())[1:]
        stream = inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation="aclrtStream | None")
        public = signature.replace(parameters=[*params, stream])
        by_value = frozenset(i for i, p in enumerate(params) if p.name in values)

        def fits(args: tuple, kwargs: dict) -> None:
            try:
                public.bind(*args, **kwargs)
            except TypeError as e:   # raised here, not from inside the library's handling
                raise TypeError(str(e)) from None

        @functools.wraps(body)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return _dispatch(body, name, args, kwargs, by_value, values)
            except AclnnError:
                fits(args, kwargs)
                raise
            except OpError as e:
                fits(args, kwargs)
                raise AclnnError(e.status, f"{name}: {e.message}") from None
            except Exception as e:
                fits(args, kwargs)
                raise AclnnError(aclError.ACL_ERROR_INTERNAL_ERROR,
                                 f"{name}: internal error: {type(e).__name__}: {e}") from e
        call.__signature__ = public  # type: ignore[attr-defined]
        return call
    return wrap


def _dispatch(body: Callable[..., Any], name: str, args: tuple, kwargs: dict, by_value: frozenset,
              values: tuple[str, ...]) -> Any:
    """Run one functional call: cached on the cpu device when its signature allows (call_cache), else
    uncached; on cuda on the GPU the arrays live on (CuPy's current GPU follows: host arrays are
    copied to that GPU)."""
    stream = kwargs.pop("stream", None)
    device = get_device()
    if device.kind == "cuda":
        gpu = _arrays_gpu(name, (*args, *kwargs.values()))
        target: Any = device if gpu is None else device_of(gpu)   # a CudaDevice
        # CuPy's allocations, copies and waits in the call are potentially unsafe calls: made in
        # thread-local capture mode, a global-mode capture on another thread stays valid (device/capture_mode.py)
        with using_device(target), _no_legacy_stream_in_capture(target, name), thread_local_capture_mode(target.cp):
            return _uncached(body, name, stream, args, kwargs, None)
    impl = _inline_stream(device, stream) if device.kind == "cpu" and call_cache.cache.enabled else None
    prepared: dict[int, np.ndarray] = {}
    key = _signature(body, args, kwargs, by_value, values, prepared) if impl is not None else None
    if key is None:
        return _uncached(body, name, stream, args, kwargs, None, prepared)
    entry = call_cache.cache.take(device, key)
    if entry is not None and entry.plan is None:   # a signature the cache cannot run
        call_cache.cache.give(device, key, entry)
        return _uncached(body, name, stream, args, kwargs, None, prepared)
    if entry is not None:
        try:
            result = body(_Replay(name, device, impl, entry, prepared), *args, **kwargs)
        except _Retry as retry:
            if retry.uncacheable:
                call_cache.cache.give(device, key, call_cache.Entry.uncacheable())
                return _uncached(body, name, stream, args, kwargs, None, prepared)
            return _uncached(body, name, stream, args, kwargs, (device, key), prepared)   # records it again
        except BaseException:
            call_cache.cache.give(device, key, entry)
            raise
        else:
            call_cache.cache.give(device, key, entry)
            return result
    return _uncached(body, name, stream, args, kwargs, (device, key), prepared)


@contextlib.contextmanager
def _no_legacy_stream_in_capture(device: Any, name: str) -> Iterator[None]:
    """A call on the cuda device, refused (ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT) when an ACL capture is
    in progress on `device` and CuPy's current stream is the legacy stream: the call's copies,
    conversions, DLPack hand-overs and `.get()` run there, and legacy-stream work while a blocking stream
    captures (the library's streams are blocking) invalidates that capture
    (cudaErrorStreamCaptureImplicit). Inside `with cupy.cuda.Stream():` or with
    CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 the call runs. A call on the legacy stream holds the device's
    capture gate (device/cuda.py, CaptureGate) throughout, so no capture begins between this check and its last
    legacy-stream use (only then: a call on another stream neither needs nor holds it).
    """
    if not device.current_stream_is_legacy():
        yield
        return
    with device.gate.shared():
        if device.capturing:
            raise AclnnError(aclError.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
                             f"{name}: an ACL capture (aclmdlRICaptureBegin) is in progress on device {device.id}, "
                             "and this call would use the legacy default stream (CuPy's current stream), which "
                             "invalidates it; call it inside `with cupy.cuda.Stream(non_blocking=True):`, with "
                             "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1, or after aclmdlRICaptureEnd")
        yield


def _uncached(body: Callable[..., Any], name: str, stream: aclrtStream | None, args: tuple, kwargs: dict,
              cache_as: tuple[Any, tuple] | None, prepared: dict[int, np.ndarray] | None = None) -> Any:
    """The call through the two-phase API: descriptors, lending, GetWorkspaceSize, execute on the
    stream, synchronize. With `cache_as` (device, signature) it leaves its phase 1 in the cache.
    `prepared`: the host arrays the signature already made of the arguments (by id), not made again."""
    call = _Call(name, stream, record=cache_as is not None, prepared=prepared)
    try:
        result = body(call, *args, **kwargs)
    finally:
        call.close()
    if cache_as is not None:
        call_cache.cache.give(*cache_as, call.entry())
    return result


def _inline_stream(device: Any, stream: Any) -> Any:
    """The device stream a cached call may synchronize and then run on the calling thread: the
    default stream, or a live stream of `device`; None (the uncached path, which reports what is
    wrong) for anything else and for a stream that captures."""
    if stream is None:
        impl = device.default_stream
    elif type(stream) is aclrtStream and not stream.destroyed and stream.device is device:
        impl = stream.impl
    else:
        return None
    worker = getattr(impl, "worker", None)
    if worker is None or getattr(worker, "capture", None) is not None:
        return None
    return impl


_UNKEYED = object()    # _key_of: an argument that cannot be part of a signature
_KEYWORDS = object()   # _signature: the keyword arguments' parts follow


def _key_of(value: Any, by_value: bool, prepared: dict[int, np.ndarray]) -> Any:
    """One argument's part of a call signature: an array's layout (its host view, kept in `prepared`
    for the call), a scalar's type and value (floats by their bits: -0.0 and NaN are their own),
    an integer list's values; _UNKEYED for anything else (the call is not cached)."""
    if value is None:
        return None
    kind = type(value)
    if kind is bool or kind is int or kind is str:
        return kind, value
    if kind is float:
        return kind, value.hex()
    if by_value:
        if (kind is list or kind is tuple) and all(type(v) is int for v in value):
            return "values", tuple(value)
        return _UNKEYED
    # torch.Tensor exactly: subclasses (nn.Parameter lives in torch.nn.parameter) take the uncached path
    if kind is np.ndarray or (kind.__module__ == "torch" and kind.__name__ == "Tensor"):
        host = prepared[id(value)] = _host_operand(value)
        return host.shape, host.strides, host.dtype
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return kind, float(value).hex() if value.dtype.kind == "f" else int(value)
    return _UNKEYED


def _signature(body: Callable[..., Any], args: tuple, kwargs: dict, by_value: frozenset, values: tuple[str, ...],
               prepared: dict[int, np.ndarray]) -> tuple | None:
    """The call's signature for call_cache (None: not cacheable): the body, each positional
    argument's part, then (after a marker) each keyword argument's name and part."""
    parts: list[Any] = [body]
    try:
        for i, value in enumerate(args):
            part = _key_of(value, i in by_value, prepared)
            if part is _UNKEYED:
                return None
            parts.append(part)
        if kwargs:
            parts.append(_KEYWORDS)
            for name, value in kwargs.items():
                part = _key_of(value, name in values, prepared)
                if part is _UNKEYED:
                    return None
                parts.append((name, part))
    except Exception:   # noqa: BLE001 - an argument the uncached path will report
        return None
    return tuple(parts)


def _gpu_of(array: Any) -> int | None:
    """The GPU an array lives on (a CUDA torch tensor, a CuPy array), None for anything else."""
    kind = _array_kind(array)
    device = getattr(array, "device", None) if kind != "numpy" else None   # (torch dtypes have none)
    if device is None:
        return None
    if kind == "torch":
        if device.type != "cuda":
            return None
        if device.index is None:
            import torch
            return int(torch.cuda.current_device())
        return int(device.index)
    return int(device.id)


def _arrays_gpu(function: str, values: Sequence[Any]) -> int | None:
    """The one GPU the array arguments live on, None when all are host arrays; arrays on two GPUs
    are refused (PyTorch's rule: "Expected all tensors to be on the same device")."""
    found = None
    for value in values:
        gpu = _gpu_of(value)
        if gpu is None:
            continue
        if found is not None and gpu != found:
            raise AclnnError(INVALID, f"{function}: expected all arrays on the same device, but found at least "
                                      f"two devices, cuda:{found} and cuda:{gpu}")
        found = gpu
    return found


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _integer(function: str, name: str, value: Any) -> int:
    if not _is_integer(value):
        raise AclnnError(INVALID, f"{function}: {name} must be an integer, got {value!r}")
    return int(value)


def _reduction(function: str, value: str | int, allowed: Sequence[str]) -> int:
    if isinstance(value, str):
        if value not in allowed:
            raise AclnnError(INVALID, f"{function}: reduction {value!r} must be one of {', '.join(allowed)}")
        return REDUCTION_CODES[value]
    if not _is_integer(value):
        raise AclnnError(INVALID, f"{function}: reduction must be one of {', '.join(allowed)} or its code, "
                                  f"got {value!r}")
    return int(value)


def _reduction_name(function: str, value: str | int | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    names = {0: "none", 1: "mean", 2: "sum"}
    if not _is_integer(value) or int(value) not in names:
        raise AclnnError(INVALID, f"{function}: reduction {value!r} must be 'none', 'mean', 'sum' or "
                                  "0 (none), 1 (mean), 2 (sum)")
    return names[int(value)]


def _int_list(function: str, name: str, values: Any) -> list[int]:
    """A sequence or integer array of lengths as ints (161002 for anything that is not integers)."""
    try:
        array = np.asarray(_to_numpy(values) if not isinstance(values, (list, tuple)) else values)
    except ValueError:   # ragged nesting
        raise AclnnError(INVALID, f"{function}: {name} must be a flat sequence of integers, got {values!r}") from None
    if array.size and array.dtype.kind not in "iu":
        if array.dtype.kind != "O" or not all(_is_integer(v) for v in array.reshape(-1)):
            raise AclnnError(INVALID, f"{function}: {name} must be integers, got {values!r}")
    return [int(v) for v in array.reshape(-1)]


def _array_kind(array: Any) -> str:
    module = type(array).__module__.split(".")[0]
    if module == "torch":
        return "torch"
    if module == "cupy":
        return "cupy"
    return "numpy"


def _to_numpy(array: Any) -> np.ndarray:
    """A host view of any array (zero-copy for NumPy and CPU PyTorch tensors)."""
    kind = _array_kind(array)
    if kind == "torch":
        import torch
        tensor = array.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        if tensor.dtype == torch.bfloat16:  # NumPy's DLPack knows no bfloat16
            return np.from_dlpack(tensor.view(torch.int16)).view(dtypes.bfloat16)
        try:
            return tensor.numpy()   # the same zero-copy view as DLPack's, at a third of its cost
        except (RuntimeError, TypeError):
            return np.from_dlpack(tensor)   # (what DLPack says about a tensor NumPy cannot view)
    if kind == "cupy":
        return array.get()
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__dlpack__"):
        return np.from_dlpack(array)
    return np.asarray(array)


def _to_cupy(array: Any) -> tuple[Any, np.dtype]:
    """A CuPy view of any array for the cuda device (zero-copy for CuPy arrays and CUDA tensors;
    host arrays are copied to the GPU), and the element dtype it stands for (bfloat16 travels as
    uint16: CuPy has no bfloat16)."""
    import cupy
    kind = _array_kind(array)
    if kind == "torch":
        import torch
        tensor = array.detach()
        if tensor.device.type == "cuda":
            if tensor.dtype == torch.bfloat16:
                return cupy.from_dlpack(tensor.view(torch.int16)).view(cupy.uint16), dtypes.bfloat16
            converted = cupy.from_dlpack(tensor)
            return converted, np.dtype(converted.dtype)
    if kind == "cupy":
        return array, np.dtype(array.dtype)
    if hasattr(array, "__cuda_array_interface__"):
        converted = cupy.asarray(array)
        return converted, np.dtype(converted.dtype)
    host = _to_numpy(array)
    if host.dtype == dtypes.bfloat16:
        return cupy.asarray(np.ascontiguousarray(host).view(np.uint16)), dtypes.bfloat16
    return cupy.asarray(host), host.dtype


def _from_numpy(array: np.ndarray, kind: str) -> Any:
    """A host result as the caller's array kind."""
    if kind == "torch":
        import torch
        array = np.ascontiguousarray(array).reshape(array.shape)  # ascontiguousarray makes 0-D arrays 1-D
        if array.dtype == dtypes.bfloat16:
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)
    if kind == "cupy":
        import cupy
        return cupy.asarray(array)
    return array


class _GpuOutput:
    """An output allocated on the GPU (cuda device): a CuPy array and the dtype it stands for."""

    def __init__(self, array: Any, dtype: np.dtype):
        self.array, self.dtype, self.shape = array, dtype, tuple(array.shape)

    def as_kind(self, kind: str, on_host: bool = False) -> Any:
        """The output as the caller's array kind; `on_host` (every array argument was a host array): a
        host array, as PyTorch puts an op's result where its inputs are."""
        if on_host and kind != "cupy":
            host = self.array.get()
            return _from_numpy(host.view(self.dtype) if self.dtype == dtypes.bfloat16 else host, kind)
        if kind == "torch":
            import torch
            tensor = torch.from_dlpack(self.array)  # stays on the GPU, no copy
            return tensor.view(torch.bfloat16) if self.dtype == dtypes.bfloat16 else tensor
        if kind == "cupy":
            return self.array
        host = self.array.get()
        return host.view(self.dtype) if self.dtype == dtypes.bfloat16 else host


def _host_operand(array: Any) -> np.ndarray:
    """The host array a host-memory device is given for an argument: its own memory (zero-copy),
    or a contiguous copy when its strides are negative or not whole elements."""
    host = _to_numpy(array)
    if not host.flags.c_contiguous and any(s < 0 or s % host.itemsize for s in host.strides):
        host = np.ascontiguousarray(host)
    return host


def _synchronize(impl: Any, name: str) -> None:
    """Wait for a call's stream; a failure of its queued work is the call's AclnnError."""
    _waited(impl.synchronize, name)


def _waited(wait: Callable[[], Any], name: str) -> Any:
    """`wait()`, with a failure of the stream's queued work raised as the call's AclnnError."""
    try:
        return wait()
    except OpError as e:
        raise AclnnError(e.status, e.message) from None
    except Exception as e:  # noqa: BLE001
        raise AclnnError(507000, f"{name}: queued work failed: {e}") from None


class _Call:
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
            raise AclnnError(161002, f"{self.name}: {name} has unsupported dtype {dtype}") from None
        strides = [s // dtype.itemsize for s in byte_strides]
        tensor = aclCreateTensor(tuple(shape), code, strides, 0, fmt, tuple(shape), address or None)
        if tensor is None:
            raise AclnnError(161002, f"{self.name}: {name}: {aclGetRecentErrMsg()}")
        return tensor

    def tensor(self, array: Any, name: str, fmt: int = aclFormat.ACL_FORMAT_ND) -> aclTensor:
        if array is None:
            return None  # type: ignore[return-value]
        if self.kind == "numpy":
            self.kind = _array_kind(array)
        if self.on_gpu:
            self.gpu_inputs = self.gpu_inputs or _gpu_of(array) is not None
            gpu, dtype = _to_cupy(array)
            address, gpu = self._gpu_address(gpu)
            return self._describe(address, gpu.shape, gpu.strides, dtype, fmt, name)
        operand = self.prepared.get(id(array))
        if operand is None:
            operand = _host_operand(array)
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
            handle: Any = _GpuOutput(cupy.empty(tuple(shape), storage), dtype)
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
        array = aclCreateIntArray(_int_list(self.name, name, values))
        if array is None:
            raise AclnnError(161002, f"{self.name}: {name}: {aclGetRecentErrMsg()}")
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
        _synchronize(impl, self.name)

    def result(self, handle: Any) -> Any:
        """An output as the caller's array kind (torch in, torch out; on the GPU it stays there)."""
        if isinstance(handle, _GpuOutput):
            return handle.as_kind(self.kind, on_host=not self.gpu_inputs)
        return _from_numpy(handle, self.kind)

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


class _Retry(Exception):
    """A cached call that cannot finish from its entry: it runs uncached (and, when `uncacheable`,
    its signature is never cached again)."""

    def __init__(self, uncacheable: bool):
        super().__init__()
        self.uncacheable = uncacheable


class _Replay:
    """A functional call of a cached signature (call_cache): `_Call`'s methods over the entry. The
    arrays are not lent or described; the entry's plan runs on them on the calling thread."""

    __slots__ = ("name", "device", "impl", "entry", "prepared", "views", "kind", "inputs", "outputs", "ints")

    def __init__(self, name: str, device: Any, impl: Any, entry: call_cache.Entry,
                 prepared: dict[int, np.ndarray]):
        self.name, self.device, self.impl, self.entry, self.prepared = name, device, impl, entry, prepared
        self.views: list[np.ndarray | None] = []   # each operand's bytes, in the entry's slot order
        self.kind = "numpy"
        self.inputs = self.outputs = self.ints = 0

    def tensor(self, array: Any, name: str, fmt: int = aclFormat.ACL_FORMAT_ND) -> aclTensor:
        if array is None:
            return None  # type: ignore[return-value]
        if self.kind == "numpy":
            self.kind = _array_kind(array)
        i = self.inputs
        self.inputs = i + 1
        host = self.prepared.get(id(array))
        if host is None:   # not an argument as passed (the signature holds those layouts): check it
            host = self.prepared[id(array)] = _host_operand(array)
            if (host.shape, host.strides, host.dtype) != self.entry.layouts[i]:
                raise _Retry(uncacheable=True)
        if self.device.registry.host_allocations and host.size:
            # an operand in aclrtMallocHost memory: the uncached path refuses it (161002, host memory)
            found = self.device.registry.find(host.__array_interface__["data"][0], 1)
            if found is not None and not found.on_device:
                raise _Retry(uncacheable=False)
        self.views.append(call_cache.bytes_of(host))
        return self.entry.tensors[i]

    def output(self, shape: Sequence[int], dtype: np.dtype, fmt: int = aclFormat.ACL_FORMAT_ND
               ) -> tuple[aclTensor, Any]:
        i = self.outputs
        self.outputs = i + 1
        tensor, expected_shape, expected_dtype = self.entry.outputs[i]
        handle = np.empty(shape, dtype)
        if handle.shape != expected_shape or handle.dtype != expected_dtype:
            raise _Retry(uncacheable=True)
        self.views.append(call_cache.bytes_of(handle))
        return tensor, handle

    def int_array(self, values: Any, name: str) -> aclIntArray:
        i = self.ints
        self.ints = i + 1
        return self.entry.int_arrays[i]   # the signature holds the values

    def run(self, get_workspace_size: Callable[..., Any], execute: Callable[..., int], *args: Any) -> None:
        # as the stream's next task: earlier work on it first, and nothing queued meanwhile (by another
        # thread) starts until the plan has run
        worker = self.impl.worker
        _waited(worker.hold, self.name)   # a failure of the stream's queued work is the call's AclnnError
        try:
            call_cache.run(self.entry, self.device, self.views)
        except Exception as e:  # noqa: BLE001 - the uncached path runs it again and reports what it reports
            raise _Retry(uncacheable=isinstance(e, call_cache.OutsideSlots)) from e
        finally:
            worker.unhold()

    result = _Call.result


# ---------------------------------------------------------------------------- KL divergence
@_operator()
def kl_div(call: _Call, self: Any, target: Any, reduction: str | int = "mean", log_target: bool = False) -> Any:
    """KL divergence loss (aclnnKlDiv): `none` gives the broadcast shape, the others a 0-D array."""
    from ..ops.kl_div import aclnnKlDiv, aclnnKlDivGetWorkspaceSize
    code = _reduction("kl_div", reduction, ("none", "mean", "sum", "batchmean"))
    x, t = call.tensor(self, "self"), call.tensor(target, "target")
    shape: tuple[int, ...] = ()
    if code == 0 and x is not None and t is not None:
        try:
            shape = np.broadcast_shapes(x.shape, t.shape)
        except ValueError:   # the API names the mismatch
            pass
    out, host = call.output(shape, dtypes.to_numpy(x.dtype) if x is not None else np.float32)
    call.run(aclnnKlDivGetWorkspaceSize, aclnnKlDiv, x, t, code, log_target, out)
    return call.result(host)


@_operator()
def kl_div_backward(call: _Call, grad_output: Any, self: Any, target: Any, reduction: str | int = "mean",
                    log_target: bool = False) -> Any:
    """Gradient of kl_div with respect to `self` (aclnnKlDivBackward), in `self`'s dtype."""
    from ..ops.kl_div import aclnnKlDivBackward, aclnnKlDivBackwardGetWorkspaceSize
    code = _reduction("kl_div_backward", reduction, ("none", "mean", "sum", "batchmean"))
    g, x, t = call.tensor(grad_output, "grad_output"), call.tensor(self, "self"), call.tensor(target, "target")
    out, host = call.output(x.shape if x is not None else (), dtypes.to_numpy(x.dtype) if x is not None
                            else np.float32)
    call.run(aclnnKlDivBackwardGetWorkspaceSize, aclnnKlDivBackward, g, x, t, code, log_target, out)
    return call.result(host)


# ---------------------------------------------------------------------------- ConvTBC
@_operator()
def conv_tbc(call: _Call, input: Any, weight: Any, bias: Any, pad: int = 0, cube_math_type: int = 0) -> Any:
    """ConvTBC forward (aclnnConvTbc): input (T, B, Cin), weight (K, Cin, Cout), bias (Cout) ->
    (T + 2*pad - K + 1, B, Cout) in the input's dtype."""
    from ..ops.conv_tbc import aclnnConvTbc, aclnnConvTbcGetWorkspaceSize
    pad, cube_math_type = _integer("conv_tbc", "pad", pad), _integer("conv_tbc", "cube_math_type", cube_math_type)
    x, w, b = call.tensor(input, "input"), call.tensor(weight, "weight"), call.tensor(bias, "bias")
    shape: tuple[int, ...] = ()
    if x is not None and w is not None and len(x.shape) == 3 and len(w.shape) == 3:
        shape = (max(x.shape[0] + 2 * pad - w.shape[0] + 1, 0), x.shape[1], w.shape[2])
    out, host = call.output(shape, dtypes.to_numpy(x.dtype) if x is not None else np.float32)
    call.run(aclnnConvTbcGetWorkspaceSize, aclnnConvTbc, x, w, b, pad, out, cube_math_type)
    return call.result(host)


@_operator()
def conv_tbc_backward(call: _Call, grad: Any, input: Any, weight: Any, bias: Any, pad: int = 0,
                      cube_math_type: int = 0) -> tuple[Any, Any, Any]:
    """ConvTBC backward (aclnnConvTbcBackward): (grad_input, grad_weight, grad_bias) in the dtypes of
    input, weight and bias."""
    from ..ops.conv_tbc import aclnnConvTbcBackward, aclnnConvTbcBackwardGetWorkspaceSize
    pad = _integer("conv_tbc_backward", "pad", pad)
    cube_math_type = _integer("conv_tbc_backward", "cube_math_type", cube_math_type)   # 0..3: the API checks
    g, x = call.tensor(grad, "grad"), call.tensor(input, "input")
    w, b = call.tensor(weight, "weight"), call.tensor(bias, "bias")
    outs = [call.output(t.shape if t is not None else (), dtypes.to_numpy(t.dtype) if t is not None
                        else np.float32) for t in (x, w, b)]
    call.run(aclnnConvTbcBackwardGetWorkspaceSize, aclnnConvTbcBackward, g, x, w, b, pad,
             cube_math_type, outs[0][0], outs[1][0], outs[2][0])
    return tuple(call.result(host) for _, host in outs)


# ---------------------------------------------------------------------------- scaled masked softmax
@_operator()
def scaled_masked_softmax(call: _Call, x: Any, mask: Any, scale: float = 1.0, fix_triu_mask: bool = False) -> Any:
    """Scaled masked softmax (aclnnScaledMaskedSoftmax): x (B, N, S1, S2) float, mask bool
    (Bm, Nm, S1, S2) with Bm in {B, 1}, Nm in {N, 1} (true = masked out; None allowed with
    fix_triu_mask) -> y = softmax(scale * x) over the last axis in x's dtype, zeros on fully masked rows."""
    from ..ops.scaled_masked_softmax import aclnnScaledMaskedSoftmax, aclnnScaledMaskedSoftmaxGetWorkspaceSize
    t, m = call.tensor(x, "x"), call.tensor(mask, "mask")
    y, host = call.output(t.shape if t is not None else (), dtypes.to_numpy(t.dtype) if t is not None
                          else np.float32)
    call.run(aclnnScaledMaskedSoftmaxGetWorkspaceSize, aclnnScaledMaskedSoftmax, t, m, scale, fix_triu_mask, y)
    return call.result(host)


@_operator()
def scaled_masked_softmax_backward(call: _Call, grad_output: Any, y: Any, mask: Any, scale: float = 1.0,
                                   fix_triu_mask: bool = False) -> Any:
    """Gradient of scaled_masked_softmax with respect to x (aclnnScaledMaskedSoftmaxBackward):
    scale * y * (grad_output - rowsum(grad_output * y)), 0 where masked, in grad_output's dtype."""
    from ..ops.scaled_masked_softmax import (aclnnScaledMaskedSoftmaxBackward,
                                            aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize)
    g, yt, m = call.tensor(grad_output, "grad_output"), call.tensor(y, "y"), call.tensor(mask, "mask")
    out, host = call.output(g.shape if g is not None else (), dtypes.to_numpy(g.dtype) if g is not None
                            else np.float32)
    call.run(aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, aclnnScaledMaskedSoftmaxBackward, g, yt, m,
             scale, fix_triu_mask, out)
    return call.result(host)


# ---------------------------------------------------------------------------- cross-entropy
def _ce_result(call: _Call, host: np.ndarray) -> Any:
    """call.result with the host array's shape kept (a 0-D loss stays 0-D for torch / CuPy callers:
    np.ascontiguousarray in _from_numpy turns 0-D arrays into shape (1,))."""
    result = call.result(host)
    return result.reshape(host.shape) if tuple(result.shape) != host.shape else result


@_operator()
def cross_entropy_loss(call: _Call, input: Any, target: Any, weight: Any = None, reduction: str | int = "mean",
                       ignore_index: int = -100, label_smoothing: float = 0.0,
                       lse_square_scale_for_zloss: float = 0.0) -> tuple[Any, ...]:
    """Cross-entropy loss over logits (aclnnCrossEntropyLoss): input (N, C), target (N,) int64/int32,
    weight (C,) float32 or None -> (loss, log_prob); loss is (N,) for "none", else 0-D; both in the
    input's dtype. lse_square_scale_for_zloss != 0 adds the z-loss (docs/API.md §7) and returns
    (loss, log_prob, lse_for_zloss), lse (N,) for cross_entropy_loss_grad."""
    from ..ops.cross_entropy import aclnnCrossEntropyLoss, aclnnCrossEntropyLossGetWorkspaceSize
    name = _reduction_name("cross_entropy_loss", reduction)
    x, t, w = call.tensor(input, "input"), call.tensor(target, "target"), call.tensor(weight, "weight")
    dt = dtypes.to_numpy(x.dtype) if x is not None else np.float32
    n = x.shape[0] if x is not None and len(x.shape) >= 1 else 0
    loss, loss_host = call.output((n,) if name == "none" else (), dt)
    lp, lp_host = call.output(x.shape if x is not None else (0, 0), dt)
    lse, lse_host = call.output((n,), dt) if lse_square_scale_for_zloss else (None, None)
    call.run(aclnnCrossEntropyLossGetWorkspaceSize, aclnnCrossEntropyLoss, x, t, w, name, ignore_index,
             label_smoothing, lse_square_scale_for_zloss, False, loss, lp, None, lse)
    if lse_host is None:
        return _ce_result(call, loss_host), _ce_result(call, lp_host)
    return _ce_result(call, loss_host), _ce_result(call, lp_host), _ce_result(call, lse_host)


@_operator()
def cross_entropy_loss_grad(call: _Call, grad_loss: Any, log_prob: Any, target: Any, weight: Any = None,
                            reduction: str | int = "mean", ignore_index: int = -100,
                            label_smoothing: float = 0.0, lse_square_scale_for_zloss: float = 0.0,
                            lse_for_zloss: Any = None) -> Any:
    """Gradient of cross_entropy_loss with respect to the logits (aclnnCrossEntropyLossGrad), given
    log_prob = log_softmax(logits): (N, C) in log_prob's dtype. grad_loss is (N,) for "none", else a
    scalar (0-D or [1]). lse_square_scale_for_zloss != 0: the z-loss's gradient too, from the
    forward's lse_for_zloss (N,)."""
    from ..ops.cross_entropy import aclnnCrossEntropyLossGrad, aclnnCrossEntropyLossGradGetWorkspaceSize
    name = _reduction_name("cross_entropy_loss_grad", reduction)
    g, lp = call.tensor(grad_loss, "grad_loss"), call.tensor(log_prob, "log_prob")
    t, w = call.tensor(target, "target"), call.tensor(weight, "weight")
    lse = call.tensor(lse_for_zloss, "lse_for_zloss")
    out, host = call.output(lp.shape if lp is not None else (), dtypes.to_numpy(lp.dtype) if lp is not None
                            else np.float32)
    call.run(aclnnCrossEntropyLossGradGetWorkspaceSize, aclnnCrossEntropyLossGrad, g, lp, t, w, None, lse,
             name, ignore_index, label_smoothing, lse_square_scale_for_zloss, out)
    return _ce_result(call, host)


# ---------------------------------------------------------------------------- CTC loss
@_operator(values=("input_lengths", "target_lengths"))
def ctc_loss(call: _Call, log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
             zero_infinity: bool = False) -> tuple[Any, Any]:
    """CTC loss (aclnnCtcLoss): log_probs (T, N, C), targets (N, S) padded or 1-D concatenated, lengths
    as sequences of ints or integer arrays -> (neg_log_likelihood (N,), log_alpha (N, T, 2*maxL+1)) in
    log_probs' dtype. zero_infinity returns 0 for an infinite loss."""
    from ..ops.ctc_loss import aclnnCtcLoss, aclnnCtcLossGetWorkspaceSize
    lp, tg = call.tensor(log_probs, "log_probs"), call.tensor(targets, "targets")
    il = call.int_array(input_lengths, "input_lengths") if input_lengths is not None else None
    tl = call.int_array(target_lengths, "target_lengths") if target_lengths is not None else None
    max_l = max([0, *_int_list("ctc_loss", "target_lengths", target_lengths)]) if target_lengths is not None else 0
    T, N = (lp.shape[0], lp.shape[1]) if lp is not None and len(lp.shape) == 3 else (0, 0)
    dt = dtypes.to_numpy(lp.dtype) if lp is not None else np.dtype(np.float32)
    nll, nll_host = call.output((N,), dt)
    la, la_host = call.output((N, T, 2 * max_l + 1), dt)
    call.run(aclnnCtcLossGetWorkspaceSize, aclnnCtcLoss, lp, tg, il, tl, blank, zero_infinity, nll, la)
    return call.result(nll_host), call.result(la_host)


@_operator(values=("input_lengths", "target_lengths"))
def ctc_loss_backward(call: _Call, grad_out: Any, log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
                      neg_log_likelihood: Any, log_alpha: Any, blank: int = 0, zero_infinity: bool = False) -> Any:
    """PyTorch's raw `_ctc_loss_backward` (aclnnCtcLossBackward): the gradient with respect to the
    logits (T, N, C), no reduction, in grad_out's dtype. With zero_infinity a sample that cannot align
    is zeroed whether the neg_log_likelihood given is the raw +inf or ctc_loss(zero_infinity=True)'s 0
    (decided from log_alpha)."""
    from ..ops.ctc_loss import aclnnCtcLossBackward, aclnnCtcLossBackwardGetWorkspaceSize
    g, lp = call.tensor(grad_out, "grad_out"), call.tensor(log_probs, "log_probs")
    tg = call.tensor(targets, "targets")
    il = call.int_array(input_lengths, "input_lengths") if input_lengths is not None else None
    tl = call.int_array(target_lengths, "target_lengths") if target_lengths is not None else None
    nll, la = call.tensor(neg_log_likelihood, "neg_log_likelihood"), call.tensor(log_alpha, "log_alpha")
    dt = dtypes.to_numpy(g.dtype) if g is not None else np.dtype(np.float32)
    out, host = call.output(lp.shape if lp is not None else (), dt)
    call.run(aclnnCtcLossBackwardGetWorkspaceSize, aclnnCtcLossBackward, g, lp, tg, il, tl, nll, la, blank,
             zero_infinity, out)
    return call.result(host)


__all__ = ["AclnnError", "kl_div", "kl_div_backward", "conv_tbc", "conv_tbc_backward",
       "scaled_masked_softmax", "scaled_masked_softmax_backward",
       "cross_entropy_loss", "cross_entropy_loss_grad",
       "ctc_loss", "ctc_loss_backward"]
