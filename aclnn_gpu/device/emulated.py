"""The `emulated` device: the cuda device's code (`device/cuda.py`) over `device/fakecupy.py`, so
the CUDA kernels run from their `.cu` sources on the CPU, with the same plans, launch geometry and
argument packing as on a GPU. GEMMs run in NumPy (`kernels/gemm.py`)."""
from __future__ import annotations

import shutil

from ..errors import DeviceUnavailable
from . import fakecupy
from .cuda import CudaDevice


def emulator_available() -> bool:
    from ..kernels.emulator import build
    return shutil.which(build.CXX) is not None


class EmulatedDevice(CudaDevice):
    def __init__(self) -> None:
        super().__init__(fakecupy, kind="emulated")
        from ..kernels.emulator import set_memory_resolver
        set_memory_resolver(self._resolve)  # lets recorded launches be replayed (ThreadSanitizer)

    def _resolve(self, address: int) -> tuple[int, int] | None:
        alloc = self.registry.find(address, 1)
        return None if alloc is None else (alloc.base, alloc.size)

    def gemm(self, stream, *args, **kwargs) -> None:
        from ..kernels import gemm
        # queued on the fake stream: runs in stream order after the kernels enqueued before it
        stream.submit(lambda: gemm.gemm_numpy(*args, **kwargs))

    def host_view(self, ptr: int, nbytes: int):
        return self.registry.host_bytes(ptr, nbytes)


def make_emulated_device() -> EmulatedDevice:
    if not emulator_available():
        raise DeviceUnavailable("ACLNN_GPU_DEVICE=emulated needs a C++ compiler (g++), none was found")
    return EmulatedDevice()
