"""The ACL runtime surface (acl_rt.h): init, devices, streams, events and memory.

Thin by design: every function validates its arguments (handles, sizes, pointer ranges against the
live allocations) and delegates to the device in use (`aclnn_gpu.device`). Nothing here raises for
a user error: `c_api` turns `OpError` into the returned code plus a recent-error message.
"""
from __future__ import annotations

import numbers
import os
import threading
from typing import Any

import numpy as np

from .device.base import Device, DeviceEvent, DeviceStream
from .errors import DeviceUnavailable, NoDevice, c_api, fail
from .status import aclError, aclrtMemcpyKind, aclSysParamOpt

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID
KINDS = ("auto", "cpu", "cuda", "emulated")


def _requested_kind() -> str:
    kind = os.environ.get("ACLNN_GPU_DEVICE", "auto").strip().lower() or "auto"
    return kind


def _make_device(kind: str) -> Device:
    if kind not in KINDS:
        raise DeviceUnavailable(f"ACLNN_GPU_DEVICE={kind!r} is not one of {', '.join(KINDS)}")
    if kind in ("auto", "cuda"):
        from .device.cuda import cuda_available, make_cuda_device
        if cuda_available():
            return make_cuda_device()
        if kind == "cuda":
            raise DeviceUnavailable("ACLNN_GPU_DEVICE=cuda but CuPy sees no usable GPU on this machine")
    if kind == "emulated":
        from .device.emulated import make_emulated_device
        return make_emulated_device()
    from .device.cpu import CpuDevice
    return CpuDevice()


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.initialized = False
        self.finalized = False
        self.device: Device | None = None
        self.sys_params: dict[int, int] = {aclSysParamOpt.ACL_OPT_DETERMINISTIC: 1}


_state = _State()


def get_device() -> Device:
    """The device in use, created on first use (as CUDA creates its context lazily)."""
    device = _state.device
    if device is not None:
        return device
    with _state.lock:
        if _state.device is None:
            try:
                _state.device = _make_device(_requested_kind())
            except DeviceUnavailable as e:
                raise NoDevice(aclError.ACL_ERROR_RT_NO_DEVICE, str(e)) from None
        return _state.device


def current_device_kind() -> str:
    """The kind of device actually in use: 'cpu', 'cuda' or 'emulated' (creating it if needed)."""
    try:
        return get_device().kind
    except Exception:
        return "none"


