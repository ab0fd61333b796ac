"""Resident blocks per SM of a kernel, for grids sized to one full wave at the occupancy the kernel
really reaches (not a fixed number of blocks per SM).

`REGISTERS` is a checked-in table of what the compile report (`python -m aclnn_gpu.kernels.report`,
NVRTC + ptxas, no GPU) measures per kernel and architecture: registers per thread and static shared
memory. `blocks_per_sm` takes the minimum over the architecture's limits (threads, blocks, the
register file allocated per warp, shared memory), as CUDA's occupancy calculator does; `wave_grid`
caps a grid at `sm_count * blocks_per_sm`, the kernels' grid-stride loops doing the rest.
tests/kernels/test_report.py compiles the table's kernels afresh and fails when it drifts;
`python -m aclnn_gpu.kernels.occupancy` prints a fresh table to paste here.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any


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
REGISTERS: dict[tuple[str, str], dict[str, tuple[int, int]]] = {
    ("strided_copy.cu", "strided_gather<1>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_gather<2>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_gather<4>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_gather<8>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_scatter<1>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_scatter<2>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_scatter<4>"): {"80": (40, 0), "90": (40, 0)},
    ("strided_copy.cu", "strided_scatter<8>"): {"80": (42, 0), "90": (42, 0)},
    ("kl_div.cu", "kl_bwd_contig<float>"): {"80": (32, 0), "90": (32, 0)},
    ("kl_div.cu", "kl_bwd_contig<__half>"): {"80": (32, 0), "90": (31, 0)},
    ("kl_div.cu", "kl_bwd_contig<__nv_bfloat16>"): {"80": (32, 0), "90": (31, 0)},
    ("kl_div.cu", "kl_bwd_contig<double>"): {"80": (32, 0), "90": (47, 0)},
    ("kl_div.cu", "kl_bwd_strided<float>"): {"80": (40, 0), "90": (38, 0)},
    ("kl_div.cu", "kl_bwd_strided<double>"): {"80": (40, 0), "90": (38, 0)},
    ("kl_div.cu", "kl_bwd_strided_block<float>"): {"80": (40, 128), "90": (36, 128)},
    ("kl_div.cu", "kl_bwd_strided_block<double>"): {"80": (40, 256), "90": (36, 256)},
    ("kl_div.cu", "kl_fwd_contig<float>"): {"80": (32, 0), "90": (32, 0)},
    ("kl_div.cu", "kl_fwd_contig<__half>"): {"80": (32, 0), "90": (32, 0)},
    ("kl_div.cu", "kl_fwd_contig<__nv_bfloat16>"): {"80": (32, 0), "90": (32, 0)},
    ("kl_div.cu", "kl_fwd_contig<double>"): {"80": (40, 0), "90": (46, 0)},
    ("kl_div.cu", "kl_fwd_strided<float>"): {"80": (30, 0), "90": (32, 0)},
    ("kl_div.cu", "kl_fwd_strided<double>"): {"80": (32, 0), "90": (32, 0)},
    ("kl_div.cu", "kl_fwd_partial_contig<float>"): {"80": (32, 128), "90": (32, 128)},
    ("kl_div.cu", "kl_fwd_partial_contig<__half>"): {"80": (30, 128), "90": (31, 128)},
    ("kl_div.cu", "kl_fwd_partial_contig<__nv_bfloat16>"): {"80": (30, 128), "90": (31, 128)},
    ("kl_div.cu", "kl_fwd_partial_contig<double>"): {"80": (40, 256), "90": (48, 256)},
    ("kl_div.cu", "kl_fwd_partial_strided<float>"): {"80": (32, 128), "90": (32, 128)},
    ("kl_div.cu", "kl_fwd_partial_strided<double>"): {"80": (32, 256), "90": (32, 256)},
    ("kl_div.cu", "kl_fwd_final<float>"): {"80": (13, 128), "90": (14, 128)},
    ("kl_div.cu", "kl_fwd_final<double>"): {"80": (23, 256), "90": (25, 256)},
    ("cross_entropy.cu", "ce_weight_sums<int>"): {"80": (26, 64), "90": (28, 64)},
    ("cross_entropy.cu", "ce_weight_sums<long long>"): {"80": (26, 64), "90": (28, 64)},
    ("cross_entropy.cu", "ce_grad<float, int>"): {"80": (48, 0), "90": (48, 0)},
    ("cross_entropy.cu", "ce_grad<float, long long>"): {"80": (48, 0), "90": (48, 0)},
    ("cross_entropy.cu", "ce_grad<double, int>"): {"80": (64, 0), "90": (78, 0)},
    ("cross_entropy.cu", "ce_grad<double, long long>"): {"80": (64, 0), "90": (80, 0)},
    ("cross_entropy.cu", "ce_grad<__half, int>"): {"80": (48, 0), "90": (48, 0)},
    ("cross_entropy.cu", "ce_grad<__half, long long>"): {"80": (48, 0), "90": (48, 0)},
    ("cross_entropy.cu", "ce_grad<__nv_bfloat16, int>"): {"80": (48, 0), "90": (48, 0)},
    ("cross_entropy.cu", "ce_grad<__nv_bfloat16, long long>"): {"80": (48, 0), "90": (48, 0)},
    ("cross_entropy.cu", "ce_forward<float, int>"): {"80": (38, 256), "90": (39, 256)},
    ("cross_entropy.cu", "ce_forward<float, long long>"): {"80": (38, 256), "90": (39, 256)},
    ("cross_entropy.cu", "ce_forward<double, int>"): {"80": (32, 512), "90": (45, 512)},
    ("cross_entropy.cu", "ce_forward<double, long long>"): {"80": (32, 512), "90": (45, 512)},
    ("cross_entropy.cu", "ce_forward<__half, int>"): {"80": (32, 256), "90": (40, 256)},
    ("cross_entropy.cu", "ce_forward<__half, long long>"): {"80": (32, 256), "90": (40, 256)},
    ("cross_entropy.cu", "ce_forward<__nv_bfloat16, int>"): {"80": (32, 256), "90": (40, 256)},
    ("cross_entropy.cu", "ce_forward<__nv_bfloat16, long long>"): {"80": (32, 256), "90": (40, 256)},
    ("cross_entropy.cu", "ce_loss_reduce<float>"): {"80": (30, 64), "90": (30, 64)},
    ("cross_entropy.cu", "ce_loss_reduce<double>"): {"80": (30, 64), "90": (30, 64)},
    ("cross_entropy.cu", "ce_loss_reduce<__half>"): {"80": (30, 64), "90": (30, 64)},
    ("cross_entropy.cu", "ce_loss_reduce<__nv_bfloat16>"): {"80": (30, 64), "90": (30, 64)},
    ("ctc_loss.cu", "aclg::ctc_cast_targets"): {"80": (32, 0), "90": (32, 0)},
    ("ctc_loss.cu", "aclg::ctc_grad<float>"): {"80": (75, 32), "90": (62, 32)},
    ("ctc_loss.cu", "aclg::ctc_grad<double>"): {"80": (78, 64), "90": (48, 64)},
    ("ctc_loss.cu", "aclg::ctc_grad<__half>"): {"80": (80, 32), "90": (63, 32)},
    ("ctc_loss.cu", "aclg::ctc_grad<__nv_bfloat16>"): {"80": (80, 32), "90": (63, 32)},
    ("cross_entropy.cu", "ce_forward_write<float, long long>"): {"80": (30, 128), "90": (48, 128)},
    ("cross_entropy.cu", "ce_forward_write<float, int>"): {"80": (30, 128), "90": (48, 128)},
    ("cross_entropy.cu", "ce_forward_write<double, long long>"): {"80": (32, 256), "90": (32, 256)},
    ("cross_entropy.cu", "ce_forward_write<double, int>"): {"80": (32, 256), "90": (32, 256)},
    ("cross_entropy.cu", "ce_forward_write<__nv_bfloat16, long long>"): {"80": (31, 128), "90": (48, 128)},
    ("cross_entropy.cu", "ce_forward_write<__nv_bfloat16, int>"): {"80": (31, 128), "90": (48, 128)},
    ("cross_entropy.cu", "ce_forward_write<__half, long long>"): {"80": (32, 128), "90": (48, 128)},
    ("cross_entropy.cu", "ce_forward_write<__half, int>"): {"80": (32, 128), "90": (48, 128)},
    ("cross_entropy.cu", "ce_forward_stats<float, long long>"): {"80": (26, 256), "90": (28, 256)},
    ("cross_entropy.cu", "ce_forward_stats<float, int>"): {"80": (26, 256), "90": (28, 256)},
    ("cross_entropy.cu", "ce_forward_stats<double, long long>"): {"80": (29, 512), "90": (30, 512)},
    ("cross_entropy.cu", "ce_forward_stats<double, int>"): {"80": (29, 512), "90": (30, 512)},
    ("cross_entropy.cu", "ce_forward_stats<__nv_bfloat16, long long>"): {"80": (24, 256), "90": (28, 256)},
    ("cross_entropy.cu", "ce_forward_stats<__nv_bfloat16, int>"): {"80": (24, 256), "90": (28, 256)},
    ("cross_entropy.cu", "ce_forward_stats<__half, long long>"): {"80": (24, 256), "90": (26, 256)},
    ("cross_entropy.cu", "ce_forward_stats<__half, int>"): {"80": (24, 256), "90": (26, 256)},
    ("cross_entropy.cu", "ce_forward_finish<float, long long>"): {"80": (40, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<float, int>"): {"80": (40, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<double, long long>"): {"80": (48, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<double, int>"): {"80": (48, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<__nv_bfloat16, long long>"): {"80": (32, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<__nv_bfloat16, int>"): {"80": (32, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<__half, long long>"): {"80": (32, 64), "90": (40, 64)},
    ("cross_entropy.cu", "ce_forward_finish<__half, int>"): {"80": (32, 64), "90": (40, 64)},
    ("ctc_loss.cu", "aclg::ctc_recursions_math_split<__nv_bfloat16, long long>"): {"80": (96, 544), "90": (104, 544)},
    ("ctc_loss.cu", "aclg::ctc_recursions_math_split<__nv_bfloat16, int>"): {"80": (96, 544), "90": (104, 544)},
    ("ctc_loss.cu", "aclg::ctc_recursions_math_split<__half, long long>"): {"80": (96, 544), "90": (104, 544)},
    ("ctc_loss.cu", "aclg::ctc_recursions_math_split<__half, int>"): {"80": (96, 544), "90": (104, 544)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<float, long long>"): {"80": (106, 272), "90": (109, 272)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<float, int>"): {"80": (106, 272), "90": (109, 272)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<double, long long>"): {"80": (158, 528), "90": (176, 528)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<double, int>"): {"80": (158, 528), "90": (176, 528)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<__nv_bfloat16, long long>"): {"80": (107, 272), "90": (110, 272)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<__nv_bfloat16, int>"): {"80": (107, 272), "90": (110, 272)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<__half, long long>"): {"80": (107, 272), "90": (110, 272)},
    ("ctc_loss.cu", "aclg::ctc_beta_split<__half, int>"): {"80": (107, 272), "90": (110, 272)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<float, long long>"): {"80": (91, 272), "90": (92, 272)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<float, int>"): {"80": (91, 272), "90": (92, 272)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<double, long long>"): {"80": (113, 528), "90": (117, 528)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<double, int>"): {"80": (113, 528), "90": (117, 528)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<__nv_bfloat16, long long>"): {"80": (90, 272), "90": (92, 272)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<__nv_bfloat16, int>"): {"80": (90, 272), "90": (92, 272)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<__half, long long>"): {"80": (90, 272), "90": (92, 272)},
    ("ctc_loss.cu", "aclg::ctc_alpha_split<__half, int>"): {"80": (90, 272), "90": (92, 272)},
}


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


def main() -> int:
    for (file, expr), by_arch in measure(list(REGISTERS)).items():
        print(f'    ("{file}", "{expr}"): {{{", ".join(f"{a!r}: {v}" for a, v in sorted(by_arch.items()))}}},')
    return 0


if __name__ == "__main__":
    sys.exit(main())
