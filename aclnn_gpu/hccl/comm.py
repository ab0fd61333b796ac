"""The communicator (`HcclComm`): how one is built from a meeting point (root info or rank table),
which engine it drives (gloo on the cpu and emulated devices, NCCL on cuda), and the cross-rank
agreement every collective goes through before the engine sees it.

The device, its memory registry and its streams are reached through `device_of` only, so the
multi-device runtime changes one function here.
"""
from __future__ import annotations

import threading
from typing import Any

from ..errors import NoDevice, fail
from . import bootstrap
from .types import HcclResult

_keep_alive: list[Any] = []   # rank-table store servers: alive until the process exits (see bootstrap.serve)


def device_of(stream: Any, fn: str) -> tuple[Any, Any]:
    """(device, device stream) of an aclrtStream handle (None: the default stream)."""
    from ..runtime import get_device, resolve_stream
    try:
        device = get_device()
    except NoDevice as e:
        fail(HcclResult.HCCL_E_UNAVAIL, f"{fn}: {e.message}")
    return device, resolve_stream(stream, fn, status=HcclResult.HCCL_E_PARA)


def engine_for(device: Any) -> str:
    return "nccl" if device.kind == "cuda" else "gloo"


def require_torch_distributed(fn: str) -> None:
    try:
        import torch.distributed as dist
        ok = dist.is_available()
    except ImportError:
        ok = False
    if not ok:
        fail(HcclResult.HCCL_E_UNAVAIL, f"{fn}: the collectives need PyTorch's torch.distributed "
                                        "(pip install 'aclnn_gpu[distributed]')")


class HcclComm:
    """A communicator handle (C's HcclComm)."""

    def __init__(self, rank: int, size: int, device: Any, engine: Any, rendezvous: bootstrap.Rendezvous,
                 side: bootstrap.Rendezvous):
        self.rank = rank
        self.size = size
        self.device = device
        self.engine = engine
        self.rendezvous = rendezvous
        self.side = side               # its own store client, for waits queued on streams (send verdicts)
        self.destroyed = False
        self.lock = threading.Lock()
        self.seq = 0                   # collectives called so far (the agreement's key)
        self.sent: dict[int, int] = {}       # p2p messages sent to / received from each peer
        self.received: dict[int, int] = {}

    def __repr__(self) -> str:
        return (f"HcclComm(rank {self.rank} of {self.size}, {self.engine.name}"
                f"{', destroyed' if self.destroyed else ''})")

    def agree(self, fn: str, header: dict) -> list[dict]:
        """Every rank's header of this collective (this rank's posted first)."""
        with self.lock:
            seq, self.seq = self.seq, self.seq + 1
        return self.rendezvous.everyone(seq, dict(header, call=fn), fn)


def build(meeting: bootstrap.Meeting, n_ranks: int, rank: int, device: Any, fn: str,
          serve_here: bool = False) -> HcclComm:
    """Join the meeting as `rank` of `n_ranks` and start the engine (every wait bounded)."""
    connect_s, exec_s = bootstrap.connect_timeout(), bootstrap.exec_timeout()
    from torch.distributed import PrefixStore
    try:  # one store client per user: a client is not shared between threads that wait on it
        client = bootstrap.connect(meeting.host, meeting.port, connect_s, serve_here=serve_here)
        side, engine_client = (bootstrap.connect(meeting.host, meeting.port, connect_s) for _ in range(2))
    except Exception as e:  # noqa: BLE001 - torch's DistNetworkError / RuntimeError
        fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: cannot reach the bootstrap store at {meeting.host}:{meeting.port} "
                                            f"within HCCL_CONNECT_TIMEOUT={connect_s:g} s: {str(e).splitlines()[0]}")
    if serve_here:
        _keep_alive.append(client)
    store = PrefixStore(f"hccl/{meeting.key}/", client)
    side_store = PrefixStore(f"hccl/{meeting.key}/", side)
    rendezvous = bootstrap.Rendezvous(store, rank, n_ranks, connect_s, "HCCL_CONNECT_TIMEOUT")
    rendezvous.join(n_ranks, meeting.engine, fn)
    if meeting.engine == "nccl":
        from .nccl import NcclEngine, new_unique_id
        unique_id = meeting.nccl_id
        if unique_id is None:   # a rank-table communicator: rank 0 makes the id, the others read it
            if rank == 0:
                rendezvous.post("nccl_id", {"id": new_unique_id().hex()}, fn)
            unique_id = bytes.fromhex(rendezvous.read("nccl_id", fn, "rank 0's NCCL unique id")["id"])
        engine: Any = NcclEngine(unique_id, rank, n_ranks, device)
    else:
        from .gloo import GlooEngine
        try:
            engine = GlooEngine(PrefixStore(f"hccl/{meeting.key}/", engine_client), rank, n_ranks, meeting.host,
                                exec_s, device)
        except Exception as e:  # noqa: BLE001
            fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: gloo could not connect the ranks: {str(e).splitlines()[0]}")
    rendezvous.set_timeout(exec_s, "HCCL_EXEC_TIMEOUT")
    side = bootstrap.Rendezvous(side_store, rank, n_ranks, exec_s, "HCCL_EXEC_TIMEOUT")
    return HcclComm(rank, n_ranks, device, engine, rendezvous, side)


def check_comm(comm: Any, fn: str) -> HcclComm:
    if comm is None:
        fail(HcclResult.HCCL_E_PTR, f"{fn}: comm is null")
    if not isinstance(comm, HcclComm):
        fail(HcclResult.HCCL_E_PARA, f"{fn}: comm must be an HcclComm from HcclCommInitRootInfo or "
                                     f"HcclCommInitClusterInfo, got {type(comm).__name__}")
    if comm.destroyed:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: comm was destroyed (HcclCommDestroy)")
    return comm

