"""Ordering between the library's streams and the work around them, on the emulated device (with
stand-ins where fakecupy has no model of its own) and, where a GPU is in the run (ACLNN_GPU_TEST_DEVICES
names "cuda"), on the cuda device:

- functional on the cuda device runs after CuPy's current stream (a slow producer on a non-blocking
  stream, `with cupy.cuda.Stream():`) and hands its results back ordered on it;
- the calls CUDA calls unsafe are made in relaxed capture mode, so a global-mode capture on another
  thread (PyTorch's `torch.cuda.graph` default) is not invalidated by an operator call;
- functional refuses legacy-stream work while an ACL capture is in progress on the device
  (ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT) instead of invalidating the capture.

On the emulated device the functional GPU path (CuPy arrays) is driven by `FakeCupyArrays`, a minimal
CuPy array module over fakecupy's memory and streams: `asarray` copies on the current stream, `empty`
allocates, an array's `get()` synchronizes the current stream, as CuPy's do.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import time
import types

import numpy as np
import pytest

import aclnn_gpu as acl
import aclnn_gpu.functional as Fn
from aclnn_gpu import runtime
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.reference.kl_div import kl_div
from support import DEVICE_KINDS, use_device

PRODUCER_DELAY_S = 0.3   # how long the slow producer keeps its stream busy before it writes


# ------------------------------------------------------------------------------ CuPy arrays over fakecupy
class ndarray:
    """The part of cupy.ndarray functional's GPU path reads (C-contiguous arrays only)."""

    __module__ = "cupy._core.core"   # functional tells array kinds by their top-level module

    def __init__(self, shape, dtype, memory=None):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.itemsize
        strides, step = [], self.itemsize
        for n in reversed(self.shape):
            strides.append(step)
            step *= max(n, 1)
        self.strides = tuple(reversed(strides))
        self.data = memory if memory is not None else fakecupy.cuda.alloc(max(self.nbytes, 1))
        self.device = types.SimpleNamespace(id=fakecupy.cuda.runtime.getDevice())

    def _host(self) -> np.ndarray:
        raw = (ctypes.c_uint8 * max(self.nbytes, 1)).from_address(self.data.ptr)
        return np.frombuffer(raw, np.uint8)[:self.nbytes].view(self.dtype).reshape(self.shape)

    def get(self) -> np.ndarray:
        """A host copy, after the current stream's work (CuPy: a copy on the current stream, synchronized)."""
        fakecupy.cuda.get_current_stream().synchronize()
        return self._host().copy()

    def copy(self) -> "ndarray":
        out = ndarray(self.shape, self.dtype)
        fakecupy.cuda.runtime.memcpyAsync(out.data.ptr, self.data.ptr, self.nbytes, 4,
                                          fakecupy.cuda.get_current_stream().ptr)
        return out

    def view(self, dtype) -> "ndarray":
        return ndarray(self.shape, dtype, self.data)

    def reshape(self, shape) -> "ndarray":
        return ndarray(shape, self.dtype, self.data)


class FakeCupyArrays(types.ModuleType):
    """`import cupy` for functional's GPU path on the emulated device."""

    uint16 = np.uint16

    def __init__(self):
        super().__init__("cupy")
        self.cuda = fakecupy.cuda
        self.ndarray = ndarray

    @staticmethod
    def empty(shape, dtype) -> ndarray:
        return ndarray(shape, dtype)

    @staticmethod
    def asarray(host) -> ndarray:
        """A copy of host data queued on the current stream (pageable: staged at the call, as CUDA does)."""
        if isinstance(host, ndarray):
            return host
        staged = np.ascontiguousarray(host).copy()
        out = ndarray(staged.shape, staged.dtype)
        fakecupy.cuda.runtime.memcpyAsync(out.data.ptr, staged.ctypes.data, staged.nbytes, 4,
                                          fakecupy.cuda.get_current_stream().ptr)
        fakecupy.cuda.get_current_stream().submit(lambda: staged)   # kept until the copy ran
        return out

    @staticmethod
    def ascontiguousarray(array) -> ndarray:
        return array


