"""The registry of kernel files: for each `kernels/<file>.cu`, the name expressions of every
instantiation the host launches.

Each operator package declares its file's table once (a `KernelFile`, through which its launcher
builds every name) and registers it here when its launch module is imported; the workspace builder
(`plans/plan.py`) registers the strided copies the same way. The loader (cuda/emulated devices), the
emulator and the compile report read the tables from here; phase 1's recorder (`plans/frozen.py`)
refuses a launch outside them. Registration, not imports from here, keeps this layer below the
operators: `kernels/` never imports `ops/`.

The tables are complete once `aclnn_gpu` is imported, which Python does before any of its
submodules: the package imports every operator (`ops/registry.py`). They are read when a kernel is
loaded or a plan is recorded, never while the package is being imported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # annotations only: context.py imports this module for its standalone emulator
    from .context import KernelFile

_FILES: dict[str, KernelFile] = {}
KERNELS: dict[str, list[str]] = {}        # file -> its name expressions, files in name order
KNOWN: dict[str, frozenset[str]] = {}     # file -> the same names as a set (the recorder's lookup)


def register(kernel_file: KernelFile) -> KernelFile:
    """Add `kernel_file`'s table (returned, so a launch module can keep it as its `KERNELS`). A file
    registered again must list the same names: two tables for one file would let one launcher
    build a name the other's loader never compiled."""
    known = _FILES.get(kernel_file.file)
    if known is not None and tuple(known.names) != tuple(kernel_file.names):
        raise ValueError(f"kernels/manifest.py register: {kernel_file.file} is already registered with "
                         "other name expressions; each kernel file has one table")
    _FILES[kernel_file.file] = kernel_file
    # rebuilt in place: the loader and the report keep references to these dicts
    KERNELS.clear()
    KNOWN.clear()
    for file in sorted(_FILES):
        KERNELS[file] = list(_FILES[file].names)
        KNOWN[file] = frozenset(_FILES[file].names)
    return kernel_file

