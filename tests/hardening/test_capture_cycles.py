"""Capture memory is bounded (docs/HARDENING.md, "Capture cycles"): 1,000 cycles of capture /
replay / aclmdlRIDestroy, each capture holding an operator plan (aclnnKlDivBackward) and a copy from
a host buffer, on the cpu and emulated devices. After a warm-up nothing may grow: the live operator
plans, the pinned host memory (fakecupy's page-locked allocations and the page-lock table of host
buffers), the allocation registry, the thread count, and RSS (within 20 MB). Each replay's result is
checked against the same call run directly. ACLNN_GPU_CAPTURE_CYCLES sets the cycles (default 1,000).
"""
from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.plans.plan import Plan
from aclnn_gpu.runtime import get_device
from support import use_device

from test_memory import rss_bytes

CYCLES = int(os.environ.get("ACLNN_GPU_CAPTURE_CYCLES", "1000"))
WARMUP = min(100, CYCLES // 4)
RSS_TOLERANCE = 20 << 20
H2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST
RELAXED = 2   # ACL_MODEL_RI_CAPTURE_MODE_RELAXED: the synchronous copies of the check may run beside it


def _ok(result):
    code = result[0] if isinstance(result, tuple) else result
    assert code == 0, acl.aclGetRecentErrMsg()
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def _live_plans() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, Plan))


