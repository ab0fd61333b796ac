"""HCCL's collectives beyond the core (HcclReduce, HcclScatter, HcclAlltoAll, HcclAlltoAllV,
HcclAllGatherV, HcclReduceScatterV, HcclBatchSendRecv) on the cpu and emulated devices against
NumPy: every type and reduce op with 2 and 4 ranks; their bad inputs and cross-rank mismatches
(HCCL's codes on every rank, the communicator still usable after); the communicator calls
(HcclCommInitRootInfoConfig, HcclCreateSubCommConfig, HcclCommInitAll, HcclGetCommName,
HcclGetErrorString, HcclGetCommAsyncError); and the NCCL engine's mapping of each, over a
recording stand-in of CuPy's binding. Ranks are threads of the test process (hccl_ranks.in_threads)."""
from __future__ import annotations

import contextlib
import threading
import types as pytypes

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import aclnn_gpu as acl  # noqa: E402
from hccl_ranks import download, in_threads, ok, poisoned, upload  # noqa: E402
from support import near_end, require_gpus  # noqa: E402
from test_hccl import (  # noqa: E402
    DTYPES, NCCL_ONE_RANK_PER_GPU, OPS, REFERENCE, install_nccl, numpy_type, rank_input, same,
)

F32, I32, SUM = acl.HCCL_DATA_TYPE_FP32, acl.HCCL_DATA_TYPE_INT32, acl.HCCL_REDUCE_SUM
COUNT = 3


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "20")
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "20")


def data(data_type, op, rank: int, salt: int, count: int = COUNT) -> np.ndarray:
    return rank_input(data_type, op, rank + 10 * salt, count)


def reduce_of(op, arrays: list[np.ndarray]) -> np.ndarray:
    stack = np.stack(arrays)
    return REFERENCE[op].reduce(stack, axis=0, dtype=stack.dtype)


