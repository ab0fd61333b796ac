"""HCCL's collectives and point-to-point calls (`hccl.h`), C-style (an HcclResult back, the reason
in `aclGetRecentErrMsg`).

A count of 0 returns HCCL_SUCCESS before any other check, as HCCL does (op_base.cc): such a call
takes no part in the cross-rank agreement, so every rank must pass 0. Otherwise each collective
checks its arguments on this rank, then agrees with every rank (`HcclComm.agree`: same
collective, same counts, types, ops and roots; a rank whose own checks failed makes all of them
fail), and only then queues the engine's work on the stream, in stream order. Sends and receives
pair up in call order per pair of ranks: the receiver checks the sender's header and posts a
verdict the queued send waits for, so a refused message fails both sides, bounded.
"""
from __future__ import annotations

from typing import Any, Callable

from ..base.errors import OpError, fail
from ..base.status import aclError
from .api import (
    OK,
    PARA,
    PTR,
    buffer,
    counts,
    data_type,
    hccl_api,
    integer,
    is_zero,
    optional_buffer,
    peer,
    reduce_op,
    stream_of,
)
from .comm import HcclComm, check_comm
from .gloo import Item
from .types import HcclResult, HcclSendRecvItem, HcclSendRecvType


def _what(fn: str, comm: HcclComm) -> str:
    return f"{fn} (rank {comm.rank} of {comm.size})"


def _agreed(fn: str, comm: HcclComm, local: Callable[[], tuple[dict, Any]], keys: tuple[str, ...],
            cross: Callable[[list[dict]], None] | None = None) -> Any:
    """Run this rank's checks, then agree with every rank: refused on all ranks when one rank's own
    checks failed, when ranks called different collectives, when they disagree on `keys`, or when
    `cross` (given every rank's header) refuses."""
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
        if len({str(h[key]) for h in headers}) > 1:
            shown = ", ".join(f"rank {r} {key}={h[key]}" for r, h in enumerate(headers))
            fail(PARA, f"{fn}: the ranks disagree on {key}: {shown}")
    if cross is not None:
        cross(headers)
    return prepared


# ---------------------------------------------------------------------------- reductions
def _reduction(fn: str, comm: Any, send_buf: Any, recv_buf: Any, count: Any, count_name: str, dataType: Any,
               op: Any, stream: Any, send_blocks: int, root: Any = None) -> tuple[HcclComm, tuple]:
    """The checks and agreement of a reducing collective; `send_blocks` x count elements are sent."""
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype, reduce = integer(count, fn, count_name, 0), data_type(dataType, fn), reduce_op(op, fn)
        source = -1 if root is None else integer(root, fn, "root", 0, c.size - 1)
        impl = stream_of(c, stream, fn)
        what = "sendBuf" if send_blocks == 1 else f"sendBuf ({count_name} x rank size elements)"
        send = buffer(c, send_buf, n * send_blocks * dtype.itemsize, fn, what)
        recv = buffer(c, recv_buf, n * dtype.itemsize, fn, "recvBuf")
        header = {count_name: n, "dataType": int(dataType), "op": int(op), "root": source}
        return header, (impl, send, recv, n, dtype, reduce, source)

    return c, _agreed(fn, c, local, (count_name, "dataType", "op", "root"))


@hccl_api()
def HcclAllReduce(sendBuf: int, recvBuf: int, count: int, dataType: int, op: int, comm: HcclComm,
                  stream: Any) -> int:
    fn = "HcclAllReduce"
    if is_zero(count):
        return OK
    c, (impl, send, recv, n, dtype, reduce, _) = _reduction(fn, comm, sendBuf, recvBuf, count, "count", dataType,
                                                            op, stream, 1)
    c.engine.all_reduce(impl, send, recv, n, dtype, reduce, _what(fn, c))
    return OK


@hccl_api()
def HcclReduce(sendBuf: int, recvBuf: int, count: int, dataType: int, op: int, root: int, comm: HcclComm,
               stream: Any) -> int:
    """The reduction of every rank's sendBuf into root's recvBuf (recvBuf is checked on every rank,
    as HCCL does, and written on the root only)."""
    fn = "HcclReduce"
    if is_zero(count):
        return OK
    c, (impl, send, recv, n, dtype, reduce, source) = _reduction(fn, comm, sendBuf, recvBuf, count, "count",
                                                                 dataType, op, stream, 1, root)
    c.engine.reduce(impl, send, recv, n, dtype, reduce, source, _what(fn, c))
    return OK


