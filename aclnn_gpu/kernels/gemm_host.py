"""The GEMM signature's compute modes and operand types, and its implementation over host memory
(`kernels/gemm.py` describes the signature and holds the cuBLAS one): `NumpyGemm` / `gemm_numpy` /
`gemm_batched_numpy` for the `emulated` device and StandaloneEmuContext, `compute_mode` (aclnn's
cubeMathType to an accumulation dtype and compute mode) and the row-major adaptors `rm_gemm` /
`rm_gemm_batched`. Layer 3, kernels.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import ml_dtypes
import numpy as np


COMPUTE_32F = "32F"
COMPUTE_32F_FAST_TF32 = "32F_FAST_TF32"

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)


def compute_mode(cube_math_type: int, dtype) -> tuple[np.dtype, str]:
    """(operand dtype, compute mode) for a storage dtype and CANN's cubeMathType.

    fp32: 0 KEEP_DTYPE -> fp32 operands, true fp32; 1 ALLOW_FP32_DOWN_PRECISION and 3 USE_HF32 ->
    TF32; 2 USE_FP16 -> operands converted to fp16, fp32 accumulation. fp16/bf16: their own
    tensor-core path with fp32 accumulation whatever cubeMathType says."""
    dtype = np.dtype(dtype)
    if dtype != F32:
        return dtype, COMPUTE_32F
    if cube_math_type in (1, 3):
        return F32, COMPUTE_32F_FAST_TF32
    if cube_math_type == 2:
        return F16, COMPUTE_32F
    return F32, COMPUTE_32F


# ------------------------------------------------------------------------------ NumPy (host memory)
def _round_tf32(a: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10 explicit mantissa bits), nearest even; inf/NaN kept."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32)
    lsb = (u >> np.uint32(13)) & np.uint32(1)
    r = ((u + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(a), r, a)


def _host_matrix(addr: int, dtype: np.dtype, rows: int, cols: int, ld: int, stride: int, batch: int,
                 writable: bool = False) -> np.ndarray:
    """(batch, rows, cols) view of column-major matrices at a host address."""
    it = dtype.itemsize
    if rows == 0 or cols == 0 or batch == 0:
        return np.zeros((batch, rows, cols), dtype=dtype)
    span = (batch - 1) * stride + (cols - 1) * ld + rows
    buf = (ctypes.c_char * (span * it)).from_address(addr)
    flat = np.frombuffer(memoryview(buf).cast("B"), dtype=dtype, count=span)
    if not writable:
        flat = flat.view()
        flat.flags.writeable = False
    return np.lib.stride_tricks.as_strided(flat, shape=(batch, rows, cols), strides=(stride * it, it, ld * it),
                                           writeable=writable)


@dataclass
class NumpyGemm:
    """gemm_strided_batched over host addresses (device memory of the emulated device)."""

    def __call__(self, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                 beta, c, c_type, ldc, stride_c, batch, compute=COMPUTE_32F):
        gemm_numpy(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                   beta, c, c_type, ldc, stride_c, batch, compute)


def check_args(transa, transb, m, n, k, lda, ldb, ldc, batch):
    ra = k if transa else m
    rb = n if transb else k
    if min(m, n, k, batch) < 0 or lda < max(1, ra) or ldb < max(1, rb) or ldc < max(1, m):
        raise ValueError(f"gemm: invalid sizes m={m} n={n} k={k} lda={lda} ldb={ldb} ldc={ldc} batch={batch}")


def gemm_numpy(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
               beta, c, c_type, ldc, stride_c, batch, compute=COMPUTE_32F):
    check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
    _gemm_host(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
               beta, c, c_type, ldc, stride_c, batch, compute)


def host_pointers(array: int, batch: int) -> list[int]:
    """The `batch` 8-byte pointers of a pointer array at a host address (emulated device memory)."""
    if batch == 0:
        return []
    return list((ctypes.c_uint64 * batch).from_address(array))


def gemm_batched_numpy(transa, transb, m, n, k, alpha, a_array, a_type, lda, b_array, b_type, ldb,
                       beta, c_array, c_type, ldc, batch, compute=COMPUTE_32F):
    """gemm_batched over host memory: the pointer arrays are read now (in stream order on the emulated
    device), then each entry runs as a batch of one."""
    check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
    if m == 0 or n == 0 or batch == 0:
        return
    for a, b, c in zip(*(host_pointers(x, batch) for x in (a_array, b_array, c_array))):
        _gemm_host(transa, transb, m, n, k, alpha, a, a_type, lda, 0, b, b_type, ldb, 0, beta, c, c_type, ldc, 0, 1,
                   compute)


def _gemm_host(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
               beta, c, c_type, ldc, stride_c, batch, compute):
    a_type, b_type, c_type = np.dtype(a_type), np.dtype(b_type), np.dtype(c_type)
    if m == 0 or n == 0 or batch == 0:
        return
    A = _host_matrix(a, a_type, k if transa else m, m if transa else k, lda, stride_a, batch)
    B = _host_matrix(b, b_type, n if transb else k, k if transb else n, ldb, stride_b, batch)
    A = A.transpose(0, 2, 1) if transa else A
    B = B.transpose(0, 2, 1) if transb else B
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    if compute == COMPUTE_32F_FAST_TF32:
        A32, B32 = _round_tf32(A32), _round_tf32(B32)
    elif compute != COMPUTE_32F:
        raise ValueError(f"gemm: unsupported compute mode {compute!r}")
    with np.errstate(invalid="ignore", over="ignore"):   # inf/NaN operands propagate, as in cuBLAS
        prod = np.matmul(A32, B32) if k > 0 else np.zeros((batch, m, n), np.float32)
        res = np.float32(alpha) * prod
        C = _host_matrix(c, c_type, m, n, ldc, stride_c, batch, writable=True)
        if beta != 0:
            res = res + np.float32(beta) * C.astype(np.float32)
        C[...] = res.astype(c_type)


def rm_gemm(gemm, M, N, K, a, a_type, lda, trans_a, b, b_type, ldb, trans_b, c, c_type, ldc,
            alpha=1.0, beta=0.0, batch=1, stride_a=0, stride_b=0, stride_c=0, compute=COMPUTE_32F):
    """Row-major C (M x N, row stride ldc) = alpha * op(A) @ op(B) + beta * C, batched.

    A is M x K row-major with row stride lda (or, trans_a, K x M); B is K x N (or N x K)."""
    gemm(bool(trans_b), bool(trans_a), N, M, K, alpha, b, b_type, ldb, stride_b, a, a_type, lda, stride_a,
         beta, c, c_type, ldc, stride_c, batch, compute)


def rm_gemm_batched(gemm_batched, M, N, K, a_array, a_type, lda, trans_a, b_array, b_type, ldb, trans_b, c_array,
                    c_type, ldc, batch, alpha=1.0, beta=0.0, compute=COMPUTE_32F):
    """`rm_gemm` over pointer arrays (device addresses of `batch` pointers each): C_i = op(A_i) @ op(B_i)."""
    gemm_batched(bool(trans_b), bool(trans_a), N, M, K, alpha, b_array, b_type, ldb, a_array, a_type, lda,
                 beta, c_array, c_type, ldc, batch, compute)
