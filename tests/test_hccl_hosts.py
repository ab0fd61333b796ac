"""HCCL across hosts: ranks on two network namespaces joined by a veth pair (two machines on a
private link; nothing binds to another host's address), by root info and by CANN's rank table,
2 and 4 ranks, every collective and send / receive against NumPy; dead peers found in bounded
time with HCCL's code and the rank named; no PyTorch stack traces on stderr.

Needs root (ip netns), as CI has; skipped elsewhere with the reason. Every rank is a process
started with `ip netns exec`; every wait is bounded (the processes are killed after
RANK_TIMEOUT_S)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

import aclnn_gpu as acl  # noqa: E402
from hccl_ranks import Hosts, finish, namespaces_usable, netem_usable, wait_for_file, write_atomically  # noqa: E402
from support import DEVICE_KINDS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WHY_NOT = namespaces_usable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))
HOST_KINDS = [k for k in DEVICE_KINDS if k in ("cpu", "emulated")]
FAST = {"HCCL_EXEC_TIMEOUT": "60", "HCCL_CONNECT_TIMEOUT": "60", "ACLNN_GPU_HCCL_HEARTBEAT_S": "3"}


@pytest.fixture(scope="module")
def hosts():
    with Hosts() as made:
        yield made


def rank_table(hosts: Hosts, n: int, device_ip_is_host: bool) -> dict:
    """CANN's rank table (version 1.0): ranks 0..n/2-1 on host 0, the rest on host 1."""
    per = n // 2
    servers = []
    for h, address in enumerate(hosts.addresses):
        devices = [{"device_id": str(d), "rank_id": str(h * per + d),
                    "device_ip": address if device_ip_is_host else f"192.168.{h}.{d + 1}"} for d in range(per)]
        servers.append({"server_id": address, "device": devices})
    return {"status": "completed", "version": "1.0", "server_count": str(len(servers)), "server_list": servers}


def run_ranks(hosts: Hosts, tmp: Path, kind: str, n: int, mode: str, scenario: str, env: dict | None = None,
              **extra) -> list[tuple[int, str, str, dict | None]]:
    """n ranks, the first half on host 0 (rank 0 there), the rest on host 1; per rank its (return code,
    stdout, stderr, report)."""
    env = dict(FAST, ACLNN_GPU_DEVICE=kind, **(env or {}))
    table = tmp / "rank_table.json"
    if mode == "table":
        table.write_text(json.dumps(rank_table(hosts, n, extra.pop("device_ip_is_host", True))))
    procs = []
    for rank in range(n):
        host = 0 if rank < n // 2 else 1
        rank_env = dict(env)
        if mode == "root":
            rank_env["HCCL_IF_IP"] = hosts.addresses[host]
        config = dict(rank=rank, n=n, mode=mode, scenario=scenario, root_info=str(tmp / "root_info"),
                      table=str(table), out=str(tmp / f"rank{rank}.json"), **extra)
        procs.append(hosts.start(host, config, rank_env))
    results = finish(procs)
    reports = []
    for rank, (code, out, err) in enumerate(results):
        path = tmp / f"rank{rank}.json"
        reports.append((code, out, err, json.loads(path.read_text()) if path.exists() else None))
    return reports


def no_stack_traces(reports) -> None:
    for rank, (_, _, err, _) in enumerate(reports):
        assert "frame #" not in err and "Exception raised from" not in err, f"rank {rank} stderr:\n{err[-3000:]}"


# every shape on the cpu device, two on the emulated one (the engine runs the same host code on both)
SHAPES = [(kind, n, mode) for kind in HOST_KINDS for n, mode in [(2, "root"), (4, "root"), (2, "table"), (4, "table")]
          if kind == "cpu" or (n, mode) in ((4, "root"), (2, "table"))]


@pytest.mark.parametrize("kind, n, mode", SHAPES)
def test_every_collective_across_two_hosts(hosts, tmp_path, kind, n, mode):
    """Ranks bind their own host's address (HCCL_IF_IP / the rank table's device_ip); every
    collective and send / receive is right on every rank."""
    reports = run_ranks(hosts, tmp_path, kind, n, mode, "all")
    for rank, (code, out, err, report) in enumerate(reports):
        assert code == 0 and report is not None, f"rank {rank} exited {code}:\n{err[-3000:]}"
        assert report["init"][0] == 0, report["init"]
        assert report["wrong"] == [], report["wrong"]
        assert report["destroy"] == 0
    names = {report["name"] for *_, report in reports}
    assert len(names) == 1, names
    if mode == "table":
        assert names == {"hccl_world_group"}
    no_stack_traces(reports)


