"""The functional layer's per-signature cache (aclnn_gpu/functional/cache.py) never gives another answer
than the uncached path: every operator, the same signature with new data, other strides, other
scalars, interleaved signatures, threads, a device reset, a fork() child, bad input after a cached
call, a failure already queued on the stream; results compared bit for bit with call_cache.disabled()."""
from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest
from support import use_device

import aclnn_gpu as acl
from aclnn_gpu.functional import cache as call_cache
from aclnn_gpu.functional.arrays import to_numpy
from aclnn_gpu import functional as F
from aclnn_gpu import runtime

f32 = np.float32
FORK_LIMIT = 120   # seconds for the forked child; a healthy one answers in well under 10


@pytest.fixture(autouse=True)
def cpu():
    use_device("cpu")
    call_cache.cache.clear()
    yield
    call_cache.cache.clear()


def _arrays(result):
    """A call's result(s) as a tuple of NumPy arrays (torch tensors viewed, never copied by value)."""
    results = result if isinstance(result, tuple) else (result,)
    return tuple(to_numpy(r) for r in results)


def _same(a, b):
    """Bit-identical results: same types, shapes, dtypes and bytes (NaN payloads included)."""
    a, b = _arrays(a), _arrays(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes(), (x, y)


def _uncached(call):
    with call_cache.disabled():
        return call()


def _outcome(call):
    """(result, None) or (None, (status, message)) of a call."""
    try:
        return call(), None
    except acl.AclnnError as e:
        return None, (e.status, str(e))


# ---------------------------------------------------------------------------- the ten operators
def _ctc_data(rng, T=6, N=2, C=4, L=2):
    import torch
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C)), dtype=torch.float32), -1).numpy()
    targets = rng.integers(1, C, (N, L)).astype(np.int64)
    il, tl = [T] * N, [L] * N
    with call_cache.disabled():
        nll, alpha = F.ctc_loss(lp, targets, il, tl)
    return lp, targets, il, tl, nll, alpha


def _calls(rng, dtype=f32):
    """name -> a call of each functional operator on tiny random data (drawn once: the call can be
    repeated on the same data)."""
    r = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    p = lambda *shape: rng.random(shape).astype(dtype)  # noqa: E731
    one = np.ones((), dtype)
    kl = r(4, 8), p(4, 8), r(4, 8), p(4, 8)
    conv = r(5, 2, 3), r(3, 3, 4), r(4), r(5, 2, 4)
    mask = rng.random((1, 1, 3, 6)) < 0.3
    sm = r(2, 2, 3, 6), r(2, 2, 3, 6), p(2, 2, 3, 6)
    logits, lp, weight, labels = r(4, 5), np.log(p(4, 5) + 0.1), p(5), rng.integers(0, 5, 4)
    lps, targets, il, tl, nll, alpha = _ctc_data(rng)
    return {
        "kl_div": lambda: F.kl_div(kl[0], kl[1], "batchmean"),
        "kl_div_backward": lambda: F.kl_div_backward(one, kl[2], kl[3], "sum", True),
        "conv_tbc": lambda: F.conv_tbc(conv[0], conv[1], conv[2], 1),
        "conv_tbc_backward": lambda: F.conv_tbc_backward(conv[3], *conv[:3], 1),
        "scaled_masked_softmax": lambda: F.scaled_masked_softmax(sm[0], mask, 0.5),
        "scaled_masked_softmax_backward": lambda: F.scaled_masked_softmax_backward(sm[1], sm[2], mask, 0.5),
        "cross_entropy_loss": lambda: F.cross_entropy_loss(logits, labels, weight, "mean", 1, 0.1),
        "cross_entropy_loss_grad": lambda: F.cross_entropy_loss_grad(one, lp, labels, None, "sum"),
        "ctc_loss": lambda: F.ctc_loss(lps, targets, il, tl),
        "ctc_loss_backward": lambda: F.ctc_loss_backward(np.ones(2, dtype), lps, targets, il, tl, nll, alpha),
    }


@pytest.mark.parametrize("name", list(_calls(np.random.default_rng(0))))
def test_every_operator_cached_equals_uncached(name):
    """Three calls of one signature on new data each: the first fills the cache, the next run the
    cached plan; each equals the uncached call on the same data, bit for bit."""
    for seed in range(3):
        call = _calls(np.random.default_rng(seed))[name]
        before = call_cache.cache.hits
        _same(call(), _uncached(call))
        if seed:
            assert call_cache.cache.hits > before, "a repeated signature was not served from the cache"
    assert len(call_cache.cache) >= 1


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x, t = torch.randn(3, 7, generator=g, requires_grad=True), torch.rand(3, 7, generator=g)
        got = F.kl_div(x, t, "none")
        assert isinstance(got, torch.Tensor)
        _same(got, _uncached(lambda: F.kl_div(x, t, "none")))
        bf = x.detach().to(torch.bfloat16)   # bfloat16 travels as a view: its own signature
        _same(F.kl_div_backward(torch.ones((), dtype=torch.bfloat16), bf, t.to(torch.bfloat16), "mean"),
              _uncached(lambda: F.kl_div_backward(torch.ones((), dtype=torch.bfloat16), bf, t.to(torch.bfloat16),
                                                  "mean")))


