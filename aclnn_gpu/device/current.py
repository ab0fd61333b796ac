"""The process's devices and each thread's current one: which kind runs (`Platform`, from
ACLNN_GPU_DEVICE and ACLNN_GPU_DEVICE_COUNT), the device object of each id, the per-thread current
device (a thread-local read on the hot path), the peer accesses enabled, where an address lives
(`locate`, and `Registry.foreign` for the ownership check), and the clean start of a fork() child.
The ACL entry points over it are in `aclnn_gpu.runtime`, which re-exports what other code uses.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator

from ..base.errors import DeviceUnavailable, NoDevice, fail
from ..base.status import aclError
from ..host.memory import virtual_device_count
from .base import Device
from .registry import Allocation, Registry

KINDS = ("auto", "cpu", "cuda", "emulated")
log = logging.getLogger("aclnn_gpu")


def _requested_kind() -> str:
    kind = os.environ.get("ACLNN_GPU_DEVICE", "auto").strip().lower() or "auto"
    return kind


class Platform:
    """The device kind in use, how many devices it has, and how to make device number `i`."""

    def __init__(self, kind: str, count: int, make: Callable[[int], Device], fork_safe: bool):
        self.kind = kind
        self.count = count
        self.make = make
        self.fork_safe = fork_safe   # False for CUDA: a forked child cannot use its parent's CUDA

    def describe_count(self) -> str:
        if self.kind == "cuda":
            return f"{self.count} GPU{'s' if self.count != 1 else ''} visible to CuPy"
        return f"{self.count} {self.kind} device{'s' if self.count != 1 else ''} (ACLNN_GPU_DEVICE_COUNT)"


def _make_platform(kind: str) -> Platform:
    if kind not in KINDS:
        raise DeviceUnavailable(f"ACLNN_GPU_DEVICE={kind!r} is not one of {', '.join(KINDS)}")
    if kind in ("auto", "cuda"):
        from .cuda import CudaDevice, cuda_unavailable_reason
        reason = cuda_unavailable_reason()
        if reason is None:
            import cupy
            return Platform("cuda", int(cupy.cuda.runtime.getDeviceCount()),
                            lambda i: CudaDevice(cupy, "cuda", i), fork_safe=False)
        if kind == "cuda":
            raise DeviceUnavailable(f"ACLNN_GPU_DEVICE=cuda but CuPy cannot use a GPU here: {reason}")
        log.info("aclnn_gpu: ACLNN_GPU_DEVICE=auto runs on the cpu device: no usable GPU (%s)", reason)
    try:
        count = virtual_device_count()
    except ValueError as e:
        raise DeviceUnavailable(str(e)) from None
    if kind == "emulated":
        from .emulated import EmulatedDevice, emulator_unavailable_reason
        reason = emulator_unavailable_reason()
        if reason is not None:
            raise DeviceUnavailable(reason)
        return Platform("emulated", count, lambda i: EmulatedDevice(i, find_allocation), fork_safe=True)
    from .cpu import CpuDevice
    return Platform("cpu", count, CpuDevice, fork_safe=True)


class _State:
    """The process's devices. Replaced by a fresh one in a fork() child (`_after_fork_in_child`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.platform: Platform | None = None
        self.devices: dict[int, Device] = {}
        self.peers: set[tuple[int, int]] = set()   # (device, peer): device may use peer's memory
        self.parent_devices: list[Device] = []     # a fork() child: the parent's, to explain refusals
        self.fork_error: str | None = None         # a fork() child of a CUDA parent: why it cannot run


_state = _State()
_tls = threading.local()   # per thread: .device (cached Device), .device_id (set by aclrtSetDevice)


def platform() -> Platform:
    """The platform in use, chosen (ACLNN_GPU_DEVICE, ACLNN_GPU_DEVICE_COUNT) on first need and
    again after the last device was reset."""
    if _state.fork_error is not None:
        raise NoDevice(aclError.ACL_ERROR_RT_NO_DEVICE, _state.fork_error)
    chosen = _state.platform
    if chosen is not None:
        return chosen
    with _state.lock:
        if _state.platform is None:
            try:
                _state.platform = _make_platform(_requested_kind())
            except DeviceUnavailable as e:
                raise NoDevice(aclError.ACL_ERROR_RT_NO_DEVICE, str(e)) from None
        return _state.platform


