"""How ranks find each other before any data moves: the root info (`Meeting`, what
`HcclGetRootInfo` hands out), the timeouts, this process's store server (`serve`) and its store
clients (`connect`, `sever` and `forget` for a dead peer or a fork child). Beside it: the addresses
each rank listens and binds on (addresses.py), the rank-table file of `HcclCommInitClusterInfo`
(rank_table.py), and `Rendezvous`, the per-communicator key-value exchange over PyTorch's
`TCPStore` that checks every collective's arguments across ranks before the engine runs it
(rendezvous.py).

The store is only the meeting point; the data moves through the engine (gloo or NCCL), each rank
bound to an address of its own host (`engine_address`), never to the meeting host's. Every wait on
the store is bounded: `HCCL_CONNECT_TIMEOUT` while a communicator is being built,
`HCCL_EXEC_TIMEOUT` for a collective, and sooner when the communicator's `Liveness` (liveness.py)
has seen a rank die.

Only members can use the store: the root info carries a 256-bit secret (`Meeting.secret`) that is
never written to the store, and a rank table's secret is derived from its bytes
(`sealed.rank_table_secret`); every key the communicator uses is named and every value
authenticated with it (sealed.py). A value that fails its check is an "unauthenticated message"
error on every rank (`HCCL_E_TCP_TRANSFER`), never data.
"""
from __future__ import annotations

import ctypes
import datetime
import json
import os
import secrets
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any

from ..base.errors import fail
from . import sealed
from .addresses import address_family, resolve
from .types import HCCL_ROOT_INFO_BYTES, HcclResult

MAGIC = b"ACLNNGPU-HCCL-3\0"   # the root info's first 16 bytes: a wrong blob is refused, not decoded
DEFAULT_CONNECT_TIMEOUT_S = 120.0   # HCCL's defaults
DEFAULT_EXEC_TIMEOUT_S = 1836.0
DEFAULT_HEARTBEAT_S = 10.0          # the library's: a rank silent this long is dead (ACLNN_GPU_HCCL_HEARTBEAT_S)