def test_strides_are_part_of_the_signature():
    """A strided view, a broadcast (stride 0) view, a negative-stride view and a transposed one, each
    after the contiguous array of the same shape: each its own entry, each equal to the uncached call."""
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 8)).astype(f32)
    t = rng.random((6, 4)).astype(f32)
    other = rng.standard_normal((4, 6)).astype(f32)
    views = [np.ascontiguousarray(base[:, ::2]), base[:, ::2], base[::-1, ::2], base[:, :4], other.T,
             np.broadcast_to(base[0, :4], (6, 4))]
    for _ in range(2):
        for x in views:
            _same(F.kl_div(x, t, "none"), _uncached(lambda: F.kl_div(x, t, "none")))
            _same(F.kl_div_backward(np.ones((), f32), x, t, "mean"),
                  _uncached(lambda: F.kl_div_backward(np.ones((), f32), x, t, "mean")))
            _same(F.kl_div(t, x, "sum"), _uncached(lambda: F.kl_div(t, x, "sum")))


def test_scalars_are_part_of_the_signature():
    """Reductions, scales and flags of other values, and of other types with equal values (1 and True,
    1 and 1.0, 0.0 and -0.0, a NumPy scalar): each gives what the uncached call gives, value or error."""
    rng = np.random.default_rng(2)
    x, t = rng.standard_normal((2, 2, 3, 5)).astype(f32), rng.random((4, 6)).astype(f32)
    mask = rng.random((1, 1, 3, 5)) < 0.3
    logits, labels = rng.standard_normal((4, 6)).astype(f32), rng.integers(0, 6, 4)
    calls = []
    for reduction in ("none", "mean", "sum", "batchmean", 0, 1, 2, 3, 3.0, np.int64(2), True):
        for log_target in (False, True, 0, 1, np.bool_(True)):
            calls.append(lambda r=reduction, lt=log_target: F.kl_div(np.log(t + 0.1), t, r, lt))
    for scale in (1.0, 1, -0.0, 0.0, 0.125, np.float32(0.125), float("nan"), float("inf"), True):
        calls.append(lambda s=scale: F.scaled_masked_softmax(x, mask, s))
    for smoothing in (0.0, -0.0, 0.1, 1, np.float64(0.1)):
        for ignore in (-100, 2, np.int32(2), 2.0):
            calls.append(lambda s=smoothing, i=ignore: F.cross_entropy_loss(logits, labels, None, "mean", i, s))
    for _ in range(2):   # the second round runs from the cache
        for call in calls:
            got, expected = _outcome(call), _outcome(lambda: _uncached(call))
            assert got[1] == expected[1]
            if expected[1] is None:
                _same(got[0], expected[0])


def test_interleaved_signatures_and_the_lru_bound(monkeypatch):
    monkeypatch.setattr(call_cache, "MAX_ENTRIES", 3)
    rng = np.random.default_rng(3)
    shapes = [(2, 3), (3, 3), (2, 4), (5, 1), (1, 7)]
    for i in range(20):
        shape = shapes[(i * 3) % len(shapes)]
        x, t = rng.standard_normal(shape).astype(f32), rng.random(shape).astype(f32)
        _same(F.kl_div(x, t, "sum"), _uncached(lambda: F.kl_div(x, t, "sum")))
        assert len(call_cache.cache) <= 3


