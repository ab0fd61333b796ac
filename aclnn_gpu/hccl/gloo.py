"""The collective engine of the cpu and emulated devices: PyTorch's gloo backend
(`torch.distributed.ProcessGroupGloo`), one process group per communicator over the communicator's
own store namespace, so a process can hold several communicators and never touches PyTorch's
global default group. Each rank's gloo device is bound to its own host's address (the
communicator's `addresses.engine_address`), which gloo advertises to the peers through the store:
the communicator's SealedStore (sealed.py), so the addresses a rank connects to were written by
members. Gloo's own connections carry no authentication (docs/HCCL.md says what that leaves open).

Device memory on these devices is host memory, so a collective is a gloo call on NumPy views of the
buffers, queued on the stream's in-order worker thread. Gloo has no 16-bit integers and no unsigned
types wider than 8 bits; those reduce exactly through a wider or a signed type (see `_reducible`).
Data-movement collectives (broadcast, scatter, all-gather(-v), all-to-all(-v), send/recv) move
bytes and need no type at all. Waits for gloo's work are sliced (a second at most) and end at the
communicator's first fault (liveness.py), so a dead peer never holds a stream for HCCL_EXEC_TIMEOUT.
"""
from __future__ import annotations

import datetime
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..base.errors import OpError
from ..base.status import aclError
from . import rendezvous
from .rendezvous import Health
from .types import HcclReduceOp, HcclResult

_SIGN_BIT = {np.dtype(np.uint32): (np.int32, np.int32(-2**31)), np.dtype(np.uint64): (np.int64, np.int64(-2**63))}


def _torch_op(op: HcclReduceOp) -> Any:
    from torch.distributed import ReduceOp
    return {HcclReduceOp.HCCL_REDUCE_SUM: ReduceOp.SUM, HcclReduceOp.HCCL_REDUCE_PROD: ReduceOp.PRODUCT,
            HcclReduceOp.HCCL_REDUCE_MAX: ReduceOp.MAX, HcclReduceOp.HCCL_REDUCE_MIN: ReduceOp.MIN}[op]


def _reducible(values: np.ndarray, op: HcclReduceOp) -> tuple[Any, Callable[[], None]]:
    """A tensor gloo can reduce in place standing for `values`, and what writes the result back.

    int16 / uint16 widen to int32 (sums and products wrap back modulo 2**16 on the narrowing cast);
    uint32 / uint64 reduce as the signed type of their width (two's complement sums and products
    are the same bits), and for max / min with the sign bit flipped, which maps unsigned order onto
    signed order; bfloat16 goes through an int16 view."""
    import torch
    kind = values.dtype
    if kind in (np.dtype(np.int16), np.dtype(np.uint16)):
        wide = torch.from_numpy(values.astype(np.int32))
        return wide, lambda: values.__setitem__(slice(None), wide.numpy().astype(kind))
    if kind in _SIGN_BIT:
        signed_type, sign = _SIGN_BIT[kind]
        signed = values.view(signed_type)
        if op in (HcclReduceOp.HCCL_REDUCE_MAX, HcclReduceOp.HCCL_REDUCE_MIN):
            signed ^= sign

            def unflip() -> None:
                signed[...] ^= sign
            return torch.from_numpy(signed), unflip
        return torch.from_numpy(signed), lambda: None
    if kind.name == "bfloat16":
        return torch.from_numpy(values.view(np.int16)).view(torch.bfloat16), lambda: None
    return torch.from_numpy(values), lambda: None


