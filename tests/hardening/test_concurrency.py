"""Concurrency: host threads, each with its own streams, issuing mixed operator calls with
events between streams (record on one, wait on the other); every result checked; a watchdog fails
the test instead of hanging; afterwards the pointer registry is back to its starting size.
ACLNN_GPU_CONCURRENCY_CALLS=N sets the calls per thread (default: 300 cpu, 12 emulated)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import aclnn_gpu as acl
import aclnn_gpu.functional as Fn
from aclnn_gpu.reference.kl_div import kl_div
from aclnn_gpu.reference.scaled_masked_softmax import scaled_masked_softmax
from support import use_device

THREADS = 4
H2D, D2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST


def _worker(tid, calls, errors, counter):
    rng = np.random.default_rng(tid)
    try:
        _, s1 = acl.aclrtCreateStream()
        _, s2 = acl.aclrtCreateStream()
        _, ev = acl.aclrtCreateEvent()
        for i in range(calls):
            kind = i % 3
            if kind == 0:
                x = rng.standard_normal((3, 4)).astype(np.float32)
                t = rng.random((3, 4)).astype(np.float32)
                got = Fn.kl_div(x, t, "none", stream=s1)
                np.testing.assert_allclose(got, kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
            elif kind == 1:
                x = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
                m = rng.random((1, 1, 3, 8)) < 0.3
                got = Fn.scaled_masked_softmax(x, m, 0.5, stream=s2)
                np.testing.assert_allclose(got, scaled_masked_softmax(x, m, 0.5), rtol=1e-5, atol=1e-6)
            else:  # event between streams: write on s1, record, s2 waits, copies, host reads
                data = rng.standard_normal(256).astype(np.float32)
                _, a = acl.aclrtMalloc(data.nbytes, 0)
                _, b = acl.aclrtMalloc(data.nbytes, 0)
                assert acl.aclrtMemcpyAsync(a, data.nbytes, data, data.nbytes, H2D, s1) == 0
                assert acl.aclrtRecordEvent(ev, s1) == 0
                assert acl.aclrtStreamWaitEvent(s2, ev) == 0
                assert acl.aclrtMemcpyAsync(b, data.nbytes, a, data.nbytes, D2D, s2) == 0
                assert acl.aclrtSynchronizeStream(s2) == 0
                out = np.empty_like(data)
                assert acl.aclrtMemcpy(out, out.nbytes, b, out.nbytes, D2H) == 0
                np.testing.assert_array_equal(out, data)
                assert acl.aclrtSynchronizeStream(s1) == 0
                assert acl.aclrtFree(a) == 0 and acl.aclrtFree(b) == 0
            counter[tid] += 1
        assert acl.aclrtDestroyEvent(ev) == 0
        assert acl.aclrtDestroyStream(s1) == 0 and acl.aclrtDestroyStream(s2) == 0
    except BaseException as e:  # noqa: BLE001 - reported to the main thread
        errors.append(f"thread {tid}: {type(e).__name__}: {e}")


def _hammer(kind, calls, timeout, figures):
    use_device(kind)
    registry = acl.runtime.get_device().registry
    Fn.kl_div(np.zeros(2, np.float32), np.ones(2, np.float32))  # warm-up: lazy init, kernels built
    start_size = len(registry)
    errors, counter = [], [0] * THREADS
    threads = [threading.Thread(target=_worker, args=(t, calls, errors, counter), daemon=True) for t in range(THREADS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    deadline = t0 + timeout
    for t in threads:  # the watchdog: a hang fails the test instead of blocking CI
        t.join(max(0.0, deadline - time.perf_counter()))
    hung = [t.name for t in threads if t.is_alive()]
    dt = time.perf_counter() - t0
    figures(f"concurrency[{kind}]: {THREADS} threads x {calls} calls = {sum(counter)} checked calls in {dt:.1f} s; "
            f"registry {start_size} -> {len(registry)}; errors {len(errors)}; hung {len(hung)}")
    if hung:
        import sys
        import traceback
        frames = sys._current_frames()
        for t in threads:
            if t.is_alive():
                print("".join(traceback.format_stack(frames[t.ident])[-6:]))
    assert not hung, f"deadlock: {hung} still running after {timeout} s"
    assert not errors, errors[:3]
    assert sum(counter) == THREADS * calls
    assert acl.aclrtSynchronizeDevice() == 0
    assert len(registry) == start_size, "allocations leaked or lost"
    use_device("cpu")


def test_threads_cpu(figures):
    _hammer("cpu", int(os.environ.get("ACLNN_GPU_CONCURRENCY_CALLS", 300)), 30, figures)


def test_threads_emulated(figures):
    _hammer("emulated", int(os.environ.get("ACLNN_GPU_CONCURRENCY_CALLS", 12)), 180, figures)


def test_threads_cuda(figures):
    from aclnn_gpu.device.cuda import cuda_available
    if not cuda_available():
        pytest.skip("no GPU (CuPy sees none)")
    _hammer("cuda", int(os.environ.get("ACLNN_GPU_CONCURRENCY_CALLS", 1000)), 300, figures)
