"""The communicator (`HcclComm`): how one is built from a meeting point (root info or rank table),
which engine it drives (gloo on the cpu and emulated devices, NCCL on cuda), the cross-rank
agreement every collective goes through before the engine sees it, its peers' health
(liveness.py), and what a fork() child may do with one its parent made (nothing but drop it).

The device, its memory registry and its streams are reached through `device_of` only, so the
multi-device runtime changes one function here.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from typing import Any

from ..base.errors import NoDevice, OpError, fail, live_handle
from ..runtime import get_device, resolve_stream
from . import addresses, bootstrap
from .bootstrap import leak
from .rendezvous import _first_line, generation, guarded, Health, Rendezvous
from .liveness import Liveness
from .sealed import conceal, sealed_store
from .types import HcclResult


def device_of(stream: Any, fn: str) -> tuple[Any, Any]:
    """(device, device stream) of an aclrtStream handle (None: the default stream)."""
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


_live: "weakref.WeakSet[HcclComm]" = weakref.WeakSet()   # this process's communicators (for fork)
# (meeting key, rank, generation) of every communicator this process destroyed: its goodbye in the
# store may never have arrived (the network was down), and the next join must not be refused for it
_destroyed: set[tuple[str, int, int]] = set()


class HcclComm:
    """A communicator handle (C's HcclComm)."""

    def __init__(self, rank: int, size: int, device: Any, engine: Any, rendezvous: Rendezvous,
                 side: Rendezvous, liveness: Liveness, meeting: bootstrap.Meeting, generation: int,
                 address: str, clients: list[Any]):
        self.rank = rank
        self.size = size
        self.device = device
        self.engine = engine
        self.rendezvous = rendezvous
        self.side = side               # its own store client, for waits queued on streams (send verdicts)
        self.liveness = liveness
        self.health = rendezvous.health
        self.meeting = meeting         # where its ranks met (HcclCreateSubCommConfig meets there too)
        self.generation = generation   # the how-many-th communicator of that meeting
        self.address = address         # this rank's engine address
        self.name = meeting.name or meeting.key   # HcclGetCommName
        self.clients = clients         # every store client it holds (leaked with it in a fork child)
        self.destroyed = False
        self.forked = False            # this is a fork() child's copy of its parent's communicator
        self.lock = threading.Lock()
        self.seq = 0                   # collectives called so far (the agreement's key)
        self.sent: dict[int, int] = {}       # p2p messages sent to / received from each peer
        self.received: dict[int, int] = {}
        _live.add(self)

    def __repr__(self) -> str:
        state = ", destroyed" if self.destroyed else ", inherited through fork()" if self.forked else ""
        return f"HcclComm(rank {self.rank} of {self.size}, {self.engine.name}{state})"

    def agree(self, fn: str, header: dict) -> list[dict]:
        """Every rank's header of this collective (this rank's posted first)."""
        with self.lock:
            seq, self.seq = self.seq, self.seq + 1
        return self.rendezvous.everyone(seq, dict(header, call=fn), fn)

    def destroy(self) -> None:
        """HcclCommDestroy: stop the heartbeat (peers see this rank leave), let queued work finish
        (within HCCL_EXEC_TIMEOUT), close the engine. A communicator whose peers failed keeps its
        engine alive until exit: its collective still pending in the engine would block the close,
        and its store clients too: a call over a network that went silent may still hold one (on a
        StoreWorker thread), and a client destroyed under it ends the process (std::terminate)."""
        self.destroyed = True
        if self.forked:   # the parent's: nothing of it is this process's to close
            return
        _destroyed.add((self.meeting.key, self.rank, self.generation))
        self.liveness.stop()
        self.rendezvous.worker.close()   # a worker stuck in a call stays, with the clients (below)
        self.side.worker.close()
        if self.health.fault is not None or not self.engine.close():
            leak(self.engine)
            leak(self.clients)
            bootstrap.sever(self.clients)
            leak(self.rendezvous)
            leak(self.side)
            leak(self.liveness)
        else:
            bootstrap.forget(self.clients)


def _after_fork_in_child() -> None:
    """A fork() child inherits its parent's communicators without their threads (heartbeat, engine
    workers, the store's event loop): they are marked, refused with a message naming fork, and kept
    alive until exit so no destructor ever waits for a thread that is not there."""
    for comm in list(_live):
        comm.forked = True
        leak(comm)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    """A failed communicator that was never destroyed: its store calls still blocked on a silent
    network are ended before the interpreter goes (bootstrap.sever says why)."""
    failed = [comm for comm in list(_live) if comm.health.fault is not None and not comm.forked]
    for comm in failed:
        leak(comm)
        bootstrap.sever(comm.clients)
    deadline = time.monotonic() + 2.0   # the calls severed return within milliseconds
    while time.monotonic() < deadline and any(
            c.rendezvous.worker.busy or c.side.worker.busy or c.health.stuck_since is not None for c in failed):
        time.sleep(0.01)


atexit.register(_at_exit)


def _store_owner(meeting: bootstrap.Meeting, headers: list[dict]) -> str:
    where = f"the bootstrap store at {meeting.host}:{meeting.port}"
    hosts = [r for r, h in enumerate(headers) if h["process"] == meeting.owner]
    if hosts:
        return f"rank {hosts[0]} (hosting {where})"
    return f"the process that called HcclGetRootInfo (hosting {where})"


def build(meeting: bootstrap.Meeting, n_ranks: int, rank: int, device: Any, fn: str,
          preferred: tuple[str, ...] = ()) -> HcclComm:
    """Join the meeting as `rank` of `n_ranks` and start the engine, bound to this host's address
    (`addresses.engine_address`); every wait bounded."""
    connect_s, exec_s = bootstrap.connect_timeout(), bootstrap.exec_timeout()
    heartbeat_s = bootstrap.heartbeat_timeout()
    try:  # one store client per user: a client is not shared between threads that wait on it
        clients = [bootstrap.connect(meeting.host, meeting.port, connect_s) for _ in range(4)]
    except Exception as e:  # noqa: BLE001 - torch's DistNetworkError / RuntimeError
        fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: cannot reach the bootstrap store at {meeting.host}:{meeting.port} "
                                            f"within HCCL_CONNECT_TIMEOUT={connect_s:g} s: "
                                            f"{_first_line(e)}")
    engine_address = addresses.engine_address(meeting.host, fn, preferred)
    if meeting.engine == "nccl":   # a rank table's address is HCCL's configuration too; a routed one is not
        addresses.nccl_environment(engine_address if preferred else None)
    # every key named and every value authenticated with the meeting's secret (sealed.py)
    root = sealed_store(clients[0], meeting.secret, meeting.key)

    def left(number: int) -> bool:
        return (meeting.key, rank, number) in _destroyed or bool(root.check([f"{number}/bye/{rank}"]))

    number = generation(root, rank, fn, left)
    prefix = f"{meeting.key}/{number}"
    store, side_store, engine_store, monitor_store = (sealed_store(c, meeting.secret, prefix) for c in clients)
    health = Health(silence_s=heartbeat_s)
    rendezvous = Rendezvous(store, rank, n_ranks, connect_s, "HCCL_CONNECT_TIMEOUT", health)
    engine: Any = None
    liveness: Liveness | None = None
    try:
        liveness = Liveness(monitor_store, rank, n_ranks, heartbeat_s, health)
        rendezvous.report = liveness.report
        about = {"process": bootstrap.process_token(), "address": engine_address}
        headers = rendezvous.join(n_ranks, meeting.engine, fn, about)
        health.store_owner = _store_owner(meeting, headers)
        if meeting.engine == "nccl":
            from .nccl import NcclEngine, new_unique_id
            unique_id = meeting.nccl_id if number == 1 else None
            if unique_id is None:   # a rank-table or re-made communicator: rank 0 makes the id, the others read it
                # encrypted: a stranger holding the id could join NCCL's own bootstrap
                label = f"{prefix}/nccl_id"
                if rank == 0:
                    hidden = conceal(meeting.secret, label, new_unique_id())
                    rendezvous.post("nccl_id", {"id": hidden.hex()}, fn)
                hidden = bytes.fromhex(rendezvous.read("nccl_id", fn, "rank 0's NCCL unique id", 0)["id"])
                unique_id = conceal(meeting.secret, label, hidden)
            engine = NcclEngine(unique_id, rank, n_ranks, device, health)
        else:
            from .gloo import GlooEngine
            try:
                engine = GlooEngine(engine_store, rank, n_ranks, engine_address, exec_s, device, health,
                                    [h["address"] for h in headers])
            except OpError:
                raise
            except Exception as e:  # noqa: BLE001
                if "unauthenticated message" in str(e):   # sealed.Unauthenticated, through gloo's C++
                    fail(HcclResult.HCCL_E_TCP_TRANSFER, f"{fn}: gloo's rendezvous read an unauthenticated message: "
                                                         f"{_first_line(e)}")
                fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: gloo could not connect the ranks from {engine_address}: "
                                                    f"{_first_line(e)}")
    except BaseException:
        rendezvous.worker.close()
        if liveness is not None:
            liveness.stop()   # says bye: this rank may join this meeting's next communicator
        else:
            guarded(fn, "leaving", lambda: store.set(f"bye/{rank}", "1"))
        raise
    health.on_fault = engine.on_fault
    engine.report = liveness.report
    engine.probe = liveness.probe
    engine.refresh = liveness.refresh
    rendezvous.set_timeout(exec_s, "HCCL_EXEC_TIMEOUT")
    rendezvous.watch = True
    side = Rendezvous(side_store, rank, n_ranks, exec_s, "HCCL_EXEC_TIMEOUT", health)
    side.watch = True
    liveness.start()
    return HcclComm(rank, n_ranks, device, engine, rendezvous, side, liveness, meeting, number, engine_address,
                    clients)


def check_comm(comm: Any, fn: str) -> HcclComm:
    """The live communicator `comm` of this process: nullptr HCCL_E_PTR, any other misuse HCCL_E_PARA."""
    if isinstance(comm, HcclComm) and comm.destroyed:   # "was destroyed": the words the C ABI's tests read
        fail(HcclResult.HCCL_E_PARA, f"{fn}: comm was destroyed (HcclCommDestroy)")
    live_handle(comm, HcclComm, fn, "comm", HcclResult.HCCL_E_PARA, null_status=HcclResult.HCCL_E_PTR)
    if comm.forked:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: comm was created in the parent process before fork() and cannot be "
                                     "used in the child (make the child's own communicator; HcclCommDestroy only "
                                     "drops the child's copy)")
    return comm
