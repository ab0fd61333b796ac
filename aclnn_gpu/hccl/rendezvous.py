"""How the ranks of a communicator agree on each call before the engine runs it: `Rendezvous`, the
per-communicator key-value exchange over PyTorch's `TCPStore` (every rank posts its call's header,
reads the others', and refuses a disagreement on every rank), its `StoreWorker` thread, the
communicator's `Health` (a dead peer seen by liveness.py ends the waits sooner), a store call's
failure as HCCL's code (`guarded`), and which communicator of a meeting a rank joins
(`generation`). Every wait is bounded: HCCL_CONNECT_TIMEOUT while a communicator is built,
HCCL_EXEC_TIMEOUT for a collective.
"""
from __future__ import annotations

import datetime
import json
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..base.errors import OpError, fail
from .sealed import Unauthenticated
from .types import HcclResult

WAIT_SLICE_S = 1.0                  # a store wait looks at the communicator's health this often


def _first_line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__


def is_timeout(e: BaseException) -> bool:
    text = str(e).lower()
    return "timeout" in text or "timed out" in text


@dataclass
class Health:
    """What a communicator knows about its peers (kept up by liveness.Liveness): the first fault
    (HCCL code and message) and the ranks that destroyed their communicator."""
    fault: tuple[int, str] | None = None
    left: set[int] = field(default_factory=set)
    store_owner: str = "the process that called HcclGetRootInfo"   # words for the store's host
    on_fault: Callable[[], None] = lambda: None                     # the engine's reaction (NCCL: abort)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the store going silent (its host's network down, a blackhole route): the heartbeat's store
    # call started at `stuck_since` and has not returned; after `silence_s` (the heartbeat
    # timeout; 0: never) that is the communicator's fault
    stuck_since: float | None = None
    silence_s: float = 0.0

    def observe(self) -> None:
        """Record the store's silence as the fault once it lasted silence_s."""
        since = self.stuck_since
        if self.fault is None and since is not None and self.silence_s and \
                time.monotonic() - since > self.silence_s:
            self.record(HcclResult.HCCL_E_TCP_TRANSFER,
                        f"no answer from the bootstrap store for {time.monotonic() - since:.0f} s "
                        f"(ACLNN_GPU_HCCL_HEARTBEAT_S={self.silence_s:g}): the network to {self.store_owner} is "
                        "down, or its host stopped")

    def record(self, code: int, message: str) -> bool:
        """Keep the communicator's first fault (True when this one is it) and tell the engine."""
        with self.lock:
            if self.fault is not None:
                return False
            self.fault = (int(code), message)
        self.on_fault()
        return True

    def check(self, fn: str, ranks: list[int] | None = None) -> None:
        self.observe()
        if self.fault is not None:
            code, message = self.fault
            fail(code, f"{fn}: {message}")
        gone = sorted(self.left.intersection(ranks or []))
        if gone:
            fail(HcclResult.HCCL_E_REMOTE, f"{fn}: rank {', '.join(map(str, gone))} destroyed the communicator "
                                           "(HcclCommDestroy) and will not take part")


class _Job:
    def __init__(self, op: Callable[[], Any]):
        self.op, self.done = op, threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class StoreWorker:
    """A daemon thread that makes one store client's calls, so the caller can stop waiting: a
    TCPStore call over a network that went silent (link down, blackhole route) does not return,
    and the caller's thread must not be the one it holds. A call abandoned this way leaves the
    worker stuck; the communicator has failed by then (every later call fails at once)."""

    def __init__(self, name: str):
        self.name = name
        self.jobs: "queue.SimpleQueue[_Job]" = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.busy = False   # in a store call

    def submit(self, op: Callable[[], Any]) -> _Job:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self.thread.start()
        job = _Job(op)
        self.jobs.put(job)
        return job

    def close(self) -> None:
        """End the thread once the calls queued before this one have run (HcclCommDestroy)."""
        if self.thread is not None:
            self.jobs.put(None)  # type: ignore[arg-type]

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self.busy = True
            try:
                job.value = job.op()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                job.error = e
            finally:
                self.busy = False
                job.done.set()


