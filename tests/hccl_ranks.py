"""Helpers of tests/test_hccl.py: ranks as threads of the test process (cheap: one PyTorch import)
or as spawned processes, device buffers in and out, and the rank bodies the spawned processes run
(they must be importable by name, hence not in the test module)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import aclnn_gpu as acl

RANK_TIMEOUT_S = 60


def ok(ret: Any) -> Any:
    status = ret[0] if isinstance(ret, tuple) else ret
    assert status == 0, f"{int(status)}: {acl.aclGetRecentErrMsg()}"
    return ret[1] if isinstance(ret, tuple) and len(ret) == 2 else ret


def upload(array: np.ndarray) -> int:
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    ptr = ok(acl.aclrtMalloc(max(raw.nbytes, 1), 0))
    ok(acl.aclrtMemcpy(ptr, raw.nbytes, raw, raw.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE))
    return ptr


def poisoned(nbytes: int) -> int:
    ptr = ok(acl.aclrtMalloc(max(nbytes, 1), 0))
    ok(acl.aclrtMemset(ptr, nbytes, 0xFF, nbytes))
    return ptr


def download(ptr: int, count: int, dtype: Any) -> np.ndarray:
    out = np.empty(count, dtype)
    raw = out.view(np.uint8)
    ok(acl.aclrtMemcpy(raw, raw.nbytes, ptr, raw.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST))
    return out


def in_threads(n: int, body: Callable[[int, Any, Any], Any], root_info: bytes | None = None) -> list[Any]:
    """Run body(rank, comm, stream) for ranks 0..n-1, each in a thread of this process with its own
    communicator and stream; their return values in rank order (a failing rank fails the test)."""
    if root_info is None:
        root_info = ok(acl.HcclGetRootInfo())
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            comm = ok(acl.HcclCommInitRootInfo(n, root_info, r))
            stream = ok(acl.aclrtCreateStream())
            try:
                results[r] = body(r, comm, stream)
            finally:
                acl.aclrtDestroyStream(stream)
                acl.HcclCommDestroy(comm)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RANK_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), f"a rank did not finish within {RANK_TIMEOUT_S} s"
    if errors:
        raise errors[0]
    return results


def in_processes(n: int, target: Callable, *args: Any) -> list[Any]:
    """Run target(rank, n, root_info, *args, results) in n spawned processes; their results."""
    root_info = ok(acl.HcclGetRootInfo())
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, n, root_info, *args, results), daemon=True) for r in range(n)]
    for p in procs:
        p.start()
    try:
        got = {}
        for _ in range(n):
            rank, value = results.get(timeout=RANK_TIMEOUT_S)
            got[rank] = value
        return [got.get(r) for r in range(n)]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# ---------------------------------------------------------------------------- spawned rank bodies
def dead_rank_body(rank: int, n: int, root_info: bytes, results: Any) -> None:
    """Rank 1 dies right after init; the others time out in their next collective (HCCL_EXEC_TIMEOUT)."""
    ret, comm = acl.HcclCommInitRootInfo(n, root_info, rank)
    if ret != 0:
        results.put((rank, ("init", int(ret), acl.aclGetRecentErrMsg())))
        return
    if rank == 1:
        results.put((rank, ("died", 0, "")))
        time.sleep(0.5)
        os._exit(0)
    buf = upload(np.ones(4, np.float32))
    time.sleep(1.0)   # rank 1 is gone by now
    start = time.perf_counter()
    ret = acl.HcclAllReduce(buf, buf, 4, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM, comm, None)
    results.put((rank, ("allreduce", int(ret), acl.aclGetRecentErrMsg(), time.perf_counter() - start)))


# ---------------------------------------------------------------------------- hosts: network namespaces
ROOT = Path(__file__).resolve().parents[1]
RANK_PROGRAM = Path(__file__).resolve()
SUBNET = "10.77.0"


def namespaces_usable() -> str | None:
    """None when this process may make network namespaces (root, iproute2), else why not."""
    if os.geteuid() != 0:
        return "needs root for network namespaces (ip netns)"
    if shutil.which("ip") is None:
        return "needs iproute2 (the ip command)"
    probe = f"aclnnprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Hosts:
    """Two "hosts": network namespaces joined by a veth pair, host h at 10.77.0.<h+1>/24, each with
    its loopback up. Nothing else is reachable from them (no route out), as two machines on a
    private link. Removed on exit (the veth pair goes with them)."""

    def __init__(self, count: int = 2):
        assert count == 2
        tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.names = [f"aclnn{tag}h{h}" for h in range(count)]
        self.addresses = [f"{SUBNET}.{h + 1}" for h in range(count)]
        self.links = [f"va{tag}", f"vb{tag}"]

    def __enter__(self) -> "Hosts":
        def ip(*args: str) -> None:
            subprocess.run(["ip", *args], check=True, capture_output=True, text=True)
        try:
            for name in self.names:
                ip("netns", "add", name)
            ip("link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1])
            for name, link, address in zip(self.names, self.links, self.addresses):
                ip("link", "set", link, "netns", name)
                ip("-n", name, "addr", "add", f"{address}/24", "dev", link)
                ip("-n", name, "link", "set", link, "up")
                ip("-n", name, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.links[0]], capture_output=True)

    # ------------------------------------------------------------ a bad network (tc tbf, link, routes)
    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def shape(self, rate: str = "1mbit") -> None:
        """Both ends of the link limited to `rate` by a token bucket (tc tbf: bandwidth and queueing
        delay; this kernel has no netem)."""
        for name, link in zip(self.names, self.links):
            self._ip("netns", "exec", name, "tc", "qdisc", "replace", "dev", link, "root", "tbf", "rate", rate,
                     "burst", "32kbit", "latency", "400ms")

    def link(self, up: bool) -> None:
        """The link up or down (host 0's end: the pair loses its carrier on both sides)."""
        self._ip("-n", self.names[0], "link", "set", self.links[0], "up" if up else "down")

    def blackhole(self, on: bool) -> None:
        """A blackhole route on each host to the other's address: packets dropped silently."""
        for h, name in enumerate(self.names):
            self._ip("-n", name, "route", "add" if on else "del", "blackhole", f"{self.addresses[1 - h]}/32")

    def start(self, host: int, config: dict, env: dict[str, str]) -> subprocess.Popen:
        """A rank process on `host`: `python hccl_ranks.py <config.json>` inside its namespace."""
        path = Path(config["out"]).with_suffix(".json.in")
        path.write_text(json.dumps(config))
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                        **env)
        return subprocess.Popen(["ip", "netns", "exec", self.names[host], sys.executable, str(RANK_PROGRAM),
                                 str(path)], env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def netem_usable() -> str | None:
    """None when tc's netem qdisc (delay, loss) can be made here, else why not."""
    if namespaces_usable() is not None:
        return namespaces_usable()
    probe = f"aclnnnetem{os.getpid()}"
    subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    try:
        made = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                               "delay", "1ms"], capture_output=True, text=True)
        return None if made.returncode == 0 else f"no netem qdisc on this kernel: tc says {made.stderr.strip()!r}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def finish(procs: list[subprocess.Popen], timeout: float = RANK_TIMEOUT_S) -> list[tuple[int, str, str]]:
    """(return code, stdout, stderr) of each process, killing those still running after `timeout`
    seconds in all (their code is then -9)."""
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        out.append((p.returncode, stdout, stderr))
    return out


