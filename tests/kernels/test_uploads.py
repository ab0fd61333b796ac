"""Uploads of host tables larger than an UploadRing slot (device/uploads.py) on the emulated device:
no stream synchronize, no allocation in steady state, and the staged bytes survive the caller reusing
its host array at once (a staging buffer is not reused before the copy that read it has run)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import aclnn_gpu as acl
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.device.uploads import UPLOAD_SLOT_BYTES
from aclnn_gpu.device.uploads import LARGE_UPLOAD_BUFFERS
from aclnn_gpu.runtime import get_device
from support import Session

SIZES = (UPLOAD_SLOT_BYTES + 8, 3 * UPLOAD_SLOT_BYTES, 100_000)   # bytes, all above a slot


class RecordingStream(fakecupy.Stream):
    """A fake CuPy stream that counts synchronize() calls."""

    def __init__(self) -> None:
        super().__init__()
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1
        super().synchronize()


@pytest.fixture
def emulated():
    s = Session("emulated")
    yield s, get_device()
    s.close()


def _held(stream: RecordingStream) -> threading.Event:
    """Holds the stream's queue (as a GPU that is behind) until the returned event is set."""
    gate = threading.Event()
    stream.submit(lambda: gate.wait(30))
    return gate


def _counting_pinned_allocations(monkeypatch) -> list[int]:
    sizes: list[int] = []
    original = fakecupy.cuda.alloc_pinned_memory

    def alloc(size: int):
        sizes.append(size)
        return original(size)
    monkeypatch.setattr(fakecupy.cuda, "alloc_pinned_memory", alloc)
    return sizes


def test_large_upload_does_not_synchronize_and_survives_host_reuse(emulated, monkeypatch):
    _, device = emulated
    stream = RecordingStream()
    pinned = _counting_pinned_allocations(monkeypatch)
    rounds = 2
    for round_ in range(rounds):
        gate = _held(stream)
        host = np.empty(max(SIZES), np.uint8)
        expected, targets = [], []
        for i, nbytes in enumerate(SIZES):
            host[:nbytes] = (np.arange(nbytes) * (i + 3) + round_) % 251
            dst = device.malloc(nbytes)
            device.uploads.upload(dst, host[:nbytes], stream)
            expected.append(host[:nbytes].copy())
            targets.append(dst)
            host[:] = 0xEE   # the caller reuses its array at once, before the "GPU" has read it
        assert stream.synchronized == 0
        gate.set()
        stream.worker.synchronize()
        for dst, want in zip(targets, expected):
            np.testing.assert_array_equal(np.frombuffer(device.host_view(dst, want.nbytes), np.uint8), want)
            device.free(dst)
        if round_ == 0:
            assert len(pinned) == len(SIZES)   # one staging buffer per upload in flight
    assert len(pinned) == len(SIZES), "steady state allocated pinned memory"
    stream.close()


def test_more_large_uploads_in_flight_than_buffers(emulated):
    _, device = emulated
    stream = RecordingStream()
    count = 2 * LARGE_UPLOAD_BUFFERS + 3
    nbytes = 2 * UPLOAD_SLOT_BYTES
    dst = device.malloc(count * nbytes)
    host = np.empty(nbytes, np.uint8)
    for i in range(count):
        host[:] = i
        device.uploads.upload(dst + i * nbytes, host, stream)
    assert stream.synchronized == 0
    stream.worker.synchronize()
    got = np.frombuffer(device.host_view(dst, count * nbytes), np.uint8).reshape(count, nbytes)
    np.testing.assert_array_equal(got, np.repeat(np.arange(count, dtype=np.uint8)[:, None], nbytes, axis=1))
    device.free(dst)
    stream.close()


def test_ctc_with_a_large_table_does_not_synchronize(emulated, monkeypatch, rng):
    """N = 200 samples: the per-sample table is 4800 bytes, above a slot. The call returns without
    a stream synchronize and the loss matches PyTorch's (float64)."""
    s, _ = emulated
    T, N, C, L = 6, 200, 4, 2
    lp = np.log(rng.dirichlet(np.ones(C), (T, N))).astype(np.float32)
    tg = rng.integers(1, C, (N, L)).astype(np.int64)
    il, tl = np.full(N, T), rng.integers(0, L + 1, N)
    args = (s.tensor(lp), s.tensor(tg), acl.aclCreateIntArray([int(v) for v in il]),
            acl.aclCreateIntArray([int(v) for v in tl]), 0, False)
    nll, la = s.poisoned((N,), np.float32), s.poisoned((N, T, 2 * L + 1), np.float32)
    status, workspace, size, executor = s.prepare(acl.aclnnCtcLossGetWorkspaceSize, *args, nll, la)
    assert status == 0, acl.aclGetRecentErrMsg()
    calls = []
    original = fakecupy.Stream.synchronize
    monkeypatch.setattr(fakecupy.Stream, "synchronize", lambda self: (calls.append(self), original(self))[1])
    assert acl.aclnnCtcLoss(workspace, size, executor, s.stream) == 0
    assert calls == []
    monkeypatch.undo()
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    nll64, _ = torch.ops.aten._ctc_loss(torch.tensor(lp.astype(np.float64)), torch.tensor(tg), list(map(int, il)),
                                        list(map(int, tl)), 0, False)
    np.testing.assert_allclose(s.read(nll), nll64.numpy(), rtol=2e-5, atol=1e-5)
