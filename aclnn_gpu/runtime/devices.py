"""The runtime's life and its devices (acl.h, acl_rt.h, aclnn_base.h): aclInit / aclFinalize and
aclnnInit / aclnnFinalize, the current device (set, get, reset, count, synchronise, peer access),
contexts, the system parameters, the version / SoC / run-mode / device-status queries, the op
timeouts and the thread's last error.

Devices, as ACL has them: `aclrtSetDevice(id)` makes `id` the calling thread's current device (a
thread that never called it works on device 0; `aclrtGetDevice` answers only after a SetDevice in
that thread, as ACL). Which devices exist and which one is current: `device/current.py`.

Contexts, as ACL has them: a context binds a device to the threads that make it current. Each
device has one default context (the one `aclrtSetDevice` makes current); `aclrtCreateContext(id)`
makes another and makes it current in the calling thread; `aclrtSetCurrentContext(ctx)` makes
ctx's device the thread's current device. Streams, events and memory belong to devices, so a
context carries no resources of its own: destroying one only ends its use.

Fork: the child starts with a clean runtime (`_after_fork_in_child` here and in `device/current.py`):
not initialised, no context current; the system parameters stay the parent's.
"""
from __future__ import annotations

import numbers
import os
import threading
from typing import Any

from ..base.errors import c_api, fail, live_handle, recent_status
from ..base.status import aclError, aclnnStatus, aclSysParamOpt
from ..device import current
from ..device.base import STOP_TIMEOUT_ENV, stop_timeout_s
from ..device.current import device_of, get_device
from ..device.registry import Registry
from . import capture
from .calls import forward_status, timeout_ms
from .handles import sync_stream

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID
VERSION = (1, 17, 0)   # ACL_MAJOR_VERSION, ACL_MINOR_VERSION, ACL_PATCH_VERSION of include/acl/acl.h


