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

from typing import Any, Callable

import numpy as np

from ..errors import OpError, fail
from ..status import aclError
from .types import HcclReduceOp, HcclResult

# ncclDataType_t by NumPy type; NCCL has no 16-bit integers (reductions of those are refused).
_NCCL_TYPE = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2, np.dtype(np.uint32): 3,
              np.dtype(np.int64): 4, np.dtype(np.uint64): 5, np.dtype(np.float16): 6, np.dtype(np.float32): 7,
              np.dtype(np.float64): 8}
NCCL_BFLOAT16 = 9
NCCL_UINT8 = 1
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

    def __init__(self, unique_id: bytes, rank: int, size: int, device: Any):
        from cupy.cuda import nccl
        with device.scope:   # ncclCommInitRank binds the thread's current GPU: this device's
            self.comm = nccl.NcclCommunicator(size, bytes(unique_id), rank)
        self.nccl = nccl
        self.rank, self.size, self.device = rank, size, device
        self.scratch = device.malloc(4)   # the barrier's one-element all-reduce

    def _call(self, what: str, fn: Callable[[], None]) -> None:
        try:
            with self.device.scope:   # the communicator's GPU, whatever this thread has current
                fn()
        except self.nccl.NcclError as e:
            fail(HcclResult.HCCL_E_INTERNAL, f"{what}: NCCL failed: {e}")

    @staticmethod
    def _stream(stream: Any) -> int:
        return int(stream.cupy.ptr)

    def all_reduce(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                   what: str) -> None:
        kind = _nccl_type(dtype, what)
        self._call(what, lambda: self.comm.allReduce(send, recv, count, kind, int(op), self._stream(stream)))

    def reduce_scatter(self, stream: Any, send: int, recv: int, count: int, dtype: np.dtype, op: HcclReduceOp,
                       what: str) -> None:
        kind = _nccl_type(dtype, what)
        self._call(what, lambda: self.comm.reduceScatter(send, recv, count, kind, int(op), self._stream(stream)))

    def all_gather(self, stream: Any, send: int, recv: int, nbytes: int, what: str) -> None:
        self._call(what, lambda: self.comm.allGather(send, recv, nbytes, NCCL_UINT8, self._stream(stream)))

    def broadcast(self, stream: Any, buf: int, nbytes: int, root: int, what: str) -> None:
        self._call(what, lambda: self.comm.broadcast(buf, buf, nbytes, NCCL_UINT8, root, self._stream(stream)))

    def send(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str,
             before: Callable[[], None]) -> None:
        try:  # the receiver's verdict, waited for on the host (NCCL work cannot wait for it in stream order)
            before()
        except OpError as e:   # `before` words its failure for a stream; here it is this call's result
            timed_out = e.status == aclError.ACL_ERROR_RT_WAIT_TIMEOUT
            fail(HcclResult.HCCL_E_TIMEOUT if timed_out else HcclResult.HCCL_E_PARA, e.message)
        self._call(what, lambda: self.comm.send(buf, nbytes, NCCL_UINT8, peer, self._stream(stream)))

    def recv(self, stream: Any, buf: int, nbytes: int, peer: int, tag: int, what: str) -> None:
        self._call(what, lambda: self.comm.recv(buf, nbytes, NCCL_UINT8, peer, self._stream(stream)))

    def barrier(self, stream: Any, what: str) -> None:
        self._call(what, lambda: self.comm.allReduce(self.scratch, self.scratch, 1, 2, 0, self._stream(stream)))

    def close(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None:
            with self.device.scope:
                comm.destroy()
        self.device.free(self.scratch)
