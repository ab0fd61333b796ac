"""A program that ends with work still queued on its streams (tests/test_exit.py runs it).

    python exit_program.py MODE
MODE: "return" (main ends), "finalize" (aclFinalize without a synchronize, then main ends), "exit"
(sys.exit(3)), "threads" (daemon threads calling operators in a loop while main calls sys.exit(4)),
"after" (the exit hook called by hand, then a launch and a synchronize: their statuses and messages
printed).
Prints "queued" once the work is queued, writes "exiting" to stderr just before it ends; anything
else on stderr, a signal or another exit code is a failure of the library.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

import aclnn_gpu as acl

T, N, C, L = 400, 64, 50, 40     # one CTC forward: ~25 ms on the cpu device, ~150 ms emulated
LAUNCHES = 40
KEPT: list = []                  # handles alive until the process ends, as a C program leaves them


def device_tensor(array: np.ndarray) -> acl.aclTensor:
    ret, ptr = acl.aclrtMalloc(array.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtMemcpy(ptr, array.nbytes, array, array.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    code = acl.ACL_FLOAT if array.dtype == np.float32 else acl.ACL_INT64
    return acl.aclCreateTensor(list(array.shape), code, None, 0, acl.ACL_FORMAT_ND, list(array.shape), ptr)


def outputs() -> tuple[acl.aclTensor, acl.aclTensor]:
    return device_tensor(np.zeros(N, np.float32)), device_tensor(np.zeros((N, T, 2 * L + 1), np.float32))


def enqueue(stream, inputs, launches: int | None, started: threading.Event | None = None) -> None:
    """CTC forwards on `stream`: `launches` of them, or until a call fails (None: until the process
    ends, synchronising the stream every 4 launches: the exit may find the thread waiting there)."""
    log_probs, targets, nll, log_alpha = inputs
    done = 0
    while launches is None or done < launches:
        status, size, executor = acl.aclnnCtcLossGetWorkspaceSize(
            log_probs, targets, acl.aclCreateIntArray([T] * N), acl.aclCreateIntArray([L] * N), 0, False, nll,
            log_alpha)
        workspace = None
        if status == 0 and size:
            status, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if status == 0:
            status = acl.aclnnCtcLoss(workspace, size, executor, stream)
        if status != 0:
            if launches is not None:
                raise SystemExit(f"launch {done} failed: {status}: {acl.aclGetRecentErrMsg()}")
            return   # the process is ending: the library refuses new work
        done += 1
        if started is not None:
            started.set()
            if done % 4 == 0 and acl.aclrtSynchronizeStream(stream) != 0:
                return


def caller(stream, inputs, started: threading.Event) -> None:
    acl.aclrtSetDevice(0)
    enqueue(stream, inputs, None, started)


def main(mode: str) -> int:
    assert acl.aclInit(None) == 0 and acl.aclrtSetDevice(0) == 0
    rng = np.random.default_rng(0)
    log_probs = device_tensor(np.log(rng.dirichlet(np.ones(C), size=(T, N))).astype(np.float32))
    targets = device_tensor(rng.integers(1, C, size=(N, L)).astype(np.int64))
    _, stream = acl.aclrtCreateStream()
    KEPT.append(stream)
    inputs = (log_probs, targets, *outputs())   # all made first: a synchronous copy waits for every stream
    if mode == "threads":
        callers = [(threading.Thread(target=caller, args=(acl.aclrtCreateStream()[1], (log_probs, targets, *outputs()),
                                                          started), daemon=True), started)
                   for started in (threading.Event(), threading.Event())]
        for thread, _ in callers:
            thread.start()
        for _, started in callers:
            started.wait()
    enqueue(stream, inputs, LAUNCHES)
    print("queued", flush=True)
    if mode == "after":
        from aclnn_gpu.device.current import at_exit
        status, size, executor = acl.aclnnCtcLossGetWorkspaceSize(
            log_probs, targets, acl.aclCreateIntArray([T] * N), acl.aclCreateIntArray([L] * N), 0, False,
            *inputs[2:])
        # allocated before the hook: aclrtMalloc's padding is zeroed on a stream, refused after it
        workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if size else None
        at_exit()
        print(int(status), int(acl.aclnnCtcLoss(workspace, size, executor, stream)), acl.aclGetRecentErrMsg())
        print(int(acl.aclrtSynchronizeStream(stream)), flush=True)
    sys.stderr.write("exiting\n")
    if mode == "finalize":
        assert acl.aclFinalize() == 0
    elif mode == "exit":
        sys.exit(3)
    elif mode == "threads":
        sys.exit(4)
    return 0


if __name__ == "__main__":
    main(sys.argv[1])
