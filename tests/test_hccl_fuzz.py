"""Malformed rank tables and root infos: HCCL_E_PARA (or HCCL_E_OPEN_FILE_FAILURE for a file that
cannot be opened) and a short message naming the function and the rule, never an internal error,
never a hang, never memory that grows with a number the caller chose.

The bounds: at most MAX_RANKS ranks (HCCL's largest communicator), every message under
MESSAGE_MAX characters, a rank-table path opened without blocking and read only when it is a
regular file."""
from __future__ import annotations

import json
import os
import struct
import threading

import pytest

pytest.importorskip("torch.distributed")

import aclnn_gpu as acl  # noqa: E402
from aclnn_gpu.base.errors import OpError  # noqa: E402
from aclnn_gpu.hccl import bootstrap, rank_table  # noqa: E402
from aclnn_gpu.hccl.types import HCCL_ROOT_INFO_BYTES  # noqa: E402
from hccl_ranks import RANK_TIMEOUT_S, ok  # noqa: E402

MESSAGE_MAX = 1000
PARA = acl.HCCL_E_PARA


def table_of(devices: list[dict], servers: int = 1) -> dict:
    return {"status": "completed", "version": "1.0", "server_count": str(servers),
            "server_list": [{"server_id": "127.0.0.1", "device": devices}]}


def devices(n: int) -> list[dict]:
    return [{"device_id": str(r % 8), "rank_id": str(r), "device_ip": "127.0.0.1"} for r in range(n)]


def bounded(call) -> tuple[int, str]:
    """(return code, message) of an HCCL call run in a thread of its own, waited for at most
    RANK_TIMEOUT_S (a call that hangs fails the test instead of hanging it)."""
    out: list = []

    def run() -> None:
        ret = call()
        out.append((int(ret[0] if isinstance(ret, tuple) else ret), acl.aclGetRecentErrMsg()))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(RANK_TIMEOUT_S)
    assert not worker.is_alive(), f"the call did not return within {RANK_TIMEOUT_S} s"
    return out[0]


def refused(call, fn: str, code=PARA) -> str:
    """The message of a call that must fail with `code`: short, naming the function, never internal."""
    ret, message = bounded(call)
    assert ret == code, (ret, message[:3000])
    assert message.startswith(fn + ": ") and len(message) < MESSAGE_MAX, message[:3000]
    assert "internal error" not in message, message
    return message


def table_refused(path, code=PARA, rank=0) -> str:
    return refused(lambda: acl.HcclCommInitClusterInfo(str(path), rank), "HcclCommInitClusterInfo", code)


@pytest.mark.parametrize("rank_id", ["0.9", 0.9, "-1", -1, True, "1e3", "", " 0", "٣", None, [0], {"a": 0}])
def test_a_rank_id_that_is_not_a_whole_number_is_refused(cpu_session, tmp_path, rank_id):
    """`rank_id: 0.9` was taken as rank 0; a rank_id must be a JSON integer or a string of digits."""
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table_of([{"device_id": "0", "rank_id": rank_id, "device_ip": "127.0.0.1"}])))
    message = table_refused(path)
    assert "rank_id" in message, message


@pytest.mark.parametrize("body", ["[" * 100_000, '{"server_list": ' * 50_000, '{"a": ' * 3000 + "1" + "}" * 3000])
def test_deeply_nested_json_is_refused(cpu_session, tmp_path, body):
    path = tmp_path / "table.json"
    path.write_text(body)
    message = table_refused(path)
    assert "not a rank table" in message, message


def test_a_fifo_a_directory_and_a_missing_file_are_refused_without_blocking(cpu_session, tmp_path):
    """A FIFO with no writer blocked open() forever (past HCCL_CONNECT_TIMEOUT): it is opened
    without blocking and refused as not a regular file."""
    fifo = tmp_path / "table.fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in table_refused(fifo)
    assert "not a regular file" in table_refused(tmp_path)
    assert "cannot be opened" in table_refused(tmp_path / "missing.json", acl.HCCL_E_OPEN_FILE_FAILURE)
    if os.path.exists("/dev/zero"):
        assert "not a regular file" in table_refused("/dev/zero")


def test_twenty_thousand_ranks_give_a_short_message(cpu_session, tmp_path):
    """20,000 ranks with one missing, and this rank not in the table: the messages name the rule
    and the first missing rank, not every rank id."""
    listed = devices(20_001)
    del listed[12_345]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table_of(listed)))
    message = table_refused(path)
    assert "12345 is missing" in message, message
    path.write_text(json.dumps(table_of(devices(20_000))))
    message = table_refused(path, rank=20_000)
    assert "rank 20000 is not a rank_id" in message, message