# ---------------------------------------------------------------------------- dead peers
def fault_reports(hosts, tmp_path, kind, n, victim, when, env=None):
    reports = run_ranks(hosts, tmp_path, kind, n, "root", "die", env, victim=victim, when=when, destroy=True)
    for rank, (code, out, err, report) in enumerate(reports):
        if rank == victim:
            assert code == 3, f"the victim exited {code}:\n{err[-3000:]}"
        else:
            assert code == 0 and report is not None, f"rank {rank} exited {code}:\n{err[-3000:]}"
    no_stack_traces(reports)
    return [report for rank, (*_, report) in enumerate(reports) if rank != victim]


# the default heartbeat (10 s) on the cpu device, a short one on the emulated device (CI's time)
DEAD_BETWEEN = [(kind, "" if kind == "cpu" else "3") for kind in HOST_KINDS]


@pytest.mark.parametrize("kind, heartbeat", DEAD_BETWEEN)
def test_a_rank_dead_between_collectives_fails_the_others_by_default(hosts, tmp_path, monkeypatch, kind, heartbeat):
    """Rank 2 (host 1, with rank 1) dies after an all-reduce; with HCCL's default HCCL_EXEC_TIMEOUT
    (1836 s) and the default heartbeat, every other rank's next all-reduce fails within seconds with
    HCCL_E_REMOTE naming rank 2, and HcclGetCommAsyncError says so."""
    for name in ("HCCL_EXEC_TIMEOUT", "ACLNN_GPU_HCCL_HEARTBEAT_S"):
        monkeypatch.delenv(name, raising=False)
    env = {"HCCL_EXEC_TIMEOUT": "", "ACLNN_GPU_HCCL_HEARTBEAT_S": heartbeat}   # "": HCCL's / the library's default
    for report in fault_reports(hosts, tmp_path, kind, 3, 2, "between", env):
        code, message, elapsed = report["call"]
        assert code == acl.HCCL_E_REMOTE and "rank 2 stopped" in message, report
        assert message.startswith("HcclAllReduce") and f"ACLNN_GPU_HCCL_HEARTBEAT_S={heartbeat or 10}" in message, \
            message
        assert elapsed < 45, report   # the heartbeat timeout and a beat, on a loaded machine
        assert report["async"][:2] == [0, acl.HCCL_E_REMOTE] and "rank 2" in report["async"][2], report


@pytest.mark.parametrize("kind", HOST_KINDS)
def test_a_rank_dead_during_a_collective_fails_every_other_rank(hosts, tmp_path, kind):
    """Rank 1 (host 1, with rank 2) dies as the data of an all-reduce starts to move: the ranks it
    talks to lose its connection (a probe tells it from rank 2, which shares its address), and
    every rank's stream fails (the fault goes through the store), HCCL_E_REMOTE in the message and
    from HcclGetCommAsyncError."""
    for report in fault_reports(hosts, tmp_path, kind, 3, 1, "during"):
        code, message, elapsed = report["call"]
        assert code == acl.ACL_ERROR_RT_INTERNAL_ERROR and "HCCL_E_REMOTE" in message, report
        assert "rank 1" in message, message
        assert elapsed < 30, report
        assert report["async"][1] == acl.HCCL_E_REMOTE, report


@pytest.mark.parametrize("kind", HOST_KINDS)
def test_rank_zero_dead_takes_the_store_and_every_rank_says_so(hosts, tmp_path, kind):
    """Rank 0 hosts the store (it called HcclGetRootInfo): when it dies, every other rank's next
    call fails at once with HCCL_E_TCP_TRANSFER naming rank 0, never "rank 0, 1, 2 did not"."""
    for report in fault_reports(hosts, tmp_path, kind, 3, 0, "between"):
        code, message, elapsed = report["call"]
        assert code == acl.HCCL_E_TCP_TRANSFER and "rank 0 (hosting the bootstrap store" in message, report
        assert "did not" not in message, message
        assert elapsed < 30, report
        assert report["async"][1] == acl.HCCL_E_TCP_TRANSFER, report


# ---------------------------------------------------------------------------- a bad network
LONG = os.environ.get("ACLNN_GPU_HCCL_LONG_NETWORK_TESTS", "") == "1"   # the longer variants
CUT_HEARTBEAT_S = 3
# what bounds a rank's failure when the network goes silent: the heartbeat timeout, a beat, a
# wait slice; the margin is a loaded 2-core CI machine's (HCCL_EXEC_TIMEOUT is 60 s, far above)
CUT_BOUND_S = CUT_HEARTBEAT_S + 2 + 15


@pytest.fixture(scope="module")
def slow_hosts():
    """Two hosts whose link is limited to 1 mbit/s each way (tc tbf)."""
    with Hosts() as made:
        made.shape("1mbit")
        yield made