class OrderGate:
    """Runs a communicator's operations in the order they were called, whichever streams they were
    queued on: gloo, like NCCL, needs every rank to issue one communicator's operations in the same
    order, and the call order is what the ranks agreed on.

    A stream skips the work queued behind a failure (until the failure is reported), so a ticket may
    never run: when a stream runs a ticket, the older tickets of the same stream were skipped and
    are dropped (FIFO), instead of holding the gate shut."""

    def __init__(self, timeout_s: float):
        self._cond = threading.Condition()
        self._next_ticket = 0
        self._open: dict[int, int] = {}   # ticket -> the queue it was put on
        self.timeout_s = timeout_s

    def ticket(self, queue: object) -> int:
        with self._cond:
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            self._open[ticket] = id(queue)
            return ticket

    def wait_idle(self) -> bool:
        """Wait (bounded) until every queued operation has run or been dropped."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._open, self.timeout_s)

    def cancel(self, ticket: int) -> None:
        with self._cond:
            self._open.pop(ticket, None)
            self._cond.notify_all()

    def run(self, ticket: int, queue: object, fn: Callable[[], None], what: str) -> None:
        with self._cond:
            for skipped in [t for t, q in self._open.items() if t < ticket and q == id(queue)]:
                del self._open[skipped]
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: min(self._open) == ticket, self.timeout_s):
                del self._open[ticket]
                self._cond.notify_all()
                raise OpError(aclError.ACL_ERROR_RT_WAIT_TIMEOUT,
                              f"{what}: an earlier operation of this communicator, queued on another stream, did "
                              f"not run within HCCL_EXEC_TIMEOUT={self.timeout_s:g} s")
        try:
            fn()
        finally:
            with self._cond:
                del self._open[ticket]
                self._cond.notify_all()


def _peers(text: str, addresses: list[str], rank: int) -> list[int]:
    """The ranks that may be behind the first [address]:port of a gloo message."""
    found = re.search(r"\[([^\]]+)\]:\d+", text)
    if not found:
        return []
    address = found.group(1).removeprefix("::ffff:")
    return [r for r, a in enumerate(addresses) if a == address and r != rank]


def _bytes(view: np.ndarray) -> Any:
    import torch
    return torch.from_numpy(view)


@dataclass
class Item:
    """One entry of a batch of sends and receives (HcclBatchSendRecv), checked and agreed."""
    send: bool
    ptr: int
    nbytes: int
    peer: int
    tag: int
    verdict: Callable[[], None] | None = None   # a send waits for its receiver's verdict


class GlooEngine:
    """A communicator's gloo process group, bound to this rank's own address; every method queues
    one collective on a host stream. Waits for gloo's work are sliced, so a fault the
    communicator's liveness finds (a dead rank) ends them within a second."""

    name = "gloo"

    def __init__(self, store: Any, rank: int, size: int, address: str, timeout_s: float, device: Any,
                 health: Health, addresses: list[str]):
        from torch.distributed import PrefixStore, ProcessGroupGloo
        options = ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._timeout = datetime.timedelta(seconds=timeout_s)
        options._devices = [ProcessGroupGloo.create_device(hostname=address)]   # this host's own address
        self.group: Any = ProcessGroupGloo(PrefixStore("gloo/", store), rank, size, options)
        self.rank, self.size, self.device = rank, size, device
        self.timeout_s = timeout_s
        self.health, self.addresses = health, addresses
        self.gate = OrderGate(timeout_s)
        self.report: Callable[[int, str], None] = lambda code, message: None
        self.probe: Callable[[list[int]], list[int]] = lambda ranks: []
        self.refresh: Callable[[], None] = lambda: None   # reads a fault a peer posted (liveness.py)
        self.store = store   # the SealedStore under gloo's PrefixStore: kept alive as long as the group

    def on_fault(self) -> None:
        """A peer died: the sliced waits see it (nothing to abort in gloo)."""

    # ------------------------------------------------------------------ queueing and waiting
    def _fault(self, what: str) -> OpError | None:
        self.health.observe()
        fault = self.health.fault
        if fault is None:
            return None
        code, message = fault
        return OpError(aclError.ACL_ERROR_RT_INTERNAL_ERROR, f"{what}: {HcclResult(code).name}: {message}")

    def _failure(self, e: Exception, what: str) -> OpError:
        """A gloo failure in queued work: the stream reports it at its next synchronize; the other
        ranks learn it through the store."""
        text = re.sub(r"^\[[^\]]*\.cc:\d+\]\s*", "", rendezvous._first_line(e)).split(". This is typically")[0]
        if rendezvous.is_timeout(e):
            return OpError(aclError.ACL_ERROR_RT_WAIT_TIMEOUT, f"{what}: HCCL_E_TIMEOUT: a peer did not take part "
                                                               f"within HCCL_EXEC_TIMEOUT={self.timeout_s:g} s "
                                                               f"({text})")
        self.refresh()   # a peer that failed first posted why before it closed its connections
        known = self._fault(what)
        if known is not None:
            return known
        candidates = _peers(text, self.addresses, self.rank)
        if len(candidates) > 1:   # ranks sharing a host: the one that stopped beating
            candidates = self.probe(candidates) or candidates
        who = f"rank {' or '.join(map(str, candidates))}" if candidates else "a peer"
        message = f"rank {self.rank} lost its connection to {who} ({text})"
        self.report(HcclResult.HCCL_E_REMOTE, message)
        return OpError(aclError.ACL_ERROR_RT_INTERNAL_ERROR, f"{what}: HCCL_E_REMOTE: {message}")

    def _finish(self, works: list[Any], what: str) -> None:
        """Wait for gloo's work in slices, bounded by HCCL_EXEC_TIMEOUT, ending at a known fault."""
        deadline = time.monotonic() + self.timeout_s
        for work in works:
            while True:
                known = self._fault(what)
                if known is not None:
                    raise known
                step = max(0.001, min(rendezvous.WAIT_SLICE_S, deadline - time.monotonic()))
                try:
                    work.wait(datetime.timedelta(seconds=step))
                    break
                except RuntimeError as e:
                    if not str(e).startswith("Operation timed out") or work.is_completed():
                        raise
                    if time.monotonic() >= deadline:
                        raise OpError(aclError.ACL_ERROR_RT_WAIT_TIMEOUT,
                                      f"{what}: HCCL_E_TIMEOUT: a peer did not take part within "
                                      f"HCCL_EXEC_TIMEOUT={self.timeout_s:g} s") from None

    def _queue(self, stream: Any, what: str, work: Callable[[], None]) -> None:
        queue = host_queue(stream)
        ticket = self.gate.ticket(queue)

        def task() -> None:
            def guarded() -> None:
                known = self._fault(what)
                if known is not None:
                    raise known
                try:
                    work()
                except OpError:
                    raise
                except Exception as e:  # noqa: BLE001 - gloo's RuntimeError / DistBackendError
                    raise self._failure(e, what) from None
            self.gate.run(ticket, queue, guarded, what)

        try:
            queue.submit(task)
        except BaseException:
            self.gate.cancel(ticket)
            raise

    def _view(self, ptr: int, nbytes: int) -> np.ndarray:
        return self.device.host_view(ptr, nbytes)

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                   what: str) -> None:
        source, target = self._view(send, count * dtype.itemsize), self._view(recv, count * dtype.itemsize)

        def work() -> None:
            if send != recv:
                target[:] = source
            self._all_reduce_in_place(target.view(dtype), op, what)
        self._queue(stream, what, work)

    def _all_reduce_in_place(self, values: np.ndarray, op: HcclReduceOp, what: str) -> None:
        from torch.distributed import AllreduceOptions
        tensor, finish = _reducible(values, op)
        options = AllreduceOptions()
        options.reduceOp = _torch_op(op)
        self._finish([self.group.allreduce([tensor], options)], what)
        finish()

    def reduce(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
               root: int, what: str) -> None:
        nbytes = count * dtype.itemsize
        source = self._view(send, nbytes)
        target = self._view(recv, nbytes) if self.rank == root else None

        def work() -> None:
            from torch.distributed import ReduceOptions
            values = source.copy().view(dtype)
            tensor, finish = _reducible(values, op)
            options = ReduceOptions()
            options.reduceOp, options.rootRank = _torch_op(op), root
            self._finish([self.group.reduce([tensor], options)], what)
            if target is not None:
                finish()
                target[:] = values.view(np.uint8)
        self._queue(stream, what, work)

    def reduce_scatter(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                       what: str) -> None:
        size = count * dtype.itemsize
        self.reduce_scatter_v(stream, send, [size] * self.size, [r * size for r in range(self.size)], recv, dtype,
                              op, what)

    def reduce_scatter_v(self, stream: Any, send: int, counts: list[int], displs: list[int], recv: int,
                         dtype: np.dtype, op: HcclReduceOp, what: str) -> None:
        """counts / displs in bytes. An all-reduce of the blocks packed end to end, keeping this
        rank's: gloo's own reduce-scatter has no path for the types `_reducible` adapts."""
        span = max((d + c for c, d in zip(counts, displs)), default=0)
        source = self._view(send, span)
        mine = sum(counts[:self.rank])
        target = self._view(recv, counts[self.rank])

        def work() -> None:
            packed = np.concatenate([source[d:d + c] for c, d in zip(counts, displs)])
            self._all_reduce_in_place(packed.view(dtype), op, what)
            target[:] = packed[mine:mine + counts[self.rank]]
        self._queue(stream, what, work)

    def all_gather(self, stream: Any, send: int, recv: int, nbytes: int, what: str) -> None:
        source, target = self._view(send, nbytes), self._view(recv, nbytes * self.size)

        def work() -> None:
            self._finish([self.group._allgather_base(_bytes(target), _bytes(source.copy()))], what)
        self._queue(stream, what, work)

    def all_gather_v(self, stream: Any, send: int, nbytes: int, recv: int, counts: list[int], displs: list[int],
                     what: str) -> None:
        """counts / displs in bytes: every rank's block padded to the longest, gathered, unpacked."""
        source = self._view(send, nbytes) if nbytes else np.zeros(0, np.uint8)
        span = max((d + c for c, d in zip(counts, displs)), default=0)
        target = self._view(recv, span) if span else np.zeros(0, np.uint8)
        width = max(counts)

        def work() -> None:
            block = np.zeros(width, np.uint8)
            block[:nbytes] = source
            gathered = np.empty(width * self.size, np.uint8)
            self._finish([self.group._allgather_base(_bytes(gathered), _bytes(block))], what)
            for r, (c, d) in enumerate(zip(counts, displs)):
                target[d:d + c] = gathered[r * width:r * width + c]
        self._queue(stream, what, work)

    def broadcast(self, stream: Any, buf: int, nbytes: int, root: int, what: str) -> None:
        target = self._view(buf, nbytes)

        def work() -> None:
            from torch.distributed import BroadcastOptions
            options = BroadcastOptions()
            options.rootRank = root
            self._finish([self.group.broadcast([_bytes(target)], options)], what)
        self._queue(stream, what, work)

    def scatter(self, stream: Any, send: int, recv: int, nbytes: int, root: int, what: str) -> None:
        source = self._view(send, nbytes * self.size) if self.rank == root else None
        target = self._view(recv, nbytes)

        def work() -> None:
            from torch.distributed import ScatterOptions
            options = ScatterOptions()
            options.rootRank = root
            out = np.empty(nbytes, np.uint8)
            blocks = [] if source is None else [[_bytes(source[r * nbytes:(r + 1) * nbytes].copy())
                                                 for r in range(self.size)]]
            self._finish([self.group.scatter([_bytes(out)], blocks, options)], what)
            target[:] = out
        self._queue(stream, what, work)

    def all_to_all_v(self, stream: Any, send: int, send_counts: list[int], send_displs: list[int], recv: int,
                     recv_counts: list[int], recv_displs: list[int], what: str) -> None:
        """Counts and displacements in bytes: packed end to end, exchanged, unpacked."""
        send_span = max((d + c for c, d in zip(send_counts, send_displs) if c), default=0)
        recv_span = max((d + c for c, d in zip(recv_counts, recv_displs) if c), default=0)
        source = self._view(send, send_span) if send_span else np.zeros(0, np.uint8)
        target = self._view(recv, recv_span) if recv_span else np.zeros(0, np.uint8)

        def work() -> None:
            from torch.distributed import AllToAllOptions
            packed = np.concatenate([source[d:d + c] for c, d in zip(send_counts, send_displs)] +
                                    [np.zeros(0, np.uint8)])
            out = np.empty(sum(recv_counts), np.uint8)
            self._finish([self.group.alltoall_base(_bytes(out), _bytes(packed), list(recv_counts),
                                                   list(send_counts), AllToAllOptions())], what)
            at = 0
            for c, d in zip(recv_counts, recv_displs):
                target[d:d + c] = out[at:at + c]
                at += c
        self._queue(stream, what, work)

    def send(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str,
             before: Callable[[], None]) -> None:
        self.batch(stream, [Item(True, buf, nbytes, peer, tag, before)], what)

    def recv(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str) -> None:
        self.batch(stream, [Item(False, buf, nbytes, peer, tag)], what)

    def batch(self, stream: Any, items: list[Item], what: str) -> None:
        """Sends and receives that proceed together (no order between them): every receive is
        posted, each send once its receiver accepted it; a refused send fails the batch after the
        rest completed. A pair to this rank itself is a copy."""
        views = [self._view(item.ptr, item.nbytes) for item in items]

        def work() -> None:
            works, refused = [], None
            local = [(item, view) for item, view in zip(items, views) if item.peer == self.rank]
            for (item, view) in local:
                if not item.send:
                    source = next(v for i, v in local if i.send)
                    view[:] = source
            for item, view in zip(items, views):
                if item.peer == self.rank:
                    continue
                if not item.send:
                    works.append(self.group.recv([_bytes(view)], item.peer, item.tag))
                    continue
                try:
                    if item.verdict is not None:
                        item.verdict()
                except OpError as e:
                    refused = refused or e
                    continue
                works.append(self.group.send([_bytes(view)], item.peer, item.tag))
            self._finish(works, what)
            if refused is not None:
                raise refused
        self._queue(stream, what, work)

    def barrier(self, stream: Any, what: str) -> None:
        self._queue(stream, what, lambda: self._finish([self.group.barrier()], what))

    def async_error(self) -> int:
        return 0

    def close(self) -> bool:
        """HcclCommDestroy: let the queued operations finish (within HCCL_EXEC_TIMEOUT), then drop
        the process group (its connections close; peers still waiting see the rank gone). False
        when an operation is still pending: the group must then outlive this call (bootstrap.leak)."""
        if not self.gate.wait_idle():
            return False
        self.group = None
        return True


def host_queue(stream: Any) -> Any:
    """The in-order worker behind a host stream: the cpu device's own, or the emulated device's
    (its fake CuPy stream's)."""
    worker = getattr(stream, "worker", None)
    return worker if worker is not None else stream.cupy.worker
