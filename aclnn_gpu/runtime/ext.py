"""The rest of the ACL runtime an Ascend program calls (acl.h, acl_base.h, acl_rt.h), over
`runtime/`: the half-precision conversions and element sizes, the version and SoC queries,
contexts, stream and event status, the timeout and force variants, and memory information.

Contexts, as ACL has them: a context binds a device to the threads that make it current. Each
device has one default context (the one `aclrtSetDevice` makes current); `aclrtCreateContext(id)`
makes another and makes it current in the calling thread; `aclrtSetCurrentContext(ctx)` makes
ctx's device the thread's current device. Streams, events and memory belong to devices (as in
`runtime/`), so a context carries no resources of its own: destroying one only ends its use.

Every function is C-style (`errors.c_api`): a status, then the out-parameters; nothing raises for
a caller's mistake.
"""
from __future__ import annotations

import itertools
import numbers
import os
import threading
import weakref
from typing import Any

import numpy as np

from ..base import dtypes
from ..device import current
from ..base.errors import c_api, fail
from . import (
    _event, _stream_owner, _sync, aclrtCtxSetSysParamOpt, aclrtDestroyStream, aclrtGetSysParamOpt, aclrtMalloc,
    aclrtResetDevice, aclrtStream, aclrtSynchronizeDevice, aclrtSynchronizeEvent, aclrtSynchronizeStream,
    device_of, get_device,
)
from ..base.status import aclDataType, aclError, aclnnStatus

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID
VERSION = (1, 17, 0)   # ACL_MAJOR_VERSION, ACL_MINOR_VERSION, ACL_PATCH_VERSION of include/acl/acl.h


# ---------------------------------------------------------------------------- acl_base.h helpers
def aclFloat16ToFloat(value: int) -> float:
    """The float an IEEE half's bits (an unsigned 16-bit integer) stand for."""
    return float(np.array([int(value) & 0xFFFF], np.uint16).view(np.float16)[0])


def aclFloatToFloat16(value: float) -> int:
    """The bits of the IEEE half nearest `value` (ties to even), as an unsigned 16-bit integer."""
    with np.errstate(over="ignore"):
        return int(np.array([value], np.float32).astype(np.float16).view(np.uint16)[0])


def aclDataTypeSize(dataType: int) -> int:
    """Bytes per element of `dataType`; 0 for one with no whole-byte size (ACL_DT_UNDEFINED,
    ACL_STRING, the sub-byte types) or a value that is no aclDataType, as CANN answers."""
    if not isinstance(dataType, numbers.Integral) or not dtypes.is_known(int(dataType)):
        return 0
    if int(dataType) in (aclDataType.ACL_DT_UNDEFINED, aclDataType.ACL_STRING):
        return 0
    try:
        return int(dtypes.itemsize(int(dataType)))
    except (KeyError, ValueError, TypeError):
        return 0


def runtime_state() -> Any:
    from .. import runtime
    return runtime._state


# ---------------------------------------------------------------------------- versions and the platform
@c_api(n_out=3)
def aclrtGetVersion() -> tuple[int, int, int, int]:
    return (OK, *VERSION)


def aclrtGetSocName() -> str:
    """The name of the chip in use: the name the device reports (the GPU's on cuda, the emulator's on
    emulated), "aclnn_gpu-<kind>" where it has none (cpu); CANN's NULL (here "") when no device can be
    opened."""
    try:
        device = get_device()
    except Exception:   # noqa: BLE001 - CANN answers NULL, not a code
        return ""
    name = getattr(device, "properties", {}).get("name", b"")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return str(name) or f"aclnn_gpu-{device.kind}"


@c_api(n_out=1)
def aclrtGetRunMode() -> tuple[int, int]:
    """ACL_HOST (1): the program runs on the host and drives the device, as with an Ascend card."""
    return OK, 1


# ---------------------------------------------------------------------------- contexts
class aclrtContext:
    """A context handle (C's aclrtContext): a device id, its default-ness and whether it is alive."""

    __slots__ = ("device_id", "default", "destroyed", "__weakref__")

    def __init__(self, device_id: int, default: bool):
        self.device_id = device_id
        self.default = default
        self.destroyed = False

    def __repr__(self) -> str:
        kind = "default" if self.default else "created"
        return f"aclrtContext(device {self.device_id}, {kind}{', destroyed' if self.destroyed else ''})"


_defaults: dict[int, aclrtContext] = {}
_defaults_lock = threading.Lock()
_tls = threading.local()


