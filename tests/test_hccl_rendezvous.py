"""The rendezvous admits only its members: a stranger that reaches the bootstrap store (PyTorch's
TCPStore has no authentication, and its `list_keys()` shows every key) but never saw the root info
tries the three attacks an open store allows: build a root info from what the store shows and join
as a rank; write a fault of its choosing; rewrite the call headers. None of them lets it in, gives
a wrong result, or shows its words on a rank: at most the ranks fail with "unauthenticated
message" (or time out), within the timeout.

Ranks are threads of the test process (cpu device); the stranger is a thread with a raw store
client of its own, knowing the store's host and port (a stranger on the host finds them in
/proc/net/tcp) and nothing of the root info but what any root info of its own shows (the format).
The same attacks from another host (network namespaces) are in tests/test_hccl_hosts.py."""
from __future__ import annotations

import dataclasses
import datetime
import json
import threading
import time

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import aclnn_gpu as acl  # noqa: E402
from aclnn_gpu.hccl import bootstrap  # noqa: E402
from hccl_ranks import RANK_TIMEOUT_S, download, ok, upload  # noqa: E402

F32, SUM = acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM
STRANGER_WORDS = "the stranger was here"
ATTACK_S = 2.0   # how long the stranger keeps writing (the ranks' heartbeats read the store every second)


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "15")
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "15")
    monkeypatch.setenv("ACLNN_GPU_HCCL_HEARTBEAT_S", "5")


def stranger_client(root_info: bytes):
    """A raw client of the store a root info points at: only its host and port are used."""
    from torch.distributed import TCPStore
    meeting = bootstrap.Meeting.decode(root_info, "stranger")
    return TCPStore(meeting.host, meeting.port, None, False, timeout=datetime.timedelta(seconds=10),
                    wait_for_workers=False)


def listed_keys(client) -> list[str]:
    return [k.decode() if isinstance(k, bytes) else str(k) for k in client.list_keys()]


def forged_root_infos(root_info: bytes, keys: list[str]) -> list[bytes]:
    """Root infos a stranger builds: one of its own (its own secret, if the format has one) pointed
    at the victim's store, once per name the store's keys suggest as the communicator's."""
    meeting = bootstrap.Meeting.decode(root_info, "stranger")
    own = bootstrap.Meeting.decode(ok(acl.HcclGetRootInfo()), "stranger")
    names = sorted({k.split("/")[1] for k in keys if k.startswith("hccl/") and k.count("/") >= 2})
    return [dataclasses.replace(own, host=meeting.host, port=meeting.port, key=name, name=name).encode()
            for name in names]


def in_threads(bodies: list) -> list:
    """Run each body in a thread; their results (an exception is re-raised here)."""
    results: list = [None] * len(bodies)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = bodies[i]()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RANK_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), f"a thread did not finish within {RANK_TIMEOUT_S} s"
    if errors:
        raise errors[0]
    return results


def test_a_stranger_cannot_join_from_what_the_store_shows(cpu_session, monkeypatch):
    """Rank 0 waits for rank 1; a stranger lists the store's keys, builds root infos from them and
    joins as rank 1 with each. No join succeeds (the stranger's keys are not the communicator's),
    rank 0 is never given the stranger's data: it fails with HCCL_E_TIMEOUT naming rank 1."""
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "6")
    root_info = ok(acl.HcclGetRootInfo())
    client = stranger_client(root_info)
    joined = threading.Event()

    def rank0():
        ret, comm = acl.HcclCommInitRootInfo(2, root_info, 0)
        if ret != 0:
            return ("init", int(ret), acl.aclGetRecentErrMsg())
        buf = upload(np.full(4, 1, np.float32))
        ret = acl.HcclAllReduce(buf, buf, 4, F32, SUM, comm, None)
        got = download(buf, 4, np.float32).tolist()
        acl.HcclCommDestroy(comm)
        return ("allreduce", int(ret), got)

    def stranger():
        deadline = time.monotonic() + 5
        keys: list[str] = []
        while not keys and time.monotonic() < deadline:   # rank 0's first keys appear as it joins
            keys = listed_keys(client)
            time.sleep(0.05)
        outcomes = []
        for forged in forged_root_infos(root_info, keys):
            ret, comm = acl.HcclCommInitRootInfo(2, forged, 1)
            outcomes.append(int(ret))
            if ret == 0:
                joined.set()
                buf = upload(np.full(4, 1000, np.float32))
                acl.HcclAllReduce(buf, buf, 4, F32, SUM, comm, None)
                acl.HcclCommDestroy(comm)
        return keys, outcomes

    first, (keys, outcomes) = in_threads([rank0, stranger])
    assert keys, "the store showed no key while rank 0 joined"
    assert not joined.is_set() and 0 not in outcomes, (keys, outcomes, first)
    assert first[0] == "init" and first[1] == acl.HCCL_E_TIMEOUT and "rank 1" in first[2], first