@hccl_api()
def HcclReduceScatter(sendBuf: int, recvBuf: int, recvCount: int, dataType: int, op: int, comm: HcclComm,
                      stream: Any) -> int:
    fn = "HcclReduceScatter"
    if is_zero(recvCount):
        return OK
    c = check_comm(comm, fn)
    c, (impl, send, recv, n, dtype, reduce, _) = _reduction(fn, comm, sendBuf, recvBuf, recvCount, "recvCount",
                                                            dataType, op, stream, c.size)
    c.engine.reduce_scatter(impl, send, recv, n, dtype, reduce, _what(fn, c))
    return OK


@hccl_api()
def HcclReduceScatterV(sendBuf: int, sendCounts: Any, sendDispls: Any, recvBuf: int, recvCount: int, dataType: int,
                       op: int, comm: HcclComm, stream: Any) -> int:
    """Rank r receives the reduction of every rank's block r (sendCounts[r] elements at sendDispls[r]):
    every rank passes the same sendCounts, and rank r's recvCount is sendCounts[r]."""
    fn = "HcclReduceScatterV"
    c = check_comm(comm, fn)
    if is_zero(recvCount) and sendCounts is not None and _all_zero(sendCounts, c.size):
        return OK

    def local() -> tuple[dict, Any]:
        dtype, reduce = data_type(dataType, fn), reduce_op(op, fn)
        sizes = counts(sendCounts, c.size, fn, "sendCounts")
        displs = counts(sendDispls, c.size, fn, "sendDispls")
        n = integer(recvCount, fn, "recvCount", 0)
        if n != sizes[c.rank]:
            fail(PARA, f"{fn}: recvCount {n} must be sendCounts[{c.rank}] = {sizes[c.rank]} (this rank's block)")
        impl = stream_of(c, stream, fn)
        span = max((d + k for k, d in zip(sizes, displs) if k), default=0)
        send = optional_buffer(c, sendBuf, span * dtype.itemsize, fn, "sendBuf (sendDispls[i] + sendCounts[i] "
                                                                      "elements)")
        recv = optional_buffer(c, recvBuf, n * dtype.itemsize, fn, "recvBuf")
        size = dtype.itemsize
        header = {"sendCounts": sizes, "dataType": int(dataType), "op": int(op)}
        return header, (impl, send, [k * size for k in sizes], [d * size for d in displs], recv, dtype, reduce)

    impl, send, sizes, displs, recv, dtype, reduce = _agreed(fn, c, local, ("sendCounts", "dataType", "op"))
    c.engine.reduce_scatter_v(impl, send, sizes, displs, recv, dtype, reduce, _what(fn, c))
    return OK


def _all_zero(value: Any, n: int) -> bool:
    try:
        items = list(value)
    except TypeError:
        return False
    return len(items) == n and all(is_zero(v) for v in items)


# ---------------------------------------------------------------------------- data movement
@hccl_api()
def HcclAllGather(sendBuf: int, recvBuf: int, sendCount: int, dataType: int, comm: HcclComm, stream: Any) -> int:
    fn = "HcclAllGather"
    if is_zero(sendCount):
        return OK
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype = integer(sendCount, fn, "sendCount", 0), data_type(dataType, fn)
        impl = stream_of(c, stream, fn)
        send = buffer(c, sendBuf, n * dtype.itemsize, fn, "sendBuf")
        recv = buffer(c, recvBuf, n * c.size * dtype.itemsize, fn, "recvBuf (sendCount x rank size elements)")
        return {"sendCount": n, "dataType": int(dataType)}, (impl, send, recv, n * dtype.itemsize)

    impl, send, recv, nbytes = _agreed(fn, c, local, ("sendCount", "dataType"))
    c.engine.all_gather(impl, send, recv, nbytes, _what(fn, c))
    return OK