def _after_fork_in_child() -> None:
    """A fork() child: the parent's contexts are not current in it (its runtime starts clean)."""
    global _tls, _defaults_lock
    _tls, _defaults_lock = threading.local(), threading.Lock()
    _defaults.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _default_context(device_id: int) -> aclrtContext:
    with _defaults_lock:
        ctx = _defaults.get(device_id)
        if ctx is None:
            ctx = _defaults[device_id] = aclrtContext(device_id, True)
        return ctx


def _context(context: Any, fn: str) -> aclrtContext:
    if context is None:
        fail(PARAM, f"{fn}: context is nullptr")
    if not isinstance(context, aclrtContext):
        fail(PARAM, f"{fn}: context is not an aclrtContext (a handle that was never created)")
    if context.destroyed:
        fail(PARAM, f"{fn}: context was already destroyed (aclrtDestroyContext)")
    return context


@c_api(n_out=1)
def aclrtCreateContext(deviceId: int) -> tuple[int, aclrtContext]:
    from . import _device_id
    device = device_of(_device_id(deviceId, "aclrtCreateContext"))
    ctx = aclrtContext(device.id, False)
    current.set_current(device)
    _tls.context = ctx
    return OK, ctx


@c_api()
def aclrtDestroyContext(context: aclrtContext) -> int:
    ctx = _context(context, "aclrtDestroyContext")
    if ctx.default:
        fail(PARAM, f"aclrtDestroyContext: the default context of device {ctx.device_id} cannot be destroyed "
                    "(aclrtResetDevice releases it)")
    ctx.destroyed = True
    if getattr(_tls, "context", None) is ctx:
        _tls.context = None
    return OK


@c_api()
def aclrtSetCurrentContext(context: aclrtContext) -> int:
    ctx = _context(context, "aclrtSetCurrentContext")
    current.set_current(device_of(ctx.device_id))
    _tls.context = ctx
    return OK


@c_api(n_out=1)
def aclrtGetCurrentContext() -> tuple[int, aclrtContext]:
    """The context the thread made current, else its device's default context."""
    ctx = getattr(_tls, "context", None)
    device_id = current.thread_device_id()
    if ctx is not None and not ctx.destroyed and ctx.device_id == device_id:
        return OK, ctx
    if device_id is None:
        fail(aclError.ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetCurrentContext: no context is current on this thread "
                                                 "(call aclrtSetDevice or aclrtSetCurrentContext first)")
    return OK, _default_context(device_id)


# ---------------------------------------------------------------------------- devices, streams and events
@c_api()
def aclrtResetDeviceForce(deviceId: int) -> int:
    return _forward("aclrtResetDeviceForce", aclrtResetDevice(deviceId))


def _timeout(value: Any, fn: str) -> int:
    """CANN's timeout in ms: -1 waits for ever; a positive value is accepted and waited for ever too
    (the devices here have no bounded wait), 0 and values below -1 are refused."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) == 0 or int(value) < -1:
        fail(PARAM, f"{fn}: timeout {value!r} must be -1 (no limit) or a positive number of milliseconds")
    return int(value)


def _forward(fn: str, status: int) -> int:
    """A wrapped call's status, its message renamed to `fn` (the caller's C name)."""
    if status != OK:
        from ..base.errors import aclGetRecentErrMsg
        message = aclGetRecentErrMsg()
        fail(status, f"{fn}{message[message.index(':'):]}" if ":" in message else f"{fn}: {message}")
    return OK


@c_api()
def aclrtSynchronizeDeviceWithTimeout(timeout: int) -> int:
    _timeout(timeout, "aclrtSynchronizeDeviceWithTimeout")
    return _forward("aclrtSynchronizeDeviceWithTimeout", aclrtSynchronizeDevice())


@c_api()
def aclrtSynchronizeStreamWithTimeout(stream: aclrtStream | None, timeout: int) -> int:
    _timeout(timeout, "aclrtSynchronizeStreamWithTimeout")
    return _forward("aclrtSynchronizeStreamWithTimeout", aclrtSynchronizeStream(stream))


@c_api()
def aclrtSynchronizeEventWithTimeout(event: Any, timeout: int) -> int:
    _timeout(timeout, "aclrtSynchronizeEventWithTimeout")
    return _forward("aclrtSynchronizeEventWithTimeout", aclrtSynchronizeEvent(event))


@c_api()
def aclrtDestroyStreamForce(stream: aclrtStream) -> int:
    """The stream's queued work is waited for, then it is destroyed (nothing here can abort a task)."""
    fn = "aclrtDestroyStreamForce"
    if stream is None:
        fail(PARAM, f"{fn}: stream is nullptr (the default stream cannot be destroyed)")
    _stream_owner(stream, fn)
    _sync(stream.impl, fn)
    return _forward(fn, aclrtDestroyStream(stream))