def device_of(device_id: int) -> Device:
    """The device object of ACL device id `device_id`, created on first use (raises OpError for an
    id out of range, NoDevice when the kind cannot run here). For code built on the runtime (HCCL):
    `.id`, `.kind`, `.registry`, `.default_stream`, `.create_stream()`, `.enqueue()`; on cuda and
    emulated `.scope` is the `cupy.cuda.Device` context of that GPU."""
    device = _state.devices.get(device_id)
    if device is not None:
        return device
    with _state.lock:
        chosen = platform()
        if not 0 <= device_id < chosen.count:
            fail(aclError.ACL_ERROR_RT_INVALID_DEVICEID,
                 f"deviceId {device_id} is out of range [0, {chosen.count}): {chosen.describe_count()}")
        device = _state.devices.get(device_id)
        if device is None:
            device = _state.devices[device_id] = chosen.make(device_id)
        return device


def get_device() -> Device:
    """The calling thread's current device: the one its last aclrtSetDevice named, else device 0
    (created on first use, as CUDA creates its context lazily). A thread-local read on the hot path."""
    device = getattr(_tls, "device", None)
    if device is not None and device.stale is None:
        return device
    device = _tls.device = device_of(getattr(_tls, "device_id", 0))
    return device


current_device = get_device   # the name code built on the runtime (HCCL) uses


@contextlib.contextmanager
def using_device(device: Device) -> Iterator[Device]:
    """`device` is the calling thread's current device inside the block (and, on cuda, CuPy's current
    GPU): `functional` runs a call on the device its arrays live on this way."""
    previous = getattr(_tls, "device", None)
    _tls.device = device
    try:
        scope = getattr(device, "scope", None)
        if scope is None:
            yield device
        else:
            with scope:
                yield device
    finally:
        _tls.device = previous


def find_allocation(address: int, nbytes: int) -> Allocation | None:
    """The live allocation holding [address, address + nbytes) on any device, or None."""
    return locate(address, nbytes)[1]


def locate(address: Any, nbytes: int) -> tuple[Device | None, Allocation | None]:
    """(owning device, allocation) of a range on any live device, the current one first."""
    if not isinstance(address, int) or isinstance(address, bool):
        return None, None
    first = getattr(_tls, "device", None)
    if first is not None and first.stale is None:
        alloc = first.registry.find(address, nbytes)
        if alloc is not None:
            return first, alloc
    for device in list(_state.devices.values()):
        alloc = device.registry.find(address, nbytes)
        if alloc is not None:
            return device, alloc
    return None, None


def _foreign(registry: Registry, ptr: int, nbytes: int, what: str, status: int) -> Allocation | None:
    """Registry.foreign: another device's memory is usable where peer access is enabled."""
    owner, alloc = locate(ptr, nbytes)
    if owner is not None and alloc is not None:
        if (registry.device_id, owner.id) in _state.peers:
            return alloc
        fail(status, f"{what}: address {hex(ptr)} is memory of device {owner.id}, but this call runs on device "
                     f"{registry.device_id}; copy it with aclrtMemcpy, or enable peer access "
                     f"(aclrtDeviceEnablePeerAccess({owner.id}) with device {registry.device_id} current)")
    for parent in _state.parent_devices:
        if parent.registry.find(ptr, nbytes) is not None:
            fail(status, f"{what}: address {hex(ptr)} was allocated in the parent process before fork(); memory "
                         "does not cross fork(): allocate it again in this process")
    return None


Registry.foreign = _foreign


def current_device_kind() -> str:
    """The kind of device actually in use: 'cpu', 'cuda' or 'emulated' (creating it if needed)."""
    try:
        return get_device().kind
    except Exception:
        return "none"


ResetListener = Callable[[Device | None, bool], None]
_reset_listeners: list[ResetListener] = []


def on_reset(listener: ResetListener) -> None:
    """Call `listener(device, last)` at every reset, after the device is marked stale and before it
    is closed: `device` is the one released (None when the id had none), `last` tells that no
    device is left. The executor cache registers here: it sits above the devices, which cannot
    import it."""
    _reset_listeners.append(listener)


def release_devices() -> None:
    """Reset every device of the process (tests switch kinds with it; aclrtResetDevice does one)."""
    with _state.lock:
        devices = list(_state.devices)
    for device_id in devices:
        reset(device_id)


