"""Fork safety: a fork() child starts with a clean runtime. On the cpu and emulated devices it works
(new workers, new streams) and the parent's handles are refused with a code, never waited on; after
a CUDA parent the child gets an error naming the spawn start method. Every child is bounded in time:
a hang fails the test instead of CI."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time

import numpy as np
import pytest
from support import DEVICE_KINDS, use_device

import aclnn_gpu as acl
import aclnn_gpu.functional as Fn
from aclnn_gpu import runtime
from aclnn_gpu.device import current
from aclnn_gpu.base.errors import AclnnError, NoDevice
from aclnn_gpu.reference.cross_entropy import cross_entropy_loss
from aclnn_gpu.reference.kl_div import kl_div

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
LIMIT = 120   # seconds for any child; a healthy one takes well under 10
FORK = multiprocessing.get_context("fork")


def _kl_and_ce(seed: int) -> tuple[float, float]:
    """Largest errors of a KL and a cross-entropy call against their references (CE's rows are many
    enough that the cpu device splits them over its thread pool)."""
    rng = np.random.default_rng(seed)
    x, t = rng.standard_normal((8, 16)).astype(np.float32), rng.random((8, 16)).astype(np.float32)
    kl = float(np.abs(Fn.kl_div(x, t, "none") - kl_div(x, t, 0, False)).max())
    logits = rng.standard_normal((4096, 8)).astype(np.float32)
    labels = rng.integers(0, 8, 4096)
    loss, _ = Fn.cross_entropy_loss(logits, labels, reduction="none")
    expected = cross_entropy_loss(logits.astype(np.float64), labels, None, "none", -100, 0.0)[0]
    return kl, float(np.abs(loss - expected).max())


def _in_child(fn, *args):
    """fn(*args) in a forked child; its return value (or the child's exception text, re-raised here).
    Bounded: a child that does not answer within LIMIT seconds is killed and the test fails."""
    reader, writer = FORK.Pipe(duplex=False)

    def body():
        try:
            result = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            result = ("error", f"{type(e).__name__}: {e}")
        writer.send(result)

    child = FORK.Process(target=body, daemon=True)
    child.start()
    writer.close()
    try:
        if not reader.poll(LIMIT):
            pytest.fail(f"the forked child did not answer within {LIMIT} s (a hang)")
        status, value = reader.recv()
    finally:
        child.join(LIMIT)
        if child.is_alive():
            child.kill()
    assert status == "ok", value
    return value


@pytest.fixture(params=DEVICE_KINDS)
def used(request):
    """A device of the kind, already used in this process (streams and pool threads running)."""
    use_device(request.param)
    assert max(_kl_and_ce(0)) < 1e-4
    yield request.param
    use_device(request.param)


CUDA_CHILD = "CUDA cannot be used in a forked child process"   # the refusal a CUDA parent's child gets


def test_fork_pool(used):
    with FORK.Pool(2) as pool:
        work = pool.map_async(_kl_and_ce, range(4))
        if used == "cuda":   # refused in the child, and the refusal reaches the parent intact (bounded)
            with pytest.raises(AclnnError, match=CUDA_CHILD) as refused:
                work.get(LIMIT)
            assert refused.value.status == acl.ACL_ERROR_RT_NO_DEVICE
        else:
            errors = work.get(LIMIT)
            assert max(max(e) for e in errors) < 1e-4, errors
    assert max(_kl_and_ce(9)) < 1e-4   # the parent still works


def _raise_aclnn_error(code: int) -> None:
    raise AclnnError(code, f"raised in pool worker {os.getpid()}")


def test_an_aclnn_error_raised_in_a_pool_worker_reaches_the_parent():
    """An exception's default pickling replays only its message: AclnnError(status, message) did not
    unpickle, the pool's result thread died on it and the parent waited forever (seen on a GPU, where
    a fork child's call is refused). Bounded by the get's timeout."""
    for error in (AclnnError(561103, "m"), NoDevice(207004, "n")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and (again.status, again.message, str(again)) == \
            (error.status, error.message, str(error))
    with FORK.Pool(1) as pool:
        with pytest.raises(AclnnError, match="raised in pool worker") as raised:
            pool.apply_async(_raise_aclnn_error, (561103,)).get(LIMIT)
    assert raised.value.status == 561103


class _KlDataset:
    """A dataset whose items are computed by aclnn_gpu.torch in the DataLoader's worker processes."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        import torch

        import aclnn_gpu.torch as acl_torch
        g = torch.Generator().manual_seed(i)
        x, t = torch.randn(4, 5, generator=g), torch.rand(4, 5, generator=g)
        got = acl_torch.kl_div(x, t, reduction="sum")
        return got, torch.nn.functional.kl_div(x, t, reduction="sum")


def test_dataloader_workers(used):
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(_KlDataset(), batch_size=2, num_workers=2, timeout=LIMIT,
                                         multiprocessing_context="fork")
    if used == "cuda":   # a worker's call is refused with the reason (use the spawn context there)
        with pytest.raises(RuntimeError, match=CUDA_CHILD):
            list(loader)
        return
    batches = list(loader)
    assert len(batches) == 3
    for got, expected in batches:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_fork_after_acl_init_only():
    os.environ["ACLNN_GPU_DEVICE"] = "cpu"
    runtime.release_devices()
    runtime.acl_state.initialized = False
    assert acl.aclInit(None) == 0 and not current._state.devices

    def child():
        assert acl.aclInit(None) == 0   # a clean runtime: the child initialises for itself
        assert acl.aclrtSetDevice(0) == 0 and acl.aclrtGetDevice() == (0, 0)
        return _kl_and_ce(1)

    assert max(_in_child(child)) < 1e-4
    assert acl.aclFinalize() == 0


def _blocked_stream(stream):
    """Queue work on `stream` that waits until the returned event is set (the stream stays busy)."""
    gate = threading.Event()
    impl = runtime.resolve_stream(stream, "test")
    worker = getattr(impl, "worker", None) or impl.cupy.worker   # cpu: HostStream; emulated: fakecupy's
    worker.submit(lambda: gate.wait(LIMIT))
    return gate


def test_fork_while_work_is_queued(used):
    if used == "cuda":
        pytest.skip("holds the stream with a host wait queued on its worker thread (cpu and emulated)")
    _, stream = acl.aclrtCreateStream()
    _, ptr = acl.aclrtMalloc(64, 0)
    _, source = acl.aclrtMalloc(64, 0)
    assert acl.aclrtMemcpy(source, 64, np.arange(64, dtype=np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    _, event = acl.aclrtCreateEvent()
    x = np.ones(4, np.float32)
    tensors = [acl.aclCreateTensor((4,), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (4,), p)
               for p in (acl.aclrtMalloc(16, 0)[1] for _ in range(3))]
    grad = acl.aclCreateTensor((), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (), acl.aclrtMalloc(4, 0)[1])
    status, _, executor = acl.aclnnKlDivBackwardGetWorkspaceSize(grad, tensors[0], tensors[1], 2, False, tensors[2])
    assert status == 0
    gate = _blocked_stream(stream)
    assert acl.aclrtMemcpyAsync(ptr, 64, source, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, stream) == 0
    assert acl.aclrtRecordEvent(event, stream) == 0

    def child():
        start = time.monotonic()
        refused = {
            "sync": acl.aclrtSynchronizeStream(stream),
            "event": acl.aclrtSynchronizeEvent(event),
            "memcpy": acl.aclrtMemcpy(np.empty(64, np.uint8), 64, ptr, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST),
            "execute": acl.aclnnKlDivBackward(None, 0, executor, None),
            "destroy": acl.aclrtDestroyStream(stream),
        }
        message = acl.aclGetRecentErrMsg()
        # new work in the child: its own device, streams, memory
        _, mine = acl.aclrtCreateStream()
        assert acl.aclrtSynchronizeDevice() == 0
        result = Fn.kl_div(x, x, "sum")
        assert acl.aclrtSynchronizeStream(mine) == 0
        return refused, message, float(result), time.monotonic() - start

    refused, message, result, seconds = _in_child(child)
    assert refused == {"sync": acl.ACL_ERROR_RT_PARAM_INVALID, "event": acl.ACL_ERROR_RT_PARAM_INVALID,
                       "memcpy": acl.ACL_ERROR_RT_PARAM_INVALID, "execute": acl.ACLNN_ERR_PARAM_INVALID,
                       "destroy": acl.ACL_ERROR_RT_PARAM_INVALID}
    assert "created in the parent process before fork()" in message, message
    assert result == -4.0 and seconds < LIMIT   # sum(t * (log t - x)) at x = t = 1
    gate.set()   # the parent's queued work completes as if nothing happened
    assert acl.aclrtSynchronizeStream(stream) == 0
    out = np.empty(64, np.uint8)
    assert acl.aclrtMemcpy(out, 64, ptr, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert (out == np.arange(64)).all()
    assert acl.aclrtDestroyStream(stream) == 0 and acl.aclrtDestroyEvent(event) == 0


def test_parent_pointer_in_child_names_the_fork():
    use_device("cpu")
    _, ptr = acl.aclrtMalloc(64, 0)

    def child():
        status = acl.aclrtMemcpy(np.empty(64, np.uint8), 64, ptr, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST)
        return status, acl.aclGetRecentErrMsg()

    status, message = _in_child(child)
    assert status == acl.ACL_ERROR_RT_PARAM_INVALID
    assert "was allocated in the parent process before fork()" in message, message
    assert acl.aclrtFree(ptr) == 0


def test_cuda_parent_child_names_spawn():
    """A parent that initialised CUDA: the child's every device call says to use spawn (checked with
    the emulated device standing in for CUDA: its platform marked fork-unsafe as cuda's is)."""
    use_device("emulated")
    platform = current._state.platform
    platform.fork_safe = False
    try:
        def child():
            status = acl.aclrtSetDevice(0)
            message = acl.aclGetRecentErrMsg()
            try:
                Fn.kl_div(np.zeros(3, np.float32), np.zeros(3, np.float32))
                raised = ""
            except acl.AclnnError as e:
                raised = str(e)
            return status, message, raised

        status, message, raised = _in_child(child)
    finally:
        platform.fork_safe = True
    assert status == acl.ACL_ERROR_RT_NO_DEVICE
    assert message.startswith("aclrtSetDevice: CUDA cannot be used in a forked child process") and "'spawn'" in message
    assert "kl_div: " in raised and "'spawn'" in raised
