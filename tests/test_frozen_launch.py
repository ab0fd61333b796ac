"""The frozen launch (aclnn_gpu/plans/frozen.py): phase 1 records an operator's launcher once; phase 2
replays it with the workspace rebased. The replay must issue exactly the calls the launcher itself
would issue for the same workspace (kernel names, geometry, argument values and types, upload bytes,
GEMM arguments), and the recorder must refuse a step outside the reported workspace."""
from __future__ import annotations

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.plans.frozen import SENTINEL, Gemm, Recorder, freeze
from support import Session


class Calls:
    """A KernelContext that lists what it is asked to do."""

    def __init__(self, sm_count: int):
        self.sm_count = sm_count
        self.calls: list[tuple] = []

    def upload(self, dst, host):
        self.calls.append(("upload", dst, np.ascontiguousarray(host).tobytes()))

    def launch(self, file, expr, grid, block, args, shared_mem=0):
        self.calls.append(("launch", file, expr, tuple(grid), tuple(block),
                           tuple((type(a), int(a) if isinstance(a, (int, np.integer)) else float(a)) for a in args),
                           shared_mem))

    def gemm_strided_batched(self, *args, **kwargs):
        self.calls.append(("gemm", args, tuple(sorted(kwargs.items()))))

    def gemm_batched(self, *args, **kwargs):
        self.calls.append(("gemm_batched", args, tuple(sorted(kwargs.items()))))


@pytest.fixture
def session():
    s = Session("emulated")
    yield s
    s.close()


def _kl_backward(s):
    rng = np.random.default_rng(0)
    g = s.tensor(rng.standard_normal((3, 5)).astype(np.float32), strided=True)
    x = s.tensor(rng.standard_normal((3, 5)).astype(np.float32))
    t = s.tensor(rng.standard_normal((3, 5)).astype(np.float16), strided=True, offset=1)
    out = s.tensor(np.zeros((3, 5), np.float32), strided=True)
    return acl.aclnnKlDivBackwardGetWorkspaceSize(g, x, t, 3, False, out)


def _conv_tbc_backward(s):
    rng = np.random.default_rng(1)
    T, B, Cin, Cout, K, pad = 5, 2, 4, 4, 3, 1     # a strided grad: its staged copy in the workspace
    Tout = T + 2 * pad - K + 1
    mk = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    grad = s.tensor(mk(Tout, B, Cout), strided=True)
    inp, w, b = s.tensor(mk(T, B, Cin)), s.tensor(mk(K, Cin, Cout)), s.tensor(mk(Cout))
    gi, gw, gb = (s.tensor(np.zeros(a.shape, np.float32)) for a in (mk(T, B, Cin), mk(K, Cin, Cout), mk(Cout)))
    return acl.aclnnConvTbcBackwardGetWorkspaceSize(grad, inp, w, b, pad, 0, gi, gw, gb)


@pytest.mark.parametrize("build", [_kl_backward, _conv_tbc_backward])
def test_replay_issues_the_launchers_calls(session, build):
    status, ws, ex = build(session)
    assert status == 0, acl.aclGetRecentErrMsg()
    plan = ex.plan
    assert plan.frozen is not None and plan.frozen.rebased == (ws > 0)
    assert ws > 0  # strided operands: the workspace holds staging or tiling, so patches are exercised
    assert any(getattr(step, "patches", ()) or hasattr(step, "data") for step in plan.frozen.steps)
    if build is _conv_tbc_backward:   # GEMMs read the staged grad in the workspace
        assert any(isinstance(step, Gemm) and step.patches for step in plan.frozen.steps)
    work = session.malloc(ws)
    for base in (work, work + 16 * 7):   # any 16-byte aligned base
        live, replay = Calls(plan.frozen.sm_count), Calls(plan.frozen.sm_count)
        plan.launch_kernels(live, base)
        plan.run_kernels(replay, base)
        assert replay.calls == live.calls
    acl.aclDestroyAclOpExecutor(ex)


