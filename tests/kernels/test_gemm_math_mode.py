"""The cuBLAS path of the GEMMs (kernels/gemm.CublasGemm, what the cuda device calls) on the
emulated device, through a fake cuBLAS module whose handle records the math mode, pointer mode and
compute type of every gemmStridedBatchedEx and runs the product with the emulated device's NumPy
GEMM: fp16 / bf16 GEMMs forbid reduced-precision split-K reductions (flag 16), fp32 KEEP_DTYPE is
true fp32 (no TF32 in the math mode or the compute type), and the handle's modes are restored."""
from __future__ import annotations

import ctypes
import os
from types import MethodType, SimpleNamespace

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu import dtypes
from aclnn_gpu.device import fakecupy
from aclnn_gpu.device.cuda import CudaDevice
from aclnn_gpu.kernels import gemm
from aclnn_gpu.runtime import get_device
from support import Session

TF32_TENSOR_OP_MATH = 3     # cublasMath_t CUBLAS_TF32_TENSOR_OP_MATH
USER_MODE = 7               # some mode the caller left on the handle


class RecordingCublas(SimpleNamespace):
    """The names of cupy.cuda.cublas that CublasGemm uses; state per (single) handle."""

    def __init__(self) -> None:
        super().__init__(CUBLAS_DEFAULT_MATH=0, CUBLAS_POINTER_MODE_HOST=0, CUBLAS_OP_N=0, CUBLAS_OP_T=1,
                         CUBLAS_COMPUTE_32F=68, CUBLAS_COMPUTE_32F_FAST_TF32=77, CUBLAS_GEMM_DEFAULT=-1)
        self.math_mode, self.pointer_mode, self.calls = USER_MODE, 1, []

    def getMathMode(self, handle):
        return self.math_mode

    def setMathMode(self, handle, mode):
        self.math_mode = mode

    def getPointerMode(self, handle):
        return self.pointer_mode

    def setPointerMode(self, handle, mode):
        self.pointer_mode = mode

    def gemmStridedBatchedEx(self, handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type,
                             ldb, stride_b, beta, c, c_type, ldc, stride_c, batch, compute, algo):
        types = {0: np.dtype(np.float32), 2: np.dtype(np.float16), 14: dtypes.bfloat16}
        self.calls.append({"math": self.math_mode, "pointer": self.pointer_mode, "compute": compute,
                           "types": (types[a_type], types[b_type], types[c_type])})
        al, be = (ctypes.c_float.from_address(p).value for p in (alpha, beta))   # host pointer mode
        mode = {68: gemm.COMPUTE_32F, 77: gemm.COMPUTE_32F_FAST_TF32}[compute]
        args = (bool(transa), bool(transb), m, n, k, al, a, types[a_type], lda, stride_a, b, types[b_type], ldb,
                stride_b, be, c, types[c_type], ldc, stride_c, batch, mode)
        fakecupy.get_current_stream().submit(lambda: gemm.gemm_numpy(*args))


    def setStream(self, handle, stream):
        self.stream = stream

    def check_status(self, status):
        raise AssertionError(f"cuBLAS status {status}")

    def gemm_batched_ex(self, handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c,
                        c_type, ldc, batch, compute, algo):
        """cublasGemmBatchedEx as kernels/gemm.py calls it through ctypes (pointer arrays)."""
        types = {0: np.dtype(np.float32), 2: np.dtype(np.float16), 14: dtypes.bfloat16}
        stream = fakecupy.get_current_stream()
        assert self.stream == stream.ptr, "the plan's stream was not set on the handle"
        self.calls.append({"math": self.math_mode, "pointer": self.pointer_mode, "compute": compute,
                           "types": (types[a_type], types[b_type], types[c_type]), "batched": True})
        al, be = (ctypes.c_float.from_address(p).value for p in (alpha, beta))
        mode = {68: gemm.COMPUTE_32F, 77: gemm.COMPUTE_32F_FAST_TF32}[compute]
        args = (bool(transa), bool(transb), m, n, k, al, a, types[a_type], lda, b, types[b_type], ldb, be, c,
                types[c_type], ldc, batch, mode)
        stream.submit(lambda: gemm.gemm_batched_numpy(*args))
        return 0


