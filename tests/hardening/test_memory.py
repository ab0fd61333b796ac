"""Memory growth: create/run/destroy cycles through the public C-style API (aclrtMalloc,
aclrtMemcpy, aclCreateTensor, GetWorkspaceSize, aclrtMalloc of the workspace, execute, synchronize,
read back, aclDestroyTensor, aclrtFree), mixing operators; after a warm-up, nothing may grow: the
allocation registry (`get_device().registry`), the live aclTensor objects, the emulated device's
module/kernel caches (CudaDevice._modules/_kernels) and fakecupy's stream table, the process RSS
(tolerance 20 MB) and the thread count. Stream create/destroy: 500 streams, no worker thread left.

ACLNN_GPU_MEMORY_CYCLES=N sets the cpu cycles (default 10,000; emulated: N/20, at least 100).
"""
from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.runtime import get_device
from aclnn_gpu.meta.tensor import aclTensor
from aclnn_gpu.reference.kl_div import kl_div
from aclnn_gpu.reference.scaled_masked_softmax import scaled_masked_softmax
from support import use_device


def _rss_bytes():
    """tests/hardening/conftest.py's rss_bytes (loaded by path: `conftest` is ambiguous on sys.path)."""
    import importlib.util
    import pathlib
    spec = importlib.util.spec_from_file_location("_hardening_conftest", pathlib.Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.rss_bytes


rss_bytes = _rss_bytes()

CYCLES = int(os.environ.get("ACLNN_GPU_MEMORY_CYCLES", "10000"))
EMULATED_CYCLES = max(100, CYCLES // 20)
RSS_TOLERANCE = 20 << 20
H2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST
F32 = np.float32


def _ok(status, what):
    assert status == 0, f"{what}: {status}: {acl.aclGetRecentErrMsg()}"


def _tensor(array, owned):
    array = np.ascontiguousarray(array)
    status, ptr = acl.aclrtMalloc(max(array.nbytes, 1), 0)
    _ok(status, "aclrtMalloc")
    owned.append(ptr)
    if array.nbytes:
        _ok(acl.aclrtMemcpy(ptr, array.nbytes, array, array.nbytes, H2D), "aclrtMemcpy")
    t = acl.aclCreateTensor(list(array.shape), int(acl.base.dtypes.from_numpy(array.dtype)), None, 0,
                            int(acl.ACL_FORMAT_ND), list(array.shape), ptr)
    assert t is not None, acl.aclGetRecentErrMsg()
    return t


def _read(t, shape):
    host = np.empty(shape, F32)
    _ok(acl.aclrtMemcpy(host, host.nbytes, t.data, host.nbytes, D2H), "aclrtMemcpy D2H")
    return host


def cycle(i, stream, rng):
    """One create/run/destroy cycle of one of three operators; returns the checked result."""
    owned, tensors = [], []
    try:
        op = i % 3
        if op == 0:
            x, t = rng.standard_normal((3, 4)).astype(F32), rng.random((3, 4)).astype(F32)
            args = [_tensor(x, owned), _tensor(t, owned), 0, False, _tensor(np.full((3, 4), np.nan, F32), owned)]
            gws, exe, out, shape, want = acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, 4, (3, 4), kl_div(x, t, 0, False)
        elif op == 1:
            x = rng.standard_normal((1, 2, 3, 8)).astype(F32)
            m = rng.random((1, 1, 3, 8)) < 0.3
            args = [_tensor(x, owned), _tensor(m, owned), 0.5, False, _tensor(np.full(x.shape, np.nan, F32), owned)]
            gws, exe, out, shape = acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax, 4, x.shape
            want = scaled_masked_softmax(x, m, 0.5)
        else:
            x = rng.standard_normal((4, 5)).astype(F32)
            target = rng.integers(0, 5, 4).astype(np.int64)
            args = [_tensor(x, owned), _tensor(target, owned), None, "none", -100, 0.0, 0.0, False,
                    _tensor(np.full(4, np.nan, F32), owned), _tensor(np.full((4, 5), np.nan, F32), owned), None, None]
            gws, exe, out, shape = acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, 8, (4,)
            lp = x - x.max(1, keepdims=True)
            lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
            want = -lp[np.arange(4), target]
        tensors = [a for a in args if isinstance(a, aclTensor)]
        status, size, executor = gws(*args)
        _ok(status, "GetWorkspaceSize")
        status, workspace = acl.aclrtMalloc(max(size, 1), 0)  # always: the workspace path is exercised
        _ok(status, "aclrtMalloc workspace")
        owned.append(workspace)
        _ok(exe(workspace, size, executor, stream), "execute")
        _ok(acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
        got = _read(args[out], shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    finally:
        for t in tensors:
            _ok(acl.aclDestroyTensor(t), "aclDestroyTensor")
        for ptr in owned:
            _ok(acl.aclrtFree(ptr), "aclrtFree")


def live_tensors():
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is aclTensor)


def state():
    device = get_device()
    gc.collect()
    s = {"registry": len(device.registry), "tensors": live_tensors(), "threads": threading.active_count(),
         "rss": rss_bytes()}
    if device.kind == "emulated":
        s.update(modules=len(device._modules), kernels=len(device._kernels), fake_streams=len(fakecupy.streams._streams))
    return s


def run_cycles(kind, cycles, figures):
    use_device(kind)
    rng = np.random.default_rng(0)
    _, stream = acl.aclrtCreateStream()
    try:
        for i in range(max(30, cycles // 20)):  # warm-up: kernels built, caches and pools filled
            cycle(i, stream, rng)
        before = state()
        start = time.perf_counter()
        for i in range(cycles):
            cycle(i, stream, rng)
        seconds = time.perf_counter() - start
        after = state()
    finally:
        acl.aclrtDestroyStream(stream)
    growth = after["rss"] - before["rss"]
    extra = "".join(f", {k} {before[k]} -> {after[k]}" for k in ("modules", "kernels", "fake_streams") if k in before)
    figures(f"memory {kind}: {cycles} create/run/destroy cycles (kl_div, scaled_masked_softmax, cross_entropy) "
            f"in {seconds:.1f} s; RSS {before['rss'] / 2**20:.1f} -> {after['rss'] / 2**20:.1f} MiB "
            f"({growth / 2**20:+.2f} MiB); registry {before['registry']} -> {after['registry']}; live aclTensor "
            f"{before['tensors']} -> {after['tensors']}; threads {before['threads']} -> {after['threads']}{extra}")
    for key in ("registry", "tensors", "threads", "modules", "kernels", "fake_streams"):
        if key in before:
            assert after[key] <= before[key], f"{kind}: {key} grew {before[key]} -> {after[key]}"
    if not os.environ.get("ACLNN_GPU_EMU_SANITIZE"):  # ASan's quarantine keeps freed memory resident
        assert growth < RSS_TOLERANCE, f"{kind}: RSS grew by {growth / 2**20:.1f} MiB over {cycles} cycles"


def test_cycles_cpu(figures):
    run_cycles("cpu", CYCLES, figures)


@pytest.mark.kernels
def test_cycles_emulated(figures):
    run_cycles("emulated", EMULATED_CYCLES, figures)


def _threads_settle(limit, timeout=5.0):
    deadline = time.monotonic() + timeout
    while threading.active_count() > limit and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return threading.active_count()


@pytest.mark.parametrize("kind", ["cpu", "emulated"])
def test_streams_create_destroy(kind, figures):
    """500 streams created, used (a memset + synchronize), destroyed and dropped: no worker thread
    and no stream-table entry may remain."""
    use_device(kind)
    gc.collect()
    threads0 = _threads_settle(0, 0.0)
    table0 = len(fakecupy.streams._streams)
    status, ptr = acl.aclrtMalloc(64, 0)
    _ok(status, "aclrtMalloc")
    peak = threads0
    start = time.perf_counter()
    for i in range(500):
        status, stream = acl.aclrtCreateStream()
        _ok(status, "aclrtCreateStream")
        _ok(acl.aclrtMemsetAsync(ptr, 64, i & 0xFF, 64, stream), "aclrtMemsetAsync")
        _ok(acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
        peak = max(peak, threading.active_count())
        _ok(acl.aclrtDestroyStream(stream), "aclrtDestroyStream")
        del stream
    seconds = time.perf_counter() - start
    _ok(acl.aclrtFree(ptr), "aclrtFree")
    threads1 = _threads_settle(threads0)
    table1 = len(fakecupy.streams._streams)
    figures(f"streams {kind}: 500 create/use/destroy in {seconds:.1f} s; threads {threads0} -> {threads1} "
            f"(peak {peak}); fakecupy stream table {table0} -> {table1}")
    assert threads1 <= threads0, f"{kind}: {threads1 - threads0} stream worker threads leaked"
    assert table1 <= table0, f"{kind}: fakecupy stream table grew {table0} -> {table1}"


BUG_9 = ("BUG-9: aclrtDestroyStream does not release an emulated (or cuda) stream: device/cuda.py:48 "
         "CudaStream.close() only synchronizes; the fakecupy Stream's HostStream worker thread stops in "
         "Stream.__del__ (emulator/fakecupy/streams.py), i.e. only when the caller drops the aclrtStream handle "
         "(runtime/:166 keeps .impl after destroy). Keeping 100 destroyed handles keeps 100 threads.")


@pytest.mark.parametrize("kind", ["cpu", "emulated"])
def test_destroyed_stream_handles_kept(kind, figures):
    """A caller that destroys streams but keeps the (dead) handles, e.g. in a list: aclrtDestroyStream
    alone must release the worker thread."""
    use_device(kind)
    gc.collect()
    threads0 = _threads_settle(0, 0.0)
    kept = []
    for _ in range(100):
        status, stream = acl.aclrtCreateStream()
        _ok(status, "aclrtCreateStream")
        _ok(acl.aclrtDestroyStream(stream), "aclrtDestroyStream")
        kept.append(stream)
    threads1 = _threads_settle(threads0)
    figures(f"streams {kind}: 100 destroyed, handles kept: threads {threads0} -> {threads1}")
    del kept
    assert threads1 <= threads0, f"{kind}: {threads1 - threads0} worker threads outlive aclrtDestroyStream"