class Rendezvous:
    """One communicator's namespace in the store: each rank posts a small JSON header of its call and
    reads everyone's, so a call the ranks disagree on is refused on every rank before the engine
    sees it (an engine given mismatched calls hangs or corrupts)."""

    def __init__(self, store: Any, rank: int, size: int, timeout_s: float, timeout_name: str,
                 health: Health | None = None):
        self.store = store
        self.rank = rank
        self.size = size
        self.health = health if health is not None else Health()
        self.watch = False   # whether waits look at the peers' health (after init)
        # how a fault this rank finds reaches the others (the communicator's Liveness.report posts it)
        self.report: Callable[[int, str], Any] = self.health.record
        self.worker = StoreWorker(f"hccl-store-rank{rank}")
        self.set_timeout(timeout_s, timeout_name)

    def set_timeout(self, seconds: float, name: str) -> None:
        self.seconds = seconds
        self.limit = f" within {name}={seconds:g} s"

    def _call(self, op: Callable[[], Any], fn: str, ranks: list[int]) -> Any:
        """Run a store call on the worker; wait for it in slices, ending at the communicator's
        first fault (a silent store included, health.observe) or after the timeout."""
        job = self.worker.submit(op)
        deadline = time.monotonic() + self.seconds + WAIT_SLICE_S
        while not job.done.wait(WAIT_SLICE_S):
            if self.watch:
                self.health.check(fn, ranks)
            if time.monotonic() > deadline:
                fail(HcclResult.HCCL_E_TIMEOUT, f"{fn}: the bootstrap store did not answer{self.limit}")
        if job.error is not None:
            raise job.error
        return job.value

    def _lost(self, e: BaseException, fn: str, waiting_for: str) -> None:
        if isinstance(e, Unauthenticated):
            self.report(HcclResult.HCCL_E_TCP_TRANSFER, f"rank {self.rank} read an {e}")
            fail(HcclResult.HCCL_E_TCP_TRANSFER, f"{fn}: {e}")
        gone = f"{self.health.store_owner} is gone ({_first_line(e)})"
        if self.watch:
            self.health.record(HcclResult.HCCL_E_TCP_TRANSFER, f"lost the bootstrap store: {gone}")
        fail(HcclResult.HCCL_E_TCP_TRANSFER, f"{fn}: lost the bootstrap store while waiting for {waiting_for}: {gone}")

    def _wait(self, keys: list[str], fn: str, waiting_for: str, ranks: list[int]) -> list[bytes]:
        """Wait for `keys` (posted by `ranks`, in order), in slices, failing at once when the
        communicator's health says a waited-for rank died or left."""
        deadline = time.monotonic() + self.seconds
        while True:
            if self.watch:
                self.health.check(fn, ranks)
            left = deadline - time.monotonic()
            step = min(left, WAIT_SLICE_S) if self.watch else left
            def wait_and_read() -> list[bytes]:
                self.store.wait(keys, datetime.timedelta(seconds=max(step, 0.001)))
                return list(self.store.multi_get(keys))
            try:
                return list(self._call(wait_and_read, fn, ranks))
            except OpError:
                raise
            except Exception as e:  # noqa: BLE001 - torch raises DistStoreError / DistNetworkError / RuntimeError
                if isinstance(e, Unauthenticated) or not is_timeout(e):
                    self._lost(e, fn, waiting_for)
                if time.monotonic() < deadline:
                    continue
                missing = [r for k, r in zip(keys, ranks) if not self._has(k)]
                if len(keys) > 1 and missing:
                    waiting_for = f"{waiting_for} (rank {', '.join(map(str, missing))} did not)"
                fail(HcclResult.HCCL_E_TIMEOUT, f"{fn}: timed out waiting for {waiting_for}{self.limit} (a rank "
                                                "hangs, is stopped or called something else)")

    def _has(self, key: str) -> bool:
        try:
            return bool(self._call(lambda: self.store.check([key]), "", []))
        except Exception:  # noqa: BLE001 - only used to word a message
            return False

    def _set(self, key: str, value: dict, fn: str) -> None:
        try:
            self._call(lambda: self.store.set(key, json.dumps(value)), fn, [])
        except OpError:
            raise
        except Exception as e:  # noqa: BLE001
            self._lost(e, fn, "the store")

    def _forget(self, key: str) -> None:
        """Delete a key on the worker, not waiting (housekeeping only)."""
        def delete() -> None:
            try:
                self.store.delete_key(key)
            except Exception:  # noqa: BLE001
                pass
        self.worker.submit(delete)

    def everyone(self, seq: int, header: dict, fn: str) -> list[dict]:
        """Post this rank's header of call `seq` and return every rank's, in rank order."""
        self._set(f"c{seq}/{self.rank}", header, fn)
        values = self._wait([f"c{seq}/{r}" for r in range(self.size)], fn, f"the other ranks to call {fn}",
                            list(range(self.size)))
        if seq > 0:  # every rank has posted `seq`, so all have read `seq - 1`: drop our old header
            self._forget(f"c{seq - 1}/{self.rank}")
        return [self._decode(v, fn) for v in values]

    def _decode(self, value: bytes, fn: str) -> dict:
        """An authenticated header: a member wrote it, so it is the library's JSON object."""
        header = json.loads(value)
        if not isinstance(header, dict):
            fail(HcclResult.HCCL_E_INTERNAL, f"{fn}: a rank posted a header that is not an object")
        return header

    def post(self, key: str, header: dict, fn: str) -> None:
        self._set(key, header, fn)

    def read(self, key: str, fn: str, waiting_for: str, rank: int) -> dict:
        """Wait for a key rank `rank` posts and read it."""
        return self._decode(self._wait([key], fn, waiting_for, [rank])[0], fn)

    def take(self, key: str, fn: str, waiting_for: str, rank: int) -> dict:
        """Wait for a key rank `rank` posts, read it and delete it."""
        value = self.read(key, fn, waiting_for, rank)
        self._forget(key)
        return value

    def join(self, n_ranks: int, engine: str, fn: str, about: dict) -> list[dict]:
        """Init: every rank announces itself once (with `about`: its address, process); a rank id
        taken twice, or ranks that disagree on the size or the engine, are refused; a rank that
        never comes is a timeout. Returns every rank's announcement."""
        token = secrets.token_hex(8)
        try:
            held = self._call(lambda: self.store.compare_set(f"rank/{self.rank}", "", token), fn, [])
        except OpError:
            raise
        except Exception as e:  # noqa: BLE001
            self._lost(e, fn, "the store")
        if bytes(held).decode() != token:
            fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {self.rank} already joined this communicator "
                                         "(two processes passed the same rank)")
        headers = self.everyone(-1, dict(about, nRanks=n_ranks, engine=engine), fn)
        for r, h in enumerate(headers):
            if h["nRanks"] != n_ranks or h["engine"] != engine:
                fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {r} joined with nRanks={h['nRanks']} on {h['engine']}, "
                                             f"this rank with nRanks={n_ranks} on {engine}")
        return headers