def _seconds(name: str, default: float, zero_ok: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        fail(HcclResult.HCCL_E_PARA, f"environment {name}={raw!r} must be a number of seconds")
    if not (value > 0 or (zero_ok and value == 0)):
        fail(HcclResult.HCCL_E_PARA, f"environment {name}={raw!r} must be {'0 or ' if zero_ok else ''}positive")
    return value


def connect_timeout() -> float:
    """HCCL_CONNECT_TIMEOUT: seconds a communicator's ranks wait for one another at init."""
    return _seconds("HCCL_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT_S)


def exec_timeout() -> float:
    """HCCL_EXEC_TIMEOUT: seconds a rank waits for its peers in one collective."""
    return _seconds("HCCL_EXEC_TIMEOUT", DEFAULT_EXEC_TIMEOUT_S)


def heartbeat_timeout() -> float:
    """ACLNN_GPU_HCCL_HEARTBEAT_S: seconds without a heartbeat after which a rank is dead (0: never)."""
    return _seconds("ACLNN_GPU_HCCL_HEARTBEAT_S", DEFAULT_HEARTBEAT_S, zero_ok=True)


# ---------------------------------------------------------------------------- this process
_process_token = secrets.token_hex(8)   # names this process in the store (a fork child gets its own)


def process_token() -> str:
    return _process_token


def _quiet() -> None:
    """PyTorch's c10d logs a warning with a C++ stack trace for every failed or timed-out store
    operation (a dead peer makes several per rank); the library reports those failures itself, so
    it raises c10's log level to errors unless the user chose one (TORCH_CPP_LOG_LEVEL)."""
    if os.environ.get("TORCH_CPP_LOG_LEVEL", "").strip():
        return
    import ctypes

    import torch
    for name in ("libc10.so", "libc10.dylib"):
        path = os.path.join(os.path.dirname(torch.__file__), "lib", name)
        if os.path.exists(path):
            try:
                level = ctypes.c_int.in_dll(ctypes.CDLL(path), "FLAGS_caffe2_log_level")
                level.value = max(level.value, 2)   # c10's ERROR
            except (OSError, ValueError):   # a build without the flag: its warnings stay
                pass
            return


_quieted = False


def quiet_torch_logs() -> None:
    global _quieted
    if not _quieted:
        _quieted = True
        _quiet()


# ---------------------------------------------------------------------------- where ranks meet
@dataclass(frozen=True)
class Meeting:
    """What every rank of one communicator needs to find the others."""
    host: str
    port: int
    key: str                   # the communicator's namespace in the store
    engine: str                # "gloo" or "nccl"
    nccl_id: bytes | None = None
    owner: str = ""            # process_token() of the process serving the store
    name: str = ""             # HcclGetCommName's answer
    secret: bytes = b""        # names and authenticates everything in the store (sealed.py); never stored

    def encode(self) -> bytes:
        body = json.dumps({"host": self.host, "port": self.port, "key": self.key, "engine": self.engine,
                           "nccl_id": None if self.nccl_id is None else self.nccl_id.hex(), "owner": self.owner,
                           "name": self.name, "secret": self.secret.hex()}).encode()
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
            meeting = Meeting(str(info["host"]), int(info["port"]), str(info["key"]), str(info["engine"]),
                              None if nccl_id is None else bytes.fromhex(nccl_id), str(info["owner"]),
                              str(info["name"]), bytes.fromhex(info["secret"]))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            fail(HcclResult.HCCL_E_PARA, f"{fn}: rootInfo is corrupted")
        if len(meeting.secret) != sealed.SECRET_BYTES or not 0 < meeting.port < 65536:
            fail(HcclResult.HCCL_E_PARA, f"{fn}: rootInfo is corrupted (its secret or port)")
        return meeting


_server_lock = threading.Lock()
_servers: dict[tuple[str, int], Any] = {}   # (address, port asked) -> TCPStore server of this process
_listeners: list[socket.socket] = []        # their listening sockets


def serve(address: str, port: int, timeout_s: float) -> int:
    """This process's store server on `address` (port 0: any free one), made on first use and alive
    until exit (peers may still read their last headers from it after a local HcclCommDestroy).
    It listens on that address only. Returns its port."""
    quiet_torch_logs()
    with _server_lock:
        server = _servers.get((address, port))
        if server is None:
            from torch.distributed import TCPStore
            listener = socket.socket(address_family(address), socket.SOCK_STREAM)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((address, port))
                listener.listen(1024)
                # the store serves on this socket (master_listen_fd), so it listens where the socket
                # was bound, not on every interface; the socket stays open as long as the store
                server = TCPStore(address, listener.getsockname()[1], None, True,
                                  timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False,
                                  master_listen_fd=listener.fileno())
            except BaseException:
                listener.close()
                raise
            _listeners.append(listener)
            _servers[(address, port)] = server
        return int(server.port)


def new_key() -> str:
    return secrets.token_hex(8)


def leak(obj: Any) -> None:
    """Keep `obj` alive until the process exits, whatever drops it: for PyTorch objects whose
    destructor would wait for threads that are gone (a fork child) or blocked (a dead peer's
    collective)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


_connect_lock = threading.Lock()
_client_sockets: dict[int, list[tuple[int, str]]] = {}   # id(client) -> its sockets' (fd, /proc link)


def _sockets() -> dict[int, str]:
    """This process's socket file descriptors and their /proc links ("socket:[inode]"); {} off Linux."""
    found: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:"):
            found[int(name)] = link
    return found


def _peer(fd: int) -> Any:
    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            return s.getpeername()[:2]
    except OSError:
        return None


def connect(host: str, port: int, timeout_s: float) -> Any:
    """A store client of the server at host:port. Its socket is remembered (`sever`): TCPStore
    does not expose it, so it is the socket this call opened to host:port."""
    quiet_torch_logs()
    from torch.distributed import TCPStore
    with _connect_lock:
        before = _sockets()
        client = TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
        opened = [(fd, link) for fd, link in _sockets().items() if before.get(fd) != link]
        target = (resolve(host), port)
        _client_sockets[id(client)] = [(fd, link) for fd, link in opened
                                       if (lambda p: p is not None and (p[0].removeprefix("::ffff:"), p[1]) == target)
                                       (_peer(fd))]
    return client


def forget(clients: list[Any]) -> None:
    """Drop what `connect` remembered of clients that are closed normally."""
    for client in clients:
        _client_sockets.pop(id(client), None)


def sever(clients: list[Any]) -> None:
    """Shut down the sockets of store clients that will never be used again (a failed
    communicator's), so a call still blocked on a network that went silent returns now, with an
    error, instead of whenever the network comes back: a Python thread that returns from PyTorch
    while the interpreter exits ends the process (std::terminate). The clients themselves are
    kept (bootstrap.leak)."""
    for client in clients:
        for fd, link in _client_sockets.pop(id(client), []):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") != link:
                    continue   # closed, and the number reused
                with socket.socket(fileno=os.dup(fd)) as s:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _after_fork_in_child() -> None:
    """The parent's servers have no threads here: never destroy them (their destructor would wait for
    threads that do not exist), and serve anew when asked."""
    global _process_token, _server_lock
    for server in _servers.values():
        leak(server)
    _servers.clear()
    _server_lock = threading.Lock()
    _process_token = secrets.token_hex(8)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


