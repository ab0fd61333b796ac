"""A program that drops a stream handle with work queued on it, then resets the device (or frees
the buffers, or finalizes): tests/hardening/test_dropped_streams.py runs it, also under ASan.

    python dropped_stream_program.py MODE COPIES NBYTES
MODE: "reset" (aclrtResetDevice), "free" (aclrtFree of both buffers, then the reset), "finalize"
(aclFinalize, then the reset), "sync" (aclrtSynchronizeDevice: prints whether the dropped stream's
work had all run when it returned, then the reset), "callback" (a blocking host callback nobody
processes is queued first, on a stream this thread subscribes to; then the copies and the reset).
COPIES device-to-device copies of NBYTES bytes are queued on a stream whose handle is then dropped
(no aclrtDestroyStream). Prints one line per step ("status NAME CODE"), "unfinished-after-reset N"
(streams with work not yet run when the reset returned; the program then lets it run) and
"worker-threads N" at the end: the stream worker threads still alive after the reset. A write into freed memory is a crash
(SIGSEGV, or an ASan report under the sanitizer), a hang is the caller's timeout.
"""
from __future__ import annotations

import gc
import sys
import threading

import aclnn_gpu as acl

D2D = acl.ACL_MEMCPY_DEVICE_TO_DEVICE


def main() -> None:
    mode, copies, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("status aclInit", acl.aclInit(None))
    print("status aclrtSetDevice", acl.aclrtSetDevice(0))
    ret, src = acl.aclrtMalloc(nbytes, 0)
    ret2, dst = acl.aclrtMalloc(nbytes, 0)
    assert ret == 0 and ret2 == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtMemset(src, nbytes, 7, nbytes) == 0
    stream, ret = acl.aclrtCreateStream()[1], 0
    if mode == "callback":
        print("status aclrtSubscribeReport", acl.aclrtSubscribeReport(threading.get_ident(), stream))
        print("status aclrtLaunchCallback", acl.aclrtLaunchCallback(lambda _: None, None, 1, stream))
    for _ in range(copies):
        ret = acl.aclrtMemcpyAsync(dst, nbytes, src, nbytes, D2D, stream)
        if ret != 0:
            break
    print("status queued", ret)
    # the handle is dropped, as a C program drops an aclrtStream it never destroys
    last_copy = [stream]
    del stream
    last_copy.clear()
    gc.collect()
    if mode == "sync":
        code = acl.aclrtSynchronizeDevice()
        workers = [t for t in threading.enumerate() if t.name.startswith("aclnn_gpu-") and "stream" in t.name]
        # every worker but the default stream's must be idle: is the dropped stream's queue empty?
        from aclnn_gpu.host import stream as hoststream
        pending = sum(1 for s in list(hoststream._live) if not s.finished_all())
        print("status aclrtSynchronizeDevice", code)
        print("unfinished-streams", pending, "of", len(workers))
    if mode == "free":
        print("status aclrtFree-src", acl.aclrtFree(src))
        print("status aclrtFree-dst", acl.aclrtFree(dst))
    if mode == "finalize":
        print("status aclFinalize", acl.aclFinalize())
    print("status aclrtResetDevice", acl.aclrtResetDevice(0))
    print("message", acl.aclGetRecentErrMsg().replace("\n", " ")[:300])
    # Whatever a stream worker still has queued now runs before the program goes on (on a library
    # that left a dropped stream running, its next copy is a write into freed memory: SIGSEGV, or
    # an ASan report, instead of the exit abandoning it).
    from aclnn_gpu.host import stream as hoststream
    left = [s for s in list(hoststream._live) if s._thread.is_alive()]
    print("unfinished-after-reset", sum(not s.finished_all() for s in left))
    for worker in left:
        worker.drain()
    alive = [t for t in threading.enumerate() if t.name.startswith("aclnn_gpu-") and "stream" in t.name]
    print("worker-threads", len(alive), *sorted(t.name for t in alive))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
