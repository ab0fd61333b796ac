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
* `NumpyGemm` (`kernels/gemm_host.py`) -- over host memory (the `emulated` device and
  StandaloneEmuContext): views of the memory through ctypes, float32 matmul, TF32 emulated by rounding
  the operands' mantissas to 10 bits (round to nearest even), results rounded to C's dtype.
* cuBLAS (the CUDA device) -- cublasGemmStridedBatchedEx / cublasGemmBatchedEx through ctypes on the
  libcublas CuPy loaded, never through CuPy's cuBLAS wrappers: each of those first points the handle at
  CuPy's current stream through `cublas.setStream`, which raises NotImplementedError("calling cuBLAS API
  during stream capture is currently unsupported") when that stream captures
  (cupy_backends/cuda/libs/cublas.pyx, setStream / _setStream), while CUDA allows cublasSetStream and
  the GEMMs in a capture. The host cost of a GEMM is one C call: `CublasHandle` is a handle of the
  library's own (one per device and thread: `HandlePool`), its modes set once when it is made, its
  stream and workspace once per execute and only when they change; `native_arguments` converts
  a GEMM's argument list to C values once (a frozen launch keeps them: plans/frozen.Gemm.native), alpha
  and beta at fixed addresses. cuBLAS's "CUDA Graphs Support" (cuBLAS library documentation): a captured
  routine may otherwise allocate its workspace with stream-ordered allocations (memory nodes in the
  graph); give it a user-owned workspace with cublasSetWorkspace. cublasSetStream resets the handle to
  the default workspace pool, so the workspace is set after the stream, whenever the handle's differs
  from the one the call needs (`CublasHandle.use`); alpha/beta in host pointer mode are
  captured by value. `CublasGemm` is the same for a caller outside a device (scripts/gpu_probe.py).
