"""HCCL collectives (aclnn_gpu.hccl) on the cpu and emulated devices, against NumPy: every
collective, reduce op and data type with 2 and 4 ranks; the bad-input table (HCCL's codes on every
rank, buffers untouched); bounded failure when a rank dies or never joins; two communicators in one
process; the rank-table init; the data-parallel example with 2 and 4 spawned rank processes.

Ranks are threads of the test process where that suffices (one PyTorch import), spawned processes
where a process must die or the example says so. Every wait is bounded (HCCL_EXEC_TIMEOUT,
HCCL_CONNECT_TIMEOUT, and the helpers' own join timeouts)."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import aclnn_gpu as acl  # noqa: E402
from hccl_ranks import dead_rank_body, download, in_processes, in_threads, ok, poisoned, upload  # noqa: E402
from support import require_gpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DTYPES = list(acl.HcclDataType)
OPS = list(acl.HcclReduceOp)
REFERENCE = {acl.HCCL_REDUCE_SUM: np.add, acl.HCCL_REDUCE_PROD: np.multiply, acl.HCCL_REDUCE_MAX: np.maximum,
             acl.HCCL_REDUCE_MIN: np.minimum}
COUNT = 7
# on cuda the ranks of these tests are threads of one process, and NCCL takes one rank per GPU
# (ncclCommInitRank answers ncclInvalidUsage, "Duplicate GPU detected", for a second rank on a GPU)
NCCL_ONE_RANK_PER_GPU = "ranks as threads of one process, one GPU each (NCCL's rule)"
F32 = acl.HCCL_DATA_TYPE_FP32
SUM = acl.HCCL_REDUCE_SUM


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    """Bounded waits, long enough for a loaded 2-core machine; the timeout tests set their own."""
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "20")
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "20")


def numpy_type(data_type) -> np.dtype:
    return acl.hccl.types.NUMPY_DTYPE[acl.HcclDataType(data_type)]


def rank_input(data_type, op, rank: int, count: int) -> np.ndarray:
    """Small integers every type holds exactly (products of 4 ranks stay small); unsigned 32/64-bit
    types get values with the top bit set too, so max / min through the signed view are tested."""
    dtype = numpy_type(data_type)
    rng = np.random.default_rng(1000 * int(data_type) + 10 * int(op) + rank)
    if op == acl.HCCL_REDUCE_PROD:
        values = rng.choice([1, 2] if dtype.kind == "u" else [-2, -1, 1, 2], count)
    else:
        values = rng.integers(0 if dtype.kind == "u" else -4, 5, count)
    out = values.astype(dtype)
    if dtype in (np.dtype(np.uint32), np.dtype(np.uint64)):
        out[::3] = np.iinfo(dtype).max - rng.integers(0, 3, out[::3].size).astype(dtype)
    return out


def reduced(data_type, op, n: int, count: int) -> np.ndarray:
    stack = np.stack([rank_input(data_type, op, r, count) for r in range(n)])
    return REFERENCE[op].reduce(stack, axis=0, dtype=stack.dtype)


def same(actual: np.ndarray, expected: np.ndarray) -> bool:
    if expected.dtype == ml_dtypes.bfloat16 or expected.dtype.kind == "f":
        return np.array_equal(actual.astype(np.float64), expected.astype(np.float64))
    return np.array_equal(actual, expected)


# ---------------------------------------------------------------------------- every collective
@pytest.mark.parametrize("n", [2, 4])
def test_every_collective_op_and_type_against_numpy(session, n):
    require_gpus(session.kind, n, NCCL_ONE_RANK_PER_GPU)
    def body(rank, comm, stream):
        assert ok(acl.HcclGetRankSize(comm)) == n and ok(acl.HcclGetRankId(comm)) == rank
        got = {}
        for data_type in DTYPES:
            size = numpy_type(data_type).itemsize
            for op in OPS:
                send = upload(rank_input(data_type, op, rank, COUNT))
                recv = poisoned(COUNT * size)
                ok(acl.HcclAllReduce(send, recv, COUNT, data_type, op, comm, stream))
                # reduce-scatter: rank r's send buffer is n blocks; block b is rank_input(.., r + 10 * b ..)
                blocks = np.concatenate([rank_input(data_type, op, rank + 10 * b, COUNT) for b in range(n)])
                scatter_send, scatter_recv = upload(blocks), poisoned(COUNT * size)
                ok(acl.HcclReduceScatter(scatter_send, scatter_recv, COUNT, data_type, op, comm, stream))
                ok(acl.aclrtSynchronizeStream(stream))
                got["allreduce", data_type, op] = download(recv, COUNT, numpy_type(data_type))
                got["reducescatter", data_type, op] = download(scatter_recv, COUNT, numpy_type(data_type))
            # Every buffer is made before the first collective: the ranks are threads sharing one device,
            # and a synchronous copy waits for every stream of the device, a peer's queued send included
            # (which waits for this rank's HcclRecv).
            send, gathered = upload(rank_input(data_type, SUM, rank, COUNT)), poisoned(n * COUNT * size)
            cast = upload(rank_input(data_type, SUM, rank, COUNT))
            ring_in, ring_out = upload(rank_input(data_type, SUM, rank, COUNT)), poisoned(COUNT * size)
            ok(acl.HcclAllGather(send, gathered, COUNT, data_type, comm, stream))
            root = n - 1
            ok(acl.HcclBroadcast(cast, COUNT, data_type, root, comm, stream))
            # a ring: even ranks send first, odd ranks receive first (pairs in matching order)
            to, source = (rank + 1) % n, (rank - 1) % n
            steps = [lambda: acl.HcclSend(ring_in, COUNT, data_type, to, comm, stream),
                     lambda: acl.HcclRecv(ring_out, COUNT, data_type, source, comm, stream)]
            for step in steps if rank % 2 == 0 else steps[::-1]:
                ok(step())
            ok(acl.HcclBarrier(comm, stream))
            ok(acl.aclrtSynchronizeStream(stream))
            got["allgather", data_type] = download(gathered, n * COUNT, numpy_type(data_type))
            got["broadcast", data_type] = download(cast, COUNT, numpy_type(data_type))
            got["ring", data_type] = download(ring_out, COUNT, numpy_type(data_type))
        return got

    results = in_threads(n, body)
    for rank, got in enumerate(results):
        for data_type in DTYPES:
            for op in OPS:
                assert same(got["allreduce", data_type, op], reduced(data_type, op, n, COUNT)), (data_type, op)
                stack = np.stack([rank_input(data_type, op, r + 10 * rank, COUNT) for r in range(n)])
                expected = REFERENCE[op].reduce(stack, axis=0, dtype=stack.dtype)
                assert same(got["reducescatter", data_type, op], expected), (data_type, op)
            everyone = np.concatenate([rank_input(data_type, SUM, r, COUNT) for r in range(n)])
            assert same(got["allgather", data_type], everyone), data_type
            assert same(got["broadcast", data_type], rank_input(data_type, SUM, n - 1, COUNT)), data_type
            assert same(got["ring", data_type], rank_input(data_type, SUM, (rank - 1) % n, COUNT)), data_type


def test_float_sums_of_random_values_and_in_place(session):
    """fp32 / fp64 all-reduce of random values within rounding (the engine's order of summation),
    in place (sendBuf == recvBuf), and count 0 as a no-op that still keeps the ranks in step."""
    n, count = 3, 1000
    require_gpus(session.kind, n, NCCL_ONE_RANK_PER_GPU)

    def data(rank, dtype):
        return np.random.default_rng(rank).standard_normal(count).astype(dtype)

    def body(rank, comm, stream):
        out = {}
        for data_type, dtype in ((F32, np.float32), (acl.HCCL_DATA_TYPE_FP64, np.float64)):
            buf = upload(data(rank, dtype))
            ok(acl.HcclAllReduce(buf, buf, 0, data_type, SUM, comm, stream))
            ok(acl.HcclAllReduce(buf, buf, count, data_type, SUM, comm, stream))
            ok(acl.aclrtSynchronizeStream(stream))
            out[dtype] = download(buf, count, dtype)
        return out

    for got in in_threads(n, body):
        for dtype, rtol in ((np.float32, 1e-6), (np.float64, 1e-14)):
            expected = sum(data(r, np.float64) if dtype == np.float64 else data(r, dtype).astype(np.float64)
                           for r in range(n))
            np.testing.assert_allclose(got[dtype], expected, rtol=rtol, atol=rtol)


# ---------------------------------------------------------------------------- bad input
def _bad_cases(comm, stream, rank, good, short, foreign):
    """(name, call, expected code on rank 0, expected code on rank 1): each call is made by both ranks."""
    other = 1 - rank
    return [
        ("count differs", lambda: acl.HcclAllReduce(good, good, 4 + rank, F32, SUM, comm, stream), 1, 1),
        ("dataType differs", lambda: acl.HcclAllReduce(good, good, 4, (F32, acl.HCCL_DATA_TYPE_INT32)[rank], SUM,
                                                       comm, stream), 1, 1),
        ("op differs", lambda: acl.HcclAllReduce(good, good, 4, F32, (SUM, acl.HCCL_REDUCE_MAX)[rank], comm,
                                                 stream), 1, 1),
        ("root differs", lambda: acl.HcclBroadcast(good, 4, F32, rank, comm, stream), 1, 1),
        ("collective differs", lambda: (acl.HcclBarrier(comm, stream) if rank else
                                        acl.HcclAllGather(good, good, 1, F32, comm, stream)), 1, 1),
        ("null sendBuf on rank 1", lambda: acl.HcclAllReduce(None if rank else good, good, 4, F32, SUM, comm, stream),
         1, 2),
        ("null recvBuf on rank 0", lambda: acl.HcclAllReduce(good, good if rank else None, 4, F32, SUM, comm, stream),
         2, 1),
        ("buffer too short for count", lambda: acl.HcclAllReduce(short, short, 4, F32, SUM, comm, stream), 1, 1),
        ("allgather recvBuf too short", lambda: acl.HcclAllGather(good, short, 4, F32, comm, stream), 1, 1),
        ("reduce-scatter sendBuf too short", lambda: acl.HcclReduceScatter(short, good, 4, F32, SUM, comm, stream),
         1, 1),
        ("foreign pointer", lambda: acl.HcclAllReduce(foreign, good, 4, F32, SUM, comm, stream), 1, 1),
        ("pointer as a float", lambda: acl.HcclAllReduce(float(good), good, 4, F32, SUM, comm, stream), 1, 1),
        ("dataType 12", lambda: acl.HcclAllReduce(good, good, 4, 12, SUM, comm, stream), 1, 1),
        ("op 4 on rank 1", lambda: acl.HcclAllReduce(good, good, 4, F32, 4 if rank else SUM, comm, stream), 1, 1),
        ("negative count", lambda: acl.HcclAllReduce(good, good, -1, F32, SUM, comm, stream), 1, 1),
        ("root out of range", lambda: acl.HcclBroadcast(good, 4, F32, 2, comm, stream), 1, 1),
        ("stream of the wrong type", lambda: acl.HcclBarrier(comm, "stream"), 1, 1),
        ("send to itself", lambda: acl.HcclSend(good, 4, F32, rank, comm, stream), 1, 1),
        ("recv from rank 2 of 2", lambda: acl.HcclRecv(good, 4, F32, 2, comm, stream), 1, 1),
        ("comm None", lambda: acl.HcclAllReduce(good, good, 4, F32, SUM, None, stream), 2, 2),
        ("comm of the wrong type", lambda: acl.HcclBarrier(object(), stream), 1, 1),
        ("rank size of None", lambda: acl.HcclGetRankSize(None)[0], 2, 2),
        ("p2p count differs", lambda: (acl.HcclRecv(good, 3, F32, other, comm, stream) if rank else
                                       acl.HcclSend(good, 4, F32, other, comm, stream)), 0, 1),
    ]


def test_bad_input_fails_on_every_rank_and_leaves_buffers_untouched(session):
    require_gpus(session.kind, 2, NCCL_ONE_RANK_PER_GPU)
    names = []

    def body(rank, comm, stream):
        good = upload(np.arange(8, dtype=np.float32) + rank)
        short = upload(np.zeros(2, np.float32)) + 56   # its last 8 bytes: aclrtMalloc(8) makes 64 usable
        foreign = np.zeros(16, np.float32)
        outcomes = []
        for name, call, *_ in _bad_cases(comm, stream, rank, good, short, foreign.ctypes.data):
            ret = call()
            message = acl.aclGetRecentErrMsg()
            outcomes.append((int(ret), message))
            if rank == 0:
                names.append(name)
        # the sender of the refused p2p message learns it on its stream; then the communicator still works
        sync = acl.aclrtSynchronizeStream(stream)
        sync_message = acl.aclGetRecentErrMsg()
        untouched = download(good, 8, np.float32)
        ok(acl.HcclAllReduce(good, good, 8, F32, SUM, comm, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        return outcomes, (int(sync), sync_message), untouched, download(good, 8, np.float32)

    results = in_threads(2, body)
    cases = _bad_cases(None, None, 0, 0, 0, 0)
    for rank, (outcomes, (sync, sync_message), untouched, after) in enumerate(results):
        for (name, _, *expected), (ret, message) in zip(cases, outcomes):
            assert ret == expected[rank], f"{name}: rank {rank} returned {ret}: {message}"
            if ret:
                assert message.startswith("Hccl") and "\n" not in message, (name, message)
        np.testing.assert_array_equal(untouched, np.arange(8, dtype=np.float32) + rank)
        np.testing.assert_array_equal(after, 2 * np.arange(8, dtype=np.float32) + 1)
        if rank == 0:   # the sender of the refused message
            assert sync == acl.ACL_ERROR_RT_PARAM_INVALID and "refused the message" in sync_message, sync_message
        else:
            assert sync == 0, sync_message
    mismatch = results[0][0][0][1]
    assert mismatch == "HcclAllReduce: the ranks disagree on count: rank 0 count=4, rank 1 count=5", mismatch


def test_a_refused_send_stays_with_its_stream_while_another_thread_copies(session):
    """A synchronous copy waits for every stream of the device, but the failure of one stream's queued
    work is that stream's: its own aclrtSynchronizeStream reports it, not the other thread's copy."""
    require_gpus(session.kind, 2, NCCL_ONE_RANK_PER_GPU)
    import threading
    uploaded, failed, copied = (threading.Barrier(2, timeout=30) for _ in range(3))

    def body(rank, comm, stream):
        good = upload(np.arange(8, dtype=np.float32))
        uploaded.wait()   # a synchronous copy waits for the device's streams: not while a send waits for its receiver
        if rank == 0:
            assert acl.HcclSend(good, 4, F32, 1, comm, stream) == 0
            deadline = time.monotonic() + 30
            while ok(acl.aclrtStreamQuery(stream)) != acl.ACL_STREAM_STATUS_COMPLETE:   # the refused send has run
                assert time.monotonic() < deadline
                time.sleep(0.001)
            failed.wait()
            copied.wait()
            return acl.aclrtSynchronizeStream(stream), acl.aclGetRecentErrMsg()
        try:
            assert acl.HcclRecv(good, 3, F32, 0, comm, stream) == acl.HCCL_E_PARA
        except BaseException:
            failed.abort()   # rank 0 fails at its barrier at once
            raise
        failed.wait()
        try:
            return download(good, 8, np.float32)   # drains rank 0's stream too
        finally:
            copied.wait()

    (sync, message), copy = in_threads(2, body)
    np.testing.assert_array_equal(copy, np.arange(8, dtype=np.float32))
    assert sync == acl.ACL_ERROR_RT_PARAM_INVALID and "refused the message" in message, message


def test_destroyed_communicator_is_refused(session):
    require_gpus(session.kind, 2, NCCL_ONE_RANK_PER_GPU)
    def body(rank, comm, stream):
        return comm

    comm = in_threads(2, body)[0]   # in_threads destroys each rank's communicator
    buf = upload(np.zeros(4, np.float32))
    assert acl.HcclAllReduce(buf, buf, 4, F32, SUM, comm, None) == acl.HCCL_E_PARA
    assert "destroyed" in acl.aclGetRecentErrMsg()
    assert acl.HcclCommDestroy(comm) == acl.HCCL_E_PARA
    assert acl.HcclGetRankId(comm) == (acl.HCCL_E_PARA, None)


def test_init_refuses_bad_arguments(cpu_session, tmp_path):
    root = ok(acl.HcclGetRootInfo())
    assert len(root) == acl.HCCL_ROOT_INFO_BYTES == 4108
    table = tmp_path / "rank_table.json"
    table.write_text("{not json")
    cases = [
        (lambda: acl.HcclCommInitRootInfo(0, root, 0), acl.HCCL_E_PARA, "nRanks"),
        (lambda: acl.HcclCommInitRootInfo(2, root, 2), acl.HCCL_E_PARA, "rank"),
        (lambda: acl.HcclCommInitRootInfo(2, root, -1), acl.HCCL_E_PARA, "rank"),
        (lambda: acl.HcclCommInitRootInfo(2, root[:100], 0), acl.HCCL_E_PARA, "rootInfo"),
        (lambda: acl.HcclCommInitRootInfo(2, bytes(4108), 0), acl.HCCL_E_PARA, "rootInfo"),
        (lambda: acl.HcclCommInitRootInfo(2, "root", 0), acl.HCCL_E_PARA, "rootInfo"),
        (lambda: acl.HcclCommInitClusterInfo(str(tmp_path / "missing.json"), 0), acl.HCCL_E_OPEN_FILE_FAILURE,
         "clusterInfo"),
        (lambda: acl.HcclCommInitClusterInfo(str(table), 0), acl.HCCL_E_PARA, "rank table"),
        (lambda: acl.HcclCommInitClusterInfo(None, 0), acl.HCCL_E_PARA, "clusterInfo"),
    ]
    for call, code, word in cases:
        ret, comm = call()
        message = acl.aclGetRecentErrMsg()
        assert (ret, comm) == (code, None), message
        assert message.startswith("HcclCommInit") and word in message, message
    table.write_text(json.dumps(_rank_table(2, 1)))
    assert acl.HcclCommInitClusterInfo(str(table), 2) == (acl.HCCL_E_PARA, None)
    assert "rank 2 is not a rank_id" in acl.aclGetRecentErrMsg()


# ---------------------------------------------------------------------------- bounded failures
def test_a_rank_that_never_joins_times_out(cpu_session, monkeypatch):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "1")
    root = ok(acl.HcclGetRootInfo())
    start = time.perf_counter()
    ret, comm = acl.HcclCommInitRootInfo(2, root, 0)
    elapsed = time.perf_counter() - start
    assert (ret, comm) == (acl.HCCL_E_TIMEOUT, None), acl.aclGetRecentErrMsg()
    assert "HCCL_CONNECT_TIMEOUT=1 s" in acl.aclGetRecentErrMsg() and "rank 1 did not" in acl.aclGetRecentErrMsg()
    assert elapsed < 10


def test_a_rank_that_dies_makes_the_others_time_out(cpu_session, monkeypatch):
    """Rank 1 of 2 spawned processes exits after init; rank 0's next HcclAllReduce returns
    HCCL_E_TIMEOUT after HCCL_EXEC_TIMEOUT (3 s here), not a hang."""
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "3")
    results = in_processes(2, dead_rank_body)
    assert results[1][0] == "died", results
    what, ret, message, elapsed = results[0]
    assert (what, ret) == ("allreduce", acl.HCCL_E_TIMEOUT), message
    assert "HCCL_EXEC_TIMEOUT=3 s" in message and "rank 1 did not" in message, message
    assert elapsed < 15


def test_a_dead_rank_is_found_by_its_heartbeat_long_before_the_exec_timeout(cpu_session, monkeypatch):
    """Rank 1 of 2 spawned processes exits after init, HCCL_EXEC_TIMEOUT stays long (60 s): rank 0's
    next HcclAllReduce fails once rank 1's heartbeat stops (2 s here), HCCL_E_REMOTE naming it."""
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "60")
    monkeypatch.setenv("ACLNN_GPU_HCCL_HEARTBEAT_S", "2")
    results = in_processes(2, dead_rank_body)
    what, ret, message, elapsed = results[0]
    assert (what, ret) == ("allreduce", acl.HCCL_E_REMOTE), message
    assert message.startswith("HcclAllReduce: rank 1 stopped: no heartbeat for"), message
    assert elapsed < 30


