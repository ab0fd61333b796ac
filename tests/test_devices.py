"""Many devices in one process (ACLNN_GPU_DEVICE_COUNT virtual devices on the cpu and emulated kinds):
the per-thread current device, what belongs to which device, cross-device copies, peer access and
its codes, the ownership check of an operator, the SM count of the device that runs a plan,
functional's routing, and the cause given when the cuda kind cannot run."""
from __future__ import annotations

import logging
import sys
import threading
import types
import warnings

import numpy as np
import pytest
from support import DEVICE_KINDS, assert_close, require_gpus

import aclnn_gpu as acl
import aclnn_gpu.functional as Fn
from aclnn_gpu import runtime
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.reference.kl_div import kl_div
from aclnn_gpu.demo.samples import DeviceArrays

P = acl.ACL_ERROR_RT_PARAM_INVALID
INVALID = acl.ACLNN_ERR_PARAM_INVALID
H2D, D2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST


@pytest.fixture(params=DEVICE_KINDS)
def two(request, monkeypatch):
    """Two virtual devices of the kind (on cuda: two real GPUs, else the test skips); device 0 current on
    this thread. Yields the kind."""
    require_gpus(request.param, 2, "two devices in one process")
    monkeypatch.setenv("ACLNN_GPU_DEVICE", request.param)
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    runtime.release_devices()
    assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
    yield request.param
    _back_to_device_0()


def _back_to_device_0():
    """This thread back on device 0, every device released (the next test picks its own kind)."""
    acl.aclrtSetDevice(0)
    runtime.release_devices()