@pytest.mark.skipif(not LONG, reason="a longer variant: ACLNN_GPU_HCCL_LONG_NETWORK_TESTS=1 (2 ranks over the same "
                                      "link run in test_a_link_cut_mid_collective_fails_every_rank_in_bounded_time)")
@pytest.mark.parametrize("kind, n, mode", [("cpu", 4, "root"), ("cpu", 4, "table")])
def test_every_collective_is_right_over_a_one_megabit_link(slow_hosts, tmp_path, kind, n, mode):
    """Every collective and send / receive, 2 ranks on each of the 2 hosts, over a 1 mbit/s token
    bucket (the 2-rank case is the first step of the link-cut test)."""
    reports = run_ranks(slow_hosts, tmp_path, kind, n, mode, "all")
    for rank, (code, out, err, report) in enumerate(reports):
        assert code == 0 and report is not None, f"rank {rank} exited {code}:\n{err[-3000:]}"
        assert report["init"][0] == 0 and report["wrong"] == [] and report["destroy"] == 0, report
    no_stack_traces(reports)


def cut_link(tmp_path: Path, faults: list[str], count: int, shaped: bool) -> tuple[list[dict], list[float]]:
    """Ranks 0 (host 0, the store) and 1 (host 1) all-reduce in a loop; the test cuts the link by
    each fault in turn (once both are looping: the cut lands in or between collectives), waits for
    both ranks to report their failure, restores the link, and lets them make a new communicator.
    Returns each rank's report and the wall-clock time of each cut."""
    env = dict(FAST, ACLNN_GPU_DEVICE="cpu", HCCL_EXEC_TIMEOUT="60", ACLNN_GPU_HCCL_HEARTBEAT_S=str(CUT_HEARTBEAT_S))
    cuts: list[float] = []
    with Hosts() as hosts:
        if shaped:
            hosts.shape("1mbit")
        procs = []
        for rank in range(2):
            config = dict(rank=rank, n=2, mode="root", scenario="cut", faults=faults, dir=str(tmp_path), count=count,
                          out=str(tmp_path / f"rank{rank}.json"))
            procs.append(hosts.start(rank, config, dict(env, HCCL_IF_IP=hosts.addresses[rank])))
        try:
            for i, fault in enumerate(faults):
                for rank in range(2):
                    wait_for_file(tmp_path / f"ready{i}_{rank}", 120)
                time.sleep(0.5)   # a few collectives into the loop
                cuts.append(time.time())
                hosts.link(False) if fault == "down" else hosts.blackhole(True)
                try:
                    for rank in range(2):
                        wait_for_file(tmp_path / f"failed{i}_{rank}", 120)
                finally:
                    hosts.link(True) if fault == "down" else hosts.blackhole(False)
                write_atomically(tmp_path / f"restored{i}", b"1")
        finally:
            results = finish(procs, 120)
    (tmp_path / "cuts.json").write_text(json.dumps(cuts))   # for the figures (docs/HARDENING.md)
    reports = []
    for rank, (code, out, err) in enumerate(results):
        path = tmp_path / f"rank{rank}.json"
        assert code == 0 and path.exists(), f"rank {rank} exited {code}:\n{err[-3000:]}"
        assert "frame #" not in err and "Exception raised from" not in err, f"rank {rank} stderr:\n{err[-3000:]}"
        reports.append(json.loads(path.read_text()))
    return reports, cuts


FAULTS = [["down", "blackhole"]] if not LONG else [["down", "blackhole"], ["blackhole", "down", "down"]]


@pytest.mark.parametrize("faults", FAULTS)
def test_a_link_cut_mid_collective_fails_every_rank_in_bounded_time(tmp_path, faults):
    """Over a 1 mbit/s link, every collective is right (2 ranks, one per host); then the link goes
    down, then (after it came back and a new communicator formed) a blackhole route appears, while
    the ranks all-reduce 128 KB: every rank's call
    returns an error within CUT_BOUND_S of the cut (the heartbeat timeout ends it, not
    HCCL_EXEC_TIMEOUT=60), rank 0 naming rank 1 and rank 1 the silent store; no all-reduce before
    the cut was wrong; HcclCommDestroy returns; a new communicator formed after the link came back
    all-reduces right."""
    reports, cuts = cut_link(tmp_path, faults, 32 * 1024, shaped=True)
    for report in reports:
        rank = report["rank"]
        assert report["every"] == [], report["every"]
        entries = report["faults"]
        assert [e["fault"] for e in entries] == faults + ["after"], entries
        for entry, cut in zip(entries, cuts):
            assert entry["first"] and entry["wrong"] == 0, entry
            assert entry["code"] != 0 and cut < entry["failed_at"] < cut + CUT_BOUND_S, (entry, cut)
            assert entry["destroy"] == 0 and entry["destroy_s"] < CUT_BOUND_S, entry
            assert entry["async"][0] == 0 and entry["async"][1] in (acl.HCCL_E_REMOTE, acl.HCCL_E_TCP_TRANSFER), entry
            if rank == 0:   # the store's host: rank 1's heartbeat stopped
                assert "rank 1" in entry["message"], entry
            else:           # across the cut link: the store went silent
                assert "bootstrap store" in entry["message"], entry
        assert entries[-1]["first"], entries[-1]