@hccl_api()
def HcclAllGatherV(sendBuf: int, sendCount: int, recvBuf: int, recvCounts: Any, recvDispls: Any, dataType: int,
                   comm: HcclComm, stream: Any) -> int:
    """Every rank receives rank r's sendCount elements at recvDispls[r]: recvCounts[r] must be rank
    r's sendCount on every rank."""
    fn = "HcclAllGatherV"
    c = check_comm(comm, fn)
    if is_zero(sendCount) and recvCounts is not None and _all_zero(recvCounts, c.size):
        return OK

    def local() -> tuple[dict, Any]:
        n, dtype = integer(sendCount, fn, "sendCount", 0), data_type(dataType, fn)
        sizes = counts(recvCounts, c.size, fn, "recvCounts")
        displs = counts(recvDispls, c.size, fn, "recvDispls")
        impl = stream_of(c, stream, fn)
        span = max((d + k for k, d in zip(sizes, displs) if k), default=0)
        send = optional_buffer(c, sendBuf, n * dtype.itemsize, fn, "sendBuf")
        recv = optional_buffer(c, recvBuf, span * dtype.itemsize, fn, "recvBuf (recvDispls[i] + recvCounts[i] "
                                                                      "elements)")
        size = dtype.itemsize
        header = {"sendCount": n, "recvCounts": sizes, "dataType": int(dataType)}
        return header, (impl, send, n * size, recv, [k * size for k in sizes], [d * size for d in displs])

    def cross(headers: list[dict]) -> None:
        for r, h in enumerate(headers):
            for i, k in enumerate(h["recvCounts"]):
                if k != headers[i]["sendCount"]:
                    fail(PARA, f"{fn}: rank {r} expects recvCounts[{i}]={k} elements from rank {i}, which sends "
                               f"sendCount={headers[i]['sendCount']}")

    impl, send, nbytes, recv, sizes, displs = _agreed(fn, c, local, ("dataType",), cross)
    c.engine.all_gather_v(impl, send, nbytes, recv, sizes, displs, _what(fn, c))
    return OK


@hccl_api()
def HcclBroadcast(buf: int, count: int, dataType: int, root: int, comm: HcclComm, stream: Any) -> int:
    fn = "HcclBroadcast"
    if is_zero(count):
        return OK
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype = integer(count, fn, "count", 0), data_type(dataType, fn)
        source = integer(root, fn, "root", 0, c.size - 1)
        impl = stream_of(c, stream, fn)
        target = buffer(c, buf, n * dtype.itemsize, fn, "buf")
        return {"count": n, "dataType": int(dataType), "root": source}, (impl, target, n * dtype.itemsize, source)

    impl, target, nbytes, source = _agreed(fn, c, local, ("count", "dataType", "root"))
    c.engine.broadcast(impl, target, nbytes, source, _what(fn, c))
    return OK


@hccl_api()
def HcclScatter(sendBuf: int, recvBuf: int, recvCount: int, dataType: int, root: int, comm: HcclComm,
                stream: Any) -> int:
    """Rank r receives block r (recvCount elements) of root's sendBuf; sendBuf is read (and checked)
    on the root only, as in HCCL."""
    fn = "HcclScatter"
    if is_zero(recvCount):
        return OK
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype = integer(recvCount, fn, "recvCount", 0), data_type(dataType, fn)
        source = integer(root, fn, "root", 0, c.size - 1)
        impl = stream_of(c, stream, fn)
        recv = buffer(c, recvBuf, n * dtype.itemsize, fn, "recvBuf")
        send = buffer(c, sendBuf, n * c.size * dtype.itemsize, fn, "sendBuf (recvCount x rank size elements)") \
            if c.rank == source else 0
        header = {"recvCount": n, "dataType": int(dataType), "root": source}
        return header, (impl, send, recv, n * dtype.itemsize, source)

    impl, send, recv, nbytes, source = _agreed(fn, c, local, ("recvCount", "dataType", "root"))
    c.engine.scatter(impl, send, recv, nbytes, source, _what(fn, c))
    return OK