"""
from __future__ import annotations

import ctypes
import os
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..base.errors import OpError
from ..base.status import aclError

# the host implementation and the shared constants, importable from here as before
from .gemm_host import (BF16, COMPUTE_32F, COMPUTE_32F_FAST_TF32, F16, F32, NumpyGemm,  # noqa: F401
                        check_args, compute_mode, gemm_batched_numpy, gemm_numpy, host_pointers, rm_gemm,
                        rm_gemm_batched)


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
_COMPUTE_TYPES = {COMPUTE_32F: CUBLAS_COMPUTE_32F, COMPUTE_32F_FAST_TF32: CUBLAS_COMPUTE_32F_FAST_TF32}
# The handle's math mode, set once when it is made: CUBLAS_DEFAULT_MATH (so a global TF32 setting cannot
# downgrade true fp32: TF32 comes only from the compute type) with DISALLOW_REDUCED_PRECISION_REDUCTION
# (without it cuBLAS may reduce split-K partial sums of fp16 / bf16 outputs in the output type).
LIBRARY_MATH_MODE = CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION


def cupy_cublas() -> Any:
    """CuPy's cuBLAS module: importing it loads CuPy's libcublas, and its check_status raises the
    CUBLASError of a failed call (tests replace this with a double)."""
    try:
        from cupy.cuda import cublas
    except ImportError as e:   # CuPy finds cuBLAS in a CUDA toolkit or the nvidia-cublas wheel
        raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      f"cuBLAS could not be loaded ({e}): install a CUDA toolkit or "
                      "`pip install 'aclnn_gpu[cuda]'` (it brings the nvidia-cublas wheel)") from None
    return cublas


# The libcublas entry points the library calls, by C name -> ctypes argument types (cublas_api.h; the
# cublasStatus_t result is an int). p: a pointer or handle, i: an int (or enum), q: long long. None: the
# GEMMs, called with arguments converted once (`native_arguments`), so ctypes converts nothing per call
# (an argtypes list would run a from_param per argument per call: about 2 us more for a GEMM's 23).
_P, _I, _Q = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
_CUBLAS_FUNCTIONS: dict[str, list[Any] | None] = {
    "cublasCreate_v2": [ctypes.POINTER(_P)],
    "cublasDestroy_v2": [_P],
    "cublasSetStream_v2": [_P, _P],
    "cublasSetWorkspace_v2": [_P, _P, ctypes.c_size_t],
    "cublasSetMathMode": [_P, _I],
    "cublasSetPointerMode_v2": [_P, _I],
    # (handle, transa, transb, m, n, k, alpha*, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta*, C,
    #  Ctype, ldc, strideC, batchCount, computeType, algo)
    "cublasGemmStridedBatchedEx": None,
    # (handle, transa, transb, m, n, k, alpha*, Aarray, Atype, lda, Barray, Btype, ldb, beta*, Carray,
    #  Ctype, ldc, batchCount, computeType, algo)
    "cublasGemmBatchedEx": None,
}


def bind_functions(lib: Any) -> SimpleNamespace:
    """The entry points of `_CUBLAS_FUNCTIONS` in a loaded library (a ctypes.CDLL), their argument types
    set, as attributes named after them."""
    functions = SimpleNamespace()
    for symbol, argtypes in _CUBLAS_FUNCTIONS.items():
        fn = getattr(lib, symbol)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        setattr(functions, symbol, fn)
    return functions


def cublas_functions() -> Any:
    """The entry points of `_CUBLAS_FUNCTIONS` in the libcublas CuPy loaded, through ctypes (tests and the
    host-overhead bench replace them with doubles of the same C signatures)."""
    global _FUNCTIONS
    if _FUNCTIONS is None:
        from cupy.cuda import runtime
        cupy_cublas()                            # loads CuPy's cuBLAS module, hence libcublas.so.<major>
        name = f"libcublas.so.{runtime.runtimeGetVersion() // 1000}"
        # RTLD_NOLOAD: the very copy CuPy loaded, never a second one from the search path (two copies of
        # cuBLAS in one process would each keep their own state)
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                          f"cuBLAS: {name} is not loaded by CuPy's cuBLAS module; the GEMMs (cublasGemmBatchedEx, "
                          "cublasGemmStridedBatchedEx) call CuPy's own libcublas (install the nvidia-cublas wheel "
                          "of this CUDA major version)") from None
        _FUNCTIONS = bind_functions(lib)
    return _FUNCTIONS


_FUNCTIONS: Any = None

# cuBLAS's recommended size of a user-owned workspace (cuBLAS documentation, cublasSetWorkspace): 32 MiB
# on Hopper and later, 4 MiB before.
WORKSPACE_BYTES_HOPPER = 32 << 20
WORKSPACE_BYTES = 4 << 20


def capture_workspace_bytes(major: int) -> int:
    """The workspace a capture's GEMMs get on a GPU of compute capability `major`.x."""
    return WORKSPACE_BYTES_HOPPER if major >= 9 else WORKSPACE_BYTES


# ------------------------------------------------------------------------------ arguments, converted once
# alpha / beta live at fixed addresses: host pointer mode reads them when the call is made (a captured
# call by value), so one float per distinct value serves every GEMM for the life of the process.
_SCALARS: dict[float, Any] = {}
_SCALARS_KEPT = 1024   # distinct values interned; past that a GEMM's arguments keep their own float


def _scale(value: float) -> Any:
    key = float(np.float32(value))
    pointer = _SCALARS.get(key)
    if pointer is None:
        pointer = ctypes.byref(ctypes.c_float(key))   # passed as a float*, keeps its float alive
        if len(_SCALARS) < _SCALARS_KEPT:
            _SCALARS[key] = pointer
    return pointer


_SCALAR_FLOATS: dict[float, Any] = {}   # the same values as c_float objects, for their addresses (`_scale_address`)