def test_more_ranks_than_hccl_allows_are_refused(cpu_session, tmp_path):
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table_of(devices(rank_table.MAX_RANKS + 1))))   # ids 0..MAX_RANKS: one too many
    assert f"not below {rank_table.MAX_RANKS}" in table_refused(path)
    path.write_text(json.dumps(table_of([{"device_id": "0", "rank_id": str(rank_table.MAX_RANKS)}])))
    assert f"not below {rank_table.MAX_RANKS}" in table_refused(path)
    path.write_text(json.dumps(table_of([{"device_id": "0", "rank_id": "9" * 5000}])))
    assert "characters)" in table_refused(path)   # the value is quoted cut short


@pytest.mark.parametrize("n_ranks", [0, rank_table.MAX_RANKS + 1, 0xFFFFFFFF, 2**64 - 1])
def test_n_ranks_is_bounded_before_anything_is_allocated(cpu_session, n_ranks):
    """HcclCommInitRootInfo(0xFFFFFFFF, ...) grew to 22 GB: nRanks is checked against HCCL's bound
    before the store is touched."""
    root_info = ok(acl.HcclGetRootInfo())
    message = refused(lambda: acl.HcclCommInitRootInfo(n_ranks, root_info, 0), "HcclCommInitRootInfo")
    assert f"nRanks {n_ranks}" in message and str(rank_table.MAX_RANKS) in message, message
    assert len(message) < MESSAGE_MAX


def _body(blob: bytes) -> dict:
    (length,) = struct.unpack_from("<I", blob, len(bootstrap.MAGIC))
    return json.loads(blob[len(bootstrap.MAGIC) + 4:len(bootstrap.MAGIC) + 4 + length])


def _blob(body: bytes) -> bytes:
    return (bootstrap.MAGIC + struct.pack("<I", len(body)) + body).ljust(HCCL_ROOT_INFO_BYTES, b"\0")[
        :HCCL_ROOT_INFO_BYTES]


def test_fuzzed_root_infos_are_refused_or_decoded_never_an_internal_error(cpu_session, rng):
    """A root info with its bytes flipped, its length field, its JSON fields retyped, nested or
    removed, its secret shortened: Meeting.decode (what HcclCommInitRootInfo runs first) returns a
    meeting or fails with HCCL_E_PARA and a short message, nothing else."""
    good = ok(acl.HcclGetRootInfo())
    body = _body(good)
    cases: list[bytes] = []
    for _ in range(300):   # random bytes flipped
        raw = bytearray(good)
        for at in rng.integers(0, len(bootstrap.MAGIC) + 4 + 200, int(rng.integers(1, 6))):
            raw[at] = int(rng.integers(0, 256))
        cases.append(bytes(raw))
    for length in (0, 1, 2**31, 2**32 - 1, HCCL_ROOT_INFO_BYTES):   # the length field
        cases.append(bytes(good[:len(bootstrap.MAGIC)]) + struct.pack("<I", length) + good[len(bootstrap.MAGIC) + 4:])
    weird = [None, True, -1, 2**70, 1.5, "x" * 3000, [1], {"a": 1}, "zz"]
    for field in body:   # every field retyped, and removed
        for value in weird:
            cases.append(_blob(json.dumps(dict(body, **{field: value})).encode()))
        cases.append(_blob(json.dumps({k: v for k, v in body.items() if k != field}).encode()))
    cases.append(_blob(b"[" * 4000))                                       # nested as deep as 4108 bytes allow
    cases.append(_blob(json.dumps(dict(body, secret=body["secret"][:30])).encode()))   # a 120-bit secret
    cases.append(good[:-1])
    decoded = 0
    for blob in cases:
        try:
            bootstrap.Meeting.decode(blob, "HcclCommInitRootInfo")
            decoded += 1
        except OpError as e:
            assert e.status == PARA, (e.status, e.message)
            assert e.message.startswith("HcclCommInitRootInfo: rootInfo") and len(e.message) < MESSAGE_MAX, e.message
    assert decoded < len(cases)
    message = refused(lambda: acl.HcclCommInitRootInfo(1, _blob(b"[" * 4000), 0), "HcclCommInitRootInfo")
    assert "corrupted" in message, message


def test_a_user_value_in_a_message_is_cut_short(cpu_session):
    """An argument's repr is quoted at most rank_table.MAX_SHOWN characters."""
    root_info = ok(acl.HcclGetRootInfo())
    message = refused(lambda: acl.HcclCommInitRootInfo(list(range(100_000)), root_info, 0), "HcclCommInitRootInfo")
    assert len(message) < MESSAGE_MAX and "characters)" in message, message
