"""Step latency of recursion kernels: the latency-aware half of the profiler's H100 model.

The roofline of `aclnn_gpu.profile` prices a launch by its DRAM bytes (3.35 TB/s) plus 3 us. A
recursion (CTC's alpha and beta: T dependent time steps, each a block-wide barrier, loads and a
log-sum-exp chain) is bounded by its step latency long before its bytes, on both sides of the
comparison. This module describes each such kernel's per-step critical path as data (`Recursion`:
steps, loads with the number of steps ahead they were issued, barriers, on-chip round trips, the
dependent ALU chain and the instructions a thread issues per step) and prices it:

    step   = max(latency path, load issue bound, instruction issue bound)
    latency path = barriers + on-chip round trips + serial * (ALU chain + the slowest load issued in
                   the step itself)                      (loads issued 0 steps ahead are exposed)
    load issue bound = max over prefetched loads of latency / ahead   (a load issued d steps ahead
                   hides d steps of work: the ring must cover its latency)
    instruction issue bound = ceil(resident warps per SM / 4 schedulers) * instructions per step
    kernel = max(bytes / bandwidth, steps * step / clock) + launch

The same function prices our kernels (the profiler, per emulated launch, by kernel name) and
PyTorch's (bench/torch_launches.py, by launch name): `recursion(name, dims)` returns the description
or None for a kernel that is not a recursion. A MODEL, not a measurement; no GPU ran either side.

Constants (H100; cycles at CLOCK_HZ) and where they come from:
- CLOCK_HZ 1.755 GHz: the H100 boost clock in the hardware table of Ultrasonics Sonochemistry 99
  (2023) 106546, Table 3 (https://pmc.ncbi.nlm.nih.gov/articles/PMC10448217/table/t0015) and the max
  boost Chips and Cheese measured ("Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023-07-02,
  https://chipsandcheese.com/2023/07/02/nvidias-h100-funny-l2-and-tons-of-bandwidth/).
- DRAM_CYCLES 600 (0.34 us): HBM load-to-use latency. The table above gives 400 cycles, "The life of a
  memory request" (https://the-dsvolk.github.io/ai-perf/ai-infra/memory_request_life.html) 400-800,
  fp4-site's H100 hierarchy (https://fp4-site.pages.dev/silicon/gpu-memory-hierarchy/) ~600; loaded
  latencies are higher (Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture",
  arXiv:2402.13499, measure the hierarchy by pointer chasing). 600 is the middle of the range;
  bench/README.md gives the result at 400 and 1000 too (`sensitivity`).
- L2_CYCLES 200: L2 hit (the same three sources: 200, ~200, ~200).
- L1_CYCLES 30: shared memory / L1 hit / warp shuffle round trip (table: 20 for shared memory; the
  second source: 20-30).
- ALU_CYCLES 4: dependent FP32 instruction latency (table: "arithmetic operation latency 4").
- MUFU_CYCLES 20, BARRIER_CYCLES 30: the special-function unit (ex2 / lg2) and a __syncthreads once
  every warp has arrived. ASSUMED (no microbenchmark of either found in this workplace's corpus);
  the same on both sides, and small beside the DRAM and L2 terms that decide the comparison.
- LSE3_CHAIN: lse3 (max, max, select, subtract, expf, two adds, logf, two adds: ~24 dependent FP32
  instructions, CUDA's accurate expf / logf included, and 2 MUFU) = 24 * 4 + 2 * 20 = 136 cycles,
  counted from the instruction sequences, not measured; both sides compute the same lse3.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

CLOCK_HZ = 1.755e9
DRAM_CYCLES = 600.0
L2_CYCLES = 200.0
L1_CYCLES = 30.0
ALU_CYCLES = 4.0
MUFU_CYCLES = 20.0
BARRIER_CYCLES = 30.0
SCHEDULERS = 4                                           # warp schedulers per SM
SM_COUNT = 132                                           # H100 SXM (and H200): spreads the split blocks
LSE3_CHAIN = 24 * ALU_CYCLES + 2 * MUFU_CYCLES           # 136 cycles
EXP_CHAIN = 11 * ALU_CYCLES + MUFU_CYCLES                # three adds + expf: 64 cycles
LEVELS = {"dram": DRAM_CYCLES, "l2": L2_CYCLES, "l1": L1_CYCLES}


@dataclass(frozen=True)
class Load:
    """A global load on a recursion step's path: from `level`, issued `ahead` steps before the step
    that uses it (0: in that step, its latency exposed)."""
    what: str
    level: str
    ahead: int = 0


@dataclass(frozen=True)
class Recursion:
    """The per-step critical path of a kernel of `steps` dependent time steps (see the module doc)."""
    steps: int
    loads: tuple[Load, ...]
    barriers: int = 1
    onchip: float = 0.0        # shared-memory / shuffle round trips on the path (cycles)
    alu: float = LSE3_CHAIN    # dependent ALU chain of one state (cycles)
    serial: int = 1            # states a thread computes one after another in a step (load, then chain)
    warps: int = 1             # resident warps of the kernel per SM
    instructions: int = 0      # instructions a thread issues per step

    def step_cycles(self) -> float:
        exposed = max((LEVELS[x.level] for x in self.loads if x.ahead == 0), default=0.0)
        path = self.barriers * BARRIER_CYCLES + self.onchip + self.serial * (self.alu + exposed)
        prefetched = max((LEVELS[x.level] / x.ahead for x in self.loads if x.ahead > 0), default=0.0)
        issue = math.ceil(self.warps / SCHEDULERS) * self.instructions
        return max(path, prefetched, issue)

    @property
    def seconds(self) -> float:
        return self.steps * self.step_cycles() / CLOCK_HZ


def kernel_seconds(dram_bytes: float, rec: Recursion | None, bandwidth: float, launch: float) -> float:
    """A launch's latency-aware model: the larger of its bytes at `bandwidth` and its recursion's steps."""
    return max(dram_bytes / bandwidth, rec.seconds if rec else 0.0) + launch


# ------------------------------------------------------------------------------------------- PyTorch
# aten/src/ATen/native/cuda/LossCTC.cu: ctc_loss_log_alpha_gpu_kernel / ctc_loss_backward_log_beta_gpu_kernel.
# A block is (threads_target, threads_batch) = (the power of two >= 2L+1, 1024 / that) threads: one
# state per thread, 1024 / threads_target samples per block. Each time step: __syncthreads(); the
# previous step's log_alpha (log_beta) at s, s-1, s-2 (s+1, s+2) read from global memory, written by
# other threads of the block in the previous step (an L2 round trip: the SM's L1 does not keep the
# lines those stores wrote through); log_probs[t][b][l'(s)] loaded in the step (its address is known
# early, but it is issued after the barrier: DRAM latency, overlapping the L2 reads); lse3 + the
# log-prob; a global store. ~60 instructions per thread and step (int64 index arithmetic, 4 loads,
# lse3, store).
def _torch_ctc(d: dict) -> Recursion:
    states = 2 * d["L"] + 1
    target = 1 << max(0, (states - 1).bit_length())
    threads = min(1024, target) * max(1, min(1024 // max(target, 1), d["N"]))
    return Recursion(d["T"], (Load("previous step's alpha/beta (written by the block)", "l2"),
                              Load("log_probs column of the step", "dram")),
                     warps=threads // 32, instructions=60)


# ------------------------------------------------------------------------------------------- ours
# kernels/ctc_loss.cu. Register path (ctc_alpha / ctc_beta<T, I, P>): min(512, roundup32(S)) threads,
# per = ceil(S / threads) states per thread in registers; each step: __syncthreads(), two warp
# shuffles and a shared-memory read of the neighbour warp's boundary (in parallel: one L1 round trip),
# lse3 per state (independent across a thread's states: one chain plus ~40 instructions of issue per
# extra state), the boundary written to shared memory (another round trip before the barrier). The
# backward's occupancy exp(alpha + beta - lp + nll) and its store come, at P = 1, after the barrier,
# off the path (independent of the next step's chain, they fill its stalls: counted as issue only);
# at P = PerOf they come before it (registers), on the path. The log-probs (and the backward's
# alpha) of step t are loaded launch.prefetch_distance() steps earlier into a register ring.
# Long path (ctc_*_long): 512 threads, ceil(S / 512) states per thread in chunks of launch.LONG_CHUNK,
# one chunk after another: a chunk issues all its loads (the label (L1) then its log-prob (DRAM), the
# backward's alpha (DRAM), the previous step's values from the workspace slot (L2)) before its lse3
# chains, so it waits on memory once; its occupancy exp stays on the path (stored before the barrier).
def _ours_ctc(name: str, d: dict, math_size: int) -> Recursion | None:
    from ..ops.ctc_loss import launch
    # _math: the 16-bit backward's recursions; ctc_recursions_math runs its alpha and its beta side by
    # side in one launch, and that beta loads no alpha and stores beta itself (no exp): both steps
    # are priced as the forward's, one critical path for the launch
    m = re.match(r"aclg::ctc_(alpha|beta|recursions)(?:_math)?(_long|_split)?<", name)
    if not m:
        return None
    backward = m.group(1) == "beta"
    if m.group(2) == "_split":
        return _ours_ctc_split(d, backward)
    states = 2 * d["L"] + 1
    geo = launch.recursion_geometry(d["L"], math_size, long_path=bool(m.group(2)))
    blocks_per_sm = 1                                  # grids of N <= SM count blocks (the headline's case)
    if geo.long:
        per = -(-states // launch.MAX_THREADS)
        chunk = min(per, launch.LONG_CHUNK)
        loads: tuple[Load, ...] = (Load("previous step (workspace slot)", "l2"), Load("log_probs column", "dram"))
        loads += (Load("log_alpha", "dram"),) if backward else ()
        return Recursion(d["T"], loads, serial=-(-per // launch.LONG_CHUNK),
                         alu=L1_CYCLES + LSE3_CHAIN + 40 * (chunk - 1) + (EXP_CHAIN if backward else 0),
                         warps=launch.MAX_THREADS // 32 * blocks_per_sm, instructions=30 + 60 * per)
    p = re.search(r", (\d+)>$", name)              # the instantiation's P (the ring's distance)
    geo = geo._replace(P=int(p.group(1))) if p else geo
    ahead = launch.prefetch_distance(geo)
    occupancy_on_path = backward and geo.P != 1
    ring: tuple[Load, ...] = (Load("log_probs column (ring)", "dram", ahead),)
    ring += (Load("log_alpha (ring)", "dram", ahead),) if backward else ()
    return Recursion(d["T"], ring, onchip=2 * L1_CYCLES,
                     alu=LSE3_CHAIN + 40 * (geo.per - 1) + (EXP_CHAIN if occupancy_on_path else 0),
                     warps=geo.threads // 32 * blocks_per_sm, instructions=30 + (55 if backward else 40) * geo.per)


# Split path (ctc_*_split): one warp per (sample, chunk), one state per lane, no barrier. Each step:
# two warp shuffles (one round trip), lse3, the log-probs (and the backward's alpha) from a register
# ring launch.RING[1] steps deep; the chunk's boundary with its neighbour comes from the workspace:
# a count poll and one load of up to kSplitBatch steps of boundary values (two L2 round trips per
# batch), and every launch.SPLIT_PUBLISH steps a release store of the count (FENCE_CYCLES, ASSUMED: the
# release waits for the warp's stores to reach L2, one L2 round trip).
# The chain of J chunks trails its first by up to (J - 1) * (SPLIT_PUBLISH + 2) steps (each hop: a
# publish interval and about two steps of the count's round trip): added to the steps.
FENCE_CYCLES = L2_CYCLES


def _ours_ctc_split(d: dict, backward: bool) -> Recursion:
    from ..ops.ctc_loss import launch
    J, _ = launch.recursion_split(d["T"], d["N"], d["L"])
    J = max(J, 1)
    ahead = launch.RING[1]
    ring: tuple[Load, ...] = (Load("log_probs column (ring)", "dram", ahead),)
    ring += (Load("log_alpha (ring)", "dram", ahead),) if backward else ()
    boundary = 2 * L2_CYCLES / launch.SPLIT_BATCH + FENCE_CYCLES / launch.SPLIT_PUBLISH
    blocks_per_sm = max(1, -(-d["N"] * J // SM_COUNT))
    return Recursion(d["T"] + (J - 1) * (launch.SPLIT_PUBLISH + 2), ring, barriers=0,
                     onchip=L1_CYCLES + boundary, alu=LSE3_CHAIN, warps=blocks_per_sm,
                     instructions=40 + (15 if backward else 0) + 20)


TORCH_RECURSIONS = ("ctc_loss_log_alpha_gpu_kernel", "ctc_loss_backward_log_beta_gpu_kernel")


def recursion(name: str, d: dict, math_size: int = 4) -> Recursion | None:
    """The step description of launch `name` (ours: the emulated kernel's name expression; PyTorch's:
    bench/torch_launches.py's launch name) at the profiler's dims `d`, or None if it is not a recursion."""
    if name.startswith(TORCH_RECURSIONS):
        return _torch_ctc(d)
    return _ours_ctc(name, d, math_size)


def sensitivity(rec_seconds, dram_cycles=(400.0, 600.0, 1000.0)) -> dict[float, float]:
    """`rec_seconds()` evaluated with DRAM_CYCLES set to each value (the README's range)."""
    global DRAM_CYCLES
    saved = DRAM_CYCLES
    out = {}
    try:
        for c in dram_cycles:
            DRAM_CYCLES = c
            LEVELS["dram"] = c
            out[c] = rec_seconds()
    finally:
        DRAM_CYCLES = saved
        LEVELS["dram"] = saved
    return out
