"""The rest of the runtime and meta API (runtime/: acl_base.py, devices.py, streams.py, memory.py;
meta/lists.py; the executor rebinding): the half conversions against PyTorch, element sizes,
versions, contexts, stream and event status, memory information, the copy kinds 5-7, float / bool
arrays and tensor / scalar lists, raw tensor addresses, aclSet{Input,Output}TensorAddr against
PyTorch's kl_div gradient, and the C layer's wording of Python messages."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

import aclnn_gpu as acl
from aclnn_gpu.executor import cache as executor_cache
from support import use_device

P = acl.ACL_ERROR_RT_PARAM_INVALID
INVALID, NULLPTR = acl.ACLNN_ERR_PARAM_INVALID, acl.ACLNN_ERR_PARAM_NULLPTR


@pytest.fixture(params=["cpu", "emulated"])
def device(request):
    use_device(request.param)
    assert acl.aclrtSetDevice(0) == 0
    return request.param


# ---------------------------------------------------------------------------- acl_base.h helpers
def test_half_conversions_match_torch():
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-9, 6, 2000),
                             [0.0, -0.0, 65504.0, 65520.0, -1e9, 6e-8, 2.9e-8, 3.1e-8, np.inf, -np.inf],
                             np.float32(1.0) + np.float32(2.0 ** -11) * np.arange(-3, 4)]).astype(np.float32)
    expected = torch.tensor(values).to(torch.float16).view(torch.int16).numpy().astype(np.uint16)
    assert [acl.aclFloatToFloat16(float(v)) for v in values] == expected.tolist()
    back = torch.tensor(expected.astype(np.int16)).view(torch.float16).to(torch.float32).numpy()
    got = np.array([acl.aclFloat16ToFloat(int(h)) for h in expected], np.float32)
    np.testing.assert_array_equal(got, back)
    assert np.isnan(acl.aclFloat16ToFloat(0x7E00)) and np.isnan(acl.aclFloat16ToFloat(acl.aclFloatToFloat16(np.nan)))


def test_data_type_sizes_match_torch():
    pairs = {acl.ACL_FLOAT: torch.float32, acl.ACL_FLOAT16: torch.float16, acl.ACL_BF16: torch.bfloat16,
             acl.ACL_DOUBLE: torch.float64, acl.ACL_INT8: torch.int8, acl.ACL_INT16: torch.int16,
             acl.ACL_INT32: torch.int32, acl.ACL_INT64: torch.int64, acl.ACL_UINT8: torch.uint8,
             acl.ACL_BOOL: torch.bool, acl.ACL_COMPLEX64: torch.complex64, acl.ACL_COMPLEX128: torch.complex128}
    for code, dtype in pairs.items():
        assert acl.aclDataTypeSize(code) == torch.empty(0, dtype=dtype).element_size(), code
    assert [acl.aclDataTypeSize(c) for c in (acl.ACL_STRING, acl.ACL_DT_UNDEFINED, 99, "x")] == [0, 0, 0, 0]


# ---------------------------------------------------------------------------- versions, platform, contexts
def test_version_soc_name_and_run_mode(device):
    """aclrtGetVersion answers the version acl/acl.h defines (ACL_MAJOR_VERSION ...)."""
    import re
    from aclnn_gpu.capi.table import INCLUDE_DIR
    header = (INCLUDE_DIR / "acl" / "acl.h").read_text()
    defined = tuple(int(re.search(rf"#define ACL_{part}_VERSION (\d+)", header).group(1))
                    for part in ("MAJOR", "MINOR", "PATCH"))
    assert acl.aclrtGetVersion() == (0, *defined)
    name = acl.aclrtGetSocName()
    assert name == "aclnn_gpu-cpu" if device == "cpu" else isinstance(name, str) and name
    assert acl.aclrtGetRunMode() == (0, acl.ACL_HOST)


def test_contexts(device):
    status, ctx = acl.aclrtCreateContext(0)
    assert status == 0 and acl.aclrtGetCurrentContext() == (0, ctx)
    assert acl.aclrtCreateContext(5)[0] == acl.ACL_ERROR_RT_INVALID_DEVICEID
    seen = {}

    def other_thread():
        seen["before"] = acl.aclrtGetCurrentContext()[0]   # a new thread has no context yet
        seen["set"] = acl.aclrtSetCurrentContext(ctx)
        seen["after"] = acl.aclrtGetCurrentContext()[1]
        seen["device"] = acl.aclrtGetDevice()

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert seen == {"before": acl.ACL_ERROR_RT_CONTEXT_NULL, "set": 0, "after": ctx, "device": (0, 0)}
    assert acl.aclrtDestroyContext(ctx) == 0
    assert acl.aclrtDestroyContext(ctx) == P and "already destroyed" in acl.aclGetRecentErrMsg()
    assert acl.aclrtSetCurrentContext(ctx) == P
    status, default = acl.aclrtGetCurrentContext()
    assert status == 0 and default is not ctx and default.default
    assert acl.aclrtGetCurrentContext()[1] is default                  # one default context per device
    assert acl.aclrtDestroyContext(default) == P and "default context" in acl.aclGetRecentErrMsg()
    assert acl.aclrtDestroyContext(None) == P and "nullptr" in acl.aclGetRecentErrMsg()
    assert acl.aclrtSetCurrentContext(object()) == P


# ---------------------------------------------------------------------------- streams and events
def _host_worker(stream):
    impl = stream.impl
    return getattr(impl, "worker", None) or impl.cupy.worker


def test_stream_query_follows_the_queue(device):
    status, stream = acl.aclrtCreateStream()
    assert status == 0 and acl.aclrtStreamQuery(stream) == (0, acl.ACL_STREAM_STATUS_COMPLETE)
    assert acl.aclrtStreamQuery(None) == (0, 0)
    gate = threading.Event()
    _host_worker(stream).submit(gate.wait)            # a task that runs until the gate opens
    status, event = acl.aclrtCreateEvent()
    assert acl.aclrtRecordEvent(event, stream) == 0
    assert acl.aclrtStreamQuery(stream) == (0, acl.ACL_STREAM_STATUS_NOT_READY)
    assert acl.aclrtQueryEvent(event) == (0, acl.ACL_EVENT_STATUS_NOT_READY)
    assert acl.aclrtQueryEventWaitStatus(event) == (0, acl.ACL_EVENT_WAIT_STATUS_NOT_READY)
    gate.set()
    assert acl.aclrtSynchronizeStreamWithTimeout(stream, -1) == 0
    assert acl.aclrtStreamQuery(stream) == (0, 0)
    assert acl.aclrtQueryEvent(event) == (0, 0) and acl.aclrtQueryEventWaitStatus(event) == (0, 0)
    assert acl.aclrtSynchronizeEventWithTimeout(event, 1000) == 0
    assert acl.aclrtResetEvent(event, stream) == 0
    for bad in (0, -2, 1.5, True):
        assert acl.aclrtSynchronizeStreamWithTimeout(stream, bad) == P
        assert "aclrtSynchronizeStreamWithTimeout: timeout" in acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeDeviceWithTimeout(-1) == 0
    assert acl.aclrtDestroyEvent(event) == 0 and acl.aclrtQueryEvent(event)[0] == P
    assert acl.aclrtDestroyStreamForce(stream) == 0
    assert acl.aclrtStreamQuery(stream)[0] == P and "destroyed" in acl.aclGetRecentErrMsg()
    assert acl.aclrtDestroyStreamForce(None) == P


def test_sys_param_aliases(device):
    assert acl.aclrtSetSysParamOpt(acl.ACL_OPT_DETERMINISTIC, 1) == 0
    assert acl.aclrtCtxGetSysParamOpt(acl.ACL_OPT_DETERMINISTIC) == (0, 1)
    assert acl.aclrtSetSysParamOpt(99, 1) == P and acl.aclGetRecentErrMsg().startswith("aclrtSetSysParamOpt:")


# ---------------------------------------------------------------------------- memory
def test_mem_info(device):
    # CANN's aclrtMemAttr (ACL_DDR_MEM 0 .. ACL_HBM_MEM_P2P_HUGE1G 11): acl_rt.h's enum; the Python
    # enum of that name holds the allocation-policy bits, so the values are written as numbers here
    status, free, total = acl.aclrtGetMemInfo(1)   # ACL_HBM_MEM
    assert status == 0 and 0 < free <= total
    assert total == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")   # host memory on cpu / emulated
    assert acl.aclrtGetMemInfo(12)[0] == P and acl.aclrtGetMemInfo(None)[0] == P


def test_memcpy_kinds_5_to_7(device):
    data = np.arange(16, dtype=np.float32)
    pointers = [acl.aclrtMalloc(data.nbytes, 0)[1] for _ in range(3)]
    a, b, c = pointers
    assert acl.aclrtMemcpy(a, data.nbytes, data, data.nbytes, acl.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) == 0
    assert acl.aclrtMemcpy(b, data.nbytes, a, data.nbytes, acl.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE) == 0
    assert acl.aclrtMemcpy(c, data.nbytes, b, data.nbytes, acl.ACL_MEMCPY_INTER_DEVICE_TO_DEVICE) == 0
    out = np.zeros_like(data)
    assert acl.aclrtMemcpy(out, out.nbytes, c, out.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(out, data)
    assert acl.aclrtMemcpy(a, data.nbytes, data, data.nbytes, 6) == P   # host source for a device-to-device kind
    assert "kind ACL_MEMCPY_INNER_DEVICE_TO_DEVICE needs device memory" in acl.aclGetRecentErrMsg() or \
        "must be a device address" in acl.aclGetRecentErrMsg()
    assert acl.aclrtMemcpy(b, data.nbytes, a, data.nbytes, 8) == P and "0..7" in acl.aclGetRecentErrMsg()
    assert acl.aclrtMemFlush(a, data.nbytes) == 0 and acl.aclrtMemInvalidate(a, data.nbytes) == 0
    assert acl.aclrtMemFlush(a, data.nbytes + 4096) == P
    status, cached = acl.aclrtMallocCached(10, 0)
    assert status == 0 and acl.aclrtFree(cached) == 0
    for ptr in pointers:
        assert acl.aclrtFree(ptr) == 0


@pytest.mark.parametrize("kind", ["to_device_and_back", "device_to_device"])
def test_memcpy2d_matches_numpy_slicing(device, kind):
    """Rows of `width` bytes between pitched layouts: the result is NumPy's slicing of the same bytes;
    a refused copy (width over a pitch, a range past the allocation) copies nothing."""
    rng = np.random.default_rng(5)
    rows, spitch, dpitch, width = 5, 48, 64, 40
    src = rng.integers(0, 255, rows * spitch, dtype=np.uint8)
    expected = np.zeros(rows * dpitch, np.uint8)
    expected.reshape(rows, dpitch)[:, :width] = src.reshape(rows, spitch)[:, :width]
    _, dev = acl.aclrtMalloc(rows * dpitch, 0)
    assert acl.aclrtMemset(dev, rows * dpitch, 0, rows * dpitch) == 0
    if kind == "to_device_and_back":
        assert acl.aclrtMemcpy2d(dev, dpitch, src, spitch, width, rows, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    else:
        _, staged = acl.aclrtMalloc(src.nbytes, 0)
        assert acl.aclrtMemcpy(staged, src.nbytes, src, src.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        _, stream = acl.aclrtCreateStream()
        assert acl.aclrtMemcpy2dAsync(dev, dpitch, staged, spitch, width, rows, acl.ACL_MEMCPY_DEVICE_TO_DEVICE,
                                      stream) == 0
        assert acl.aclrtSynchronizeStream(stream) == 0 and acl.aclrtDestroyStream(stream) == 0
        assert acl.aclrtFree(staged) == 0
    back = np.zeros(rows * dpitch, np.uint8)
    assert acl.aclrtMemcpy(back, back.nbytes, dev, back.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(back, expected)
    out = np.zeros(rows * spitch, np.uint8)         # and back into the source's pitch
    assert acl.aclrtMemcpy2d(out, spitch, dev, dpitch, width, rows, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(out.reshape(rows, spitch)[:, :width], src.reshape(rows, spitch)[:, :width])
    before = back.copy()
    assert acl.aclrtMemcpy2d(dev, dpitch, src, spitch, dpitch + 1, rows, 1) == P
    assert "width 65 exceeds dpitch 64" in acl.aclGetRecentErrMsg()
    assert acl.aclrtMemcpy2d(dev, dpitch, src, spitch, width, rows + 2, 1) == P   # src buffer too short
    assert acl.aclrtMemcpy2d(dev, dpitch * 2, src, spitch, width, rows, 1) == P   # past the allocation
    assert "aclrtMemcpy2d: dst" in acl.aclGetRecentErrMsg()
    assert acl.aclrtMemcpy(back, back.nbytes, dev, back.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(back, before)      # nothing was copied by the refused calls
    assert acl.aclrtMemcpy2d(dev, dpitch, src, spitch, width, 0, 1) == 0           # no rows: nothing to do
    assert acl.aclrtFree(dev) == 0


def test_pointer_attributes_device_status_and_ids(device):
    _, dev = acl.aclrtMalloc(100, 0)
    _, host = acl.aclrtMallocHost(100)
    status, kind, where, page = acl.aclrtPointerGetAttributes(dev + 50)
    assert (status, kind, where) == (0, acl.ACL_MEM_LOCATION_TYPE_DEVICE, 0) and page > 0
    assert acl.aclrtPointerGetAttributes(host)[:3] == (0, acl.ACL_MEM_LOCATION_TYPE_HOST, 0)
    assert acl.aclrtPointerGetAttributes(np.zeros(4).ctypes.data)[:2] == (0, 0)
    assert acl.aclrtPointerGetAttributes(None)[0] == P
    assert acl.aclrtQueryDeviceStatus(0) == (0, acl.ACL_RT_DEVICE_STATUS_NORMAL)
    assert acl.aclrtQueryDeviceStatus(9)[0] == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.aclrtDeviceGetBareTgid() == (0, os.getpid())
    streams = [acl.aclrtCreateStream()[1] for _ in range(2)]
    ids = [acl.aclrtStreamGetId(s)[1] for s in streams]
    assert ids[0] != ids[1] and 0 not in ids and acl.aclrtStreamGetId(streams[0]) == (0, ids[0])
    assert acl.aclrtStreamGetId(None) == (0, 0)
    for s in streams:
        assert acl.aclrtDestroyStream(s) == 0
    assert acl.aclrtStreamGetId(streams[0])[0] == P
    assert acl.aclrtFree(dev) == 0 and acl.aclrtFreeHost(host) == 0


def test_last_error_per_thread(device):
    acl.aclrtGetLastError(acl.ACL_RT_THREAD_LEVEL)                         # what earlier tests left: cleared
    assert acl.aclrtGetLastError(0) == 0
    assert acl.aclrtFree(12345) == P
    assert acl.aclrtMalloc(64, 0)[0] == 0                                  # a success keeps it
    seen = {}
    t = threading.Thread(target=lambda: seen.setdefault("other", acl.aclrtPeekAtLastError(0)))
    t.start()
    t.join()
    assert seen == {"other": 0}                                            # per thread
    assert acl.aclrtPeekAtLastError(0) == P and acl.aclrtPeekAtLastError(0) == P
    assert acl.aclrtGetLastError(0) == P and acl.aclrtGetLastError(0) == 0
    assert acl.aclrtGetLastError(1) == acl.ACL_ERROR_INVALID_PARAM and "ACL_RT_THREAD_LEVEL" in acl.aclGetRecentErrMsg()
    acl.aclrtGetLastError(0)


def test_failure_mode_and_timeouts_say_what_the_streams_do(device):
    """STOP_ON_FAILURE is what a stream does: after a failed task the next one does not run until the
    failure is reported; CONTINUE_ON_FAILURE and non-zero operator timeouts are refused as unsupported."""
    _, stream = acl.aclrtCreateStream()
    assert acl.aclrtSetStreamFailureMode(stream, 1) == 0            # ACL_STOP_ON_FAILURE (acl_rt.h's macro)
    assert acl.aclrtSetStreamFailureMode(stream, 0) == acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert "ACL_CONTINUE_ON_FAILURE" in acl.aclGetRecentErrMsg()
    assert acl.aclrtSetStreamFailureMode(stream, 2) == P
    ran = []

    def boom():
        raise RuntimeError("a failed task")
    worker = _host_worker(stream)
    worker.submit(boom)
    worker.submit(lambda: ran.append(1))          # after the failure: not run
    assert acl.aclrtSynchronizeStream(stream) != 0 and "a failed task" in acl.aclGetRecentErrMsg()
    assert ran == []
    for fn in (acl.aclrtSetOpWaitTimeout, acl.aclrtSetOpExecuteTimeOut, acl.aclrtSetOpExecuteTimeOutWithMs):
        assert fn(0) == 0
        assert fn(30) == acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT and "cannot be interrupted" in acl.aclGetRecentErrMsg()
        assert fn(-1) == P and fn(2 ** 32) == P
    assert acl.aclrtDestroyStream(stream) == 0


# ---------------------------------------------------------------------------- meta: arrays and lists
def test_float_and_bool_arrays():
    floats = acl.aclCreateFloatArray([0.1, 2.5, -np.inf])
    assert floats.values == (float(np.float32(0.1)), 2.5, -np.inf)     # stored as C floats
    assert acl.aclGetFloatArraySize(floats) == (0, 3)
    flags = acl.aclCreateBoolArray([True, 0, 1])
    assert flags.values == (True, False, True) and acl.aclGetBoolArraySize(flags) == (0, 3)
    assert acl.aclCreateFloatArray(None) is None and "nullptr" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateFloatArray(["x"]) is None and "not a float" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateBoolArray([None]) is None
    assert acl.aclDestroyFloatArray(floats) == 0 and acl.aclDestroyFloatArray(floats) == INVALID
    assert acl.aclGetFloatArraySize(floats)[0] == INVALID and acl.aclGetFloatArraySize(None)[0] == NULLPTR
    assert acl.aclDestroyBoolArray(None) == 0 and acl.aclDestroyBoolArray(floats) == INVALID
    ints = acl.aclCreateIntArray([1, 2])
    assert acl.aclGetIntArraySize(ints) == (0, 2)


def test_tensor_and_scalar_lists_take_their_members_over(device):
    """CANN's aclDestroyTensorList / aclDestroyScalarList: the list's members need no release of their
    own, so destroying the list destroys them (once each, a member named twice included)."""
    _, ptr = acl.aclrtMalloc(64, 0)
    t = acl.aclCreateTensor([2, 2], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [2, 2], ptr)
    s = acl.aclCreateScalar(1.5, acl.ACL_FLOAT)
    tensors, scalars = acl.aclCreateTensorList([t, t]), acl.aclCreateScalarList([s])
    assert tensors.values == (t, t) and acl.aclGetTensorListSize(tensors) == (0, 2)
    assert acl.aclGetScalarListSize(scalars) == (0, 1)
    assert acl.aclCreateTensorList([t, None]) is None and "value[1] is nullptr" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateTensorList([s]) is None and "not an aclTensor" in acl.aclGetRecentErrMsg()
    assert acl.aclDestroyTensorList(tensors) == 0 and t.destroyed
    assert acl.aclDestroyScalarList(scalars) == 0 and s.destroyed
    assert acl.aclDestroyTensor(t) == acl.ACLNN_ERR_PARAM_INVALID and "already destroyed" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateTensorList([t]) is None and "already destroyed" in acl.aclGetRecentErrMsg()
    assert acl.aclrtFree(ptr) == 0


def test_raw_tensor_address(device):
    _, ptr = acl.aclrtMalloc(64, 0)
    t = acl.aclCreateTensor([4], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [4], ptr)
    version = t.version
    assert acl.aclGetRawTensorAddr(t) == (0, ptr)
    assert acl.aclSetRawTensorAddr(t, ptr + 32) == 0 and t.data == ptr + 32 and t.version != version
    assert acl.aclSetRawTensorAddr(t, -1) == INVALID and acl.aclGetRawTensorAddr(None)[0] == NULLPTR
    assert acl.aclDestroyTensor(t) == 0 and acl.aclGetRawTensorAddr(t)[0] == INVALID
    assert acl.aclrtFree(ptr) == 0


# ---------------------------------------------------------------------------- rebinding an executor
def _device_array(values: np.ndarray) -> int:
    _, ptr = acl.aclrtMalloc(values.nbytes, 0)
    assert acl.aclrtMemcpy(ptr, values.nbytes, values, values.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    return ptr


def _read(ptr: int, n: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    assert acl.aclrtMemcpy(out, out.nbytes, ptr, out.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    return out


def _kl_grad(grad, target):
    """PyTorch float64: d/dself of kl_div(self, target, reduction="none") weighted by grad."""
    self_ = torch.zeros(len(target), dtype=torch.float64, requires_grad=True)
    loss = torch.nn.functional.kl_div(self_, torch.tensor(target, dtype=torch.float64), reduction="none")
    (loss * torch.tensor(grad, dtype=torch.float64)).sum().backward()
    return self_.grad.numpy()


@pytest.mark.parametrize("cached", [True, False])
def test_set_tensor_addr_replans_a_repeatable_executor(device, cached):
    rng = np.random.default_rng(3)
    grad, target, target2 = (rng.random(6).astype(np.float32) + 0.1 for _ in range(3))
    pointers = [_device_array(v) for v in (grad, np.zeros(6, np.float32), target, target2)]
    g, s, t1, t2 = pointers
    out1, out2 = _device_array(np.zeros(6, np.float32)), _device_array(np.zeros(6, np.float32))
    pointers += [out1, out2]

    def tensor(ptr):
        return acl.aclCreateTensor([6], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [6], ptr)

    grad_t, self_t, target_t, out_t = tensor(g), tensor(s), tensor(t1), tensor(out1)
    gws = acl.aclnnKlDivBackwardGetWorkspaceSize if cached else acl.aclnnKlDivBackwardGetWorkspaceSize.uncached
    status, size, ex = gws(grad_t, self_t, target_t, 0, False, out_t)
    assert status == 0 and size == 0
    assert acl.aclSetInputTensorAddr(ex, 2, target_t, t2) == INVALID and "not repeatable" in acl.aclGetRecentErrMsg()
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0

    def run():
        assert acl.aclnnKlDivBackward(None, 0, ex, None) == 0 and acl.aclrtSynchronizeStream(None) == 0

    run()
    np.testing.assert_allclose(_read(out1, 6), _kl_grad(grad, target), rtol=1e-6)
    misses = executor_cache.cache.misses
    assert acl.aclSetInputTensorAddr(ex, 2, target_t, t2) == 0 and target_t.data == t2
    assert acl.aclSetOutputTensorAddr(ex, 0, out_t, out2) == 0
    run()
    np.testing.assert_allclose(_read(out2, 6), _kl_grad(grad, target2), rtol=1e-6)
    np.testing.assert_allclose(_read(out1, 6), _kl_grad(grad, target), rtol=1e-6)   # untouched by the 2nd run
    if cached:   # the rebound tensor has a new version: the same arguments miss the cache
        assert gws(grad_t, self_t, target_t, 0, False, out_t)[0] == 0 and executor_cache.cache.misses == misses + 1
    for args, words in (((ex, 3, target_t, t2), "out of range"), ((ex, 0, target_t, t2), "gradOutput"),
                        ((ex, 1, out_t, out1), "input 1 (self)"), ((ex, 0, None, t2), "nullptr"),
                        ((ex, 2, target_t, None), "addr is nullptr"), ((None, 0, target_t, t2), "executor is null")):
        status = acl.aclSetInputTensorAddr(*args)
        assert status != 0, args
        assert words in acl.aclGetRecentErrMsg() or status == acl.ACLNN_ERR_INNER_NULLPTR, acl.aclGetRecentErrMsg()
    _, gone = acl.aclrtMalloc(24, 0)
    assert acl.aclrtFree(gone) == 0
    assert acl.aclSetInputTensorAddr(ex, 2, target_t, gone) == INVALID      # not live memory: refused ...
    assert target_t.data == t2                                               # ... and nothing changed
    run()
    np.testing.assert_allclose(_read(out2, 6), _kl_grad(grad, target2), rtol=1e-6)
    assert acl.aclDestroyAclOpExecutor(ex) == 0
    assert acl.aclSetInputTensorAddr(ex, 2, target_t, t2) == INVALID and "destroyed" in acl.aclGetRecentErrMsg()
    for obj in (grad_t, self_t, target_t, out_t):
        assert acl.aclDestroyTensor(obj) == 0
    for ptr in pointers:
        assert acl.aclrtFree(ptr) == 0


def test_aclnn_init_and_finalize(tmp_path):
    assert acl.aclnnInit(None) == 0 and acl.aclnnFinalize() == 0
    assert acl.aclnnInit(str(tmp_path / "missing.json")) == INVALID and "configPath" in acl.aclGetRecentErrMsg()


# ---------------------------------------------------------------------------- the C layer's words
def test_messages_in_c_words():
    pytest.importorskip("cffi")
    from aclnn_gpu.capi.rules import c_words
    assert c_words("aclDestroyTensor: UnknownHandle(0x1230) is not an aclTensor") == \
        "aclDestroyTensor: a handle that was never created (or destroyed long ago) is not an aclTensor"
    assert c_words("aclCreateTensor: tensorData None must be an address") == \
        "aclCreateTensor: tensorData nullptr must be an address"
    assert c_words("x: stream must be an aclrtStream or None, got NoneType") == \
        "x: stream must be an aclrtStream or nullptr, got nullptr"
    assert c_words("aclGetViewShape: tensor is null") == "aclGetViewShape: tensor is nullptr"
    assert c_words("aclrtFree: nullptr given") == "aclrtFree: nullptr given"


def test_the_c_memcpy_takes_another_devices_pointer_as_device_memory(monkeypatch):
    """The C ABI's aclrtMemcpy hands a side to the Python API as host memory (a buffer the CPU reads)
    only when no device of the process holds it: under ACL_MEMCPY_DEFAULT, a pointer of device 1 while
    device 0 is current stays an address (the CPU must not read a GPU's memory), a caller's host
    pointer becomes a buffer."""
    cffi = pytest.importorskip("cffi")
    from aclnn_gpu.capi.adapters import _memcpy2d_host_sides, _memcpy_host_sides
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    use_device("emulated")
    ffi = cffi.FFI()
    assert acl.aclrtSetDevice(1) == 0
    _, other = acl.aclrtMalloc(64, 0)
    assert acl.aclrtSetDevice(0) == 0
    host = ffi.new("char[64]")
    host_addr = int(ffi.cast("uintptr_t", host))
    default = acl.ACL_MEMCPY_DEFAULT
    args = _memcpy_host_sides(ffi, [host_addr, 64, other, 64, default])
    assert args[2] == other and not isinstance(args[0], int)
    args = _memcpy2d_host_sides(ffi, [other, 16, host_addr, 16, 16, 4, default])
    assert args[0] == other and not isinstance(args[2], int)
    assert acl.aclrtSetDevice(1) == 0 and acl.aclrtFree(other) == 0
