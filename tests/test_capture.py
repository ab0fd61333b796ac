"""ACL graph capture (aclmdlRICapture*, aclmdlRIExecuteAsync, aclmdlRIDestroy) on the cpu and
emulated devices: a captured training step of the ten operators replayed 100 times is bit-identical
to the direct calls, new inputs in the same buffers give new results, replays on another stream,
the capture rules (a table of refused calls with CANN's codes), the modes and threads, GetInfo's
states, the model's lifetime (memory it uses cannot be freed; executors and tensors may be
destroyed), and the cuda device's table uploads, which must not come from the reused upload ring."""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aclnn_gpu as acl
from aclnn_gpu.demo.samples import DeviceArrays

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/ is not installed with the package
from bench import capture as capture_bench  # noqa: E402
from bench import common  # noqa: E402
from bench.run import FAMILIES  # noqa: E402

F32 = np.dtype(np.float32)
E = acl.aclError
H2D, D2H, H2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST, acl.ACL_MEMCPY_HOST_TO_HOST
GLOBAL, THREAD_LOCAL, RELAXED = (acl.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL, acl.ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL,
                                 acl.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)


def ok(ret: Any) -> Any:
    status = ret[0] if isinstance(ret, tuple) else ret
    assert status == 0, acl.aclGetRecentErrMsg()
    return ret[1] if isinstance(ret, tuple) and len(ret) == 2 else ret