# ---------------------------------------------------------------------------- every type and op
@pytest.mark.parametrize("n", [2, 4])
def test_new_collectives_every_type_and_op_against_numpy(session, n):
    require_gpus(session.kind, n, NCCL_ONE_RANK_PER_GPU)
    sizes = [r + 1 for r in range(n)]                          # v-variants: rank r's block has r + 1 elements
    gapped = [int(sum(sizes[:r])) + 2 * r for r in range(n)]   # displacements with a gap of 2 between blocks
    span = gapped[-1] + sizes[-1]

    def body(rank, comm, stream):
        got = {}
        for data_type in DTYPES:
            dtype = numpy_type(data_type)
            size = dtype.itemsize
            for op in OPS:
                root = (int(op) + int(data_type)) % n
                send, reduced = upload(data(data_type, op, rank, 0)), poisoned(COUNT * size)
                blocks = np.zeros(span, dtype)
                for b in range(n):
                    blocks[gapped[b]:gapped[b] + sizes[b]] = data(data_type, op, rank, b + 1, sizes[b])
                v_send, v_recv = upload(blocks), poisoned(sizes[rank] * size)
                ok(acl.HcclReduce(send, reduced, COUNT, data_type, op, root, comm, stream))
                ok(acl.HcclReduceScatterV(v_send, sizes, gapped, v_recv, sizes[rank], data_type, op, comm, stream))
                ok(acl.aclrtSynchronizeStream(stream))
                if rank == root:
                    got["reduce", data_type, op] = download(reduced, COUNT, dtype)
                got["reducescatterv", data_type, op] = download(v_recv, sizes[rank], dtype)
            # data movement: every buffer made before the first call (a synchronous copy waits for every
            # stream of the device, a peer's queued send included, which waits for this rank's receive)
            matrix = upload(np.concatenate([data(data_type, SUM, rank, b) for b in range(n)]))
            to_all, scattered = poisoned(n * COUNT * size), poisoned(COUNT * size)
            mine = upload(data(data_type, SUM, rank, 0, sizes[rank]))
            gathered = poisoned(span * size)
            # all-to-all-v: rank i sends (i + j) % 3 elements (0 included) of its block j to rank j
            s_counts = [(rank + j) % 3 for j in range(n)]
            r_counts = [(i + rank) % 3 for i in range(n)]
            r_displs = [sum(r_counts[i + 1:]) for i in range(n)]   # blocks stored in reverse rank order
            v_out = poisoned(max(sum(r_counts), 1) * size)
            ring_in = upload(data(data_type, SUM, rank, 7))
            ring_out, self_out = poisoned(COUNT * size), poisoned(COUNT * size)
            back_out = poisoned(COUNT * size)
            ok(acl.HcclAlltoAll(matrix, COUNT, data_type, to_all, COUNT, data_type, comm, stream))
            ok(acl.HcclScatter(matrix if rank == 1 else None, scattered, COUNT, data_type, 1, comm, stream))
            ok(acl.HcclAllGatherV(mine, sizes[rank], gathered, sizes, gapped, data_type, comm, stream))
            ok(acl.HcclAlltoAllV(matrix, s_counts, [j * COUNT for j in range(n)], data_type, v_out, r_counts,
                                 r_displs, data_type, comm, stream))
            nxt, prev = (rank + 1) % n, (rank - 1) % n
            items = [acl.HcclSendRecvItem(acl.HCCL_SEND, ring_in, COUNT, data_type, nxt),
                     acl.HcclSendRecvItem(acl.HCCL_RECV, ring_out, COUNT, data_type, prev),
                     acl.HcclSendRecvItem(acl.HCCL_RECV, self_out, COUNT, data_type, rank),
                     acl.HcclSendRecvItem(acl.HCCL_SEND, ring_in, COUNT, data_type, rank)]
            if n > 2:   # the reverse ring too (with 2 ranks it would be a second send to the same rank)
                items += [acl.HcclSendRecvItem(acl.HCCL_SEND, ring_in, COUNT, data_type, prev),
                          acl.HcclSendRecvItem(acl.HCCL_RECV, back_out, COUNT, data_type, nxt)]
            ok(acl.HcclBatchSendRecv(items, len(items), comm, stream))
            ok(acl.aclrtSynchronizeStream(stream))
            got["alltoall", data_type] = download(to_all, n * COUNT, dtype)
            got["scatter", data_type] = download(scattered, COUNT, dtype)
            got["allgatherv", data_type] = download(gathered, span, dtype)
            got["alltoallv", data_type] = download(v_out, sum(r_counts), dtype)
            got["ring", data_type] = download(ring_out, COUNT, dtype)
            got["self", data_type] = download(self_out, COUNT, dtype)
            if n > 2:
                got["back", data_type] = download(back_out, COUNT, dtype)
        return got

    for rank, got in enumerate(in_threads(n, body)):
        for data_type in DTYPES:
            for op in OPS:
                root = (int(op) + int(data_type)) % n
                if rank == root:
                    expected = reduce_of(op, [data(data_type, op, r, 0) for r in range(n)])
                    assert same(got["reduce", data_type, op], expected), (data_type, op)
                expected = reduce_of(op, [data(data_type, op, r, rank + 1, sizes[rank]) for r in range(n)])
                assert same(got["reducescatterv", data_type, op], expected), (data_type, op)
            expected = np.concatenate([data(data_type, SUM, i, rank) for i in range(n)])
            assert same(got["alltoall", data_type], expected), data_type
            assert same(got["scatter", data_type], data(data_type, SUM, 1, rank)), data_type
            gathered = got["allgatherv", data_type]
            for r in range(n):
                assert same(gathered[gapped[r]:gapped[r] + sizes[r]], data(data_type, SUM, r, 0, sizes[r])), data_type
            r_counts = [(i + rank) % 3 for i in range(n)]
            expected = np.concatenate([data(data_type, SUM, i, rank)[:r_counts[i]] for i in reversed(range(n))])
            assert same(got["alltoallv", data_type], expected), data_type
            assert same(got["ring", data_type], data(data_type, SUM, (rank - 1) % n, 7)), data_type
            assert same(got["self", data_type], data(data_type, SUM, rank, 7)), data_type
            if n > 2:
                assert same(got["back", data_type], data(data_type, SUM, (rank + 1) % n, 7)), data_type