# ---------------------------------------------------------------------------- init and devices
@c_api()
def aclInit(configPath: str | None = None) -> int:
    with _state.lock:
        if _state.initialized:
            fail(aclError.ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialised in this process")
        if configPath is not None and configPath != "" and not os.path.isfile(configPath):
            fail(aclError.ACL_ERROR_INVALID_FILE, f"aclInit: configPath {configPath!r} is not a readable file")
        _state.initialized = True
        _state.finalized = False
    return OK


@c_api()
def aclFinalize() -> int:
    with _state.lock:
        if not _state.initialized:
            fail(aclError.ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: not initialised (or already finalised)")
        _state.initialized = False
        _state.finalized = True
    return OK


def _check_device_id(deviceId: Any, fn: str) -> None:
    if not isinstance(deviceId, numbers.Integral) or isinstance(deviceId, bool) or deviceId != 0:
        fail(aclError.ACL_ERROR_RT_INVALID_DEVICEID, f"{fn}: deviceId {deviceId!r} must be 0 (one device)")


@c_api()
def aclrtSetDevice(deviceId: int) -> int:
    _check_device_id(deviceId, "aclrtSetDevice")
    get_device()
    return OK


@c_api()
def aclrtResetDevice(deviceId: int) -> int:
    _check_device_id(deviceId, "aclrtResetDevice")
    with _state.lock:
        device, _state.device = _state.device, None
    if device is not None:
        device.close()
    return OK


@c_api(n_out=1)
def aclrtGetDevice() -> tuple[int, int]:
    if _state.device is None:
        fail(aclError.ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetDevice: no device set on this process (call aclrtSetDevice)")
    return OK, 0


@c_api(n_out=1)
def aclrtGetDeviceCount() -> tuple[int, int]:
    get_device()
    return OK, 1


@c_api()
def aclrtSynchronizeDevice() -> int:
    device = get_device()
    for stream in device.live_streams():
        _sync(stream, "aclrtSynchronizeDevice")
    return OK


@c_api()
def aclrtCtxSetSysParamOpt(opt: int, value: int) -> int:
    if opt not in aclSysParamOpt._value2member_map_:
        fail(PARAM, f"aclrtCtxSetSysParamOpt: opt {opt!r} is not an aclSysParamOpt")
    _state.sys_params[int(opt)] = int(value)
    return OK


@c_api(n_out=1)
def aclrtGetSysParamOpt(opt: int) -> tuple[int, int]:
    if opt not in _state.sys_params:
        fail(PARAM, f"aclrtGetSysParamOpt: opt {opt!r} has no value")
    return OK, _state.sys_params[int(opt)]


# ---------------------------------------------------------------------------- streams
class aclrtStream:
    """A stream handle (C's aclrtStream)."""

    __slots__ = ("impl", "device", "destroyed", "__weakref__")

    def __init__(self, impl: DeviceStream, device: Device):
        self.impl = impl
        self.device = device
        self.destroyed = False

    def __repr__(self) -> str:
        return f"aclrtStream({self.device.kind}{', destroyed' if self.destroyed else ''})"


def resolve_stream(stream: Any, fn: str, status: int = PARAM) -> DeviceStream:
    """The device stream for a handle; None is the default stream."""
    device = get_device()
    if stream is None:
        return device.default_stream
    if not isinstance(stream, aclrtStream):
        fail(status, f"{fn}: stream must be an aclrtStream or None, got {type(stream).__name__}")
    if stream.destroyed:
        fail(status, f"{fn}: stream was destroyed")
    if stream.device is not device:
        fail(status, f"{fn}: stream belongs to a device that was reset")
    return stream.impl


def _sync(impl: DeviceStream, fn: str) -> None:
    from .errors import OpError
    try:
        impl.synchronize()
    except OpError as e:
        fail(e.status, f"{fn}: queued work failed: {e.message}")
    except Exception as e:  # noqa: BLE001 - a failure of queued work is reported, never raised
        fail(aclError.ACL_ERROR_RT_INTERNAL_ERROR, f"{fn}: queued work failed: {type(e).__name__}: {e}")


@c_api(n_out=1)
def aclrtCreateStream() -> tuple[int, aclrtStream]:
    device = get_device()
    return OK, aclrtStream(device.create_stream(), device)


@c_api(n_out=1)
def aclrtCreateStreamWithConfig(priority: int = 0, flag: int = 0) -> tuple[int, aclrtStream]:
    return aclrtCreateStream()  # priorities and flags change nothing here


@c_api()
def aclrtDestroyStream(stream: aclrtStream) -> int:
    if stream is None:
        fail(PARAM, "aclrtDestroyStream: stream is null (the default stream cannot be destroyed)")
    impl = resolve_stream(stream, "aclrtDestroyStream")
    stream.destroyed = True
    impl.close()
    return OK


@c_api()
def aclrtSynchronizeStream(stream: aclrtStream | None) -> int:
    _sync(resolve_stream(stream, "aclrtSynchronizeStream"), "aclrtSynchronizeStream")
    return OK


# ---------------------------------------------------------------------------- events
class aclrtEvent:
    __slots__ = ("impl", "device", "destroyed", "__weakref__")

    def __init__(self, impl: DeviceEvent, device: Device):
        self.impl = impl
        self.device = device
        self.destroyed = False


def _event(event: Any, fn: str, what: str = "event") -> DeviceEvent:
    if not isinstance(event, aclrtEvent):
        fail(PARAM, f"{fn}: {what} must be an aclrtEvent, got {type(event).__name__}")
    if event.destroyed:
        fail(PARAM, f"{fn}: {what} was destroyed")
    if event.device is not get_device():
        fail(PARAM, f"{fn}: {what} belongs to a device that was reset")
    return event.impl


@c_api(n_out=1)
def aclrtCreateEvent() -> tuple[int, aclrtEvent]:
    device = get_device()
    return OK, aclrtEvent(device.create_event(), device)


@c_api(n_out=1)
def aclrtCreateEventWithFlag(flag: int) -> tuple[int, aclrtEvent]:
    return aclrtCreateEvent()


@c_api()
def aclrtDestroyEvent(event: aclrtEvent) -> int:
    _event(event, "aclrtDestroyEvent")
    event.destroyed = True
    return OK


@c_api()
def aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream | None) -> int:
    impl = _event(event, "aclrtRecordEvent")
    impl.record(resolve_stream(stream, "aclrtRecordEvent"))
    return OK


@c_api()
def aclrtStreamWaitEvent(stream: aclrtStream | None, event: aclrtEvent) -> int:
    impl = _event(event, "aclrtStreamWaitEvent")
    get_device().stream_wait_event(resolve_stream(stream, "aclrtStreamWaitEvent"), impl)
    return OK


@c_api()
def aclrtSynchronizeEvent(event: aclrtEvent) -> int:
    _event(event, "aclrtSynchronizeEvent").synchronize()
    return OK


@c_api(n_out=1)
def aclrtQueryEventStatus(event: aclrtEvent) -> tuple[int, int]:
    from .status import aclrtEventRecordedStatus as S
    done = _event(event, "aclrtQueryEventStatus").query()
    return OK, S.ACL_EVENT_RECORDED_STATUS_COMPLETE if done else S.ACL_EVENT_RECORDED_STATUS_NOT_READY


@c_api(n_out=1)
def aclrtEventElapsedTime(start: aclrtEvent, end: aclrtEvent) -> tuple[int, float]:
    first = _event(start, "aclrtEventElapsedTime", "startEvent")
    last = _event(end, "aclrtEventElapsedTime", "endEvent")
    for impl, what in ((first, "startEvent"), (last, "endEvent")):
        if not impl.recorded():
            fail(PARAM, f"aclrtEventElapsedTime: {what} was never recorded")
        if not impl.query():
            fail(aclError.ACL_ERROR_RT_EVENT_NOT_COMPLETE, f"aclrtEventElapsedTime: {what} has not completed yet")
    return OK, float(first.elapsed_ms(last))


# ---------------------------------------------------------------------------- memory
def _size(value: Any, fn: str, what: str, allow_zero: bool = False) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        fail(PARAM, f"{fn}: {what} {value!r} must be a {'non-negative' if allow_zero else 'positive'} integer")
    return int(value)


def _allocate(fn: str, size: int, on_device: bool) -> int:
    device = get_device()
    try:
        return device.malloc(size) if on_device else device.malloc_host(size)
    except MemoryError:
        fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: out of memory allocating {size} bytes")
    except Exception as e:  # CuPy's OutOfMemoryError is not a MemoryError
        if "OutOfMemory" in type(e).__name__:
            fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: out of memory allocating {size} bytes")
        raise


@c_api(n_out=1)
def aclrtMalloc(size: int, policy: int = 0) -> tuple[int, int]:
    size = _size(size, "aclrtMalloc", "size")
    if not isinstance(policy, numbers.Integral) or (int(policy) & 0xFF) > 7:
        fail(PARAM, f"aclrtMalloc: policy {policy!r} is not an aclrtMemMallocPolicy")
    return OK, _allocate("aclrtMalloc", size, True)


@c_api(n_out=1)
def aclrtMallocHost(size: int) -> tuple[int, int]:
    return OK, _allocate("aclrtMallocHost", _size(size, "aclrtMallocHost", "size"), False)


def _free(ptr: Any, fn: str, on_device: bool) -> int:
    device = get_device()
    alloc = device.registry.get(ptr) if isinstance(ptr, int) else None
    if alloc is None or alloc.on_device != on_device:
        shown = hex(ptr) if isinstance(ptr, int) else repr(ptr)
        fail(PARAM, f"{fn}: {shown} is not the start of a live {'device' if on_device else 'host'} allocation "
                    "(freed, foreign or an interior pointer)")
    device.free(ptr)
    return OK


@c_api()
def aclrtFree(devPtr: int) -> int:
    return _free(devPtr, "aclrtFree", True)


@c_api()
def aclrtFreeHost(hostPtr: int) -> int:
    return _free(hostPtr, "aclrtFreeHost", False)


def _host_buffer(obj: Any, fn: str, what: str, count: int, writable: bool) -> memoryview:
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "V" or type(obj).__module__ == "numpy" and \
            getattr(obj, "dtype", None) is not None and obj.dtype.name == "bfloat16":
        obj = obj.view(np.uint8) if obj.flags.c_contiguous else obj  # no PEP 3118 format for bfloat16
    try:
        view = memoryview(obj)
    except (TypeError, ValueError):
        fail(PARAM, f"{fn}: {what} must be an address (int) or a buffer object, got {type(obj).__name__}")
    if not view.c_contiguous:
        fail(PARAM, f"{fn}: {what} buffer must be C-contiguous")
    if writable and view.readonly:
        fail(PARAM, f"{fn}: {what} buffer is read-only")
    view = view.cast("B")
    if view.nbytes < count:
        fail(PARAM, f"{fn}: {what} buffer holds {view.nbytes} bytes, fewer than count={count}")
    return view[:count]


def _memcpy(fn: str, dst: Any, destMax: Any, src: Any, count: Any, kind: Any, stream: Any) -> int:
    destMax = _size(destMax, fn, "destMax", allow_zero=True)
    count = _size(count, fn, "count", allow_zero=True)
    if count > destMax:
        fail(PARAM, f"{fn}: count={count} exceeds destMax={destMax}")
    if not isinstance(kind, numbers.Integral) or int(kind) not in (0, 1, 2, 3, 4):
        fail(PARAM, f"{fn}: kind {kind!r} must be an aclrtMemcpyKind in 0..4")
    kind = aclrtMemcpyKind(int(kind))
    device = get_device()
    impl = None if stream is False else resolve_stream(stream, fn)
    if dst is None or src is None:
        fail(PARAM, f"{fn}: {'dst' if dst is None else 'src'} is null")
    if count == 0:
        return OK
    want_dst_device = {1: True, 2: False, 3: True, 0: False}.get(int(kind))
    want_src_device = {1: False, 2: True, 3: True, 0: False}.get(int(kind))

    def side(obj: Any, what: str, want_device: bool | None, writable: bool) -> Any:
        if isinstance(obj, numbers.Integral) and not isinstance(obj, bool):
            alloc = device.registry.check(int(obj), count, f"{fn}: {what}")
            if want_device is not None and alloc.on_device != want_device:
                fail(PARAM, f"{fn}: {what} {hex(obj)} is {'device' if alloc.on_device else 'host'} memory but "
                            f"kind {kind.name} needs {'device' if want_device else 'host'} memory")
            return int(obj)
        if want_device:
            fail(PARAM, f"{fn}: {what} must be a device address for kind {kind.name}")
        return _host_buffer(obj, fn, what, count, writable)

    d = side(dst, "dst", want_dst_device, True)
    s = side(src, "src", want_src_device, False)
    if isinstance(d, int) and isinstance(s, int):
        device.copy(d, s, count, impl)
    elif isinstance(d, int):
        device.copy_from_host(d, s, impl)
    elif isinstance(s, int):
        device.copy_to_host(d, s, impl)
    else:
        d[:] = s
    return OK


@c_api()
def aclrtMemcpy(dst: Any, destMax: int, src: Any, count: int, kind: int) -> int:
    return _memcpy("aclrtMemcpy", dst, destMax, src, count, kind, False)


@c_api()
def aclrtMemcpyAsync(dst: Any, destMax: int, src: Any, count: int, kind: int, stream: aclrtStream | None) -> int:
    return _memcpy("aclrtMemcpyAsync", dst, destMax, src, count, kind, stream)


def _memset(fn: str, devPtr: Any, maxCount: Any, value: Any, count: Any, stream: Any) -> int:
    maxCount = _size(maxCount, fn, "maxCount", allow_zero=True)
    count = _size(count, fn, "count", allow_zero=True)
    if count > maxCount:
        fail(PARAM, f"{fn}: count={count} exceeds maxCount={maxCount}")
    if not isinstance(value, numbers.Integral):
        fail(PARAM, f"{fn}: value {value!r} must be an integer")
    device = get_device()
    impl = None if stream is False else resolve_stream(stream, fn)
    if count == 0:
        return OK
    device.registry.check(devPtr, count, f"{fn}: devPtr")
    device.memset(int(devPtr), int(value), count, impl)
    return OK


@c_api()
def aclrtMemset(devPtr: int, maxCount: int, value: int, count: int) -> int:
    return _memset("aclrtMemset", devPtr, maxCount, value, count, False)


@c_api()
def aclrtMemsetAsync(devPtr: int, maxCount: int, value: int, count: int, stream: aclrtStream | None) -> int:
    return _memset("aclrtMemsetAsync", devPtr, maxCount, value, count, stream)