@hccl_api()
def HcclAlltoAll(sendBuf: Any, sendCount: int, sendType: int, recvBuf: Any, recvCount: int, recvType: int,
                 comm: HcclComm, stream: Any) -> int:
    """Rank i's block j (sendCount elements) goes to rank j's block i; HCCL requires sendCount ==
    recvCount and sendType == recvType."""
    fn = "HcclAlltoAll"
    if is_zero(sendCount) and is_zero(recvCount):
        return OK
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        n, dtype = integer(sendCount, fn, "sendCount", 0), data_type(sendType, fn, "sendType")
        m, _ = integer(recvCount, fn, "recvCount", 0), data_type(recvType, fn, "recvType")
        if n != m:
            fail(PARA, f"{fn}: sendCount {n} and recvCount {m} must be equal")
        if int(sendType) != int(recvType):
            fail(PARA, f"{fn}: sendType {int(sendType)} and recvType {int(recvType)} must be equal")
        impl = stream_of(c, stream, fn)
        total = n * c.size * dtype.itemsize
        send = buffer(c, sendBuf, total, fn, "sendBuf (sendCount x rank size elements)")
        recv = buffer(c, recvBuf, total, fn, "recvBuf (recvCount x rank size elements)")
        block = n * dtype.itemsize
        return {"sendCount": n, "dataType": int(sendType)}, (impl, send, recv, block)

    impl, send, recv, block = _agreed(fn, c, local, ("sendCount", "dataType"))
    layout = [block] * c.size, [r * block for r in range(c.size)]
    c.engine.all_to_all_v(impl, send, *layout, recv, *layout, _what(fn, c))
    return OK


@hccl_api()
def HcclAlltoAllV(sendBuf: Any, sendCounts: Any, sdispls: Any, sendType: int, recvBuf: Any, recvCounts: Any,
                  rdispls: Any, recvType: int, comm: HcclComm, stream: Any) -> int:
    """Rank i sends sendCounts[j] elements at sdispls[j] to rank j, which receives them as
    recvCounts[i] elements at rdispls[i]: the two must be equal, and sendType == recvType. A buffer
    may be null when its counts are all 0."""
    fn = "HcclAlltoAllV"
    c = check_comm(comm, fn)

    def local() -> tuple[dict, Any]:
        dtype = data_type(sendType, fn, "sendType")
        data_type(recvType, fn, "recvType")
        if int(sendType) != int(recvType):
            fail(PARA, f"{fn}: sendType {int(sendType)} and recvType {int(recvType)} must be equal")
        s_counts, s_displs = counts(sendCounts, c.size, fn, "sendCounts"), counts(sdispls, c.size, fn, "sdispls")
        r_counts, r_displs = counts(recvCounts, c.size, fn, "recvCounts"), counts(rdispls, c.size, fn, "rdispls")
        impl = stream_of(c, stream, fn)
        size = dtype.itemsize
        s_span = max((d + k for k, d in zip(s_counts, s_displs) if k), default=0)
        r_span = max((d + k for k, d in zip(r_counts, r_displs) if k), default=0)
        send = optional_buffer(c, sendBuf, s_span * size, fn, "sendBuf (sdispls[i] + sendCounts[i] elements)")
        recv = optional_buffer(c, recvBuf, r_span * size, fn, "recvBuf (rdispls[i] + recvCounts[i] elements)")
        header = {"sendCounts": s_counts, "recvCounts": r_counts, "dataType": int(sendType)}
        scale = (lambda values: [v * size for v in values])
        return header, (impl, send, scale(s_counts), scale(s_displs), recv, scale(r_counts), scale(r_displs))

    def cross(headers: list[dict]) -> None:
        for i, h in enumerate(headers):
            for j, k in enumerate(h["sendCounts"]):
                if k != headers[j]["recvCounts"][i]:
                    fail(PARA, f"{fn}: rank {i} sends sendCounts[{j}]={k} elements to rank {j}, which receives "
                               f"recvCounts[{i}]={headers[j]['recvCounts'][i]}")

    impl, send, s_counts, s_displs, recv, r_counts, r_displs = _agreed(fn, c, local, ("dataType",), cross)
    c.engine.all_to_all_v(impl, send, s_counts, s_displs, recv, r_counts, r_displs, _what(fn, c))
    return OK


@hccl_api()
def HcclBarrier(comm: HcclComm, stream: Any) -> int:
    fn = "HcclBarrier"
    c = check_comm(comm, fn)
    impl = _agreed(fn, c, lambda: ({}, stream_of(c, stream, fn)), ())
    c.engine.barrier(impl, _what(fn, c))
    return OK


# ---------------------------------------------------------------------------- point to point
def _next_message(table: dict[int, int], other: int, c: HcclComm) -> int:
    with c.lock:
        index = table.get(other, 0)
        table[other] = index + 1
        return index


def _post(c: HcclComm, other: int, header: dict, fn: str) -> tuple[str, int]:
    """Post a send's header to `other` (the next message of this pair); its key and index."""
    index = _next_message(c.sent, other, c)
    key = f"p{c.rank}>{other}/{index}"
    c.rendezvous.post(key, header, fn)
    return key, index