def test_misaligned_workspace_reruns_the_launcher(session):
    status, ws, ex = _kl_backward(session)
    assert status == 0
    plan = ex.plan
    work = session.malloc(ws + 8)
    live, replay = Calls(plan.frozen.sm_count), Calls(plan.frozen.sm_count)
    plan.launch_kernels(live, work + 8)
    plan.run_kernels(replay, work + 8)
    assert replay.calls == live.calls


class _Overrun:
    """A launcher that touches `nbytes` from the workspace base and points `pointer_offset` into it."""

    workspace_size = 256

    def __init__(self, nbytes: int, pointer_offset: int):
        self.nbytes, self.pointer_offset = nbytes, pointer_offset

    def launch_kernels(self, ctx, workspace):
        ctx.upload(workspace, np.zeros(self.nbytes, np.uint8))
        ctx.launch("f.cu", "k", (1,), (32,), (np.uint64(workspace + self.pointer_offset),))


def test_recorder_refuses_steps_outside_the_workspace():
    freeze(_Overrun(256, 256), 4)   # inside: an upload of the whole workspace, a pointer to its end
    with pytest.raises(AssertionError, match="outside the 256 bytes"):
        freeze(_Overrun(257, 0), 4)
    with pytest.raises(AssertionError, match="outside the 256 bytes"):
        freeze(_Overrun(16, 512), 4)


def test_recorder_rebases_only_workspace_pointers():
    recorder = Recorder(4, 1024)
    recorder.launch("f.cu", "k", (1,), (32,), (np.uint64(SENTINEL + 512), np.uint64(0x7F00_0000_1000), np.int64(3)))
    (launch,) = recorder.steps
    assert launch.patches == ((0, 512),)


class _PointerTable:
    """A launcher that uploads a GEMM pointer array: two workspace pointers and a caller's pointer."""

    workspace_size = 1024

    def launch_kernels(self, ctx, workspace):
        ctx.upload(workspace + 64, np.array([workspace + 512, 0x7F00_0000_1000, workspace], dtype=np.uint64))
        ctx.gemm_batched(False, False, 2, 2, 2, 1.0, workspace + 64, np.float32, 2, workspace + 72, np.float32, 2,
                         0.0, workspace + 80, np.float32, 2, 1)


def test_uploaded_workspace_pointers_are_rebased():
    frozen = freeze(_PointerTable(), 4)
    upload = frozen.steps[0]
    assert upload.patches == (0, 2) and list(upload.data) == [512, 0x7F00_0000_1000, 0]
    for base in (0x10_0000, 0x20_0040):
        live, replay = Calls(4), Calls(4)
        _PointerTable().launch_kernels(live, base)
        frozen.run_steps(replay, base)
        assert replay.calls == live.calls
        assert replay.calls[0][2] == np.array([base + 512, 0x7F00_0000_1000, base], np.uint64).tobytes()
        assert replay.calls[1][0] == "gemm_batched"
    assert list(upload.data) == [512, 0x7F00_0000_1000, 0]   # the record itself is never patched


def test_a_second_plan_with_the_same_launch_key_reuses_the_record(session):
    status, ws, first = _kl_backward(session)
    assert status == 0
    # same tensors, same arguments: the record is shared (phase 1 pays the recording once)
    plan = first.plan
    again = plan.with_frozen_launch(plan.frozen.sm_count, "sm_90")
    assert again.frozen is plan.frozen and again.launch_key() == plan.launch_key()
    # another output tensor (another address): a new record, whose launches write the new tensor
    rng = np.random.default_rng(0)
    g = session.tensor(rng.standard_normal((3, 5)).astype(np.float32), strided=True)
    x = session.tensor(rng.standard_normal((3, 5)).astype(np.float32))
    t = session.tensor(rng.standard_normal((3, 5)).astype(np.float16), strided=True, offset=1)
    out = session.tensor(np.zeros((3, 5), np.float32), strided=True)
    status, ws2, second = acl.aclnnKlDivBackwardGetWorkspaceSize(g, x, t, 3, False, out)
    assert status == 0 and ws2 == ws
    assert second.plan.launch_key() != plan.launch_key() and second.plan.frozen is not plan.frozen
    work = session.malloc(ws2)
    live, replay = Calls(4), Calls(4)
    second.plan.launch_kernels(live, work)
    second.plan.run_kernels(replay, work)
    assert replay.calls == live.calls
    # a different reduction changes the key too
    status, _, third = acl.aclnnKlDivBackwardGetWorkspaceSize(g, x, t, 1, False, out)
    assert status == 0 and third.plan.frozen is not second.plan.frozen


