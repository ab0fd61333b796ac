"""Streams whose handle is dropped without aclrtDestroyStream, with work still queued, then a reset,
a free, a device-wide synchronize or aclFinalize (docs/HARDENING.md, "Dropped streams and reset").

The device owns its streams' workers: the dropped stream's queued copies run before the reset or
the free returns and before any memory is released, aclrtSynchronizeDevice waits for them, and no
stream worker is left after the reset. A blocking host callback nobody processes is stopped after
ACLNN_GPU_STOP_TIMEOUT_S with ACL_ERROR_RT_WAIT_TIMEOUT. Each case runs dropped_stream_program.py
in a child process (a write into freed memory is a SIGSEGV there, or an ASan report under the
sanitizer), with a generous timeout: a hang fails the test.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from aclnn_gpu.base.status import aclError

PROGRAM = pathlib.Path(__file__).with_name("dropped_stream_program.py")
ROOT = PROGRAM.parents[2]
COPIES, NBYTES = 200, 8 << 20              # 1.6 GB of queued device-to-device copies
ASAN_COPIES, ASAN_NBYTES = 100, 32 << 20   # each buffer within ASan's quarantine after the free
HANG_S = 600


def _run(device: str, mode: str, copies: int, nbytes: int, env: dict | None = None) -> dict:
    env = dict(os.environ if env is None else env, ACLNN_GPU_DEVICE=device,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(PROGRAM), mode, str(copies), str(nbytes)], env=env,
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, f"{device} {mode}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    lines: dict = {}
    for line in proc.stdout.splitlines():
        words = line.split()
        if words and words[0] == "status":
            lines[words[1]] = int(words[2])
        elif words:
            lines[words[0]] = words[1:]
    return lines


def _check_clean(out: dict, device: str, mode: str) -> None:
    assert out["unfinished-after-reset"] == ["0"], f"{device} {mode}: work still queued after the reset: {out}"
    assert out["worker-threads"][0] == "0", f"{device} {mode}: stream workers alive after the reset: {out}"


@pytest.mark.parametrize("device", ["cpu", "emulated"])
@pytest.mark.parametrize("mode", ["reset", "free", "sync", "finalize"])
def test_dropped_stream_is_drained(device, mode, figures):
    out = _run(device, mode, COPIES, NBYTES)
    codes = {name: code for name, code in out.items() if isinstance(code, int)}
    assert all(code == 0 for code in codes.values()), f"{device} {mode}: {codes} {out.get('message')}"
    if mode == "sync":   # aclrtSynchronizeDevice returned with the dropped stream's queue run
        assert out["unfinished-streams"][0] == "0", out
    _check_clean(out, device, mode)
    figures(f"dropped stream, {COPIES} x {NBYTES >> 20} MB D2D copies queued, {mode} on {device}: all run "
            "before memory was freed, 0 workers left")


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_dropped_stream_reset_under_asan(device, figures):
    from aclnn_gpu.emulator.sanitize import sanitizer_env
    try:
        env = sanitizer_env()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"no ASan runtime: {e}")
    out = _run(device, "reset", ASAN_COPIES, ASAN_NBYTES, env)
    assert out["aclrtResetDevice"] == 0, out
    _check_clean(out, device, "reset under ASan")
    figures(f"dropped stream under ASan ({device}): {ASAN_COPIES} x {ASAN_NBYTES >> 20} MB copies, reset: "
            "no heap-use-after-free, 0 workers left")


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_blocking_callback_is_stopped_at_reset(device, figures):
    """A blocking callback nobody processes: the reset waits the bound, stops it, runs the rest of
    the queue, frees the memory and says so with ACL_ERROR_RT_WAIT_TIMEOUT."""
    out = _run(device, "callback", 20, 1 << 20, dict(os.environ, ACLNN_GPU_STOP_TIMEOUT_S="0.5"))
    assert out["aclrtLaunchCallback"] == 0
    assert out["aclrtResetDevice"] == aclError.ACL_ERROR_RT_WAIT_TIMEOUT, out
    message = " ".join(out["message"])
    assert "aclrtResetDevice" in message and "1 blocking host callback" in message, message
    _check_clean(out, device, "callback")
    figures(f"blocking callback never processed, reset on {device}: ACL_ERROR_RT_WAIT_TIMEOUT after the "
            "0.5 s bound (ACLNN_GPU_STOP_TIMEOUT_S), 0 workers left")