class RecordingBuffers(common.Buffers):
    """bench's Buffers that remembers every tensor it made and the host array it was filled from."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[Any, np.ndarray]] = []

    def tensor(self, array: Any) -> Any:
        array = np.ascontiguousarray(array)
        tensor = super().tensor(array)
        self.made.append((tensor, array))
        return tensor

    def empty(self, shape: Any, dtype: Any) -> Any:
        return self.tensor(np.zeros(tuple(shape), np.dtype(dtype)))


class TrainingStep:
    """Forward and backward of the five operators (bench's tiny shapes) fed by asynchronous copies
    from pinned host memory (aclrtMallocHost), with every tensor copied back into pinned host memory
    at the end: `issue(stream)` queues the whole step; `state()` reads the copied-back bytes."""

    def __init__(self, seed: int = 0) -> None:
        self.b = RecordingBuffers()
        rng = np.random.default_rng(seed)
        self.ops = []
        for fam in FAMILIES:
            p = fam.tiny()
            d = fam.data(p, F32, rng)
            self.ops += [fam.ours(self.b, d, "forward", p), fam.ours(self.b, d, "backward", p)]
        self.sizes = [max(array.nbytes, 1) for _, array in self.b.made]
        total = sum(self.sizes)
        self.host_in = ok(acl.aclrtMallocHost(total))
        self.host_out = ok(acl.aclrtMallocHost(total))
        self.offsets = np.cumsum([0] + self.sizes[:-1]).tolist()
        self.write_inputs([array for _, array in self.b.made])

    def write_inputs(self, arrays: list[np.ndarray]) -> None:
        for offset, array in zip(self.offsets, arrays):
            if array.nbytes:
                ok(acl.aclrtMemcpy(self.host_in + offset, array.nbytes, np.ascontiguousarray(array), array.nbytes,
                                   H2H))

    def perturbed_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Every floating-point tensor scaled by random factors (integer tensors, targets, kept)."""
        return [array * rng.uniform(0.5, 1.5, array.shape).astype(array.dtype) if array.dtype.kind == "f" else array
                for _, array in self.b.made]

    def issue(self, stream: Any) -> None:
        for (tensor, array), offset in zip(self.b.made, self.offsets):
            if array.nbytes:
                ok(acl.aclrtMemcpyAsync(tensor.data, array.nbytes, self.host_in + offset, array.nbytes, H2D, stream))
        for op in self.ops:
            ok(op.execute(op.work, op.ws, op.ex, stream))
        for (tensor, array), offset in zip(self.b.made, self.offsets):
            if array.nbytes:
                ok(acl.aclrtMemcpyAsync(self.host_out + offset, array.nbytes, tensor.data, array.nbytes, D2H, stream))

    def direct_then_captured(self) -> tuple[bytes, Any]:
        """The state after one step of direct calls, and the model of the same step captured."""
        stream = self.b.stream
        self.issue(stream)
        ok(acl.aclrtSynchronizeStream(stream))
        return self.state(), capture(stream, self.issue)

    def state(self) -> bytes:
        out = bytearray(sum(self.sizes))
        ok(acl.aclrtMemcpy(out, len(out), self.host_out, len(out), H2H))
        return bytes(out)

    def close(self) -> None:
        self.b.close()
        ok(acl.aclrtFreeHost(self.host_in))
        ok(acl.aclrtFreeHost(self.host_out))


def capture(stream: Any, issue: Any, mode: int = GLOBAL) -> Any:
    ok(acl.aclmdlRICaptureBegin(stream, mode))
    try:
        issue(stream)
    except BaseException:   # a failed step ends its capture: the teardown's frees must not meet it
        status, model = acl.aclmdlRICaptureEnd(stream)
        if status == 0:
            acl.aclmdlRIDestroy(model)
        raise
    return ok(acl.aclmdlRICaptureEnd(stream))


@pytest.fixture
def s(session):
    """The test's stream, memory and tensors (aclnn_gpu.demo.samples.DeviceArrays), released after it."""
    arrays = DeviceArrays()
    yield arrays
    arrays.close()


@pytest.fixture
def step(session):
    s = TrainingStep()
    yield s
    s.close()


def test_training_step_replayed_100_times_is_bit_identical(session, step):
    stream = step.b.stream
    direct, model = step.direct_then_captured()
    assert any(direct[o:o + 4] != b"\0\0\0\0" for o in step.offsets)   # the step wrote something
    ok(acl.aclrtMemset(step.host_out, sum(step.sizes), 0xFF, sum(step.sizes)))   # replay must rewrite it all
    for _ in range(100):
        ok(acl.aclmdlRIExecuteAsync(model, stream))
    ok(acl.aclrtSynchronizeStream(stream))
    assert step.state() == direct
    ok(acl.aclmdlRIDestroy(model))


def test_new_inputs_in_the_same_buffers_give_new_results(session, step, rng):
    stream = step.b.stream
    model = capture(stream, step.issue)
    for _ in range(3):
        step.write_inputs(step.perturbed_inputs(rng))
        ok(acl.aclmdlRIExecuteAsync(model, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        replayed = step.state()
        step.issue(stream)                      # the same inputs, by direct calls
        ok(acl.aclrtSynchronizeStream(stream))
        assert replayed == step.state()
    ok(acl.aclmdlRIDestroy(model))


def test_replay_on_another_stream(session, step):
    direct, model = step.direct_then_captured()
    other = ok(acl.aclrtCreateStream())
    for stream in (other, None):   # None: the default stream of the model's device
        ok(acl.aclrtMemset(step.host_out, sum(step.sizes), 0, sum(step.sizes)))
        ok(acl.aclmdlRIExecuteAsync(model, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        assert step.state() == direct
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyStream(other))


def test_captured_copies_use_the_callers_buffers_at_each_replay(session, s, rng):
    """A captured aclrtMemcpyAsync from / to Python buffer objects (NumPy arrays) reads and writes them
    when the replay runs, as a CUDA graph's copy node does: new contents give new results."""
    x = s.tensor(np.zeros((4, 8), np.float32))
    target = s.tensor(np.zeros((4, 8), np.float32))
    grad, out = s.tensor(np.ones((), np.float32)), s.tensor(np.zeros((4, 8), np.float32))
    status, workspace, size, executor = s.prepare(acl.aclnnKlDivBackwardGetWorkspaceSize, grad, x, target, 0,
                                                  False, out)
    assert status == 0
    host_in, host_out = np.zeros((4, 8), np.float32), np.full((4, 8), np.nan, np.float32)

    def issue(st: Any) -> None:
        ok(acl.aclrtMemcpyAsync(target.data, host_in.nbytes, host_in, host_in.nbytes, H2D, st))
        ok(acl.aclnnKlDivBackward(workspace, size, executor, st))
        ok(acl.aclrtMemcpyAsync(host_out, host_out.nbytes, out.data, host_out.nbytes, D2H, st))
    model = capture(s.stream, issue)
    for _ in range(3):
        host_in[...] = rng.random((4, 8), dtype=np.float32)
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        ok(acl.aclrtSynchronizeStream(s.stream))
        np.testing.assert_array_equal(host_out, -host_in)   # "none": -target * grad
    ok(acl.aclmdlRIDestroy(model))


PROGRAMS = st.lists(st.one_of(
    st.tuples(st.just("memset"), st.integers(0, 3), st.integers(0, 255)),
    st.tuples(st.just("copy"), st.integers(0, 3), st.integers(0, 3)),      # device buffer -> device buffer
    st.tuples(st.just("upload"), st.integers(0, 3), st.integers(0, 1)),    # host array -> device buffer
    st.tuples(st.just("download"), st.integers(2, 3), st.integers(0, 3)),  # device buffer -> host array
), min_size=1, max_size=10)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=PROGRAMS)
def test_any_program_of_copies_and_memsets_replays_as_it_runs(session, s, program):
    """Any sequence of asynchronous copies and memsets, run twice by direct calls or captured and
    replayed twice, leaves the same bytes in every device buffer and host array. (Uploads read host
    arrays 0-1 and downloads write 2-3: a direct upload reads its array when it is called, a
    replayed one when it runs, so an array written by a download in between would differ.)"""
    if not hasattr(s, "program_buffers"):
        s.program_buffers = [s.malloc(64) for _ in range(4)]
    buffers = s.program_buffers
    start = np.random.default_rng(len(program)).integers(0, 256, (8, 64)).astype(np.uint8)

    def run(replay: bool) -> list[bytes]:
        hosts = [row.copy() for row in start[4:]]
        for ptr, row in zip(buffers, start):
            ok(acl.aclrtMemcpy(ptr, 64, row, 64, H2D))

        def issue(stream: Any) -> None:
            for op, a, b in program:
                if op == "memset":
                    ok(acl.aclrtMemsetAsync(buffers[a], 64, b, 64, stream))
                elif op == "copy":
                    ok(acl.aclrtMemcpyAsync(buffers[b], 64, buffers[a], 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, stream))
                elif op == "upload":
                    ok(acl.aclrtMemcpyAsync(buffers[a], 64, hosts[b], 64, H2D, stream))
                else:
                    ok(acl.aclrtMemcpyAsync(hosts[a], 64, buffers[b], 64, D2H, stream))
        if replay:
            model = capture(s.stream, issue)
            for _ in range(2):
                ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        else:
            for _ in range(2):
                issue(s.stream)
        ok(acl.aclrtSynchronizeStream(s.stream))
        if replay:
            ok(acl.aclmdlRIDestroy(model))
        state = [bytes(h) for h in hosts]
        for ptr in buffers:
            out = bytearray(64)
            ok(acl.aclrtMemcpy(out, 64, ptr, 64, D2H))
            state.append(bytes(out))
        return state

    assert run(replay=True) == run(replay=False)


def test_captured_work_is_recorded_not_run(session, s):
    ptr = s.malloc(64)
    ok(acl.aclrtMemset(ptr, 64, 1, 64))
    model = capture(s.stream, lambda st: ok(acl.aclrtMemsetAsync(ptr, 64, 7, 64, st)))
    seen = bytearray(64)
    ok(acl.aclrtMemcpy(seen, 64, ptr, 64, D2H))
    assert seen == bytes([1]) * 64           # nothing ran at capture time
    ok(acl.aclmdlRIExecuteAsync(model, s.stream))
    ok(acl.aclrtSynchronizeStream(s.stream))
    ok(acl.aclrtMemcpy(seen, 64, ptr, 64, D2H))
    assert seen == bytes([7]) * 64
    ok(acl.aclmdlRIDestroy(model))


# ------------------------------------------------------------------------------------------ GetInfo, End
def test_get_info_states(session, s):
    status_of = lambda: acl.aclmdlRICaptureGetInfo(s.stream)  # noqa: E731
    assert status_of() == (0, acl.ACL_MODEL_RI_CAPTURE_STATUS_NONE, None)
    assert acl.aclmdlRICaptureGetInfo(None) == (0, acl.ACL_MODEL_RI_CAPTURE_STATUS_NONE, None)
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    ret, status, model = status_of()
    assert (ret, status) == (0, acl.ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE) and isinstance(model, acl.aclmdlRI)
    assert acl.aclmdlRIExecuteAsync(model, None) == E.ACL_ERROR_RT_MODEL_CAPTURED   # not ended yet
    assert acl.aclmdlRIDestroy(model) == E.ACL_ERROR_RT_MODEL_CAPTURED
    assert acl.aclrtSynchronizeStream(s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURED
    assert status_of() == (0, acl.ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED, model)
    ret, none = acl.aclmdlRICaptureEnd(s.stream)
    assert (ret, none) == (E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, None)
    assert "aclrtSynchronizeStream" in acl.aclGetRecentErrMsg()
    assert status_of() == (0, acl.ACL_MODEL_RI_CAPTURE_STATUS_NONE, None)
    ok(acl.aclrtSynchronizeStream(s.stream))     # a normal stream again
    ret, model = acl.aclmdlRICaptureEnd(s.stream)
    assert (ret, model) == (E.ACL_ERROR_RT_STREAM_NOT_CAPTURED, None)


def test_an_empty_capture_replays_nothing(session, s):
    model = capture(s.stream, lambda st: None)
    ok(acl.aclmdlRIExecuteAsync(model, s.stream))
    ok(acl.aclrtSynchronizeStream(s.stream))
    ok(acl.aclmdlRIDestroy(model))


# ------------------------------------------------------------------------------------------ the rules
def _refusals(s: DeviceArrays, ptr: int, event: Any) -> list[tuple[str, Any, int, bool]]:
    """(name, call, expected code, whether the capture is invalidated) while s.stream captures in GLOBAL mode."""
    host = np.zeros(16, np.uint8)
    return [
        ("synchronous aclrtMemcpy", lambda: acl.aclrtMemcpy(ptr, 16, host, 16, H2D),
         E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, False),
        ("synchronous aclrtMemset", lambda: acl.aclrtMemset(ptr, 16, 0, 16), E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
         False),
        ("aclrtMalloc", lambda: acl.aclrtMalloc(16, 0), E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, False),
        ("aclrtMallocHost", lambda: acl.aclrtMallocHost(16), E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, False),
        ("aclrtFree", lambda: acl.aclrtFree(ptr), E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, False),
        ("begin twice", lambda: acl.aclmdlRICaptureBegin(s.stream, GLOBAL), E.ACL_ERROR_RT_STREAM_CAPTURED, False),
        ("destroy the capturing stream", lambda: acl.aclrtDestroyStream(s.stream), E.ACL_ERROR_RT_STREAM_CAPTURED,
         False),
        ("aclrtSynchronizeStream of the capturing stream", lambda: acl.aclrtSynchronizeStream(s.stream),
         E.ACL_ERROR_RT_STREAM_CAPTURED, True),
        ("aclrtSynchronizeDevice", acl.aclrtSynchronizeDevice, E.ACL_ERROR_RT_STREAM_CAPTURED, True),
        ("query an event recorded in the capture", lambda: (acl.aclrtRecordEvent(event, s.stream),
                                                            acl.aclrtQueryEventStatus(event)[0])[1],
         E.ACL_ERROR_RT_EVENT_CAPTURED, True),
        ("synchronize an event recorded in the capture", lambda: (acl.aclrtRecordEvent(event, s.stream),
                                                                  acl.aclrtSynchronizeEvent(event))[1],
         E.ACL_ERROR_RT_EVENT_CAPTURED, True),
        ("wait in the capture for an event recorded outside it", lambda: acl.aclrtStreamWaitEvent(s.stream, event),
         E.ACL_ERROR_RT_CAPTURE_DEPENDENCY, True),
        ("another stream waits for an event of the capture", lambda: (acl.aclrtRecordEvent(event, s.stream),
                                                                      acl.aclrtStreamWaitEvent(None, event))[1],
         E.ACL_ERROR_STREAM_CAPTURE_CONFLICT, True),
    ]


@pytest.mark.parametrize("index", range(13))
def test_capture_rules_refused(session, s, index):
    ptr = s.malloc(64)
    event = ok(acl.aclrtCreateEvent())
    ok(acl.aclrtRecordEvent(event, None))
    ok(acl.aclrtSynchronizeEvent(event))
    name, call, code, invalidates = _refusals(s, ptr, event)[index]
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    ok(acl.aclrtMemsetAsync(ptr, 64, 3, 64, s.stream))
    result = call()
    assert (result[0] if isinstance(result, tuple) else result) == code, (name, acl.aclGetRecentErrMsg())
    message = acl.aclGetRecentErrMsg()
    assert message.startswith("acl") and ("captur" in message or "model" in message), message
    ret, model = acl.aclmdlRICaptureEnd(s.stream)
    if invalidates:
        assert (ret, model) == (E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, None), name
    else:
        assert ret == 0, (name, acl.aclGetRecentErrMsg())
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        ok(acl.aclrtSynchronizeStream(s.stream))
        ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyEvent(event))


def test_work_after_an_invalidation_is_refused(session, s):
    ptr = s.malloc(64)
    ok(acl.aclmdlRICaptureBegin(s.stream, RELAXED))
    assert acl.aclrtSynchronizeStream(s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURED
    assert acl.aclrtMemsetAsync(ptr, 64, 0, 64, s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    assert acl.aclmdlRICaptureEnd(s.stream)[0] == E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED


def test_bad_arguments(session, s):
    assert acl.aclmdlRICaptureBegin(None, GLOBAL) == E.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT
    for mode in (3, -1, True, "0", None):
        assert acl.aclmdlRICaptureBegin(s.stream, mode) == E.ACL_ERROR_RT_PARAM_INVALID, mode
    assert acl.aclmdlRICaptureBegin("stream", GLOBAL) == E.ACL_ERROR_RT_PARAM_INVALID
    assert acl.aclmdlRICaptureEnd(None) == (E.ACL_ERROR_RT_STREAM_NOT_CAPTURED, None)
    for bad in (None, 0, "model", s.stream):
        assert acl.aclmdlRIExecuteAsync(bad, s.stream) == E.ACL_ERROR_RT_PARAM_INVALID
        assert acl.aclmdlRIDestroy(bad) == E.ACL_ERROR_RT_PARAM_INVALID
    model = capture(s.stream, lambda st: None)
    assert acl.aclmdlRIExecuteAsync(model, "stream") == E.ACL_ERROR_RT_PARAM_INVALID
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    assert acl.aclmdlRIExecuteAsync(model, s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURED   # no nested graphs
    ok(acl.aclmdlRIDestroy(ok(acl.aclmdlRICaptureEnd(s.stream))))
    ok(acl.aclmdlRIDestroy(model))
    assert acl.aclmdlRIDestroy(model) == E.ACL_ERROR_RT_PARAM_INVALID
    assert acl.aclmdlRIExecuteAsync(model, s.stream) == E.ACL_ERROR_RT_PARAM_INVALID
    assert "destroyed" in acl.aclGetRecentErrMsg()


# ------------------------------------------------------------------------------------------ modes and threads
def _in_thread(fn: Any) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the call did not return within 60 s"
    return out[0]


@pytest.mark.parametrize("mode, here, elsewhere", [
    (GLOBAL, E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT),
    (THREAD_LOCAL, E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, 0),
    (RELAXED, 0, 0),
])
def test_modes_decide_which_threads_may_make_unsafe_calls(session, s, mode, here, elsewhere):
    ptr = s.malloc(64)
    ok(acl.aclmdlRICaptureBegin(s.stream, mode))
    assert acl.aclrtMemset(ptr, 64, 0, 64) == here
    assert _in_thread(lambda: acl.aclrtMemset(ptr, 64, 0, 64)) == elsewhere
    ret, extra = acl.aclrtMalloc(16, 0)
    assert ret == here
    if extra:
        ok(acl.aclrtFree(extra))
    model = ok(acl.aclmdlRICaptureEnd(s.stream))   # a mode refusal leaves the capture valid (as CANN)
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtMemset(ptr, 64, 0, 64))          # allowed again once the capture ended


@pytest.mark.parametrize("mode, code", [(GLOBAL, E.ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD),
                                        (THREAD_LOCAL, E.ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD), (RELAXED, 0)])
def test_end_from_another_thread(session, s, mode, code):
    ok(acl.aclmdlRICaptureBegin(s.stream, mode))
    ret, model = _in_thread(lambda: acl.aclmdlRICaptureEnd(s.stream))
    assert ret == code
    if ret:
        model = ok(acl.aclmdlRICaptureEnd(s.stream))   # still active: its own thread ends it
    ok(acl.aclmdlRIDestroy(model))


def test_captures_on_two_streams_from_two_threads(session):
    """Each thread captures its own stream (THREAD_LOCAL) and replays it: no interference."""
    results: dict[int, bytes] = {}

    def worker(value: int) -> None:
        ok(acl.aclrtSetDevice(0))
        s = DeviceArrays()
        try:
            ptr = s.malloc(256)
            model = capture(s.stream, lambda st: ok(acl.aclrtMemsetAsync(ptr, 256, value, 256, st)), THREAD_LOCAL)
            ok(acl.aclmdlRIExecuteAsync(model, s.stream))
            ok(acl.aclrtSynchronizeStream(s.stream))
            ok(acl.aclmdlRIDestroy(model))
            seen = bytearray(256)
            ok(acl.aclrtMemcpyAsync(seen, 256, ptr, 256, D2H, s.stream))
            ok(acl.aclrtSynchronizeStream(s.stream))
            results[value] = bytes(seen)
        finally:
            s.close()

    threads = [threading.Thread(target=worker, args=(v,)) for v in (5, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive()
    assert results == {5: bytes([5]) * 256, 9: bytes([9]) * 256}


def test_a_device_reset_ends_its_captures(session):
    """aclrtResetDevice while a GLOBAL capture is in progress: the capture is gone with its stream, and
    allocations are allowed again (emulated: the device ends the capture before its deviceSynchronize,
    which fakecupy refuses during a capture as CUDA does)."""
    s = DeviceArrays()
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    assert acl.aclrtMalloc(16, 0)[0] == E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT
    ok(acl.aclrtResetDevice(0))
    ok(acl.aclrtSetDevice(0))
    ok(acl.aclrtFree(ok(acl.aclrtMalloc(16, 0))))
    assert acl.aclmdlRICaptureEnd(s.stream)[0] == E.ACL_ERROR_RT_PARAM_INVALID   # the stream's device was reset
    assert "reset" in acl.aclGetRecentErrMsg()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork() is POSIX only")
def test_a_fork_child_does_not_inherit_the_parents_capture(session, s):
    """A child forked while the parent captures in GLOBAL mode may allocate (its runtime is clean); on
    cuda it is refused for the reason CUDA gives (a forked child cannot use its parent's CUDA), never
    for the parent's capture. Bounded: the child answers within 120 s or the test fails."""
    import multiprocessing
    fork = multiprocessing.get_context("fork")
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    assert acl.aclrtMalloc(16, 0)[0] == E.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT
    reader, writer = fork.Pipe(duplex=False)

    def child() -> None:
        ret, ptr = acl.aclrtMalloc(16, 0)
        writer.send((int(ret), acl.aclGetRecentErrMsg() if ret else ""))
    process = fork.Process(target=child, daemon=True)
    process.start()
    writer.close()
    try:
        assert reader.poll(120), "the forked child did not answer within 120 s"
        ret, message = reader.recv()
        if session.kind == "cuda":
            assert ret == E.ACL_ERROR_RT_NO_DEVICE and "fork" in message and "captur" not in message, message
        else:
            assert (ret, message) == (0, "")
    finally:
        process.join(120)
        if process.is_alive():
            process.kill()
    ok(acl.aclmdlRIDestroy(ok(acl.aclmdlRICaptureEnd(s.stream))))


# ------------------------------------------------------------------------------------------ events in a capture
def test_events_recorded_and_waited_in_a_capture(session, s):
    ptr = s.malloc(64)
    event = ok(acl.aclrtCreateEvent())

    def issue(st: Any) -> None:
        ok(acl.aclrtMemsetAsync(ptr, 64, 4, 64, st))
        ok(acl.aclrtRecordEvent(event, st))
        ok(acl.aclrtStreamWaitEvent(st, event))   # recorded in the same capture: allowed
    model = capture(s.stream, issue)
    ok(acl.aclrtSynchronizeEvent(event))          # never replayed yet: complete, never a hang
    ok(acl.aclmdlRIExecuteAsync(model, s.stream))
    ok(acl.aclrtSynchronizeEvent(event))          # the replay's record
    seen = bytearray(64)
    ok(acl.aclrtMemcpy(seen, 64, ptr, 64, D2H))
    assert seen == bytes([4]) * 64
    assert acl.aclrtQueryEventStatus(event) == (0, acl.ACL_EVENT_RECORDED_STATUS_COMPLETE)

    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyEvent(event))


def test_a_replay_queued_while_another_runs_its_record_and_wait(session, s):
    """A replay re-arms the marks of the events its capture recorded when it is queued: one queued while
    an earlier replay is between its record and its wait of the same event must not hang it."""
    if session.kind == "cuda":
        pytest.skip("holds the replay with a host wait captured on the stream's worker (cpu and emulated)")
    event = ok(acl.aclrtCreateEvent())
    reached, between = threading.Event(), threading.Event()
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    ok(acl.aclrtRecordEvent(event, s.stream))
    _queue_host_task(s.stream, lambda: (reached.set(), between.wait(60)))   # captured: the replay stops here
    ok(acl.aclrtStreamWaitEvent(s.stream, event))
    model = ok(acl.aclmdlRICaptureEnd(s.stream))

    def replays() -> int:
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        assert reached.wait(60)                          # the first replay is between its record and its wait
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))   # re-arms the event's marks
        between.set()
        return int(acl.aclrtSynchronizeStream(s.stream))
    try:
        assert _in_thread(replays) == 0
    finally:   # on a failure, free the worker that waits (else the stream's teardown would hang too)
        between.set()
        impl = event.impl
        (impl.mark if hasattr(impl, "mark") else impl.cupy.mark).complete()
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyEvent(event))


# ------------------------------------------------------------------------------------------ lifetime
def test_memory_of_a_live_model_cannot_be_freed(session):
    s = DeviceArrays()
    status, ptr = acl.aclrtMalloc(64, 0)
    assert status == 0
    try:
        model = capture(s.stream, lambda st: ok(acl.aclrtMemsetAsync(ptr, 64, 1, 64, st)))
        assert acl.aclrtFree(ptr) == E.ACL_ERROR_RT_MEMORY_FREE
        assert "aclmdlRIDestroy" in acl.aclGetRecentErrMsg()
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))   # the memory is still there
        ok(acl.aclrtSynchronizeStream(s.stream))
        ok(acl.aclmdlRIDestroy(model))
        ok(acl.aclrtFree(ptr))
    finally:
        s.close()


def test_a_failed_capture_keeps_no_memory(session):
    s = DeviceArrays()
    status, ptr = acl.aclrtMalloc(64, 0)
    try:
        ok(acl.aclmdlRICaptureBegin(s.stream, RELAXED))
        ok(acl.aclrtMemsetAsync(ptr, 64, 1, 64, s.stream))
        assert acl.aclrtFree(ptr) == E.ACL_ERROR_RT_MEMORY_FREE    # held by the capture in progress
        assert acl.aclrtSynchronizeStream(s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURED
        assert acl.aclmdlRICaptureEnd(s.stream)[0] == E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
        ok(acl.aclrtFree(ptr))
    finally:
        s.close()


def test_a_capture_the_device_fails_to_end_is_invalidated(session, s, monkeypatch):
    """When the device itself cannot end the capture (CUDA invalidated it: e.g. work on the legacy
    stream), End answers 507903 with the device's reason, and the memory is free again."""
    ptr = s.malloc(64)
    device = s.stream.device
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    ok(acl.aclrtMemsetAsync(ptr, 64, 1, 64, s.stream))
    real = device.end_capture

    def failing(impl: Any) -> Any:
        real(impl)
        raise RuntimeError("cudaErrorStreamCaptureInvalidated")
    monkeypatch.setattr(device, "end_capture", failing)
    assert acl.aclmdlRICaptureEnd(s.stream) == (E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, None)
    assert "cudaErrorStreamCaptureInvalidated" in acl.aclGetRecentErrMsg()
    monkeypatch.undo()
    ok(acl.aclrtFree(ptr))
    s.pointers.remove(ptr)


def test_destroyed_executors_and_tensors_still_replay(session):
    """The model keeps the plans it captured: destroying the executors and tensors after the capture
    changes nothing to its replays (the device memory itself stays: aclrtFree is refused)."""
    step = TrainingStep(seed=3)
    try:
        stream = step.b.stream
        direct, model = step.direct_then_captured()
        for op in step.ops:
            op.close()                                   # aclDestroyAclOpExecutor
        for tensor, _ in step.b.made:
            ok(acl.aclDestroyTensor(tensor))
        step.b.session.tensors = []
        ok(acl.aclrtMemset(step.host_out, sum(step.sizes), 0, sum(step.sizes)))
        ok(acl.aclmdlRIExecuteAsync(model, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        assert step.state() == direct
        ok(acl.aclmdlRIDestroy(model))
    finally:
        step.close()


def test_destroy_while_a_replay_is_queued(session, s):
    if session.kind == "cuda":
        pytest.skip("holds the stream with a host wait queued on its worker thread (cpu and emulated)")
    ptr = s.malloc(64)
    model = capture(s.stream, lambda st: ok(acl.aclrtMemsetAsync(ptr, 64, 2, 64, st)))
    blocker = threading.Event()
    # hold the replay's stream behind a host wait queued before it (cpu / emulated workers)
    _queue_host_task(s.stream, lambda: blocker.wait(60))
    ok(acl.aclmdlRIExecuteAsync(model, s.stream))
    assert acl.aclmdlRIDestroy(model) == E.ACL_ERROR_RT_MODEL_RUNNING
    blocker.set()
    ok(acl.aclrtSynchronizeStream(s.stream))
    ok(acl.aclmdlRIDestroy(model))


def _queue_host_task(stream: Any, task: Any) -> None:
    """Queue a host function on the stream's worker thread (cpu: impl.worker; emulated: impl.cupy.worker)."""
    impl = stream.impl
    worker = getattr(impl, "worker", None) or impl.cupy.worker
    worker.submit(task)


def test_a_model_replays_only_on_its_own_device(session, monkeypatch):
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    from support import use_device
    use_device(session.kind)
    if acl.aclrtGetDeviceCount()[1] < 2:   # cuda: the GPUs present
        pytest.skip("one device only")
    s0 = DeviceArrays()
    try:
        ptr = s0.malloc(64)
        model = capture(s0.stream, lambda st: ok(acl.aclrtMemsetAsync(ptr, 64, 1, 64, st)))
        ok(acl.aclrtSetDevice(1))
        other = ok(acl.aclrtCreateStream())
        assert acl.aclmdlRIExecuteAsync(model, other) == E.ACL_ERROR_RT_STREAM_CONTEXT
        assert "device 0" in acl.aclGetRecentErrMsg()
        ok(acl.aclmdlRIExecuteAsync(model, None))       # None: the model's own device's default stream
        ok(acl.aclrtDestroyStream(other))
        ok(acl.aclrtSetDevice(0))
        ok(acl.aclrtSynchronizeDevice())
        ok(acl.aclmdlRIDestroy(model))
    finally:
        s0.close()


# ------------------------------------------------------------------------------------------ cuda code path uploads
def test_captured_uploads_do_not_come_from_the_reused_ring():
    """emulated (the cuda device's code): a captured plan's tiling tables are copied from pinned
    buffers the model owns; 300 later direct uploads of other shapes rewrite every ring slot (256),
    and the replay still gives the captured shapes' results."""
    from support import use_device
    use_device("emulated")
    step = TrainingStep(seed=5)
    others = common.Buffers()
    try:
        stream = step.b.stream
        direct, model = step.direct_then_captured()
        assert model.capture.keep, "no table upload was captured: the test would prove nothing"
        rng = np.random.default_rng(7)
        ctc = next(fam for fam in FAMILIES if fam.name == "CtcLoss")   # tiny CTC plans upload a table each
        p = ctc.emulated(0.0)   # another shape: other tables through the same ring slots
        d = ctc.data(p, F32, rng)
        ops = [ctc.ours(others, d, "forward", p), ctc.ours(others, d, "backward", p)]
        for _ in range(150):   # 300 uploads: every one of the ring's 256 slots is rewritten
            for op in ops:
                op.enqueue()
        ok(acl.aclmdlRIExecuteAsync(model, stream))
        for op in ops:
            op.enqueue()
        ok(acl.aclrtSynchronizeDevice())
        assert step.state() == direct
        ok(acl.aclmdlRIDestroy(model))
    finally:
        others.close()
        step.close()


def test_capture_bench_runs(monkeypatch):
    """bench/capture.py still runs (figures are not judged: a benchmark, not a timed test)."""
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "cpu")
    result = capture_bench.run(FAMILIES, calls=2, batches=1)
    for path in ("cuda_code_path", "cpu"):
        rows = result[path]["rows"]
        assert [r["operator"] for r in rows] == [n for f in FAMILIES for n in (f.forward, f.backward)]
        assert all(r["direct_us"] > 0 and r["replay_us"] > 0 for r in rows)
    assert "sequence of the 10" in capture_bench.table(result)


# ------------------------------------------------------------------------------------------ replay bookkeeping
def _host_only(session: Any) -> None:
    if session.kind == "cuda":
        pytest.skip("queues host functions on the stream's worker thread (cpu and emulated)")


def test_a_replay_queued_behind_a_failure_still_finishes(session, s):
    """The stream skips work queued after a failure; a skipped replay still completes its events' marks
    and stops counting as running, so the model can be destroyed and its event waited for."""
    _host_only(session)
    event = ok(acl.aclrtCreateEvent())
    model = capture(s.stream, lambda st: ok(acl.aclrtRecordEvent(event, st)))

    def fails() -> None:
        raise ValueError("a failing task")
    _queue_host_task(s.stream, fails)
    ok(acl.aclmdlRIExecuteAsync(model, s.stream))
    assert _in_thread(lambda: acl.aclrtSynchronizeStream(s.stream)) != 0   # the failure, reported once
    assert _in_thread(lambda: acl.aclrtSynchronizeEvent(event)) == 0
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyEvent(event))


def test_a_replay_that_cannot_be_queued_is_not_left_running():
    from aclnn_gpu.host.stream import HostStream
    stream = HostStream("capfix")
    stream.begin_capture()
    stream.submit(lambda: None)
    work = stream.end_capture()
    stream.close()
    with pytest.raises(RuntimeError, match="destroyed"):
        stream.replay(work)
    assert work.pending == 0 and work.last is not None and work.last.is_set()


def test_a_wait_orders_after_the_latest_replay(session, s):
    """Two replays queued on one stream: the event recorded in the model refers to the SECOND replay's
    record (as after two aclrtRecordEvent calls), not to whichever replay reaches it first."""
    _host_only(session)
    event = ok(acl.aclrtCreateEvent())
    model = capture(s.stream, lambda st: ok(acl.aclrtRecordEvent(event, st)))
    started, gate = threading.Event(), threading.Event()
    other = ok(acl.aclrtCreateStream())
    after_wait = threading.Event()
    try:
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        _queue_host_task(s.stream, lambda: (started.set(), gate.wait(60)))   # between the two replays
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        ok(acl.aclrtStreamWaitEvent(other, event))
        _queue_host_task(other, after_wait.set)
        assert started.wait(60)                           # the first replay has recorded the event
        assert not after_wait.wait(0.2)                   # the wait is for the second replay's record
        assert acl.aclrtQueryEventStatus(event) == (0, acl.ACL_EVENT_RECORDED_STATUS_NOT_READY)
    finally:
        gate.set()
    assert _in_thread(lambda: acl.aclrtSynchronizeStream(other)) == 0
    assert after_wait.is_set()
    ok(acl.aclrtSynchronizeStream(s.stream))
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyEvent(event))
    ok(acl.aclrtDestroyStream(other))


def test_replays_of_one_model_on_two_streams_do_not_overlap(session, s):
    """CUDA orders successive launches of one graph (they share the plans' workspaces): a replay waits
    for the previous replay of the same model, whatever the stream."""
    _host_only(session)
    running, overlap = [0], []
    lock = threading.Lock()

    def body() -> None:
        with lock:
            running[0] += 1
            overlap.append(running[0])
        threading.Event().wait(0.05)
        with lock:
            running[0] -= 1
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    _queue_host_task(s.stream, body)
    model = ok(acl.aclmdlRICaptureEnd(s.stream))
    other = ok(acl.aclrtCreateStream())
    for _ in range(3):
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        ok(acl.aclmdlRIExecuteAsync(model, other))
    assert _in_thread(lambda: acl.aclrtSynchronizeStream(other)) == 0
    assert _in_thread(lambda: acl.aclrtSynchronizeStream(s.stream)) == 0
    assert len(overlap) == 6 and max(overlap) == 1
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtDestroyStream(other))


