"""Dead peers found in bounded time: every rank of a communicator beats a counter in the store once
a second from a thread of its own, and reads everyone's. A rank whose counter stands still for
ACLNN_GPU_HCCL_HEARTBEAT_S seconds (default 10) is dead: its process died, was stopped, or its host
left the network. The first fault a rank sees (a dead rank, a lost store, an engine that failed) is
posted to the store, so every rank learns it within a beat, and is kept in the communicator's
`Health`: every wait of the communicator (the cross-rank agreement, p2p verdicts, queued engine
work) looks at it between slices of at most a second and fails with its HCCL code and a message
naming the rank, instead of waiting out HCCL_EXEC_TIMEOUT. `HcclGetCommAsyncError` reports it.

A rank that destroys its communicator says so (`bye/<rank>`): waits for it fail at once, naming it,
and it is never mistaken for a dead one.

The store is the communicator's SealedStore (sealed.py): a counter is this rank's own key, set (not
added to) each beat, so every value read is authenticated; a value a stranger wrote is an
"unauthenticated message" fault, posted like any other.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any

from .rendezvous import Health, _first_line
from .sealed import Unauthenticated
from .types import HcclResult


class Liveness:
    """The heartbeat thread of one rank of one communicator (daemon; stopped by HcclCommDestroy)."""

    def __init__(self, store: Any, rank: int, size: int, heartbeat_s: float, health: Health):
        self.store, self.rank, self.size = store, rank, size
        self.heartbeat_s = heartbeat_s
        self.interval = min(1.0, heartbeat_s / 4) if heartbeat_s else 1.0
        self.health = health
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._keys = [f"hb/{r}" for r in range(size)]
        self._seen: dict[int, tuple[bytes, float, int]] = {}
        self._beats = 0
        self.beat()

    def beat(self) -> None:
        self._beats += 1
        self.store.set(f"hb/{self.rank}", str(self._beats))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"hccl-heartbeat-rank{self.rank}", daemon=True)
        self._thread.start()

    def _locked(self) -> bool:
        """The store client's lock, waited for a beat at most: a store call that does not return
        (the network to the store is down) holds it, and no caller may wait on that."""
        return self._lock.acquire(timeout=self.interval)

    def stop(self) -> None:
        """HcclCommDestroy: stop beating and tell the peers this rank left (not died). Returns
        within a beat even when the store does not answer (the peers then see a dead rank)."""
        self._stop.set()
        if not self._locked():
            return
        try:
            self.store.set(f"bye/{self.rank}", "1")
        except Exception:  # noqa: BLE001 - the store may be gone: the peers see a dead rank then
            pass
        finally:
            self._lock.release()

    def report(self, code: int, message: str) -> None:
        """A fault this rank found (its engine failed, an unauthenticated message): kept, and
        posted for the other ranks from a thread of its own (the store may not answer)."""
        if self._set(code, message):
            poster = threading.Thread(target=self._post, args=(code, message), name=f"hccl-fault-rank{self.rank}",
                                      daemon=True)
            poster.start()
            poster.join(self.interval)   # posted before this rank goes on (to HcclCommDestroy, say)

    def _post(self, code: int, message: str) -> None:
        with self._lock:
            try:
                self.store.compare_set("fault", "", json.dumps([int(code), message]))
            except Exception:  # noqa: BLE001 - the monitor reports a lost store on its own
                pass

    def refresh(self) -> None:
        """Read the fault a peer posted, now (not at the next beat): a peer that failed posts its
        reason before it closes its connections, so the connection's loss is not taken for the reason."""
        if not self._locked():
            return
        try:
            posted = self.store.get("fault") if self.store.check(["fault"]) else None
        except Unauthenticated as e:
            posted, forged = None, e
        except Exception:  # noqa: BLE001 - the store is gone: the monitor says so
            posted, forged = None, None
        else:
            forged = None
        finally:
            self._lock.release()
        if forged is not None:
            self.report(HcclResult.HCCL_E_TCP_TRANSFER, f"rank {self.rank} read an {forged}")
        elif posted:
            code, message = json.loads(posted)
            self._set(code, message)

    def probe(self, ranks: list[int]) -> list[int]:
        """Which of `ranks` stopped beating without leaving (HcclCommDestroy): their counters read
        twice, 2.5 beats apart (a few seconds at most). For naming the peer behind a lost
        connection, when several ranks share its address."""
        keys = [f"hb/{r}" for r in ranks]
        try:
            if not self._locked():
                return []
            try:
                before = list(self.store.multi_get(keys))
            finally:
                self._lock.release()
            time.sleep(2.5 * self.interval)
            if not self._locked():
                return []
            try:
                after = list(self.store.multi_get(keys))
                return [r for r, a, b in zip(ranks, before, after) if a == b and not self.store.check([f"bye/{r}"])]
            finally:
                self._lock.release()
        except Exception:  # noqa: BLE001 - the store is gone: no answer
            return []

    def _set(self, code: int, message: str) -> bool:
        return self.health.record(code, message)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.tick(time.monotonic()):
                return

    def tick(self, now: float) -> bool:
        """One beat: add to this rank's counter, read everyone's and the posted fault, judge who
        stopped. False when the thread should end (stopped, or the store is gone).

        A rank is dead only after both enough time (ACLNN_GPU_HCCL_HEARTBEAT_S) and enough beats of
        this thread that saw its counter stand still: a machine that was frozen as a whole (suspended,
        overloaded) wakes with every counter stale for a long time, and this rank's next beats see
        them move again."""
        try:
            with self._lock:
                if self._stop.is_set():
                    return False
                self.health.stuck_since = time.monotonic()   # a call that does not return is seen (Health.observe)
                self.beat()
                values = list(self.store.multi_get(self._keys))
                posted = self.store.get("fault") if self.store.check(["fault"]) else None
                seen = self._seen
                stale = [r for r in range(self.size) if r != self.rank and r not in self.health.left
                         and r in seen and seen[r][0] == values[r] and seen[r][2] >= 2]
                left = [r for r in stale if self.store.check([f"bye/{r}"])]
                self.health.stuck_since = None
        except Unauthenticated as e:   # a stranger wrote to the store: every rank learns it
            self.health.stuck_since = None
            self.report(HcclResult.HCCL_E_TCP_TRANSFER, f"rank {self.rank} read an {e}")
            return False
        except Exception as e:  # noqa: BLE001 - the store's host is gone (or its network)
            self.health.stuck_since = None
            if not self._stop.is_set():
                self._set(HcclResult.HCCL_E_TCP_TRANSFER, f"lost the bootstrap store: {self.health.store_owner} "
                                                          f"is gone ({_first_line(e)})")
            return False
        if posted:
            code, message = json.loads(posted)
            self._set(code, message)
        self.health.left.update(left)
        for r in range(self.size):   # (counter, when it last changed, beats that saw it unchanged since)
            if r not in seen or seen[r][0] != values[r]:
                seen[r] = (values[r], now, 0)
            else:
                seen[r] = (values[r], seen[r][1], seen[r][2] + 1)
        if self.heartbeat_s:
            beats = int(self.heartbeat_s / self.interval)
            dead = [r for r in stale if r not in left and now - seen[r][1] >= self.heartbeat_s
                    and seen[r][2] >= beats]
            if dead:
                self.report(HcclResult.HCCL_E_REMOTE,
                            f"rank {dead[0]} stopped: no heartbeat for {now - seen[dead[0]][1]:.0f} s "
                            f"(ACLNN_GPU_HCCL_HEARTBEAT_S={self.heartbeat_s:g}); its process died, was "
                            "stopped, or its host left the network")
        return True
