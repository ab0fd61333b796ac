"""The collective engine of the cpu and emulated devices: PyTorch's gloo backend
(`torch.distributed.ProcessGroupGloo`), one process group per communicator over the communicator's
own store namespace, so a process can hold several communicators and never touches PyTorch's
global default group.

Device memory on these devices is host memory, so a collective is a gloo call on NumPy views of the
buffers, queued on the stream's in-order worker thread. Gloo has no 16-bit integers and no unsigned
types wider than 8 bits; those reduce exactly through a wider or a signed type (see `_reducible`).
Data-movement collectives (broadcast, all-gather, send/recv) move bytes and need no type at all.
"""
from __future__ import annotations

import datetime
import threading
from typing import Any, Callable

import numpy as np

from ..errors import OpError
from ..status import aclError
from .types import HcclReduceOp

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


def _bytes(view: np.ndarray) -> Any:
    import torch
    return torch.from_numpy(view)


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


def _engine_failure(e: Exception, what: str) -> OpError:
    """A gloo failure in queued work: the stream reports it at its next synchronize."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "timed out" in text.lower() or "timeout" in text.lower():
        return OpError(aclError.ACL_ERROR_RT_WAIT_TIMEOUT, f"{what}: HCCL_E_TIMEOUT: a peer did not take part "
                                                           f"within HCCL_EXEC_TIMEOUT ({text})")
    return OpError(aclError.ACL_ERROR_RT_INTERNAL_ERROR, f"{what}: HCCL_E_REMOTE: a peer failed or closed its "
                                                         f"connection ({text})")


class GlooEngine:
    """A communicator's gloo process group; every method queues one collective on a host stream."""

    name = "gloo"

    def __init__(self, store: Any, rank: int, size: int, host: str, timeout_s: float, device: Any):
        from torch.distributed import PrefixStore, ProcessGroupGloo
        options = ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._timeout = datetime.timedelta(seconds=timeout_s)
        options._devices = [ProcessGroupGloo.create_device(hostname=host)]  # loopback unless HCCL_IF_IP
        self.group: Any = ProcessGroupGloo(PrefixStore("gloo/", store), rank, size, options)
        self.rank, self.size, self.device = rank, size, device
        self.gate = OrderGate(timeout_s)

    # ------------------------------------------------------------------ queueing
    def _queue(self, stream: Any, what: str, work: Callable[[], None]) -> None:
        queue = host_queue(stream)
        ticket = self.gate.ticket(queue)

        def task() -> None:
            def guarded() -> None:
                try:
                    work()
                except OpError:
                    raise
                except Exception as e:  # noqa: BLE001 - gloo's RuntimeError / DistBackendError
                    raise _engine_failure(e, what) from None
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
            self._all_reduce_in_place(target.view(dtype), op)
        self._queue(stream, what, work)

    def _all_reduce_in_place(self, values: np.ndarray, op: HcclReduceOp) -> None:
        from torch.distributed import AllreduceOptions
        tensor, finish = _reducible(values, op)
        options = AllreduceOptions()
        options.reduceOp = _torch_op(op)
        self.group.allreduce([tensor], options).wait()
        finish()

    def reduce_scatter(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                       what: str) -> None:
        # An all-reduce of a copy of the whole send buffer, keeping this rank's block: gloo's own
        # reduce-scatter has no path for the types `_reducible` adapts.
        total = count * self.size * dtype.itemsize
        source, target = self._view(send, total), self._view(recv, count * dtype.itemsize)
        block = slice(self.rank * count * dtype.itemsize, (self.rank + 1) * count * dtype.itemsize)

        def work() -> None:
            whole = source.copy()
            self._all_reduce_in_place(whole.view(dtype), op)
            target[:] = whole[block]
        self._queue(stream, what, work)

    def all_gather(self, stream: Any, send: int, recv: int, nbytes: int, what: str) -> None:
        source, target = self._view(send, nbytes), self._view(recv, nbytes * self.size)

        def work() -> None:
            self.group._allgather_base(_bytes(target), _bytes(source.copy())).wait()
        self._queue(stream, what, work)

    def broadcast(self, stream: Any, buf: int, nbytes: int, root: int, what: str) -> None:
        target = self._view(buf, nbytes)

        def work() -> None:
            from torch.distributed import BroadcastOptions
            options = BroadcastOptions()
            options.rootRank = root
            self.group.broadcast([_bytes(target)], options).wait()
        self._queue(stream, what, work)

    def send(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str,
             before: Callable[[], None]) -> None:
        source = self._view(buf, nbytes)

        def work() -> None:
            before()
            self.group.send([_bytes(source)], peer, tag).wait()
        self._queue(stream, what, work)

    def recv(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str) -> None:
        target = self._view(buf, nbytes)
        self._queue(stream, what, lambda: self.group.recv([_bytes(target)], peer, tag).wait())

    def barrier(self, stream: Any, what: str) -> None:
        self._queue(stream, what, lambda: self.group.barrier().wait())

    def close(self) -> None:
        """HcclCommDestroy: let the queued operations finish (within HCCL_EXEC_TIMEOUT), then drop
        the process group (its connections close; peers still waiting see the rank gone)."""
        self.gate.wait_idle()
        self.group = None


def host_queue(stream: Any) -> Any:
    """The in-order worker behind a host stream: the cpu device's own, or the emulated device's
    (its fake CuPy stream's)."""
    worker = getattr(stream, "worker", None)
    return worker if worker is not None else stream.cupy.worker
