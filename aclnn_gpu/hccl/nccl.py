"""The collective engine of the cuda device: NCCL through CuPy's binding (`cupy.cuda.nccl`), the
thin layer that holds every NCCL call of the package. Each collective is enqueued at call time on the
CuPy stream behind the aclrtStream (its pointer passed to NCCL), so it is ordered with the
operators on that stream as on an Ascend device.

The communicator is created, and every NCCL call made, inside the device's scope
(`device.scope`, the GPU current on the calling thread for the block): ncclCommInitRank binds the
communicator to the CUDA device current on the calling thread (NCCL src/init.cc, ncclCommInitRank:
cudaGetDevice), so with several GPUs in a process a rank created elsewhere would bind another rank's
GPU, which NCCL then refuses ("Multiple Ranks are using the same GPU", src/init.cc) or uses wrongly.
The binding is CuPy 14's (cupy_backends/cuda/libs/nccl.pyx): `get_unique_id()` returns the
NCCL_UNIQUE_ID_BYTES bytes and `NcclCommunicator(ndev, commId: bytes, rank)` takes them back.

Not run on a GPU in CI: everything above this layer (the argument checks, the cross-rank agreement,
the bootstrap) is the code the cpu and emulated devices run there; this file only maps HCCL's types
and ops onto NCCL's and calls the binding (tests/test_hccl.py drives it over a stand-in of the binding).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

import numpy as np

from ..base.errors import OpError, fail
from ..base.status import aclError
from .types import HcclReduceOp, HcclResult

# ncclDataType_t by NumPy type; NCCL has no 16-bit integers (reductions of those are refused).
_NCCL_TYPE = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2, np.dtype(np.uint32): 3,
              np.dtype(np.int64): 4, np.dtype(np.uint64): 5, np.dtype(np.float16): 6, np.dtype(np.float32): 7,
              np.dtype(np.float64): 8}
NCCL_BFLOAT16 = 9
NCCL_UINT8 = 1
# ncclResult_t of ncclCommGetAsyncError as HCCL's codes: unhandled CUDA error, system error, remote error
_ASYNC = {1: HcclResult.HCCL_E_RUNTIME, 2: HcclResult.HCCL_E_SYSCALL, 6: HcclResult.HCCL_E_REMOTE}
# ncclRedOp_t: ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3 -- HCCL's numbers.


def new_unique_id() -> bytes:
    """ncclGetUniqueId, as the 128 bytes the root info carries (CuPy 14 returns bytes)."""
    from cupy.cuda import nccl
    return bytes(nccl.get_unique_id())


def _nccl_type(dtype: np.dtype, what: str) -> int:
    if dtype.name == "bfloat16":
        return NCCL_BFLOAT16
    if dtype not in _NCCL_TYPE:
        fail(HcclResult.HCCL_E_NOT_SUPPORT, f"{what}: NCCL cannot reduce {dtype.name} (no 16-bit integer type)")
    return _NCCL_TYPE[dtype]


class NcclEngine:
    """One NCCL communicator (ncclCommInitRank) bound to `device` (created in its scope)."""

    name = "nccl"

    def __init__(self, unique_id: bytes, rank: int, size: int, device: Any, health: Any = None):
        from cupy.cuda import nccl
        with device.scope:   # ncclCommInitRank binds the thread's current GPU: this device's
            self.comm = nccl.NcclCommunicator(size, bytes(unique_id), rank)
        self.nccl = nccl
        self.rank, self.size, self.device = rank, size, device
        self.health = health
        self.scratch = device.malloc(4)   # the barrier's one-element all-reduce
        self.aborted = False
        self.report: Callable[[int, str], None] = lambda code, message: None
        self.probe: Callable[[list[int]], list[int]] = lambda ranks: []

    def _call(self, what: str, fn: Callable[[], None]) -> None:
        if self.aborted:
            fail(HcclResult.HCCL_E_REMOTE, f"{what}: the NCCL communicator was aborted after a peer failed")
        try:
            with self.device.scope:   # the communicator's GPU, whatever this thread has current
                fn()
        except self.nccl.NcclError as e:
            fail(HcclResult.HCCL_E_INTERNAL, f"{what}: NCCL failed: {e}")

    def _group(self, what: str, calls: list[Callable[[], None]]) -> None:
        """NCCL calls fused into one (ncclGroupStart / ncclGroupEnd): sends and receives that
        proceed together, collectives of several roots."""
        def grouped() -> None:
            self.nccl.groupStart()
            try:
                for call in calls:
                    call()
            finally:
                self.nccl.groupEnd()
        self._call(what, grouped)

    @staticmethod
    def _stream(stream: Any) -> int:
        return int(stream.cupy.ptr)

    def on_fault(self) -> None:
        """A peer died (the heartbeat): abort the communicator (ncclCommAbort), which ends its
        kernels waiting on the GPU for the dead peer; later calls are refused."""
        comm = self.comm
        if comm is None or self.aborted:
            return
        self.aborted = True
        try:
            with self.device.scope:
                comm.abort()
        except Exception:  # noqa: BLE001 - best effort: the calls are refused from now on anyway
            pass

    def async_error(self) -> int:
        """ncclCommGetAsyncError as an HcclResult (0: none)."""
        if self.comm is None:
            return 0
        try:
            with self.device.scope:
                self.comm.check_async_error()
        except self.nccl.NcclError as e:
            return _ASYNC.get(int(getattr(e, "status", 3)), HcclResult.HCCL_E_INTERNAL)
        return 0

    def all_reduce(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                   what: str) -> None:
        kind = _nccl_type(dtype, what)
        self._call(what, lambda: self.comm.allReduce(send, recv, count, kind, int(op), self._stream(stream)))

    def reduce(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp, root: int,
               what: str) -> None:
        kind = _nccl_type(dtype, what)
        self._call(what, lambda: self.comm.reduce(send, recv, count, kind, int(op), root, self._stream(stream)))

    def reduce_scatter(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                       what: str) -> None:
        kind = _nccl_type(dtype, what)
        self._call(what, lambda: self.comm.reduceScatter(send, recv, count, kind, int(op), self._stream(stream)))

    def reduce_scatter_v(self, stream: Any, send: int, counts: list[int], displs: list[int], recv: int,
                         dtype: np.dtype, op: HcclReduceOp, what: str) -> None:
        """counts / displs in bytes: one ncclReduce per rank (rank r the root of its block), grouped."""
        kind, size, s = _nccl_type(dtype, what), dtype.itemsize, self._stream(stream)
        self._group(what, [partial(self.comm.reduce, send + displs[r], recv, counts[r] // size, kind, int(op), r, s)
                           for r in range(self.size) if counts[r]])

    def all_gather(self, stream: Any, send: int, recv: int, nbytes: int, what: str) -> None:
        self._call(what, lambda: self.comm.allGather(send, recv, nbytes, NCCL_UINT8, self._stream(stream)))

    def all_gather_v(self, stream: Any, send: int, nbytes: int, recv: int, counts: list[int], displs: list[int],
                     what: str) -> None:
        """counts / displs in bytes: one ncclBroadcast per rank into its place, grouped."""
        s = self._stream(stream)
        self._group(what, [partial(self.comm.broadcast, send, recv + displs[r], counts[r], NCCL_UINT8, r, s)
                           for r in range(self.size) if counts[r]])

    def broadcast(self, stream: Any, buf: int, nbytes: int, root: int, what: str) -> None:
        self._call(what, lambda: self.comm.broadcast(buf, buf, nbytes, NCCL_UINT8, root, self._stream(stream)))

    def scatter(self, stream: Any, send: int, recv: int, nbytes: int, root: int, what: str) -> None:
        """The root sends block r to rank r (itself included); everyone receives its block, grouped."""
        s = self._stream(stream)
        calls = [partial(self.comm.send, send + r * nbytes, nbytes, NCCL_UINT8, r, s)
                 for r in range(self.size)] if self.rank == root else []
        self._group(what, calls + [partial(self.comm.recv, recv, nbytes, NCCL_UINT8, root, s)])

    def all_to_all_v(self, stream: Any, send: int, send_counts: list[int], send_displs: list[int], recv: int,
                     recv_counts: list[int], recv_displs: list[int], what: str) -> None:
        """Counts and displacements in bytes: a send to and a receive from every rank, grouped."""
        s = self._stream(stream)
        calls: list[Callable[[], None]] = []
        for r in range(self.size):
            if send_counts[r]:
                calls.append(partial(self.comm.send, send + send_displs[r], send_counts[r], NCCL_UINT8, r, s))
            if recv_counts[r]:
                calls.append(partial(self.comm.recv, recv + recv_displs[r], recv_counts[r], NCCL_UINT8, r, s))
        self._group(what, calls)

    def _verdict(self, before: Callable[[], None]) -> None:
        try:  # the receiver's verdict, waited for on the host (NCCL work cannot wait for it in stream order)
            before()
        except OpError as e:   # `before` words its failure for a stream; here it is this call's result
            timed_out = e.status == aclError.ACL_ERROR_RT_WAIT_TIMEOUT
            fail(HcclResult.HCCL_E_TIMEOUT if timed_out else HcclResult.HCCL_E_PARA, e.message)

    def send(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str,
             before: Callable[[], None]) -> None:
        self._verdict(before)
        self._call(what, lambda: self.comm.send(buf, nbytes, NCCL_UINT8, peer, self._stream(stream)))

    def recv(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str) -> None:
        self._call(what, lambda: self.comm.recv(buf, nbytes, NCCL_UINT8, peer, self._stream(stream)))

    def batch(self, stream: Any, items: list[Any], what: str) -> None:
        """HcclBatchSendRecv: the verdicts of its sends first (on the host), then every send and
        receive in one NCCL group (a pair to this rank itself included)."""
        refused: OpError | None = None
        ready = []
        for item in items:
            try:
                if item.send and item.verdict is not None:
                    self._verdict(item.verdict)
                ready.append(item)
            except OpError as e:   # the others still move: no peer waits on the GPU for them
                refused = refused or e
        s = self._stream(stream)
        self._group(what, [partial(self.comm.send if i.send else self.comm.recv, i.ptr, i.nbytes, NCCL_UINT8, i.peer,
                                   s) for i in ready if i.nbytes])
        if refused is not None:
            raise refused

    def barrier(self, stream: Any, what: str) -> None:
        self._call(what, lambda: self.comm.allReduce(self.scratch, self.scratch, 1, 2, 0, self._stream(stream)))

    def close(self) -> bool:
        comm, self.comm = self.comm, None
        if comm is not None and not self.aborted:
            with self.device.scope:
                comm.destroy()
        self.device.free(self.scratch)
        return True
