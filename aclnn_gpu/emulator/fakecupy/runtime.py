"""fakecupy's cupy.cuda.runtime (`_Runtime`: the memcpy / memset / synchronize / device-property calls
the cuda device makes) and cupy.cuda.Device, with the virtual devices' properties: `SM_COUNT` /
`SM_COUNTS` (tests give devices different SM counts to see which one a plan reads),
`COMPUTE_CAPABILITY` / `COMPUTE_CAPABILITIES` (modules.py checks a shipped cubin against them) and
`DRIVER_VERSION`. `runtime.getDeviceCount()` is `ACLNN_GPU_DEVICE_COUNT` (default 1);
`runtime.deviceSynchronize()` drains only the current device's streams.
"""
from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...host.memory import host_memory_info, virtual_device_count
from . import streams
from .errors import CUDARuntimeError, cudaError_t
from .memory import HOST_REGISTER_PORTABLE, _page_locked, _pageable, _registered
from .streams import (CAPTURE_MODE_GLOBAL, CAPTURE_MODE_RELAXED, CAPTURE_MODE_THREAD_LOCAL, _all_streams,
                      _capturing, _current_device, _invalidate, _legacy_now, _stream, _unsafe, device_workers)

SM_COUNT = 4  # small on purpose: grids sized from it keep emulated launches short
SM_COUNTS: dict[int, int] = {}  # device id -> SM count, where it differs from SM_COUNT
COMPUTE_CAPABILITY = (9, 0)   # every device's (major, minor), where COMPUTE_CAPABILITIES does not say
COMPUTE_CAPABILITIES: dict[int, tuple[int, int]] = {}   # device id -> its own (tests of the cubin choice)
DRIVER_VERSION = 13000   # cudaDriverGetVersion: the CUDA major whose shipped cubins the device loads


class Device:
    """Like cupy.cuda.Device: `with Device(i):` makes device i current for the calling thread."""

    __slots__ = ("id",)

    def __init__(self, device: int | None = None):
        self.id = _current_device() if device is None else int(device)

    def __enter__(self) -> "Device":
        devices = getattr(streams._local, "devices", None)
        if devices is None:
            devices = streams._local.devices = []
        devices.append(self.id)
        return self

    def __exit__(self, *exc: Any) -> None:
        streams._local.devices.pop()

    def use(self) -> None:
        devices = getattr(streams._local, "devices", None)
        if devices:
            devices[-1] = self.id
        else:
            streams._local.devices = [self.id]

    def synchronize(self) -> None:
        with self:
            _Runtime.deviceSynchronize()

    @property
    def compute_capability(self) -> str:
        return "90"



class _Runtime:
    """cupy.cuda.runtime: the memcpy/memset/synchronise calls the cuda device makes."""

    CUDARuntimeError = CUDARuntimeError
    streamCaptureModeGlobal, streamCaptureModeThreadLocal, streamCaptureModeRelaxed = (
        CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL, CAPTURE_MODE_RELAXED)

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:
        major, minor = COMPUTE_CAPABILITIES.get(device, COMPUTE_CAPABILITY)
        return {"multiProcessorCount": SM_COUNTS.get(device, SM_COUNT), "name": b"CUDA emulator (CPU)",
                "totalGlobalMem": 0, "major": major, "minor": minor}

    @staticmethod
    def driverGetVersion() -> int:
        return DRIVER_VERSION

    @staticmethod
    def runtimeGetVersion() -> int:
        return DRIVER_VERSION

    @staticmethod
    def memGetInfo() -> tuple[int, int]:
        """The host's physical memory: the emulated device's memory is the host's."""
        return host_memory_info()

    @staticmethod
    def getDeviceCount() -> int:
        return virtual_device_count()

    @staticmethod
    def getDevice() -> int:
        return _current_device()

    @staticmethod
    def deviceCanAccessPeer(device: int, peer: int) -> int:
        return 1   # every virtual device's memory is the same host memory

    @staticmethod
    def deviceEnablePeerAccess(peer: int) -> None:
        pass

    @staticmethod
    def deviceDisablePeerAccess(peer: int) -> None:
        pass

    @staticmethod
    def deviceSynchronize() -> None:
        device = _current_device()
        streams = [stream for stream in _all_streams() if stream.device_id == device]
        capturing = _capturing(streams)
        if capturing:   # a device-wide wait includes the capturing stream: refused, the capture invalidated
            _invalidate(capturing, "cudaDeviceSynchronize")
            raise CUDARuntimeError(cudaError_t.cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize")
        _unsafe("cudaDeviceSynchronize")
        for worker in device_workers(device):
            worker.drain()

    @staticmethod
    def hostRegister(ptr: int, size: int, flags: int) -> None:
        # host memory is all the emulator has; what CUDA refuses is refused alike
        _unsafe("cudaHostRegister")
        if _page_locked(ptr, ptr + size):
            raise CUDARuntimeError(cudaError_t.cudaErrorHostMemoryAlreadyRegistered)
        _registered[ptr] = (ptr + size, None if flags & HOST_REGISTER_PORTABLE else _current_device())

    @staticmethod
    def hostUnregister(ptr: int) -> None:
        if _registered.pop(ptr, None) is None:
            raise CUDARuntimeError(cudaError_t.cudaErrorHostMemoryNotRegistered)

    memoryTypeUnregistered, memoryTypeHost = 0, 1
    hostRegisterDefault, hostRegisterPortable = 0, HOST_REGISTER_PORTABLE

    @staticmethod
    def pointerGetAttributes(ptr: int) -> SimpleNamespace:
        return SimpleNamespace(type=1 if _page_locked(ptr, ptr + 1, _current_device()) else 0)

    @staticmethod
    def threadExchangeStreamCaptureMode(mode: int) -> int:
        """cudaThreadExchangeStreamCaptureMode: set the calling thread's capture interaction mode (global
        by default), return the previous one (what `_unsafe` reads)."""
        previous = getattr(streams._local, "capture_mode", _Runtime.streamCaptureModeGlobal)
        streams._local.capture_mode = int(mode)
        return previous

    @staticmethod
    def memcpy(dst: int, src: int, size: int, kind: int) -> None:
        _legacy_now("cudaMemcpy", lambda: ctypes.memmove(dst, src, size))

    @staticmethod
    def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        target = _stream(stream)
        if streams._late is not None and target.worker.capture is None and _pageable(src, size):
            # CUDA Runtime API, "API synchronization behavior", memcpy asynchronous: a pageable host
            # source is staged at the call (the caller may reuse it on return); a pinned one (or device
            # memory) is read when the copy runs
            staged = np.frombuffer(ctypes.string_at(src, size), np.uint8)
            target.submit(lambda: ctypes.memmove(dst, staged.ctypes.data, size))
            return
        target.submit(lambda: ctypes.memmove(dst, src, size))

    @staticmethod
    def memset(ptr: int, value: int, size: int) -> None:
        _legacy_now("cudaMemset", lambda: ctypes.memset(ptr, value, size))

    @staticmethod
    def streamSynchronize(stream: int) -> None:
        _stream(stream).synchronize()

    @staticmethod
    def memsetAsync(ptr: int, value: int, size: int, stream: int) -> None:
        _stream(stream).submit(lambda: ctypes.memset(ptr, value, size))