def test_plans_are_frozen_dataclasses_with_declared_kernel_files(session):
    import dataclasses
    for build in (_kl_backward, _conv_tbc_backward):
        status, _, ex = build(session)
        assert status == 0
        plan = ex.plan
        assert dataclasses.is_dataclass(plan) and plan.kernel_files
        with pytest.raises(dataclasses.FrozenInstanceError):
            plan.frozen = None
        launched = {step.file for step in plan.frozen.steps if hasattr(step, "expr")}
        assert launched <= set(plan.kernel_files)
        acl.aclDestroyAclOpExecutor(ex)


class _Int64Tiling(_PointerTable):
    """An int64 tiling table whose word happens to lie in the sentinel range: it is data, not a pointer."""

    def launch_kernels(self, ctx, workspace):
        ctx.upload(workspace, np.array([SENTINEL + 8, 3], np.int64))


def test_int64_tiling_words_are_never_rebased():
    frozen = freeze(_Int64Tiling(), 4)
    upload = frozen.steps[0]
    assert upload.patches == () and list(upload.data) == [SENTINEL + 8, 3]
    replay = Calls(4)
    frozen.run_steps(replay, 0x10_0000)
    assert replay.calls[0][2] == np.array([SENTINEL + 8, 3], np.int64).tobytes()


class _RecordingCublas:
    """The libcublas entry points a CublasHandle calls, as Python doubles: the GEMMs' C arguments kept."""

    def __init__(self):
        self.gemms: list[tuple] = []
        self.streams: list[int] = []

    def cublasCreate_v2(self, handle):
        return 0

    def cublasSetMathMode(self, handle, mode):
        return 0

    def cublasSetPointerMode_v2(self, handle, mode):
        return 0

    def cublasSetStream_v2(self, handle, stream):
        self.streams.append(stream)
        return 0

    def cublasGemmStridedBatchedEx(self, *arguments):
        self.gemms.append(arguments)
        return 0

    cublasGemmBatchedEx = cublasGemmStridedBatchedEx


