"""How ranks find each other and agree before any data moves: the root info (what
`HcclGetRootInfo` hands out), the rank-table file of `HcclCommInitClusterInfo`, the timeouts (HCCL's
own environment variables), and `Rendezvous`, the per-communicator key-value exchange over
PyTorch's `TCPStore` that checks every collective's arguments across ranks before the engine runs it.

The store is only the meeting point; the data moves through the engine (gloo or NCCL). Every wait
on it is bounded: `HCCL_CONNECT_TIMEOUT` while a communicator is being built, `HCCL_EXEC_TIMEOUT`
for a collective.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import secrets
import struct
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import fail
from .types import HCCL_ROOT_INFO_BYTES, HcclResult

MAGIC = b"ACLNNGPU-HCCL-1\0"   # the root info's first 16 bytes: a wrong blob is refused, not decoded
DEFAULT_CONNECT_TIMEOUT_S = 120.0   # HCCL's defaults
DEFAULT_EXEC_TIMEOUT_S = 1836.0
DEFAULT_BASE_PORT = 60000


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        fail(HcclResult.HCCL_E_PARA, f"environment {name}={raw!r} must be a number of seconds")
    if not value > 0:
        fail(HcclResult.HCCL_E_PARA, f"environment {name}={raw!r} must be positive")
    return value


def connect_timeout() -> float:
    """HCCL_CONNECT_TIMEOUT: seconds a communicator's ranks wait for one another at init."""
    return _seconds("HCCL_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT_S)


def exec_timeout() -> float:
    """HCCL_EXEC_TIMEOUT: seconds a rank waits for its peers in one collective."""
    return _seconds("HCCL_EXEC_TIMEOUT", DEFAULT_EXEC_TIMEOUT_S)


def host_address() -> str:
    """HCCL_IF_IP: the address the bootstrap listens on (loopback unless set)."""
    return os.environ.get("HCCL_IF_IP", "").strip() or "127.0.0.1"


# ---------------------------------------------------------------------------- where ranks meet
@dataclass(frozen=True)
class Meeting:
    """What every rank of one communicator needs to find the others."""
    host: str
    port: int
    key: str                   # the communicator's namespace in the store
    engine: str                # "gloo" or "nccl"
    nccl_id: bytes | None = None

    def encode(self) -> bytes:
        body = json.dumps({"host": self.host, "port": self.port, "key": self.key, "engine": self.engine,
                           "nccl_id": None if self.nccl_id is None else self.nccl_id.hex()}).encode()
        blob = MAGIC + struct.pack("<I", len(body)) + body
        assert len(blob) <= HCCL_ROOT_INFO_BYTES
        return blob.ljust(HCCL_ROOT_INFO_BYTES, b"\0")

    @staticmethod
    def decode(blob: Any, fn: str) -> "Meeting":
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            fail(HcclResult.HCCL_E_PARA,
                 f"{fn}: rootInfo must be bytes from HcclGetRootInfo, got {type(blob).__name__}")
        blob = bytes(blob)
        if len(blob) != HCCL_ROOT_INFO_BYTES or not blob.startswith(MAGIC):
            header = "" if blob.startswith(MAGIC) else ", wrong header"
            fail(HcclResult.HCCL_E_PARA, f"{fn}: rootInfo is not the {HCCL_ROOT_INFO_BYTES} bytes HcclGetRootInfo "
                                         f"returns (got {len(blob)} bytes{header})")
        (length,) = struct.unpack_from("<I", blob, len(MAGIC))
        try:
            info = json.loads(blob[len(MAGIC) + 4:len(MAGIC) + 4 + length])
            nccl_id = info["nccl_id"]
            return Meeting(str(info["host"]), int(info["port"]), str(info["key"]), str(info["engine"]),
                           None if nccl_id is None else bytes.fromhex(nccl_id))
        except (ValueError, KeyError, TypeError):
            fail(HcclResult.HCCL_E_PARA, f"{fn}: rootInfo is corrupted")


_server_lock = threading.Lock()
_server: Any = None


def serve(timeout_s: float) -> tuple[str, int]:
    """This process's store server (one per process, made on first use, alive until exit: peers may
    still read their last headers from it after a local HcclCommDestroy). Returns (host, port)."""
    global _server
    with _server_lock:
        if _server is None:
            from torch.distributed import TCPStore
            _server = TCPStore(host_address(), 0, None, True, timeout=datetime.timedelta(seconds=timeout_s),
                               wait_for_workers=False)
        return host_address(), int(_server.port)


def new_key() -> str:
    return secrets.token_hex(8)


def connect(host: str, port: int, timeout_s: float, *, serve_here: bool = False) -> Any:
    """A store client (or, for the rank-table root, the server) at host:port."""
    from torch.distributed import TCPStore
    return TCPStore(host, port, None, serve_here, timeout=datetime.timedelta(seconds=timeout_s),
                    wait_for_workers=False)


# ---------------------------------------------------------------------------- rank table
@dataclass(frozen=True)
class RankTable:
    n_ranks: int
    root_host: str     # host of rank 0: the store server runs there
    digest: str        # names the communicator in the store (every rank reads the same file)


def read_rank_table(path: Any, rank: int, fn: str) -> RankTable:
    """CANN's rank-table JSON (version 1.0 / 1.2): server_list[].device[].rank_id, server_id/host_ip."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo must be the path of a rank-table file, got {path!r}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(HcclResult.HCCL_E_OPEN_FILE_FAILURE, f"{fn}: clusterInfo {str(path)!r} cannot be read: {e.strerror}")
    try:
        table = json.loads(raw)
        hosts: dict[int, str] = {}
        for server in table["server_list"]:
            host = str(server.get("host_ip") or server["server_id"])
            for device in server["device"]:
                rank_id = int(device["rank_id"])
                if rank_id in hosts:
                    fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo names rank_id {rank_id} twice")
                hosts[rank_id] = host
    except (ValueError, KeyError, TypeError) as e:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {str(path)!r} is not a rank table "
                                     f"(server_list[].device[].rank_id): {type(e).__name__}: {e}")
    n = len(hosts)
    if n == 0 or sorted(hosts) != list(range(n)):
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo rank_ids {sorted(hosts)} must be 0..n-1")
    if rank not in hosts:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {rank} is not a rank_id of clusterInfo (0..{n - 1})")
    return RankTable(n, hosts[0], hashlib.sha1(raw).hexdigest()[:16])


def base_port() -> int:
    """HCCL_IF_BASE_PORT: the port rank 0 of a rank-table communicator listens on."""
    raw = os.environ.get("HCCL_IF_BASE_PORT", "").strip()
    if not raw:
        return DEFAULT_BASE_PORT
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        fail(HcclResult.HCCL_E_PARA, f"environment HCCL_IF_BASE_PORT={raw!r} must be a port number")
    return int(raw)


# ---------------------------------------------------------------------------- agreeing on a call
def _store_error(e: Exception, fn: str, waiting_for: str, limit: str = "") -> None:
    """A failed store operation as HCCL's code: a timeout, or a peer (the store's host) gone."""
    text = str(e)
    if "timeout" in text.lower() or "timed out" in text.lower():
        fail(HcclResult.HCCL_E_TIMEOUT, f"{fn}: timed out waiting for {waiting_for}{limit} (a rank died, hangs or "
                                        "called something else)")
    fail(HcclResult.HCCL_E_TCP_TRANSFER, f"{fn}: lost the connection to the bootstrap store while waiting for "
                                         f"{waiting_for} (its rank died?): {text.splitlines()[0] if text else e}")


class Rendezvous:
    """One communicator's namespace in the store: each rank posts a small JSON header of its call and
    reads everyone's, so a call the ranks disagree on is refused on every rank before the engine
    sees it (an engine given mismatched calls hangs or corrupts)."""

    def __init__(self, store: Any, rank: int, size: int, timeout_s: float, timeout_name: str):
        self.store = store
        self.rank = rank
        self.size = size
        self.set_timeout(timeout_s, timeout_name)

    def set_timeout(self, seconds: float, name: str) -> None:
        self.timeout = datetime.timedelta(seconds=seconds)
        self.limit = f" within {name}={seconds:g} s"

    def _wait(self, keys: list[str], fn: str, waiting_for: str) -> list[bytes]:
        try:
            self.store.wait(keys, self.timeout)
            return list(self.store.multi_get(keys))
        except Exception as e:  # noqa: BLE001 - torch raises DistStoreError / DistNetworkError / RuntimeError
            missing = [k.rsplit("/", 1)[-1] for k in keys if not self._has(k)]
            if len(keys) > 1 and missing:
                waiting_for = f"{waiting_for} (rank {', '.join(missing)} did not)"
            _store_error(e, fn, waiting_for, self.limit)
            raise

    def _has(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception:  # noqa: BLE001 - only used to word a message
            return False

    def _set(self, key: str, value: dict, fn: str) -> None:
        try:
            self.store.set(key, json.dumps(value))
        except Exception as e:  # noqa: BLE001
            _store_error(e, fn, "the store")

    def everyone(self, seq: int, header: dict, fn: str) -> list[dict]:
        """Post this rank's header of call `seq` and return every rank's, in rank order."""
        self._set(f"c{seq}/{self.rank}", header, fn)
        values = self._wait([f"c{seq}/{r}" for r in range(self.size)], fn, f"the other ranks to call {fn}")
        if seq > 0:  # every rank has posted `seq`, so all have read `seq - 1`: drop our old header
            try:
                self.store.delete_key(f"c{seq - 1}/{self.rank}")
            except Exception:  # noqa: BLE001 - housekeeping only
                pass
        return [json.loads(v) for v in values]

    def post(self, key: str, header: dict, fn: str) -> None:
        self._set(key, header, fn)

    def read(self, key: str, fn: str, waiting_for: str) -> dict:
        """Wait for a key one peer posts and read it."""
        return json.loads(self._wait([key], fn, waiting_for)[0])

    def take(self, key: str, fn: str, waiting_for: str) -> dict:
        """Wait for a key one peer posts, read it and delete it."""
        value = self.read(key, fn, waiting_for)
        try:
            self.store.delete_key(key)
        except Exception:  # noqa: BLE001
            pass
        return value

    def join(self, n_ranks: int, engine: str, fn: str) -> None:
        """Init: every rank announces itself once; a rank id taken twice, or ranks that disagree on
        the size or the engine, are refused; a rank that never comes is a timeout."""
        token = secrets.token_hex(8)
        try:
            held = self.store.compare_set(f"rank/{self.rank}", "", token)
        except Exception as e:  # noqa: BLE001
            _store_error(e, fn, "the store")
        if bytes(held).decode() != token:
            fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {self.rank} already joined this communicator "
                                         "(two processes passed the same rank)")
        headers = self.everyone(-1, {"nRanks": n_ranks, "engine": engine}, fn)
        for r, h in enumerate(headers):
            if h["nRanks"] != n_ranks or h["engine"] != engine:
                fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {r} joined with nRanks={h['nRanks']} on {h['engine']}, "
                                             f"this rank with nRanks={n_ranks} on {engine}")
