"""A kernel context for the kernels' unit tests: NumPy memory, the kernels run in this emulator."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import manifest
from ..kernels.context import KERNEL_DIR


class StandaloneEmuContext:
    """KernelContext over NumPy arrays for kernel unit tests: device memory is host memory, the
    kernels run in the CPU emulator, `upload` is a memmove."""

    def __init__(self, sm_count: int = 4, arch: str = "sm_90"):
        self.sm_count = sm_count
        self.arch = arch
        self._modules: dict[str, Any] = {}

    def module(self, file: str):
        if file not in self._modules:
            from ..emulator import EmuModule
            src = (KERNEL_DIR / file).read_text()
            self._modules[file] = EmuModule(src, name_expressions=manifest.KERNELS[file], filename=file)
        return self._modules[file]

    def upload(self, dst: int, host: np.ndarray) -> None:
        import ctypes
        host = np.ascontiguousarray(host)
        ctypes.memmove(dst, host.ctypes.data, host.nbytes)

    def launch(self, file, expr, grid, block, args, shared_mem=0):
        self.module(file).get_function(expr)(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)

    def gemm_strided_batched(self, *args, **kwargs) -> None:
        from ..kernels.gemm import gemm_numpy
        gemm_numpy(*args, **kwargs)

    def gemm_batched(self, *args, **kwargs) -> None:
        from ..kernels.gemm import gemm_batched_numpy
        gemm_batched_numpy(*args, **kwargs)