def test_two_ranks_disagreeing_on_the_size_are_refused(cpu_session, monkeypatch):
    """The rank told 2 sees the other's 3 and refuses; the rank told 3 waits for a third rank, bounded."""
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "1")
    root = ok(acl.HcclGetRootInfo())
    out = {}

    def rank(r, n):
        out[r] = acl.HcclCommInitRootInfo(n, root, r)[0], acl.aclGetRecentErrMsg()

    import threading
    threads = [threading.Thread(target=rank, args=(0, 2)), threading.Thread(target=rank, args=(1, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert (out[0][0], out[1][0]) == (acl.HCCL_E_PARA, acl.HCCL_E_TIMEOUT), out
    assert "rank 1 joined with nRanks=3" in out[0][1], out


# ---------------------------------------------------------------------------- communicators
def test_two_communicators_in_one_process(cpu_session):
    """Each rank holds two communicators (the second with the ranks reversed) and interleaves
    collectives on them; neither disturbs the other."""
    first, second = ok(acl.HcclGetRootInfo()), ok(acl.HcclGetRootInfo())
    n = 2

    def body(rank, comm, stream):
        other = ok(acl.HcclCommInitRootInfo(n, second, n - 1 - rank))
        try:
            a = upload(np.full(5, rank + 1, np.float32))
            b = upload(np.full(5, 10 * (rank + 1), np.float32))
            gathered = poisoned(5 * n * 4)
            for _ in range(3):
                ok(acl.HcclAllReduce(a, a, 5, F32, SUM, comm, stream))
                ok(acl.HcclAllGather(b, gathered, 5, F32, other, stream))
            ok(acl.aclrtSynchronizeStream(stream))
            return download(a, 5, np.float32), download(gathered, 10, np.float32), ok(acl.HcclGetRankId(other))
        finally:
            ok(acl.HcclCommDestroy(other))

    for rank, (a, gathered, other_rank) in enumerate(in_threads(n, body, first)):
        np.testing.assert_array_equal(a, np.full(5, 12, np.float32))   # 1 + 2 = 3, then doubled twice
        np.testing.assert_array_equal(gathered, np.repeat([20.0, 10.0], 5))   # rank 0 of `other` is rank 1
        assert other_rank == n - 1 - rank


def _rank_table(n: int, per_server: int) -> dict:
    servers = [{"server_id": "127.0.0.1", "device": [{"device_id": str(d), "device_ip": "192.168.1.%d" % d,
                                                      "rank_id": str(s * per_server + d)} for d in range(per_server)]}
               for s in range(n // per_server)]
    return {"status": "completed", "version": "1.0", "server_count": str(len(servers)), "server_list": servers}


def test_rank_table_communicator_made_twice_in_one_process(cpu_session, tmp_path, monkeypatch):
    """Rank 0 serves the store at HCCL_IF_BASE_PORT on its server's address; the same rank table
    makes a second communicator after the first is destroyed (the store stays, the port is not
    taken twice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HCCL_IF_BASE_PORT", str(port))
    table = tmp_path / "rank_table.json"
    table.write_text(json.dumps(_rank_table(2, 1)))
    import threading

    for attempt in range(2):
        out = {}

        def rank(r):
            ret, comm = acl.HcclCommInitClusterInfo(str(table), r)
            assert ret == 0, acl.aclGetRecentErrMsg()
            buf = upload(np.full(3, r + 1 + attempt, np.int64))
            stream = ok(acl.aclrtCreateStream())   # the ranks share a device here: not its one default stream
            ok(acl.HcclAllReduce(buf, buf, 3, acl.HCCL_DATA_TYPE_INT64, acl.HCCL_REDUCE_PROD, comm, stream))
            ok(acl.aclrtSynchronizeStream(stream))
            out[r] = download(buf, 3, np.int64), ok(acl.HcclGetRankSize(comm)), ok(acl.HcclGetCommName(comm))
            ok(acl.HcclCommDestroy(comm))
            ok(acl.aclrtDestroyStream(stream))

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.3)   # rank 0 listens first (a client that finds no server retries with a growing pause)
        for t in threads:
            t.join(30)
        for r in range(2):
            product = (1 + attempt) * (2 + attempt)
            np.testing.assert_array_equal(out[r][0], [product] * 3)
            assert out[r][1:] == (2, "hccl_world_group")


# ---------------------------------------------------------------------------- data parallel
@pytest.mark.parametrize("world", [2, 4])
def test_data_parallel_training_equals_one_process(cpu_session, world):
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import data_parallel_ctc as example
    finally:
        sys.path.remove(str(ROOT / "examples"))
    steps = 3
    ranks = example.run_ranks(world, steps)
    single = example.train(steps)
    for params in ranks[1:]:
        for name in params:
            np.testing.assert_array_equal(params[name], ranks[0][name])   # every rank took the same steps
    for name in single:
        np.testing.assert_allclose(ranks[0][name], single[name], rtol=1e-4, atol=1e-5, err_msg=name)
        assert not np.array_equal(single[name], example.train_ctc.init_params(example.SEED)[name].numpy()) or \
            name.startswith("b"), name


# ---------------------------------------------------------------------------- the NCCL layer
NCCL_UNIQUE_ID_BYTES = 128


def install_nccl(monkeypatch, nccl) -> None:
    """`nccl` as cupy.cuda.nccl (and a bare cupy / cupy.cuda around it) for the test."""
    import types as pytypes
    cupy = pytypes.ModuleType("cupy")
    cupy.cuda = pytypes.ModuleType("cupy.cuda")
    cupy.cuda.nccl = nccl
    for name, module in (("cupy", cupy), ("cupy.cuda", cupy.cuda), ("cupy.cuda.nccl", nccl)):
        monkeypatch.setitem(sys.modules, name, module)


def check_unique_id(comm_id) -> None:
    """CuPy 14's NcclCommunicator: the id as `bytes` of NCCL_UNIQUE_ID_BYTES (cupy_backends/cuda/libs/nccl.pyx)."""
    if not isinstance(comm_id, bytes):
        raise TypeError(f"Argument 'commId' has incorrect type (expected bytes, got {type(comm_id).__name__})")
    if len(comm_id) != NCCL_UNIQUE_ID_BYTES:
        raise ValueError(f"commId length {len(comm_id)} != {NCCL_UNIQUE_ID_BYTES}.")


def test_nccl_layer_maps_types_ops_and_the_stream(monkeypatch):
    """hccl/nccl.py over a recording stand-in for cupy.cuda.nccl (no GPU here): every collective
    reaches NCCL with NCCL's type and op numbers, byte counts for data movement, and the CuPy
    stream's pointer; 16-bit integer reductions are refused; a failed verdict is this call's code."""
    import contextlib
    import types as pytypes

    from aclnn_gpu.base.errors import OpError
    from aclnn_gpu.hccl import nccl as layer

    calls = []

    class Communicator:
        def __init__(self, size, unique_id, rank):
            check_unique_id(unique_id)
            calls.append(("init", size, unique_id, rank))

        def __getattr__(self, name):
            return lambda *args: calls.append((name, *args))

    fake = pytypes.SimpleNamespace(NcclCommunicator=Communicator, NcclError=RuntimeError,
                                   get_unique_id=lambda: bytes(range(256 - 64, 256)) + bytes(range(64)))
    install_nccl(monkeypatch, fake)
    device = pytypes.SimpleNamespace(malloc=lambda n: 0x1000, free=lambda p: calls.append(("free", p)),
                                     scope=contextlib.nullcontext())
    stream = pytypes.SimpleNamespace(cupy=pytypes.SimpleNamespace(ptr=0xABC))

    unique_id = layer.new_unique_id()
    assert len(unique_id) == 128 and unique_id[0] == 256 - 64
    engine = layer.NcclEngine(unique_id, 1, 4, device)
    engine.all_reduce(stream, 10, 20, 5, np.dtype(np.float32), acl.HCCL_REDUCE_MAX, "t")
    engine.all_reduce(stream, 10, 20, 5, numpy_type(acl.HCCL_DATA_TYPE_BFP16), acl.HCCL_REDUCE_PROD, "t")
    engine.reduce_scatter(stream, 10, 20, 3, np.dtype(np.uint64), acl.HCCL_REDUCE_MIN, "t")
    engine.all_gather(stream, 10, 20, 12, "t")
    engine.broadcast(stream, 10, 12, 2, "t")
    engine.send(stream, 10, 12, 3, 0, "t", lambda: None)
    engine.recv(stream, 20, 12, 0, 0, "t")
    engine.barrier(stream, "t")
    engine.close()
    assert calls == [("init", 4, unique_id, 1),
                     ("allReduce", 10, 20, 5, 7, 2, 0xABC), ("allReduce", 10, 20, 5, 9, 1, 0xABC),
                     ("reduceScatter", 10, 20, 3, 5, 3, 0xABC), ("allGather", 10, 20, 12, 1, 0xABC),
                     ("broadcast", 10, 10, 12, 1, 2, 0xABC), ("send", 10, 12, 1, 3, 0xABC),
                     ("recv", 20, 12, 1, 0, 0xABC), ("allReduce", 0x1000, 0x1000, 1, 2, 0, 0xABC),
                     ("destroy",), ("free", 0x1000)]
    with pytest.raises(OpError) as refused:
        engine.all_reduce(stream, 10, 20, 5, np.dtype(np.int16), acl.HCCL_REDUCE_SUM, "HcclAllReduce")
    assert refused.value.status == acl.HCCL_E_NOT_SUPPORT and "int16" in refused.value.message

    def late():
        raise OpError(acl.ACL_ERROR_RT_WAIT_TIMEOUT, "HcclSend: timed out")
    with pytest.raises(OpError) as timed_out:
        engine.send(stream, 10, 12, 3, 0, "t", late)
    assert timed_out.value.status == acl.HCCL_E_TIMEOUT


class StrictNccl:
    """CuPy 14's cupy.cuda.nccl over NCCL's device rules: ncclCommInitRank binds the CUDA device current
    on the calling thread (NCCL src/init.cc: cudaGetDevice in ncclCommInitRank), two ranks of one
    communicator on one GPU are refused ("Multiple Ranks are using the same GPU", ncclInvalidUsage),
    and a collective's stream must be one of the communicator's device (a kernel launched on a stream
    of another device fails: CUDA_ERROR_INVALID_HANDLE, NCCL's ncclUnhandledCudaError)."""

    class NcclError(RuntimeError):
        def __init__(self, status: int, message: str):
            self.status = status
            super().__init__(message)

    def __init__(self) -> None:
        from aclnn_gpu.emulator import fakecupy
        self.fakecupy = fakecupy
        self.devices: dict[bytes, dict[int, int]] = {}   # unique id -> {device: rank}
        self.calls: list[tuple[str, int, int]] = []      # (call, communicator's device, current device)
        outer = self

        class NcclCommunicator:
            def __init__(self, ndev: int, comm_id: bytes, rank: int):
                check_unique_id(comm_id)
                device = outer.fakecupy.cuda.runtime.getDevice()
                bound = outer.devices.setdefault(comm_id, {})
                if device in bound:
                    raise outer.NcclError(5, f"ncclInvalidUsage: ranks {bound[device]} and {rank} are using the "
                                             f"same GPU ({device})")
                bound[device] = rank
                self.device = device

            def _launch(self, name: str, stream: int) -> None:
                if outer.fakecupy.streams._stream(stream).device_id != self.device:
                    raise outer.NcclError(1, f"ncclUnhandledCudaError: {name} on a stream of another device")
                outer.calls.append((name, self.device, outer.fakecupy.cuda.runtime.getDevice()))

            def allReduce(self, send, recv, count, datatype, op, stream):
                self._launch("allReduce", stream)

            def allGather(self, send, recv, count, datatype, stream):
                self._launch("allGather", stream)

            def destroy(self):
                outer.calls.append(("destroy", self.device, outer.fakecupy.cuda.runtime.getDevice()))

        self.NcclCommunicator = NcclCommunicator


def test_nccl_communicators_bind_their_own_device(monkeypatch):
    """(The emulated device stands in for two GPUs.) A rank's communicator is created, and
    its collectives and destroy are made, in its device's scope, whatever device the calling thread
    has current, so two ranks of one process on devices 0 and 1 bind devices 0 and 1."""
    from aclnn_gpu import runtime
    from aclnn_gpu.hccl import nccl as layer
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "emulated")
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    runtime.release_devices()
    nccl = StrictNccl()
    install_nccl(monkeypatch, nccl)
    engines = []
    try:
        assert acl.aclrtSetDevice(0) == 0            # this thread stays on device 0 throughout
        unique_id = bytes(range(NCCL_UNIQUE_ID_BYTES))
        for rank in (0, 1):
            engines.append(layer.NcclEngine(unique_id, rank, 2, runtime.device_of(rank)))
        assert [engine.comm.device for engine in engines] == [0, 1]
        for engine in engines:
            stream = engine.device.default_stream
            engine.all_reduce(stream, engine.scratch, engine.scratch, 1, np.dtype(np.float32), SUM, "HcclAllReduce")
            engine.barrier(stream, "HcclBarrier")
            engine.all_gather(stream, engine.scratch, engine.scratch, 4, "HcclAllGather")
        for engine in engines:
            engine.close()
        assert [call for call in nccl.calls if call[1] != call[2]] == []   # each call under its own device
        assert [call[:2] for call in nccl.calls] == [("allReduce", 0)] * 2 + [("allGather", 0)] + \
            [("allReduce", 1)] * 2 + [("allGather", 1), ("destroy", 0), ("destroy", 1)]
    finally:
        acl.aclrtSetDevice(0)
        runtime.release_devices()


# ---------------------------------------------------------------------------- fork, re-creation, count 0
FORK_PROGRAM = r"""
import json, os, sys, time
import aclnn_gpu as acl
acl.aclrtSetDevice(0)
ret, root = acl.HcclGetRootInfo(); assert ret == 0
ret, comm = acl.HcclCommInitRootInfo(1, root, 0); assert ret == 0, acl.aclGetRecentErrMsg()
ret, buf = acl.aclrtMalloc(16, 0); assert ret == 0
pid = os.fork()
if pid == 0:
    out = []
    out.append(("rank", int(acl.HcclGetRankId(comm)[0]), acl.aclGetRecentErrMsg()))
    acl.aclrtSetDevice(0)
    ret, mine = acl.aclrtMalloc(16, 0)
    out.append(("allreduce", int(acl.HcclAllReduce(mine, mine, 4, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM,
                                                   comm, None)), acl.aclGetRecentErrMsg()))
    if sys.argv[1] == "destroy":
        out.append(("destroy", int(acl.HcclCommDestroy(comm)), ""))
        out.append(("again", int(acl.HcclGetRankSize(comm)[0]), acl.aclGetRecentErrMsg()))
    ret, child_root = acl.HcclGetRootInfo()
    ret, own = acl.HcclCommInitRootInfo(1, child_root, 0)
    out.append(("own", int(ret), acl.aclGetRecentErrMsg() if ret else ""))
    out.append(("own allreduce", int(acl.HcclAllReduce(mine, mine, 4, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM,
                                                       own, None)), ""))
    out.append(("own destroy", int(acl.HcclCommDestroy(own)), ""))
    print("CHILD", json.dumps(out), flush=True)
    sys.exit(0)   # a normal exit: the interpreter's finalization runs (it hung on the inherited communicator)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("CHILD HUNG", flush=True)
    sys.exit(1)
print("CHILD EXIT", os.waitstatus_to_exitcode(status), flush=True)
ret = acl.HcclAllReduce(buf, buf, 4, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM, comm, None)
print("PARENT", int(ret), int(acl.aclrtSynchronizeStream(None)), int(acl.HcclCommDestroy(comm)), flush=True)
"""


@pytest.mark.parametrize("child", ["use", "destroy"])
def test_a_fork_child_never_hangs_on_an_inherited_communicator(child):
    """The parent holds a live communicator and forks: the child's calls on it are refused at once
    with a message naming fork, HcclCommDestroy drops only the child's copy, the child makes and
    uses its own, and exits normally without hanging; the parent's communicator still works."""
    import os
    import subprocess
    env = dict(os.environ, ACLNN_GPU_DEVICE="cpu", PYTHONPATH=str(ROOT), HCCL_EXEC_TIMEOUT="20")
    proc = subprocess.run([sys.executable, "-c", FORK_PROGRAM, child], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "CHILD EXIT 0" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    (report,) = [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("CHILD [")]
    steps = {name: (code, message) for name, code, message in json.loads(report)}
    for name in ("rank", "allreduce"):
        code, message = steps[name]
        assert code == acl.HCCL_E_PARA and "fork()" in message, (name, message)
    assert "another device" not in steps["allreduce"][1]
    if child == "destroy":
        assert steps["destroy"][0] == 0
        assert steps["again"][0] == acl.HCCL_E_PARA and "destroyed" in steps["again"][1]
    assert steps["own"][0] == 0 and steps["own allreduce"][0] == 0 and steps["own destroy"][0] == 0, steps
    assert "PARENT 0 0 0" in proc.stdout, proc.stdout


def test_a_root_info_makes_a_communicator_again_after_destroy(cpu_session):
    """The same root info, used again once every rank destroyed its communicator, makes a new one
    (HCCL's root info names a meeting, not one communicator)."""
    root = ok(acl.HcclGetRootInfo())

    def body(rank, comm, stream):
        buf = upload(np.full(3, rank + 1, np.float32))
        ok(acl.HcclAllReduce(buf, buf, 3, F32, SUM, comm, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        return download(buf, 3, np.float32)

    for _ in range(3):
        for got in in_threads(2, body, root):
            np.testing.assert_array_equal(got, [3, 3, 3])


def test_a_rank_joining_twice_is_refused(cpu_session, monkeypatch):
    """Two threads passing the same rank: the second is refused at once (HCCL_E_PARA), naming the rule."""
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "2")
    root = ok(acl.HcclGetRootInfo())
    out = {}

    def rank(which):
        out[which] = acl.HcclCommInitRootInfo(2, root, 0)[0], acl.aclGetRecentErrMsg()

    import threading
    first = threading.Thread(target=rank, args=("first",))
    first.start()
    time.sleep(0.5)   # the first joined (and waits for rank 1, bounded)
    rank("second")
    first.join(30)
    assert out["second"][0] == acl.HCCL_E_PARA and "already joined this communicator" in out["second"][1], out
    assert out["first"][0] == acl.HCCL_E_TIMEOUT, out


def test_count_zero_is_success_before_any_check(session):
    """HCCL returns HCCL_SUCCESS for a count of 0 before it looks at anything else (null buffers,
    even a null comm); such calls take no part in the agreement, so the ranks stay in step."""
    require_gpus(session.kind, 2, NCCL_ONE_RANK_PER_GPU)

    def body(rank, comm, stream):
        calls = [
            acl.HcclAllReduce(None, None, 0, F32, SUM, comm, stream),
            acl.HcclAllReduce(None, None, 0, 99, 99, None, "not a stream"),
            acl.HcclReduce(None, None, 0, F32, SUM, 7, comm, stream),
            acl.HcclBroadcast(None, 0, F32, 9, comm, stream),
            acl.HcclAllGather(None, None, 0, F32, comm, stream),
            acl.HcclReduceScatter(None, None, 0, F32, SUM, comm, stream),
            acl.HcclScatter(None, None, 0, F32, 9, comm, stream),
            acl.HcclAlltoAll(None, 0, F32, None, 0, F32, comm, stream),
            acl.HcclAllGatherV(None, 0, None, [0, 0], [0, 0], F32, comm, stream),
            acl.HcclReduceScatterV(None, [0, 0], [0, 0], None, 0, F32, SUM, comm, stream),
            acl.HcclSend(None, 0, F32, 1 - rank, comm, stream),
            acl.HcclRecv(None, 0, F32, 1 - rank, comm, stream),
        ]
        buf = upload(np.full(2, rank + 1, np.int32))
        ok(acl.HcclAllReduce(buf, buf, 2, acl.HCCL_DATA_TYPE_INT32, SUM, comm, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        return [int(c) for c in calls], download(buf, 2, np.int32)

    for codes, after in in_threads(2, body):
        assert codes == [0] * len(codes), codes
        np.testing.assert_array_equal(after, [3, 3])


def _listening(port: int) -> set[str]:
    """The local addresses a TCP socket of this host listens on at `port` (from /proc/net/tcp*)."""
    import socket as sockets
    found = set()
    for table, family, width in (("/proc/net/tcp", sockets.AF_INET, 8), ("/proc/net/tcp6", sockets.AF_INET6, 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:   # LISTEN
                raw = bytes.fromhex(address)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))   # host order words
                found.add(sockets.inet_ntop(family, raw[:width // 2]))
    return found


def test_the_store_listens_on_the_address_asked_for_only(cpu_session, monkeypatch):
    """HcclGetRootInfo's store listens on the loopback address by default and on HCCL_IF_IP when set,
    never on every interface; an HCCL_IF_IP that is not this host's is refused."""
    from aclnn_gpu.hccl.bootstrap import Meeting
    monkeypatch.delenv("HCCL_IF_IP", raising=False)
    meeting = Meeting.decode(ok(acl.HcclGetRootInfo()), "test")
    assert meeting.host == "127.0.0.1"
    assert _listening(meeting.port) == {"127.0.0.1"}
    monkeypatch.setenv("HCCL_IF_IP", "127.0.0.2")   # in 127.0.0.0/8: an address of this host too
    meeting = Meeting.decode(ok(acl.HcclGetRootInfo()), "test")
    assert (meeting.host, _listening(meeting.port)) == ("127.0.0.2", {"127.0.0.2"})
    monkeypatch.setenv("HCCL_IF_IP", "192.0.2.1")   # TEST-NET-1: nobody's
    assert acl.HcclGetRootInfo() == (acl.HCCL_E_PARA, None)
    assert "HCCL_IF_IP=192.0.2.1 is not an address of this host" in acl.aclGetRecentErrMsg()


def test_hccl_interface_variables_choose_the_addresses_and_nccls_interface(cpu_session, monkeypatch):
    """HCCL_SOCKET_IFNAME picks the interface whose address the store listens on (and the engine
    binds); on cuda the same variables tell NCCL its interface (NCCL_SOCKET_IFNAME) unless the user
    set that: HCCL_SOCKET_IFNAME as is, or the interface holding HCCL_IF_IP."""
    from aclnn_gpu.hccl import addresses
    for name in ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    loopback = addresses.interface_of("127.0.0.1")
    assert loopback is not None
    monkeypatch.setenv("HCCL_SOCKET_IFNAME", "=" + loopback)
    assert addresses.store_address("t") == "127.0.0.1"
    assert addresses.engine_address("127.0.0.1", "t") == "127.0.0.1"
    addresses.nccl_environment()
    assert os.environ["NCCL_SOCKET_IFNAME"] == "=" + loopback
    monkeypatch.delenv("NCCL_SOCKET_IFNAME")
    monkeypatch.delenv("HCCL_SOCKET_IFNAME")
    monkeypatch.setenv("HCCL_IF_IP", "127.0.0.1")
    addresses.nccl_environment()
    assert os.environ["NCCL_SOCKET_IFNAME"] == "=" + loopback
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")   # the user's choice stays
    addresses.nccl_environment()
    assert os.environ["NCCL_SOCKET_IFNAME"] == "ib0"
    assert addresses._socket_ifname("^" + loopback) != "127.0.0.1"   # "^": every interface but that one


def test_api_reference_documents_every_hccl_name_and_enum():
    """docs/API.md §9 names every public HCCL function and struct, and its enum tables are the package's."""
    api = (ROOT / "docs" / "API.md").read_text()
    section = api[api.index("## 9. HCCL collectives"):]
    for name in acl.hccl.__all__:
        if name.startswith("Hccl"):
            assert f"{name}" in section, name
    for enum_type in acl.hccl.types.ENUMS:
        assert f"#### `{enum_type.__name__}`" in section, enum_type
        for member in enum_type:
            assert f"| `{member.name}` | {int(member)} |" in section, member


def test_the_heartbeat_rule_over_a_frozen_machine_and_a_dead_rank():
    """liveness.Liveness.tick over an in-memory store and a given clock: a machine frozen as a whole
    for 5 s (every counter stale on waking, longer than the 2 s heartbeat) raises no fault, since
    the watcher's own beats must see a counter stand still; a rank that stops for good is reported
    (HCCL_E_REMOTE, naming it) once both the time and the beats are there; one that said bye
    (HcclCommDestroy) is a leaver, not a dead rank."""
    from aclnn_gpu.hccl.rendezvous import Health
    from aclnn_gpu.hccl.liveness import Liveness

    class Store:
        def __init__(self):
            self.data = {}

        def add(self, key, n):
            self.data[key] = str(int(self.data.get(key, b"0")) + n).encode()
            return int(self.data[key])

        def multi_get(self, keys):
            return [self.data[k] for k in keys]

        def check(self, keys):
            return all(k in self.data for k in keys)

        def get(self, key):
            return self.data[key]

        def set(self, key, value):
            self.data[key] = value.encode() if isinstance(value, str) else value

        def compare_set(self, key, expected, value):
            self.data.setdefault(key, value.encode())
            return self.data[key]

    store = Store()
    health = Health()
    watcher = Liveness(store, 0, 3, 2.0, health)          # rank 0 watches ranks 1 and 2; a beat every 0.5 s
    Liveness(store, 1, 3, 2.0, Health())
    peer2 = Liveness(store, 2, 3, 2.0, Health())
    clock = 100.0
    for _ in range(4):                                     # all alive
        clock += 0.5
        store.add("hb/1", 1)
        store.add("hb/2", 1)
        assert watcher.tick(clock)
    clock += 5.0                                           # the whole machine froze: nobody beat
    assert watcher.tick(clock) and health.fault is None    # wakes first: both counters stale for 5 s
    store.add("hb/1", 1)
    store.add("hb/2", 1)
    clock += 0.5
    assert watcher.tick(clock) and health.fault is None
    peer2.stop()                                           # rank 2 leaves (HcclCommDestroy)
    for _ in range(3):                                     # rank 1 dies: its counter stands still from now on
        clock += 0.5
        assert watcher.tick(clock) and health.fault is None
    assert health.left == {2}
    for _ in range(2):
        clock += 0.5
        watcher.tick(clock)
    assert health.fault is not None and health.fault[0] == acl.HCCL_E_REMOTE, health.fault
    assert health.fault[1].startswith("rank 1 stopped: no heartbeat for 2 s"), health.fault
