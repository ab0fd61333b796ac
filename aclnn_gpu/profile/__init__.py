"""GPU memory cost of the operators, measured on the emulated device: `python -m aclnn_gpu.profile`.

Each operator call runs through the public `aclnn_gpu.functional` API on the emulated device with the
emulator's profiling build (`ACLNN_GPU_EMU_PROFILE=1`, see kernels/emulator/profiling.py): every kernel
launch reports its access sites (file:line), warp requests, 32-byte sectors per request against the
ideal for the access width, and its DRAM bytes (cold cache: distinct sectors read + written; and an
LRU model of a 50 MiB L2 warm across the launches of the call). cuBLAS GEMMs (ConvTbc) are not
emulated kernels: their traffic is modelled from their shapes (each operand read once, the output
written once, read too when beta != 0).

The modelled H100 time is a roofline estimate, not a measurement: DRAM bytes of the L2 model at
3.35 TB/s, plus 3 us per launch, and for GEMMs the larger of their bytes at 3.35 TB/s and their FLOPs
at the dense peak of their type (fp16/bf16 tensor cores 989 TFLOP/s, fp32 67 TFLOP/s). That
bytes-only figure ignores the step latency of recursions (CTC's alpha and beta: T dependent steps);
`CallProfile.latency_model_seconds` adds it (latency.py: per recursion kernel the larger of its bytes
and its steps times the step's critical path), the same function bench/torch_launches.py applies to
PyTorch's kernels.

Modules: operators.py (inputs, calls and minimum bytes of the ten operators), latency.py (the step
latency of recursion kernels), report.py (tables),
budget.py (the CI traffic budget, kernels/traffic_budget.json), __main__.py (the command).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from . import latency

HBM_BYTES_PER_S = 3.35e12
LAUNCH_S = 3e-6
PEAK_FLOPS = {"float16": 989e12, "bfloat16": 989e12, "float32": 67e12, "float64": 67e12}


@dataclass
class GemmLaunch:
    """A cuBLAS GEMM of the call, modelled from its shape (not an emulated kernel)."""
    kernel: str
    dram_bytes: int
    flops: int
    dtype: str
    modelled: bool = True

    @property
    def l2_dram_bytes(self) -> int:
        return self.dram_bytes

    @property
    def model_seconds(self) -> float:
        return max(self.dram_bytes / HBM_BYTES_PER_S, self.flops / PEAK_FLOPS.get(self.dtype, 67e12)) + LAUNCH_S


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
    def latency_model_seconds(self) -> float:
        """Latency-aware model: a recursion kernel costs the larger of its bytes and its steps'
        critical path (latency.py); every other launch as in model_seconds."""
        math_size = 8 if self.dtype in ("fp64", "float64") else 4
        return sum(x.model_seconds if isinstance(x, GemmLaunch) else
                   latency.kernel_seconds(x.l2_dram_bytes, latency.recursion(x.kernel, self.dims, math_size),
                                          HBM_BYTES_PER_S, LAUNCH_S)
                   for x in self.launches)


def _gemm_bytes(m, n, k, a_type, b_type, c_type, beta, stride_a, stride_b, batch) -> int:
    ea, eb, ec = (np.dtype(t).itemsize for t in (a_type, b_type, c_type))
    a = m * k * ea * (batch if stride_a else 1)
    b = k * n * eb * (batch if stride_b else 1)
    c = m * n * ec * batch * (2 if beta != 0 else 1)
    return a + b + c


def _recording_gemm(original, launches):
    def gemm(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
             beta, c, c_type, ldc, stride_c, batch, compute="32F"):
        launches.append(GemmLaunch(f"cuBLAS gemm {m}x{n}x{k}" + (f" x{batch}" if batch > 1 else ""),
                                   _gemm_bytes(m, n, k, a_type, b_type, c_type, beta, stride_a, stride_b, batch),
                                   2 * m * n * k * batch, np.dtype(a_type).name))
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
        gemm_module.gemm_numpy = _recording_gemm(original, launches)
        try:
            call()
        finally:
            gemm_module.gemm_numpy = original
        result.launches = list(launches)
    return result
