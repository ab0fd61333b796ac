"""AddressSanitizer + UndefinedBehaviorSanitizer runs of the emulated kernels.

    python -m aclnn_gpu.emulator.sanitize [pytest args...]

re-executes `python -m pytest [pytest args...]` in a subprocess whose kernels are built with
`-fsanitize=address,undefined -fno-sanitize-recover=undefined` (ACLNN_GPU_EMU_SANITIZE=address, a
cache key of its own), with libasan/libubsan preloaded (an ASan library can only be loaded into a
process whose first library is the ASan runtime) and ASAN_OPTIONS/UBSAN_OPTIONS that make the first
report fatal. Returns pytest's exit status (a sanitizer report aborts the process: non-zero).

A report aborts the process, and with it pytest's end-of-run output, so this run makes sure that what
explains the abort survives it:
  * the sanitizers write their reports to files (`log_path`) in ACLNN_GPU_SANITIZER_LOGS (default: a
    new temporary directory), printed here after a failed run. By default they write to fd 2, which
    pytest's default capture points at a temporary file during each test: an abort discarded them;
  * pytest runs with `--capture=sys` unless the arguments choose a capture mode: Python output is still
    captured per test, but fd 1 and 2 stay the log's, so whatever C code writes there before dying
    (glibc's heap checks, std::terminate, a kernel's printf) is seen; faulthandler's Python traceback
    goes there too (pytest gives it a copy of the original fd 2). Output is unbuffered
    (PYTHONUNBUFFERED), so the log shows how far the run got;
  * the test suite's seed (ACLNN_GPU_TEST_SEED, drawn here if unset) is printed first, and the test
    plugin (tests/seeding.py) appends the id of each test to `started-tests` in the log directory
    before it runs: after a run killed by a signal the last one is named with its replay command.

Owns: finding the sanitizer runtimes of the g++ that builds the kernels, and the sanitizer
environment (`sanitizer_env()`, also used by tests that run a sanitized build in a subprocess).
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .build import CXX

SEED_ENV = "ACLNN_GPU_TEST_SEED"      # read by tests/seeding.py
TRACE_ENV = "ACLNN_GPU_TEST_TRACE"    # tests/seeding.py appends each test id to this file
RUNNER_ENV = "ACLNN_GPU_TEST_RUNNER"  # the command tests/seeding.py puts in replay lines
LOGS_ENV = "ACLNN_GPU_SANITIZER_LOGS"
RUNNER = "python -m aclnn_gpu.emulator.sanitize"


def runtime_library(name: str) -> str:
    """Absolute path of a g++ runtime library (libasan.so, libubsan.so, libtsan.so)."""
    path = subprocess.run([CXX, f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        raise RuntimeError(f"{CXX} has no {name} (install the compiler's sanitizer runtime)")
    return os.path.realpath(path)


def sanitizer_env(base: dict | None = None) -> dict:
    """Environment for a child process that loads ASan+UBSan kernel libraries."""
    env = dict(os.environ if base is None else base)
    preload = [runtime_library("libasan.so"), runtime_library("libubsan.so")]
    if env.get("LD_PRELOAD"):
        preload.append(env["LD_PRELOAD"])
    env["LD_PRELOAD"] = ":".join(preload)
    env["ACLNN_GPU_EMU_SANITIZE"] = "address"
    # detect_leaks=0: CPython and NumPy keep allocations until exit by design.
    # The odr/mismatch checks trip over third-party extension modules, not over kernels.
    env["ASAN_OPTIONS"] = ":".join([
        "detect_leaks=0", "abort_on_error=1", "halt_on_error=1", "detect_odr_violation=0",
        "alloc_dealloc_mismatch=0", "new_delete_type_mismatch=0", "allocator_may_return_null=1",
        "handle_segv=1", "print_summary=1", env.get("ASAN_OPTIONS", "")]).strip(":")
    # abort_on_error=1: UBSan's halt is otherwise exit(1), which reads like pytest's "tests failed" and
    # bypasses faulthandler; an abort is a signal, with the Python traceback of every thread.
    env["UBSAN_OPTIONS"] = ":".join(["print_stacktrace=1", "halt_on_error=1", "abort_on_error=1",
                                     env.get("UBSAN_OPTIONS", "")]).strip(":")
    return env


def _chooses_capture(args) -> bool:
    return any(a == "-s" or a.startswith("--capture") for a in args)


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    base = dict(os.environ)
    logs = Path(base.get(LOGS_ENV) or tempfile.mkdtemp(prefix="aclnn_sanitizer_"))
    logs.mkdir(parents=True, exist_ok=True)
    for old in [*logs.glob("asan.*"), *logs.glob("ubsan.*"), logs / "started-tests"]:
        old.unlink(missing_ok=True)   # a reused directory: only this run's reports are printed
    # Ahead of the caller's own options, so that a log_path of theirs wins.
    for var, name in (("ASAN_OPTIONS", "asan"), ("UBSAN_OPTIONS", "ubsan")):
        base[var] = ":".join([f"log_path={logs / name}", base.get(var, "")]).strip(":")
    base.setdefault(SEED_ENV, str(int.from_bytes(os.urandom(4), "little")))
    trace = Path(base.setdefault(TRACE_ENV, str(logs / "started-tests")))
    base[RUNNER_ENV] = RUNNER
    base["PYTHONUNBUFFERED"] = "1"
    env = sanitizer_env(base)
    cmd = [sys.executable, "-m", "pytest", *([] if _chooses_capture(args) else ["--capture=sys"]), *args]
    print(f"sanitize: test seed {base[SEED_ENV]}; reports -> {logs}", flush=True)
    print(f"sanitize: ASan+UBSan kernels: {' '.join(cmd)}", flush=True)
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        report_failure(rc, logs, trace, base[SEED_ENV])
    return 128 - rc if rc < 0 else rc


def report_failure(rc: int, logs: Path, trace: Path, seed: str) -> None:
    """Print the sanitizer reports of a failed run and, when it was killed by a signal (the way a
    report ends it), the test that was running and the command that replays it."""
    reports = sorted([*logs.glob("asan.*"), *logs.glob("ubsan.*")])
    for path in reports:
        text = path.read_text(errors="replace")
        print(f"\n===== sanitizer report {path} =====\n{text[-20000:]}", flush=True)
    if rc < 0:
        try:
            started = [line for line in trace.read_text().splitlines() if line.strip()]
        except OSError:
            started = []
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        print(f"sanitize: pytest was killed by {name}; {len(reports)} sanitizer report(s) in {logs}", flush=True)
        if started:
            print(f"sanitize: the test running then: {started[-1]}\n"
                  f"sanitize: replay: {SEED_ENV}={seed} {RUNNER} {shlex.quote(started[-1])}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