class _FloatAddress(int):
    """The address of a float not interned (past _SCALARS_KEPT), as the int nvmath's binding takes, that
    keeps its float alive: the float lives exactly as long as an argument tuple (a call's, a frozen
    GEMM's, a replay program's) holds its address, so unseen values cost nothing after their calls."""

    number: Any


def _scale_address(value: float) -> int:
    """The address of a float holding `value` (nvmath's binding takes alpha / beta as an intptr_t): an
    interned float's (kept for the life of the process) or a _FloatAddress holding its own float."""
    key = float(np.float32(value))
    number = _SCALAR_FLOATS.get(key)
    if number is not None:
        return ctypes.addressof(number)
    number = ctypes.c_float(key)
    if len(_SCALAR_FLOATS) < _SCALARS_KEPT:
        _SCALAR_FLOATS[key] = number
        return ctypes.addressof(number)
    address = _FloatAddress(ctypes.addressof(number))
    address.number = number
    return address


# The C arguments are ctypes' own parameter objects (what `from_param` and `byref` return): a foreign call
# copies such an object's value as it is, where a c_void_p or c_longlong instance would first be turned
# into a new one per call (CPython's _ctypes/callproc.c, ConvParam). Ints below 2**31 pass as C ints.
_pointer = _P.from_param
_long = _Q.from_param


def _c_int(value: Any, name: str) -> int:
    """An int argument of cuBLAS (passed as a C int without ctypes checking its range)."""
    v = int(value)
    if not -(1 << 31) <= v < (1 << 31):
        raise ValueError(f"gemm: {name}={v} does not fit cuBLAS's 32-bit int")
    return v


def _op(trans: Any) -> int:
    return CUBLAS_OP_T if trans else CUBLAS_OP_N


def native_arguments(batched: bool, args: tuple, kwargs: dict, ints: bool = False) -> tuple | None:
    """The C arguments after the handle of cublasGemmStridedBatchedEx (or, `batched`, cublasGemmBatchedEx)
    for the portable argument list (`gemm_strided_batched`'s or `gemm_batched`'s, module docstring),
    checked and converted for a ctypes call without argument types: ints as Python ints, pointers and
    strides as ctypes parameter objects, alpha / beta as pointers to interned floats; with `ints`, every
    value a Python int (alpha / beta their floats' addresses), as nvmath's Cython binding takes them
    (`NvmathHandle`). None: an empty product (m, n or batch 0), which cuBLAS is not called for. A frozen
    GEMM converts once (plans/frozen.Gemm.native)."""
    if batched:
        (transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, batch,
         compute) = _bind(_BATCHED_NAMES, args, kwargs)
    else:
        (transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type, ldc,
         stride_c, batch, compute) = _bind(_STRIDED_NAMES, args, kwargs)
    check_args(transa, transb, m, n, k, lda, ldb, ldc, batch)
    if m == 0 or n == 0 or batch == 0:
        return None
    _pointer, _long, _scale = (int, int, _scale_address) if ints else _C_FORM
    head = (_op(transa), _op(transb), _c_int(m, "m"), _c_int(n, "n"), _c_int(k, "k"), _scale(alpha))
    comp = _COMPUTE_TYPES.get(compute)
    if comp is None:
        raise ValueError(f"gemm: unsupported compute mode {compute!r}")
    if batched:
        return (*head, _pointer(int(a)), _cuda_type(a_type), _c_int(lda, "lda"), _pointer(int(b)), _cuda_type(b_type),
                _c_int(ldb, "ldb"), _scale(beta), _pointer(int(c)), _cuda_type(c_type), _c_int(ldc, "ldc"),
                _c_int(batch, "batch"), comp, CUBLAS_GEMM_DEFAULT)
    return (*head, _pointer(int(a)), _cuda_type(a_type), _c_int(lda, "lda"), _long(int(stride_a)), _pointer(int(b)),
            _cuda_type(b_type), _c_int(ldb, "ldb"), _long(int(stride_b)), _scale(beta), _pointer(int(c)),
            _cuda_type(c_type), _c_int(ldc, "ldc"), _long(int(stride_c)), _c_int(batch, "batch"), comp,
            CUBLAS_GEMM_DEFAULT)