needs_emulated = pytest.mark.skipif("emulated" not in DEVICE_KINDS,
                                    reason="an emulated-device test: ACLNN_GPU_TEST_DEVICES does not name emulated")


@pytest.fixture
def emulated_gpu_arrays(monkeypatch):
    """The emulated device taking functional's GPU path: `import cupy` is FakeCupyArrays, and the
    device answers functional's "is this the cuda device" as the cuda device does."""
    if "emulated" not in DEVICE_KINDS:
        pytest.skip("an emulated-device test: ACLNN_GPU_TEST_DEVICES does not name emulated")
    use_device("emulated")
    device = runtime.get_device()
    monkeypatch.setitem(sys.modules, "cupy", FakeCupyArrays())
    monkeypatch.setattr(device, "kind", "cuda")
    yield device
    monkeypatch.undo()
    runtime.release_devices()


def _slow_write(stream, array: ndarray, values: np.ndarray) -> None:
    """Queue on `stream`: keep it busy for PRODUCER_DELAY_S, then write `values` into `array` (a
    producer kernel that runs late)."""
    source = np.ascontiguousarray(values, array.dtype).copy()

    def produce():
        time.sleep(PRODUCER_DELAY_S)
        ctypes.memmove(array.data.ptr, source.ctypes.data, source.nbytes)
    stream.submit(produce)


def test_functional_runs_after_a_slow_producer_on_cupys_current_stream(emulated_gpu_arrays, rng):
    cupy = sys.modules["cupy"]
    x = rng.standard_normal((4, 33)).astype(np.float32)
    t = rng.random((4, 33)).astype(np.float32)
    expected = kl_div(x, t, 0, False)
    np.testing.assert_allclose(Fn.kl_div(cupy.asarray(x), cupy.asarray(t), "none").get(), expected,
                               rtol=1e-5, atol=1e-6)   # warm: kernels compiled before the timed producer
    producer = fakecupy.cuda.Stream(non_blocking=True)
    with producer:
        gx, gt = cupy.empty(x.shape, x.dtype), cupy.asarray(t)
        _slow_write(producer, gx, x)
        result = Fn.kl_div(gx, gt, "none")
        # handed back on the producer's (current) stream: a host read there sees the kernels' output
        got = result.get()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_functional_hands_its_results_back_ordered_on_cupys_current_stream(emulated_gpu_arrays, rng):
    """Work the caller queues on its stream after the call reads the results: the library's stream
    is recorded, and the caller's stream waits for that event (no host wait needed in between)."""
    device = emulated_gpu_arrays
    cupy = sys.modules["cupy"]
    x = rng.standard_normal((3, 17)).astype(np.float32)
    t = rng.random((3, 17)).astype(np.float32)
    Fn.kl_div(cupy.asarray(x), cupy.asarray(t), "none")   # warm
    waited: list = []
    original = device.lead_current_stream
    device.lead_current_stream = lambda impl: (waited.append(impl), original(impl))[1]
    try:
        consumer = fakecupy.cuda.Stream(non_blocking=True)
        with consumer:
            Fn.kl_div(cupy.asarray(x), cupy.asarray(t), "none")
    finally:
        del device.lead_current_stream
    assert waited == [device.default_stream]


@pytest.mark.skipif("cuda" not in DEVICE_KINDS, reason="needs a GPU: ACLNN_GPU_TEST_DEVICES names cuda")
def test_functional_after_a_slow_producer_on_a_gpu(rng):
    """The same on a GPU: a spinning kernel on a non-blocking CuPy stream writes the input late."""
    import cupy
    use_device("cuda")
    spin_then_copy = cupy.RawKernel(r'''
    extern "C" __global__ void spin_then_copy(const float* src, float* dst, long long n, long long cycles) {
        long long start = clock64();
        while (clock64() - start < cycles) { }
        for (long long i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }''', "spin_then_copy")
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    t = rng.random((64, 1000)).astype(np.float32)
    expected = kl_div(x, t, 0, False)
    src, gt = cupy.asarray(x), cupy.asarray(t)
    Fn.kl_div(src, gt, "none")   # warm
    cupy.cuda.runtime.deviceSynchronize()
    producer = cupy.cuda.Stream(non_blocking=True)
    with producer:
        gx = cupy.full(x.shape, np.nan, np.float32)
        spin_then_copy((1,), (256,), (src, gx, np.int64(x.size), np.int64(200_000_000)))   # ~0.1 s
        result = Fn.kl_div(gx, gt, "none")
        got = result.get()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    runtime.release_devices()