@pytest.mark.skipif(netem_usable() is not None, reason=str(netem_usable()))
def test_collectives_are_right_over_a_lossy_delayed_link(hosts, tmp_path):
    """50 ms delay and 5% loss each way (tc netem): every collective still right, 4 ranks."""
    for h, name in enumerate(hosts.names):
        subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "replace", "dev", hosts.links[h], "root", "netem",
                        "delay", "50ms", "loss", "5%"], check=True)
    try:
        reports = run_ranks(hosts, tmp_path, "cpu", 4, "root", "all")
    finally:
        for h, name in enumerate(hosts.names):
            subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "del", "dev", hosts.links[h], "root"])
    for rank, (code, out, err, report) in enumerate(reports):
        assert code == 0 and report is not None and report["wrong"] == [], f"rank {rank} exited {code}:\n{err[-3000:]}"


# ---------------------------------------------------------------------------- a stranger on the network
@pytest.mark.skipif(not LONG, reason="a longer variant: ACLNN_GPU_HCCL_LONG_NETWORK_TESTS=1 (the same attacks from "
                                      "this host run in tests/test_hccl_rendezvous.py)")
def test_a_stranger_on_another_host_cannot_join_inject_or_read(hosts, tmp_path):
    """Ranks 0 (host 0, the store) and 1 (host 1) all-reduce; a stranger process on host 1 that
    knows only the store's address forges root infos from the listed keys and joins with each, and
    keeps writing a fault in its own words and a call header to every key. Its joins all fail; every
    all-reduce is right or fails with "unauthenticated message"; the stranger's words reach no rank;
    a new communicator of the same root info fails on both ranks (its join counters were forged)."""
    env = dict(FAST, ACLNN_GPU_DEVICE="cpu")
    procs = []
    for rank in range(2):
        config = dict(rank=rank, n=2, mode="root", scenario="attacked", dir=str(tmp_path),
                      out=str(tmp_path / f"rank{rank}.json"))
        procs.append(hosts.start(rank, config, dict(env, HCCL_IF_IP=hosts.addresses[rank])))
    from aclnn_gpu.hccl.bootstrap import Meeting
    meeting = Meeting.decode(wait_for_file(tmp_path / "root_info"), "test")
    config = dict(rank=-1, n=2, scenario="stranger", dir=str(tmp_path), host=meeting.host, port=meeting.port,
                  attack_s=3.0, out=str(tmp_path / "stranger.json"))
    procs.append(hosts.start(1, config, dict(env, HCCL_IF_IP=hosts.addresses[1], HCCL_CONNECT_TIMEOUT="5")))
    results = finish(procs, 120)
    reports = []
    for who, (code, out, err) in zip(["rank0", "rank1", "stranger"], results):
        path = tmp_path / f"{who}.json"
        assert code == 0 and path.exists(), f"{who} exited {code}:\n{err[-3000:]}"
        reports.append(json.loads(path.read_text()))
    stranger = reports[2]
    assert stranger["keys"] and stranger["writes"] and stranger["joins"] and 0 not in stranger["joins"], stranger
    for report in reports[:2]:
        assert report["init"][0] == 0 and report["outcomes"][0] == [0, "", True], report
        for ret, message, right in report["outcomes"]:
            assert "the stranger was here" not in message and "disagree" not in message, message
            assert right if ret == 0 else "unauthenticated message" in message, (ret, message)
        assert report["again"][0] == acl.HCCL_E_TCP_TRANSFER and "unauthenticated message" in report["again"][1], \
            report["again"]


# ---------------------------------------------------------------------------- the guide
def test_the_guides_commands_run_as_written():
    """docs/HCCL.md's commands, as a user pastes them (as root, from the repository root): two
    namespaced hosts, the data-parallel example by root info and by rank table, each run ending
    equal to one process on the full batches; the namespaces removed at the end."""
    guide = (ROOT / "docs" / "HCCL.md").read_text()
    (block,) = re.findall(r"```bash\n(.*?)```", guide, re.S)
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(["bash", "-c", block], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("rank 0 of 2: ranks agree to 0.0e+00") == 2, proc.stdout
    assert "frame #" not in proc.stderr, proc.stderr[-3000:]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "hccl-a" not in listed and "hccl-b" not in listed
