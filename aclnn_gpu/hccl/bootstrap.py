"""How ranks find each other and agree before any data moves: the root info (what
`HcclGetRootInfo` hands out), the rank-table file of `HcclCommInitClusterInfo`, the addresses each
rank listens and binds on (HCCL's own environment variables), the timeouts, and `Rendezvous`, the
per-communicator key-value exchange over PyTorch's `TCPStore` that checks every collective's
arguments across ranks before the engine runs it.

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
import fcntl
import hashlib
import json
import os
import queue
import secrets
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..base.errors import OpError, fail
from . import sealed
from .sealed import Unauthenticated
from .types import HCCL_ROOT_INFO_BYTES, HcclResult

MAGIC = b"ACLNNGPU-HCCL-3\0"   # the root info's first 16 bytes: a wrong blob is refused, not decoded
DEFAULT_CONNECT_TIMEOUT_S = 120.0   # HCCL's defaults
DEFAULT_EXEC_TIMEOUT_S = 1836.0
DEFAULT_HEARTBEAT_S = 10.0          # the library's: a rank silent this long is dead (ACLNN_GPU_HCCL_HEARTBEAT_S)
DEFAULT_BASE_PORT = 60000
WAIT_SLICE_S = 1.0                  # a store wait looks at the communicator's health this often
LOOPBACK = "127.0.0.1"


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


# ---------------------------------------------------------------------------- addresses
def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def resolve(host: str) -> str:
    """A host name or address as an address (the first the resolver gives)."""
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError, UnicodeError):
        return host


def is_local(address: str) -> bool:
    """Whether `address` is an address of this host (a socket can bind to it)."""
    try:
        with socket.socket(_family(address), socket.SOCK_DGRAM) as s:
            s.bind((address, 0))
        return True
    except (OSError, ValueError, OverflowError):
        return False


def route_from(peer: str) -> str | None:
    """The address of this host that traffic to `peer` leaves from (None: no route)."""
    address = resolve(peer)
    try:
        with socket.socket(_family(address), socket.SOCK_DGRAM) as s:
            s.connect((address, 9))   # UDP: picks the route, sends nothing
            return str(s.getsockname()[0])
    except OSError:
        return None


def interfaces() -> list[tuple[str, str]]:
    """(interface name, address) of every address of this host: IPv4 by ioctl, IPv6 from /proc."""
    out: list[tuple[str, str]] = []
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
            except OSError:
                continue
        out.append((name, socket.inet_ntoa(packed[20:24])))
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6:
                    raw = bytes.fromhex(fields[0])
                    out.append((fields[5], socket.inet_ntop(socket.AF_INET6, raw)))
    except OSError:
        pass
    return out


def interface_of(address: str) -> str | None:
    """The name of the interface holding `address` (None when none does)."""
    for name, held in interfaces():
        if held == address:
            return name
    return None


def _socket_ifname(spec: str) -> str | None:
    """The first address of an interface HCCL_SOCKET_IFNAME selects: a comma list of name prefixes,
    `=name` for exact names, `^prefix` to exclude; IPv4 addresses first."""
    exact = spec.startswith("=")
    exclude = spec.startswith("^")
    names = [n.strip() for n in spec.lstrip("=^").split(",") if n.strip()]

    def chosen(name: str) -> bool:
        hit = any(name == n if exact else name.startswith(n) for n in names)
        return not hit if exclude else hit

    found = [(name, a) for name, a in interfaces() if chosen(name) and not a.startswith("fe80")]
    found.sort(key=lambda item: ":" in item[1])
    return found[0][1] if found else None


def _env_address(fn: str) -> tuple[str, str] | None:
    """(address, where it came from) from HCCL_IF_IP or HCCL_SOCKET_IFNAME, checked; None when neither is set."""
    ip = os.environ.get("HCCL_IF_IP", "").strip()
    if ip:
        if not is_local(ip):
            fail(HcclResult.HCCL_E_PARA, f"{fn}: environment HCCL_IF_IP={ip} is not an address of this host "
                                         "(`ip -brief address` lists them)")
        return ip, "HCCL_IF_IP"
    spec = os.environ.get("HCCL_SOCKET_IFNAME", "").strip()
    if spec:
        address = _socket_ifname(spec)
        if address is None:
            fail(HcclResult.HCCL_E_PARA, f"{fn}: environment HCCL_SOCKET_IFNAME={spec} selects no interface with an "
                                         "address on this host")
        return address, f"HCCL_SOCKET_IFNAME={spec}"
    return None


def store_address(fn: str) -> str:
    """Where HcclGetRootInfo's store listens: HCCL_IF_IP, else HCCL_SOCKET_IFNAME's interface, else loopback."""
    chosen = _env_address(fn)
    return LOOPBACK if chosen is None else chosen[0]


def engine_address(toward: str, fn: str, preferred: tuple[str, ...] = ()) -> str:
    """The address this rank binds its engine to: the first of `preferred` (a rank table's device_ip,
    its server's address) that is on this host, else HCCL_IF_IP / HCCL_SOCKET_IFNAME, else the
    address the route to `toward` (the store's host) leaves from."""
    for address in preferred:
        if address and is_local(resolve(address)):
            return resolve(address)
    chosen = _env_address(fn)
    if chosen is not None:
        return chosen[0]
    routed = route_from(toward)
    if routed is None:
        fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: this host has no route to the store's host {toward}; set "
                                            "HCCL_IF_IP to the address of the interface that reaches it")
    return routed


def nccl_environment(address: str | None = None) -> None:
    """NCCL picks its own interface; HCCL's variables say which one when the user did not tell NCCL
    (NCCL_SOCKET_IFNAME): HCCL_SOCKET_IFNAME as is, or the interface holding HCCL_IF_IP (or
    `address`, a rank table's). Nothing is set when neither says. NCCL reads the variable once per
    process, at its first communicator."""
    if os.environ.get("NCCL_SOCKET_IFNAME", "").strip():
        return
    spec = os.environ.get("HCCL_SOCKET_IFNAME", "").strip()
    if spec:
        os.environ["NCCL_SOCKET_IFNAME"] = spec
        return
    ip = os.environ.get("HCCL_IF_IP", "").strip() or address
    name = interface_of(ip) if ip else None
    if name is not None:
        os.environ["NCCL_SOCKET_IFNAME"] = "=" + name


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
            listener = socket.socket(_family(address), socket.SOCK_STREAM)
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


# ---------------------------------------------------------------------------- rank table
MAX_RANKS = 128 * 1024              # HCCL's largest communicator (AICPU_MAX_RANK_NUM in HCCL's source)
MAX_RANK_TABLE_BYTES = 64 << 20     # ~500 bytes a rank at MAX_RANKS, with room to spare
MAX_SHOWN = 200                     # characters of a user's value quoted in a message


def shown(value: Any) -> str:
    """repr(value), cut to MAX_SHOWN characters: messages stay short whatever the input."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + f"... ({len(text)} characters)"


@dataclass(frozen=True)
class RankTable:
    n_ranks: int
    hosts: dict[int, str]          # rank -> its server's host_ip / server_id
    device_ips: dict[int, str]     # rank -> its device_ip ("" when none)
    digest: str                    # names the communicator in the store (every rank reads the same file)
    secret: bytes = b""            # sealed.rank_table_secret of the file's bytes

    @property
    def root_host(self) -> str:    # the store server runs on rank 0's host
        return self.hosts[0]


def _read_regular_file(path: Any, fn: str) -> bytes:
    """The bytes of the file at `path`, opened without blocking (a FIFO or a device would block an
    open or a read forever): anything but a regular file of at most MAX_RANK_TABLE_BYTES is refused."""
    import stat
    where = shown(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as e:
        fail(HcclResult.HCCL_E_OPEN_FILE_FAILURE,
             f"{fn}: clusterInfo {where} cannot be opened: {getattr(e, 'strerror', None) or e}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {where} is not a regular file (a FIFO, device, socket "
                                         "or directory): it must be a rank-table JSON file")
        if info.st_size > MAX_RANK_TABLE_BYTES:
            fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {where} has {info.st_size} bytes, more than a rank "
                                         f"table of {MAX_RANKS} ranks needs ({MAX_RANK_TABLE_BYTES})")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_RANK_TABLE_BYTES + 1)
    except OSError as e:
        fail(HcclResult.HCCL_E_OPEN_FILE_FAILURE, f"{fn}: clusterInfo {where} cannot be read: {e.strerror}")
    finally:
        os.close(fd)
    if len(raw) > MAX_RANK_TABLE_BYTES:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {where} has more than {MAX_RANK_TABLE_BYTES} bytes")
    return raw


def _rank_id(value: Any, fn: str) -> int:
    """A rank_id: a JSON integer or a string of decimal digits (CANN writes "0"), below MAX_RANKS."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or \
            (isinstance(value, str) and not (value.isascii() and value.isdigit())):
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo rank_id {shown(value)} must be a non-negative integer "
                                     "(a number or a string of digits)")
    rank_id = int(value) if isinstance(value, int) or len(value) <= 8 else MAX_RANKS   # no 5,000-digit int()
    if rank_id >= MAX_RANKS:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo rank_id {shown(value)} is not below {MAX_RANKS} "
                                     "(HCCL's largest communicator)")
    return rank_id


