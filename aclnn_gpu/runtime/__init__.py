"""The ACL runtime surface (acl_rt.h): init, devices, streams, events and memory.

Thin by design: every function validates its arguments (handles, sizes, pointer ranges against the
live allocations) and delegates to the device in use (`aclnn_gpu.device`). Nothing here raises for
a user error: `c_api` turns `OpError` into the returned code plus a recent-error message.

Devices, as ACL has them: `aclrtSetDevice(id)` makes `id` the calling thread's current device (a
thread that never called it works on device 0; `aclrtGetDevice` answers only after a SetDevice in
that thread, as ACL). Memory, streams, events and executors belong to the device current when they
were made. Work is enqueued only on a stream of the device that does it; another device's memory is
used only where peer access is enabled; `aclrtMemcpy` copies between any two devices. The kind
(`ACLNN_GPU_DEVICE`) and the number of virtual devices (`ACLNN_GPU_DEVICE_COUNT`) are read when the
first device is made. Code built on the runtime uses `device_of(id)` and `current_device()`.

Capture (`graph/`): while a stream captures (`DeviceStream.capture` is set), the calls its rules
forbid are refused here, each behind one check of `_capture.ACTIVE` or of the stream's `capture`.

Fork: the child starts with a clean runtime (`_after_fork_in_child` here and in `device/current.py`);
the parent's handles are refused there, and after a CUDA parent every device call names the fix
(the spawn start method). Which devices exist and which one is current: `device/current.py`.
"""
from __future__ import annotations

import numbers
import os
import threading
from typing import Any

import numpy as np

from ..device import current
from ..device.base import STOP_TIMEOUT_ENV, Device, DeviceEvent, DeviceStream, stop_timeout_s
from ..device.registry import Registry
from ..device.current import (  # noqa: F401 - re-exported: the names other code imports from here
    current_device, current_device_kind, device_of, find_allocation, get_device, release_devices, using_device,
)
from ..device.current import locate as _locate
from ..base.errors import c_api, fail
from . import capture as _capture
from ..base.status import aclError, aclrtMemcpyKind, aclSysParamOpt

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID


class _State:
    """aclInit's state and the system parameters. A fork() child starts with a fresh one."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.initialized = False
        self.finalized = False
        self.aclnn_initialized = False   # aclnnInit (aclnn_base.h) without aclInit
        self.sys_params: dict[int, int] = {aclSysParamOpt.ACL_OPT_DETERMINISTIC: 1}


_state = _State()


def _after_fork_in_child() -> None:
    """A fork() child starts with a clean runtime: not initialised, no device (`device/current.py`)."""
    global _state
    parent, _state = _state, _State()
    _state.sys_params = dict(parent.sys_params)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
    # every stream of every device runs its queued work first (a blocking host callback: at most the
    # stop bound); outside the lock, as queued callbacks may call ACL themselves
    stopped = current.drain_all() if _state.initialized else 0
    with _state.lock:
        if not _state.initialized:
            fail(aclError.ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: not initialised (or already finalised)")
        _state.initialized = False
        _state.finalized = True
    if stopped:
        _callbacks_stopped("aclFinalize", stopped)
    return OK


def _callbacks_stopped(fn: str, stopped: int) -> None:
    fail(aclError.ACL_ERROR_RT_WAIT_TIMEOUT,
         f"{fn}: {stopped} blocking host callback(s) (aclrtLaunchCallback with ACL_CALLBACK_BLOCK) were not "
         f"processed within {stop_timeout_s():g} s ({STOP_TIMEOUT_ENV}); their streams stopped waiting for them "
         f"and ran the rest of their work; {'the device was reset' if fn == 'aclrtResetDevice' else 'finalized'} "
         "(call aclrtProcessReport in the subscribed thread, or aclrtUnSubscribeReport, before it)")


def _device_id(value: Any, fn: str, what: str = "deviceId", code: int = aclError.ACL_ERROR_RT_INVALID_DEVICEID,
               choose: bool = True) -> int:
    """A device id of the platform in use (its range checked), or OpError(code). `choose=False`: no
    platform is chosen for the check; with none in use yet, any non-negative id passes."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        fail(code, f"{fn}: {what} {value!r} must be a non-negative integer")
    device_id, platform = int(value), current.platform() if choose else current.chosen_platform()
    if platform is not None and device_id >= platform.count:
        fail(code, f"{fn}: {what} {device_id} is out of range [0, {platform.count}): {platform.describe_count()}")
    return device_id