@c_api(n_out=1)
def aclrtStreamQuery(stream: aclrtStream | None) -> tuple[int, int]:
    """ACL_STREAM_STATUS_COMPLETE (0) when everything queued on the stream has run, else NOT_READY (1)."""
    fn = "aclrtStreamQuery"
    if stream is None:
        impl = get_device().default_stream
    else:
        _stream_owner(stream, fn)
        impl = stream.impl
    if impl.capture is not None:
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED, f"{fn}: the stream is capturing (aclmdlRICaptureBegin); "
                                                    "a capturing stream has no completion to query")
    cupy_stream: Any = getattr(impl, "cupy", None)
    # a host stream (cpu; emulated's CuPy stand-in) is idle when its worker ran all it was given; a
    # CUDA stream answers cudaStreamQuery (CuPy's `done`)
    worker = getattr(impl, "worker", None) or getattr(cupy_stream, "worker", None)
    done = worker.finished_all() if worker is not None else bool(cupy_stream.done)
    return OK, 0 if done else 1


@c_api()
def aclrtResetEvent(event: Any, stream: aclrtStream | None) -> int:
    """Valid on any live event and stream; the event keeps its last record (a later record replaces
    it), which is what a reset event's waits and queries see on an NPU once it is recorded again."""
    _event(event, "aclrtResetEvent")
    if stream is not None:
        _stream_owner(stream, "aclrtResetEvent")
    return OK


@c_api(n_out=1)
def aclrtQueryEvent(event: Any) -> tuple[int, int]:
    """ACL_EVENT_STATUS_COMPLETE (0) or NOT_READY (1): the older spelling of aclrtQueryEventStatus."""
    impl = _event(event, "aclrtQueryEvent")
    return OK, 0 if impl.query() else 1


@c_api(n_out=1)
def aclrtQueryEventWaitStatus(event: Any) -> tuple[int, int]:
    """ACL_EVENT_WAIT_STATUS_COMPLETE (0) once what the event recorded has run, else NOT_READY (1)."""
    impl = _event(event, "aclrtQueryEventWaitStatus")
    return OK, 0 if impl.query() else 1


@c_api(n_out=1)
def aclrtCtxGetSysParamOpt(opt: int) -> tuple[int, int]:
    status, value = aclrtGetSysParamOpt(opt)
    _forward("aclrtCtxGetSysParamOpt", status)
    return OK, value


@c_api()
def aclrtSetSysParamOpt(opt: int, value: int) -> int:
    return _forward("aclrtSetSysParamOpt", aclrtCtxSetSysParamOpt(opt, value))


# ---------------------------------------------------------------------------- memory
@c_api(n_out=1)
def aclrtMallocCached(size: int, policy: int = 0) -> tuple[int, int]:
    """aclrtMalloc's memory (the devices here keep no separate cached heap)."""
    status, ptr = aclrtMalloc(size, policy)
    _forward("aclrtMallocCached", status)
    return OK, ptr


def _flush(fn: str, devPtr: Any, size: Any) -> int:
    """Cache maintenance of a device range: the range is checked; nothing else to do, device and
    host see one coherent memory here."""
    from . import _size, find_allocation
    count = _size(size, fn, "size")
    if devPtr is None:
        fail(PARAM, f"{fn}: devPtr is nullptr")
    if find_allocation(devPtr, count) is None:
        get_device().registry.check(devPtr, count, f"{fn}: devPtr")   # fails, saying why
    return OK


@c_api()
def aclrtMemFlush(devPtr: int, size: int) -> int:
    return _flush("aclrtMemFlush", devPtr, size)


@c_api()
def aclrtMemInvalidate(devPtr: int, size: int) -> int:
    return _flush("aclrtMemInvalidate", devPtr, size)


@c_api(n_out=2)
def aclrtGetMemInfo(attr: int) -> tuple[int, int, int]:
    """(free, total) bytes of the current device (`Device.mem_info`): cudaMemGetInfo on cuda and
    emulated (whose CuPy stand-in answers the host's physical memory, its device memory), the host's on
    cpu. Every aclrtMemAttr names the one memory a device has here."""
    fn = "aclrtGetMemInfo"
    if not isinstance(attr, numbers.Integral) or isinstance(attr, bool) or not 0 <= int(attr) <= 11:
        fail(PARAM, f"{fn}: attr {attr!r} is not an aclrtMemAttr (0..11)")
    free, total = get_device().mem_info()
    return OK, int(free), int(total)