def read_rank_table(path: Any, rank: int, fn: str) -> RankTable:
    """CANN's rank-table JSON (version 1.0 / 1.2): server_list[].device[].rank_id / device_ip,
    server_list[].host_ip or server_id. At most MAX_RANKS ranks; every message stays short."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo must be the path of a rank-table file, got {shown(path)}")
    raw = _read_regular_file(path, fn)
    where = shown(str(path))
    hosts: dict[int, str] = {}
    device_ips: dict[int, str] = {}
    try:
        table = json.loads(raw)
        servers = table["server_list"]
        if not isinstance(servers, list):
            raise TypeError("server_list is not a list")
        for server in servers:
            host = server.get("host_ip") or server["server_id"]
            devices = server["device"]
            if not isinstance(host, str) or not isinstance(devices, list):
                raise TypeError("server_id / host_ip must be a string, device a list")
            for device in devices:
                rank_id = _rank_id(device["rank_id"], fn)
                if rank_id in hosts:
                    fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo names rank_id {rank_id} twice")
                if len(hosts) >= MAX_RANKS:
                    fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo has more than {MAX_RANKS} ranks (HCCL's "
                                                 "largest communicator)")
                device_ip = device.get("device_ip") or ""
                if not isinstance(device_ip, str):
                    raise TypeError("device_ip must be a string")
                hosts[rank_id] = host
                device_ips[rank_id] = device_ip
    except RecursionError:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {where} is not a rank table (its JSON nests too deeply)")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {where} is not a rank table "
                                     f"(server_list[].device[].rank_id): {type(e).__name__}: {shown(str(e))}")
    n = len(hosts)
    if n == 0:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo {where} names no rank")
    missing = next((r for r in range(n) if r not in hosts), None)
    if missing is not None:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: clusterInfo's {n} rank_ids must be 0..{n - 1}; {missing} is missing "
                                     f"(the largest is {max(hosts)})")
    if rank not in hosts:
        fail(HcclResult.HCCL_E_PARA, f"{fn}: rank {rank} is not a rank_id of clusterInfo (0..{n - 1})")
    return RankTable(n, hosts, device_ips, hashlib.sha256(raw).hexdigest()[:16], sealed.rank_table_secret(raw))


def base_port() -> int:
    """HCCL_IF_BASE_PORT: the port rank 0 of a rank-table communicator listens on."""
    raw = os.environ.get("HCCL_IF_BASE_PORT", "").strip()
    if not raw:
        return DEFAULT_BASE_PORT
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        fail(HcclResult.HCCL_E_PARA, f"environment HCCL_IF_BASE_PORT={raw!r} must be a port number")
    return int(raw)


# ---------------------------------------------------------------------------- agreeing on a call
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