def wait_for_file(path: Path, timeout: float = RANK_TIMEOUT_S) -> bytes:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.05)
    return path.read_bytes()


def write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


# ---------------------------------------------------------------------------- what a rank process runs
def rank_data(rank: int, count: int, salt: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return (np.arange(count) % 7 + 10 * rank + 100 * salt).astype(dtype)


def every_collective(rank: int, n: int, comm: Any, stream: Any) -> list[str]:
    """Each HCCL collective and send / receive once (fp32, exact small integers) against NumPy; the
    wrong results as messages (empty when all are right)."""
    f32, wrong = acl.HCCL_DATA_TYPE_FP32, []
    count = 5

    def check(name: str, got: np.ndarray, expected: np.ndarray) -> None:
        if not np.array_equal(got, expected):
            wrong.append(f"rank {rank} {name}: got {got.tolist()}, expected {expected.tolist()}")

    everyone = [rank_data(r, count) for r in range(n)]
    mine = everyone[rank]
    bufs: dict[str, int] = {}

    def out(name: str, elements: int) -> int:
        bufs[name] = poisoned(elements * 4)
        return bufs[name]

    src = upload(mine)
    blocks = [rank_data(rank, count, salt=b) for b in range(n)]   # rank's block b
    multi = upload(np.concatenate(blocks))
    ok(acl.HcclAllReduce(src, out("allreduce", count), count, f32, acl.HCCL_REDUCE_SUM, comm, stream))
    ok(acl.HcclReduce(src, out("reduce", count), count, f32, acl.HCCL_REDUCE_MAX, n - 1, comm, stream))
    ok(acl.HcclAllGather(src, out("allgather", count * n), count, f32, comm, stream))
    cast = upload(mine)
    ok(acl.HcclBroadcast(cast, count, f32, 1, comm, stream))
    ok(acl.HcclReduceScatter(multi, out("reducescatter", count), count, f32, acl.HCCL_REDUCE_SUM, comm, stream))
    ok(acl.HcclScatter(multi, out("scatter", count), count, f32, 0, comm, stream))
    ok(acl.HcclAlltoAll(multi, count, f32, out("alltoall", count * n), count, f32, comm, stream))
    # v-variants: rank r sends r + 1 elements to everyone / block sizes 1..n
    sizes = [r + 1 for r in range(n)]
    displs = [int(sum(sizes[:r])) + r for r in range(n)]          # a gap of one element between blocks
    ok(acl.HcclAllGatherV(upload(mine[:rank + 1]), rank + 1, out("allgatherv", displs[-1] + sizes[-1]), sizes, displs,
                          f32, comm, stream))
    packed = np.concatenate([blocks[b][:sizes[b]] for b in range(n)])
    ok(acl.HcclReduceScatterV(upload(packed), sizes, [int(sum(sizes[:b])) for b in range(n)],
                              out("reducescatterv", sizes[rank]), sizes[rank], f32, acl.HCCL_REDUCE_SUM, comm, stream))
    # all-to-all-v: rank i sends (i + j) % 3 + 1 elements of its block j to rank j
    send_counts = [(rank + j) % 3 + 1 for j in range(n)]
    recv_counts = [(i + rank) % 3 + 1 for i in range(n)]
    sdispls = [j * count for j in range(n)]
    rdispls = [int(sum(recv_counts[:i])) for i in range(n)]
    ok(acl.HcclAlltoAllV(multi, send_counts, sdispls, f32, out("alltoallv", sum(recv_counts)), recv_counts, rdispls,
                         f32, comm, stream))
    # a ring of sends / receives (even ranks send first), then the reverse ring as one batch
    to, source = (rank + 1) % n, (rank - 1) % n
    steps = [lambda: acl.HcclSend(src, count, f32, to, comm, stream),
             lambda: acl.HcclRecv(out("ring", count), count, f32, source, comm, stream)]
    for step in steps if rank % 2 == 0 else steps[::-1]:
        ok(step())
    batch_out = out("batch", count)
    items = [acl.HcclSendRecvItem(acl.HCCL_SEND, src, count, f32, source),
             acl.HcclSendRecvItem(acl.HCCL_RECV, batch_out, count, f32, to)]
    ok(acl.HcclBatchSendRecv(items, len(items), comm, stream))
    ok(acl.HcclBarrier(comm, stream))
    ok(acl.aclrtSynchronizeStream(stream))

    def got(name: str, elements: int) -> np.ndarray:
        return download(bufs[name], elements, np.float32)

    total = np.sum(everyone, axis=0, dtype=np.float32)
    check("allreduce", got("allreduce", count), total)
    if rank == n - 1:
        check("reduce", got("reduce", count), np.max(everyone, axis=0))
    check("allgather", got("allgather", count * n), np.concatenate(everyone))
    check("broadcast", download(cast, count, np.float32), everyone[1])
    check("reducescatter", got("reducescatter", count),
          np.sum([rank_data(r, count, salt=rank) for r in range(n)], axis=0, dtype=np.float32))
    check("scatter", got("scatter", count), rank_data(0, count, salt=rank))
    check("alltoall", got("alltoall", count * n), np.concatenate([rank_data(i, count, salt=rank) for i in range(n)]))
    gathered = got("allgatherv", displs[-1] + sizes[-1])
    check("allgatherv", np.concatenate([gathered[displs[r]:displs[r] + sizes[r]] for r in range(n)]),
          np.concatenate([everyone[r][:r + 1] for r in range(n)]))
    check("reducescatterv", got("reducescatterv", sizes[rank]),
          np.sum([rank_data(r, count, salt=rank)[:sizes[rank]] for r in range(n)], axis=0, dtype=np.float32))
    check("alltoallv", got("alltoallv", sum(recv_counts)),
          np.concatenate([rank_data(i, count, salt=rank)[:recv_counts[i]] for i in range(n)]))
    check("ring", got("ring", count), everyone[source])
    check("batch", got("batch", count), everyone[to])
    return wrong


def _host_rank(config: dict) -> dict:
    """One rank on a namespaced host: join (root info from a file, or the rank table), run the
    scenario, report."""
    rank, n = config["rank"], config["n"]
    ok(acl.aclrtSetDevice(0))
    report: dict[str, Any] = {"rank": rank}
    start = time.monotonic()
    if config["mode"] == "root":
        path = Path(config["root_info"])
        if rank == 0:
            write_atomically(path, ok(acl.HcclGetRootInfo()))
        ret, comm = acl.HcclCommInitRootInfo(n, wait_for_file(path), rank)
    else:
        ret, comm = acl.HcclCommInitClusterInfo(config["table"], rank)
    report["init"] = [int(ret), acl.aclGetRecentErrMsg() if ret else "", time.monotonic() - start]
    if ret != 0:
        return report
    stream = ok(acl.aclrtCreateStream())
    scenario = config["scenario"]
    if scenario == "all":
        report["wrong"] = every_collective(rank, n, comm, stream)
        report["name"] = ok(acl.HcclGetCommName(comm))
    elif scenario == "die":
        report.update(_die(rank, n, comm, stream, config))
    if config.get("destroy", True):
        ok(acl.aclrtDestroyStream(stream))
        report["destroy"] = int(acl.HcclCommDestroy(comm))
    return report


def _die(rank: int, n: int, comm: Any, stream: Any, config: dict) -> dict:
    """Rank `victim` exits (os._exit, as a crash) before or inside the second of two all-reduces;
    every other rank times how long its failing call (or synchronize) takes, and reads
    HcclGetCommAsyncError."""
    victim, when = config["victim"], config["when"]
    buf = upload(np.ones(1 << 16, np.float32))
    f32, total = acl.HCCL_DATA_TYPE_FP32, 1 << 16
    ok(acl.HcclAllReduce(buf, buf, total, f32, acl.HCCL_REDUCE_SUM, comm, stream))
    ok(acl.aclrtSynchronizeStream(stream))
    if rank == victim:
        if when == "during":   # its part is queued (the ranks agreed): it dies as the data starts to move
            acl.HcclAllReduce(buf, buf, total, f32, acl.HCCL_REDUCE_SUM, comm, stream)
        os._exit(3)
    start = time.monotonic()
    ret = acl.HcclAllReduce(buf, buf, total, f32, acl.HCCL_REDUCE_SUM, comm, stream)
    message = acl.aclGetRecentErrMsg()
    if ret == 0:
        ret = acl.aclrtSynchronizeStream(stream)
        message = acl.aclGetRecentErrMsg()
    elapsed = time.monotonic() - start
    code, error = acl.HcclGetCommAsyncError(comm)
    return {"call": [int(ret), message, elapsed], "async": [int(code), int(error), acl.aclGetRecentErrMsg()]}


def _join(rank: int, n: int, path: Path) -> tuple[int, Any, str]:
    """Join by the root info at `path` (rank 0 writes it): (code, comm, message)."""
    if rank == 0:
        write_atomically(path, ok(acl.HcclGetRootInfo()))
    ret, comm = acl.HcclCommInitRootInfo(n, wait_for_file(path), rank)
    return int(ret), comm, acl.aclGetRecentErrMsg() if ret else ""


def _cut(config: dict) -> dict:
    """All-reduces over a link the test cuts (down, or a blackhole route) while they run, once per
    fault in config["faults"]: each rank reports when its failing call returned (wall clock: the
    test knows when it cut), the error, how long HcclCommDestroy took; after the test restores the
    link, a new communicator (a new root info) must work. The first communicator runs every
    collective first (`every_collective`). Files in config["dir"] pace the test."""
    rank, n = config["rank"], config["n"]
    folder = Path(config["dir"])
    ok(acl.aclrtSetDevice(0))
    stream = ok(acl.aclrtCreateStream())
    count = config["count"]
    expected = sum(rank_data(r, count) for r in range(n))
    report: dict[str, Any] = {"rank": rank, "faults": []}
    for i, fault in enumerate(config["faults"] + ["after"]):
        code, comm, message = _join(rank, n, folder / f"root_info{i}")
        if code != 0:
            report["faults"].append({"fault": fault, "init": [code, message]})
            break
        if i == 0:   # every collective over the shaped link first
            report["every"] = every_collective(rank, n, comm, stream)
        buf = upload(rank_data(rank, count))
        ok(acl.HcclAllReduce(buf, buf, count, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM, comm, stream))
        ok(acl.aclrtSynchronizeStream(stream))
        entry: dict[str, Any] = {"fault": fault, "first": np.array_equal(download(buf, count, np.float32), expected)}
        if fault == "after":
            report["faults"].append(entry)
            ok(acl.HcclCommDestroy(comm))
            break
        write_atomically(folder / f"ready{i}_{rank}", b"1")
        wrong, calls = 0, 0
        while True:   # all-reduces until the cut makes one fail
            ok(acl.aclrtMemcpy(buf, count * 4, rank_data(rank, count), count * 4, acl.ACL_MEMCPY_HOST_TO_DEVICE))
            ret = acl.HcclAllReduce(buf, buf, count, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM, comm, stream)
            message = acl.aclGetRecentErrMsg() if ret else ""
            if ret == 0:
                ret = acl.aclrtSynchronizeStream(stream)
                message = acl.aclGetRecentErrMsg() if ret else ""
            if ret != 0:
                break
            calls += 1
            wrong += not np.array_equal(download(buf, count, np.float32), expected)
        entry.update(failed_at=time.time(), code=int(ret), message=message, calls=calls, wrong=wrong)
        entry["async"] = [int(v) for v in acl.HcclGetCommAsyncError(comm)]
        start = time.monotonic()
        entry["destroy"] = int(acl.HcclCommDestroy(comm))
        entry["destroy_s"] = time.monotonic() - start
        report["faults"].append(entry)
        write_atomically(folder / f"failed{i}_{rank}", json.dumps(entry).encode())
        wait_for_file(folder / f"restored{i}", 4 * RANK_TIMEOUT_S)
    acl.aclrtDestroyStream(stream)
    return report


STRANGER_WORDS = "the stranger was here"


def _attacked(config: dict) -> dict:
    """A rank all-reducing while a stranger attacks the store (until the stranger is done), then
    joining again by the same root info (whose join counters the stranger overwrote)."""
    rank, n = config["rank"], config["n"]
    folder = Path(config["dir"])
    ok(acl.aclrtSetDevice(0))
    stream = ok(acl.aclrtCreateStream())
    code, comm, message = _join(rank, n, folder / "root_info")
    report: dict[str, Any] = {"rank": rank, "init": [code, message], "outcomes": []}
    if code != 0:
        return report
    expected = sum(rank_data(r, 4) for r in range(n))
    write_atomically(folder / f"joined{rank}", b"1")
    for _ in range(400):
        buf = upload(rank_data(rank, 4))
        ret = acl.HcclAllReduce(buf, buf, 4, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM, comm, stream)
        message = acl.aclGetRecentErrMsg() if ret else ""
        if ret == 0:
            ret = acl.aclrtSynchronizeStream(stream)
            message = acl.aclGetRecentErrMsg() if ret else ""
        right = ret == 0 and np.array_equal(download(buf, 4, np.float32), expected)
        report["outcomes"].append([int(ret), message, bool(right)])
        if ret != 0 or (folder / "attack_over").exists():
            break
        time.sleep(0.05)
    acl.HcclCommDestroy(comm)
    wait_for_file(folder / "attack_over")
    ret, again = acl.HcclCommInitRootInfo(n, (folder / "root_info").read_bytes(), rank)
    report["again"] = [int(ret), acl.aclGetRecentErrMsg() if ret else ""]
    if ret == 0:
        acl.HcclCommDestroy(again)
    acl.aclrtDestroyStream(stream)
    return report


def _stranger(config: dict) -> dict:
    """A process on another host that knows where the store listens (a port scan finds it) and
    nothing else: it forges root infos from the keys the store lists and joins with each, and
    keeps writing a fault in its own words and a call header to every key it sees."""
    import dataclasses
    import datetime

    from torch.distributed import TCPStore

    from aclnn_gpu.hccl import bootstrap
    folder = Path(config["dir"])
    ok(acl.aclrtSetDevice(0))
    client = TCPStore(config["host"], config["port"], None, False, timeout=datetime.timedelta(seconds=30),
                      wait_for_workers=False)
    for r in range(config["n"]):
        wait_for_file(folder / f"joined{r}")
    keys = [k.decode() if isinstance(k, bytes) else str(k) for k in client.list_keys()]
    own = bootstrap.Meeting.decode(ok(acl.HcclGetRootInfo()), "stranger")
    joins: list[int] = []
    forged = [dataclasses.replace(own, host=config["host"], port=config["port"], key=k.split("/")[1],
                                  name=k.split("/")[1]).encode() for k in keys if k.startswith("hccl/")][:2]

    def join() -> None:
        for blob in forged:
            ret, comm = acl.HcclCommInitRootInfo(config["n"], blob, 1)
            joins.append(int(ret))
            if ret == 0:
                acl.HcclCommDestroy(comm)
    joiner = threading.Thread(target=join, daemon=True)
    joiner.start()
    payloads = [json.dumps([int(acl.HCCL_E_INTERNAL), STRANGER_WORDS]),
                json.dumps({"count": 999, "dataType": 4, "op": 0, "root": -1, "call": "HcclAllReduce",
                            "refused": None})]
    end, writes = time.monotonic() + config["attack_s"], 0
    while time.monotonic() < end:
        for k in [k.decode() if isinstance(k, bytes) else str(k) for k in client.list_keys()]:
            client.set(k, payloads[writes % 2])
            writes += 1
        time.sleep(0.02)
    write_atomically(folder / "attack_over", b"1")
    joiner.join(4 * RANK_TIMEOUT_S)
    return {"rank": -1, "keys": keys, "joins": joins, "writes": writes}


if __name__ == "__main__":
    settings = json.loads(Path(sys.argv[1]).read_text())
    scenario = settings["scenario"]
    result = _cut(settings) if scenario == "cut" else _attacked(settings) if scenario == "attacked" else \
        _stranger(settings) if scenario == "stranger" else _host_rank(settings)
    out = Path(settings["out"])
    write_atomically(out, json.dumps(result).encode())
    if settings["rank"] == 0 and scenario != "stranger":   # it hosts the store: it stays until the others are done
        for r in range(1, settings["n"]):
            if r != settings.get("victim"):
                wait_for_file(out.with_name(f"rank{r}.json"))