def test_threads_share_the_cache():
    """Eight threads calling one signature (and a second) on their own data: every result equals the
    uncached one (an entry serves one call at a time; a thread that finds it taken builds its own)."""
    rng = np.random.default_rng(4)
    work = []
    for i in range(64):
        shape = (4, 8) if i % 2 else (3, 5)
        x, t = rng.standard_normal(shape).astype(f32), rng.random(shape).astype(f32)
        work.append((x, t, _uncached(lambda: F.kl_div_backward(np.ones((), f32), x, t, "batchmean"))))
    failures = []

    def run(part):
        try:
            for x, t, expected in part:
                for _ in range(5):
                    _same(F.kl_div_backward(np.ones((), f32), x, t, "batchmean"), expected)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=run, args=(work[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert not failures, failures[0]


def test_user_streams_and_bad_streams():
    rng = np.random.default_rng(5)
    x, t = rng.standard_normal((3, 4)).astype(f32), rng.random((3, 4)).astype(f32)
    status, stream = acl.aclrtCreateStream()
    assert status == 0
    for _ in range(2):
        _same(F.kl_div(x, t, "sum", stream=stream), _uncached(lambda: F.kl_div(x, t, "sum", stream=stream)))
    assert acl.aclrtDestroyStream(stream) == 0
    got, expected = _outcome(lambda: F.kl_div(x, t, "sum", stream=stream)), \
        _outcome(lambda: _uncached(lambda: F.kl_div(x, t, "sum", stream=stream)))
    assert got == expected and got[1] is not None
    assert _outcome(lambda: F.kl_div(x, t, "sum", stream="s")) == \
        _outcome(lambda: _uncached(lambda: F.kl_div(x, t, "sum", stream="s")))


def test_a_failure_queued_on_the_stream_is_reported_as_uncached():
    rng = np.random.default_rng(6)
    x, t = rng.standard_normal((3, 4)).astype(f32), rng.random((3, 4)).astype(f32)
    F.kl_div(x, t, "sum")   # cached from here on
    outcomes = []
    for cached in (True, False):
        runtime.get_device().default_stream.worker.submit(lambda: 1 / 0)
        with (call_cache.disabled() if not cached else _nothing()):
            outcomes.append(_outcome(lambda: F.kl_div(x, t, "sum")))
    assert outcomes[0] == outcomes[1] and outcomes[0][1][0] == 507000, outcomes
    _same(F.kl_div(x, t, "sum"), _uncached(lambda: F.kl_div(x, t, "sum")))   # the stream works again


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_bad_input_after_a_cached_signature_keeps_its_status_and_message():
    rng = np.random.default_rng(7)
    x, t = rng.standard_normal((3, 4)).astype(f32), rng.random((3, 4)).astype(f32)
    F.kl_div(x, t, "mean")
    F.kl_div(x, t, "mean")
    for bad in (lambda: F.kl_div(x, t, "avg"), lambda: F.kl_div(x, None, "mean"),
                lambda: F.kl_div(x.astype(np.int32), t, "mean"), lambda: F.kl_div(x, t[:, :3], "none"),
                lambda: F.conv_tbc(x[None], x[None], t[0], "1")):
        got, expected = _outcome(bad), _outcome(lambda: _uncached(bad))
        assert got == expected and got[1] is not None, (got, expected)
    with pytest.raises(TypeError):
        F.kl_div(x)


def test_arguments_sharing_memory_are_not_cached_but_still_right():
    rng = np.random.default_rng(8)
    x = rng.random((3, 4)).astype(f32)
    for _ in range(3):
        _same(F.kl_div(x, x, "sum"), _uncached(lambda: F.kl_div(x, x, "sum")))
        y = rng.random((6, 4)).astype(f32)   # two overlapping views of one buffer
        _same(F.kl_div(y[:4], y[2:], "none"), _uncached(lambda: F.kl_div(y[:4], y[2:], "none")))


def test_a_reset_device_leaves_nothing_behind():
    rng = np.random.default_rng(9)
    x, t = rng.standard_normal((3, 4)).astype(f32), rng.random((3, 4)).astype(f32)
    F.kl_div(x, t, "sum")
    old = runtime.get_device()
    assert acl.aclrtResetDevice(0) == 0
    assert acl.aclrtSetDevice(0) == 0
    assert runtime.get_device() is not old
    _same(F.kl_div(x, t, "sum"), _uncached(lambda: F.kl_div(x, t, "sum")))
    assert old not in call_cache.cache._devices, "a reset device's entries were kept"


def test_fork_child_starts_with_an_empty_cache():
    if not hasattr(os, "fork"):
        pytest.skip("fork() is POSIX only")
    rng = np.random.default_rng(10)
    x, t = rng.standard_normal((3, 4)).astype(f32), rng.random((3, 4)).astype(f32)
    expected = F.kl_div(x, t, "sum")
    F.kl_div(x, t, "sum")
    assert len(call_cache.cache) == 1
    fork = multiprocessing.get_context("fork")
    reader, writer = fork.Pipe(duplex=False)

    def child():
        try:
            empty = len(call_cache.cache) == 0
            got = [F.kl_div(x, t, "sum") for _ in range(3)]
            writer.send(("ok", empty, [g.tobytes() for g in got], len(call_cache.cache)))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            writer.send(("error", f"{type(e).__name__}: {e}"))

    process = fork.Process(target=child, daemon=True)
    process.start()
    writer.close()
    try:
        assert reader.poll(FORK_LIMIT), f"the forked child did not answer within {FORK_LIMIT} s"
        answer = reader.recv()
    finally:
        process.join(FORK_LIMIT)
        if process.is_alive():
            process.kill()
    assert answer[0] == "ok", answer
    _, empty, got, entries = answer
    assert empty and entries == 1
    assert all(g == expected.tobytes() for g in got)
    _same(F.kl_div(x, t, "sum"), expected)   # the parent's cache still serves


def test_a_plan_reading_outside_its_operands_is_refused():
    """HostViews translates only the operands' ranges: anything else is OutsideSlots, never memory."""
    entry = call_cache.Entry(None, [], [], [], [], [(4096, 4096 + 16), (8192, 8192 + 8)], 0, 0)
    views = call_cache.HostViews(runtime.get_device(), entry, [np.arange(16, dtype=np.uint8),
                                                                np.arange(8, dtype=np.uint8)])
    assert views.host_view(4096 + 4, 8).tolist() == list(range(4, 12))
    assert views.host_view(8192, 8).tolist() == list(range(8))
    for ptr, nbytes in ((4096 + 12, 8), (4000, 4), (8192 + 8, 1)):
        with pytest.raises(call_cache.OutsideSlots):
            views.host_view(ptr, nbytes)


def test_emulated_device_is_not_cached():
    """The kernel devices bake addresses into their frozen launches: their calls stay uncached."""
    use_device("emulated")
    rng = np.random.default_rng(11)
    x, t = rng.standard_normal((3, 4)).astype(f32), rng.random((3, 4)).astype(f32)
    for _ in range(2):
        _same(F.kl_div(x, t, "batchmean"), _uncached(lambda: F.kl_div(x, t, "batchmean")))
    assert len(call_cache.cache) == 0


# ---------------------------------------------------------------------------- review findings
def _device_floats(n):
    import ctypes
    ret, ptr = acl.aclrtMalloc(4 * n, 0)
    assert ret == 0
    return ptr, np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))


