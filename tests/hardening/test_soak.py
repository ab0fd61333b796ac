"""Soak: 8 host threads, each with its own two streams, an event and its own repeatable executor,
calling mixed operators and shapes for ACLNN_GPU_SOAK_S seconds (default 60) on cpu and on
emulated; every result is checked against the reference (aclnn_gpu.reference, float64 NumPy), and
after a warm-up round nothing may grow: RSS (within 20 MB), the thread count, the allocation
registry, live tensors and executors (docs/HARDENING.md, "Soak"). A watchdog fails the test
instead of hanging. The duration decides only how long the threads run, never a pass or a fail.
"""
from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

import aclnn_gpu as acl
import aclnn_gpu.functional as Fn
from aclnn_gpu.executor import aclOpExecutor
from aclnn_gpu.reference.kl_div import kl_div
from aclnn_gpu.reference.scaled_masked_softmax import scaled_masked_softmax
from aclnn_gpu.meta.tensor import aclTensor
from support import use_device

from test_memory import rss_bytes

THREADS = 8
SECONDS = float(os.environ.get("ACLNN_GPU_SOAK_S", "60"))
WARMUP_SECONDS = max(1.0, SECONDS / 10)
RSS_TOLERANCE = 20 << 20
H2D, D2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST


def _ok(result):
    code = result[0] if isinstance(result, tuple) else result
    assert code == 0, acl.aclGetRecentErrMsg()
    return result


class _Repeatable:
    """One thread's repeatable aclnnKlDiv executor over its own device tensors, run again with new
    input values at each use (the two-phase API's reuse)."""

    def __init__(self, shape):
        self.shape, n = shape, int(np.prod(shape))
        self.ptrs = [_ok(acl.aclrtMalloc(4 * n, 0))[1] for _ in range(3)]
        self.tensors = [acl.aclCreateTensor(list(shape), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, list(shape), p)
                        for p in self.ptrs]
        ret, size, self.executor = acl.aclnnKlDivGetWorkspaceSize(self.tensors[0], self.tensors[1], 0, False,
                                                                   self.tensors[2])
        assert ret == 0 and size == 0, acl.aclGetRecentErrMsg()
        _ok(acl.aclSetAclOpExecutorRepeatable(self.executor))

    def run(self, x, t, stream):
        _ok(acl.aclrtMemcpyAsync(self.ptrs[0], x.nbytes, x, x.nbytes, H2D, stream))
        _ok(acl.aclrtMemcpyAsync(self.ptrs[1], t.nbytes, t, t.nbytes, H2D, stream))
        _ok(acl.aclnnKlDiv(None, 0, self.executor, stream))
        _ok(acl.aclrtSynchronizeStream(stream))
        out = np.empty(self.shape, np.float32)
        _ok(acl.aclrtMemcpy(out, out.nbytes, self.ptrs[2], out.nbytes, D2H))
        return out

    def close(self):
        _ok(acl.aclDestroyAclOpExecutor(self.executor))
        for t in self.tensors:
            _ok(acl.aclDestroyTensor(t))
        for p in self.ptrs:
            _ok(acl.aclrtFree(p))


def _worker(tid, until, errors, counter):
    rng = np.random.default_rng(tid)
    try:
        _ok(acl.aclrtSetDevice(0))
        s1, s2 = _ok(acl.aclrtCreateStream())[1], _ok(acl.aclrtCreateStream())[1]
        ev = _ok(acl.aclrtCreateEvent())[1]
        shape = (2 + tid % 3, 5)
        mine = _Repeatable(shape)
        i = 0
        while time.monotonic() < until:
            kind = i % 4
            if kind == 0:
                rows = 1 + (i // 4) % 5
                x = rng.standard_normal((rows, 7)).astype(np.float32)
                t = rng.random((rows, 7)).astype(np.float32)
                got = Fn.kl_div(x, t, "none", stream=s1)
                np.testing.assert_allclose(got, kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
            elif kind == 1:
                width = (8, 16, 32)[(i // 4) % 3]
                x = rng.standard_normal((1, 2, 3, width)).astype(np.float32)
                m = rng.random((1, 1, 3, width)) < 0.3
                got = Fn.scaled_masked_softmax(x, m, 0.5, stream=s2)
                np.testing.assert_allclose(got, scaled_masked_softmax(x, m, 0.5), rtol=1e-5, atol=1e-6)
            elif kind == 2:
                x = rng.standard_normal(shape).astype(np.float32)
                t = rng.random(shape).astype(np.float32)
                np.testing.assert_allclose(mine.run(x, t, s1), kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
            else:   # an event between the thread's streams
                data = rng.standard_normal(64 + i % 64).astype(np.float32)
                a, b = _ok(acl.aclrtMalloc(data.nbytes, 0))[1], _ok(acl.aclrtMalloc(data.nbytes, 0))[1]
                _ok(acl.aclrtMemcpyAsync(a, data.nbytes, data, data.nbytes, H2D, s1))
                _ok(acl.aclrtRecordEvent(ev, s1))
                _ok(acl.aclrtStreamWaitEvent(s2, ev))
                _ok(acl.aclrtMemcpyAsync(b, data.nbytes, a, data.nbytes, D2D, s2))
                _ok(acl.aclrtSynchronizeStream(s2))
                out = np.empty_like(data)
                _ok(acl.aclrtMemcpy(out, out.nbytes, b, out.nbytes, D2H))
                np.testing.assert_array_equal(out, data)
                _ok(acl.aclrtFree(a))
                _ok(acl.aclrtFree(b))
            i += 1
            counter[tid] += 1
        mine.close()
        _ok(acl.aclrtDestroyEvent(ev))
        _ok(acl.aclrtDestroyStream(s1))
        _ok(acl.aclrtDestroyStream(s2))
    except BaseException as e:  # noqa: BLE001 - reported to the main thread
        errors.append(f"thread {tid}: {type(e).__name__}: {e}")


def _round(seconds: float) -> int:
    errors: list[str] = []
    counter = [0] * THREADS
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_worker, args=(t, until, errors, counter), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:   # the watchdog: a hang fails the test instead of blocking CI
        t.join(seconds + 300)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"deadlock: {hung} still running 300 s after the soak's end"
    assert not errors, errors[:3]
    return sum(counter)


def _census() -> tuple[int, int, int, int]:
    gc.collect()
    objects = gc.get_objects()
    return (threading.active_count(), len(acl.runtime.get_device().registry),
            sum(1 for o in objects if isinstance(o, aclTensor)), sum(1 for o in objects if isinstance(o, aclOpExecutor)))


@pytest.mark.parametrize("kind", ["cpu", "emulated"])
def test_soak(kind, figures):
    use_device(kind)
    warm = _round(WARMUP_SECONDS)
    before, rss_before = _census(), rss_bytes()
    calls = _round(SECONDS)
    after, rss_after = _census(), rss_bytes()
    names = ("threads", "registry", "live tensors", "live executors")
    figures(f"soak[{kind}]: {THREADS} threads, {SECONDS:g} s, {calls} checked calls (warm-up {warm}); "
            + ", ".join(f"{n} {b} -> {a}" for n, b, a in zip(names, before, after))
            + f", RSS {(rss_after - rss_before) / 2**20:+.1f} MB")
    for name, b, a in zip(names, before, after):
        assert a <= b, f"{name} grew over the soak: {b} -> {a}"
    assert rss_after - rss_before < RSS_TOLERANCE
    assert calls > 0
    use_device("cpu")