def _verdict(c: HcclComm, key: str, other: int, what: str) -> Callable[[], None]:
    """What a queued send waits for: its receiver's verdict on the header (bounded)."""
    def wait() -> None:
        try:
            answer = c.side.take(key + "/verdict", what, f"rank {other} to call HcclRecv", other)
        except OpError as e:
            code = aclError.ACL_ERROR_RT_WAIT_TIMEOUT if e.status == HcclResult.HCCL_E_TIMEOUT else \
                aclError.ACL_ERROR_RT_INTERNAL_ERROR
            raise OpError(code, f"{what}: {HcclResult(e.status).name}: {e.message}") from None
        if answer["refused"]:
            raise OpError(aclError.ACL_ERROR_RT_PARAM_INVALID, f"{what}: rank {other} refused the message: "
                                                               f"{answer['refused']}")
    return wait


def _receive(c: HcclComm, other: int, header: dict | None, refused: OpError | None, fn: str) -> tuple[int, str | None]:
    """Take the next message's header from `other`, judge it against this receive (`header`, or
    this rank's own refusal) and post the verdict; (the message's index, the problem if any)."""
    index = _next_message(c.received, other, c)
    key = f"p{other}>{c.rank}/{index}"
    sent = c.rendezvous.take(key, fn, f"rank {other} to call HcclSend", other)
    problem = None
    if refused is not None:
        problem = refused.message
    elif sent["refused"]:
        problem = f"{fn}: rank {other} refused its send: {sent['refused']}"
    elif header is not None and sent["nbytes"] != header["nbytes"]:
        problem = (f"{fn}: rank {other} sends count={sent['count']} dataType={sent['dataType']}, this rank receives "
                   f"count={header['count']} dataType={header['dataType']}")
    c.rendezvous.post(key + "/verdict", {"refused": problem}, fn)
    return index, problem


def _p2p_checks(c: HcclComm, buf: Any, count: Any, dataType: Any, stream: Any, fn: str, what: str) -> tuple:
    n, dtype = integer(count, fn, "count", 0), data_type(dataType, fn)
    impl = stream_of(c, stream, fn)
    nbytes = n * dtype.itemsize
    return {"count": n, "dataType": int(dataType), "nbytes": nbytes}, (impl, buffer(c, buf, nbytes, fn, what), nbytes)


@hccl_api()
def HcclSend(sendBuf: int, count: int, dataType: int, destRank: int, comm: HcclComm, stream: Any) -> int:
    """Posts its header and returns; the receiver checks it, and the queued send waits (on the
    stream) for the receiver's verdict, so a refused message fails both sides, bounded."""
    fn = "HcclSend"
    if is_zero(count):
        return OK
    c = check_comm(comm, fn)
    other = peer(c, destRank, fn, "destRank")
    try:
        header, (impl, source, nbytes) = _p2p_checks(c, sendBuf, count, dataType, stream, fn, "sendBuf")
    except OpError as e:
        _post(c, other, {"refused": e.message}, fn)
        raise
    key, index = _post(c, other, dict(header, refused=None), fn)
    what = _what(fn, c)
    c.engine.send(impl, source, nbytes, other, index, what, _verdict(c, key, other, what))
    return OK


@hccl_api()
def HcclRecv(recvBuf: int, count: int, dataType: int, srcRank: int, comm: HcclComm, stream: Any) -> int:
    fn = "HcclRecv"
    if is_zero(count):
        return OK
    c = check_comm(comm, fn)
    other = peer(c, srcRank, fn, "srcRank")
    try:
        header, (impl, target, nbytes) = _p2p_checks(c, recvBuf, count, dataType, stream, fn, "recvBuf")
        refused = None
    except OpError as e:
        header, refused = None, e
    index, problem = _receive(c, other, header, refused, fn)
    if refused is not None:
        raise refused
    if problem is not None:
        fail(PARA, problem)
    c.engine.recv(impl, target, nbytes, other, index, _what(fn, c))
    return OK