@c_api()
def aclrtSetDevice(deviceId: int) -> int:
    current.set_current(device_of(_device_id(deviceId, "aclrtSetDevice")))
    return OK


@c_api()
def aclrtResetDevice(deviceId: int) -> int:
    stopped = current.reset(_device_id(deviceId, "aclrtResetDevice", choose=False))   # never creates one
    if stopped:
        _callbacks_stopped("aclrtResetDevice", stopped)
    return OK


@c_api(n_out=1)
def aclrtGetDevice() -> tuple[int, int]:
    device_id = current.thread_device_id()
    if device_id is None:
        fail(aclError.ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetDevice: no device set on this thread (the current device "
                                                 "is per thread, as in ACL: call aclrtSetDevice in this thread)")
    return OK, device_id


@c_api(n_out=1)
def aclrtGetDeviceCount() -> tuple[int, int]:
    return OK, current.platform().count


@c_api()
def aclrtSynchronizeDevice() -> int:
    device = get_device()
    if _capture.ACTIVE:
        _capture.refuse_device_sync("aclrtSynchronizeDevice", device)
    device.synchronize_quietly()   # every stream, those whose handle was dropped included
    for stream in device.live_streams():   # the failures of queued work, reported once
        _sync(stream, "aclrtSynchronizeDevice")
    return OK


@c_api(n_out=1)
def aclrtDeviceCanAccessPeer(deviceId: int, peerDeviceId: int) -> tuple[int, int]:
    fn = "aclrtDeviceCanAccessPeer"
    first = _device_id(deviceId, fn)
    peer = _device_id(peerDeviceId, fn, "peerDeviceId")
    if first == peer:
        fail(aclError.ACL_ERROR_INVALID_PARAM, f"{fn}: peerDeviceId {peer} must differ from deviceId {first}")
    return OK, int(device_of(first).can_access_peer(peer))


@c_api()
def aclrtDeviceEnablePeerAccess(peerDeviceId: int, flags: int = 0) -> int:
    fn = "aclrtDeviceEnablePeerAccess"
    if flags != 0 or isinstance(flags, bool) or not isinstance(flags, numbers.Integral):
        fail(aclError.ACL_ERROR_FEATURE_UNSUPPORTED, f"{fn}: flags {flags!r} must be 0 (reserved)")
    device = get_device()
    peer = _device_id(peerDeviceId, fn, "peerDeviceId")
    if peer == device.id:
        fail(aclError.ACL_ERROR_INVALID_PARAM, f"{fn}: peerDeviceId {peer} is the current device; it must differ")
    with current.lock():
        if (device.id, peer) in current.peers():
            fail(aclError.ACL_ERROR_INVALID_PARAM, f"{fn}: peer access from device {device.id} to device {peer} "
                                                   "is already enabled")
        if not device.can_access_peer(peer):
            fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"{fn}: device {device.id} cannot access device "
                                                            f"{peer}'s memory (aclrtDeviceCanAccessPeer is 0)")
        device_of(peer)
        device.enable_peer_access(peer)
        current.peers().add((device.id, peer))
    return OK


@c_api()
def aclrtDeviceDisablePeerAccess(peerDeviceId: int) -> int:
    fn = "aclrtDeviceDisablePeerAccess"
    device = get_device()
    peer = _device_id(peerDeviceId, fn, "peerDeviceId")
    with current.lock():
        if (device.id, peer) not in current.peers():
            fail(aclError.ACL_ERROR_INVALID_PARAM, f"{fn}: peer access from device {device.id} to device {peer} "
                                                   "is not enabled")
        device.disable_peer_access(peer)
        current.peers().discard((device.id, peer))
        Registry.bump()   # checks that passed through this peer access are no longer valid
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


def resolve_stream(stream: Any, fn: str, status: int = PARAM, device: Device | None = None) -> DeviceStream:
    """The device stream for a handle that enqueues work on `device` (default: the calling thread's
    current device); None is that device's default stream. A stream of another device is refused."""
    if device is None:
        device = get_device()
    if stream is None:
        return device.default_stream
    owner = _stream_owner(stream, fn, status)
    if owner is not device:
        fail(status, f"{fn}: stream belongs to device {owner.id}, but this work runs on device {device.id} "
                     "(use a stream created while that device was current)")
    return stream.impl


