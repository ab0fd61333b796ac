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

A file whose launcher sizes grids from occupancy registers its register counts too: a JSON file next
to its launcher (`ops/<op>/registers.json`; the strided copies' `kernels/registers.json`), which
`register` reads into `REGISTERS` (`kernels/occupancy.py` reads that table; `python -m
aclnn_gpu.kernels.occupancy --write` writes the files afresh from the compile report).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # annotations only: context.py imports this module for its standalone emulator
    from .context import KernelFile

_FILES: dict[str, KernelFile] = {}
KERNELS: dict[str, list[str]] = {}        # file -> its name expressions, files in name order
KNOWN: dict[str, frozenset[str]] = {}     # file -> the same names as a set (the recorder's lookup)
# (file, name expression) -> {arch: (registers per thread, static shared bytes)}, from the compile report
REGISTERS: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
REGISTER_FILES: dict[str, Path] = {}      # file -> the JSON file its rows of REGISTERS come from


def read_registers(file: str, path: Path) -> dict[tuple[str, str], dict[str, tuple[int, int]]]:
    """The rows of `file` in the register table at `path`: `{file: {expr: {arch: [registers, shared]}}}`."""
    tables = json.loads(Path(path).read_text())
    if file not in tables:
        raise ValueError(f"kernels/manifest.py register: {path} has no register counts of {file}")
    return {(file, expr): {arch: (int(v[0]), int(v[1])) for arch, v in by_arch.items()}
            for expr, by_arch in tables[file].items()}


def register(kernel_file: KernelFile, registers: Path | None = None) -> KernelFile:
    """Add `kernel_file`'s table (returned, so a launch module can keep it as its `KERNELS`), and the
    register counts of its kernels from the JSON file `registers` (None: it sizes no grid from
    occupancy). A file registered again must list the same names: two tables for one file would let
    one launcher build a name the other's loader never compiled."""
    known = _FILES.get(kernel_file.file)
    if known is not None and tuple(known.names) != tuple(kernel_file.names):
        raise ValueError(f"kernels/manifest.py register: {kernel_file.file} is already registered with "
                         "other name expressions; each kernel file has one table")
    if registers is not None:
        REGISTERS.update(read_registers(kernel_file.file, registers))
        REGISTER_FILES[kernel_file.file] = Path(registers)
    _FILES[kernel_file.file] = kernel_file
    # rebuilt in place: the loader and the report keep references to these dicts
    KERNELS.clear()
    KNOWN.clear()
    for file in sorted(_FILES):
        KERNELS[file] = list(_FILES[file].names)
        KNOWN[file] = frozenset(_FILES[file].names)
    return kernel_file