def _batch_items(c: HcclComm, info: Any, itemNum: Any, fn: str) -> list[tuple[bool, Any, int, int, Any]]:
    """The structure of a batch, checked as HCCL's GetPairWiseList does: (send?, buf, count, peer,
    dataType) per item; at most one send to and one receive from each rank, a pair to itself."""
    if info is None:
        fail(PTR, f"{fn}: sendRecvInfo is null")
    num = integer(itemNum, fn, "itemNum", 1, 2 * c.size)
    try:
        items = list(info)
    except TypeError:
        fail(PARA, f"{fn}: sendRecvInfo must be a sequence of HcclSendRecvItem, got {type(info).__name__}")
    if len(items) < num:
        fail(PARA, f"{fn}: itemNum {num} but sendRecvInfo has {len(items)} items")
    out, seen = [], set()
    for i, item in enumerate(items[:num]):
        if not isinstance(item, HcclSendRecvItem):
            fail(PARA, f"{fn}: sendRecvInfo[{i}] must be an HcclSendRecvItem, got {type(item).__name__}")
        kind = integer(item.sendRecvType, fn, f"sendRecvInfo[{i}].sendRecvType", 0, 1)
        other = integer(item.remoteRank, fn, f"sendRecvInfo[{i}].remoteRank", 0, c.size - 1)
        n = integer(item.count, fn, f"sendRecvInfo[{i}].count", 0)
        data_type(item.dataType, fn, f"sendRecvInfo[{i}].dataType")
        if item.buf is None:
            fail(PTR, f"{fn}: sendRecvInfo[{i}].buf is null")
        if (kind, other) in seen:
            fail(PARA, f"{fn}: sendRecvInfo[{i}] is a second {'send to' if kind == 0 else 'receive from'} rank {other} "
                       "(at most one each way per rank in a batch)")
        seen.add((kind, other))
        out.append((kind == HcclSendRecvType.HCCL_SEND, item.buf, n, other, item.dataType))
    if ((0, c.rank) in seen) != ((1, c.rank) in seen):
        fail(PARA, f"{fn}: a send to this rank itself needs a receive from itself in the same batch, and back")
    return out


@hccl_api()
def HcclBatchSendRecv(sendRecvInfo: list[HcclSendRecvItem], itemNum: int, comm: HcclComm, stream: Any) -> int:
    """Sends and receives that proceed together (pipeline parallelism: no order between them, so
    two ranks may each send to the other first). Each pairs with the other rank's next send or
    receive of the pair, a batch's or HcclSend / HcclRecv's; items of count 0 are skipped, like a
    count-0 HcclSend / HcclRecv."""
    fn = "HcclBatchSendRecv"
    c = check_comm(comm, fn)
    what = _what(fn, c)
    plan: list[tuple[bool, Any, int, int, Any]] = []
    try:
        plan = _batch_items(c, sendRecvInfo, itemNum, fn)
        impl = stream_of(c, stream, fn)
        checked = []
        for send, buf, n, other, kind in plan:
            if n == 0:
                continue
            dtype = data_type(kind, fn)
            nbytes = n * dtype.itemsize
            ptr = buffer(c, buf, nbytes, fn, f"sendRecvInfo buf ({'send to' if send else 'receive from'} rank {other})")
            checked.append((send, ptr, n, nbytes, other, int(kind)))
        local = [x for x in checked if x[4] == c.rank]
        if len(local) == 2 and local[0][3] != local[1][3]:
            fail(PARA, f"{fn}: the send to and the receive from this rank itself differ in size")
        refused = None
    except OpError as e:
        refused, checked = e, [(send, 0, n, 0, other, 0) for send, _, n, other, _ in plan if n]
    items: list[Item] = []
    for send, ptr, n, nbytes, other, kind in checked:   # every send's header first: no batch waits for another
        if send and other != c.rank:
            header = {"count": n, "dataType": kind, "nbytes": nbytes,
                      "refused": None if refused is None else refused.message}
            key, index = _post(c, other, header, fn)
            items.append(Item(True, ptr, nbytes, other, index, _verdict(c, key, other, what)))
    problems = []
    for send, ptr, n, nbytes, other, kind in checked:
        if not send and other != c.rank:
            index, problem = _receive(c, other, {"count": n, "dataType": kind, "nbytes": nbytes}, refused, fn)
            if problem is None:
                items.append(Item(False, ptr, nbytes, other, index))
            problems.append(problem)
    if refused is not None:
        raise refused
    items += [Item(send, ptr, nbytes, other, 0) for send, ptr, n, nbytes, other, kind in checked if other == c.rank]
    c.engine.batch(impl, items, what)   # a refused message fails on both sides; the others still move
    first = next((p for p in problems if p), None)
    if first is not None:
        fail(PARA, first)
    return OK