def _stream_owner(stream: Any, fn: str, status: int = PARAM) -> Device:
    """The live device of a stream handle (not None), or OpError."""
    if not isinstance(stream, aclrtStream):
        fail(status, f"{fn}: stream must be an aclrtStream or None, got {type(stream).__name__}")
    if stream.destroyed:
        fail(status, f"{fn}: stream was destroyed")
    if stream.device.stale is not None:
        fail(status, f"{fn}: stream belongs to device {stream.device.id}, which {stream.device.stale}")
    return stream.device


def _sync(impl: DeviceStream, fn: str) -> None:
    from ..base.errors import OpError
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
    _stream_owner(stream, "aclrtDestroyStream")
    if stream.impl.capture is not None:
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED, f"aclrtDestroyStream: {stream.impl.capture.describe()}; end the "
                                                    "capture (aclmdlRICaptureEnd) before destroying the stream")
    stream.destroyed = True
    stream.impl.close()
    return OK


@c_api()
def aclrtSynchronizeStream(stream: aclrtStream | None) -> int:
    if stream is None:
        impl = get_device().default_stream
    else:   # any thread may wait for any device's stream
        _stream_owner(stream, "aclrtSynchronizeStream")
        impl = stream.impl
        if impl.capture is not None:
            _capture.refuse_stream_sync("aclrtSynchronizeStream", impl)
    _sync(impl, "aclrtSynchronizeStream")
    return OK


# ---------------------------------------------------------------------------- events
class aclrtEvent:
    __slots__ = ("impl", "device", "destroyed", "capture", "__weakref__")

    def __init__(self, impl: DeviceEvent, device: Device):
        self.impl = impl
        self.device = device
        self.destroyed = False
        self.capture = None   # the capture its latest record was made in (runtime/capture.py), else None


def _event(event: Any, fn: str, what: str = "event") -> DeviceEvent:
    if not isinstance(event, aclrtEvent):
        fail(PARAM, f"{fn}: {what} must be an aclrtEvent, got {type(event).__name__}")
    if event.destroyed:
        fail(PARAM, f"{fn}: {what} was destroyed")
    if event.device.stale is not None:
        fail(PARAM, f"{fn}: {what} belongs to device {event.device.id}, which {event.device.stale}")
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
    # recorded on a stream of the event's own device (CUDA's rule); any stream may wait for it
    target = resolve_stream(stream, "aclrtRecordEvent", device=event.device)
    if target.capture is not None:
        _capture.refuse_invalidated("aclrtRecordEvent", target.capture)
    impl.record(target)
    event.capture = target.capture
    return OK


@c_api()
def aclrtStreamWaitEvent(stream: aclrtStream | None, event: aclrtEvent) -> int:
    impl = _event(event, "aclrtStreamWaitEvent")
    device = get_device()
    target = resolve_stream(stream, "aclrtStreamWaitEvent", device=device)
    if target.capture is not None or event.capture is not None:
        _capture.refuse_wait("aclrtStreamWaitEvent", target, event)
        if target.capture is not None:
            _capture.refuse_invalidated("aclrtStreamWaitEvent", target.capture)
    device.stream_wait_event(target, impl)
    return OK


@c_api()
def aclrtSynchronizeEvent(event: aclrtEvent) -> int:
    impl = _event(event, "aclrtSynchronizeEvent")
    if event.capture is not None:
        _capture.refuse_captured_event("aclrtSynchronizeEvent", event)
    impl.synchronize()
    return OK


@c_api(n_out=1)
def aclrtQueryEventStatus(event: aclrtEvent) -> tuple[int, int]:
    from ..base.status import aclrtEventRecordedStatus as S
    impl = _event(event, "aclrtQueryEventStatus")
    if event.capture is not None:
        _capture.refuse_captured_event("aclrtQueryEventStatus", event)
    done = impl.query()
    return OK, S.ACL_EVENT_RECORDED_STATUS_COMPLETE if done else S.ACL_EVENT_RECORDED_STATUS_NOT_READY


@c_api(n_out=1)
def aclrtEventElapsedTime(start: aclrtEvent, end: aclrtEvent) -> tuple[int, float]:
    first = _event(start, "aclrtEventElapsedTime", "startEvent")
    last = _event(end, "aclrtEventElapsedTime", "endEvent")
    for impl, what, handle in ((first, "startEvent", start), (last, "endEvent", end)):
        if handle.capture is not None:
            _capture.refuse_captured_event(f"aclrtEventElapsedTime ({what})", handle)
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


