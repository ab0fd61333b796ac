"""HCCL's entry points (`hccl.h`): communicators and collectives, C-style like the rest of the
library (they return an HcclResult, plus the out-parameter where C has one; nothing raises for a
user error; the message goes to `aclGetRecentErrMsg`).

Each collective checks its arguments on this rank, then agrees with every rank (`HcclComm.agree`:
same collective, same count, type, op and root; a rank whose own checks failed makes all of them
fail), and only then queues the engine's collective on the stream, in stream order.
"""
from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np

from ..errors import OpError, c_api, fail
from ..status import aclError
from . import bootstrap
from .comm import HcclComm, build, check_comm, device_of, engine_for, require_torch_distributed
from .types import NUMPY_DTYPE, HcclDataType, HcclReduceOp, HcclResult

OK = HcclResult.HCCL_SUCCESS
PARA = HcclResult.HCCL_E_PARA


def hccl_api(n_out: int = 0) -> Callable:
    return c_api(n_out, internal=HcclResult.HCCL_E_INTERNAL)


# ---------------------------------------------------------------------------- argument checks
def _integer(value: Any, fn: str, what: str, low: int, high: int | None = None) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) < low or \
            (high is not None and int(value) > high):
        fail(PARA, f"{fn}: {what} {value!r} must be an integer in [{low}, {'inf' if high is None else high}]")
    return int(value)


def _data_type(value: Any, fn: str) -> np.dtype:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or \
            int(value) not in HcclDataType._value2member_map_:
        fail(PARA, f"{fn}: dataType {value!r} is not an HcclDataType (0..11)")
    return NUMPY_DTYPE[HcclDataType(int(value))]


def _reduce_op(value: Any, fn: str) -> HcclReduceOp:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or \
            int(value) not in HcclReduceOp._value2member_map_:
        fail(PARA, f"{fn}: op {value!r} is not an HcclReduceOp (0..3)")
    return HcclReduceOp(int(value))


def _stream(comm: HcclComm, stream: Any, fn: str) -> Any:
    device, impl = device_of(stream, fn)
    if device is not comm.device:
        fail(PARA, f"{fn}: stream belongs to another device than comm")
    return impl


def _buffer(comm: HcclComm, ptr: Any, nbytes: int, fn: str, what: str) -> int:
    if ptr is None:
        fail(HcclResult.HCCL_E_PTR, f"{fn}: {what} is null")
    comm.device.registry.check(ptr, nbytes, f"{fn}: {what}", status=PARA, on_device=True)
    return int(ptr)


def _peer(comm: HcclComm, value: Any, fn: str, what: str) -> int:
    peer = _integer(value, fn, what, 0, comm.size - 1)
    if peer == comm.rank:
        fail(PARA, f"{fn}: {what} {peer} is this rank itself")
    return peer


def _what(fn: str, comm: HcclComm) -> str:
    return f"{fn} (rank {comm.rank} of {comm.size})"


def _agreed(fn: str, comm: HcclComm, local: Callable[[], tuple[dict, Any]], keys: tuple[str, ...]) -> Any:
    """Run this rank's checks, then agree with every rank: refused on all ranks when one rank's own
    checks failed, when ranks called different collectives, or when they disagree on `keys`."""
    try:
        header, prepared = local()
        refused = None
    except OpError as e:
        header, prepared, refused = {}, None, e
    headers = comm.agree(fn, dict(header, refused=None if refused is None else refused.message))
    if refused is not None:
        raise refused
    for r, h in enumerate(headers):
        if h.get("refused"):
            fail(PARA, f"{fn}: rank {r} refused the call: {h['refused']}")
        if h["call"] != fn:
            fail(PARA, f"{fn}: rank {r} called {h['call']} at this point (every rank must call the same collectives "
                       "in the same order)")
    for key in keys:
        if len({h[key] for h in headers}) > 1:
            shown = ", ".join(f"rank {r} {key}={h[key]}" for r, h in enumerate(headers))
            fail(PARA, f"{fn}: the ranks disagree on {key}: {shown}")
    return prepared


# ---------------------------------------------------------------------------- communicators
@hccl_api(n_out=1)
def HcclGetRootInfo() -> tuple[int, bytes]:
    fn = "HcclGetRootInfo"
    require_torch_distributed(fn)
    device, _ = device_of(None, fn)
    engine = engine_for(device)
    try:
        host, port = bootstrap.serve(bootstrap.connect_timeout())
    except OpError:
        raise
    except Exception as e:  # noqa: BLE001 - the listening socket could not be opened
        fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: cannot listen on {bootstrap.host_address()} (HCCL_IF_IP): {e}")
    nccl_id = None
    if engine == "nccl":
        from .nccl import new_unique_id
        nccl_id = new_unique_id()
    return OK, bootstrap.Meeting(host, port, bootstrap.new_key(), engine, nccl_id).encode()


