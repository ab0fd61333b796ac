"""The cuBLAS path of the GEMMs (kernels/gemm.CublasGemm, what the cuda device calls) on the
emulated device, through a double of cuBLAS whose handle records the math mode, pointer mode, stream,
workspace and compute type of every GEMM and runs the product with the emulated device's NumPy GEMM:
fp16 / bf16 GEMMs forbid reduced-precision split-K reductions (flag 16), fp32 KEEP_DTYPE is true fp32
(no TF32 in the math mode or the compute type), and the handle's modes are restored. The double is as
strict as what it stands for: CuPy's cuBLAS wrappers refuse a capturing stream
(cupy_backends/cuda/libs/cublas.pyx, setStream), libcublas's entry points do not, and a GEMM captured
without a user workspace is refused (cuBLAS's "CUDA Graphs Support": the workspace is the caller's),
so ConvTbc inside an ACL graph proves the GEMMs reach cuBLAS the way CUDA allows."""
from __future__ import annotations

import ctypes
import os
import re
from types import MethodType, SimpleNamespace

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.device.cuda import CudaDevice
from aclnn_gpu.kernels import gemm
from aclnn_gpu.runtime import get_device
from support import Session

TF32_TENSOR_OP_MATH = 3     # cublasMath_t CUBLAS_TF32_TENSOR_OP_MATH
USER_MODE = 7               # some mode the caller left on the handle
CUBLAS_STATUS_NOT_SUPPORTED = 15
TYPES = {0: np.dtype(np.float32), 2: np.dtype(np.float16), 14: dtypes.bfloat16}
COMPUTE = {68: gemm.COMPUTE_32F, 77: gemm.COMPUTE_32F_FAST_TF32}


CUPY_HANDLE = 0x1234        # CuPy's handle for the device: the library must never touch it


def _value(x):
    """An argument as the C function receives it: a ctypes parameter object (what from_param and byref
    return: its repr shows the value, "<cparam 'P' (0x7f...)>"), a ctypes instance, or an int."""
    if type(x).__name__ == "CArgObject":
        return int(re.fullmatch(r"<cparam '.' \((-?(?:0x)?[0-9a-f]+)\)>", repr(x)).group(1), 0)
    return x.value if hasattr(x, "value") else int(x)


