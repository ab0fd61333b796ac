"""GPU memory cost of the operators, measured on the emulated device: `python -m aclnn_gpu.profile`.

Each operator call runs through the public `aclnn_gpu.functional` API on the emulated device with the
emulator's profiling build (`ACLNN_GPU_EMU_PROFILE=1`, see kernels/emulator/profiling.py): every kernel
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
at the dense peak of their type (fp16/bf16 tensor cores 989 TFLOP/s, fp32 67 TFLOP/s).

Modules: operators.py (inputs, calls and minimum bytes of the ten operators), report.py (tables),
budget.py (the CI traffic budget, kernels/traffic_budget.json), __main__.py (the command).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

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
        return sum(x.model_seconds if isinstance(x, GemmLaunch) else x.l2_dram_bytes / HBM_BYTES_PER_S + LAUNCH_S
                   for x in self.launches)


SECTOR = 32


def _sectors(addr: int, itemsize: int, rows: int, cols: int, ld: int, stride: int, batch: int) -> np.ndarray:
    """Merged [lo, hi) intervals (an (n, 2) int64 array, 32-byte sector numbers) of the column-major
    rows x cols matrices at addr + i * stride elements, i < batch (entries may overlap)."""
    if rows <= 0 or cols <= 0 or batch <= 0:
        return np.zeros((0, 2), np.int64)
    if cols == 1 or ld == rows:        # each entry is one contiguous run
        rows, cols = rows * cols, 1
    starts = (addr + itemsize * (np.arange(batch, dtype=np.int64)[:, None] * stride
                                 + np.arange(cols, dtype=np.int64)[None, :] * ld)).ravel()
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


def _gemm_bytes(transa, transb, m, n, k, a, a_type, lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type,
                ldc, stride_c, batch, shift=lambda addr: 0) -> tuple[int, list[tuple[np.ndarray, bool]]]:
    """Cold DRAM bytes of a (strided-batched, column-major) GEMM: the distinct sectors it reads (A, B,
    and C when beta != 0) plus those it writes (C), each once whatever the batch entries overlap; and
    the sector intervals in touch order [(intervals, is_store)] for the L2 model. `shift(addr)` maps a
    host address to the GPU address space of the L2 model (profiling.gpu_sector_shift)."""
    def footprint(addr, dtype, rows, cols, ld, stride):
        it = np.dtype(dtype).itemsize
        return _sectors(int(addr) + shift(addr), it, rows, cols, ld, stride if batch > 1 else 0, batch)
    fa = footprint(a, a_type, k if transa else m, m if transa else k, lda, stride_a)
    fb = footprint(b, b_type, n if transb else k, k if transb else n, ldb, stride_b)
    fc = footprint(c, c_type, m, n, ldc, stride_c)
    reads = [fa, fb] + ([fc] if beta != 0 else [])
    union = np.concatenate(reads)
    read = _merge(union[:, 0], union[:, 1])
    return SECTOR * (_count(read) + _count(fc)), [*((f, False) for f in reads), (fc, True)]


def _recording_gemm(original, launches, l2: bool = False):
    from ..kernels.emulator import profiling

    def gemm(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
             beta, c, c_type, ldc, stride_c, batch, compute="32F"):
        cold, touches = _gemm_bytes(transa, transb, m, n, k, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                                    beta, c, c_type, ldc, stride_c, batch,
                                    shift=profiling.gpu_sector_shift if l2 else (lambda addr: 0))
        l2_bytes = None
        if l2 and m and n and batch:
            moved = [profiling.l2_touch(iv[:, 0], iv[:, 1], store) for iv, store in touches]
            l2_bytes = SECTOR * sum(misses + dirtied for misses, dirtied in moved)
        launches.append(GemmLaunch(f"cuBLAS gemm {m}x{n}x{k}" + (f" x{batch}" if batch > 1 else ""), cold,
                                   2 * m * n * k * batch, np.dtype(a_type).name, l2_bytes=l2_bytes))
        return original(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                        beta, c, c_type, ldc, stride_c, batch, compute)
    return gemm


def profile_call(op: str, dims: dict | None = None, dtype: str | None = None, *, sample_every: int = 1,
                 l2_mib: float = 50, seed: int = 0) -> CallProfile:
    """Run one call of `op` (an aclnn name of operators.OPERATORS) on the emulated device and return
    its launches' profiles. Needs ACLNN_GPU_DEVICE=emulated and ACLNN_GPU_EMU_PROFILE=1 set before the
    device's first kernel build (the command sets both)."""
    from ..kernels import gemm as gemm_module
    from ..kernels.emulator import profiling
    from .operators import DTYPES, OPERATORS
    if os.environ.get("ACLNN_GPU_DEVICE") != "emulated" or not os.environ.get("ACLNN_GPU_EMU_PROFILE"):
        raise RuntimeError("profile_call needs ACLNN_GPU_DEVICE=emulated and ACLNN_GPU_EMU_PROFILE=1 "
                           "(python -m aclnn_gpu.profile sets them)")
    spec = OPERATORS[op]
    d = dict(spec.dims, **(dims or {}))
    dt = DTYPES[dtype or spec.dtype]
    call = spec.setup(d, dt, np.random.default_rng(seed))
    result = CallProfile(op, d, dtype or spec.dtype, int(spec.min_bytes(d, dt.itemsize)), sample_every=sample_every)
    original = gemm_module.gemm_numpy
    with profiling.collect(l2_bytes=int(l2_mib * 2**20), sample_every=sample_every) as launches:
        gemm_module.gemm_numpy = _recording_gemm(original, launches, l2=True)
        try:
            call()
        finally:
            gemm_module.gemm_numpy = original
        result.launches = list(launches)
    return result