_C_FORM = (_pointer, _long, _scale)   # the ctypes parameter objects of native_arguments (ints=False)

_STRIDED_NAMES = ("transa", "transb", "m", "n", "k", "alpha", "a", "a_type", "lda", "stride_a", "b", "b_type", "ldb",
                  "stride_b", "beta", "c", "c_type", "ldc", "stride_c", "batch", "compute")
_BATCHED_NAMES = ("transa", "transb", "m", "n", "k", "alpha", "a_array", "a_type", "lda", "b_array", "b_type", "ldb",
                  "beta", "c_array", "c_type", "ldc", "batch", "compute")


def _bind(names: tuple[str, ...], args: tuple, kwargs: dict) -> list[Any]:
    """The values of `names` from positional and keyword arguments (compute defaults to COMPUTE_32F)."""
    if len(args) > len(names) or any(name not in names[len(args):] for name in kwargs):
        raise TypeError(f"gemm: unexpected arguments {args!r} {kwargs!r}")
    values = [*args, *(kwargs.get(name, _MISSING) for name in names[len(args):])]
    if values[-1] is _MISSING:
        values[-1] = COMPUTE_32F
    if _MISSING in values:
        raise TypeError(f"gemm: missing argument {names[values.index(_MISSING)]}")
    return values


_MISSING = object()