def _pinned() -> tuple[int, int]:
    """(fakecupy's page-locked allocations, ranges in the device's page-lock table)."""
    pins = getattr(get_device(), "host_pins", None)
    return len(fakecupy.memory._pinned_allocations), len(getattr(pins, "_ranges", {}))


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_capture_replay_destroy_cycles_stay_flat(device, figures):
    use_device(device)
    _ok(acl.aclrtSetDevice(0))
    stream = _ok(acl.aclrtCreateStream())
    shape, n = [4, 8], 32
    rng = np.random.default_rng(0)
    grad, self_, target = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    ptrs, tensors = [], []
    for array in (grad, self_, target, np.zeros(shape, np.float32)):
        ptr = _ok(acl.aclrtMalloc(array.nbytes, 0))
        _ok(acl.aclrtMemcpy(ptr, array.nbytes, array, array.nbytes, H2D))
        ptrs.append(ptr)
        tensors.append(acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, ptr))
    # the reference: the same call run directly (tests/test_kl_div.py checks it against PyTorch)
    ret, _, executor = acl.aclnnKlDivBackwardGetWorkspaceSize(*tensors[:3], 2, False, tensors[3])
    assert ret == 0, acl.aclGetRecentErrMsg()
    _ok(acl.aclnnKlDivBackward(None, 0, executor, stream))
    _ok(acl.aclrtSynchronizeStream(stream))
    want = np.empty(shape, np.float32)
    _ok(acl.aclrtMemcpy(want, want.nbytes, ptrs[3], want.nbytes, D2H))
    _ok(acl.aclrtMemset(ptrs[3], want.nbytes, 0, want.nbytes))
    host = np.empty(n, np.float32)
    marks = []
    baseline = None
    for cycle in range(CYCLES):
        source = np.full(n, cycle, np.float32)   # a new host buffer each capture: pinned per model
        _ok(acl.aclmdlRICaptureBegin(stream, RELAXED))
        ret, size, executor = acl.aclnnKlDivBackwardGetWorkspaceSize(*tensors[:3], 2, False, tensors[3])
        assert ret == 0 and size == 0, acl.aclGetRecentErrMsg()
        _ok(acl.aclnnKlDivBackward(None, 0, executor, stream))
        _ok(acl.aclrtMemcpyAsync(ptrs[0], source.nbytes, source, source.nbytes, H2D, stream))
        model = _ok(acl.aclmdlRICaptureEnd(stream))
        _ok(acl.aclrtMemcpy(ptrs[0], grad.nbytes, grad, grad.nbytes, H2D))   # the replay's input
        _ok(acl.aclmdlRIExecuteAsync(model, stream))
        _ok(acl.aclrtSynchronizeStream(stream))
        if cycle % 97 == 0:
            out = np.empty(shape, np.float32)
            _ok(acl.aclrtMemcpy(out, out.nbytes, ptrs[3], out.nbytes, D2H))
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
            _ok(acl.aclrtMemcpy(host, host.nbytes, ptrs[0], host.nbytes, D2H))
            assert (host == cycle).all()   # the replay's copy of this cycle's host buffer
        _ok(acl.aclmdlRIDestroy(model))
        del model, executor, source
        if cycle + 1 == WARMUP:
            baseline = (_live_plans(), _pinned(), len(get_device().registry), threading.active_count(),
                        rss_bytes())
        if (cycle + 1) % (CYCLES // 4 or 1) == 0:
            marks.append((cycle + 1, _live_plans(), _pinned(), rss_bytes() >> 20))
    end = (_live_plans(), _pinned(), len(get_device().registry), threading.active_count(), rss_bytes())
    for t in tensors:
        acl.aclDestroyTensor(t)
    for p in ptrs:
        acl.aclrtFree(p)
    acl.aclrtDestroyStream(stream)
    assert baseline is not None
    assert end[0] <= baseline[0], f"live plans grew: {baseline[0]} -> {end[0]}"
    assert end[1] <= baseline[1], f"pinned memory grew: {baseline[1]} -> {end[1]}"
    assert end[2] <= baseline[2], f"registry grew: {baseline[2]} -> {end[2]}"
    assert end[3] <= baseline[3], f"threads grew: {baseline[3]} -> {end[3]}"
    growth = end[4] - baseline[4]
    assert growth < RSS_TOLERANCE, f"RSS grew {growth >> 20} MB over {CYCLES - WARMUP} cycles"
    figures(f"capture/replay/destroy on {device}: {CYCLES} cycles, after {WARMUP}: live plans {baseline[0]} -> "
            f"{end[0]}, pinned (allocations, page-locked ranges) {baseline[1]} -> {end[1]}, RSS growth "
            f"{growth / 2**20:+.1f} MB; marks (cycle, plans, pinned, RSS MB) {marks}")


def test_torch_capture_replay_release_cycles_stay_flat(figures):
    """The `aclnn_gpu.torch` capture path (the stand-in of PyTorch's CUDA side on the emulated device,
    tests/torch_gpu.py): 1,000 cycles of a CTC loss captured on a PyTorch stream (its per-sample table
    uploaded from a pinned buffer the capture keeps), replayed, and the graph dropped. What a capture
    keeps goes with its graph (a CUDA user object the graph holds; fakecupy's graph runs its destructor
    when the graph and its instance are gone), so after a warm-up the live plans, the pinned buffers
    still referenced, the captures held and RSS stay flat. Each checked replay equals PyTorch's own
    float64 CTC loss."""
    torch = pytest.importorskip("torch")
    from torch_gpu import Harness

    import aclnn_gpu.torch  # noqa: F401 - registers torch.ops.aclnn
    from aclnn_gpu.torch import stream as torch_stream
    from aclnn_gpu.device.emulated import emulator_unavailable_reason
    if emulator_unavailable_reason():
        pytest.skip(emulator_unavailable_reason())
    use_device("emulated")
    harness = Harness("emulated")
    standin = harness.standin
    aclnn = torch.ops.aclnn
    g = torch.Generator().manual_seed(7)
    lp = torch.randn(6, 2, 5, dtype=torch.float64, generator=g).log_softmax(-1)
    targets = torch.randint(1, 5, (2, 3), generator=g)
    lengths, target_lengths = [6, 5], [3, 2]
    want = torch.nn.functional.ctc_loss(lp, targets, lengths, target_lengths, 0, "none", False).float()
    lp32 = lp.float()

    def census() -> tuple[int, int, int, int]:
        gc.collect()
        return _live_plans(), len(standin.pinned_live), torch_stream.held_captures(), rss_bytes()

    side = harness.new_stream()
    marks, baseline = [], None
    try:
        with harness.stream(side):
            aclnn.ctc_loss(lp32, targets, lengths, target_lengths, 0, False)    # warm-up, outside a capture
            harness.synchronize(side)
            for cycle in range(CYCLES):
                side.cupy.begin_capture()
                out, _ = aclnn.ctc_loss(lp32, targets, lengths, target_lengths, 0, False)
                graph = side.cupy.end_capture()
                out.fill_(float("nan"))
                graph.launch(side.cupy)
                harness.synchronize(side)
                if cycle % 97 == 0:
                    torch.testing.assert_close(out, want, rtol=2e-5, atol=1e-6)
                del graph, out
                for log in (standin.alive, standin.pinned_copies, standin.allocations, standin.recorded,
                            harness.allocations, harness.recorded):
                    log.clear()   # the stand-in's own logs: PyTorch's allocators would have the memory back
                if cycle + 1 == WARMUP:
                    aclnn.ctc_loss(lp32, targets, lengths, target_lengths, 0, False)   # an eager call after
                    baseline = census()
                if (cycle + 1) % (CYCLES // 4 or 1) == 0:
                    marks.append((cycle + 1, *census()[:3], rss_bytes() >> 20))
            eager, _ = aclnn.ctc_loss(lp32, targets, lengths, target_lengths, 0, False)
            harness.synchronize(side)
            standin.alive.clear()
            end = census()
        torch.testing.assert_close(eager, want, rtol=2e-5, atol=1e-6)
    finally:
        harness.close()
    assert baseline is not None
    assert end[0] <= baseline[0], f"live plans grew: {baseline[0]} -> {end[0]}; marks {marks}"
    assert end[1] <= baseline[1], f"pinned buffers still referenced grew: {baseline[1]} -> {end[1]}; marks {marks}"
    assert end[2] <= baseline[2], f"captures held grew: {baseline[2]} -> {end[2]}; marks {marks}"
    growth = end[3] - baseline[3]
    assert growth < RSS_TOLERANCE, f"RSS grew {growth >> 20} MB over {CYCLES - WARMUP} cycles"
    figures(f"torch capture/replay/release on emulated: {CYCLES} cycles, after {WARMUP}: live plans {baseline[0]} "
            f"-> {end[0]}, pinned buffers {baseline[1]} -> {end[1]}, captures held {baseline[2]} -> {end[2]}, RSS "
            f"growth {growth / 2**20:+.1f} MB; marks (cycle, plans, pinned, held, RSS MB) {marks}")