def test_the_cuda_replay_program_follows_the_workspace_and_the_stream(monkeypatch):
    """The cuda device resolves a frozen launch once per (workspace, stream, cuBLAS handle) into its replay
    program and reuses it while they stay; a new workspace rebases the kernel's and the GEMM's workspace
    pointers, a new stream sets the handle's stream once and launches there."""

    from aclnn_gpu.device.cuda import CudaDevice, CudaKernelContext
    from aclnn_gpu.kernels import gemm
    from aclnn_gpu.plans.frozen import FrozenLaunch
    from bench import instant_cupy

    cublas = _RecordingCublas()
    monkeypatch.setattr(gemm, "_FUNCTIONS", cublas)
    recorder = Recorder(4, 1024)
    recorder.launch("f.cu", "k", (1,), (32,), (np.uint64(SENTINEL + 512), np.int64(3)))
    recorder.gemm_strided_batched(False, True, 4, 4, 4, 1.0, SENTINEL + 256, np.float32, 4, 0, 0x7F00_0000_1000,
                                  np.float32, 4, 0, 0.0, SENTINEL, np.float32, 4, 0, 1)
    frozen = FrozenLaunch(tuple(recorder.steps), 4, rebased=True)
    launched: list[tuple] = []

    def kernel(grid, block, args, *, shared_mem=0, stream=None):
        launched.append((args, stream))
    device = CudaDevice(instant_cupy)
    device._kernels[("f.cu", "k")] = kernel
    first, second = device.create_stream(), device.create_stream()

    def run(stream, workspace):   # one execute: the kernel and the GEMM it issued
        CudaKernelContext.run_frozen(stream.kernel_context, frozen, workspace)
        (args, on), gemm_args = launched[-1], cublas.gemms[-1]
        assert on is stream.cupy and [int(a) for a in args] == [workspace + 512, 3]
        return gemm_args

    for stream in (first, second):
        stream.kernel_context = CudaKernelContext(device, stream)
    w1, w2 = 0x1000_0000, 0x2000_0000
    before = run(first, w1)
    program = frozen.program[1]
    assert run(first, w1) == before and frozen.program[1] is program   # the same program: nothing rebuilt
    moved = run(first, w2)
    assert frozen.program[1] is not program
    # the C arguments (ctypes parameter objects) of A and C: workspace pointers; B: the caller's, unchanged
    a, b, c = (7, 11, 16)
    assert f"{w1 + 256:x}" in repr(before[a]) and f"{w2 + 256:x}" in repr(moved[a])
    assert f"{w1:x}" in repr(before[c]) and f"{w2:x}" in repr(moved[c])
    assert repr(before[b]) == repr(moved[b]) and "7f0000001000" in repr(moved[b])
    assert cublas.streams == [first.cupy.ptr]                      # set once for three executes on it
    run(second, w2)
    assert cublas.streams == [first.cupy.ptr, second.cupy.ptr]
    assert len(cublas.gemms) == 4 and len(launched) == 4
    from aclnn_gpu.plans import frozen as frozen_module
    monkeypatch.setitem(frozen_module._cache, ("a launch key",), frozen)
    device.close()   # a reset forgets the programs it made on cached frozen launches (they hold its streams)
    assert frozen.program == (None, ()) and frozen.programs == {}


def test_streams_taking_turns_on_one_frozen_launch_keep_their_replay_programs(monkeypatch):
    """Two streams (or threads) alternating on one cached launch each find their replay program again:
    a few are kept per frozen launch (PROGRAMS_KEPT, least recently used dropped first), not one slot
    rebuilt at every turn; each still launches on its own stream with its own workspace."""
    from aclnn_gpu.device.cuda import CudaDevice, CudaKernelContext
    from aclnn_gpu.plans import frozen as frozen_module
    from bench import instant_cupy

    recorder = Recorder(4, 1024)
    recorder.launch("f.cu", "k", (1,), (32,), (np.uint64(SENTINEL + 512), np.int64(3)))
    frozen = frozen_module.FrozenLaunch(tuple(recorder.steps), 4, rebased=True)
    launched: list[tuple] = []

    def kernel(grid, block, args, *, shared_mem=0, stream=None):
        launched.append((int(args[0]), stream))
    device = CudaDevice(instant_cupy)
    device._kernels[("f.cu", "k")] = kernel
    builds: list[int] = []
    make = CudaKernelContext._program
    monkeypatch.setattr(CudaKernelContext, "_program",
                        lambda self, f, workspace, handle: builds.append(workspace) or make(self, f, workspace, handle))
    streams = [device.create_stream() for _ in range(frozen_module.PROGRAMS_KEPT + 1)]
    contexts = [CudaKernelContext(device, stream) for stream in streams]
    workspaces = [0x1000_0000 * (k + 1) for k in range(len(streams))]

    def run(k):
        CudaKernelContext.run_frozen(contexts[k], frozen, workspaces[k])
        assert launched[-1] == (workspaces[k] + 512, streams[k].cupy)

    for _ in range(3):
        run(0)
        run(1)
    assert builds == workspaces[:2]                                 # one build each, then found again
    for k in range(2, frozen_module.PROGRAMS_KEPT + 1):
        run(k)                                                      # the fifth drops the least recently used
    assert len(frozen.programs) == frozen_module.PROGRAMS_KEPT
    run(1)
    run(0)                                                          # stream 0's was the least recently used
    assert builds == workspaces + [workspaces[0]]
    monkeypatch.setitem(frozen_module._cache, ("a launch key",), frozen)
    device.close()
    assert frozen.program == (None, ()) and frozen.programs == {}