# ------------------------------------------------------------------------------ the library's handles
class CublasHandle:
    """A cuBLAS handle of the library's own (the cuda device keeps one per device and thread, as CuPy and
    PyTorch do: a handle made at a warm-up call outside any capture serves the capture's stream too,
    where cublasCreate might allocate). What cuBLAS reads from a handle is set once, when it is made:
    LIBRARY_MATH_MODE and host pointer mode (alpha / beta read at the call). Nothing but the library
    uses it, so no GEMM reads, sets or restores a mode, while CuPy's handles
    (cupy.cuda.device.get_cublas_handle) keep whatever CuPy or its user set on them.

    What changes is the stream and, while a stream captures, the workspace: cuBLAS's "CUDA Graphs
    Support" asks captured routines for a user-owned one (cublasSetWorkspace), or they may allocate
    inside the graph. `use` sets both before the first GEMM of an execute, and only when they differ
    from the handle's. cublasSetStream resets the handle to cuBLAS's default workspace pool (cuBLAS
    documentation, cublasSetStream), so the workspace is set after it, and a handle leaving a capture
    goes back to the pool: a graph replayed on another stream never shares its workspace with a direct
    GEMM. Made and used with its device current."""

    ints = False   # its GEMMs take native_arguments' ctypes form

    def __init__(self, functions: Any = None):
        fns = cublas_functions() if functions is None else functions
        self.functions = fns
        handle = _P()
        self.check(fns.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        self.made: Any = handle
        self.handle: Any = _pointer(handle.value)   # as the GEMMs take it (a parameter object)
        self.stream_ptr: int | None = None                # what the handle is set to now
        self.workspace: tuple[int, int] | None = None
        self.check(fns.cublasSetMathMode(handle, LIBRARY_MATH_MODE), "cublasSetMathMode")
        self.check(fns.cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode")
        self.strided = fns.cublasGemmStridedBatchedEx   # (handle, *native_arguments(False, ...))
        self.batched = fns.cublasGemmBatchedEx          # (handle, *native_arguments(True, ...))

    def use(self, stream_ptr: int, workspace: tuple[int, int] | None) -> None:
        """The GEMMs that follow run on the stream at `stream_ptr` with `workspace` ((address, bytes) of a
        capture's, or None: cuBLAS's own pool); no cuBLAS call when the handle is so already."""
        if stream_ptr == self.stream_ptr and workspace == self.workspace:
            return
        fns = self.functions
        self.stream_ptr = self.workspace = None   # unknown until both calls succeeded
        self.check(fns.cublasSetStream_v2(self.handle, stream_ptr), "cublasSetStream")   # resets the workspace
        if workspace is not None:
            self.check(fns.cublasSetWorkspace_v2(self.handle, int(workspace[0]), int(workspace[1])),
                       "cublasSetWorkspace")
        self.stream_ptr, self.workspace = stream_ptr, workspace

    def gemm(self, batched: bool, arguments: tuple) -> None:
        """One GEMM of `native_arguments`' C arguments on the handle's stream."""
        status = (self.batched if batched else self.strided)(self.handle, *arguments)
        if status:
            self.check(status, "cublasGemmBatchedEx" if batched else "cublasGemmStridedBatchedEx")

    @staticmethod
    def check(status: int, what: str) -> None:
        if status != 0:   # CuPy's own check: the CUBLASError its wrapped calls raise
            cupy_cublas().check_status(status)
            raise RuntimeError(f"{what}: cuBLAS status {status}")

    def close(self) -> None:
        """cublasDestroy (with its device current, after the work queued with it)."""
        handle, self.made, self.handle = self.made, None, None
        if handle is not None and handle.value:
            self.check(self.functions.cublasDestroy_v2(handle), "cublasDestroy")


# Which binding calls cuBLAS: "ctypes" (the default: the libcublas CuPy loaded, `CublasHandle`) or
# "nvmath" (nvmath-python's Cython binding, `NvmathHandle`: about 0.15 us per GEMM call against ctypes'
# 0.61 us over a null libcublas, bench/launch_paths.py; not a dependency of the library).
BINDING_ENV = "ACLNN_GPU_CUBLAS_BINDING"


def nvmath_cublas() -> Any:
    """nvmath-python's cuBLAS binding module (`nvmath.bindings.cublas`), or the error of a missing one."""
    try:
        from nvmath.bindings import cublas   # type: ignore[import-not-found]
    except ImportError as e:
        raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      f"cuBLAS binding: {BINDING_ENV}=nvmath needs nvmath-python ({e}); `pip install nvmath-python` "
                      f"or unset {BINDING_ENV} (the default calls cuBLAS through ctypes)") from None
    return cublas


class NvmathHandle:
    """`CublasHandle`'s interface over nvmath-python's Cython binding (`nvmath.bindings.cublas`, or
    `binding`, a module of the same functions): the handle is made, configured and used through the
    binding, so every call goes to the one copy of libcublas it loaded. Its GEMMs take native_arguments'
    int form (`ints`); a failed call raises the binding's cuBLASError. The same modes as CublasHandle's,
    set once; the stream and workspace set per execute only when they change."""

    ints = True

    def __init__(self, binding: Any = None):
        nv = nvmath_cublas() if binding is None else binding
        self.functions = nv
        self.made: Any = nv.create()
        self.handle: Any = self.made
        self.stream_ptr: int | None = None
        self.workspace: tuple[int, int] | None = None
        nv.set_math_mode(self.made, LIBRARY_MATH_MODE)
        nv.set_pointer_mode(self.made, CUBLAS_POINTER_MODE_HOST)
        self.strided = nv.gemm_strided_batched_ex   # (handle, *native_arguments(False, ..., ints=True))
        self.batched = nv.gemm_batched_ex

    def use(self, stream_ptr: int, workspace: tuple[int, int] | None) -> None:
        """As CublasHandle.use (cublasSetStream resets the workspace, so the workspace is set after it)."""
        if stream_ptr == self.stream_ptr and workspace == self.workspace:
            return
        nv = self.functions
        self.stream_ptr = self.workspace = None
        nv.set_stream(self.made, int(stream_ptr))
        if workspace is not None:
            nv.set_workspace(self.made, int(workspace[0]), int(workspace[1]))
        self.stream_ptr, self.workspace = stream_ptr, workspace

    def gemm(self, batched: bool, arguments: tuple) -> None:
        (self.batched if batched else self.strided)(self.made, *arguments)

    @staticmethod
    def check(status: Any, what: str) -> None:   # the binding raises itself; a status is never returned
        if status:
            raise RuntimeError(f"{what}: cuBLAS status {status}")

    def close(self) -> None:
        handle, self.made, self.handle = self.made, None, None
        if handle:
            self.functions.destroy(handle)


def handle_maker(functions: Any = None) -> Any:
    """What makes a HandlePool's handles: `functions` given (a double of libcublas's entry points) or the
    default, CublasHandle; NvmathHandle when the environment names the nvmath binding."""
    binding = os.environ.get(BINDING_ENV, "ctypes")
    if functions is None and binding == "nvmath":
        return NvmathHandle
    if binding not in ("ctypes", "nvmath"):
        raise OpError(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      f"cuBLAS binding: {BINDING_ENV}={binding!r} is neither 'ctypes' nor 'nvmath'")
    return lambda: CublasHandle(functions)


class HandlePool:
    """The handles of one device, one per thread that runs GEMMs on it (`for_thread`). A thread's lease
    gives its handle back to the pool when the thread ends (its thread-local storage is dropped), so a
    process that starts threads again and again reuses handles instead of making new ones. The binding
    (`handle_maker`) is chosen when the pool is made, at the device's first GEMM."""

    def __init__(self, functions: Any = None) -> None:
        self.functions = functions
        self.make = handle_maker(functions)
        self.free: list[Any] = []
        self._local = threading.local()

    def for_thread(self) -> Any:
        """The calling thread's handle (made, or taken from the pool, with the device current)."""
        lease = getattr(self._local, "lease", None)
        if lease is None:
            try:
                handle = self.free.pop()
            except IndexError:
                handle = self.make()
            lease = self._local.lease = _Lease(handle, self.free)
        return lease.handle

    def close(self) -> None:
        """Destroy the pooled handles and the calling thread's (the device's reset; other threads' stay)."""
        lease = getattr(self._local, "lease", None)
        if lease is not None:
            self._local.lease = None
            lease.pool = None
            lease.handle.close()
        while self.free:
            self.free.pop().close()


class _Lease:
    """A thread's hold on a pooled handle (in its thread-local storage)."""

    __slots__ = ("handle", "pool")

    def __init__(self, handle: CublasHandle, pool: list[CublasHandle]):
        self.handle, self.pool = handle, pool

    def __del__(self) -> None:   # the thread ended: the handle serves the next thread (no CUDA call here)
        if self.pool is not None:
            self.pool.append(self.handle)


class CublasGemm:
    """gemm_strided_batched (and `batched`) on a CUDA stream through a CublasHandle (module docstring),
    for callers outside a device (scripts/gpu_probe.py): its own handle, made here (with the stream's device
    current, before any capture the GEMMs may go into); `workspace` is (address, bytes) of device memory
    for a capture, else None."""

    def __init__(self, stream: Any, workspace: tuple[int, int] | None = None):
        self.stream = stream   # a cupy Stream
        self.workspace = workspace
        self._handle: CublasHandle | None = CublasHandle()

    def _ready(self) -> CublasHandle:
        if self._handle is None:
            raise ValueError("CublasGemm: used after close()")
        self._handle.use(int(self.stream.ptr), self.workspace)
        return self._handle

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        arguments = native_arguments(False, args, kwargs)
        if arguments is not None:
            self._ready().gemm(False, arguments)

    def batched(self, *args: Any, **kwargs: Any) -> None:
        """cublasGemmBatchedEx (pointer arrays in device memory)."""
        arguments = native_arguments(True, args, kwargs)
        if arguments is not None:
            self._ready().gemm(True, arguments)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
