"""Proof that the sanitizer checks catch what they exist for: an out-of-bounds kernel under the
AddressSanitizer build (in a subprocess, so the abort cannot take this process down), a kernel
missing a __syncthreads under the ThreadSanitizer replay, their correct twins accepted, and a sanitizer
run (`python -m ...sanitize`) whose report survives the abort it causes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aclnn_gpu.emulator import EmuModule, record_to
from aclnn_gpu.emulator import tsan
from aclnn_gpu.emulator.sanitize import sanitizer_env

pytestmark = pytest.mark.sanitizer
FIX = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]

_ASAN_CHILD = """
import sys, numpy as np
from aclnn_gpu.emulator import EmuModule
m = EmuModule.from_file(sys.argv[1])
kernel = sys.argv[2]
n = 1000
x = np.ones(n, np.float32); y = np.zeros(n, np.float32)
if kernel == "shared_oob":
    m.get_function(kernel)((1,), (64,), (y,))
else:
    m.get_function(kernel)((4,), (256,), (x, y, np.int32(n)))
print("FINISHED", float(y.sum()))
"""


def _asan_run(kernel: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _ASAN_CHILD, str(FIX / "oob.cu"), kernel], cwd=REPO,
                          env=sanitizer_env(), capture_output=True, text=True, timeout=300)


def test_asan_catches_global_out_of_bounds():
    r = _asan_run("scale_oob")
    assert r.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in r.stderr
    assert "oob.cu:6" in r.stderr, r.stderr[-3000:]   # the line of the bad access


def test_asan_catches_shared_out_of_bounds():
    r = _asan_run("shared_oob")
    assert r.returncode != 0
    # UBSan's bounds check sees the constant-size array first; ASan's redzone would catch it otherwise
    assert ("index 64 out of bounds" in r.stderr or "AddressSanitizer: global-buffer-overflow" in r.stderr), \
        r.stderr[-3000:]


def test_asan_accepts_guarded_kernel():
    r = _asan_run("scale_ok")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "FINISHED 2000.0" in r.stdout


def _record(tmp_path, kernel):
    m = EmuModule.from_file(FIX / "racy.cu")
    x = np.random.default_rng(0).standard_normal(4 * 256).astype(np.float32)
    out = np.zeros(4, np.float32)
    with record_to(tmp_path):
        m.get_function(kernel)((4,), (256,), (x, out))
    return out


def test_tsan_replay_catches_missing_syncthreads(tmp_path, capsys):
    _record(tmp_path, "block_sum_racy")
    assert tsan.main([str(tmp_path), "--only-sync", "--max-blocks", "1"]) == 0  # no barrier: filtered out
    assert tsan.main([str(tmp_path), "--max-blocks", "1"]) == 1
    err = capsys.readouterr().err
    assert "ThreadSanitizer: data race" in err and "racy.cu:" in err


def test_tsan_replay_accepts_synchronised_kernel(tmp_path, capsys):
    out = _record(tmp_path, "block_sum_ok")
    assert np.isfinite(out).all()
    assert tsan.main([str(tmp_path), "--only-sync", "--max-blocks", "2"]) == 0
    assert "1 launches of 1 sources replayed" in capsys.readouterr().out


_ABORTING_TEST = '''
import os
import numpy as np
from aclnn_gpu.emulator import EmuModule

def test_out_of_bounds():
    # C-level output on fd 2 just before the abort: pytest's default (fd) capture would discard it
    os.write(2, b"FD2-MARKER before the launch\\n")
    m = EmuModule.from_file(os.environ["OOB_CU"])
    x = np.ones(1000, np.float32); y = np.zeros(1000, np.float32)
    m.get_function("scale_oob")((4,), (256,), (x, y, np.int32(1000)))
'''


def test_sanitizer_run_reports_survive_the_abort(tmp_path):
    """`python -m ...sanitize` over a test whose kernel overflows: the run aborts, and still the log has
    the ASan report (from its log file), what C code wrote on fd 2, the test that was running, and
    the command that replays it with the run's seed."""
    (tmp_path / "test_aborts.py").write_text(_ABORTING_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("ACLNN_GPU_TEST_TRACE", "PYTEST_CURRENT_TEST")}
    env.update(OOB_CU=str(FIX / "oob.cu"), ACLNN_GPU_TEST_SEED="4242", ACLNN_GPU_SANITIZER_LOGS=str(tmp_path / "logs"),
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "aclnn_gpu.emulator.sanitize", "-q", "-p", "seeding", "-p",
                        "no:cacheprovider", "--rootdir", str(tmp_path), "test_aborts.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 128 + 6, out[-3000:]                    # SIGABRT, as abort_on_error makes it
    assert "FD2-MARKER before the launch" in out, out[-3000:]
    assert "AddressSanitizer: heap-buffer-overflow" in out and "oob.cu:6" in out, out[-3000:]
    assert list((tmp_path / "logs").glob("asan.*")), "the report was not written to its log file"
    assert "the test running then: test_aborts.py::test_out_of_bounds" in out, out[-3000:]
    assert ("replay: ACLNN_GPU_TEST_SEED=4242 python -m aclnn_gpu.emulator.sanitize "
            "test_aborts.py::test_out_of_bounds") in out, out[-3000:]


_DANGLING_CHILD = """
import sys, numpy as np
from aclnn_gpu.emulator import EmuModule, record_to
m = EmuModule.from_file(sys.argv[1])
gone = np.ones(1000, np.float32)
address = gone.ctypes.data
del gone                                   # freed: the pointer below dangles
y = np.zeros(4, np.float32)
with record_to(sys.argv[2]):               # n = 0: the kernel never reads through it
    m.get_function("scale_ok")((1,), (32,), (np.uint64(address), y, np.int32(0)))
print("FINISHED")
"""


def test_launch_recorder_never_reads_freed_memory(tmp_path):
    """The ASan run records launches for the TSan replay; a pointer argument into a freed block (one
    the kernel does not dereference) made the recorder copy freed memory: ASan's heap-use-after-free,
    in the recorder, aborted the run. The launch is recorded as not replayable instead."""
    r = subprocess.run([sys.executable, "-c", _DANGLING_CHILD, str(FIX / "oob.cu"), str(tmp_path)], cwd=REPO,
                       env=sanitizer_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "FINISHED" in r.stdout, r.stderr[-3000:]
    [launches] = tmp_path.glob("launches-*.jsonl")
    [line] = launches.read_text().splitlines()
    assert '"replayable": false' in line and "no resolver knows" in line, line


_STACK_POOL_CHILD = """
import ctypes, sys, numpy as np
from aclnn_gpu.emulator import EmuModule
m = EmuModule(open(sys.argv[1]).read() + "\\n// stack pool test\\n", filename="oob_pool.cu")
libc = ctypes.CDLL(None)
poisoned = libc.__asan_region_is_poisoned
poisoned.restype, poisoned.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
NOREPLACE = 0x22 | 0x100000                      # MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE

def pool():
    base, size = ctypes.c_void_p(), ctypes.c_size_t()
    m._library.lib.emu_stack_pool(ctypes.byref(base), ctypes.byref(size))
    return base.value, size.value

x = np.ones(2048, np.float32); y = np.zeros(2048, np.float32)
m.get_function("scale_ok")((1,), (32,), (x, y, np.int32(2048)))      # a pool of 32 fiber stacks
old, size = pool()
print("stale before growth:", bool(poisoned(old, size)))
# The address space below the pool is taken, so that the grown pool cannot reuse the old range.
print("reserved:", libc.mmap(old - (1 << 30), 1 << 30, 0, NOREPLACE, -1, 0) == old - (1 << 30))
m.get_function("scale_ok")((2,), (1024,), (x, y, np.int32(2048)))    # 1024 fibers: the pool is remapped
new, new_size = pool()
print("moved:", new + new_size <= old or old + size <= new)
print("poisoned after growth:", bool(poisoned(old, size)))
# What CPython did (a pymalloc arena mapped there, then realloc's memcpy): ASan checks the range.
assert libc.mmap(old, size, 3, NOREPLACE, -1, 0) == old   # PROT_READ | PROT_WRITE
ctypes.memset(old, 0, size)
print("FINISHED")
"""


def test_fiber_stack_pool_leaves_no_poison_behind(tmp_path):
    """Every fiber ends in a frame that never returns, whose redzones stay poisoned on its
    stack; the pool unmapped when it grew left that shadow behind, and the next mapping there (a
    pymalloc arena) read as a stack-buffer-underflow to ASan's memcpy check: the ASan run aborted.
    The pool's shadow is cleared before it is unmapped."""
    env = dict(sanitizer_env(), ACLNN_GPU_CACHE=str(tmp_path))   # a library of its own: a fresh pool
    r = subprocess.run([sys.executable, "-c", _STACK_POOL_CHILD, str(FIX / "oob.cu")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    # The scene is set (fibers did poison their stacks; the pool moved away from its old range) ...
    assert "stale before growth: True" in r.stdout and "reserved: True" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "moved: True" in r.stdout, r.stdout
    # ... and nothing of the old pool is poisoned any more: new memory there is plain memory to ASan.
    assert "poisoned after growth: False" in r.stdout, r.stdout
    assert r.returncode == 0 and "FINISHED" in r.stdout, r.stderr[-3000:]
