"""The rank-table file of HcclCommInitClusterInfo (HCCL's JSON: server_list / device / rank_id), read
as a hostile file may be written: a regular file of bounded size, bounded nesting, every rank_id
once; the port of its root's store (HCCL_IF_BASE_PORT); and the quoting of a user's value in a
message (`shown`, at most MAX_SHOWN characters).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from ..base.errors import fail
from . import sealed
from .types import HcclResult

DEFAULT_BASE_PORT = 60000


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