# ---------------------------------------------------------------------------- aclnn's own initialisation
@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclnnInit(configPath: str | None = None) -> int:
    """aclnn_base.h's lighter aclInit for programs that run only aclnn operators: it opens the same
    runtime (a program may call both); a configPath that is not a readable file is refused."""
    if configPath is not None and configPath != "" and not os.path.isfile(configPath):
        fail(aclnnStatus.ACLNN_ERR_PARAM_INVALID, f"aclnnInit: configPath {configPath!r} is not a readable file")
    runtime_state().aclnn_initialized = True
    return OK


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclnnFinalize() -> int:
    runtime_state().aclnn_initialized = False
    return OK


# ---------------------------------------------------------------------------- more queries and 2D copies
@c_api(n_out=1)
def aclrtQueryDeviceStatus(deviceId: int) -> tuple[int, int]:
    """ACL_RT_DEVICE_STATUS_NORMAL (0), or ABNORMAL (1) for a device whose runtime can no longer be
    used (its `stale` reason: a fork() child of a CUDA parent, a device reset under live handles)."""
    from . import _device_id
    device = device_of(_device_id(deviceId, "aclrtQueryDeviceStatus"))
    return OK, 1 if device.stale is not None else 0


@c_api(n_out=1)
def aclrtDeviceGetBareTgid() -> tuple[int, int]:
    """The process id (CANN's thread group id of the host process)."""
    return OK, os.getpid()


_stream_ids: "weakref.WeakKeyDictionary[aclrtStream, int]" = weakref.WeakKeyDictionary()
_stream_ids_lock = threading.Lock()


@c_api(n_out=1)
def aclrtStreamGetId(stream: aclrtStream | None) -> tuple[int, int]:
    """A stream's id, stable for its life and unique in the process; 0 for the default stream."""
    if stream is None:
        return OK, 0
    _stream_owner(stream, "aclrtStreamGetId")
    with _stream_ids_lock:
        found = _stream_ids.get(stream)
        if found is None:
            found = _stream_ids[stream] = next(_next_stream_id)
    return OK, found


_next_stream_id = itertools.count(1)


def _span(pitch: int, width: int, height: int) -> int:
    return pitch * (height - 1) + width if height else 0


def _memcpy2d(fn: str, dst: Any, dpitch: Any, src: Any, spitch: Any, width: Any, height: Any, kind: Any,
              stream: Any) -> int:
    """`height` rows of `width` bytes, row i from src + i * spitch to dst + i * dpitch, each row an
    aclrtMemcpy(Async) of `kind` (its checks and its ordering); both whole ranges are checked first,
    so a refused copy copies nothing."""
    from . import _memcpy, _size
    dpitch, spitch = _size(dpitch, fn, "dpitch"), _size(spitch, fn, "spitch")
    width, height = _size(width, fn, "width", allow_zero=True), _size(height, fn, "height", allow_zero=True)
    if width > dpitch or width > spitch:
        fail(PARAM, f"{fn}: width {width} exceeds {'dpitch' if width > dpitch else 'spitch'} "
                    f"{dpitch if width > dpitch else spitch}")
    if dst is None or src is None:
        fail(PARAM, f"{fn}: {'dst' if dst is None else 'src'} is nullptr")
    rows = []
    for what, side, pitch in (("dst", dst, dpitch), ("src", src, spitch)):
        span = _span(pitch, width, height)
        if isinstance(side, numbers.Integral) and not isinstance(side, bool):
            from . import find_allocation
            if span and find_allocation(int(side), span) is None:
                get_device().registry.check(int(side), span, f"{fn}: {what}")   # fails, saying why
            rows.append([int(side) + i * pitch for i in range(height)])
        else:
            try:
                view = memoryview(side).cast("B")
            except (TypeError, ValueError):
                fail(PARAM, f"{fn}: {what} must be an address or a buffer object, got {type(side).__name__}")
            if view.nbytes < span:
                fail(PARAM, f"{fn}: {what} buffer holds {view.nbytes} bytes, fewer than the {span} its pitch, "
                            "width and height reach")
            rows.append([view[i * pitch:i * pitch + width] for i in range(height)])
    for d, s in zip(*rows):
        status = _memcpy(fn, d, width, s, width, kind, stream)
        if status != OK:
            return status
    return OK


@c_api()
def aclrtMemcpy2d(dst: Any, dpitch: int, src: Any, spitch: int, width: int, height: int, kind: int) -> int:
    return _memcpy2d("aclrtMemcpy2d", dst, dpitch, src, spitch, width, height, kind, False)


