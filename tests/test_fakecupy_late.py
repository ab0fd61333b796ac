"""The late stand-in (`ACLNN_GPU_EMU_LATE`, emulator/fakecupy/ and emulator/fakepool.py): each of its
rules shown on, against what CUDA and CuPy document, and aclrtMalloc's padding under it.

Where a test needs a stream to run late it does not sleep: it gives that stream's worker a delay
that waits for a gate the test opens (`gated`), so the order is decided by the test, not by timing."""
from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.emulator import fakepool
from support import use_device

runtime = fakecupy.cuda.runtime
Stream = fakecupy.Stream


@pytest.fixture
def late():
    """The late stand-in on (a fixed seed) for the test, as it was afterwards."""
    previous = fakecupy.set_late(fakecupy.LateRules(seed=1234))
    yield fakecupy.streams._late
    fakecupy.set_late(previous)


def gated(stream: Stream) -> threading.Event:
    """Make `stream`'s next batch of work wait until the returned gate is set."""
    gate = threading.Event()
    stream.worker.delay = gate.wait
    return gate


def host(memory: fakecupy.MemoryPointer, size: int) -> bytes:
    return ctypes.string_at(memory.ptr, size)


def test_a_write_on_a_stream_is_not_visible_before_the_stream_runs(late):
    stream = Stream(non_blocking=True)
    memory = fakecupy.alloc(64)
    ctypes.memset(memory.ptr, 1, 64)
    gate = gated(stream)
    runtime.memsetAsync(memory.ptr, 7, 64, stream.ptr)
    assert host(memory, 64) == bytes([1]) * 64     # queued, not run: the stream starts late
    gate.set()
    stream.synchronize()
    assert host(memory, 64) == bytes([7]) * 64
    stream.close()


def test_the_delay_is_seeded_and_bounded():
    a, b = fakecupy.LateRules(seed=5), fakecupy.LateRules(seed=5)
    draws = [a._random.uniform(a.min_delay, a.max_delay) for _ in range(20)]
    assert draws == [b._random.uniform(b.min_delay, b.max_delay) for _ in range(20)]
    assert all(0 <= d <= a.max_delay for d in draws) and len(set(draws)) == 20


def test_pinned_source_is_read_when_the_copy_runs_a_pageable_one_at_the_call(late, monkeypatch):
    """CUDA Runtime API, API synchronization behavior: cudaMemcpyAsync from pageable host memory stages
    it at the call; from pinned memory the copy reads it when it runs."""
    monkeypatch.setattr(fakecupy.memory, "_device_memory", lambda ptr, size: False)   # no device registry here
    stream = Stream(non_blocking=True)
    pinned = fakecupy.alloc_pinned_memory(32)
    pageable = np.full(32, 1, np.uint8)
    ctypes.memset(pinned.ptr, 1, 32)
    from_pinned, from_pageable = fakecupy.alloc(32), fakecupy.alloc(32)
    gate = gated(stream)
    runtime.memcpyAsync(from_pinned.ptr, pinned.ptr, 32, 4, stream.ptr)
    runtime.memcpyAsync(from_pageable.ptr, pageable.ctypes.data, 32, 4, stream.ptr)
    ctypes.memset(pinned.ptr, 2, 32)     # the caller changes both sources before the stream runs
    pageable[:] = 2
    gate.set()
    stream.synchronize()
    assert host(from_pinned, 32) == bytes([2]) * 32
    assert host(from_pageable, 32) == bytes([1]) * 32
    stream.close()


def test_freed_memory_comes_back_poisoned_in_cupys_pool_order(late, monkeypatch):
    """cupy/cuda/memory.pyx: 512-byte units, best fit by bin, a larger chunk split, one arena per stream;
    the most recently freed chunk of a bin first; the bytes are whatever was there: poison."""
    monkeypatch.setattr(fakecupy.memory, "_pools", {})   # a pool of its own: no other test's free chunks
    legacy = fakecupy.get_current_stream()
    first, second = fakecupy.alloc(1000), fakecupy.alloc(1000)
    ctypes.memset(first.ptr, 5, 1000)
    ctypes.memset(second.ptr, 5, 1000)
    a, b = first.ptr, second.ptr
    del first, second
    gc.collect()
    again = fakecupy.alloc(600)          # 600 -> 1024 bytes: the bin of the two freed chunks
    assert again.ptr == b                # the latest freed
    legacy.synchronize()                 # the poison is queued in the arena stream's order
    assert host(again, 600) == bytes([fakepool.POISON]) * 600
    small = fakecupy.alloc(100)          # 512 bytes: the other 1024-byte chunk, split
    assert small.ptr == a
    rest = fakecupy.alloc(512)           # the split's other half
    assert rest.ptr == a + 512
    other = Stream(non_blocking=True)
    with other:                          # another stream's arena: none of the legacy stream's chunks
        del again
        gc.collect()
        elsewhere = fakecupy.alloc(600)
    assert elsewhere.ptr not in (a, b, a + 512)
    other.close()