def generation(store: Any, rank: int, fn: str, left: Callable[[int], bool]) -> int:
    """Which communicator of meeting `key` this rank is joining: its 1st, 2nd, ... (the ranks' n-th
    joins meet, so a root info or rank table can make a communicator again after HcclCommDestroy).
    A rank whose previous communicator of this meeting is alive (not destroyed) is refused: two
    processes passed the same rank, or the meeting was reused before HcclCommDestroy. `store` is the
    meeting's SealedStore."""
    try:
        number = int(store.add(f"gen/{rank}", 1))
    except Unauthenticated as e:
        fail(HcclResult.HCCL_E_TCP_TRANSFER, f"{fn}: {e}")
    except Exception as e:  # noqa: BLE001
        fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: the bootstrap store does not answer: {_first_line(e)}")
    if number > 1 and not left(number - 1):
        try:
            store.add(f"gen/{rank}", -1)
        except Exception:  # noqa: BLE001
            pass
        fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {rank} already joined this communicator and has not destroyed it "
                                     "(two processes passed the same rank, or the root info / rank table was used "
                                     "again before HcclCommDestroy)")
    return number


def guarded(fn: str, what: str, call: Callable[[], Any]) -> Any:
    """A store call whose failure is HCCL's TCP code with the store's own words."""
    try:
        return call()
    except OpError:
        raise
    except Exception as e:  # noqa: BLE001
        fail(HcclResult.HCCL_E_TCP_TRANSFER, f"{fn}: {what}: {_first_line(e)}")
