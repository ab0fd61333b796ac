"""Processes that end with work still queued, or with threads still calling operators, exit
cleanly on every device: the program's own exit code, no signal, nothing on stderr but what the
program wrote (tests/exit_program.py; the C ABI's twin is tests/capi/exit_queued.c). The stream
workers stop at exit (host/stream.py `stop_all`): queued work is abandoned, the running task
finishes, and no kernel runs into memory the exit frees."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import DEVICE_KINDS

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = Path(__file__).resolve().parent / "exit_program.py"


def run_program(device: str, mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ACLNN_GPU_DEVICE=device,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(PROGRAM), mode], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("device", DEVICE_KINDS)
@pytest.mark.parametrize("mode, code", [("return", 0), ("finalize", 0), ("exit", 3), ("threads", 4)])
def test_python_program_exits_cleanly_with_work_queued(device, mode, code):
    proc = run_program(device, mode)
    assert (proc.returncode, proc.stderr) == (code, "exiting\n"), proc.stderr[-3000:]
    assert proc.stdout == "queued\n"


@pytest.mark.parametrize("device", DEVICE_KINDS)
def test_work_after_the_exit_hook_is_refused(device):
    """After the exit hook (device/current.py at_exit) the queued work is abandoned: a synchronize
    returns at once; a launch is refused with ACL_ERROR_UNINITIALIZE and a message naming the function."""
    proc = run_program(device, "after")
    assert (proc.returncode, proc.stderr) == (0, "exiting\n"), proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "queued", "0 100001 aclnnCtcLoss: the process is exiting: its streams were stopped at exit (queued work "
        "abandoned), new work is not run", "0"]
