"""Helpers of tests/test_hccl.py: ranks as threads of the test process (cheap: one PyTorch import)
or as spawned processes, device buffers in and out, and the rank bodies the spawned processes run
(they must be importable by name, hence not in the test module)."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
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