def test_the_legacy_stream_orders_with_blocking_streams_both_ways(late):
    """CUDA Runtime API, stream synchronization behavior (default stream): legacy-stream work waits for
    the blocking streams' earlier work, and their later work waits for it; non-blocking streams wait
    for neither."""
    legacy = fakecupy.get_current_stream()
    blocking, non_blocking = Stream(), Stream(non_blocking=True)
    order: list[str] = []
    gate = gated(blocking)
    blocking.submit(lambda: order.append("blocking"))
    legacy.submit(lambda: order.append("legacy"))
    gate.set()
    legacy.synchronize()
    assert order == ["blocking", "legacy"]

    order.clear()
    gate = gated(legacy)
    legacy.submit(lambda: order.append("legacy"))
    non_blocking.submit(lambda: order.append("non-blocking"))
    non_blocking.synchronize()           # runs while the legacy stream still waits
    blocking.submit(lambda: order.append("blocking"))
    gate.set()
    blocking.synchronize()
    assert order == ["non-blocking", "legacy", "blocking"]
    legacy.worker.delay = late.delay
    blocking.close()
    non_blocking.close()


def _query_from_another_thread() -> BaseException | None:
    error: list[BaseException] = []

    def query() -> None:
        event = fakecupy.Event()
        try:
            assert event.done
        except BaseException as e:  # noqa: BLE001 - returned to the test
            error.append(e)
    thread = threading.Thread(target=query)
    thread.start()
    thread.join()
    return error[0] if error else None


def test_an_unsafe_call_from_another_thread_invalidates_a_global_mode_capture():
    """cudaThreadExchangeStreamCaptureMode: in global mode (a thread's default) a potentially unsafe
    call (here cudaEventQuery) is prohibited while any thread captures in global mode; the call fails
    and the capture is invalidated. A thread-local or relaxed capture ignores other threads."""
    stream = Stream(non_blocking=True)
    stream.begin_capture(runtime.streamCaptureModeGlobal)
    error = _query_from_another_thread()
    assert error is not None and error.status == fakecupy.cudaError_t.cudaErrorStreamCaptureUnsupported
    with pytest.raises(fakecupy.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated.*cudaEventQuery"):
        stream.end_capture()

    for mode in (runtime.streamCaptureModeThreadLocal, runtime.streamCaptureModeRelaxed):
        stream.begin_capture(mode)
        assert _query_from_another_thread() is None
        stream.end_capture()
    stream.close()


def test_capture_modes_of_the_capturing_thread_and_the_relaxed_exchange():
    stream = Stream(non_blocking=True)
    stream.begin_capture(runtime.streamCaptureModeThreadLocal)   # its own thread's unsafe call: refused
    with pytest.raises(fakecupy.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
        fakecupy.alloc_pinned_memory(16)
    with pytest.raises(fakecupy.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated"):
        stream.end_capture()

    stream.begin_capture(runtime.streamCaptureModeGlobal)
    errors: list[BaseException] = []

    def relaxed_query() -> None:   # a thread that exchanged its mode to relaxed may make the call
        cudart = fakecupy.cuda_bindings_runtime   # cuda-bindings' signature: (cudaError_t, previous mode)
        err, previous = cudart.cudaThreadExchangeStreamCaptureMode(cudart.cudaStreamCaptureModeRelaxed)
        try:
            assert err == cudart.cudaError_t.cudaSuccess and previous == runtime.streamCaptureModeGlobal
            assert fakecupy.Event().done
            done.set()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            runtime.threadExchangeStreamCaptureMode(previous)
    done = threading.Event()
    thread = threading.Thread(target=relaxed_query)
    thread.start()
    thread.join()
    assert errors == [] and done.is_set()
    stream.end_capture()
    stream.close()


def test_the_pytorch_stand_ins_default_stream_is_the_legacy_stream(late):
    from torch_gpu import StandIn
    standin = StandIn()
    try:
        assert standin.default.cuda_stream == 0 and standin.default.cupy is fakecupy.streams._legacy_stream(0)
    finally:
        standin.close()


def test_malloc_padding_is_zeroed_before_the_pointer_is_returned(late):
    """aclrtMalloc(8) reads 16 bytes as CANN's samples do: the caller's 16-byte write on its own stream
    must not be undone by padding zeroed later on another stream (the library's default stream running
    late here)."""
    use_device("emulated")
    device = acl.runtime.get_device()
    ret, stream = acl.aclrtCreateStream()
    assert ret == 0
    gate = gated(device.default_stream.cupy)
    ret, dev = acl.aclrtMalloc(8, 0)
    assert ret == 0
    data = np.arange(1, 17, dtype=np.uint8)
    assert acl.aclrtMemcpyAsync(dev, 16, data, 16, acl.ACL_MEMCPY_HOST_TO_DEVICE, stream) == 0
    assert acl.aclrtSynchronizeStream(stream) == 0
    gate.set()
    assert acl.aclrtSynchronizeDevice() == 0
    back = np.zeros(64, np.uint8)
    assert acl.aclrtMemcpy(back, 64, dev, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert (back[:16] == data).all() and (back[16:] == 0).all()
    device.default_stream.cupy.worker.delay = fakecupy.streams._late.delay
    assert acl.aclrtFree(dev) == 0
    assert acl.aclrtDestroyStream(stream) == 0