def test_synchronous_calls_during_a_capture_wait_for_the_work_queued_before_it(session, s):
    """RELAXED: a synchronous aclrtMemcpy during a capture must still wait for the work the capturing
    stream was given BEFORE the capture began (it may use the memory being read or freed)."""
    _host_only(session)
    ptr = s.malloc(64)
    finished = threading.Event()
    _queue_host_task(s.stream, lambda: (threading.Event().wait(0.3), finished.set()))
    ok(acl.aclmdlRICaptureBegin(s.stream, RELAXED))
    try:
        seen = bytearray(64)
        assert _in_thread(lambda: acl.aclrtMemcpy(seen, 64, ptr, 64, D2H)) == 0
        assert finished.is_set(), "the synchronous copy did not wait for the work queued before the capture"
    finally:
        model = ok(acl.aclmdlRICaptureEnd(s.stream))
    ok(acl.aclmdlRIDestroy(model))


def test_the_device_counts_a_capture_until_it_has_ended(monkeypatch):
    """cuda device code (emulated): `capturing` is counted before CUDA begins (undone when beginning
    fails) and until CUDA has ended, even when ending fails."""
    from support import use_device
    use_device("emulated")
    s = DeviceArrays()
    try:
        device = s.stream.device
        impl = s.stream.impl
        seen: list[int] = []
        real_end = impl.cupy.end_capture

        def failing_end() -> Any:
            seen.append(device.capturing)
            real_end()
            raise RuntimeError("cudaErrorStreamCaptureInvalidated")
        monkeypatch.setattr(impl.cupy, "begin_capture", lambda mode: (seen.append(device.capturing),
                                                                      (_ for _ in ()).throw(RuntimeError("no"))))
        with pytest.raises(RuntimeError):
            device.begin_capture(impl)
        assert seen == [1] and device.capturing == 0
        monkeypatch.undo()
        device.begin_capture(impl)
        monkeypatch.setattr(impl.cupy, "end_capture", failing_end)
        with pytest.raises(RuntimeError):
            device.end_capture(impl)
        assert seen == [1, 1] and device.capturing == 0
    finally:
        monkeypatch.undo()
        s.close()