PAYLOADS = {
    "fault": json.dumps([int(acl.HCCL_E_INTERNAL), STRANGER_WORDS]),
    "header": json.dumps({"count": 999, "dataType": int(F32), "op": int(SUM), "root": -1, "call": "HcclAllReduce",
                          "refused": None}),
}


@pytest.mark.parametrize("attack", sorted(PAYLOADS))
def test_a_stranger_cannot_inject_a_fault_or_a_header(cpu_session, attack):
    """Two ranks all-reduce in a loop; meanwhile a stranger keeps writing its payload (a fault in
    its own words, or a call header with another count) to every key the store shows, and to the
    names a fault or the next headers would have in an open store. Every all-reduce either gives
    the right sum or fails with "unauthenticated message" (a rank read what the stranger wrote):
    never the stranger's words, never a count mismatch, never a wrong sum. A rank reads the
    stranger's value only when it reads a key between the stranger's write and its owner's next
    one, so whether the loop fails is chance; the next communicator of the same root info reads
    the join counters the stranger overwrote, and fails on every rank, always."""
    root_info = ok(acl.HcclGetRootInfo())
    client = stranger_client(root_info)
    payload = PAYLOADS[attack]
    first_done = threading.Barrier(3, timeout=RANK_TIMEOUT_S)
    attacking, attack_over = threading.Event(), threading.Event()

    def rank(r: int):
        def body():
            comm = ok(acl.HcclCommInitRootInfo(2, root_info, r))
            stream = ok(acl.aclrtCreateStream())
            outcomes = []
            try:
                for i in range(100):
                    buf = upload(np.full(4, r + 1, np.float32))
                    ret = acl.HcclAllReduce(buf, buf, 4, F32, SUM, comm, stream)
                    message = acl.aclGetRecentErrMsg() if ret else ""
                    if ret == 0:
                        ret = acl.aclrtSynchronizeStream(stream)
                        message = acl.aclGetRecentErrMsg() if ret else ""
                    outcomes.append((int(ret), message, download(buf, 4, np.float32).tolist() if ret == 0 else None))
                    if i == 0:
                        first_done.wait()
                        attacking.wait(RANK_TIMEOUT_S)
                    if ret != 0 or attack_over.is_set():
                        break
                    time.sleep(0.05)
            finally:
                acl.aclrtDestroyStream(stream)
                acl.HcclCommDestroy(comm)
            attack_over.wait(RANK_TIMEOUT_S)
            again = acl.HcclCommInitRootInfo(2, root_info, r)
            if again[0] == 0:
                acl.HcclCommDestroy(again[1])
            return outcomes, (int(again[0]), acl.aclGetRecentErrMsg() if again[0] else "")
        return body

    def stranger():
        first_done.wait()
        seen: set[str] = set()
        end = time.monotonic() + ATTACK_S
        while time.monotonic() < end:   # keeps writing, as the ranks keep writing their own keys
            keys = listed_keys(client)
            seen.update(keys)
            targets = set(keys)
            for k in keys:   # the names an open store would give the fault and the coming headers
                parts = k.split("/")
                if k.startswith("hccl/") and len(parts) >= 3:
                    base = "/".join(parts[:3])
                    targets.add(f"{base}/fault")
                    targets.update(f"{base}/c{seq}/{r}" for seq in range(1, 41) for r in range(2))
            for k in sorted(targets):
                client.set(k, payload)
            attacking.set()
            time.sleep(0.02)
        attack_over.set()
        return sorted(seen)

    (outcomes0, again0), (outcomes1, again1), keys = in_threads([rank(0), rank(1), stranger])
    assert keys
    for r, outcomes in enumerate([outcomes0, outcomes1]):
        assert outcomes[0][0] == 0 and outcomes[0][2] == [3.0] * 4, outcomes[0]   # before the attack
        for ret, message, got in outcomes:
            assert STRANGER_WORDS not in message and "disagree" not in message, (r, message)
            if ret == 0:
                assert got == [3.0] * 4, (r, got)
            else:
                assert "unauthenticated message" in message, (r, ret, message)
    for r, (ret, message) in enumerate([again0, again1]):
        assert ret == acl.HCCL_E_TCP_TRANSFER and "unauthenticated message" in message, (r, ret, message)
        assert STRANGER_WORDS not in message
