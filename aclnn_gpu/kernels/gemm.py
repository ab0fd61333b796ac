"""The GEMM abstraction used by GPU plans (ConvTBC): one signature, cublasGemmStridedBatchedEx's.

    gemm_strided_batched(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a,
                         b, b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, batch, compute)

Column-major semantics exactly as cuBLAS: for i < batch,
    C_i = alpha * op(A_i) @ op(B_i) + beta * C_i,   X_i = X + i * stride_x (elements),
op(A_i) is m x k, op(B_i) is k x n, C_i is m x n; lda/ldb/ldc are the column strides (elements).
With beta == 0, C is not read (it may hold NaN), as in cuBLAS.
Pointers are ints (device addresses); types are NumPy dtypes (float32, float16,
ml_dtypes.bfloat16); `compute` is COMPUTE_32F (true fp32 math) or COMPUTE_32F_FAST_TF32 (fp32
operands rounded to TF32, 10-bit mantissa, fp32 accumulation). fp16 / bf16 operands always
accumulate in fp32 (COMPUTE_32F).

The pointer-array form, cublasGemmBatchedEx's, for batches no single stride describes:

    gemm_batched(transa, transb, m, n, k, alpha, a_array, a_type, lda, b_array, b_type, ldb,
                 beta, c_array, c_type, ldc, batch, compute)

X_i = the i-th 8-byte device pointer of the array at device address x_array (read when the GEMM runs,
in stream order, so an upload queued before it on the stream fills it). The C_i must not overlap.

Row-major callers use `rm_gemm`: a row-major C = A @ B is the column-major C^T = B^T A^T, so the
operands swap and (M, N) become (n, m) -- no data moves.

Implementations:
* `NumpyGemm`  -- over host memory (the `emulated` device and StandaloneEmuContext): views of the
  memory through ctypes, float32 matmul, TF32 emulated by rounding the operands' mantissas to 10
  bits (round to nearest even), results rounded to C's dtype.
* `CublasGemm` -- cupy.cuda.cublas.gemmStridedBatchedEx on the stream of the plan (CUDA device);
  `CublasGemm.batched` -- cublasGemmBatchedEx called through ctypes on the libcublas CuPy loaded (CuPy
  14 wraps gemmStridedBatchedEx and gemmEx but not gemmBatchedEx), same handle, stream and modes.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import OpError
from ..status import aclError

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


def _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch):
    ra = k if transa else m
    rb = n if transb else k
    if min(m, n, k, batch) < 0 or lda < max(1, ra) or ldb < max(1, rb) or ldc < max(1, m):
        raise ValueError(f"gemm: invalid sizes m={m} n={n} k={k} lda={lda} ldb={ldb} ldc={ldc} batch={batch}")


def gemm_numpy(transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
               beta, c, c_type, ldc, stride_c, batch, compute=COMPUTE_32F):
    _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
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
    _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
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


# ------------------------------------------------------------------------------ cuBLAS (CUDA device)
def _cuda_type(dt: np.dtype) -> int:
    # cudaDataType_t: CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14
    return {F32: 0, F16: 2, BF16: 14}[np.dtype(dt)]


# cublasMath_t flag (cublas_api.h) that CuPy does not export: split-K reductions stay in the compute
# type (fp32) instead of the output type
CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16


def cublas_and_handle() -> tuple[Any, Any]:
    """CuPy's cuBLAS module and the current device's handle (tests replace this with a recorder)."""
    try:
        from cupy.cuda import cublas, device
    except ImportError as e:   # CuPy finds cuBLAS in a CUDA toolkit or the nvidia-cublas wheel
        raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      f"cuBLAS could not be loaded ({e}): install a CUDA toolkit or "
                      "`pip install 'aclnn_gpu[cuda]'` (it brings the nvidia-cublas wheel)") from None
    return cublas, device.get_cublas_handle()


def cublas_gemm_batched_ex() -> Any:
    """cublasGemmBatchedEx of the libcublas CuPy loaded, through ctypes (tests replace this)."""
    global _GEMM_BATCHED_EX
    if _GEMM_BATCHED_EX is None:
        from cupy.cuda import runtime
        cublas_and_handle()                      # loads CuPy's cuBLAS module, hence libcublas.so.<major>
        name = f"libcublas.so.{runtime.runtimeGetVersion() // 1000}"
        # RTLD_NOLOAD: the very copy CuPy's handle belongs to, never a second one from the search path
        # (a handle passed into another libcublas instance is undefined behaviour)
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                          f"cublasGemmBatchedEx: {name} is not loaded by CuPy's cuBLAS module; the "
                          "pointer-array GEMM calls CuPy's own libcublas (install the nvidia-cublas wheel "
                          "of this CUDA major version)") from None
        fn = lib.cublasGemmBatchedEx
        i, p = ctypes.c_int, ctypes.c_void_p
        # (handle, transa, transb, m, n, k, alpha*, Aarray, Atype, lda, Barray, Btype, ldb, beta*, Carray,
        #  Ctype, ldc, batchCount, computeType, algo) -> cublasStatus_t
        fn.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i, i]
        fn.restype = i
        _GEMM_BATCHED_EX = fn
    return _GEMM_BATCHED_EX


_GEMM_BATCHED_EX: Any = None


class CublasGemm:
    """gemm_strided_batched on a CUDA stream through cupy.cuda.cublas.gemmStridedBatchedEx.

    alpha/beta are host fp32 scalars (the scale type of CUBLAS_COMPUTE_32F*, pointer mode HOST: read
    before the call returns, so temporaries are fine). The handle's math mode is, for the call,
    CUBLAS_DEFAULT_MATH (so a global TF32 setting, CUPY_TF32, cannot downgrade true fp32: TF32 comes
    only from the compute type) with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (without it
    cuBLAS may reduce split-K partial sums of fp16 / bf16 outputs in the output type, so a deep
    gradWeight product would not accumulate in fp32); the previous mode is restored."""

    def __init__(self, stream: Any):
        self.stream = stream   # a cupy Stream

    def __call__(self, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                 beta, c, c_type, ldc, stride_c, batch, compute=COMPUTE_32F):
        _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
        if m == 0 or n == 0 or batch == 0:
            return
        al, be = _scalar(alpha), _scalar(beta)   # alive until the call returns (host pointer mode)
        with self._modes() as (cublas, handle, comp, op):
            # CuPy's cublas wrappers point the handle at CuPy's *current* stream before each call
            # (overriding cublasSetStream), so the plan's stream is made current for the call
            with self.stream:
                cublas.gemmStridedBatchedEx(
                    handle, op(transa), op(transb), int(m), int(n), int(k),
                    al.ctypes.data, int(a), _cuda_type(a_type), int(lda), int(stride_a),
                    int(b), _cuda_type(b_type), int(ldb), int(stride_b),
                    be.ctypes.data, int(c), _cuda_type(c_type), int(ldc), int(stride_c),
                    int(batch), comp(compute), cublas.CUBLAS_GEMM_DEFAULT)

    def batched(self, transa, transb, m, n, k, alpha, a_array, a_type, lda, b_array, b_type, ldb,
                beta, c_array, c_type, ldc, batch, compute=COMPUTE_32F):
        """cublasGemmBatchedEx (pointer arrays in device memory) with the same modes as __call__."""
        _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
        if m == 0 or n == 0 or batch == 0:
            return
        fn = cublas_gemm_batched_ex()
        al, be = _scalar(alpha), _scalar(beta)   # alive until the call returns (host pointer mode)
        with self._modes() as (cublas, handle, comp, op), self.stream:
            cublas.setStream(handle, self.stream.ptr)   # a direct call: no CuPy wrapper sets it
            status = fn(handle, op(transa), op(transb), int(m), int(n), int(k), al.ctypes.data,
                        int(a_array), _cuda_type(a_type), int(lda), int(b_array), _cuda_type(b_type), int(ldb),
                        be.ctypes.data, int(c_array), _cuda_type(c_type), int(ldc), int(batch), comp(compute),
                        cublas.CUBLAS_GEMM_DEFAULT)
            if status != 0:   # CuPy's own check: the CUBLASError its wrapped calls raise
                cublas.check_status(status)

    @contextlib.contextmanager
    def _modes(self):
        """The handle for one call: math mode CUBLAS_DEFAULT_MATH | DISALLOW_REDUCED_PRECISION_REDUCTION,
        host pointer mode; the previous modes restored after it. Yields (module, handle, compute type of
        a compute string, operation of a transpose flag)."""
        cublas, handle = cublas_and_handle()
        old = cublas.getMathMode(handle)
        old_pm = cublas.getPointerMode(handle)
        cublas.setMathMode(handle, cublas.CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)   # alpha/beta read at the call
        try:
            yield (cublas, handle,
                   lambda compute: {COMPUTE_32F: cublas.CUBLAS_COMPUTE_32F,
                                    COMPUTE_32F_FAST_TF32: cublas.CUBLAS_COMPUTE_32F_FAST_TF32}[compute],
                   lambda trans: cublas.CUBLAS_OP_T if trans else cublas.CUBLAS_OP_N)
        finally:
            cublas.setMathMode(handle, old)
            cublas.setPointerMode(handle, old_pm)


def _scalar(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)