@hccl_api(n_out=1)
def HcclCommInitRootInfo(nRanks: int, rootInfo: bytes, rank: int) -> tuple[int, HcclComm]:
    fn = "HcclCommInitRootInfo"
    n = _integer(nRanks, fn, "nRanks", 1)
    r = _integer(rank, fn, "rank", 0, n - 1)
    meeting = bootstrap.Meeting.decode(rootInfo, fn)
    require_torch_distributed(fn)
    device, _ = device_of(None, fn)
    if meeting.engine != engine_for(device):
        fail(PARA, f"{fn}: rootInfo was made for {meeting.engine} but this process's {device.kind} device uses "
                   f"{engine_for(device)} (every rank must use the same device kind)")
    return OK, build(meeting, n, r, device, fn)


@hccl_api(n_out=1)
def HcclCommInitClusterInfo(clusterInfoPath: str, rank: int) -> tuple[int, HcclComm]:
    fn = "HcclCommInitClusterInfo"
    r = _integer(rank, fn, "rank", 0)
    table = bootstrap.read_rank_table(clusterInfoPath, r, fn)
    require_torch_distributed(fn)
    device, _ = device_of(None, fn)
    meeting = bootstrap.Meeting(table.root_host, bootstrap.base_port(), "rt-" + table.digest, engine_for(device))
    return OK, build(meeting, table.n_ranks, r, device, fn, serve_here=(r == 0))


@hccl_api()
def HcclCommDestroy(comm: HcclComm) -> int:
    c = check_comm(comm, "HcclCommDestroy")
    c.destroyed = True
    c.engine.close()
    return OK


@hccl_api(n_out=1)
def HcclGetRankSize(comm: HcclComm) -> tuple[int, int]:
    return OK, check_comm(comm, "HcclGetRankSize").size


@hccl_api(n_out=1)
def HcclGetRankId(comm: HcclComm) -> tuple[int, int]:
    return OK, check_comm(comm, "HcclGetRankId").rank


# ---------------------------------------------------------------------------- collectives
def _reduction(fn: str, comm: Any, send_buf: Any, recv_buf: Any, count: Any, count_name: str, data_type: Any,
               op: Any, stream: Any, send_blocks: int) -> tuple[HcclComm, tuple]:
    """The checks and agreement of a reducing collective; `send_blocks` x count elements are sent."""
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype, reduce = _integer(count, fn, count_name, 0), _data_type(data_type, fn), _reduce_op(op, fn)
        impl = _stream(c, stream, fn)
        what = "sendBuf" if send_blocks == 1 else f"sendBuf ({count_name} x rank size elements)"
        send = _buffer(c, send_buf, n * send_blocks * dtype.itemsize, fn, what)
        recv = _buffer(c, recv_buf, n * dtype.itemsize, fn, "recvBuf")
        return {count_name: n, "dataType": int(data_type), "op": int(op)}, (impl, send, recv, n, dtype, reduce)

    return c, _agreed(fn, c, local, (count_name, "dataType", "op"))


@hccl_api()
def HcclAllReduce(sendBuf: int, recvBuf: int, count: int, dataType: int, op: int, comm: HcclComm,
                  stream: Any) -> int:
    fn = "HcclAllReduce"
    c, (impl, send, recv, n, dtype, reduce) = _reduction(fn, comm, sendBuf, recvBuf, count, "count", dataType, op,
                                                         stream, 1)
    if n:
        c.engine.all_reduce(impl, send, recv, n, dtype, reduce, _what(fn, c))
    return OK


@hccl_api()
def HcclReduceScatter(sendBuf: int, recvBuf: int, recvCount: int, dataType: int, op: int, comm: HcclComm,
                      stream: Any) -> int:
    fn = "HcclReduceScatter"
    c = check_comm(comm, fn)
    c, (impl, send, recv, n, dtype, reduce) = _reduction(fn, comm, sendBuf, recvBuf, recvCount, "recvCount", dataType,
                                                         op, stream, c.size)
    if n:
        c.engine.reduce_scatter(impl, send, recv, n, dtype, reduce, _what(fn, c))
    return OK


@hccl_api()
def HcclAllGather(sendBuf: int, recvBuf: int, sendCount: int, dataType: int, comm: HcclComm, stream: Any) -> int:
    fn = "HcclAllGather"
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype = _integer(sendCount, fn, "sendCount", 0), _data_type(dataType, fn)
        impl = _stream(c, stream, fn)
        send = _buffer(c, sendBuf, n * dtype.itemsize, fn, "sendBuf")
        recv = _buffer(c, recvBuf, n * c.size * dtype.itemsize, fn, "recvBuf (sendCount x rank size elements)")
        return {"sendCount": n, "dataType": int(dataType)}, (impl, send, recv, n * dtype.itemsize)

    impl, send, recv, nbytes = _agreed(fn, c, local, ("sendCount", "dataType"))
    if nbytes:
        c.engine.all_gather(impl, send, recv, nbytes, _what(fn, c))
    return OK