class RecordingCublas(SimpleNamespace):
    """Both faces of cuBLAS, over each handle's state. CuPy's module (`cupy_cublas`): check_status, and
    wrappers that first point the handle at CuPy's current stream as CuPy's do (`_setStream`), so they
    refuse a capturing stream. libcublas's entry points (`cublas_functions`): C signatures and statuses,
    the work queued on the handle's stream; a new handle has cuBLAS's defaults (CUBLAS_DEFAULT_MATH, host
    pointer mode, the legacy stream); cublasSetStream resets the workspace (cuBLAS documentation), and a
    GEMM on a capturing stream without a workspace set is refused. CuPy's own handle (CUPY_HANDLE) starts
    with modes a user set on it."""

    def __init__(self) -> None:
        super().__init__(CUBLAS_DEFAULT_MATH=0, CUBLAS_POINTER_MODE_HOST=0, CUBLAS_OP_N=0, CUBLAS_OP_T=1,
                         CUBLAS_COMPUTE_32F=68, CUBLAS_COMPUTE_32F_FAST_TF32=77, CUBLAS_GEMM_DEFAULT=-1)
        self.handles = {CUPY_HANDLE: SimpleNamespace(math=USER_MODE, pointer=1, stream=0, workspace=None)}
        self.calls: list[dict] = []
        self.setup: list[str] = []   # the configuring calls, in order

    def state(self, handle):
        return self.handles[_value(handle)]

    # ---------------------------------------------------------------- CuPy's module
    @staticmethod
    def check_status(status):
        raise AssertionError(f"cuBLAS status {status}")

    def setStream(self, handle, stream):
        if fakecupy.streams._stream(stream).is_capturing():
            raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
        assert self.cublasSetStream_v2(handle, stream) == 0

    def gemmStridedBatchedEx(self, handle, *args):
        self.setStream(handle, fakecupy.get_current_stream().ptr)
        assert self.cublasGemmStridedBatchedEx(handle, *args) == 0

    # ---------------------------------------------------------------- libcublas
    def cublasCreate_v2(self, pointer):
        handle = 0x10000 + len(self.handles)
        self.handles[handle] = SimpleNamespace(math=0, pointer=0, stream=0, workspace=None)
        pointer._obj.value = handle   # a byref(c_void_p)
        self.setup.append("create")
        return 0

    def cublasDestroy_v2(self, handle):
        del self.handles[_value(handle)]
        return 0

    def cublasSetStream_v2(self, handle, stream):
        state = self.state(handle)
        state.stream, state.workspace = int(stream), None
        self.setup.append("stream")
        return 0

    def cublasSetWorkspace_v2(self, handle, workspace, size):
        assert workspace % 256 == 0 and size > 0, "cublasSetWorkspace: 256-byte aligned memory"
        self.state(handle).workspace = (int(workspace), int(size))
        self.setup.append("workspace")
        return 0

    def cublasSetMathMode(self, handle, mode):
        self.state(handle).math = mode
        self.setup.append("math")
        return 0

    def cublasSetPointerMode_v2(self, handle, mode):
        self.state(handle).pointer = mode
        self.setup.append("pointer")
        return 0

    def _record(self, handle, compute, a_type, b_type, c_type, batched):
        state = self.state(handle)
        stream = fakecupy.streams._stream(state.stream)
        captured = stream.is_capturing()
        if captured and state.workspace is None:   # it would allocate inside the graph
            return stream, None
        self.calls.append({"math": state.math, "pointer": state.pointer, "compute": compute,
                           "types": (TYPES[a_type], TYPES[b_type], TYPES[c_type]), "batched": batched,
                           "stream": state.stream, "captured": captured, "workspace": state.workspace,
                           "handle": _value(handle)})
        return stream, state.pointer == 0 and compute in COMPUTE

    def cublasGemmStridedBatchedEx(self, handle, *arguments):
        (transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type, ldc,
         stride_c, batch, compute, algo) = (_value(x) for x in arguments)
        stream, ok = self._record(handle, compute, a_type, b_type, c_type, False)
        if not ok:
            return CUBLAS_STATUS_NOT_SUPPORTED
        al, be = (ctypes.c_float.from_address(p).value for p in (alpha, beta))   # host pointer mode: by value
        args = (bool(transa), bool(transb), m, n, k, al, a, TYPES[a_type], lda, stride_a, b, TYPES[b_type], ldb,
                stride_b, be, c, TYPES[c_type], ldc, stride_c, batch, COMPUTE[compute])
        stream.submit(lambda: gemm.gemm_numpy(*args))
        return 0

    def cublasGemmBatchedEx(self, handle, *arguments):
        (transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, batch, compute,
         algo) = (_value(x) for x in arguments)
        stream, ok = self._record(handle, compute, a_type, b_type, c_type, True)
        if not ok:
            return CUBLAS_STATUS_NOT_SUPPORTED
        al, be = (ctypes.c_float.from_address(p).value for p in (alpha, beta))
        args = (bool(transa), bool(transb), m, n, k, al, a, TYPES[a_type], lda, b, TYPES[b_type], ldb, be, c,
                TYPES[c_type], ldc, batch, COMPUTE[compute])
        stream.submit(lambda: gemm.gemm_batched_numpy(*args))
        return 0


def use_cublas(monkeypatch) -> RecordingCublas:
    """The emulated device's GEMMs go through the cuda device's cuBLAS calls (its frozen launches' one C
    call per GEMM included), into a RecordingCublas."""
    recorder = RecordingCublas()
    monkeypatch.setattr(gemm, "cupy_cublas", lambda: recorder)
    monkeypatch.setattr(gemm, "cublas_functions", lambda: recorder)
    device = get_device()
    monkeypatch.setattr(device, "native_gemm", True)
    monkeypatch.setattr(device, "_cublas_pool", None)
    monkeypatch.setattr(device, "gemm", MethodType(CudaDevice.gemm, device))
    monkeypatch.setattr(device, "gemm_batched", MethodType(CudaDevice.gemm_batched, device))
    return recorder