def drain(device: Device) -> int:
    """Wait for every stream of `device` (dropped handles' included), a blocking host callback for
    at most base.stop_timeout_s(); the number of such callbacks that were stopped."""
    device.callbacks_stopped = 0
    device.stopping_since = time.monotonic()
    try:
        device.synchronize_quietly()
    finally:
        device.stopping_since = None
    return device.callbacks_stopped


def drain_all() -> int:
    """aclFinalize: `drain` every device of the process; the blocking callbacks stopped."""
    with _state.lock:
        devices = list(_state.devices.values())
    return sum(drain(device) for device in devices if device.stale is None)


def reset(device_id: int) -> int:
    """Release device `device_id` (nothing when it does not exist); its handles are refused afterwards.
    Every stream of the device, dropped handles' included, runs its queued work before any memory
    is freed (a blocking host callback is waited for up to base.stop_timeout_s(), then stopped);
    returns the number of callbacks so stopped."""
    with _state.lock:
        device = _state.devices.pop(device_id, None)
        _state.peers = {pair for pair in _state.peers if device_id not in pair}
        last = not _state.devices
        if last:
            _state.platform = None   # the next device re-reads ACLNN_GPU_DEVICE and ACLNN_GPU_DEVICE_COUNT
    if device is not None:
        device.stale = f"was reset by aclrtResetDevice({device_id})"
    for listener in _reset_listeners:
        listener(device, last)
    stopped = 0
    if device is not None:
        try:
            device.callbacks_stopped = 0
            device.stopping_since = time.monotonic()
            device.close()
            stopped = device.callbacks_stopped
        finally:
            # its memory is released (aclrtResetDevice frees what the device held) and every cached
            # pointer check is void: a check that passed through this device, or through peer access
            # to it, must be made again (Registry.generation)
            device.registry.clear()
    Registry.bump()
    return stopped


def _after_fork_in_child() -> None:
    """A fork() child starts with no device. The parent's devices stay
    behind as stale objects, so its streams, events, executors and pointers are refused with a code
    (their worker threads do not exist here: waiting on them would hang). After a CUDA parent, CUDA
    cannot work in the child at all: every device call says so and names the fix."""
    global _state, _tls
    parent = _state
    _state = _State()
    _tls = threading.local()
    _state.parent_devices = list(parent.devices.values()) + parent.parent_devices
    for device in parent.devices.values():
        device.stale = "was created in the parent process before fork() and cannot be used in the child"
        device.registry.reinit_after_fork()
    if parent.fork_error is not None or (parent.platform is not None and not parent.platform.fork_safe):
        _state.fork_error = ("CUDA cannot be used in a forked child process once the parent has initialised it; "
                             "start worker processes with the 'spawn' start method "
                             "(multiprocessing.get_context('spawn'), or torch DataLoader(multiprocessing_context="
                             "'spawn')), as PyTorch requires")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_kept_at_exit: list[Any] = []


def at_exit() -> None:
    """The process is ending (Python's atexit, after its non-daemon threads have ended; a C program's
    exit(), through the C ABI's hook): stop every host stream (hoststream.stop_all: queued work
    abandoned, running tasks finished), then keep every device, and so its memory, alive for good:
    a daemon thread still inside a copy when Python tears its modules down writes into memory that
    stays mapped. The operating system takes it back when the process ends."""
    from ..host import stream as hoststream
    hoststream.stop_all()
    with _state.lock:
        devices = list(_state.devices.values())
    if devices:
        import ctypes
        _kept_at_exit.append(devices)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_kept_at_exit))   # module teardown cannot free it


atexit.register(at_exit)


# ---------------------------------------------------------------------------- for the runtime's entry points
def set_current(device: Device) -> None:
    """aclrtSetDevice: `device` is the calling thread's current device from now on."""
    _tls.device_id = device.id
    _tls.device = device
    scope = getattr(device, "scope", None)
    if scope is not None:   # cuda: the thread's CUDA / CuPy current device too (torch.cuda.set_device's rule)
        scope.use()


def thread_device_id() -> int | None:
    """The id the calling thread's last aclrtSetDevice named (None: it never called it)."""
    return getattr(_tls, "device_id", None)


def chosen_platform() -> Platform | None:
    """The platform, when one is in use (a device exists), without choosing one."""
    return _state.platform if _state.devices else None


def peers() -> set[tuple[int, int]]:
    """The enabled peer accesses, (device, peer): device may use peer's memory (guard with `lock()`)."""
    return _state.peers


def lock() -> Any:
    return _state.lock