@hccl_api()
def HcclBroadcast(buf: int, count: int, dataType: int, root: int, comm: HcclComm, stream: Any) -> int:
    fn = "HcclBroadcast"
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype = _integer(count, fn, "count", 0), _data_type(dataType, fn)
        source = _integer(root, fn, "root", 0, c.size - 1)
        impl = _stream(c, stream, fn)
        target = _buffer(c, buf, n * dtype.itemsize, fn, "buf")
        return {"count": n, "dataType": int(dataType), "root": source}, (impl, target, n * dtype.itemsize, source)

    impl, target, nbytes, source = _agreed(fn, c, local, ("count", "dataType", "root"))
    if nbytes:
        c.engine.broadcast(impl, target, nbytes, source, _what(fn, c))
    return OK


@hccl_api()
def HcclBarrier(comm: HcclComm, stream: Any) -> int:
    fn = "HcclBarrier"
    c = check_comm(comm, fn)
    impl = _agreed(fn, c, lambda: ({}, _stream(c, stream, fn)), ())
    c.engine.barrier(impl, _what(fn, c))
    return OK


# ---------------------------------------------------------------------------- point to point
def _p2p_checks(c: HcclComm, buf: Any, count: Any, dataType: Any, stream: Any, fn: str, what: str) -> tuple:
    n, dtype = _integer(count, fn, "count", 0), _data_type(dataType, fn)
    impl = _stream(c, stream, fn)
    return {"count": n, "dataType": int(dataType)}, (impl, _buffer(c, buf, n * dtype.itemsize, fn, what),
                                                     n * dtype.itemsize)


def _next_message(table: dict[int, int], peer: int, c: HcclComm) -> int:
    with c.lock:
        index = table.get(peer, 0)
        table[peer] = index + 1
        return index


@hccl_api()
def HcclSend(sendBuf: int, count: int, dataType: int, destRank: int, comm: HcclComm, stream: Any) -> int:
    """Posts its header and returns; the receiver checks it, and the queued send waits (on the
    stream) for the receiver's verdict, so a refused message fails both sides, bounded."""
    fn = "HcclSend"
    c = check_comm(comm, fn)
    peer = _peer(c, destRank, fn, "destRank")
    key = f"p{c.rank}>{peer}/{_next_message(c.sent, peer, c)}"
    try:
        header, (impl, source, nbytes) = _p2p_checks(c, sendBuf, count, dataType, stream, fn, "sendBuf")
    except OpError as e:
        c.rendezvous.post(key, {"refused": e.message}, fn)
        raise
    c.rendezvous.post(key, dict(header, refused=None), fn)
    what = _what(fn, c)

    def verdict() -> None:
        try:
            answer = c.side.take(key + "/verdict", what, f"rank {peer} to call HcclRecv")
        except OpError as e:
            raise OpError(aclError.ACL_ERROR_RT_WAIT_TIMEOUT, f"{what}: {e.message}") from None
        if answer["refused"]:
            raise OpError(aclError.ACL_ERROR_RT_PARAM_INVALID, f"{what}: rank {peer} refused the message: "
                                                               f"{answer['refused']}")

    if nbytes:
        c.engine.send(impl, source, nbytes, peer, int(key.rsplit("/", 1)[1]), what, verdict)
    return OK


@hccl_api()
def HcclRecv(recvBuf: int, count: int, dataType: int, srcRank: int, comm: HcclComm, stream: Any) -> int:
    fn = "HcclRecv"
    c = check_comm(comm, fn)
    peer = _peer(c, srcRank, fn, "srcRank")
    index = _next_message(c.received, peer, c)
    key = f"p{peer}>{c.rank}/{index}"
    try:
        header, (impl, target, nbytes) = _p2p_checks(c, recvBuf, count, dataType, stream, fn, "recvBuf")
        refused = None
    except OpError as e:
        header, refused = {}, e
    sent = c.rendezvous.take(key, fn, f"rank {peer} to call HcclSend")
    problem = None
    if refused is not None:
        problem = refused.message
    elif sent["refused"]:
        problem = f"{fn}: rank {peer} refused its HcclSend: {sent['refused']}"
    elif (sent["count"], sent["dataType"]) != (header["count"], header["dataType"]):
        problem = (f"{fn}: rank {peer} sends count={sent['count']} dataType={sent['dataType']}, this rank receives "
                   f"count={header['count']} dataType={header['dataType']}")
    c.rendezvous.post(key + "/verdict", {"refused": problem}, fn)
    if refused is not None:
        raise refused
    if problem is not None:
        fail(PARA, problem)
    if nbytes:
        c.engine.recv(impl, target, nbytes, peer, index, _what(fn, c))
    return OK
