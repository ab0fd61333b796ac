"""The ACL runtime surface: init, devices, streams (ordering, asynchrony, failures), events, memory
(every memcpy kind, memset, pointer checks), tensors with strides and offsets, int arrays."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu import runtime
from support import assert_close, use_device

P = acl.ACL_ERROR_RT_PARAM_INVALID


def test_enums_have_canns_numbers():
    assert acl.aclnnStatus.ACLNN_ERR_PARAM_NULLPTR == 161001
    assert acl.ACLNN_ERR_PARAM_INVALID == 161002
    assert acl.ACLNN_ERR_INNER_TILING_ERROR == 561002
    assert acl.ACL_ERROR_RT_PARAM_INVALID == 107000
    assert acl.ACL_ERROR_REPEAT_INITIALIZE == 100002
    assert acl.ACL_ERROR_RT_NO_DEVICE == 207004
    assert (acl.ACL_FLOAT, acl.ACL_FLOAT16, acl.ACL_INT64, acl.ACL_BOOL, acl.ACL_BF16, acl.ACL_DOUBLE) == \
        (0, 1, 9, 12, 27, 11)
    assert (acl.ACL_FORMAT_ND, acl.ACL_FORMAT_NCL, acl.ACL_FRACTAL_Z_3D) == (2, 47, 33)
    assert (acl.ACL_MEMCPY_HOST_TO_HOST, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, acl.ACL_MEMCPY_DEFAULT) == (0, 3, 4)
    assert acl.ACL_MEM_MALLOC_HUGE_FIRST == 0 and acl.ACL_MEM_MALLOC_NORMAL_ONLY == 2
    assert isinstance(acl.ACL_FLOAT, acl.aclDataType)
    import enum
    for enum_type in acl.base.status.ENUMS:     # every enum an IntEnum whose members are module constants
        assert issubclass(enum_type, enum.IntEnum), enum_type
        assert all(getattr(acl, name) is member for name, member in enum_type.__members__.items())
    assert (acl.KEEP_DTYPE, acl.USE_HF32, acl.ACL_EVENT_TIME_LINE | acl.ACL_EVENT_SYNC) == (0, 3, 9)


def test_init_twice_and_finalize():
    runtime.acl_state.initialized = False
    assert acl.aclInit(None) == 0
    assert acl.aclInit(None) == acl.ACL_ERROR_REPEAT_INITIALIZE
    assert "already" in acl.aclGetRecentErrMsg()
    assert acl.aclFinalize() == 0
    assert acl.aclFinalize() == acl.ACL_ERROR_REPEAT_FINALIZE


def test_devices():
    use_device("cpu")
    assert acl.aclrtGetDeviceCount() == (0, 1)
    assert acl.aclrtGetDevice() == (0, 0)
    assert acl.aclrtSetDevice(1) == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.aclrtSynchronizeDevice() == 0


def test_explicit_unavailable_device_is_not_replaced(monkeypatch):
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "cuda")
    acl.aclrtResetDevice(0)
    from aclnn_gpu.device import cuda
    if cuda.cuda_available():
        pytest.skip("a GPU is present")
    assert acl.aclrtSetDevice(0) == acl.ACL_ERROR_RT_NO_DEVICE
    assert acl.aclGetRecentErrMsg().startswith("aclrtSetDevice: ") and "cuda" in acl.aclGetRecentErrMsg()
    assert acl.aclrtMalloc(16, 0) == (acl.ACL_ERROR_RT_NO_DEVICE, None)
    assert acl.aclGetRecentErrMsg().startswith("aclrtMalloc: ")    # the call that needed the device
    with pytest.raises(acl.AclnnError) as refused:                 # functional: AclnnError, never another kind
        acl.functional.kl_div(np.zeros(3, np.float32), np.zeros(3, np.float32))
    assert refused.value.status == acl.ACL_ERROR_RT_NO_DEVICE and "kl_div: " in str(refused.value)
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "auto")
    assert acl.aclrtSetDevice(0) == 0 and acl.current_device_kind() == "cpu"


def test_memory_kinds_and_checks(session):
    data = np.arange(64, dtype=np.uint8)
    dev = session.malloc(64)
    dev2 = session.malloc(64)
    status, host = acl.aclrtMallocHost(64)
    assert status == 0
    assert acl.aclrtMemcpy(dev, 64, data, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.aclrtMemcpy(dev2, 64, dev, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    assert acl.aclrtMemcpy(host, 64, dev2, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    back = bytearray(64)
    assert acl.aclrtMemcpy(back, 64, host, 64, acl.ACL_MEMCPY_HOST_TO_HOST) == 0
    assert bytes(back) == data.tobytes()
    assert acl.aclrtMemset(dev, 64, 7, 16) == 0
    out = np.empty(64, np.uint8)
    assert acl.aclrtMemcpy(out, 64, dev, 64, acl.ACL_MEMCPY_DEFAULT) == 0
    assert (out[:16] == 7).all() and (out[16:] == data[16:]).all()
    # async copies in both directions, ordered on the stream
    dst = np.zeros(64, np.uint8)
    assert acl.aclrtMemcpyAsync(dev, 64, data[::-1].copy(), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE, session.stream) == 0
    assert acl.aclrtMemcpyAsync(dst, 64, dev, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST, session.stream) == 0
    assert acl.aclrtSynchronizeStream(session.stream) == 0
    assert (dst == data[::-1]).all()
    # refused, never dereferenced
    assert acl.aclrtMemcpy(dev, 64, data, 65, acl.ACL_MEMCPY_HOST_TO_DEVICE) == P          # count > destMax
    assert acl.aclrtMemcpy(dev + 32, 64, data, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0     # 96 usable bytes
    assert acl.aclrtMemcpy(dev + 64, 64, data, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == P     # too short a range
    assert acl.aclrtMemcpy(data.ctypes.data, 64, dev, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == P  # foreign
    assert acl.aclrtMemcpy(dev, 64, host, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == P        # host as device
    assert acl.aclrtMemcpy(dev, 64, data, 64, 9) == P                                       # bad kind
    assert acl.aclrtMemcpy(dev, 64, b"short", 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == P       # short buffer
    assert acl.aclrtMemcpy(dev, 64, None, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == P
    assert acl.aclrtMemset(dev, 8, 0, 16) == P
    assert acl.aclrtFreeHost(host) == 0
    assert acl.aclrtFreeHost(host) == P                                                     # double free
    assert acl.aclrtMemcpy(host, 64, dev, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == P          # freed
    assert acl.aclrtFree(dev + 1) == P                                                       # interior pointer
    assert acl.aclrtMalloc(0, 0) == (P, None)
    assert acl.aclrtMalloc(16, 99) == (P, None)
    assert acl.aclGetRecentErrMsg().startswith("aclrtMalloc: policy")


@pytest.mark.parametrize("fn, padded", [("aclrtMalloc", True), ("aclrtMallocAlign32", False)])
def test_malloc_size_rule_of_cann(session, fn, padded):
    """acl_rt.h: aclrtMalloc's real size is ALIGN_UP(size, 32) + 32, aclrtMallocAlign32's ALIGN_UP(size,
    32); the address is 64-byte aligned. Every byte of that size is usable; one more is refused with
    ACL_ERROR_RT_PARAM_INVALID and a message giving the rule, the caller's buffer untouched."""
    malloc = getattr(acl, fn)
    for size in (1, 8, 31, 32, 33, 100):
        usable = -(-size // 32) * 32 + (32 if padded else 0)
        ret, dev = malloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert ret == 0 and dev % 64 == 0
        session.pointers.append(dev)
        fresh = np.full(usable, 7, np.uint8)
        assert acl.aclrtMemcpy(fresh, usable, dev, usable, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        assert (fresh[size:] == 0).all()                  # past the caller's size: zeros
        data = np.arange(usable + 1, dtype=np.uint8)
        assert acl.aclrtMemcpy(dev, usable, data, usable, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        back = np.zeros(usable + 1, np.uint8)
        assert acl.aclrtMemcpy(back, usable + 1, dev, usable, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        assert (back[:usable] == data[:usable]).all() and back[usable] == 0
        assert acl.aclrtMemset(dev, usable, 0, usable) == 0
        assert acl.aclrtMemcpy(back, usable + 1, dev, usable + 1, acl.ACL_MEMCPY_DEVICE_TO_HOST) == P
        rule = f"ALIGN_UP({size}, 32) + 32" if padded else f"ALIGN_UP({size}, 32)"
        assert acl.aclGetRecentErrMsg() == (
            f"aclrtMemcpy: src: address {hex(dev)} with {usable + 1} bytes is not inside a live allocation of "
            f"this library: it runs 1 bytes past the end of the allocation at {hex(dev)} of {usable} bytes "
            f"({fn}({size}): {rule} = {usable} usable bytes)")
        assert (back[:usable] == data[:usable]).all() and back[usable] == 0        # untouched
        assert acl.aclrtMemset(dev + 1, usable, 0, usable) == P
        assert "runs 1 bytes past the end" in acl.aclGetRecentErrMsg()
    assert malloc(0, 0)[0] == P and malloc(8, 99)[0] == P


def test_cann_sample_target_in_a_float_sized_buffer(session):
    """CANN's aclnnCrossEntropyLossGrad sample allocates its int64 target (2,) through a
    std::vector<float>: aclrtMalloc(8) under a 16-byte tensor, which aclrtMalloc's ALIGN_UP(8, 32) + 32
    = 64 bytes cover (on an NPU as here). A tensor past those 64 bytes is refused, its output untouched."""
    from support import assert_refused
    s = session

    def target_over(count):
        ret, dev = acl.aclrtMalloc(2 * 4, acl.ACL_MEM_MALLOC_HUGE_FIRST)    # sizeof(float) * 2
        assert ret == 0
        s.pointers.append(dev)
        assert acl.aclrtMemcpy(dev, 8, np.zeros(2, np.float32), 8, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return dev, acl.aclCreateTensor([count], acl.ACL_INT64, None, 0, acl.ACL_FORMAT_ND, [count], dev)

    def args(count):
        dev, target = target_over(count)
        return dev, dict(gradLoss=s.tensor(np.array(0.1, np.float32)),
                         logProb=s.tensor(np.full((count, 3), -0.2, np.float32)), target=target,
                         weight=s.tensor(np.ones(3, np.float32)), gradZloss=None, lseForZloss=None, reduction="mean",
                         ignoreIndex=-100, labelSmoothing=0.0, lseSquareScaleForZloss=0.0,
                         out=s.poisoned((count, 3), np.float32))

    _, a = args(2)
    assert s.run(acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad, *a.values()) == 0, \
        acl.aclGetRecentErrMsg()
    p = np.exp(np.float64(-0.2))
    assert_close(s.read(a["out"]), 0.1 * np.array([[p - 1, p, p]] * 2) / 2, np.float32)
    dev, a = args(9)                                                          # 72 bytes over 64
    message = assert_refused(s, acl.aclnnCrossEntropyLossGradGetWorkspaceSize, "aclnnCrossEntropyLossGrad", a,
                             acl.ACLNN_ERR_PARAM_INVALID)
    assert message == (f"aclnnCrossEntropyLossGrad: target data: address {hex(dev)} with 72 bytes is not inside a "
                       f"live allocation of this library: it runs 8 bytes past the end of the allocation at {hex(dev)} "
                       "of 64 bytes (aclrtMalloc(8): ALIGN_UP(8, 32) + 32 = 64 usable bytes)")


def test_stream_order_thousand_calls(session, rng):
    """A thousand queued KL calls on one stream, one synchronize, every result right."""
    s = session
    xs = [rng.standard_normal((4, 9)).astype(np.float32) for _ in range(10)]
    out = s.poisoned((4, 9), np.float32)
    target = s.tensor(np.zeros((4, 9), np.float32))
    grad = s.tensor(np.ones((), np.float32))
    # each call writes out = -(target * 1); target is rewritten asynchronously between calls
    calls = 1000 if s.kind == "cpu" else 60
    values = rng.random((calls, 4, 9)).astype(np.float32)
    for i in range(calls):
        assert acl.aclrtMemcpyAsync(target.data, 144, values[i], 144, acl.ACL_MEMCPY_HOST_TO_DEVICE, s.stream) == 0
        status, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(grad, s.tensor(xs[i % 10]), target, 2, False, out)
        assert status == 0
        assert acl.aclnnKlDivBackward(None, 0, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert_close(s.read(out), -values[-1].astype(np.float64), np.float32)


def test_execute_is_asynchronous(cpu_session):
    """The execute call returns before the work runs: a blocked stream holds the result back."""
    s = cpu_session
    out = s.poisoned((3,), np.float32)
    status, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(s.tensor(np.ones((), np.float32)),
                                                            s.tensor(np.ones(3, np.float32)),
                                                            s.tensor(np.ones(3, np.float32)), 0, False, out)
    gate = threading.Event()
    from aclnn_gpu.runtime import resolve_stream
    resolve_stream(s.stream, "test").worker.submit(gate.wait)  # (a synchronous memcpy now would wait for it)
    assert acl.aclnnKlDivBackward(None, 0, ex, s.stream) == 0
    from aclnn_gpu.runtime import get_device
    assert np.isnan(get_device().host_view(out.data, 12).view(np.float32)).all()   # not run yet
    gate.set()
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert (s.read(out) == -1).all()


def test_stream_failure_reported_at_synchronize(cpu_session):
    s = cpu_session
    from aclnn_gpu.runtime import resolve_stream

    def boom():
        raise RuntimeError("queued work exploded")

    resolve_stream(s.stream, "test").worker.submit(boom)
    assert acl.aclrtSynchronizeStream(s.stream) == acl.ACL_ERROR_RT_INTERNAL_ERROR
    assert "queued work exploded" in acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeStream(s.stream) == 0   # reported once


def test_events_across_streams(session):
    s = session
    if s.kind == "cuda":
        pytest.skip("holds the stream with a host wait queued on its worker thread (cpu and emulated)")
    status, other = acl.aclrtCreateStream()
    status, start = acl.aclrtCreateEvent()
    status, done = acl.aclrtCreateEvent()
    gate = threading.Event()
    from aclnn_gpu.runtime import resolve_stream
    assert acl.aclrtRecordEvent(start, s.stream) == 0
    impl = resolve_stream(s.stream, "test")
    (impl.worker if hasattr(impl, "worker") else impl.cupy.worker).submit(lambda: (gate.wait(), time.sleep(0.01)))
    buf = s.malloc(16)
    copy = s.malloc(16)
    assert acl.aclrtMemsetAsync(buf, 16, 3, 16, s.stream) == 0
    assert acl.aclrtRecordEvent(done, s.stream) == 0
    assert acl.aclrtStreamWaitEvent(other, done) == 0
    # queued on `other` behind the event: must see the memset of the first stream
    assert acl.aclrtMemcpyAsync(copy, 16, buf, 16, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, other) == 0
    assert acl.aclrtQueryEventStatus(done) == (0, 0)           # not ready while the gate is closed
    assert acl.aclrtEventElapsedTime(start, done)[0] == acl.ACL_ERROR_RT_EVENT_NOT_COMPLETE
    gate.set()
    assert acl.aclrtSynchronizeStream(other) == 0
    host = np.zeros(16, np.uint8)
    assert acl.aclrtMemcpy(host, 16, copy, 16, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert (host == 3).all()
    assert acl.aclrtSynchronizeEvent(done) == 0
    status, ms = acl.aclrtEventElapsedTime(start, done)
    assert status == 0 and ms >= 5.0
    assert acl.aclrtDestroyEvent(done) == 0
    assert acl.aclrtRecordEvent(done, s.stream) == P
    assert acl.aclrtDestroyStream(other) == 0
    assert acl.aclrtSynchronizeStream(other) == P
    assert acl.aclrtDestroyStream(None) == P


def test_tensor_descriptors_and_views(session, rng):
    assert acl.aclCreateTensor([2, -1], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [2], 0) is None
    assert "viewDims" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateTensor([2], 999, None, 0, acl.ACL_FORMAT_ND, [2], 0) is None
    assert acl.aclCreateTensor([2], acl.ACL_FLOAT, [1, 1], 0, acl.ACL_FORMAT_ND, [2], 0) is None
    assert acl.aclCreateTensor([2], acl.ACL_FLOAT, None, -1, acl.ACL_FORMAT_ND, [2], 0) is None
    t = acl.aclCreateTensor([2, 3], acl.ACL_FLOAT, [1, 2], 5, acl.ACL_FORMAT_ND, [20], 1234)
    assert acl.aclGetViewShape(t) == (0, [2, 3]) and acl.aclGetViewStrides(t) == (0, [1, 2])
    assert acl.aclGetViewOffset(t) == (0, 5) and acl.aclGetDataType(t) == (0, acl.ACL_FLOAT)
    assert acl.aclDestroyTensor(t) == 0 and acl.aclDestroyTensor(None) == 0
    assert acl.aclDestroyTensor(t) == 161002
    arr = acl.aclCreateIntArray([1, 2, 3])
    assert list(arr.values) == [1, 2, 3]
    assert acl.aclCreateIntArray(None) is None and acl.aclCreateIntArray([1.5]) is None
    assert acl.aclDestroyIntArray(arr) == 0 and acl.aclDestroyIntArray(None) == 0
    # a transposed view with an offset: the operator reads through strides and offset
    x = rng.standard_normal((5, 4)).astype(np.float32)
    storage = np.concatenate([np.zeros(3, np.float32), x.reshape(-1)])
    ptr = session.malloc(storage.nbytes)
    acl.aclrtMemcpy(ptr, storage.nbytes, storage, storage.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    view = acl.aclCreateTensor([4, 5], acl.ACL_FLOAT, [1, 4], 3, acl.ACL_FORMAT_ND, [23], ptr)
    out = session.poisoned((4, 5), np.float32)
    assert session.run(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward,
                       session.tensor(np.ones((), np.float32)), session.tensor(np.ones((4, 5), np.float32)),
                       view, 0, False, out) == 0
    assert_close(session.read(out), -x.T.astype(np.float64), np.float32)