def _in_thread(fn):
    """fn() on a fresh thread (bounded), returning its result."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(fn()))
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and box, "the thread did not finish"
    return box[0]


def test_count_and_current_device_per_thread(two):
    assert acl.aclrtGetDeviceCount() == (0, 2)
    assert acl.aclrtGetDevice() == (0, 0)
    # a thread that never called aclrtSetDevice has no current device to report (ACL: 107002)...
    status, device = _in_thread(acl.aclrtGetDevice)
    assert (status, device) == (acl.ACL_ERROR_RT_CONTEXT_NULL, None)

    def on_one():
        assert acl.aclrtSetDevice(1) == 0
        # on cuda / emulated the thread's CuPy current device follows (fakecupy mirrors CuPy's)
        cupy_device = fakecupy.cuda.runtime.getDevice() if two == "emulated" else 1
        return acl.aclrtGetDevice(), runtime.get_device().id, acl.current_device_kind(), cupy_device
    # ... a thread's SetDevice is its own: this thread stays on device 0
    assert _in_thread(on_one) == ((0, 1), 1, two, 1)
    assert fakecupy.cuda.runtime.getDevice() == 0
    assert acl.aclrtGetDevice() == (0, 0) and runtime.get_device().id == 0
    assert acl.aclrtSetDevice(2) == acl.ACL_ERROR_RT_INVALID_DEVICEID
    message = acl.aclGetRecentErrMsg()
    assert message.startswith("aclrtSetDevice: deviceId 2 is out of range [0, 2)") and "ACLNN_GPU_DEVICE_COUNT" in message
    assert acl.aclrtSetDevice(-1) == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert runtime.device_of(1) is not runtime.device_of(0) and runtime.device_of(1).id == 1


def test_bad_device_count_is_refused(monkeypatch):
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "cpu")
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "two")
    runtime.release_devices()
    try:
        assert acl.aclrtSetDevice(0) == acl.ACL_ERROR_RT_NO_DEVICE
        assert "ACLNN_GPU_DEVICE_COUNT='two' must be an integer >= 1" in acl.aclGetRecentErrMsg()
    finally:
        monkeypatch.delenv("ACLNN_GPU_DEVICE_COUNT")
        runtime.release_devices()


def test_memory_and_streams_belong_to_their_device(two):
    data = np.arange(256, dtype=np.uint8)
    _, a = acl.aclrtMalloc(256, 0)
    _, s0 = acl.aclrtCreateStream()
    assert acl.aclrtSetDevice(1) == 0
    _, b = acl.aclrtMalloc(256, 0)
    _, s1 = acl.aclrtCreateStream()
    assert runtime.device_of(0).registry.find(a, 256) and not runtime.device_of(1).registry.find(a, 256)
    # work is enqueued only on a stream of the current device
    assert acl.aclrtMemcpyAsync(b, 256, data, 256, H2D, s0) == P
    assert acl.aclGetRecentErrMsg() == ("aclrtMemcpyAsync: stream belongs to device 0, but this work runs on "
                                        "device 1 (use a stream created while that device was current)")
    # copies cross devices: host -> device 1 -> device 0 (async, stream of device 1) -> host
    assert acl.aclrtMemcpyAsync(b, 256, data, 256, H2D, s1) == 0
    assert acl.aclrtMemcpyAsync(a, 256, b, 256, D2D, s1) == 0
    assert acl.aclrtSynchronizeStream(s1) == 0
    out = np.zeros(256, np.uint8)
    assert acl.aclrtMemcpy(out, 256, a, 256, D2H) == 0
    np.testing.assert_array_equal(out, data)
    assert acl.aclrtMemset(a, 256, 3, 100) == 0          # another device's memory, synchronously
    assert acl.aclrtMemcpy(b, 256, a, 256, D2D) == 0      # synchronous device 0 -> device 1
    assert acl.aclrtMemcpy(out, 256, b, 256, D2H) == 0
    assert (out[:100] == 3).all() and (out[100:] == data[100:]).all()
    # any thread may wait for (and destroy) any device's stream; events record on their own device
    assert acl.aclrtSynchronizeStream(s0) == 0
    _, event = acl.aclrtCreateEvent()                     # an event of device 1
    assert acl.aclrtSetDevice(0) == 0
    assert acl.aclrtRecordEvent(event, s0) == P and "stream belongs to device 0" in acl.aclGetRecentErrMsg()
    assert acl.aclrtRecordEvent(event, s1) == 0
    assert acl.aclrtStreamWaitEvent(s0, event) == 0       # device 0's stream waits for device 1's event
    assert acl.aclrtSynchronizeStream(s0) == 0
    for handle in (s0, s1):
        assert acl.aclrtDestroyStream(handle) == 0
    assert acl.aclrtDestroyEvent(event) == 0
    assert acl.aclrtFree(b) == 0 and acl.aclrtFree(a) == 0  # freed from whichever device is current


def test_reset_device_invalidates_its_handles(two):
    assert acl.aclrtSetDevice(1) == 0
    _, stream = acl.aclrtCreateStream()
    _, event = acl.aclrtCreateEvent()
    _, ptr = acl.aclrtMalloc(64, 0)
    assert acl.aclrtResetDevice(1) == 0
    assert acl.aclrtSynchronizeStream(stream) == P
    assert acl.aclGetRecentErrMsg() == ("aclrtSynchronizeStream: stream belongs to device 1, which was reset by "
                                        "aclrtResetDevice(1)")
    assert acl.aclrtSynchronizeEvent(event) == P and "reset" in acl.aclGetRecentErrMsg()
    assert acl.aclrtFree(ptr) == P
    assert acl.aclrtMalloc(64, 0)[0] == 0                  # this thread's device 1 comes back, fresh
    assert acl.aclrtResetDevice(5) == acl.ACL_ERROR_RT_INVALID_DEVICEID


def test_peer_access_codes(two):
    assert acl.aclrtDeviceCanAccessPeer(0, 1) == (0, 1)
    assert acl.aclrtDeviceCanAccessPeer(1, 1) == (acl.ACL_ERROR_INVALID_PARAM, None)
    assert acl.aclrtDeviceCanAccessPeer(0, 2) == (acl.ACL_ERROR_RT_INVALID_DEVICEID, None)
    assert acl.aclrtDeviceEnablePeerAccess(1, 1) == acl.ACL_ERROR_FEATURE_UNSUPPORTED     # flags are reserved
    assert acl.aclrtDeviceEnablePeerAccess(0) == acl.ACL_ERROR_INVALID_PARAM              # the current device
    assert acl.aclrtDeviceEnablePeerAccess(7) == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.aclrtDeviceDisablePeerAccess(1) == acl.ACL_ERROR_INVALID_PARAM            # never enabled
    assert acl.aclrtDeviceEnablePeerAccess(1, 0) == 0
    assert acl.aclrtDeviceEnablePeerAccess(1) == acl.ACL_ERROR_INVALID_PARAM              # enabling twice
    assert acl.aclGetRecentErrMsg() == ("aclrtDeviceEnablePeerAccess: peer access from device 0 to device 1 is "
                                        "already enabled")
    assert acl.aclrtDeviceDisablePeerAccess(1) == 0
    assert acl.aclrtDeviceDisablePeerAccess(1) == acl.ACL_ERROR_INVALID_PARAM


def _kl_backward(arrays: DeviceArrays, x, t, out):
    """Phase 1 of KL backward (sum) on the current device: (status, executor)."""
    grad = arrays.tensor(np.ones((), np.float32))
    status, _, executor = acl.aclnnKlDivBackwardGetWorkspaceSize(grad, x, t, 2, False, out)
    return status, executor


def test_operator_refuses_another_devices_memory_and_stream_unless_peer(two, rng):
    x_host = rng.standard_normal((4, 8)).astype(np.float32)
    t_host = rng.random((4, 8)).astype(np.float32)
    expected = -t_host.astype(np.float64)                 # d/dx sum(t * (log t - x))
    zero = DeviceArrays()
    assert acl.aclrtSetDevice(1) == 0
    one = DeviceArrays()
    t1 = one.tensor(t_host)                                # device 1's memory
    assert acl.aclrtSetDevice(0) == 0
    x0, out0 = zero.tensor(x_host), zero.empty((4, 8), np.float32)
    # phase 1 on device 0 with an input on device 1: refused, naming both devices
    status, executor = _kl_backward(zero, x0, t1, out0)
    assert (status, executor) == (INVALID, None)
    message = acl.aclGetRecentErrMsg()
    assert "is memory of device 1, but this call runs on device 0" in message and "aclrtDeviceEnablePeerAccess(1)" in message
    # an executor of device 0 with a stream of device 1: refused in phase 2, output untouched
    status, executor = _kl_backward(zero, x0, zero.tensor(t_host), out0)
    assert status == 0
    before = zero.raw(out0)
    assert acl.aclnnKlDivBackward(None, 0, executor, one.stream) == INVALID
    assert "stream belongs to device 1, but this work runs on device 0" in acl.aclGetRecentErrMsg()
    assert zero.raw(out0) == before
    # the executor runs on its own device whatever the thread's current device is
    assert acl.aclrtSetDevice(1) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, None) == 0
    assert acl.aclrtSetDevice(0) == 0
    assert acl.aclrtSynchronizeDevice() == 0
    assert_close(zero.read(out0), expected, np.float32)
    # with peer access 0 -> 1 enabled, device 0 runs on device 1's memory, correctly
    assert acl.aclrtDeviceEnablePeerAccess(1) == 0
    out0b = zero.empty((4, 8), np.float32)
    assert zero.run(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward,
                    zero.tensor(np.ones((), np.float32)), x0, t1, 2, False, out0b) == 0
    assert_close(zero.read(out0b), expected, np.float32)
    assert acl.aclrtDeviceDisablePeerAccess(1) == 0
    assert _kl_backward(zero, x0, t1, zero.empty((4, 8), np.float32)) == (INVALID, None)
    assert acl.aclrtSetDevice(1) == 0
    one.close()
    assert acl.aclrtSetDevice(0) == 0
    zero.close()


def test_plan_uses_the_sm_count_of_its_device(monkeypatch, rng):
    """Grids are sized from the SM count of the device that runs the plan, not device 0's."""
    from aclnn_gpu.device import cuda
    from aclnn_gpu.emulator import fakecupy
    from aclnn_gpu.plans.frozen import Launch
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "emulated")
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    monkeypatch.setitem(fakecupy.SM_COUNTS, 1, 1)        # device 1: one SM; device 0: fakecupy.SM_COUNT
    runtime.release_devices()
    seen: list[tuple[int, int]] = []
    launch = cuda.CudaKernelContext.launch

    def spy(self, file, expr, grid, block, args, shared_mem=0):
        seen.append((self.device.id, self.sm_count, tuple(grid)[0]))
        return launch(self, file, expr, grid, block, args, shared_mem)

    monkeypatch.setattr(cuda.CudaKernelContext, "launch", spy)
    run_frozen = cuda.CudaKernelContext.run_frozen

    def spy_frozen(self, frozen, workspace):   # a frozen launch's kernels, launched by run_frozen itself
        seen.extend((self.device.id, self.sm_count, step.grid[0]) for step in frozen.steps
                    if isinstance(step, Launch))
        return run_frozen(self, frozen, workspace)

    monkeypatch.setattr(cuda.CudaKernelContext, "run_frozen", spy_frozen)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    t = rng.random((256, 256)).astype(np.float32)
    try:
        grids = {}
        for device_id in (0, 1):
            assert acl.aclrtSetDevice(device_id) == 0
            seen.clear()
            got = Fn.kl_div_backward(np.ones((), np.float32), x, t, "sum")
            assert_close(got, -t.astype(np.float64), np.float32)
            assert seen and {(d, sm) for d, sm, _ in seen} == {(device_id, (fakecupy.SM_COUNT, 1)[device_id])}
            grids[device_id] = max(g for _, _, g in seen)
        assert grids[1] < grids[0], grids      # the one-SM device got the smaller grid
    finally:
        _back_to_device_0()


