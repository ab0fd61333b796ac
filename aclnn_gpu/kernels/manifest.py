"""The kernel files and, for each, the name expressions of every instantiation the host launches.

Each operator package declares its file's table once (`launch.KERNELS`, a `KernelFile`, through which
its launcher builds every name); this module gathers the tables for the loader (cuda/emulated
devices), the emulator and the compile report. A plan type names the files it launches from
(`Plan.kernel_files`); phase 1's recorder (`ops/frozen.py`) refuses a launch outside them or outside
this manifest.
"""
from __future__ import annotations

from ..ops.conv_tbc import launch as conv_tbc
from ..ops.cross_entropy import launch as cross_entropy
from ..ops.ctc_loss import launch as ctc_loss
from ..ops.kl_div import launch as kl_div
from ..ops.plan import STRIDED_COPY
from ..ops.scaled_masked_softmax import launch as scaled_masked_softmax
from .context import KernelFile

FILES: tuple[KernelFile, ...] = (
    STRIDED_COPY,   # the workspace builder's staged copies (ops/plan.py)
    kl_div.KERNELS,
    cross_entropy.KERNELS,
    KernelFile(ctc_loss.FILE, tuple(ctc_loss.all_name_expressions())),
    KernelFile(conv_tbc.FILE, tuple(conv_tbc.all_name_expressions())),
    scaled_masked_softmax.KERNELS,
)
KERNELS: dict[str, list[str]] = {kernel_file.file: list(kernel_file.names) for kernel_file in FILES}
KNOWN: dict[str, frozenset[str]] = {file: frozenset(names) for file, names in KERNELS.items()}