# ---------------------------------------------------------------------------- bad input
def _bad_cases(comm, stream, rank, good, short):
    """(name, call, expected code on rank 0, on rank 1): each call is made by both ranks."""
    other = 1 - rank
    item = acl.HcclSendRecvItem
    pair = [item(acl.HCCL_SEND, good, 4, F32, other), item(acl.HCCL_RECV, good, 4, F32, other)]
    return [
        ("reduce root differs", lambda: acl.HcclReduce(good, good, 4, F32, SUM, rank, comm, stream), 1, 1),
        ("reduce op 4", lambda: acl.HcclReduce(good, good, 4, F32, 4, 0, comm, stream), 1, 1),
        ("reduce null recvBuf on rank 1", lambda: acl.HcclReduce(good, None if rank else good, 4, F32, SUM, 0, comm,
                                                                 stream), 1, 2),
        ("reduce root 2 of 2", lambda: acl.HcclReduce(good, good, 4, F32, SUM, 2, comm, stream), 1, 1),
        ("scatter null sendBuf off the root", lambda: acl.HcclScatter(None if rank else good, good, 2, F32, 0, comm,
                                                                      stream), 0, 0),
        ("scatter root's sendBuf short", lambda: acl.HcclScatter(short if rank == 0 else good, good, 2, F32, 0, comm,
                                                                 stream), 1, 1),
        ("alltoall sendCount != recvCount", lambda: acl.HcclAlltoAll(good, 2, F32, good, 1, F32, comm, stream), 1, 1),
        ("alltoall sendType != recvType", lambda: acl.HcclAlltoAll(good, 2, F32, good, 2, I32, comm, stream), 1, 1),
        ("alltoall recvBuf short", lambda: acl.HcclAlltoAll(good, 2, F32, short, 2, F32, comm, stream), 1, 1),
        ("alltoallv counts disagree", lambda: acl.HcclAlltoAllV(good, [1, 1], [0, 1], F32, good, [1, 2 - rank],
                                                                [0, 1], F32, comm, stream), 1, 1),
        ("alltoallv sendCounts of 3 ranks", lambda: acl.HcclAlltoAllV(good, [1, 1, 1], [0, 1, 2], F32, good, [1, 1],
                                                                      [0, 1], F32, comm, stream), 1, 1),
        ("alltoallv null sendCounts on rank 0", lambda: acl.HcclAlltoAllV(good, None if rank == 0 else [1, 1], [0, 1],
                                                                          F32, good, [1, 1], [2, 3], F32, comm,
                                                                          stream), 2, 1),
        ("alltoallv negative displacement", lambda: acl.HcclAlltoAllV(good, [1, 1], [0, -1], F32, good, [1, 1],
                                                                      [0, 1], F32, comm, stream), 1, 1),
        ("alltoallv null recvBuf with counts", lambda: acl.HcclAlltoAllV(good, [1, 1], [0, 1], F32, None, [1, 1],
                                                                         [0, 1], F32, comm, stream), 2, 2),
        ("allgatherv recvCounts disagree with sendCount", lambda: acl.HcclAllGatherV(good, 2, good, [2, 3], [0, 4], F32,
                                                                                     comm, stream), 1, 1),
        ("allgatherv recvBuf short", lambda: acl.HcclAllGatherV(good, 2, short, [2, 2], [0, 2], F32, comm, stream),
         1, 1),
        ("reducescatterv recvCount != sendCounts[rank]", lambda: acl.HcclReduceScatterV(good, [2, 2], [0, 2], good, 3,
                                                                                        F32, SUM, comm, stream), 1, 1),
        ("reducescatterv sendCounts differ", lambda: acl.HcclReduceScatterV(good, [2, 2 + rank], [0, 2], good,
                                                                            2 + rank * rank, F32, SUM, comm, stream),
         1, 1),
        ("batch itemNum 0", lambda: acl.HcclBatchSendRecv(pair, 0, comm, stream), 1, 1),
        ("batch itemNum above 2 x ranks", lambda: acl.HcclBatchSendRecv(pair * 3, 6, comm, stream), 1, 1),
        ("batch null info", lambda: acl.HcclBatchSendRecv(None, 2, comm, stream), 2, 2),
        ("batch two sends to one rank", lambda: acl.HcclBatchSendRecv([pair[0], pair[0]], 2, comm, stream), 1, 1),
        ("batch null buf", lambda: acl.HcclBatchSendRecv([item(acl.HCCL_SEND, None, 4, F32, other)], 1, comm,
                                                         stream), 2, 2),
        ("batch remoteRank 2 of 2", lambda: acl.HcclBatchSendRecv([item(acl.HCCL_SEND, good, 4, F32, 2)], 1, comm,
                                                                  stream), 1, 1),
        ("batch sendRecvType 2", lambda: acl.HcclBatchSendRecv([item(2, good, 4, F32, other)], 1, comm, stream),
         1, 1),
        ("batch send to itself alone", lambda: acl.HcclBatchSendRecv([item(acl.HCCL_SEND, good, 4, F32, rank)], 1,
                                                                     comm, stream), 1, 1),
        ("batch exchange", lambda: acl.HcclBatchSendRecv(pair, 2, comm, stream), 0, 0),
        # last: the refused send fails rank 0's stream, which skips what is queued behind it
        ("batch count differs", lambda: acl.HcclBatchSendRecv([item(acl.HCCL_RECV, good, 3, F32, other)] if rank else
                                                              [item(acl.HCCL_SEND, good, 4, F32, other)], 1, comm,
                                                              stream), 0, 1),
    ]


