"""HCCL's communicator entry points (`hccl.h`), C-style like the rest of the library (they return an
HcclResult, plus the out-parameter where C has one; nothing raises for a user error; the message
goes to `aclGetRecentErrMsg`), and the argument checks every entry point shares. The collectives
are in `collectives.py`.
"""
from __future__ import annotations

import dataclasses
import numbers
import threading
from typing import Any, Callable

import numpy as np

from ..base.errors import OpError, aclGetRecentErrMsg, c_api, fail
from ..runtime import aclrtSetDevice
from . import addresses, bootstrap, rank_table, rendezvous, sealed
from .comm import HcclComm, build, check_comm, device_of, engine_for, require_torch_distributed
from .types import (
    COMM_NAME_MAX_LENGTH,
    HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET,
    HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET,
    NUMPY_DTYPE,
    HcclCommConfig,
    HcclDataType,
    HcclReduceOp,
    HcclResult,
)

OK = HcclResult.HCCL_SUCCESS
PARA = HcclResult.HCCL_E_PARA
PTR = HcclResult.HCCL_E_PTR
RANK_TABLE_NAME = "hccl_world_group"   # HcclGetCommName of a rank-table communicator, as HCCL names it


def hccl_api(n_out: int = 0) -> Callable:
    return c_api(n_out, internal=HcclResult.HCCL_E_INTERNAL)


# ---------------------------------------------------------------------------- argument checks
def integer(value: Any, fn: str, what: str, low: int, high: int | None = None) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) < low or \
            (high is not None and int(value) > high):
        fail(PARA, f"{fn}: {what} {rank_table.shown(value)} must be an integer in "
                   f"[{low}, {'inf' if high is None else high}]")
    return int(value)