def test_a_host_to_host_copy_between_buffer_objects_is_refused_in_a_capture(session, s):
    """Nothing to record: it would run at capture time and never at a replay. Refused, naming the call;
    the buffer is untouched and the capture stays valid."""
    src, dst = np.arange(16, dtype=np.uint8), bytearray(16)
    ok(acl.aclmdlRICaptureBegin(s.stream, GLOBAL))
    try:
        assert acl.aclrtMemcpyAsync(dst, 16, src, 16, H2H, s.stream) == E.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
        assert "aclrtMemcpyAsync" in acl.aclGetRecentErrMsg() and "dst" in acl.aclGetRecentErrMsg()
        assert dst == bytearray(16)
    finally:
        model = ok(acl.aclmdlRICaptureEnd(s.stream))
    ok(acl.aclmdlRIDestroy(model))
    ok(acl.aclrtMemcpyAsync(dst, 16, src, 16, H2H, s.stream))   # outside a capture: copied
    ok(acl.aclrtSynchronizeStream(s.stream))
    assert bytes(dst) == src.tobytes()


def test_an_operator_on_an_invalidated_capture_is_refused_before_it_is_spent(session, s):
    """507903 on every device, checked before the non-repeatable executor is spent and before the
    model holds the plan's memory: the same executor runs once the capture has ended."""
    grad, target = s.tensor(np.ones(8, np.float32)), s.tensor(np.full(8, 2.0, np.float32))
    x, out = s.tensor(np.zeros(8, np.float32)), s.empty([8], np.float32)
    status, workspace, size, executor = s.prepare(acl.aclnnKlDivBackwardGetWorkspaceSize, grad, x, target, 0, False,
                                                  out)
    ok(status)
    ok(acl.aclmdlRICaptureBegin(s.stream, RELAXED))
    assert acl.aclrtSynchronizeStream(s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURED   # invalidates it
    assert acl.aclnnKlDivBackward(workspace, size, executor, s.stream) == E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    assert "aclnnKlDivBackward" in acl.aclGetRecentErrMsg()
    model = acl.aclmdlRICaptureGetInfo(s.stream)[2]
    assert not model.capture.plans and not model.capture.allocations
    assert acl.aclmdlRICaptureEnd(s.stream)[0] == E.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    ok(acl.aclnnKlDivBackward(workspace, size, executor, s.stream))   # not spent by the refused call
    ok(acl.aclrtSynchronizeStream(s.stream))
    np.testing.assert_array_equal(s.read(out), np.full(8, -2.0, np.float32))


def test_captured_copies_page_lock_shared_overlapping_and_pinned_buffers():
    """emulated (the cuda device's code; fakecupy refuses a double cudaHostRegister as CUDA does): the
    same buffer in two models, overlapping views, a buffer over aclrtMallocHost memory and the same
    start with a larger count are all captured; the pages stay locked until the last model goes."""
    import ctypes

    from support import use_device

    from aclnn_gpu.emulator import fakecupy
    use_device("emulated")
    s = DeviceArrays()
    try:
        n = 3 * 4096
        ptr = s.malloc(n)
        buffer = np.zeros(2 * n, np.uint8)
        host = ok(acl.aclrtMallocHost(64))
        over_pinned = (ctypes.c_uint8 * 64).from_address(host)

        def first(st: Any) -> None:
            ok(acl.aclrtMemcpyAsync(buffer[:100], 100, ptr, 100, D2H, st))
            ok(acl.aclrtMemcpyAsync(buffer[50:5000], 4950, ptr, 4950, D2H, st))    # overlaps the first
            ok(acl.aclrtMemcpyAsync(over_pinned, 64, ptr, 64, D2H, st))           # already pinned
        models = [capture(s.stream, first)]
        models.append(capture(s.stream, lambda st: ok(acl.aclrtMemcpyAsync(buffer[:n], n, ptr, n, D2H, st))))
        tail = buffer.ctypes.data + n - 1
        assert fakecupy.cuda.runtime.pointerGetAttributes(tail).type == 1   # the larger count's tail too
        ok(acl.aclrtMemset(ptr, n, 7, n))
        for model in models:
            ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        ok(acl.aclrtSynchronizeStream(s.stream))
        assert (buffer[:n] == 7).all() and bytes(over_pinned) == bytes([7]) * 64
        ok(acl.aclmdlRIDestroy(models[0]))
        assert fakecupy.cuda.runtime.pointerGetAttributes(buffer.ctypes.data).type == 1   # the second model's
        ok(acl.aclmdlRIDestroy(models[1]))
        assert fakecupy.cuda.runtime.pointerGetAttributes(buffer.ctypes.data).type == 0
        assert fakecupy.cuda.runtime.pointerGetAttributes(tail).type == 0
        ok(acl.aclrtFreeHost(host))
    finally:
        s.close()


def test_fakecupy_treats_captured_event_records_as_cuda_does():
    """A plain record in a capture is graph-internal (the event is unusable afterwards, as CUDA's
    cudaErrorCapturedEvent); an EXTERNAL record (what the cuda device uses) is recorded by each replay."""
    from aclnn_gpu.emulator import fakecupy
    cuda = fakecupy.cuda
    stream, plain, external = cuda.Stream(), cuda.Event(), cuda.Event()
    gate = threading.Event()
    try:
        stream.begin_capture()
        plain.record(stream)
        cudart = fakecupy.cuda_bindings_runtime   # cuda-bindings' signature: handles in, (cudaError_t,) out
        assert cudart.cudaEventRecordWithFlags(external.ptr, stream.ptr, cudart.cudaEventRecordExternal) == \
            (cudart.cudaError_t.cudaSuccess,)
        graph = stream.end_capture()
        with pytest.raises(RuntimeError, match="cudaErrorCapturedEvent"):
            plain.synchronize()
        stream.submit(lambda: gate.wait(60))
        graph.launch(stream)
        assert not external.done          # points at the replay's record, which waits behind the gate
        gate.set()
        external.synchronize()
        assert external.done
        plain.record(stream)              # recorded outside a capture: usable again
        plain.synchronize()
    finally:
        gate.set()
        stream.close()


def test_a_synchronous_copy_and_a_capture_beginning_meanwhile_exclude_each_other(monkeypatch):
    """(Emulated: the cuda device's code.) A synchronous aclrtMemcpy decided on the
    legacy-stream path (no capture yet) while another thread begins a capture must not issue its
    cudaMemcpy after the capture began (CUDA refuses them and invalidates the
    capture). Here the copy is held just after its decision until the capture has begun or is
    waiting to: the capture waits, the copy succeeds, and the capture then records and replays."""
    from support import use_device

    from aclnn_gpu.emulator import fakecupy
    use_device("emulated")
    s = DeviceArrays()
    try:
        device, ptr = s.stream.device, s.malloc(64)
        gate = getattr(device, "gate", None)
        copier, began = threading.current_thread(), threading.Event()
        real_copy = fakecupy.cuda.runtime.memcpy
        statuses: list[int] = []

        def held_copy(*args: int) -> None:
            if threading.current_thread() is copier and not began.is_set():
                began.set()   # once: the copy has decided, and is about to make its CUDA calls
                beginner.start()
                for _ in range(60_000):   # bounded: until the capture has begun, or waits for the copy
                    if done.is_set() or (gate is not None and gate.waiting):
                        break
                    threading.Event().wait(0.001)
            real_copy(*args)

        done = threading.Event()
        beginner = threading.Thread(target=lambda: (statuses.append(acl.aclmdlRICaptureBegin(s.stream, RELAXED)),
                                                    done.set()))
        monkeypatch.setattr(fakecupy.cuda.runtime, "memcpy", held_copy)
        data = np.arange(64, dtype=np.uint8)
        assert acl.aclrtMemcpy(ptr, 64, data, 64, H2D) == 0, acl.aclGetRecentErrMsg()
        beginner.join(60)
        assert began.is_set() and done.is_set() and statuses == [0]
        ok(acl.aclrtMemsetAsync(ptr, 64, 9, 32, s.stream))
        model = ok(acl.aclmdlRICaptureEnd(s.stream))   # the capture was not invalidated
        seen = bytearray(64)
        ok(acl.aclrtMemcpy(seen, 64, ptr, 64, D2H))
        assert bytes(seen) == data.tobytes()            # the copy landed; the capture ran nothing
        ok(acl.aclmdlRIExecuteAsync(model, s.stream))
        ok(acl.aclrtSynchronizeStream(s.stream))
        ok(acl.aclrtMemcpy(seen, 64, ptr, 64, D2H))
        assert bytes(seen) == bytes([9]) * 32 + data[32:].tobytes()
        ok(acl.aclmdlRIDestroy(model))
    finally:
        s.close()


def test_fakecupy_refuses_what_cuda_refuses_during_a_capture():
    """The stand-in's capture rules are CUDA's (CUDA Programming Guide, stream capture's prohibited
    operations) with CuPy's exception: the legacy stream while a blocking stream captures
    (cudaErrorStreamCaptureImplicit), a device-wide or capturing-stream synchronize
    (cudaErrorStreamCaptureUnsupported) -- each invalidating the capture, whose end then fails -- and
    capture on the legacy stream (CuPy's RuntimeError). A non-blocking stream's capture leaves the
    legacy stream usable."""
    from aclnn_gpu.emulator import fakecupy
    cuda, runtime = fakecupy.cuda, fakecupy.cuda.runtime
    host = np.zeros(64, np.uint8)
    memory = cuda.alloc(64)
    illegal = [
        (lambda: runtime.memcpy(memory.ptr, host.ctypes.data, 64, 4), "cudaErrorStreamCaptureImplicit"),
        (lambda: runtime.memset(memory.ptr, 0, 64), "cudaErrorStreamCaptureImplicit"),
        (lambda: runtime.memsetAsync(memory.ptr, 0, 64, 0), "cudaErrorStreamCaptureImplicit"),
        (lambda: cuda.Event().record(), "cudaErrorStreamCaptureImplicit"),
        (runtime.deviceSynchronize, "cudaErrorStreamCaptureUnsupported"),
        (None, "cudaErrorStreamCaptureUnsupported"),   # the capturing stream's own synchronize
    ]
    for call, name in illegal:
        stream = cuda.Stream()
        try:
            stream.begin_capture()
            with pytest.raises(runtime.CUDARuntimeError, match=name) as refused:
                (call or stream.synchronize)()
            assert refused.value.status == {"cudaErrorStreamCaptureImplicit": 906,
                                            "cudaErrorStreamCaptureUnsupported": 900}[name]
            with pytest.raises(RuntimeError, match="invalidated"):
                stream.is_capturing()
            with pytest.raises(runtime.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated"):
                stream.end_capture()
        finally:
            stream.close()
    with pytest.raises(RuntimeError, match="cannot capture on the default"):
        cuda.get_current_stream().begin_capture()
    quiet = cuda.Stream(non_blocking=True)
    try:
        quiet.begin_capture()
        runtime.memcpy(memory.ptr, host.ctypes.data, 64, 4)   # the legacy stream does not order with it
        with pytest.raises(runtime.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            runtime.deviceSynchronize()
        with pytest.raises(runtime.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated"):
            quiet.end_capture()
    finally:
        quiet.close()


def test_two_devices_capturing_one_buffer_share_its_page_locks(monkeypatch):
    """(Emulated: the cuda device's code.) cudaHostRegister is the process's, not a device's.
    Device 0 and device 1 each capture a copy into the same host buffer; releasing device 0's model
    must leave the pages locked for device 1's graph (and for device 1's context: portable), until
    device 1's model goes too."""
    from support import use_device

    from aclnn_gpu.emulator import fakecupy
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    use_device("emulated")
    runtime, n = fakecupy.cuda.runtime, 2 * 4096
    buffer = np.zeros(n, np.uint8)

    def locked(device: int) -> bool:
        with fakecupy.cuda.Device(device):
            return runtime.pointerGetAttributes(buffer.ctypes.data).type == runtime.memoryTypeHost

    arrays, models = [], []
    try:
        for device in (0, 1):
            ok(acl.aclrtSetDevice(device))
            s = DeviceArrays()
            arrays.append(s)
            ptr = s.malloc(n)
            ok(acl.aclrtMemset(ptr, n, 5 + device, n))
            models.append(capture(s.stream, lambda st, ptr=ptr: ok(acl.aclrtMemcpyAsync(buffer, n, ptr, n, D2H, st))))
            assert locked(0) and locked(1)
        ok(acl.aclrtSetDevice(0))
        ok(acl.aclmdlRIDestroy(models[0]))
        assert locked(0) and locked(1), "device 0's release unlocked pages device 1's graph copies into"
        ok(acl.aclrtSetDevice(1))
        ok(acl.aclmdlRIExecuteAsync(models[1], arrays[1].stream))
        ok(acl.aclrtSynchronizeStream(arrays[1].stream))
        assert (buffer == 6).all()
        ok(acl.aclmdlRIDestroy(models[1]))
        assert not locked(0) and not locked(1)
    finally:
        for device, s in enumerate(arrays):
            ok(acl.aclrtSetDevice(device))
            s.close()
        ok(acl.aclrtSetDevice(0))
        from aclnn_gpu import runtime as acl_runtime
        acl_runtime.release_devices()


def test_record_external_reaches_cuda_bindings_with_its_signature():
    """CuPy's runtime has no cudaEventRecordWithFlags, so the cuda device calls cuda-bindings' (fakecupy
    stands in for that module only on the emulated device). Called for real here, with CuPy's shape
    of event and stream (handles in `.ptr`) and a null event: cuda-bindings takes the handles as ints,
    returns a `(cudaError_t,)` tuple, and the error comes back named (no GPU here: no driver; on a GPU:
    the null event is an invalid handle)."""
    cudart = pytest.importorskip("cuda.bindings.runtime")
    from types import SimpleNamespace

    from aclnn_gpu.device import cuda as cuda_device
    cupy_shaped = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace()))   # no stand-in: the real one
    assert cuda_device.cuda_bindings_runtime(cupy_shaped) is cudart
    handle = SimpleNamespace(ptr=0)
    with pytest.raises(RuntimeError, match=r"^cudaEventRecordWithFlags: cudaError\w+$") as failed:
        cuda_device.record_external(cupy_shaped, handle, handle)
    name = str(failed.value).split(": ")[1]
    assert name != "cudaSuccess" and int(getattr(cudart.cudaError_t, name)) != 0