def test_a_cached_call_never_overlaps_work_another_thread_queues_on_its_stream():
    """A cached call runs on the calling thread as the stream's next task: memsets another thread
    queues on the same stream run before or after it, never while it reads (a torn input would give
    a result that is not uniform)."""
    n = 1 << 20
    ptr, x = _device_floats(n)
    assert acl.aclrtMemset(ptr, 4 * n, 0, 4 * n) == 0   # aclrtMalloc's memory is not initialised (reused
    t = np.full(n, 0.5, f32)                             # heap memory: a result of many values, "torn")
    ret, stream = acl.aclrtCreateStream()
    assert ret == 0
    F.kl_div(x, t, "none", stream=stream)          # caches the signature
    hits = call_cache.cache.hits
    stop, writing = threading.Event(), threading.Event()

    def writer():
        while not stop.is_set():
            acl.aclrtMemsetAsync(ptr, 4 * n, 0x3F, 4 * n, stream)
            acl.aclrtMemsetAsync(ptr, 4 * n, 0x00, 4 * n, stream)
            acl.aclrtSynchronizeStream(stream)
            writing.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert writing.wait(60), "the writer thread queued nothing"   # every call below races its memsets
    torn = []
    try:
        for i in range(30):
            before = call_cache.cache.hits
            result = F.kl_div(x, t, "none", stream=stream)
            values = np.unique(result)
            if len(values) > 1:   # say which x values the call read (out = t * (log t - x), t = 0.5)
                read = np.log(f32(0.5)) - values / f32(0.5)
                torn.append(f"call {i} ({'cached' if call_cache.cache.hits > before else 'uncached'}): read x = "
                            f"{read[:6].tolist()} ({len(values)} distinct), first change at element "
                            f"{int(np.flatnonzero(result != result.flat[0])[0])} of {n}")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert call_cache.cache.hits > hits            # the cached path ran
    # x = 0.747 (0x3F3F3F3F) beside 0.0 means a memset ran during the call; any other value, a write
    # into x from elsewhere
    assert not torn, "results mixing x values: " + "; ".join(torn)
    acl.aclrtSynchronizeStream(stream)
    acl.aclrtDestroyStream(stream)
    acl.aclrtFree(ptr)


def test_an_operand_in_host_memory_is_refused_after_a_cached_call():
    """aclrtMallocHost memory is not device memory: the cached path takes the uncached one, which
    refuses it with 161002, as a first call does."""
    import ctypes
    rng = np.random.default_rng(5)
    x, t = rng.standard_normal((4, 8)).astype(f32), rng.random((4, 8)).astype(f32)
    ret, ptr = acl.aclrtMallocHost(x.nbytes)
    assert ret == 0
    pinned = np.ctypeslib.as_array((ctypes.c_float * 32).from_address(ptr)).reshape(4, 8)
    pinned[...] = x
    try:
        _, first = _outcome(lambda: _uncached(lambda: F.kl_div(pinned, t, "sum")))
        assert first is not None and first[0] == 161002 and "host memory" in first[1]
        F.kl_div(x, t, "sum")                      # caches the signature
        _, cached = _outcome(lambda: F.kl_div(pinned, t, "sum"))
        assert cached == first
    finally:
        acl.aclrtFreeHost(ptr)