class AclState:
    """aclInit's state and the system parameters: one per process (a fork() child resets it in place,
    so every module that holds it sees the child's)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.initialized = False
        self.finalized = False
        self.aclnn_initialized = False   # aclnnInit (aclnn_base.h) without aclInit
        self.sys_params: dict[int, int] = {aclSysParamOpt.ACL_OPT_DETERMINISTIC: 1}

    def reset_in_fork_child(self) -> None:
        """Not initialised, a fresh lock (a parent thread may have held it); the parameters kept."""
        self.lock = threading.RLock()
        self.initialized = self.finalized = self.aclnn_initialized = False
        self.sys_params = dict(self.sys_params)


acl_state = AclState()


# ---------------------------------------------------------------------------- init and finalize
@c_api()
def aclInit(configPath: str | None = None) -> int:
    with acl_state.lock:
        if acl_state.initialized:
            fail(aclError.ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialised in this process")
        if configPath is not None and configPath != "" and not os.path.isfile(configPath):
            fail(aclError.ACL_ERROR_INVALID_FILE, f"aclInit: configPath {configPath!r} is not a readable file")
        acl_state.initialized = True
        acl_state.finalized = False
    return OK


@c_api()
def aclFinalize() -> int:
    # every stream of every device runs its queued work first (a blocking host callback: at most the
    # stop bound); outside the lock, as queued callbacks may call ACL themselves
    stopped = current.drain_all() if acl_state.initialized else 0
    with acl_state.lock:
        if not acl_state.initialized:
            fail(aclError.ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: not initialised (or already finalised)")
        acl_state.initialized = False
        acl_state.finalized = True
    if stopped:
        _callbacks_stopped("aclFinalize", stopped)
    return OK


def _callbacks_stopped(fn: str, stopped: int) -> None:
    fail(aclError.ACL_ERROR_RT_WAIT_TIMEOUT,
         f"{fn}: {stopped} blocking host callback(s) (aclrtLaunchCallback with ACL_CALLBACK_BLOCK) were not "
         f"processed within {stop_timeout_s():g} s ({STOP_TIMEOUT_ENV}); their streams stopped waiting for them "
         f"and ran the rest of their work; {'the device was reset' if fn == 'aclrtResetDevice' else 'finalized'} "
         "(call aclrtProcessReport in the subscribed thread, or aclrtUnSubscribeReport, before it)")


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclnnInit(configPath: str | None = None) -> int:
    """aclnn_base.h's lighter aclInit for programs that run only aclnn operators: it opens the same
    runtime (a program may call both); a configPath that is not a readable file is refused."""
    if configPath is not None and configPath != "" and not os.path.isfile(configPath):
        fail(aclnnStatus.ACLNN_ERR_PARAM_INVALID, f"aclnnInit: configPath {configPath!r} is not a readable file")
    acl_state.aclnn_initialized = True
    return OK


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclnnFinalize() -> int:
    acl_state.aclnn_initialized = False
    return OK


# ---------------------------------------------------------------------------- devices
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


@c_api()
def aclrtResetDeviceForce(deviceId: int) -> int:
    return forward_status("aclrtResetDeviceForce", aclrtResetDevice(deviceId))


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
    if capture.ACTIVE:
        capture.refuse_device_sync("aclrtSynchronizeDevice", device)
    device.synchronize_quietly()   # every stream, those whose handle was dropped included
    for stream in device.live_streams():   # the failures of queued work, reported once
        sync_stream(stream, "aclrtSynchronizeDevice")
    return OK


@c_api()
def aclrtSynchronizeDeviceWithTimeout(timeout: int) -> int:
    timeout_ms(timeout, "aclrtSynchronizeDeviceWithTimeout")
    return forward_status("aclrtSynchronizeDeviceWithTimeout", aclrtSynchronizeDevice())


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


@c_api(n_out=1)
def aclrtQueryDeviceStatus(deviceId: int) -> tuple[int, int]:
    """ACL_RT_DEVICE_STATUS_NORMAL (0), or ABNORMAL (1) for a device whose runtime can no longer be
    used (its `stale` reason: a fork() child of a CUDA parent, a device reset under live handles)."""
    device = device_of(_device_id(deviceId, "aclrtQueryDeviceStatus"))
    return OK, 1 if device.stale is not None else 0


@c_api(n_out=1)
def aclrtDeviceGetBareTgid() -> tuple[int, int]:
    """The process id (CANN's thread group id of the host process)."""
    return OK, os.getpid()


# ---------------------------------------------------------------------------- system parameters
@c_api()
def aclrtCtxSetSysParamOpt(opt: int, value: int) -> int:
    if opt not in aclSysParamOpt._value2member_map_:
        fail(PARAM, f"aclrtCtxSetSysParamOpt: opt {opt!r} is not an aclSysParamOpt")
    acl_state.sys_params[int(opt)] = int(value)
    return OK


@c_api(n_out=1)
def aclrtGetSysParamOpt(opt: int) -> tuple[int, int]:
    if opt not in acl_state.sys_params:
        fail(PARAM, f"aclrtGetSysParamOpt: opt {opt!r} has no value")
    return OK, acl_state.sys_params[int(opt)]


@c_api(n_out=1)
def aclrtCtxGetSysParamOpt(opt: int) -> tuple[int, int]:
    status, value = aclrtGetSysParamOpt(opt)
    forward_status("aclrtCtxGetSysParamOpt", status)
    return OK, value


@c_api()
def aclrtSetSysParamOpt(opt: int, value: int) -> int:
    return forward_status("aclrtSetSysParamOpt", aclrtCtxSetSysParamOpt(opt, value))


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
    """A fork() child starts with a clean runtime: not initialised, and the parent's contexts are not
    current in it (no device either: `device/current.py`)."""
    global _tls, _defaults_lock
    acl_state.reset_in_fork_child()
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
    return live_handle(context, aclrtContext, fn, "context", PARAM, destroyer="aclrtDestroyContext")


@c_api(n_out=1)
def aclrtCreateContext(deviceId: int) -> tuple[int, aclrtContext]:
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


# ---------------------------------------------------------------------------- the thread's last error
def _last_error(fn: str, level: Any, clear: bool) -> int:
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


# ---------------------------------------------------------------------------- op timeouts
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