def is_zero(value: Any) -> bool:
    """A count of 0: HCCL returns success for it before any other check (op_base.cc)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) == 0


def data_type(value: Any, fn: str, what: str = "dataType") -> np.dtype:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or \
            int(value) not in HcclDataType._value2member_map_:
        fail(PARA, f"{fn}: {what} {rank_table.shown(value)} is not an HcclDataType (0..11)")
    return NUMPY_DTYPE[HcclDataType(int(value))]


def reduce_op(value: Any, fn: str) -> HcclReduceOp:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or \
            int(value) not in HcclReduceOp._value2member_map_:
        fail(PARA, f"{fn}: op {rank_table.shown(value)} is not an HcclReduceOp (0..3)")
    return HcclReduceOp(int(value))


def counts(value: Any, n: int, fn: str, what: str) -> list[int]:
    """A host array of n counts or displacements (C's const void * of uint64_t)."""
    if value is None:
        fail(PTR, f"{fn}: {what} is null")
    try:
        items = list(np.asarray(value).reshape(-1).tolist()) if isinstance(value, np.ndarray) else list(value)
    except TypeError:
        fail(PARA, f"{fn}: {what} must be a sequence of {n} integers (one per rank), got {type(value).__name__}")
    if len(items) != n:
        fail(PARA, f"{fn}: {what} has {len(items)} entries, the communicator has {n} ranks")
    return [integer(v, fn, f"{what}[{i}]", 0) for i, v in enumerate(items)]


def stream_of(comm: HcclComm, stream: Any, fn: str) -> Any:
    device, impl = device_of(stream, fn)
    if device is not comm.device:
        fail(PARA, f"{fn}: stream belongs to device {device.id}, comm to device {comm.device.id} (make the "
                   "communicator and the stream with the same device current)")
    return impl


def buffer(comm: HcclComm, ptr: Any, nbytes: int, fn: str, what: str) -> int:
    if ptr is None:
        fail(PTR, f"{fn}: {what} is null")
    comm.device.registry.check(ptr, nbytes, f"{fn}: {what}", status=PARA, on_device=True)
    return int(ptr)


def optional_buffer(comm: HcclComm, ptr: Any, nbytes: int, fn: str, what: str) -> int:
    """A buffer that may be null when nothing is read from or written to it (nbytes 0)."""
    if nbytes == 0:
        return 0
    return buffer(comm, ptr, nbytes, fn, what)


def peer(comm: HcclComm, value: Any, fn: str, what: str) -> int:
    other = integer(value, fn, what, 0, comm.size - 1)
    if other == comm.rank:
        fail(PARA, f"{fn}: {what} {other} is this rank itself")
    return other


# ---------------------------------------------------------------------------- communicators
def _config(config: Any, fn: str) -> HcclCommConfig:
    """An HcclCommConfig's fields checked as HCCL's CommConfig::Load does; returns it."""
    if config is None:
        fail(PTR, f"{fn}: config is null")
    if not isinstance(config, HcclCommConfig):
        fail(PARA, f"{fn}: config must be an HcclCommConfig (HcclCommConfigInit), got {type(config).__name__}")
    size = config.hcclBufferSize
    if size != HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET:
        integer(size, fn, "config.hcclBufferSize (MB)", 1, 0xFFFFFFFF)
    if config.hcclDeterministic not in (0, 1, HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET):
        fail(PARA, f"{fn}: config.hcclDeterministic {config.hcclDeterministic!r} must be 0, 1 or "
                   "HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET")
    if not isinstance(config.hcclCommName, str) or len(config.hcclCommName.encode()) >= COMM_NAME_MAX_LENGTH:
        fail(PARA, f"{fn}: config.hcclCommName must be a str shorter than {COMM_NAME_MAX_LENGTH} bytes")
    if config.hcclOpExpansionMode not in (0, 1, 2, 3):
        fail(PARA, f"{fn}: config.hcclOpExpansionMode {config.hcclOpExpansionMode!r} must be 0..3")
    return config


@hccl_api(n_out=1)
def HcclGetRootInfo() -> tuple[int, bytes]:
    """The root info (4108 bytes) rank 0 hands to every rank; its store listens on HCCL_IF_IP (or
    HCCL_SOCKET_IFNAME's interface), else on the loopback address only."""
    fn = "HcclGetRootInfo"
    require_torch_distributed(fn)
    device, _ = device_of(None, fn)
    engine = engine_for(device)
    address = addresses.store_address(fn)
    try:
        port = bootstrap.serve(address, 0, bootstrap.connect_timeout())
    except OpError:
        raise
    except Exception as e:  # noqa: BLE001 - the listening socket could not be opened
        fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: cannot listen on {address}: {rendezvous._first_line(e)}")
    nccl_id = None
    if engine == "nccl":
        from .nccl import new_unique_id
        addresses.nccl_environment()
        nccl_id = new_unique_id()
    key = bootstrap.new_key()
    return OK, bootstrap.Meeting(address, port, key, engine, nccl_id, bootstrap.process_token(), key,
                                 sealed.new_secret()).encode()


def _init_root_info(fn: str, nRanks: Any, rootInfo: Any, rank: Any, name: str = "") -> HcclComm:
    n = integer(nRanks, fn, "nRanks", 1, rank_table.MAX_RANKS)
    r = integer(rank, fn, "rank", 0, n - 1)
    meeting = bootstrap.Meeting.decode(rootInfo, fn)
    require_torch_distributed(fn)
    device, _ = device_of(None, fn)
    if meeting.engine != engine_for(device):
        fail(PARA, f"{fn}: rootInfo was made for {meeting.engine} but this process's {device.kind} device uses "
                   f"{engine_for(device)} (every rank must use the same device kind)")
    if name:
        meeting = dataclasses.replace(meeting, name=name)
    return build(meeting, n, r, device, fn)


@hccl_api(n_out=1)
def HcclCommInitRootInfo(nRanks: int, rootInfo: bytes, rank: int) -> tuple[int, HcclComm]:
    return OK, _init_root_info("HcclCommInitRootInfo", nRanks, rootInfo, rank)


@hccl_api(n_out=1)
def HcclCommInitRootInfoConfig(nRanks: int, rootInfo: bytes, rank: int, config: HcclCommConfig
                               ) -> tuple[int, HcclComm]:
    """HcclCommInitRootInfo with a config (HcclCommConfigInit): hcclCommName names the communicator
    (HcclGetCommName); the buffer size, determinism and expansion mode are checked and have no
    effect here (the engines size their own buffers; gloo and NCCL reduce in a fixed order per call)."""
    fn = "HcclCommInitRootInfoConfig"
    c = _config(config, fn)
    return OK, _init_root_info(fn, nRanks, rootInfo, rank, c.hcclCommName)


def _init_cluster_info(fn: str, clusterInfo: Any, rank: Any, name: str = "") -> HcclComm:
    r = integer(rank, fn, "rank", 0, rank_table.MAX_RANKS - 1)
    table = rank_table.read_rank_table(clusterInfo, r, fn)
    require_torch_distributed(fn)
    device, _ = device_of(None, fn)
    host, port = addresses.resolve(table.root_host), rank_table.base_port()
    if r == 0:   # rank 0 serves the store on its own server's address, at HCCL_IF_BASE_PORT
        if not addresses.is_local(host):
            fail(PARA, f"{fn}: rank 0's server address {table.root_host} (host_ip / server_id) is not an address "
                       "of this host: rank 0 must run on the server the rank table names")
        try:
            bootstrap.serve(host, port, bootstrap.connect_timeout())
        except Exception as e:  # noqa: BLE001 - the port is taken by another process
            fail(HcclResult.HCCL_E_TCP_CONNECT, f"{fn}: cannot listen on {host}:{port} (HCCL_IF_BASE_PORT): "
                                                f"{rendezvous._first_line(e)}")
    meeting = bootstrap.Meeting(host, port, "rt-" + table.digest, engine_for(device), None, "", name or RANK_TABLE_NAME,
                                table.secret)
    comm = build(meeting, table.n_ranks, r, device, fn, (table.device_ips[r], table.hosts[r]))
    return comm


@hccl_api(n_out=1)
def HcclCommInitClusterInfo(clusterInfo: str, rank: int) -> tuple[int, HcclComm]:
    """A communicator from CANN's rank-table file: rank 0 serves the store on its server's address at
    HCCL_IF_BASE_PORT; each rank binds to its device_ip when that is an address of its host, else
    to its server's host_ip / server_id, else as HcclCommInitRootInfo does."""
    return OK, _init_cluster_info("HcclCommInitClusterInfo", clusterInfo, rank)


@hccl_api(n_out=1)
def HcclCommInitClusterInfoConfig(clusterInfo: str, rank: int, config: HcclCommConfig) -> tuple[int, HcclComm]:
    fn = "HcclCommInitClusterInfoConfig"
    c = _config(config, fn)
    return OK, _init_cluster_info(fn, clusterInfo, rank, c.hcclCommName)


@hccl_api(n_out=1)
def HcclCreateSubCommConfig(comm: HcclComm, rankNum: int, rankIds: list[int], subCommId: int, subCommRankId: int,
                            config: HcclCommConfig) -> tuple[int, HcclComm]:
    """A communicator of some ranks of `comm` (the global ranks `rankIds`, this one at index
    `subCommRankId`): only those ranks call it, with the same rankIds and subCommId."""
    fn = "HcclCreateSubCommConfig"
    c = check_comm(comm, fn)
    conf = _config(config, fn)
    n = integer(rankNum, fn, "rankNum", 1, c.size)
    ids = counts(rankIds, n, fn, "rankIds")
    if len(set(ids)) != n or max(ids) >= c.size:
        fail(PARA, f"{fn}: rankIds {ids} must be {n} different ranks of comm (0..{c.size - 1})")
    sub_id = integer(subCommId, fn, "subCommId", 0, 2**64 - 1)
    me = integer(subCommRankId, fn, "subCommRankId", 0, n - 1)
    if ids[me] != c.rank:
        fail(PARA, f"{fn}: rankIds[subCommRankId={me}] is {ids[me]}, but this is rank {c.rank} of comm")
    parent = c.meeting
    key = f"{parent.key}-{c.generation}-sub{sub_id}-" + "_".join(map(str, ids))
    meeting = bootstrap.Meeting(parent.host, parent.port, key, parent.engine, None, parent.owner,
                                conf.hcclCommName or f"{c.name}_sub{sub_id}", parent.secret)
    return OK, build(meeting, n, me, c.device, fn, (c.address,))


@hccl_api(n_out=1)
def HcclCommInitAll(ndev: int, devices: list[int]) -> tuple[int, list[HcclComm]]:
    """One communicator per device of this process (CANN's single-process multi-device init): rank
    i on devices[i], each made in a thread of its own with that device current. Each rank's
    collectives are then called from a thread that has its device current, as CANN's sample does
    (a collective waits for every rank to call it)."""
    fn = "HcclCommInitAll"
    n = integer(ndev, fn, "ndev", 1, rank_table.MAX_RANKS)
    ids = counts(devices, n, fn, "devices")
    if len(set(ids)) != n:
        fail(PARA, f"{fn}: devices {ids} name a device twice")
    ret, root = HcclGetRootInfo()
    if ret != OK:
        raise OpError(ret, f"{fn}: {aclGetRecentErrMsg()}")
    comms: list[Any] = [None] * n
    errors: list[OpError] = []

    def rank(r: int) -> None:
        try:
            if aclrtSetDevice(ids[r]) != 0:
                raise OpError(PARA, f"{fn}: devices[{r}]: {aclGetRecentErrMsg()}")
            comms[r] = _init_root_info(fn, n, root, r)
        except OpError as e:
            errors.append(e)
        except Exception as e:  # noqa: BLE001 - reported as HCCL's internal error below
            errors.append(OpError(HcclResult.HCCL_E_INTERNAL, f"{fn}: rank {r}: {type(e).__name__}: {e}"))

    threads = [threading.Thread(target=rank, args=(r,), name=f"HcclCommInitAll-{r}") for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for made in comms:
            if made is not None:
                made.destroy()
        raise errors[0]
    return OK, comms


@hccl_api()
def HcclCommDestroy(comm: HcclComm) -> int:
    """Null is a no-op, as in HCCL. In a fork() child, a communicator of the parent is only dropped
    (the parent's stays intact)."""
    if comm is None:
        return OK
    if isinstance(comm, HcclComm) and comm.forked and not comm.destroyed:
        comm.destroyed = True
        return OK
    check_comm(comm, "HcclCommDestroy").destroy()
    return OK


@hccl_api(n_out=1)
def HcclGetRankSize(comm: HcclComm) -> tuple[int, int]:
    return OK, check_comm(comm, "HcclGetRankSize").size


@hccl_api(n_out=1)
def HcclGetRankId(comm: HcclComm) -> tuple[int, int]:
    return OK, check_comm(comm, "HcclGetRankId").rank


@hccl_api(n_out=1)
def HcclGetCommName(comm: HcclComm) -> tuple[int, str]:
    """The communicator's name: config.hcclCommName when one was given, else the root info's
    identifier (the same on every rank), "hccl_world_group" for a rank table."""
    return OK, check_comm(comm, "HcclGetCommName").name


@hccl_api(n_out=1)
def HcclGetCommAsyncError(comm: HcclComm) -> tuple[int, int]:
    """The communicator's asynchronous error: the first fault its liveness saw (a dead rank:
    HCCL_E_REMOTE; the store lost: HCCL_E_TCP_TRANSFER), else the engine's (NCCL's
    ncclCommGetAsyncError), else HCCL_SUCCESS. The reason is in aclGetRecentErrMsg."""
    fn = "HcclGetCommAsyncError"
    c = check_comm(comm, fn)
    c.health.observe()
    fault = c.health.fault
    if fault is not None:
        from ..base.errors import set_recent_error
        set_recent_error(f"{fn}: {fault[1]}")
        return OK, HcclResult(fault[0])
    return OK, HcclResult(c.engine.async_error())


_ERROR_STRINGS = {
    HcclResult.HCCL_SUCCESS: "no error", HcclResult.HCCL_E_PARA: "parameter error",
    HcclResult.HCCL_E_PTR: "empty pointer", HcclResult.HCCL_E_MEMORY: "memory error",
    HcclResult.HCCL_E_INTERNAL: "internal error", HcclResult.HCCL_E_NOT_SUPPORT: "not support feature",
    HcclResult.HCCL_E_NOT_FOUND: "not found specific resource", HcclResult.HCCL_E_UNAVAIL: "resource unavailable",
    HcclResult.HCCL_E_SYSCALL: "call system interface error", HcclResult.HCCL_E_TIMEOUT: "timeout",
    HcclResult.HCCL_E_OPEN_FILE_FAILURE: "open file fail", HcclResult.HCCL_E_TCP_CONNECT: "tcp connect fail",
    HcclResult.HCCL_E_ROCE_CONNECT: "roce connect fail", HcclResult.HCCL_E_TCP_TRANSFER: "tcp transfer fail",
    HcclResult.HCCL_E_ROCE_TRANSFER: "roce transfer fail", HcclResult.HCCL_E_RUNTIME: "call runtime api fail",
    HcclResult.HCCL_E_DRV: "call driver api fail", HcclResult.HCCL_E_PROFILING: "call profiling api fail",
    HcclResult.HCCL_E_CCE: "call cce api fail", HcclResult.HCCL_E_NETWORK: "call network api fail",
    HcclResult.HCCL_E_AGAIN: "try again", HcclResult.HCCL_E_REMOTE: "error cqe",
    HcclResult.HCCL_E_SUSPENDING: "error communicator suspending",
}


def HcclGetErrorString(code: int) -> str:
    """HCCL's words for a code (C returns a const char *); "unknow error" (sic, HCCL's) for any other value."""
    if isinstance(code, numbers.Integral) and not isinstance(code, bool) and int(code) in _ERROR_STRINGS:
        return _ERROR_STRINGS[HcclResult(int(code))]
    return "unknow error"


def HcclCommConfigInit(config: HcclCommConfig) -> None:
    """Reset `config` to HCCL's defaults (C's inline HcclCommConfigInit; a None config is ignored)."""
    if isinstance(config, HcclCommConfig):
        config.__init__()  # type: ignore[misc]


def HcclGetCommConfigCapability() -> int:
    """One past the last HcclCommConfigCapability this library reads from an HcclCommConfig (torch_npu
    tests `capability < HcclGetCommConfigCapability()`): buffer size, deterministic, comm name and op
    expansion mode (0..3) are read; initialisation from the environment (4) is not offered."""
    return 4