def test_functional_runs_on_the_threads_current_device(two, rng, monkeypatch):
    calls: list[int] = []
    for device_id in (0, 1):
        device = runtime.device_of(device_id)
        enqueue = device.enqueue
        monkeypatch.setattr(device, "enqueue", lambda *a, _e=enqueue, _i=device_id: (calls.append(_i), _e(*a))[1])
    x = rng.standard_normal((3, 5)).astype(np.float32)
    t = rng.random((3, 5)).astype(np.float32)

    def on_one():
        assert acl.aclrtSetDevice(1) == 0
        return Fn.kl_div(x, t, "none")
    np.testing.assert_allclose(_in_thread(on_one), kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
    assert calls == [1]
    np.testing.assert_allclose(Fn.kl_div(x, t, "none"), kl_div(x, t, 0, False), rtol=1e-5, atol=1e-6)
    assert calls == [1, 0]


def test_functional_refuses_arrays_on_two_gpus():
    """Routing by the arrays' GPU (`cuda:3` -> device 3), checked without a GPU on CuPy-like arrays."""
    def cupy_array(device_id):
        cls = type("ndarray", (), {"__module__": "cupy", "device": types.SimpleNamespace(id=device_id)})
        return cls()
    from aclnn_gpu.functional.arrays import arrays_gpu
    host = np.zeros(3, np.float32)
    import torch
    assert arrays_gpu("kl_div", [host, 1, "mean", torch.zeros(2), torch.float32]) is None
    assert arrays_gpu("kl_div", [host, cupy_array(3), cupy_array(3), None]) == 3
    with pytest.raises(acl.AclnnError) as refused:
        arrays_gpu("kl_div", [cupy_array(0), host, cupy_array(1)])
    assert refused.value.status == INVALID
    assert str(refused.value).endswith("kl_div: expected all arrays on the same device, but found at least two "
                                       "devices, cuda:0 and cuda:1")


# ------------------------------------------------------------------------------ the cuda kind's causes
def _fake_cupy(count=None, error=None, driver=12040, built_for=13000):
    def get_count():
        if error is not None:
            raise RuntimeError(error)
        return count
    rt = types.SimpleNamespace(getDeviceCount=get_count, driverGetVersion=lambda: driver,
                               runtimeGetVersion=lambda: built_for)
    return types.SimpleNamespace(__version__="14.0.0", cuda=types.SimpleNamespace(runtime=rt))


@pytest.mark.parametrize("cupy, cause", [
    (None, "CuPy cannot be imported (ModuleNotFoundError"),
    (_fake_cupy(error="cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"),
     "CuPy 14.0.0: cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version "
     "(driver supports: CUDA 12.4; CuPy's CUDA runtime: 13.0)"),
    (_fake_cupy(error="cudaErrorNoDevice: no CUDA-capable device is detected", driver=0),
     "cudaErrorNoDevice: no CUDA-capable device is detected (driver supports: none (no NVIDIA driver is loaded)"),
    (_fake_cupy(count=0), "CuPy 14.0.0: the CUDA driver reports no GPU (cudaGetDeviceCount = 0)"),
])
def test_cuda_failures_carry_cupys_cause(monkeypatch, caplog, cupy, cause):
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "cuda")
    runtime.release_devices()
    try:
        assert acl.aclrtSetDevice(0) == acl.ACL_ERROR_RT_NO_DEVICE
        message = acl.aclGetRecentErrMsg()
        assert message.startswith("aclrtSetDevice: ACLNN_GPU_DEVICE=cuda but CuPy cannot use a GPU here: ")
        assert cause in message, message
        with pytest.raises(acl.AclnnError, match="CuPy cannot use a GPU here"):
            Fn.kl_div(np.zeros(3, np.float32), np.zeros(3, np.float32))
        # auto: the cpu device, an INFO record with the same cause, no warning
        monkeypatch.setenv("ACLNN_GPU_DEVICE", "auto")
        runtime.release_devices()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with caplog.at_level(logging.INFO, logger="aclnn_gpu"):
                assert acl.aclrtSetDevice(0) == 0
        assert acl.current_device_kind() == "cpu"
        records = [r for r in caplog.records if r.name == "aclnn_gpu"]
        assert len(records) == 1 and records[0].levelno == logging.INFO
        assert "runs on the cpu device" in records[0].getMessage() and cause in records[0].getMessage()
    finally:
        runtime.release_devices()


