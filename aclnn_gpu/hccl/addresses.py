"""The addresses a rank listens and binds on, as HCCL's environment variables choose them
(HCCL_IF_IP, HCCL_SOCKET_IFNAME, HCCL_SOCKET_FAMILY's families), and the host's interfaces: the
store's address (`store_address`), the address a rank's engine binds toward its peers
(`engine_address`, never the meeting host's), NCCL's socket environment (`nccl_environment`).
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct

from ..base.errors import fail
from .types import HcclResult

LOOPBACK = "127.0.0.1"


def address_family(address: str) -> int:
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
        with socket.socket(address_family(address), socket.SOCK_DGRAM) as s:
            s.bind((address, 0))
        return True
    except (OSError, ValueError, OverflowError):
        return False


def route_from(peer: str) -> str | None:
    """The address of this host that traffic to `peer` leaves from (None: no route)."""
    address = resolve(peer)
    try:
        with socket.socket(address_family(address), socket.SOCK_DGRAM) as s:
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


