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
* `CublasGemm` -- cublasGemmStridedBatchedEx / cublasGemmBatchedEx on the stream of the plan (CUDA
  device), with CuPy's cuBLAS handle for the device, called through ctypes on the libcublas CuPy
  loaded, never through CuPy's cuBLAS wrappers: each of those first points the handle at CuPy's
  current stream through `cublas.setStream`, which raises NotImplementedError("calling cuBLAS API
  during stream capture is currently unsupported") when that stream captures
  (cupy_backends/cuda/libs/cublas.pyx, setStream / _setStream), so a GEMM in an ACL graph would fail
  there, while CUDA allows cublasSetStream and the GEMMs in a capture. cuBLAS's "CUDA Graphs Support"
  (cuBLAS library documentation): a captured routine may otherwise allocate its workspace with
  stream-ordered allocations (memory nodes in the graph); give it a user-owned workspace with
  cublasSetWorkspace. cublasSetStream resets the handle to the default workspace pool, so the
  workspace is set after the stream, on each call; alpha/beta in host pointer mode are captured by value.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from types import SimpleNamespace
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


# cuBLAS enum values (cublas_api.h / library_types.h): the calls go through ctypes, not CuPy's module.
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1                      # cublasOperation_t
CUBLAS_POINTER_MODE_HOST = 0                        # cublasPointerMode_t
CUBLAS_DEFAULT_MATH = 0                             # cublasMath_t
# cublasMath_t flag: split-K reductions stay in the compute type (fp32) instead of the output type
CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77   # cublasComputeType_t
CUBLAS_GEMM_DEFAULT = -1                            # cublasGemmAlgo_t


def cublas_and_handle() -> tuple[Any, Any]:
    """CuPy's cuBLAS module (its constants and check_status) and the current device's handle, CuPy's
    own for this thread and device (tests replace this with a recorder)."""
    try:
        from cupy.cuda import cublas, device
    except ImportError as e:   # CuPy finds cuBLAS in a CUDA toolkit or the nvidia-cublas wheel
        raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      f"cuBLAS could not be loaded ({e}): install a CUDA toolkit or "
                      "`pip install 'aclnn_gpu[cuda]'` (it brings the nvidia-cublas wheel)") from None
    return cublas, device.get_cublas_handle()


# The libcublas entry points CublasGemm calls, by C name -> ctypes argument types (cublas_api.h; the
# cublasStatus_t result is an int). p: a pointer or handle, i: an int (or enum), q: long long.
_P, _I, _Q = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
_CUBLAS_FUNCTIONS: dict[str, list[Any]] = {
    "cublasSetStream_v2": [_P, _P],
    "cublasSetWorkspace_v2": [_P, _P, ctypes.c_size_t],
    "cublasGetMathMode": [_P, ctypes.POINTER(_I)],
    "cublasSetMathMode": [_P, _I],
    "cublasGetPointerMode_v2": [_P, ctypes.POINTER(_I)],
    "cublasSetPointerMode_v2": [_P, _I],
    # (handle, transa, transb, m, n, k, alpha*, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta*, C,
    #  Ctype, ldc, strideC, batchCount, computeType, algo)
    "cublasGemmStridedBatchedEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _Q, _P, _I, _I, _Q, _P, _P, _I, _I, _Q,
                                   _I, _I, _I],
    # (handle, transa, transb, m, n, k, alpha*, Aarray, Atype, lda, Barray, Btype, ldb, beta*, Carray,
    #  Ctype, ldc, batchCount, computeType, algo)
    "cublasGemmBatchedEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I, _I],
}


def cublas_functions() -> Any:
    """The entry points of `_CUBLAS_FUNCTIONS` in the libcublas CuPy loaded, through ctypes, as
    attributes named after them (tests replace this with a double of the same C signatures)."""
    global _FUNCTIONS
    if _FUNCTIONS is None:
        from cupy.cuda import runtime
        cublas_and_handle()                      # loads CuPy's cuBLAS module, hence libcublas.so.<major>
        name = f"libcublas.so.{runtime.runtimeGetVersion() // 1000}"
        # RTLD_NOLOAD: the very copy CuPy's handle belongs to, never a second one from the search path
        # (a handle passed into another libcublas instance is undefined behaviour)
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                          f"cuBLAS: {name} is not loaded by CuPy's cuBLAS module; the GEMMs (cublasGemmBatchedEx, "
                          "cublasGemmStridedBatchedEx) call CuPy's own libcublas (install the nvidia-cublas wheel "
                          "of this CUDA major version)") from None
        functions = SimpleNamespace()
        for symbol, argtypes in _CUBLAS_FUNCTIONS.items():
            fn = getattr(lib, symbol)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            setattr(functions, symbol, fn)
        _FUNCTIONS = functions
    return _FUNCTIONS


_FUNCTIONS: Any = None

