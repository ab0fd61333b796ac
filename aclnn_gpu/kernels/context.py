"""What a GPU plan sees while it enqueues work: `KernelContext`.

An operator's GPU plan is a function `plan(ctx, ...)` that only talks to this interface: it uploads
tiling data into the workspace, launches kernels by (file, name expression), and (ConvTBC) runs
GEMMs. The cuda device implements it over CuPy, the emulated device over the CPU emulator, and
`StandaloneEmuContext` below over bare NumPy arrays for kernel unit tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np


KERNEL_DIR = Path(__file__).resolve().parent


class KernelContext(Protocol):
    sm_count: int
    arch: str   # "sm_90": the occupancy table's limits (kernels/occupancy.py)

    def upload(self, dst: int, host: np.ndarray) -> None:
        """Copy `host` (C-contiguous) to device address `dst`, ordered on the plan's stream."""

    def launch(self, file: str, expr: str, grid: Sequence[int], block: Sequence[int],
               args: Sequence[Any], shared_mem: int = 0) -> None:
        """Launch the kernel `expr` of `kernels/<file>`; pointers are passed as np.uint64."""

    def gemm_strided_batched(self, transa: bool, transb: bool, m: int, n: int, k: int, alpha: float,
                             a: int, a_type, lda: int, stride_a: int, b: int, b_type, ldb: int, stride_b: int,
                             beta: float, c: int, c_type, ldc: int, stride_c: int, batch: int,
                             compute: str = "32F") -> None:
        """cublasGemmStridedBatchedEx semantics (column-major), ordered on the plan's stream; see
        kernels/gemm.py (types are NumPy dtypes, compute "32F" or "32F_FAST_TF32")."""

    def gemm_batched(self, transa: bool, transb: bool, m: int, n: int, k: int, alpha: float,
                     a_array: int, a_type, lda: int, b_array: int, b_type, ldb: int, beta: float,
                     c_array: int, c_type, ldc: int, batch: int, compute: str = "32F") -> None:
        """cublasGemmBatchedEx semantics: the operands of entry i are the i-th pointers of the device
        pointer arrays, read when the GEMM runs (an upload queued before it fills them)."""


@dataclass(frozen=True)
class KernelFile:
    """The instantiations of one `kernels/<file>` that the host may launch, in manifest order.

    An operator package declares one (its launcher's `KERNELS`) and registers it with
    `kernels/manifest.py`, where the loader, the emulator and the compile report read it; its plan
    types list the files they launch (`Plan.kernels`), and the launcher builds every name through
    `name()`, which refuses an instantiation the table lacks: the names live in one place."""

    file: str
    names: tuple[str, ...]

    @cached_property
    def _known(self) -> frozenset[str]:
        return frozenset(self.names)

    def name(self, template: str, *type_args: object) -> str:
        """`template<arg, ...>` (or `template` without arguments), which must be in the table."""
        expr = f"{template}<{', '.join(str(a) for a in type_args)}>" if type_args else template
        if expr not in self._known:
            raise LookupError(f"{self.file}: {expr} is not in the kernel table (kernels/manifest.py)")
        return expr


def ptr(address: int) -> np.uint64:
    """A device pointer kernel argument (8 bytes, as CUDA expects)."""
    return np.uint64(address)