def test_cached_pointer_checks_see_a_peer_devices_free_and_peer_access_disabled(two, rng):
    """Phase 2 skips re-checking pointers while nothing was freed (the registry generation): that must
    hold across devices, since a tensor may live in a peer device's memory."""
    x_host = rng.standard_normal((4, 8)).astype(np.float32)
    zero = DeviceArrays()
    assert acl.aclrtSetDevice(1) == 0
    one = DeviceArrays()
    t1 = one.tensor(rng.random((4, 8)).astype(np.float32))     # device 1's memory
    assert acl.aclrtSetDevice(0) == 0
    assert acl.aclrtDeviceEnablePeerAccess(1) == 0
    x0, out0 = zero.tensor(x_host), zero.empty((4, 8), np.float32)
    status, executor = _kl_backward(zero, x0, t1, out0)
    assert status == 0 and acl.aclSetAclOpExecutorRepeatable(executor) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == 0   # the cached check passes
    # peer access disabled: the cached check no longer holds
    assert acl.aclrtDeviceDisablePeerAccess(1) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == INVALID
    assert "is memory of device 1" in acl.aclGetRecentErrMsg()
    assert acl.aclrtDeviceEnablePeerAccess(1) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == 0
    assert acl.aclrtSynchronizeStream(zero.stream) == 0
    # the peer device frees the memory: refused, although nothing was freed on device 0
    assert acl.aclrtSetDevice(1) == 0
    assert acl.aclrtSynchronizeStream(one.stream) == 0
    assert len(one.pointers) == 1          # t1's allocation
    freed = one.pointers[0]
    assert acl.aclrtFree(freed) == 0
    one.pointers.remove(freed)
    assert acl.aclrtSetDevice(0) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == INVALID
    assert "not inside a live allocation" in acl.aclGetRecentErrMsg()
    assert acl.aclDestroyAclOpExecutor(executor) == 0
    assert acl.aclrtSetDevice(1) == 0
    one.close()
    assert acl.aclrtSetDevice(0) == 0
    zero.close()