class NvmathFace:
    """nvmath-python's `nvmath.bindings.cublas` over a RecordingCublas: the same calls with ints, raising
    instead of returning a failed status (what kernels/gemm.NvmathHandle calls)."""

    def __init__(self, recorder: RecordingCublas):
        self.recorder = recorder

    def _call(self, name, *args):
        status = getattr(self.recorder, name)(*args)
        if status:
            raise RuntimeError(f"{name}: cuBLAS status {status}")

    def create(self):
        handle = ctypes.c_void_p()
        self._call("cublasCreate_v2", ctypes.byref(handle))
        return handle.value

    def destroy(self, handle):
        self._call("cublasDestroy_v2", handle)

    def set_stream(self, handle, stream):
        self._call("cublasSetStream_v2", handle, stream)

    def set_workspace(self, handle, workspace, size):
        self._call("cublasSetWorkspace_v2", handle, workspace, size)

    def set_math_mode(self, handle, mode):
        self._call("cublasSetMathMode", handle, mode)

    def set_pointer_mode(self, handle, mode):
        self._call("cublasSetPointerMode_v2", handle, mode)

    def gemm_strided_batched_ex(self, handle, *arguments):
        assert all(type(a) is int for a in (handle, *arguments)), arguments   # the Cython binding's intptr_t / int
        self._call("cublasGemmStridedBatchedEx", handle, *arguments)

    def gemm_batched_ex(self, handle, *arguments):
        assert all(type(a) is int for a in (handle, *arguments)), arguments
        self._call("cublasGemmBatchedEx", handle, *arguments)


def use_binding(monkeypatch, binding: str) -> RecordingCublas:
    """`use_cublas`, the GEMMs through the ctypes binding or (ACLNN_GPU_CUBLAS_BINDING=nvmath) through
    kernels/gemm.NvmathHandle over an NvmathFace of the same recorder."""
    recorder = use_cublas(monkeypatch)
    monkeypatch.setenv(gemm.BINDING_ENV, binding)
    monkeypatch.setattr(gemm, "nvmath_cublas", lambda: NvmathFace(recorder))
    return recorder


def conv_tbc_backward(s, dtype, cube, rng):
    T, B, Cin, Cout, K, pad = 40, 3, 8, 16, 3, 1    # per-tap GEMMs: fp32 and fp16 / bf16 results
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
@pytest.mark.parametrize("binding", ["ctypes", "nvmath"])
def test_cublas_math_mode(emulated, monkeypatch, dtype, cube, compute, binding):
    seed = 1234
    expected = conv_tbc_backward(emulated, dtype, cube, np.random.default_rng(seed))   # the NumPy GEMM
    recorder = use_binding(monkeypatch, binding)
    got = conv_tbc_backward(emulated, dtype, cube, np.random.default_rng(seed))
    assert recorder.calls, "no GEMM went through cuBLAS"
    assert len(recorder.calls) == 2 * 3, "gradWeight's and gradInput's GEMM per tap, all through cuBLAS"
    handle = get_device()._cublas_pool.for_thread()
    assert type(handle) is (gemm.NvmathHandle if binding == "nvmath" else gemm.CublasHandle)
    for call in recorder.calls:
        assert call["math"] & gemm.CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, call
        assert call["math"] & 0xF != TF32_TENSOR_OP_MATH, call   # TF32 only by the compute type
        assert call["math"] == 16 and call["pointer"] == 0 and call["compute"] == compute, call
        assert call["stream"] == emulated.stream.impl.cupy.ptr and call["workspace"] is None, call
        assert call["handle"] != CUPY_HANDLE, call
    assert vars(recorder.handles[CUPY_HANDLE]) == {"math": USER_MODE, "pointer": 1, "stream": 0, "workspace": None}
    for a, e in zip(got, expected):
        np.testing.assert_array_equal(a.view(np.uint8), e.view(np.uint8))


