"""GPU memory cost of the operators, measured on the emulated device: `python -m aclnn_gpu.profile`.

Layer 18 of docs/DESIGN.md, "Import layers" (tools): it drives the public `functional` API and the
emulator from above them; no module of the library imports it.

Each operator call runs through the public `aclnn_gpu.functional` API on the emulated device with the
emulator's profiling build (`ACLNN_GPU_EMU_PROFILE=1`, see emulator/profiling.py): every kernel
launch reports its access sites (file:line), warp requests, 32-byte sectors per request against the
ideal for the access width, and its DRAM bytes (cold cache: distinct sectors read + written; and an
LRU model of a 50 MiB L2 warm across the launches of the call). cuBLAS GEMMs (ConvTbc) are not
emulated kernels: their traffic is modelled from their shapes and addresses as the distinct 32-byte
sectors the launch touches, the union over its batch entries of A and B (and C when beta != 0) read and
of C written -- the same count as a kernel's cold bytes. The assumption: a batched GEMM's entries run
concurrently (one grid, its z dimension the batch) and share the L2, so entries that overlap (taps of
one input shifted by a row, a stride-0 operand) fetch their common bytes once. The same sectors then go,
in the order A, B, C read, C written, through the kernels' L2 LRU model, which gives a GEMM's L2-model
bytes (what a GEMM finds in L2 from the launches before it is not fetched again).

The modelled H100 time is a roofline estimate, not a measurement: DRAM bytes of the L2 model at
3.35 TB/s, plus 3 us per launch, and for GEMMs the larger of their bytes at 3.35 TB/s and their FLOPs
at the dense peak of their type (fp16/bf16 tensor cores 989 TFLOP/s, fp32 67 TFLOP/s). That
bytes-only figure ignores the step latency of recursions (CTC's alpha and beta: T dependent steps);
`CallProfile.latency_model_seconds` adds it (latency.py: per recursion kernel the larger of its bytes
and its steps times the step's critical path), the same function bench/torch_launches.py applies to
PyTorch's kernels. `CallProfile.parallel_model_seconds` is the parallelism-aware H200 model
(parallel.py: a kernel's bytes at the share of the GPU its grid and occupancy reach, a GEMM's FLOPs at
the share its 128x128 output tiles fill); parallel.py also prices a plan's frozen launch list without
the emulator and holds the launch-fill rule (tests/test_launch_fill.py).

Modules: operators.py (the ten operators' inputs, calls and minimum bytes, gathered from each family's
ops/<family>/samples.py), latency.py (the step
latency of recursion kernels), parallel.py (the H200 parallelism model and the launch-fill rule),
report.py (tables),
budget.py (the CI traffic budget, ops/<family>/traffic_budget.json), __main__.py (the command).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from . import latency, parallel

HBM_BYTES_PER_S = 3.35e12
LAUNCH_S = 3e-6
PEAK_FLOPS = {"float16": 989e12, "bfloat16": 989e12, "float32": 67e12, "float64": 67e12}


@dataclass
class GemmLaunch:
    """A cuBLAS GEMM of the call, modelled from its shape and addresses (not an emulated kernel):
    dram_bytes = distinct sectors touched (cold), l2_bytes = the same sectors through the L2 model."""
    kernel: str
    dram_bytes: int
    flops: int
    dtype: str
    modelled: bool = True
    l2_bytes: int | None = None      # None: not run through the L2 model (counted as cold)
    shape: tuple[int, int, int, int] = (0, 0, 0, 1)   # m, n, k, batch (the parallel model's tiles)
    compute: str = "32F"

    @property
    def l2_dram_bytes(self) -> int:
        return self.dram_bytes if self.l2_bytes is None else self.l2_bytes

    @property
    def model_seconds(self) -> float:
        return max(self.l2_dram_bytes / HBM_BYTES_PER_S,
                   self.flops / PEAK_FLOPS.get(self.dtype, 67e12)) + LAUNCH_S


@dataclass
class CallProfile:
    op: str
    dims: dict
    dtype: str
    min_bytes: int
    launches: list = field(default_factory=list)   # LaunchProfile | GemmLaunch, in launch order
    sample_every: int = 1

    @property
    def dram_bytes(self) -> int:
        """Cold-cache bytes summed over the launches (each launch starts with an empty cache)."""
        return sum(x.dram_bytes for x in self.launches)

    @property
    def l2_dram_bytes(self) -> int:
        return sum(x.l2_dram_bytes for x in self.launches)

    @property
    def model_seconds(self) -> float:
        """Bytes-only model: per launch its L2-model bytes at HBM_BYTES_PER_S + LAUNCH_S."""
        return sum(x.model_seconds if isinstance(x, GemmLaunch) else x.l2_dram_bytes / HBM_BYTES_PER_S + LAUNCH_S
                   for x in self.launches)

    @property
    def parallel_model_seconds(self) -> float:
        """Parallelism-aware H200 model (parallel.py): each kernel's L2-model bytes at the share of
        the GPU its grid and occupancy reach, each GEMM's FLOPs at the share its output tiles fill."""
        total = 0.0
        for x in self.launches:
            if isinstance(x, GemmLaunch):
                m, n, k, batch = x.shape
                total += parallel.gemm_seconds(m, n, k, batch, parallel.gemm_kind(x.dtype, x.compute),
                                               x.l2_dram_bytes)
            else:
                threads = int(np.prod(x.block))
                per_sm = parallel.blocks_per_sm(x.file, x.kernel, threads)
                total += parallel.kernel_seconds(x.l2_dram_bytes, x.blocks, threads, per_sm)
        return total

    @property
    def latency_model_seconds(self) -> float:
        """Latency-aware model: a recursion kernel costs the larger of its bytes and its steps'
        critical path (latency.py); every other launch as in model_seconds."""
        math_size = 8 if self.dtype in ("fp64", "float64") else 4
        return sum(x.model_seconds if isinstance(x, GemmLaunch) else
                   latency.kernel_seconds(x.l2_dram_bytes, latency.recursion(x.kernel, self.dims, math_size),
                                          HBM_BYTES_PER_S, LAUNCH_S)
                   for x in self.launches)


