"""The `emulated` device: the cuda device's code (`device/cuda.py`) over `device/fakecupy.py`, so
the CUDA kernels run from their `.cu` sources on the CPU, with the same plans, launch geometry and
argument packing as on a GPU. GEMMs run in NumPy (`kernels/gemm.py`)."""
from __future__ import annotations

import shutil

from . import fakecupy
from .cuda import CudaDevice


def emulator_available() -> bool:
    from ..kernels.emulator import driver
    return shutil.which(getattr(driver, "CXX", "g++")) is not None


class EmulatedDevice(CudaDevice):
    def __init__(self) -> None:
        super().__init__(fakecupy, kind="emulated")

    def gemm(self, stream, *args, **kwargs) -> None:
        from ..kernels import gemm
        # queued on the fake stream: runs in stream order after the kernels enqueued before it
        stream.submit(lambda: gemm.gemm_numpy(*args, **kwargs))

    def host_view(self, ptr: int, nbytes: int):
        alloc = self.registry.find(ptr, nbytes)
        assert alloc is not None
        start = ptr - alloc.base
        return alloc.buffer.buffer[start:start + nbytes]


def make_emulated_device() -> EmulatedDevice:
    from ..runtime import DeviceUnavailable
    if not emulator_available():
        raise DeviceUnavailable("ACLNN_GPU_DEVICE=emulated needs a C++ compiler (g++), none was found")
    return EmulatedDevice()