def test_bad_input_of_the_new_collectives_fails_on_every_rank(session):
    """HCCL's codes on every rank for one rank's bad argument or a cross-rank mismatch, each message
    naming the function and the parameter; the communicator works after all of them."""
    require_gpus(session.kind, 2, NCCL_ONE_RANK_PER_GPU)
    names = []

    def body(rank, comm, stream):
        good = upload(np.arange(8, dtype=np.float32) + rank)
        short = near_end(upload(np.zeros(2, np.float32)), 8)   # its last 8 bytes (aclrtMalloc rounds up)
        outcomes = []
        for name, call, *_ in _bad_cases(comm, stream, rank, good, short):
            ret = call()
            outcomes.append((int(ret), acl.aclGetRecentErrMsg()))
            if rank == 0:
                names.append(name)
        sync = acl.aclrtSynchronizeStream(stream)   # the refused batch send fails on its stream
        sync_message = acl.aclGetRecentErrMsg()
        ok(acl.HcclAllReduce(good, good, 8, F32, SUM, comm, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        return outcomes, (int(sync), sync_message), download(good, 8, np.float32)

    results = in_threads(2, body)
    cases = _bad_cases(None, None, 0, 0, 0)
    for rank, (outcomes, (sync, sync_message), after) in enumerate(results):
        for (name, _, *expected), (ret, message) in zip(cases, outcomes):
            assert ret == expected[rank], f"{name}: rank {rank} returned {ret}: {message}"
            if ret:
                assert message.startswith("Hccl") and "\n" not in message, (name, message)
        if rank == 0:
            assert sync == acl.ACL_ERROR_RT_PARAM_INVALID and "refused the message" in sync_message, sync_message
        else:
            assert sync == 0, sync_message
        assert np.isfinite(after).all()
    messages = [dict(zip(names, [m for _, m in results[r][0]])) for r in range(2)]
    assert messages[0]["alltoallv counts disagree"] == ("HcclAlltoAllV: rank 1 sends sendCounts[0]=1 elements to "
                                                        "rank 0, which receives recvCounts[1]=2")
    assert messages[0]["alltoall sendCount != recvCount"] == "HcclAlltoAll: sendCount 2 and recvCount 1 must be equal"
    assert messages[1]["reduce null recvBuf on rank 1"] == "HcclReduce: recvBuf is null"
    assert messages[0]["reduce null recvBuf on rank 1"].startswith("HcclReduce: rank 1 refused the call")
    assert messages[0]["batch two sends to one rank"].startswith("HcclBatchSendRecv: sendRecvInfo[1] is a second send")


# ---------------------------------------------------------------------------- communicator calls
def test_config_init_sub_communicator_and_names(cpu_session):
    """HcclCommInitRootInfoConfig names the communicator (HcclGetCommName); HcclCreateSubCommConfig
    makes a communicator of ranks 3 and 1 of 4 (the others take no part) that reduces over them only,
    and can be made again after HcclCommDestroy; config errors are HCCL's codes."""
    root = ok(acl.HcclGetRootInfo())
    config = acl.HcclCommConfig()
    acl.HcclCommConfigInit(config)
    assert config.hcclBufferSize == acl.HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET and config.hcclCommName == ""
    config.hcclCommName = "dp_group"
    n = 4
    comms = [None] * n
    errors = []

    def rank(r):
        try:
            comm = ok(acl.HcclCommInitRootInfoConfig(n, root, r, config))
            comms[r] = comm
            names = [ok(acl.HcclGetCommName(comm))]
            if r in (3, 1):
                sub_config = acl.HcclCommConfig(hcclCommName="pair")
                for _ in range(2):   # made, used, destroyed, made again
                    sub = ok(acl.HcclCreateSubCommConfig(comm, 2, [3, 1], 7, [3, 1].index(r), sub_config))
                    assert ok(acl.HcclGetRankSize(sub)) == 2 and ok(acl.HcclGetRankId(sub)) == [3, 1].index(r)
                    buf = upload(np.full(2, r, np.int32))
                    stream = ok(acl.aclrtCreateStream())
                    ok(acl.HcclAllReduce(buf, buf, 2, I32, SUM, sub, stream))
                    ok(acl.aclrtSynchronizeStream(stream))
                    assert download(buf, 2, np.int32).tolist() == [4, 4]
                    names.append(ok(acl.HcclGetCommName(sub)))
                    ok(acl.HcclCommDestroy(sub))
                    ok(acl.aclrtDestroyStream(stream))
            comms[r] = (comm, names)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for r in range(n):
        comm, names = comms[r]
        assert names[0] == "dp_group" and names[1:] == (["pair", "pair"] if r in (3, 1) else []), names
    comm = comms[0][0]
    bad = [
        (lambda: acl.HcclCreateSubCommConfig(comm, 2, [1, 2], 0, 0, acl.HcclCommConfig()), acl.HCCL_E_PARA,
         "rankIds[subCommRankId=0] is 1, but this is rank 0"),
        (lambda: acl.HcclCreateSubCommConfig(comm, 2, [0, 0], 0, 0, acl.HcclCommConfig()), acl.HCCL_E_PARA,
         "different ranks"),
        (lambda: acl.HcclCreateSubCommConfig(comm, 5, [0, 1, 2, 3, 4], 0, 0, acl.HcclCommConfig()), acl.HCCL_E_PARA,
         "rankNum"),
        (lambda: acl.HcclCreateSubCommConfig(comm, 1, [0], 0, 0, None), acl.HCCL_E_PTR, "config is null"),
        (lambda: acl.HcclCommInitRootInfoConfig(2, root, 0, acl.HcclCommConfig(hcclDeterministic=5)), acl.HCCL_E_PARA,
         "hcclDeterministic"),
        (lambda: acl.HcclCommInitRootInfoConfig(2, root, 0, acl.HcclCommConfig(hcclCommName="x" * 128)),
         acl.HCCL_E_PARA, "hcclCommName"),
        (lambda: acl.HcclCommInitRootInfoConfig(2, root, 0, "config"), acl.HCCL_E_PARA, "HcclCommConfig"),
        (lambda: acl.HcclGetCommName(None), acl.HCCL_E_PTR, "comm is null"),
    ]
    for call, code, words in bad:
        ret, made = call()
        assert (ret, made) == (code, None) and words in acl.aclGetRecentErrMsg(), acl.aclGetRecentErrMsg()
    for r in range(n):
        ok(acl.HcclCommDestroy(comms[r][0]))
    assert acl.HcclCommDestroy(None) == 0   # HCCL skips a null comm


def test_comm_init_all_one_process_two_devices(session, monkeypatch):
    """CANN's single-process multi-device init: one communicator per device, rank i on devices[i];
    each rank's collectives from a thread with its device current."""
    from aclnn_gpu import runtime
    require_gpus(session.kind, 2, "one rank per GPU")
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "2")
    runtime.release_devices()
    try:
        assert acl.HcclCommInitAll(2, [0, 0]) == (acl.HCCL_E_PARA, None)
        assert "name a device twice" in acl.aclGetRecentErrMsg()
        assert acl.HcclCommInitAll(0, []) == (acl.HCCL_E_PARA, None)
        comms = ok(acl.HcclCommInitAll(2, [1, 0]))
        assert [comm.device.id for comm in comms] == [1, 0]
        out = {}

        def rank(r):
            ok(acl.aclrtSetDevice([1, 0][r]))
            stream = ok(acl.aclrtCreateStream())
            buf = upload(np.full(3, r + 1, np.float32))
            ok(acl.HcclAllReduce(buf, buf, 3, F32, SUM, comms[r], stream))
            ok(acl.aclrtSynchronizeStream(stream))
            out[r] = download(buf, 3, np.float32)
            ok(acl.aclrtDestroyStream(stream))
            ok(acl.HcclCommDestroy(comms[r]))

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [out[r].tolist() for r in range(2)] == [[3, 3, 3]] * 2
    finally:
        acl.aclrtSetDevice(0)
        runtime.release_devices()


def test_error_strings_and_async_error(cpu_session):
    assert acl.HcclGetErrorString(acl.HCCL_SUCCESS) == "no error"
    assert acl.HcclGetErrorString(acl.HCCL_E_PARA) == "parameter error"
    assert acl.HcclGetErrorString(acl.HCCL_E_REMOTE) == "error cqe"
    assert acl.HcclGetErrorString(99) == acl.HcclGetErrorString(-1) == "unknow error"   # HCCL's spelling
    assert acl.HcclGetCommAsyncError(None) == (acl.HCCL_E_PTR, None)

    def body(rank, comm, stream):
        return acl.HcclGetCommAsyncError(comm)

    assert in_threads(2, body) == [(0, 0), (0, 0)]


# ---------------------------------------------------------------------------- the NCCL layer
def test_nccl_layer_maps_the_new_collectives(monkeypatch):
    """hccl/nccl.py over a recording stand-in of cupy.cuda.nccl: reduce is ncclReduce with NCCL's type
    and op; scatter, all-to-all(v) and batches are sends and receives in one ncclGroupStart/End (byte
    counts at byte offsets); all-gather-v is one ncclBroadcast per rank, reduce-scatter-v one
    ncclReduce per rank, grouped; a fault aborts the communicator and refuses later calls; the async
    error maps NCCL's codes to HCCL's."""
    from aclnn_gpu.base.errors import OpError
    from aclnn_gpu.hccl import nccl as layer
    from aclnn_gpu.hccl.gloo import Item

    calls = []

    class NcclError(RuntimeError):
        def __init__(self, status):
            self.status = status
            super().__init__(f"NCCL error {status}")

    class Communicator:
        async_status = 0

        def __init__(self, size, unique_id, rank):
            calls.append(("init", size, rank))

        def check_async_error(self):
            if Communicator.async_status:
                raise NcclError(Communicator.async_status)

        def __getattr__(self, name):
            return lambda *args: calls.append((name, *args))

    fake = pytypes.SimpleNamespace(NcclCommunicator=Communicator, NcclError=NcclError,
                                   groupStart=lambda: calls.append(("groupStart",)),
                                   groupEnd=lambda: calls.append(("groupEnd",)),
                                   get_unique_id=lambda: bytes(128))
    install_nccl(monkeypatch, fake)
    device = pytypes.SimpleNamespace(malloc=lambda n: 0x1000, free=lambda p: None, scope=contextlib.nullcontext())
    stream = pytypes.SimpleNamespace(cupy=pytypes.SimpleNamespace(ptr=0xABC))
    engine = layer.NcclEngine(bytes(128), 1, 3, device)
    del calls[:]
    engine.reduce(stream, 10, 20, 5, np.dtype(np.float32), acl.HCCL_REDUCE_MIN, 2, "t")
    engine.scatter(stream, 100, 20, 8, 1, "t")              # rank 1 is the root
    engine.all_to_all_v(stream, 100, [4, 0, 8], [0, 4, 4], 200, [0, 4, 4], [0, 0, 4], "t")
    engine.all_gather_v(stream, 10, 4, 200, [4, 8, 0], [0, 4, 12], "t")
    engine.reduce_scatter_v(stream, 100, [8, 4, 0], [0, 8, 12], 20, np.dtype(np.int32), acl.HCCL_REDUCE_SUM, "t")
    engine.batch(stream, [Item(True, 10, 8, 2, 0, lambda: None), Item(False, 20, 8, 0, 0), Item(False, 30, 0, 2, 0)],
                 "t")
    assert calls == [
        ("reduce", 10, 20, 5, 7, 3, 2, 0xABC),
        ("groupStart",), ("send", 100, 8, 1, 0, 0xABC), ("send", 108, 8, 1, 1, 0xABC), ("send", 116, 8, 1, 2, 0xABC),
        ("recv", 20, 8, 1, 1, 0xABC), ("groupEnd",),
        ("groupStart",), ("send", 100, 4, 1, 0, 0xABC), ("recv", 200, 4, 1, 1, 0xABC), ("send", 104, 8, 1, 2, 0xABC),
        ("recv", 204, 4, 1, 2, 0xABC), ("groupEnd",),
        ("groupStart",), ("broadcast", 10, 200, 4, 1, 0, 0xABC), ("broadcast", 10, 204, 8, 1, 1, 0xABC),
        ("groupEnd",),
        ("groupStart",), ("reduce", 100, 20, 2, 2, 0, 0, 0xABC), ("reduce", 108, 20, 1, 2, 0, 1, 0xABC),
        ("groupEnd",),
        ("groupStart",), ("send", 10, 8, 1, 2, 0xABC), ("recv", 20, 8, 1, 0, 0xABC), ("groupEnd",),
    ]
    assert engine.async_error() == 0
    Communicator.async_status = 6   # ncclRemoteError
    assert engine.async_error() == acl.HCCL_E_REMOTE
    del calls[:]
    engine.on_fault()
    assert calls == [("abort",)]
    with pytest.raises(OpError) as refused:
        engine.all_reduce(stream, 10, 20, 5, np.dtype(np.float32), SUM, "HcclAllReduce")
    assert refused.value.status == acl.HCCL_E_REMOTE and "aborted" in refused.value.message
    assert engine.close() is True and ("destroy",) not in calls   # an aborted communicator is not destroyed too


# ---------------------------------------------------------------------------- the C ABI
def test_new_hccl_calls_through_the_c_abi(tmp_path):
    """HcclReduce, HcclScatter, HcclAlltoAll and HcclGetCommAsyncError from C (hccl/hccl.h), one rank."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("cffi")
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler})")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, ACLNN_GPU_DEVICE="cpu", HCCL_EXEC_TIMEOUT="20",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    flags = subprocess.run([sys.executable, "-m", "aclnn_gpu.capi", "--cflags", "--libs"], env=env,
                           capture_output=True, text=True, timeout=600)
    assert flags.returncode == 0, flags.stderr
    program = tmp_path / "hccl_capi"
    built = subprocess.run([compiler, "-std=c99", "-pedantic", "-Werror", "-Wall", "-Wextra",
                            str(root / "tests" / "hccl_capi.c"), "-o", str(program), *flags.stdout.split()],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    proc = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "hccl more ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "counts differ -> 1 HcclAlltoAll: sendCount 4 and recvCount 2 must be equal" in proc.stdout