SECTOR = 32


def _sectors(entries: np.ndarray, itemsize: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """Merged [lo, hi) intervals (an (n, 2) int64 array, 32-byte sector numbers) of the column-major
    rows x cols matrices (leading dimension ld) at the byte addresses `entries` (they may overlap)."""
    if rows <= 0 or cols <= 0 or len(entries) == 0:
        return np.zeros((0, 2), np.int64)
    if cols == 1 or ld == rows:        # each entry is one contiguous run
        rows, cols = rows * cols, 1
    starts = (entries[:, None] + itemsize * ld * np.arange(cols, dtype=np.int64)[None, :]).ravel()
    return _merge(starts // SECTOR, (starts + rows * itemsize - 1) // SECTOR + 1)


def _merge(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The union of the intervals [lo[i], hi[i]) as merged, sorted intervals."""
    if len(lo) == 0:
        return np.zeros((0, 2), np.int64)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    new = np.ones(len(lo), bool)
    new[1:] = lo[1:] > reach[:-1]          # starts past everything before it: a new interval
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(lo)) - 1
    return np.stack([lo[first], reach[last]], axis=1)


def _count(iv: np.ndarray) -> int:
    return int((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0


def _gemm_bytes(transa, transb, m, n, k, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc
                ) -> tuple[int, list[tuple[np.ndarray, bool]]]:
    """Cold DRAM bytes of a batched (column-major) GEMM whose entries start at the byte addresses a, b,
    c (int64 arrays, one per batch entry: a strided batch's or a pointer array's): the distinct sectors
    it reads (A, B, and C when beta != 0) plus those it writes (C), each once however the entries
    overlap; and the sector intervals in touch order [(intervals, is_store)] for the L2 model."""
    fa = _sectors(a, np.dtype(a_type).itemsize, k if transa else m, m if transa else k, lda)
    fb = _sectors(b, np.dtype(b_type).itemsize, n if transb else k, k if transb else n, ldb)
    fc = _sectors(c, np.dtype(c_type).itemsize, m, n, ldc)
    reads = [fa, fb] + ([fc] if beta != 0 else [])
    union = np.concatenate(reads)
    read = _merge(union[:, 0], union[:, 1])
    return SECTOR * (_count(read) + _count(fc)), [*((f, False) for f in reads), (fc, True)]


def _strided_entries(addr: int, dtype, stride: int, batch: int) -> np.ndarray:
    return int(addr) + np.dtype(dtype).itemsize * stride * np.arange(batch, dtype=np.int64)


def _recorder(launches, l2: bool):
    """record(m, n, k, batch, ...): append the GemmLaunch of a GEMM with entries at a, b, c."""
    from ..emulator import profiling
    shift = np.vectorize(profiling.gpu_sector_shift, otypes=[np.int64]) if l2 else None

    def record(transa, transb, m, n, k, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, batch, compute):
        if shift is not None and batch and m and n:
            # the L2 model addresses allocations at their 256-aligned GPU base (profiling.gpu_sector_shift)
            a, b, c = (x + shift(x) for x in (a, b, c))
        cold, touches = _gemm_bytes(transa, transb, m, n, k, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc)
        l2_bytes = None
        if shift is not None and m and n and batch:
            moved = [profiling.l2_touch(iv[:, 0], iv[:, 1], store) for iv, store in touches]
            l2_bytes = SECTOR * sum(misses + dirtied for misses, dirtied in moved)
        launches.append(GemmLaunch(f"cuBLAS gemm {m}x{n}x{k}" + (f" x{batch}" if batch > 1 else ""), cold,
                                   2 * m * n * k * batch, np.dtype(a_type).name, l2_bytes=l2_bytes,
                                   shape=(m, n, k, batch), compute=compute))
    return record


def _recording_gemm(original, launches, l2: bool = False):
    record = _recorder(launches, l2)

    def gemm(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
             beta, c, c_type, ldc, stride_c, batch, compute="32F"):
        record(transa, transb, m, n, k, _strided_entries(a, a_type, stride_a, batch), a_type, lda,
               _strided_entries(b, b_type, stride_b, batch), b_type, ldb, beta,
               _strided_entries(c, c_type, stride_c, batch), c_type, ldc, batch, compute)
        return original(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                        beta, c, c_type, ldc, stride_c, batch, compute)
    return gemm


def _recording_gemm_batched(original, launches, l2: bool = False):
    """A pointer-array GEMM: its entries are read from the arrays (host memory on the emulated device)
    when it runs; the arrays' own few bytes are not counted."""
    from ..kernels.gemm import host_pointers
    record = _recorder(launches, l2)

    def gemm(transa, transb, m, n, k, alpha, a_array, a_type, lda, b_array, b_type, ldb, beta, c_array, c_type,
             ldc, batch, compute="32F"):
        a, b, c = (np.array(host_pointers(x, batch), dtype=np.int64) for x in (a_array, b_array, c_array))
        record(transa, transb, m, n, k, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, batch, compute)
        return original(transa, transb, m, n, k, alpha, a_array, a_type, lda, b_array, b_type, ldb, beta, c_array,
                        c_type, ldc, batch, compute)
    return gemm


def profile_call(op: str, dims: dict | None = None, dtype: str | None = None, *, sample_every: int = 1,
                 l2_mib: float = 50, seed: int = 0) -> CallProfile:
    """Run one call of `op` (an aclnn name of operators.OPERATORS) on the emulated device and return
    its launches' profiles. Needs ACLNN_GPU_DEVICE=emulated and ACLNN_GPU_EMU_PROFILE=1 set before the
    device's first kernel build (the command sets both)."""
    from ..kernels import gemm as gemm_module
    from ..emulator import profiling
    from .operators import DTYPES, OPERATORS
    if os.environ.get("ACLNN_GPU_DEVICE") != "emulated" or not os.environ.get("ACLNN_GPU_EMU_PROFILE"):
        raise RuntimeError("profile_call needs ACLNN_GPU_DEVICE=emulated and ACLNN_GPU_EMU_PROFILE=1 "
                           "(python -m aclnn_gpu.profile sets them)")
    spec = OPERATORS[op]
    d = dict(spec.dims, **(dims or {}))
    dt = DTYPES[dtype or spec.dtype]
    call = spec.setup(d, dt, np.random.default_rng(seed))
    result = CallProfile(op, d, dtype or spec.dtype, int(spec.min_bytes(d, dt.itemsize)), sample_every=sample_every)
    original, original_batched = gemm_module.gemm_numpy, gemm_module.gemm_batched_numpy
    with profiling.collect(l2_bytes=int(l2_mib * 2**20), sample_every=sample_every) as launches:
        gemm_module.gemm_numpy = _recording_gemm(original, launches, l2=True)
        gemm_module.gemm_batched_numpy = _recording_gemm_batched(original_batched, launches, l2=True)
        try:
            call()
        finally:
            gemm_module.gemm_numpy, gemm_module.gemm_batched_numpy = original, original_batched
        result.launches = list(launches)
    return result