# cuBLAS's recommended size of a user-owned workspace (cuBLAS documentation, cublasSetWorkspace): 32 MiB
# on Hopper and later, 4 MiB before.
WORKSPACE_BYTES_HOPPER = 32 << 20
WORKSPACE_BYTES = 4 << 20


def capture_workspace_bytes(major: int) -> int:
    """The workspace a capture's GEMMs get on a GPU of compute capability `major`.x."""
    return WORKSPACE_BYTES_HOPPER if major >= 9 else WORKSPACE_BYTES


class CublasGemm:
    """gemm_strided_batched (and `batched`) on a CUDA stream through libcublas (module docstring).

    alpha/beta are host fp32 scalars (the scale type of CUBLAS_COMPUTE_32F*, pointer mode HOST: read
    when the call is made -- captured by value in a graph -- so temporaries are fine). The handle's
    math mode is, for the call, CUBLAS_DEFAULT_MATH (so a global TF32 setting, CUPY_TF32, cannot
    downgrade true fp32: TF32 comes only from the compute type) with
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (without it cuBLAS may reduce split-K partial sums
    of fp16 / bf16 outputs in the output type, so a deep gradWeight product would not accumulate in
    fp32); the previous modes are restored. `workspace` is (address, bytes) of device memory for the
    call while the stream captures (CudaDevice gives one per capture), None otherwise."""

    def __init__(self, stream: Any, workspace: tuple[int, int] | None = None):
        self.stream = stream   # a cupy Stream
        self.workspace = workspace

    def __call__(self, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b,
                 beta, c, c_type, ldc, stride_c, batch, compute=COMPUTE_32F):
        _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
        if m == 0 or n == 0 or batch == 0:
            return
        al, be = _scalar(alpha), _scalar(beta)   # alive until the call returns (host pointer mode)
        with self._call() as (fns, check, handle, comp, op):
            check(fns.cublasGemmStridedBatchedEx(
                handle, op(transa), op(transb), int(m), int(n), int(k),
                al.ctypes.data, int(a), _cuda_type(a_type), int(lda), int(stride_a),
                int(b), _cuda_type(b_type), int(ldb), int(stride_b),
                be.ctypes.data, int(c), _cuda_type(c_type), int(ldc), int(stride_c),
                int(batch), comp(compute), CUBLAS_GEMM_DEFAULT))

    def batched(self, transa, transb, m, n, k, alpha, a_array, a_type, lda, b_array, b_type, ldb,
                beta, c_array, c_type, ldc, batch, compute=COMPUTE_32F):
        """cublasGemmBatchedEx (pointer arrays in device memory) with the same modes as __call__."""
        _check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
        if m == 0 or n == 0 or batch == 0:
            return
        al, be = _scalar(alpha), _scalar(beta)   # alive until the call returns (host pointer mode)
        with self._call() as (fns, check, handle, comp, op):
            check(fns.cublasGemmBatchedEx(
                handle, op(transa), op(transb), int(m), int(n), int(k), al.ctypes.data,
                int(a_array), _cuda_type(a_type), int(lda), int(b_array), _cuda_type(b_type), int(ldb),
                be.ctypes.data, int(c_array), _cuda_type(c_type), int(ldc), int(batch), comp(compute),
                CUBLAS_GEMM_DEFAULT))

    @contextlib.contextmanager
    def _call(self):
        """The handle for one call: on the plan's stream (then the capture's workspace), math mode
        CUBLAS_DEFAULT_MATH | DISALLOW_REDUCED_PRECISION_REDUCTION, host pointer mode; the previous
        modes restored after it. Yields (the entry points, a status check, the handle, the compute type
        of a compute string, the operation of a transpose flag)."""
        cublas, handle = cublas_and_handle()
        fns = cublas_functions()

        def check(status: int) -> None:
            if status != 0:   # CuPy's own check: the CUBLASError its wrapped calls raise
                cublas.check_status(status)

        old_math, old_pointer = ctypes.c_int(), ctypes.c_int()
        check(fns.cublasGetMathMode(handle, ctypes.pointer(old_math)))
        check(fns.cublasGetPointerMode_v2(handle, ctypes.pointer(old_pointer)))
        compute_types = {COMPUTE_32F: CUBLAS_COMPUTE_32F, COMPUTE_32F_FAST_TF32: CUBLAS_COMPUTE_32F_FAST_TF32}
        try:
            check(fns.cublasSetStream_v2(handle, int(self.stream.ptr)))
            if self.workspace is not None:   # after the stream: cublasSetStream resets the workspace
                check(fns.cublasSetWorkspace_v2(handle, int(self.workspace[0]), int(self.workspace[1])))
            check(fns.cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
            check(fns.cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_HOST))   # alpha/beta read at the call
            yield (fns, check, handle, compute_types.__getitem__, lambda trans: CUBLAS_OP_T if trans else CUBLAS_OP_N)
        finally:
            check(fns.cublasSetMathMode(handle, old_math.value))
            check(fns.cublasSetPointerMode_v2(handle, old_pointer.value))


def _scalar(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)