def conv_tbc_backward(s, dtype, cube, rng):
    T, B, Cin, Cout, K, pad = 40, 3, 8, 16, 3, 1    # channels of 16-byte rows: the pointer-array GEMM runs
    mk = lambda *shape: rng.standard_normal(shape).astype(np.float32).astype(dtype)  # noqa: E731
    x, w, b, g = mk(T, B, Cin), mk(K, Cin, Cout), mk(Cout), mk(T + 2 * pad - K + 1, B, Cout)
    outs = [s.poisoned(a.shape, dtype) for a in (x, w, b)]
    status = s.run(acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward,
                   s.tensor(g), s.tensor(x), s.tensor(w), s.tensor(b), pad, cube, *outs)
    assert status == 0, acl.aclGetRecentErrMsg()
    return [s.read(o) for o in outs]


@pytest.fixture
def emulated():
    s = Session("emulated")
    yield s
    s.close()


@pytest.mark.parametrize("dtype, cube, compute", [
    (np.dtype(np.float16), 0, 68), (dtypes.bfloat16, 1, 68),
    (np.dtype(np.float32), 0, 68), (np.dtype(np.float32), 2, 68), (np.dtype(np.float32), 1, 77)],
    ids=["fp16", "bf16", "fp32-keep", "fp32-use-fp16", "fp32-tf32"])
def test_cublas_math_mode(emulated, monkeypatch, dtype, cube, compute):
    seed = 1234
    expected = conv_tbc_backward(emulated, dtype, cube, np.random.default_rng(seed))   # the NumPy GEMM
    recorder = RecordingCublas()
    monkeypatch.setattr(gemm, "cublas_and_handle", lambda: (recorder, object()))
    device = get_device()
    monkeypatch.setattr(gemm, "cublas_gemm_batched_ex", lambda: recorder.gemm_batched_ex)
    monkeypatch.setattr(device, "gemm", MethodType(CudaDevice.gemm, device))   # the cuda device's cuBLAS calls
    monkeypatch.setattr(device, "gemm_batched", MethodType(CudaDevice.gemm_batched, device))
    got = conv_tbc_backward(emulated, dtype, cube, np.random.default_rng(seed))
    assert recorder.calls, "no GEMM went through cuBLAS"
    assert any(call.get("batched") for call in recorder.calls), "no pointer-array GEMM went through cuBLAS"
    for call in recorder.calls:
        assert call["math"] & gemm.CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, call
        assert call["math"] & 0xF != TF32_TENSOR_OP_MATH, call   # TF32 only by the compute type
        assert call["math"] == 16 and call["pointer"] == 0 and call["compute"] == compute, call
    assert recorder.math_mode == USER_MODE and recorder.pointer_mode == 1   # restored
    for a, e in zip(got, expected):
        np.testing.assert_array_equal(a.view(np.uint8), e.view(np.uint8))


def test_gemm_batched_ex_never_loads_a_second_libcublas(monkeypatch):
    """cublasGemmBatchedEx is looked up with RTLD_NOLOAD in the libcublas CuPy's cuBLAS module loaded:
    where that library is not loaded (here: no CUDA libraries at all), the call is refused with
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT and a message naming the library, instead of loading a second
    copy from the search path and handing it CuPy's handle."""
    pytest.importorskip("cupy")
    monkeypatch.setattr(gemm, "_GEMM_BATCHED_EX", None)
    monkeypatch.setattr(gemm, "cublas_and_handle", lambda: (None, None))
    loaded = []
    real_cdll = ctypes.CDLL

    def cdll(name, mode=ctypes.DEFAULT_MODE, *a, **k):
        loaded.append((name, mode))
        return real_cdll("libcublas-not-loaded-here.so", mode, *a, **k)
    monkeypatch.setattr(gemm.ctypes, "CDLL", cdll)
    with pytest.raises(gemm.OpError) as err:
        gemm.cublas_gemm_batched_ex()
    assert err.value.status == gemm.aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert "libcublas.so." in str(err.value) and "cublasGemmBatchedEx" in str(err.value)
    assert loaded and loaded[0][0].startswith("libcublas.so.") and loaded[0][1] & os.RTLD_NOLOAD