MAX_ALLOCATION = (1 << 63) - 1   # PTRDIFF_MAX: no allocation of one address space is larger


def _allocate(fn: str, size: int, on_device: bool) -> int:
    device = get_device()
    if _capture.ACTIVE:
        _capture.refuse_unsafe(fn)
    if size > MAX_ALLOCATION:   # before NumPy's / CuPy's size conversions (ValueError, OverflowError)
        fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: {size} bytes exceed the largest allocation an address "
                                                      f"space holds ({MAX_ALLOCATION} bytes)")
    try:
        return device.malloc(size) if on_device else device.malloc_host(size)
    except (MemoryError, ValueError, OverflowError):   # NumPy: "array is too big" for what no memory holds
        fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: out of memory allocating {size} bytes")
    except Exception as e:  # CuPy's OutOfMemoryError is not a MemoryError
        if "OutOfMemory" in type(e).__name__:
            fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: out of memory allocating {size} bytes")
        raise


def cann_size(size: int, padded: bool = True) -> int:
    """The bytes CANN makes usable for a device allocation of `size` (acl_rt.h): aclrtMalloc's "real
    alloc size is aligned to 32 bytes and padded with 32 bytes", ALIGN_UP(size, 32) + 32 (`padded`);
    aclrtMallocAlign32's "aligned to 32 bytes with no padding", ALIGN_UP(size, 32). CANN's own samples
    rely on it (aclnnCrossEntropyLossGrad's copies an 8-byte host vector into a 16-byte int64 target)."""
    return -(-size // 32) * 32 + (32 if padded else 0)


def _device_malloc(fn: str, size: Any, policy: Any, padded: bool) -> tuple[int, int]:
    """aclrtMalloc / aclrtMallocAlign32: the allocation holds, and the pointer checks accept, CANN's
    usable size; its first byte is 64-byte aligned (the devices allocate on 64 bytes or more). The
    bytes between the caller's size and that size are zeroed: CANN's aclnnCrossEntropyLossGrad sample
    copies 8 bytes into aclrtMalloc(8) and reads 16 as int64 {0, 0}."""
    size = _size(size, fn, "size")
    if not isinstance(policy, numbers.Integral) or (int(policy) & 0xFF) > 7:
        fail(PARAM, f"{fn}: policy {policy!r} is not an aclrtMemMallocPolicy")
    usable = cann_size(size, padded)
    ptr = _allocate(fn, usable, True)
    device = get_device()
    if usable > size:   # the bytes past the caller's size read as 0, as CANN's samples expect of them,
        device.zero_fresh(ptr + size, usable - size)   # on whichever stream the caller then uses it
    alloc = device.registry.get(ptr)
    if alloc is not None:
        alloc.origin = f"{fn}({size}): ALIGN_UP({size}, 32){' + 32' if padded else ''} = {usable} usable bytes"
    return OK, ptr


@c_api(n_out=1)
def aclrtMalloc(size: int, policy: int = 0) -> tuple[int, int]:
    return _device_malloc("aclrtMalloc", size, policy, True)


@c_api(n_out=1)
def aclrtMallocAlign32(size: int, policy: int = 0) -> tuple[int, int]:
    return _device_malloc("aclrtMallocAlign32", size, policy, False)


@c_api(n_out=1)
def aclrtMallocHost(size: int) -> tuple[int, int]:
    return OK, _allocate("aclrtMallocHost", _size(size, "aclrtMallocHost", "size"), False)


def _free(ptr: Any, fn: str, on_device: bool) -> int:
    device, alloc = _locate(ptr, 1)   # any device's memory may be freed from any thread
    if alloc is not None and alloc.base != ptr:
        alloc = None
    if device is None or alloc is None or alloc.on_device != on_device:
        shown = hex(ptr) if isinstance(ptr, int) else repr(ptr)
        fail(PARAM, f"{fn}: {shown} is not the start of a live {'device' if on_device else 'host'} allocation "
                    "(freed, foreign or an interior pointer)")
    if _capture.ACTIVE:
        _capture.refuse_unsafe(fn)
    if alloc.models:
        fail(aclError.ACL_ERROR_RT_MEMORY_FREE,
             f"{fn}: {hex(ptr)} is used by {len(alloc.models)} captured model(s) (aclmdlRI) still alive; a replay "
             "would touch freed memory: call aclmdlRIDestroy on them first")
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
    if not isinstance(kind, numbers.Integral) or isinstance(kind, bool) or not 0 <= int(kind) <= 7:
        fail(PARAM, f"{fn}: kind {kind!r} must be an aclrtMemcpyKind in 0..7")
    kind = aclrtMemcpyKind(int(kind))
    device = get_device()
    impl = None if stream is False else resolve_stream(stream, fn, device=device)
    capture = None
    if impl is None:
        if _capture.ACTIVE:
            _capture.refuse_unsafe(fn)
    elif impl.capture is not None:
        capture = impl.capture
        _capture.refuse_invalidated(fn, capture)
    if dst is None or src is None:
        fail(PARAM, f"{fn}: {'dst' if dst is None else 'src'} is null")
    if count == 0:
        return OK
    # HOST_TO_BUF_TO_DEVICE (5) is HOST_TO_DEVICE through a staging buffer; INNER (6, one device) and
    # INTER (7, two devices) DEVICE_TO_DEVICE are DEVICE_TO_DEVICE; DEFAULT (4) takes what it is given
    want_dst_device = {0: False, 1: True, 2: False, 3: True, 5: True, 6: True, 7: True}.get(int(kind))
    want_src_device = {0: False, 1: False, 2: True, 3: True, 5: False, 6: True, 7: True}.get(int(kind))
    others: list[Device] = []   # other devices whose memory a synchronous copy touches

    def side(obj: Any, what: str, want_device: bool | None, writable: bool) -> Any:
        if isinstance(obj, numbers.Integral) and not isinstance(obj, bool):
            owner, alloc = _locate(int(obj), count)   # a copy may cross devices (cudaMemcpyDefault does)
            if alloc is None:
                alloc = device.registry.check(int(obj), count, f"{fn}: {what}")   # fails, saying why
            if owner is not None and owner is not device:
                others.append(owner)
            if want_device is not None and alloc.on_device != want_device:
                fail(PARAM, f"{fn}: {what} {hex(obj)} is {'device' if alloc.on_device else 'host'} memory but "
                            f"kind {kind.name} needs {'device' if want_device else 'host'} memory")
            if capture is not None:
                capture.hold(int(obj), count)
            return int(obj)
        if want_device:
            fail(PARAM, f"{fn}: {what} must be a device address for kind {kind.name}")
        return _host_buffer(obj, fn, what, count, writable)

    d = side(dst, "dst", want_dst_device, True)
    s = side(src, "src", want_src_device, False)
    if int(kind) == aclrtMemcpyKind.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE and others:
        fail(PARAM, f"{fn}: kind ACL_MEMCPY_INNER_DEVICE_TO_DEVICE copies within one device, but dst or src is "
                    "another device's memory (use ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)")
    if impl is None:
        for other in others:   # synchronous: after the work queued on the other device too
            other.synchronize_quietly()
    if isinstance(d, int) and isinstance(s, int):
        device.copy(d, s, count, impl)
    elif isinstance(d, int):
        device.copy_from_host(d, s, impl)
    elif isinstance(s, int):
        device.copy_to_host(d, s, impl)
    elif capture is not None:   # no device work to record: it would run now and never at a replay
        fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
             f"{fn}: dst and src are both host buffer objects while the stream captures; such a copy is not "
             "recorded into the model (copy between aclrtMallocHost addresses, or make it outside the capture)")
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
    impl = None if stream is False else resolve_stream(stream, fn, device=device)
    if impl is None:
        if _capture.ACTIVE:
            _capture.refuse_unsafe(fn)
    elif impl.capture is not None:
        _capture.refuse_invalidated(fn, impl.capture)
    if count == 0:
        return OK
    owner, alloc = _locate(devPtr, count)
    if alloc is None:
        device.registry.check(devPtr, count, f"{fn}: devPtr")   # fails, saying why
    if impl is not None and impl.capture is not None:
        impl.capture.hold(devPtr, count)
    if impl is None and owner is not None:
        device = owner   # synchronous: the owning device fills its own memory
    device.memset(int(devPtr), int(value), count, impl)
    return OK


@c_api()
def aclrtMemset(devPtr: int, maxCount: int, value: int, count: int) -> int:
    return _memset("aclrtMemset", devPtr, maxCount, value, count, False)


@c_api()
def aclrtMemsetAsync(devPtr: int, maxCount: int, value: int, count: int, stream: aclrtStream | None) -> int:
    return _memset("aclrtMemsetAsync", devPtr, maxCount, value, count, stream)