def test_reset_of_a_peer_device_voids_cached_pointer_checks(two, rng):
    """aclrtResetDevice releases the device's memory: a tensor in it is refused afterwards, by a cached
    executor's phase 2 and by a new phase 1, although its checks passed before the reset."""
    zero = DeviceArrays()
    assert acl.aclrtSetDevice(1) == 0
    one = DeviceArrays()
    t1 = one.tensor(rng.random((4, 8)).astype(np.float32))
    assert acl.aclrtSynchronizeStream(one.stream) == 0
    assert acl.aclrtSetDevice(0) == 0
    assert acl.aclrtDeviceEnablePeerAccess(1) == 0
    x0, out0 = zero.tensor(rng.standard_normal((4, 8)).astype(np.float32)), zero.empty((4, 8), np.float32)
    status, executor = _kl_backward(zero, x0, t1, out0)
    assert status == 0 and acl.aclSetAclOpExecutorRepeatable(executor) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == 0
    assert acl.aclrtSynchronizeStream(zero.stream) == 0
    assert acl.aclrtResetDevice(1) == 0
    assert acl.aclnnKlDivBackward(None, 0, executor, zero.stream) == INVALID
    assert _kl_backward(zero, x0, t1, out0) == (INVALID, None)
    assert acl.aclDestroyAclOpExecutor(executor) == 0
    zero.close()


