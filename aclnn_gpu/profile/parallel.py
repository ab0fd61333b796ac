"""The parallelism-aware H200 model: what a launch costs when its grid is what it is, and the
launch-fill rule CI holds every operator's launch list to.

The roofline of `aclnn_gpu.profile` prices a launch by its bytes as if any grid reached the whole
GPU's bandwidth, and a GEMM by its FLOPs as if any batch ran at the dense peak: a copy of 20 MB on one
thread block, or a batch of three 128x128 output tiles, looked as fast as a full grid. This model
gives each launch the share of the GPU its grid can occupy. A MODEL, not a measurement:

    kernel  = bytes / (HBM * fill) + LAUNCH_S
              fill = min(1, blocks / SMs) * min(1, resident warps per SM / WARPS_TO_STREAM) * tail
              resident warps per SM = min(ceil(blocks / SMs), blocks per SM) * warps per block
              (blocks per SM: kernels/occupancy.py from the kernel's registers and threads per block;
              a kernel the table does not list: the thread and block limits alone)
              tail = waves / ceil(waves), waves = blocks / (SMs * blocks per SM), when waves > 1
    GEMM    = max(bytes / HBM, FLOPs / (peak of its type * fill)) + LAUNCH_S
              tiles = ceil(m / 128) * ceil(n / 128) * batch (the batch entries are the split: a
              split-k GEMM is a batch over k chunks), one 128x128 tile per SM at a time,
              fill = tiles / (ceil(tiles / SMs) * SMs)  (the waves of tiles: 3 tiles fill 3 of 132)

Constants (H200 SXM, 141 GB; the GPU check measures the copy ceiling and GEMM rates on the lent one):
- SM_COUNT 132 (NVIDIA H200 datasheet; the H200 the GPU check ran on reported 132).
- HBM_BYTES_PER_S 4.0e12: 4.8 TB/s peak (HBM3e, datasheet) at the ~83% a device-to-device copy
  reaches on Hopper (the GPU check's copy ceiling measures it on the lent GPU).
- L2_BYTES 50 MiB (H100 / H200: 50 MB L2; the profiler's L2 model uses the same size).
- PEAK_FLOPS, dense (datasheet, without sparsity): fp32 (CUDA cores) 67 TFLOP/s; TF32 tensor cores
  494.7; fp16 / bf16 tensor cores 989.4; fp64 tensor cores 67.
- LAUNCH_S 3 us per launch, as the roofline model.
- WARPS_TO_STREAM 16, ASSUMED: resident warps an SM needs to keep its share of HBM busy (Little's
  law: 4.0e12 / 132 B/s times ~0.6 us of loaded latency is ~18 KB in flight per SM; a warp with two
  to three 16-byte loads per thread in flight holds ~1.5 KB).
- GEMM_TILE 128: the output tile of cuBLAS's large Hopper kernels (128x128 or 128x256 CTAs).

`launch_steps(frozen, regions)` turns a plan's frozen launch list (`plans/frozen.py`, recorded for any SM
count without a GPU) into priced `Step`s; a kernel's bytes there are the bytes of the buffers its
pointer arguments address (an upper bound of what it moves: the operator's tensors, from each
pointer to its tensor's end, and the workspace ranges between the pointers the plan uses).
`fill_problems(steps)` lists the launches that break the fill rule: a kernel that moves at least
FILL_MIN_BYTES on fewer blocks than SMs, or a GEMM of at least FILL_MIN_FLOPS with fewer output tiles
(times batch and split) than SMs.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..kernels import occupancy
from ..kernels.context import KernelContext

SM_COUNT = 132
HBM_BYTES_PER_S = 4.0e12
L2_BYTES = 50 * 2**20
PEAK_FLOPS = {"fp32": 67e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "fp64": 67e12}
LAUNCH_S = 3e-6
WARPS_TO_STREAM = 16
GEMM_TILE = 128
ARCH = "sm_90"

FILL_MIN_BYTES = 2**20      # 1 MiB
FILL_MIN_FLOPS = 1e9        # 1 GFLOP


@dataclass(frozen=True)
class Gpu:
    """The modelled GPU (defaults: the H200 above)."""
    sm_count: int = SM_COUNT
    hbm: float = HBM_BYTES_PER_S
    launch: float = LAUNCH_S
    arch: str = ARCH


H200 = Gpu()


def blocks_per_sm(file: str, expr: str, threads: int, shared: int = 0, arch: str = ARCH) -> int:
    """kernels/occupancy.py's blocks per SM; a kernel its table does not list: the thread and block
    limits alone (its registers unknown)."""
    file = file.rsplit("/", 1)[-1]
    try:
        return occupancy.blocks_per_sm(arch, file, expr, threads, shared)
    except KeyError:
        limits = occupancy.LIMITS[occupancy._arch_key(arch)]
        return max(1, min(limits.blocks, limits.threads // max(32, -(-threads // 32) * 32)))


def kernel_fill(blocks: int, threads: int, per_sm: int, gpu: Gpu = H200) -> float:
    """The share of the GPU's bandwidth a grid of `blocks` blocks of `threads` threads reaches."""
    blocks = max(1, int(blocks))
    sms = min(gpu.sm_count, blocks)
    warps = min(-(-blocks // gpu.sm_count), per_sm) * -(-int(threads) // 32)
    waves = blocks / (gpu.sm_count * per_sm)
    tail = waves / math.ceil(waves) if waves > 1 else 1.0
    return sms / gpu.sm_count * min(1.0, warps / WARPS_TO_STREAM) * tail


def kernel_seconds(nbytes: float, blocks: int, threads: int, per_sm: int, gpu: Gpu = H200) -> float:
    return nbytes / (gpu.hbm * kernel_fill(blocks, threads, per_sm, gpu)) + gpu.launch


def gemm_tiles(m: int, n: int, batch: int) -> int:
    return -(-int(m) // GEMM_TILE) * -(-int(n) // GEMM_TILE) * max(1, int(batch))


def gemm_fill(tiles: int, gpu: Gpu = H200) -> float:
    tiles = max(1, int(tiles))
    return tiles / (math.ceil(tiles / gpu.sm_count) * gpu.sm_count)


def gemm_kind(dtype: Any, compute: str = "32F") -> str:
    """The peak a GEMM runs at: its operands' type (fp32 with COMPUTE_32F_FAST_TF32: tf32)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name == "float32":
        return "tf32" if "TF32" in str(compute) else "fp32"
    return {"float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}.get(name, "fp32")


def gemm_seconds(m: int, n: int, k: int, batch: int, kind: str, nbytes: float, gpu: Gpu = H200) -> float:
    flops = 2.0 * m * n * k * batch
    fill = gemm_fill(gemm_tiles(m, n, batch), gpu)
    return max(nbytes / gpu.hbm, flops / (PEAK_FLOPS[kind] * fill)) + gpu.launch


# ------------------------------------------------------------------------------ launch lists
@dataclass(frozen=True)
class Step:
    """One priced launch of a frozen launch list."""
    kind: str                 # "kernel" | "gemm"
    name: str                 # kernel expression, or "gemm m x n x k xbatch"
    grid: tuple[int, ...]     # kernels: the grid; GEMMs: (tiles,)
    threads: int              # threads per block (GEMMs: 0)
    nbytes: int
    flops: float
    units: int                # blocks (kernels) or output tiles times batch (GEMMs)
    seconds: float
    full_seconds: float = 0.0  # the same launch on the whole GPU (fill 1): the roofline's figure

    def describe(self) -> str:
        if self.kind == "kernel":
            return (f"kernel {self.name} grid {self.grid} ({self.units} blocks of {self.threads} threads), "
                    f"{self.nbytes / 2**20:.1f} MiB")
        return f"{self.name}: {self.units} output tiles (128x128, times batch), {self.flops / 1e9:.2f} GFLOP"


_STRIDED = inspect.signature(KernelContext.gemm_strided_batched)
_BATCHED = inspect.signature(KernelContext.gemm_batched)


class _Regions:
    """Address -> the buffer bytes from it: the plan's tensors, and the workspace cut at every
    workspace pointer the launch list uses."""

    def __init__(self, tensors: Sequence[tuple[int, int]], workspace: tuple[int, int], cuts: Sequence[int]):
        self.tensors = sorted((int(lo), int(hi)) for lo, hi in tensors if hi > lo)
        lo, hi = workspace
        self.ws = (lo, hi)
        self.cuts = sorted({c for c in cuts if lo <= c < hi} | {hi})

    def span(self, address: int) -> tuple[int, int] | None:
        lo, hi = self.ws
        if lo <= address < hi:
            end = next(c for c in self.cuts if c > address)
            return address, end
        for t_lo, t_hi in self.tensors:
            if t_lo <= address < t_hi:
                return address, t_hi
        return None

    def bytes_of(self, addresses: Sequence[int]) -> int:
        """Bytes of the distinct buffers the addresses point into (each buffer from its lowest pointer)."""
        spans: dict[int, tuple[int, int]] = {}
        for a in addresses:
            s = self.span(int(a))
            if s is None:
                continue
            key = s[1]                      # one buffer: the same end
            if key not in spans or s[0] < spans[key][0]:
                spans[key] = s
        return sum(hi - lo for lo, hi in spans.values())


def _is_pointer(value: Any) -> bool:
    return type(value) in (int, np.uint64, np.int64) and int(value) > 4096


def launch_steps(frozen: Any, tensors: Sequence[tuple[int, int]], workspace_size: int,
                 workspace_starts: Sequence[int] = (), gpu: Gpu = H200) -> list[Step]:
    """Priced steps of a FrozenLaunch (its uploads are not steps). `tensors`: the (lo, hi) byte ranges of
    the plan's tensors (ops/plan.byte_range); `workspace_size` and `workspace_starts` (the offsets where
    the plan's workspace ranges begin): the plan's. Without starts, each workspace pointer's buffer runs
    to the next pointer the launch list uses."""
    from ..plans import frozen as frozen_module
    from . import _gemm_bytes, _strided_entries
    base = frozen_module.SENTINEL if frozen.rebased else 0
    cuts = [base + off for off in workspace_starts]
    cuts += [base + u.offset for u in frozen.steps if isinstance(u, frozen_module.Upload)]
    if not workspace_starts:
        cuts += [base + off for u in frozen.steps if not isinstance(u, frozen_module.Upload) for _, off in u.patches]
    regions = _Regions(tensors, (base, base + workspace_size) if base else (0, 0), cuts)
    uploads = [u for u in frozen.steps if isinstance(u, frozen_module.Upload)]

    def pointer_table(address: int, batch: int) -> np.ndarray:
        for u in uploads:
            lo = base + u.offset
            if lo <= address < lo + u.data.nbytes and u.data.dtype == np.uint64:
                i = (address - lo) // 8
                words = u.data.reshape(-1)[i:i + batch].astype(np.int64)
                patched = np.isin(np.arange(i, i + batch), np.array(u.patches, dtype=np.int64))
                return words + np.where(patched, base, 0)
        raise ValueError(f"no uploaded pointer table at {address:#x}")

    steps: list[Step] = []
    for step in frozen.steps:
        if isinstance(step, frozen_module.Launch):
            args = list(step.args)        # patched arguments hold workspace offsets: rebase them
            for j, off in step.patches:
                args[j] = base + off
            addresses = [int(a) for a in args if _is_pointer(a)]
            nbytes = regions.bytes_of(addresses)
            blocks = int(np.prod(step.grid))
            threads = int(np.prod(step.block))
            per_sm = blocks_per_sm(step.file, step.expr, threads, step.shared_mem, gpu.arch)
            steps.append(Step("kernel", step.expr, step.grid, threads, nbytes, 0.0, blocks,
                              kernel_seconds(nbytes, blocks, threads, per_sm, gpu), nbytes / gpu.hbm + gpu.launch))
        elif isinstance(step, frozen_module.Gemm):
            args = list(step.args)
            for j, off in step.patches:
                args[j] = base + off
            sig = _BATCHED if step.batched else _STRIDED
            a = sig.bind(None, *args, **step.kwargs).arguments
            m, n, k, batch = int(a["m"]), int(a["n"]), int(a["k"]), int(a["batch"])
            if step.batched:
                ea, eb, ec = (pointer_table(int(a[x]), batch) for x in ("a_array", "b_array", "c_array"))
            else:
                ea, eb, ec = (_strided_entries(int(a[x]), a[x + "_type"], int(a["stride_" + x]), batch)
                              for x in ("a", "b", "c"))
            nbytes = 0
            if m and n and batch:
                nbytes, _ = _gemm_bytes(a["transa"], a["transb"], m, n, k, ea, a["a_type"], int(a["lda"]), eb,
                                        a["b_type"], int(a["ldb"]), a["beta"], ec, a["c_type"], int(a["ldc"]))
            kind = gemm_kind(a["a_type"], a.get("compute", "32F"))
            tiles = gemm_tiles(m, n, batch)
            flops = 2.0 * m * n * k * batch
            steps.append(Step("gemm", f"gemm {m}x{n}x{k}" + (f" x{batch}" if batch > 1 else "") + f" {kind}",
                              (tiles,), 0, int(nbytes), flops, tiles, gemm_seconds(m, n, k, batch, kind, nbytes, gpu),
                              max(nbytes / gpu.hbm, flops / PEAK_FLOPS[kind]) + gpu.launch))
    return steps


def fill_problems(steps: Sequence[Step], gpu: Gpu = H200) -> list[str]:
    """The steps that leave SMs idle: a kernel moving >= FILL_MIN_BYTES on fewer blocks than SMs, a GEMM
    of >= FILL_MIN_FLOPS with fewer output tiles (times batch and split) than SMs."""
    bad = []
    for s in steps:
        if s.kind == "kernel" and s.nbytes >= FILL_MIN_BYTES and s.units < gpu.sm_count:
            bad.append(f"{s.describe()}: fewer blocks than the {gpu.sm_count} SMs")
        elif s.kind == "gemm" and s.flops >= FILL_MIN_FLOPS and s.units < gpu.sm_count:
            bad.append(f"{s.describe()}: fewer output tiles than the {gpu.sm_count} SMs")
    return bad


def plan_steps(plan: Any, gpu: Gpu = H200) -> list[Step]:
    """A plan's launch list recorded for `gpu` (ops/frozen.freeze: no GPU needed), priced."""
    from ..plans.frozen import freeze
    from ..plans.plan import byte_range
    frozen = freeze(plan, gpu.sm_count, gpu.arch)
    tensors = [byte_range(t) for t in plan.tensors.values() if t is not None and t.numel]
    ws = plan.workspace
    starts = [x.offset for x in ws.staged] + [x.tiling for x in ws.staged] + [x.offset for x in ws.converted]
    return launch_steps(frozen, tensors, plan.workspace_size, starts + list(ws.ranges.values()), gpu)
