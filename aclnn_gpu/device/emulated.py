"""The `emulated` device: the cuda device's code (`device/cuda.py`) over `emulator/fakecupy/`, so
the CUDA kernels run from their `.cu` sources on the CPU, with the same plans, launch geometry and
argument packing as on a GPU. GEMMs run in NumPy (`kernels/gemm.py`)."""
from __future__ import annotations

import functools
import shutil
from typing import Callable

from ..emulator import fakecupy
from .cuda import CudaDevice
from .registry import Allocation

FindAllocation = Callable[[int, int], "Allocation | None"]


def emulator_available() -> bool:
    from ..emulator import build
    return shutil.which(build.CXX) is not None


class EmulatedDevice(CudaDevice):
    native_gemm = False   # its GEMMs run in NumPy, queued on the fake stream (`gemm` below)

    def __init__(self, device_id: int, find_allocation: FindAllocation) -> None:
        super().__init__(fakecupy, kind="emulated", device_id=device_id)
        from ..emulator import set_memory_resolver
        # lets recorded launches be replayed (ThreadSanitizer)
        set_memory_resolver(functools.partial(_resolve, find_allocation))
        # what the late stand-in reads to tell device memory (a lent array included) from pageable host memory
        fakecupy.memory._device_memory = functools.partial(_on_device, find_allocation)

    def gemm(self, stream, *args, **kwargs) -> None:
        from ..kernels import gemm
        # queued on the fake stream: runs in stream order after the kernels enqueued before it
        stream.cupy.submit(lambda: gemm.gemm_numpy(*args, **kwargs))

    def gemm_batched(self, stream, *args, **kwargs) -> None:
        from ..kernels import gemm
        # in stream order: the pointer arrays are read after the upload queued before it
        stream.cupy.submit(lambda: gemm.gemm_batched_numpy(*args, **kwargs))

    def host_view(self, ptr: int, nbytes: int):
        return self.registry.host_bytes(ptr, nbytes)


def _on_device(find_allocation: FindAllocation, address: int, nbytes: int) -> bool:
    alloc = find_allocation(address, max(nbytes, 1))
    return alloc is not None and alloc.on_device


def _resolve(find_allocation: FindAllocation, address: int) -> tuple[int, int] | None:
    """The allocation (base, size) holding `address` on any live device (a launch may read a peer's
    memory). `find_allocation` is passed in by device/current.py, which keeps the live devices and
    creates this device: this module cannot import it back."""
    alloc = find_allocation(address, 1)
    return None if alloc is None else (alloc.base, alloc.size)


def emulator_unavailable_reason() -> str | None:
    if not emulator_available():
        from ..emulator import build
        return f"ACLNN_GPU_DEVICE=emulated needs a C++ compiler ({build.CXX}), none was found"
    return None
