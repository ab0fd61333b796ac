"""Host callbacks in stream order (runtime/callbacks.py): a subscribed thread runs them in its
aclrtProcessReport; ACL_CALLBACK_BLOCK holds the stream's later work until the callback has run,
NO_BLOCK does not; the codes for a missing or repeated subscription and a timeout; a blocked stream
is released when its subscription is withdrawn. On cpu and emulated."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import aclnn_gpu as acl
from support import use_device

P = acl.ACL_ERROR_RT_PARAM_INVALID


@pytest.fixture(params=["cpu", "emulated"])
def stream(request):
    use_device(request.param)
    assert acl.aclrtSetDevice(0) == 0
    status, s = acl.aclrtCreateStream()
    assert status == 0
    yield s
    acl.aclrtUnSubscribeReport(threading.get_ident(), s)
    assert acl.aclrtDestroyStream(s) == 0


def _memory(stream, value: int) -> int:
    """16 bytes of device memory, zeroed now, set to `value` by a memset queued on `stream` by the
    caller. (Made before a blocking callback is queued: a synchronous call waits for the device's
    streams, which wait for the callback this thread is to run.)"""
    _, ptr = acl.aclrtMalloc(16, 0)
    assert acl.aclrtMemset(ptr, 16, 0, 16) == 0
    return ptr


def _read(ptr: int) -> np.ndarray:
    out = np.zeros(16, np.uint8)
    assert acl.aclrtMemcpy(out, 16, ptr, 16, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    return out


def test_a_blocking_callback_holds_the_stream_until_the_subscribed_thread_runs_it(stream):
    me = threading.get_ident()
    seen = []
    assert acl.aclrtLaunchCallback(seen.append, 1, 1, stream) == acl.ACL_ERROR_STREAM_NOT_SUBSCRIBE
    assert acl.aclrtProcessReport(10) == acl.ACL_ERROR_THREAD_NOT_SUBSCRIBE
    assert acl.aclrtSubscribeReport(me, stream) == 0
    assert acl.aclrtSubscribeReport(me + 1, stream) == acl.ACL_ERROR_REPEAT_SUBSCRIBE
    ptr = _memory(stream, 7)
    assert acl.aclrtLaunchCallback(seen.append, "first", acl.ACL_CALLBACK_BLOCK, stream) == 0
    assert acl.aclrtMemsetAsync(ptr, 16, 7, 16, stream) == 0     # queued behind the callback
    time.sleep(0.2)
    assert seen == [] and acl.aclrtStreamQuery(stream) == (0, acl.ACL_STREAM_STATUS_NOT_READY)
    assert acl.aclrtProcessReport(5000) == 0 and seen == ["first"]
    assert acl.aclrtSynchronizeStream(stream) == 0 and (_read(ptr) == 7).all()
    assert acl.aclrtProcessReport(20) == acl.ACL_ERROR_WAIT_CALLBACK_TIMEOUT
    assert "within 20 ms" in acl.aclGetRecentErrMsg()
    assert acl.aclrtFree(ptr) == 0


def test_a_non_blocking_callback_lets_the_stream_go_on(stream):
    me = threading.get_ident()
    seen = []
    assert acl.aclrtSubscribeReport(me, stream) == 0
    ptr = _memory(stream, 9)
    assert acl.aclrtLaunchCallback(seen.append, 2, acl.ACL_CALLBACK_NO_BLOCK, stream) == 0
    assert acl.aclrtMemsetAsync(ptr, 16, 9, 16, stream) == 0
    assert acl.aclrtSynchronizeStream(stream) == 0 and (_read(ptr) == 9).all() and seen == []
    assert acl.aclrtProcessReport(5000) == 0 and seen == [2]
    assert acl.aclrtFree(ptr) == 0


def test_callbacks_run_in_stream_order_on_another_thread(stream):
    seen, order, failures = [], [], []
    subscribed, ident = threading.Event(), {}

    def processor():
        ident["tid"] = threading.get_ident()
        subscribed.wait(10)
        for _ in range(3):
            if acl.aclrtProcessReport(5000) != 0:
                failures.append(acl.aclGetRecentErrMsg())
                return
            seen.append(threading.get_ident())

    t = threading.Thread(target=processor)
    t.start()
    while "tid" not in ident:
        time.sleep(0.01)
    assert acl.aclrtSubscribeReport(ident["tid"], stream) == 0
    subscribed.set()
    for i in range(3):
        assert acl.aclrtLaunchCallback(order.append, i, acl.ACL_CALLBACK_BLOCK, stream) == 0
    t.join(20)
    assert failures == [] and not t.is_alive()
    assert acl.aclrtSynchronizeStream(stream) == 0
    assert order == [0, 1, 2] and seen == [ident["tid"]] * 3
    assert acl.aclrtUnSubscribeReport(ident["tid"], stream) == 0


def test_withdrawing_the_subscription_releases_a_blocked_stream(stream):
    me = threading.get_ident()
    assert acl.aclrtSubscribeReport(me, stream) == 0
    assert acl.aclrtLaunchCallback(lambda _: None, None, acl.ACL_CALLBACK_BLOCK, stream) == 0
    time.sleep(0.1)
    assert acl.aclrtUnSubscribeReport(me, stream) == 0
    assert acl.aclrtSynchronizeStream(stream) == 0      # returns: the callback will never run
    assert acl.aclrtUnSubscribeReport(me, stream) == acl.ACL_ERROR_STREAM_NOT_SUBSCRIBE


def test_bad_arguments(stream):
    me = threading.get_ident()
    assert acl.aclrtSubscribeReport(-1, stream) == P and acl.aclrtSubscribeReport(me, object()) == P
    assert acl.aclrtSubscribeReport(me, stream) == 0
    assert acl.aclrtLaunchCallback(None, 1, 0, stream) == P and "nullptr" in acl.aclGetRecentErrMsg()
    assert acl.aclrtLaunchCallback(print, 1, 2, stream) == P and "blockType" in acl.aclGetRecentErrMsg()
    assert acl.aclrtProcessReport(0) == P and acl.aclrtProcessReport(-2) == P


def test_a_blocking_callback_does_not_hold_up_another_streams_callbacks(stream):
    """CUDA may run the host functions of independent streams one at a time (cudaLaunchHostFunc; the
    emulated device's stand-in always does): a blocking callback not yet processed must not keep
    another stream's callback from reaching its thread. On cuda / emulated the blocking callback
    holds its stream on the GPU (StreamGate), not in the host function."""
    status, other = acl.aclrtCreateStream()
    assert status == 0
    seen, results = [], {}
    ready, go = threading.Event(), threading.Event()

    def processor():
        ready.set()
        go.wait(30)
        results["other"] = acl.aclrtProcessReport(3000)
    thread = threading.Thread(target=processor)
    thread.start()
    try:
        assert ready.wait(30)
        while acl.aclrtProcessReport(10) == 0:   # callbacks an earlier test left to this thread
            pass
        me = threading.get_ident()
        assert acl.aclrtSubscribeReport(me, stream) == 0
        assert acl.aclrtSubscribeReport(thread.ident, other) == 0
        ptr = _memory(stream, 5)
        assert acl.aclrtLaunchCallback(seen.append, "blocking", acl.ACL_CALLBACK_BLOCK, stream) == 0
        assert acl.aclrtMemsetAsync(ptr, 16, 5, 16, stream) == 0   # held behind the blocking callback
        time.sleep(0.1)   # the blocking callback has reached its (not yet processing) thread
        assert acl.aclrtLaunchCallback(seen.append, "other", acl.ACL_CALLBACK_NO_BLOCK, other) == 0
        go.set()
        thread.join(30)
        assert results == {"other": 0} and seen == ["other"]
        assert acl.aclrtStreamQuery(stream) == (0, acl.ACL_STREAM_STATUS_NOT_READY)   # still held
        assert acl.aclrtProcessReport(5000) == 0 and seen == ["other", "blocking"]
        assert acl.aclrtSynchronizeStream(stream) == 0 and (_read(ptr) == 5).all()
        assert acl.aclrtFree(ptr) == 0
    finally:   # (withdrawing the subscriptions lets a stream blocked on its callback go on)
        go.set()
        thread.join(30)
        acl.aclrtUnSubscribeReport(threading.get_ident(), stream)
        acl.aclrtUnSubscribeReport(thread.ident, other)
        assert acl.aclrtDestroyStream(other) == 0


def test_a_blocking_callback_still_holds_its_stream_where_cuda_refuses_stream_waits(monkeypatch):
    """Without stream memory operations (cuStreamWaitValue32 refused: CUDA_ERROR_NOT_SUPPORTED) the
    host function waits for the callback, as before: the stream is held all the same."""
    from aclnn_gpu import runtime
    from aclnn_gpu.emulator import fakecupy
    use_device("emulated")
    monkeypatch.setattr(fakecupy.cuda_bindings_driver, "cuStreamWaitValue32",
                        lambda *args: (fakecupy.cuda_bindings_driver.CUresult.CUDA_ERROR_NOT_SUPPORTED,))
    status, s = acl.aclrtCreateStream()
    assert status == 0
    me, seen = threading.get_ident(), []
    try:
        while acl.aclrtProcessReport(10) == 0:   # callbacks an earlier test left to this thread
            pass
        assert acl.aclrtSubscribeReport(me, s) == 0
        ptr = _memory(s, 4)
        assert acl.aclrtLaunchCallback(seen.append, "held", acl.ACL_CALLBACK_BLOCK, s) == 0
        assert acl.aclrtMemsetAsync(ptr, 16, 4, 16, s) == 0
        time.sleep(0.1)
        assert seen == [] and acl.aclrtStreamQuery(s) == (0, acl.ACL_STREAM_STATUS_NOT_READY)
        assert acl.aclrtProcessReport(5000) == 0 and seen == ["held"]
        assert acl.aclrtSynchronizeStream(s) == 0 and (_read(ptr) == 4).all()
        assert runtime.get_device()._no_stream_waits
        assert acl.aclrtFree(ptr) == 0
    finally:
        acl.aclrtUnSubscribeReport(me, s)
        assert acl.aclrtDestroyStream(s) == 0
        runtime.release_devices()