@c_api()
def aclrtMemcpy2dAsync(dst: Any, dpitch: int, src: Any, spitch: int, width: int, height: int, kind: int,
                       stream: aclrtStream | None) -> int:
    return _memcpy2d("aclrtMemcpy2dAsync", dst, dpitch, src, spitch, width, height, kind, stream)


@c_api(n_out=3)
def aclrtPointerGetAttributes(ptr: Any) -> tuple[int, int, int, int]:
    """(ret, location type, location id, page size) of an address: ACL_MEM_LOCATION_TYPE_DEVICE (1)
    and the owning device for aclrtMalloc memory, HOST (0) for aclrtMallocHost memory and any other
    host address (id 0); the page size the allocation is mapped with (the host's page, 2 MiB for a
    GPU's memory)."""
    from . import _locate
    if ptr is None:
        fail(PARAM, "aclrtPointerGetAttributes: ptr is nullptr")
    if not isinstance(ptr, numbers.Integral) or isinstance(ptr, bool) or ptr < 0:
        fail(PARAM, f"aclrtPointerGetAttributes: ptr {ptr!r} must be an address")
    device, alloc = _locate(int(ptr), 1)
    page = os.sysconf("SC_PAGE_SIZE")
    if device is None or alloc is None or not alloc.on_device:
        return OK, 0, 0, page
    return OK, 1, device.id, device.page_size


# ---------------------------------------------------------------------------- the thread's last error
def _last_error(fn: str, level: Any, clear: bool) -> int:
    from ..base.errors import recent_status
    if not isinstance(level, numbers.Integral) or isinstance(level, bool) or int(level) != 0:
        fail(aclError.ACL_ERROR_INVALID_PARAM, f"{fn}: level {level!r} must be ACL_RT_THREAD_LEVEL (0)")
    return recent_status(clear)


@c_api()
def aclrtPeekAtLastError(level: int) -> int:
    """The code of the calling thread's last failed call (ACL_SUCCESS when none), left in place."""
    return _last_error("aclrtPeekAtLastError", level, False)


@c_api()
def aclrtGetLastError(level: int) -> int:
    """The code of the calling thread's last failed call (ACL_SUCCESS when none), then cleared."""
    return _last_error("aclrtGetLastError", level, True)


# ---------------------------------------------------------------------------- timeouts and failure modes
def _no_timeout(fn: str, timeout: Any, unit: str) -> int:
    """Op timeouts: 0 (no limit) is what the devices here do, so it is accepted; a limit would need a
    running kernel to be interrupted, which neither a GPU kernel launched here nor a host task can be."""
    if not isinstance(timeout, numbers.Integral) or isinstance(timeout, bool) or not 0 <= int(timeout) < 2 ** 32:
        fail(PARAM, f"{fn}: timeout {timeout!r} must be a uint32_t ({unit})")
    if int(timeout) != 0:
        fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
             f"{fn}: timeout {timeout} {unit}: an operator here cannot be interrupted once it runs; only 0 (no "
             "limit) is supported")
    return OK


@c_api()
def aclrtSetOpWaitTimeout(timeout: int) -> int:
    return _no_timeout("aclrtSetOpWaitTimeout", timeout, "s")


@c_api()
def aclrtSetOpExecuteTimeOut(timeout: int) -> int:
    return _no_timeout("aclrtSetOpExecuteTimeOut", timeout, "s")


@c_api()
def aclrtSetOpExecuteTimeOutWithMs(timeout: int) -> int:
    return _no_timeout("aclrtSetOpExecuteTimeOutWithMs", timeout, "ms")


@c_api()
def aclrtSetStreamFailureMode(stream: aclrtStream | None, mode: int) -> int:
    """ACL_STOP_ON_FAILURE (1) is how every stream here behaves: after a failed task the stream runs
    nothing more until the failure is reported (its synchronize, or the next call on it), as a CUDA
    error is sticky. ACL_CONTINUE_ON_FAILURE (0) is refused as unsupported."""
    fn = "aclrtSetStreamFailureMode"
    if stream is not None:
        _stream_owner(stream, fn)
    if not isinstance(mode, numbers.Integral) or isinstance(mode, bool) or int(mode) not in (0, 1):
        fail(PARAM, f"{fn}: mode {mode!r} must be ACL_CONTINUE_ON_FAILURE (0) or ACL_STOP_ON_FAILURE (1)")
    if int(mode) == 0:
        fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
             f"{fn}: ACL_CONTINUE_ON_FAILURE: a stream here stops at its first failed task until the failure is "
             "reported (ACL_STOP_ON_FAILURE is the mode every stream has)")
    return OK
