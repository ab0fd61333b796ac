"""Resident blocks per SM of a kernel, for grids sized to one full wave at the occupancy the kernel
really reaches (not a fixed number of blocks per SM).

`REGISTERS` is the table of what the compile report (`python -m aclnn_gpu.kernels.report`, NVRTC +
ptxas, no GPU) measures per kernel and architecture: registers per thread and static shared memory.
Its rows are checked-in data next to each launcher (`ops/<op>/registers.json`, the strided copies'
`kernels/registers.json`), handed over when the launcher registers its kernel file
(`kernels/manifest.py`): this layer never imports the operators. `blocks_per_sm` takes the minimum
over the architecture's limits (threads, blocks, the register file allocated per warp, shared
memory), as CUDA's occupancy calculator does; `wave_grid` caps a grid at `sm_count * blocks_per_sm`,
the kernels' grid-stride loops doing the rest. tests/kernels/test_occupancy.py compiles the table's
kernels afresh and fails when it drifts; `python -m aclnn_gpu.kernels.occupancy` prints fresh tables,
`--write` writes them to their JSON files.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .manifest import REGISTER_FILES, REGISTERS


@dataclass(frozen=True)
class Limits:
    threads: int = 2048          # resident threads per SM
    blocks: int = 32             # resident blocks per SM
    registers: int = 65536       # 32-bit registers per SM
    register_unit: int = 256     # registers are allocated per warp in units of this many
    shared: int = 0              # shared memory per SM usable by blocks (bytes)
    shared_reserved: int = 1024  # the runtime's reservation per resident block


LIMITS = {"80": Limits(shared=164 * 1024), "90": Limits(shared=228 * 1024)}
DEFAULT_ARCH = "sm_90"
# Devices whose per-SM limits differ from those of the table's architecture they map to (their registers
# per thread are still that architecture's): CUDA C++ Programming Guide, technical specifications per
# compute capability (64 K registers per SM on all of them).
DEVICE_LIMITS = {
    75: Limits(threads=1024, blocks=16, shared=64 * 1024),
    86: Limits(threads=1536, blocks=16, shared=100 * 1024),
    87: Limits(threads=2048, blocks=16, shared=164 * 1024),
    89: Limits(threads=1536, blocks=24, shared=100 * 1024),
    120: Limits(threads=1536, blocks=32, shared=100 * 1024),
}

# (file, name expression) -> {arch: (registers per thread, static shared bytes)}, from the compile report


def _arch_key(arch: str) -> str:
    """The table's architecture for a device's: the nearest not above ("sm_90", "90" -> "90", "sm_100" ->
    "90"); one below the table, or no digits at all, gets the lowest ("sm_75", "" -> "80")."""
    number = int(re.sub(r"\D", "", str(arch)) or 0)
    known = sorted(LIMITS, key=int)
    below = [key for key in known if int(key) <= number]
    return below[-1] if below else known[0]


def blocks_per_sm(arch: str, file: str, expr: str, block: int, dynamic_shared: int = 0) -> int:
    """Resident blocks of `block` threads per SM (at least 1); KeyError for a kernel not in the table."""
    key = _arch_key(arch)
    limits = DEVICE_LIMITS.get(int(re.sub(r"\D", "", str(arch)) or 0), LIMITS[key])
    registers, static_shared = REGISTERS[(file, expr)][key]
    warps = -(-int(block) // 32)
    by_threads = limits.threads // (warps * 32)
    per_warp = -(-registers * 32 // limits.register_unit) * limits.register_unit
    by_registers = (limits.registers // per_warp) // warps if per_warp else limits.blocks
    shared = static_shared + int(dynamic_shared)
    by_shared = limits.shared // (shared + limits.shared_reserved) if shared else limits.blocks
    return max(1, min(limits.blocks, by_threads, by_registers, by_shared))


def context_arch(ctx: Any) -> str:
    """The architecture a KernelContext launches for (contexts without one: DEFAULT_ARCH)."""
    return getattr(ctx, "arch", DEFAULT_ARCH)


def wave_grid(ctx: Any, file: str, expr: str, blocks: int, block: int, dynamic_shared: int = 0) -> int:
    """`blocks` capped at one full wave of `expr` on `ctx`'s device (at least 1)."""
    wave = int(ctx.sm_count) * blocks_per_sm(context_arch(ctx), file, expr, block, dynamic_shared)
    return max(1, min(int(blocks), wave))


def measure(keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, tuple[int, int]]]:
    """A fresh table for `keys` from the compile report (NVRTC; a few seconds per file)."""
    from . import report
    files: dict[str, list[str]] = {}
    for file, expr in keys:
        files.setdefault(file, []).append(expr)
    table: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
    for result in report.run([(report.KERNEL_DIR / file, exprs) for file, exprs in files.items()]):
        if result.error:
            raise RuntimeError(f"{result.file} ({result.arch}): {result.error}")
        for usage in result.kernels:
            table.setdefault((result.file, usage.kernel), {})[usage.arch] = (usage.registers, usage.static_smem)
    return table


def table_json(file: str, table: dict[tuple[str, str], dict[str, tuple[int, int]]]) -> str:
    """The JSON text of `file`'s rows of `table`, one kernel a line, as the register files hold them."""
    rows = []
    for (f, expr), by_arch in table.items():
        if f == file:
            values = ", ".join(f"{json.dumps(arch)}: [{v[0]}, {v[1]}]" for arch, v in sorted(by_arch.items()))
            rows.append(f"    {json.dumps(expr)}: {{{values}}}")
    return "{\n  " + json.dumps(file) + ": {\n" + ",\n".join(rows) + "\n  }\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aclnn_gpu.kernels.occupancy",
                                 description="Measure the register table afresh (NVRTC compile report).")
    ap.add_argument("--write", action="store_true",
                    help="write each kernel file's rows to its registers.json (else print them)")
    args = ap.parse_args(argv)
    fresh = measure(list(REGISTERS))
    for file, path in sorted(REGISTER_FILES.items()):
        text = table_json(file, fresh)
        if args.write:
            Path(path).write_text(text)
            print(f"wrote {path}")
        else:
            print(f"# {path}\n{text}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