def test_a_workspace_off_8_byte_alignment_is_refused(two, rng):
    arrays = DeviceArrays()
    labels = np.zeros(3, np.int64)
    status, size, executor = acl.aclnnCrossEntropyLossGradGetWorkspaceSize(
        arrays.tensor(np.ones((), np.float32)), arrays.tensor(rng.standard_normal((3, 5)).astype(np.float32), strided=True),
        arrays.tensor(labels), None, None, None, "mean", -100, 0.0, 0.0, arrays.empty((3, 5), np.float32))
    assert status == 0, acl.aclGetRecentErrMsg()
    if size == 0:
        pytest.skip("no workspace on this device kind")
    status, base = acl.aclrtMalloc(size + 64, 0)
    assert status == 0
    assert acl.aclnnCrossEntropyLossGrad(base + 4, size, executor, arrays.stream) == INVALID
    assert "must be 8-byte aligned" in acl.aclGetRecentErrMsg()
    assert acl.aclnnCrossEntropyLossGrad(base + 8, size, executor, arrays.stream) == 0
    assert acl.aclrtSynchronizeStream(arrays.stream) == 0
    assert acl.aclrtFree(base) == 0
    arrays.close()


def test_fakecupy_refuses_a_stream_or_event_of_another_device(monkeypatch):
    """The stand-in's multi-device rules are CuPy's and CUDA's (CUDA Programming Guide, multi-device
    "Stream and Event Behavior"): a stream is made current only under its own device (CuPy's
    check_stream_device_match), a kernel is launched only on a stream of the current device, an event
    is recorded only on a stream of its own device (also through cudaEventRecordWithFlags); a copy may
    go to a stream of another device. A launch over 48 KiB of dynamic shared memory needs the
    function's max_dynamic_shared_size_bytes. cudaHostRegister without the portable flag locks the
    pages for the registering device's context only."""
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    cuda, runtime, cudart = fakecupy.cuda, fakecupy.cuda.runtime, fakecupy.cuda_bindings_runtime
    ran: list[int] = []
    kernel = fakecupy.RawKernel(types.SimpleNamespace(get_function=lambda expr: lambda *a, **k: ran.append(1)), "k")
    with cuda.Device(1):
        stream, event = cuda.Stream(), cuda.Event()
    memory, host = cuda.alloc(16), np.zeros(16, np.uint8)
    try:
        with pytest.raises(RuntimeError, match=r"created on \(1\) does not match with the current device \(0\)"):
            with stream:
                pass
        with pytest.raises(fakecupy.CUDADriverError, match="CUDA_ERROR_INVALID_HANDLE"):
            kernel((1,), (1,), (), stream=stream)
        other = cuda.Event()
        with pytest.raises(runtime.CUDARuntimeError, match="cudaErrorInvalidResourceHandle"):
            other.record(stream)
        assert cudart.cudaEventRecordWithFlags(other.ptr, stream.ptr, cudart.cudaEventRecordExternal) == \
            (cudart.cudaError_t.cudaErrorInvalidResourceHandle,)
        runtime.memcpyAsync(memory.ptr, host.ctypes.data, 16, 4, stream.ptr)   # copies may cross devices
        with cuda.Device(1):
            with stream:
                kernel((1,), (1,), ())
                with pytest.raises(fakecupy.CUDADriverError, match="CUDA_ERROR_INVALID_VALUE"):
                    kernel((1,), (1,), (), shared_mem=64 * 1024)
                kernel.max_dynamic_shared_size_bytes = 64 * 1024
                kernel((1,), (1,), (), shared_mem=64 * 1024)
            event.record(stream)
            stream.synchronize()
        assert ran == [1, 1] and event.done
        pages = np.zeros(2 * 4096, np.uint8)
        page = pages.ctypes.data + (-pages.ctypes.data) % 4096
        runtime.hostRegister(page, 4096, 0)   # not portable: device 0's context alone sees it locked
        try:
            assert runtime.pointerGetAttributes(page).type == runtime.memoryTypeHost
            with cuda.Device(1):
                assert runtime.pointerGetAttributes(page).type == runtime.memoryTypeUnregistered
        finally:
            runtime.hostUnregister(page)
    finally:
        stream.close()