# ------------------------------------------------------------------------------ legacy stream in an ACL capture
RELAXED = 2   # ACL_MODEL_RI_CAPTURE_MODE_RELAXED


def _ok(result):
    status, *rest = result if isinstance(result, tuple) else (result,)
    assert status == 0, acl.aclGetRecentErrMsg()
    return rest[0] if len(rest) == 1 else rest


def test_functional_on_the_legacy_stream_during_an_acl_capture_is_refused(emulated_gpu_arrays, rng):
    """The call's copies would run on the legacy stream, which a capture on a (blocking) library
    stream forbids: refused with 107031 before any of them, and the capture stays valid; on a
    non-blocking CuPy stream the same call runs during the capture."""
    cupy = sys.modules["cupy"]
    x = rng.standard_normal((2, 9)).astype(np.float32)
    t = rng.random((2, 9)).astype(np.float32)
    gx, gt = cupy.asarray(x), cupy.asarray(t)
    Fn.kl_div(gx, gt, "none")   # warm
    stream = _ok(acl.aclrtCreateStream())
    _ok(acl.aclmdlRICaptureBegin(stream, RELAXED))
    try:
        with pytest.raises(acl.AclnnError) as refused:
            Fn.kl_div(x, t, "none")   # host arrays: copied to the GPU on CuPy's current (legacy) stream
        assert refused.value.status == acl.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT
        assert "kl_div: an ACL capture (aclmdlRICaptureBegin) is in progress on device 0" in str(refused.value)
        with fakecupy.cuda.Stream(non_blocking=True):
            got = Fn.kl_div(cupy.asarray(x), gt, "none").get()
        np.testing.assert_allclose(got, kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
    finally:
        model = _ok(acl.aclmdlRICaptureEnd(stream))   # not invalidated
    _ok(acl.aclmdlRIDestroy(model))
    _ok(acl.aclrtDestroyStream(stream))


# ------------------------------------------------------------------------------ a global-mode capture elsewhere
H2D, D2H = 1, 2   # aclrtMemcpyKind


def _operators_while_another_thread_captures(begin, end, calls) -> None:
    """`begin()` on a fresh thread, `calls()` here while that capture is in progress, then `end()`
    there; `end`'s exception (an invalidated capture) is raised here."""
    started, finish, failure = threading.Event(), threading.Event(), []

    def capturer():
        begin()
        started.set()
        finish.wait(60)
        try:
            end()
        except BaseException as e:  # noqa: BLE001 - reported on the test's thread
            failure.append(e)
    thread = threading.Thread(target=capturer)
    thread.start()
    try:
        assert started.wait(60)
        calls()
    finally:
        finish.set()
        thread.join(60)
    assert not thread.is_alive()
    if failure:
        raise failure[0]


def _unsafe_call_mix(rng) -> None:
    """Operator calls whose waits and allocations are CUDA's potentially unsafe calls: the upload
    ring wrapping (its slot's event waited for), large uploads (staging buffers queried and
    allocated), a workspace freed (the device's waits), aclrtMalloc, aclrtMemcpy, aclrtMemset, aclrtFree."""
    x = rng.standard_normal((3, 40)).astype(np.float32)
    t = rng.random((3, 40)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(Fn.kl_div(x, t, "none"), kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
    ptr = _ok(acl.aclrtMalloc(64, 0))
    data = np.arange(64, dtype=np.uint8)
    _ok(acl.aclrtMemcpy(ptr, 64, data, 64, H2D))
    _ok(acl.aclrtMemset(ptr, 64, 7, 16))
    seen = bytearray(64)
    _ok(acl.aclrtMemcpy(seen, 64, ptr, 64, D2H))
    assert bytes(seen) == bytes([7]) * 16 + data[16:].tobytes()
    _ok(acl.aclrtFree(ptr))


@needs_emulated
@pytest.mark.parametrize("uploads", ["ring", "large"])
def test_operators_leave_a_global_mode_capture_on_another_thread_valid(monkeypatch, rng, uploads):
    """A capture in CUDA's global mode (PyTorch's torch.cuda.graph default) on another thread, on a
    non-blocking stream (as PyTorch's capture streams are): the library's unsafe calls, made in
    thread-local mode, leave it valid (fakecupy's capture-mode rule invalidates it otherwise)."""
    from aclnn_gpu.device import uploads as uploads_module
    use_device("emulated")
    device = runtime.get_device()
    if uploads == "ring":
        monkeypatch.setattr(device.uploads, "slots", 1)   # every upload waits for the slot's last copy
    else:
        monkeypatch.setattr(uploads_module, "UPLOAD_SLOT_BYTES", 0)   # every upload is a large one
    _unsafe_call_mix(rng)   # warm: kernels compiled, pools grown
    stream = fakecupy.cuda.Stream(non_blocking=True)
    graph: list = []
    _operators_while_another_thread_captures(
        lambda: stream.begin_capture(fakecupy.cuda.runtime.streamCaptureModeGlobal),
        lambda: graph.append(stream.end_capture()),
        lambda: _unsafe_call_mix(rng))
    assert len(graph) == 1   # the capture ended with a graph: not invalidated
    runtime.release_devices()


@pytest.mark.skipif("cuda" not in DEVICE_KINDS, reason="needs a GPU: ACLNN_GPU_TEST_DEVICES names cuda")
def test_operators_leave_a_torch_graph_capture_on_another_thread_valid_on_a_gpu(rng):
    """torch.cuda.graph's default global mode, on another thread, while this one calls operators."""
    import torch
    use_device("cuda")
    _unsafe_call_mix(rng)   # warm
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    static = torch.ones(1024, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    out: list = []

    def begin():
        torch.cuda.set_device(0)
        with torch.cuda.stream(side):
            graph.capture_begin()
            out.append(static * 3)

    def end():
        with torch.cuda.stream(side):
            graph.capture_end()
    _operators_while_another_thread_captures(begin, end, lambda: _unsafe_call_mix(rng))
    static.fill_(2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[0], torch.full_like(static, 6))
    runtime.release_devices()


@pytest.mark.skipif("cuda" not in DEVICE_KINDS, reason="needs a GPU: ACLNN_GPU_TEST_DEVICES names cuda")
def test_an_acl_capture_while_pytorch_works_on_its_default_stream_on_a_gpu(rng):
    """PyTorch's default stream is the legacy stream: its work while an ACL capture runs (on a blocking
    library stream) is CUDA's implicit dependency, refused to PyTorch and invalidating the capture,
    which aclmdlRICaptureEnd reports (507903); the device works on. On a PyTorch side stream the same
    work leaves the capture valid."""
    import torch
    use_device("cuda")
    x = torch.ones(256, device="cuda")
    torch.cuda.synchronize()   # x is ready for any stream
    stream = _ok(acl.aclrtCreateStream())
    _ok(acl.aclmdlRICaptureBegin(stream, RELAXED))
    with torch.cuda.stream(torch.cuda.Stream()):
        y = x * 2   # a non-blocking stream: no dependency on the capture
    model = _ok(acl.aclmdlRICaptureEnd(stream))
    _ok(acl.aclmdlRIDestroy(model))
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full_like(x, 2))
    _ok(acl.aclmdlRICaptureBegin(stream, RELAXED))
    with pytest.raises(RuntimeError):
        x * 2   # on the legacy stream: cudaErrorStreamCaptureImplicit
    status, model = acl.aclmdlRICaptureEnd(stream)
    assert status == acl.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED and model is None
    t = rng.random((3, 40)).astype(np.float32)
    np.testing.assert_allclose(Fn.kl_div(t, t, "sum"), kl_div(t, t, 2, False), rtol=1e-4)   # the device works on
    _ok(acl.aclrtDestroyStream(stream))
    runtime.release_devices()
