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
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

import aclnn_gpu as acl  # noqa: E402
from hccl_ranks import Hosts, finish, namespaces_usable  # noqa: E402
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