@pytest.mark.parametrize("binding", ["ctypes", "nvmath"])
def test_cublas_gemms_in_an_acl_graph(emulated, monkeypatch, binding):
    """ConvTbc's GEMMs captured in an ACL graph (cuBLAS on a capturing stream, which CuPy's
    wrappers refuse) replay to the bits of the direct calls, each on a workspace of the model's own."""
    seed, dtype, cube = 99, np.dtype(np.float16), 0
    expected = conv_tbc_backward(emulated, dtype, cube, np.random.default_rng(seed))   # the NumPy GEMM
    recorder = use_binding(monkeypatch, binding)
    s = emulated
    T, B, Cin, Cout, K, pad = 40, 3, 8, 16, 3, 1    # conv_tbc_backward's problem
    rng = np.random.default_rng(seed)
    mk = lambda *shape: rng.standard_normal(shape).astype(np.float32).astype(dtype)  # noqa: E731
    x, w, b, g = mk(T, B, Cin), mk(K, Cin, Cout), mk(Cout), mk(T + 2 * pad - K + 1, B, Cout)
    outs = [s.poisoned(a.shape, dtype) for a in (x, w, b)]
    status, workspace, size, executor = s.prepare(acl.aclnnConvTbcBackwardGetWorkspaceSize, s.tensor(g),
                                                  s.tensor(x), s.tensor(w), s.tensor(b), pad, cube, *outs)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert acl.aclmdlRICaptureBegin(s.stream, acl.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0
    run = acl.aclnnConvTbcBackward(workspace, size, executor, s.stream)
    status, model = acl.aclmdlRICaptureEnd(s.stream)
    assert (run, status) == (0, 0), acl.aclGetRecentErrMsg()
    captured = [call for call in recorder.calls if call["captured"]]
    assert len(captured) == 2 * K, recorder.calls                    # every GEMM of the call captured
    workspaces = {call["workspace"] for call in captured}
    assert len(workspaces) == 1 and None not in workspaces           # one workspace per capture
    address, nbytes = workspaces.pop()
    assert nbytes == gemm.capture_workspace_bytes(9)                 # the emulator reports compute 9.0
    assert any(getattr(kept, "ptr", None) == address for kept in model.capture.keep)   # the model owns it
    assert all(o.data for o in outs) and all(np.isnan(s.read(o).astype(np.float32)).all() for o in outs)
    for _ in range(2):
        assert acl.aclmdlRIExecuteAsync(model, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    for out, e in zip(outs, expected):
        np.testing.assert_array_equal(s.read(out).view(np.uint8), e.view(np.uint8))
    assert vars(recorder.handles[CUPY_HANDLE])["math"] == USER_MODE
    # back outside the capture, the handle leaves the model's workspace for cuBLAS's own pool
    recorder.calls.clear()
    conv_tbc_backward(s, dtype, cube, np.random.default_rng(seed))
    assert recorder.calls and all(call["workspace"] is None and not call["captured"] for call in recorder.calls)
    assert acl.aclmdlRIDestroy(model) == 0


def test_cupy_cublas_wrappers_refuse_a_capturing_stream():
    """The double's CuPy face is CuPy's rule (the rule the test above relies on being refused)."""
    recorder, stream = RecordingCublas(), fakecupy.cuda.Stream()
    try:
        stream.begin_capture()
        with pytest.raises(NotImplementedError, match="during stream capture"):
            recorder.setStream(0x1234, stream.ptr)
        with stream, pytest.raises(NotImplementedError):
            recorder.gemmStridedBatchedEx(0x1234)
        assert recorder.cublasSetStream_v2(0x1234, stream.ptr) == 0   # libcublas itself allows it
        stream.end_capture()
    finally:
        stream.close()


def test_gemm_batched_ex_never_loads_a_second_libcublas(monkeypatch):
    """cublasGemmBatchedEx is looked up with RTLD_NOLOAD in the libcublas CuPy's cuBLAS module loaded:
    where that library is not loaded (here: no CUDA libraries at all), the call is refused with
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT and a message naming the library, instead of loading a second
    copy from the search path and handing it CuPy's handle."""
    pytest.importorskip("cupy")
    monkeypatch.setattr(gemm, "_FUNCTIONS", None)
    monkeypatch.setattr(gemm, "cupy_cublas", lambda: None)
    loaded = []
    real_cdll = ctypes.CDLL

    def cdll(name, mode=ctypes.DEFAULT_MODE, *a, **k):
        loaded.append((name, mode))
        return real_cdll("libcublas-not-loaded-here.so", mode, *a, **k)
    monkeypatch.setattr(gemm.ctypes, "CDLL", cdll)
    with pytest.raises(gemm.OpError) as err:
        gemm.cublas_functions()
    assert err.value.status == gemm.aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert "libcublas.so." in str(err.value) and "cublasGemmBatchedEx" in str(err.value)
    assert loaded and loaded[0][0].startswith("libcublas.so.") and loaded[0][1] & os.RTLD_NOLOAD


def test_a_gemm_is_one_cublas_call(emulated, monkeypatch):
    """The handle is configured once (made, math mode, pointer mode, then its stream at the first GEMM):
    later executes on the same stream make GEMM calls only, never a mode read, set or restore."""
    recorder = use_cublas(monkeypatch)
    rng = np.random.default_rng(5)
    conv_tbc_backward(emulated, np.dtype(np.float32), 0, rng)
    first = list(recorder.setup)
    assert first == ["create", "math", "pointer", "stream"], first
    gemms = len(recorder.calls)
    assert gemms
    for _ in range(2):
        conv_tbc_backward(emulated, np.dtype(np.float32), 0, rng)
    assert recorder.setup == first and len(recorder.calls) == 3 * gemms
    other = acl.aclrtCreateStream()[1]
    try:   # another stream: the same handle, pointed at it once
        s = emulated
        x = s.tensor(np.ones((5, 2, 4), np.float32))
        w, b = s.tensor(np.ones((3, 4, 8), np.float32)), s.tensor(np.zeros(8, np.float32))
        out = s.poisoned((5, 2, 8), np.dtype(np.float32))
        status, ws, size, executor = s.prepare(acl.aclnnConvTbcGetWorkspaceSize, x, w, b, 1, out, 0)
        assert status == 0, acl.aclGetRecentErrMsg()
        assert acl.aclnnConvTbc(ws, size, executor, other) == 0
        assert acl.aclrtSynchronizeStream(other) == 0
        assert recorder.setup == [*first, "stream"]
        assert recorder.calls[-1]["stream"] == other.impl.cupy.ptr
        np.testing.assert_allclose(s.read(out)[1:4], np.full((3, 2, 8), 12.0))   # 3 taps x 4 channels
    finally:
        acl.aclrtDestroyStream(other)


def test_pointer_array_gemm_through_cublas(emulated, monkeypatch):
    """gemm_batched (cublasGemmBatchedEx) on the cuda device's path: the C_i of pointer arrays in device
    memory, against a float64 product."""
    recorder = use_cublas(monkeypatch)
    s, device = emulated, get_device()
    rng = np.random.default_rng(3)
    m, n, k, batch = 5, 4, 3, 3
    A = rng.standard_normal((batch, k, m)).astype(np.float32)   # column-major m x k: stored as (k, m)
    B = rng.standard_normal((batch, n, k)).astype(np.float32)
    f32 = np.dtype(np.float32)
    mats = [s.tensor(x) for x in (A, B)]
    C = s.poisoned((batch, n, m), f32)
    address = lambda t, i, shape: t.data + i * shape * 4   # noqa: E731
    tables = [np.array([address(t, i, size) for i in range(batch)], np.uint64)
              for t, size in ((mats[0], k * m), (mats[1], n * k), (C, n * m))]
    arrays = [s.tensor(t) for t in tables]
    device.gemm_batched(s.stream.impl, False, False, m, n, k, 1.0, arrays[0].data, f32, m, arrays[1].data, f32, k,
                        0.0, arrays[2].data, f32, m, batch)
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert [call["batched"] for call in recorder.calls] == [True]
    expected = np.einsum("bkm,bnk->bnm", A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(s.read(C), expected, rtol=1e-5, atol=1e-5)


def test_cublas_gemm_outside_a_device(emulated, monkeypatch):
    """kernels/gemm.CublasGemm (scripts/gpu_probe.py's GEMM): its own handle, made when it is built, set to
    its stream at the first GEMM; a row-major product through rm_gemm against float64; close destroys it."""
    recorder = use_cublas(monkeypatch)
    s = emulated
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    f32 = np.dtype(np.float32)
    a, b, c = s.tensor(A), s.tensor(B), s.poisoned((6, 7), f32)
    cublas = gemm.CublasGemm(s.stream.impl.cupy)
    assert recorder.setup == ["create", "math", "pointer"]
    gemm.rm_gemm(cublas, 6, 7, 5, a.data, f32, 5, False, b.data, f32, 7, False, c.data, f32, 7, alpha=2.0)
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    np.testing.assert_allclose(s.read(c), 2.0 * (A.astype(np.float64) @ B), rtol=1e-5, atol=1e-5)
    assert recorder.setup[-1] == "stream" and recorder.calls[-1]["stream"] == s.stream.impl.cupy.ptr
    handles = len(recorder.handles)
    cublas.close()
    assert len(recorder.handles) == handles - 1


def test_a_thread_gives_its_handle_back_when_it_ends(monkeypatch):
    """HandlePool: one handle per thread; a thread's handle serves the next thread once it has ended, so
    starting threads again and again makes no new handles."""
    import threading
    recorder = RecordingCublas()
    monkeypatch.setattr(gemm, "cupy_cublas", lambda: recorder)
    pool = gemm.HandlePool(recorder)
    mine = pool.for_thread()
    assert pool.for_thread() is mine
    seen = []
    for _ in range(3):
        worker = threading.Thread(target=lambda: seen.append(pool.for_thread()))
        worker.start()
        worker.join()
    assert all(h is not mine for h in seen) and len({id(h) for h in seen}) == 1
    assert recorder.setup.count("create") == 2
    pool.close()
    assert set(recorder.handles) == {CUPY_HANDLE}   # every handle the pool made is destroyed


def test_the_cublas_binding_is_named_by_the_environment(monkeypatch):
    """ACLNN_GPU_CUBLAS_BINDING: ctypes (the default) or nvmath; another name is refused with the rule."""
    from aclnn_gpu.base.errors import OpError
    monkeypatch.delenv(gemm.BINDING_ENV, raising=False)
    assert gemm.handle_maker() is not gemm.NvmathHandle
    monkeypatch.setenv(gemm.BINDING_ENV, "nvmath")
    assert gemm.handle_maker() is gemm.NvmathHandle
    assert gemm.handle_maker(RecordingCublas()) is not gemm.NvmathHandle   # a double of libcublas: ctypes
    monkeypatch.setenv(gemm.BINDING_ENV, "cffi")
    with pytest.raises(OpError, match="ACLNN_GPU_CUBLAS_BINDING='cffi' is neither 'ctypes' nor 'nvmath'"):
        gemm.handle_maker()


def test_the_nvmath_binding_missing_is_the_first_gemms_error(emulated, monkeypatch):
    """ACLNN_GPU_CUBLAS_BINDING=nvmath without nvmath-python: the execute that makes the first GEMM returns
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT naming the variable (nothing else is tried in its place)."""
    import sys
    use_cublas(monkeypatch)
    monkeypatch.setenv(gemm.BINDING_ENV, "nvmath")
    monkeypatch.setitem(sys.modules, "nvmath", None)   # import nvmath raises ImportError
    s, rng = emulated, np.random.default_rng(3)
    mk = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    outs = [s.poisoned(shape, np.float32) for shape in ((40, 3, 8), (3, 8, 16), (16,))]
    status = s.run(acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward, s.tensor(mk(40, 3, 16)),
                   s.tensor(mk(40, 3, 8)), s.tensor(mk(3, 8, 16)), s.tensor(mk(16)), 1, 0, *outs)
    assert status == acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, status
    assert "ACLNN_GPU_CUBLAS_BINDING=nvmath needs nvmath-python" in acl.aclGetRecentErrMsg()


def test_nvmath_alpha_beta_past_the_interned_values_live_with_their_arguments(monkeypatch):
    """nvmath's int form: once _SCALARS_KEPT values are interned, an unseen alpha / beta is a float that
    its argument tuple keeps alive (the address an int that holds it), nothing module-wide: it goes with
    the tuple, so GEMMs with ever new scalars do not grow memory; an interned value stays shared."""
    import gc
    import weakref
    monkeypatch.setattr(gemm, "_SCALAR_FLOATS", {})
    monkeypatch.setattr(gemm, "_SCALARS_KEPT", 1)
    f32 = np.float32
    args = (False, False, 2, 3, 4, 1.0, 0x1000, f32, 2, 8, 0x2000, f32, 4, 12, 0.0, 0x3000, f32, 2, 6, 5)
    first = gemm.native_arguments(False, args, {}, ints=True)
    alpha, beta = first[5], first[14]
    assert type(alpha) is int and ctypes.c_float.from_address(alpha).value == 1.0   # interned
    assert type(beta) is gemm._FloatAddress and ctypes.c_float.from_address(beta).value == 0.0
    again = gemm.native_arguments(False, args, {}, ints=True)
    assert again[5] == alpha and again[14] != beta   # one interned float; each call's own past the cap
    assert list(gemm._SCALAR_FLOATS) == [1.0]
    gone = weakref.ref(beta.number)
    del first, beta, again
    gc.collect()
    assert gone() is None
