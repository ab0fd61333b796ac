"""AddressSanitizer + UndefinedBehaviorSanitizer runs of the emulated kernels.

    python -m aclnn_gpu.kernels.emulator.sanitize [pytest args...]

re-executes `python -m pytest [pytest args...]` in a subprocess whose kernels are built with
`-fsanitize=address,undefined -fno-sanitize-recover=undefined` (ACLNN_GPU_EMU_SANITIZE=address, a
cache key of its own), with libasan/libubsan preloaded (an ASan library can only be loaded into a
process whose first library is the ASan runtime) and ASAN_OPTIONS/UBSAN_OPTIONS that make the first
report fatal. Returns pytest's exit status (a sanitizer report aborts the process: non-zero).

Owns: finding the sanitizer runtimes of the g++ that builds the kernels, and the sanitizer
environment (`sanitizer_env()`, also used by tests that run a sanitized build in a subprocess).
"""
from __future__ import annotations

import os
import subprocess
import sys

from .build import CXX


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
    env["UBSAN_OPTIONS"] = ":".join(["print_stacktrace=1", "halt_on_error=1", env.get("UBSAN_OPTIONS", "")]).strip(":")
    return env


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = [sys.executable, "-m", "pytest", *args]
    print(f"sanitize: ASan+UBSan kernels: {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd, env=sanitizer_env()).returncode


if __name__ == "__main__":
    sys.exit(main())
