"""Misused handles and impossible sizes from C, under AddressSanitizer (tests/capi/handle_misuse.c;
docs/HARDENING.md, "Misused handles"). The program is built as C99 and as C++17 with
-fsanitize=address and run on the cpu device: every handle kind of the C ABI destroyed with NULL,
forged (aligned, unaligned, a stack address), given to every other kind's destroy, destroyed twice
and used after its destroy; SIZE_MAX allocations and copies, a 2^61-row 2-D copy, UINT64_MAX array
lengths; the shape arrays released with delete[] (C++). Every answer is a documented code with a
message, never an internal error; a handle given to the wrong destroy stays alive; ASan reports
nothing (a report aborts the program)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import aclnn_gpu as acl

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).with_name("handle_misuse.c")
KINDS = ["tensor", "scalar", "int_array", "float_array", "bool_array", "tensor_list", "scalar_list", "executor",
         "stream", "event", "context", "model", "hccl_comm"]
NULL_IS_NOOP = {"tensor", "scalar", "int_array", "float_array", "bool_array", "tensor_list", "scalar_list",
                "hccl_comm"}   # CANN's destroys of these accept nullptr; the runtime's refuse it
INTERNAL = {int(acl.ACL_ERROR_INTERNAL_ERROR), int(acl.ACLNN_ERR_INNER), int(acl.HCCL_E_INTERNAL),
            int(acl.ACL_ERROR_RT_INTERNAL_ERROR)}
SIZE_CASES = ["malloc_size_max", "malloc_host_size_max", "memcpy_d2d_count_max", "memcpy_h2d_count_max",
              "memcpy_d2h_count_max", "memset_count_max", "memcpy2d_height_2_61", "memcpy2d_h2d_height_2_61",
              "memcpy2d_width_max", "int_array_uint64_max", "float_array_uint64_max", "bool_array_uint64_max",
              "tensor_list_uint64_max"]


def _env() -> dict:
    return dict(os.environ, ACLNN_GPU_DEVICE="cpu",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_odr_violation=0")


@pytest.fixture(scope="module")
def flags() -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "aclnn_gpu.capi", "--cflags", "--libs"], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize("lang", ["c", "cpp"])
def test_misused_handles_and_sizes_from_c_under_asan(lang, flags, tmp_path):
    program = tmp_path / f"handle_misuse_{lang}"
    compiler = ["gcc", "-std=c99"] if lang == "c" else ["g++", "-x", "c++", "-std=c++17"]
    cmd = [*compiler, "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-fsanitize=address", str(SOURCE), "-o",
           str(program), "-pthread", *flags]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if build.returncode != 0 and "asan" in build.stderr:
        pytest.skip(f"no AddressSanitizer runtime: {build.stderr[-300:]}")
    assert build.returncode == 0, " ".join(cmd) + "\n" + build.stderr
    proc = subprocess.run([str(program)], env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "survived" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "make " not in proc.stdout, proc.stdout
    seen: dict[tuple[str, str], int] = {}
    alive = {}
    for line in proc.stdout.splitlines():
        words = line.split(" ", 4)
        if words[0] == "alive":
            alive[words[1]] = int(words[2])
            continue
        if words[0] != "case":
            continue
        kind, what, code = words[1], words[2], int(words[3])
        message = words[4] if len(words) > 4 else ""
        seen[kind, what] = code
        if what in ("destroy", "view_shape", "view_strides", "storage_shape") or (what == "null" and kind in NULL_IS_NOOP):
            assert code == 0, line
            continue
        assert code != 0, f"accepted: {line}"
        assert code not in INTERNAL, f"internal error: {line}"
        assert message.strip(), f"no message: {line}"
    assert alive == {kind: 0 for kind in KINDS}, f"a wrong destroy released or broke a handle: {alive}"
    for kind in KINDS:
        for what in ["null", "forged_aligned", "forged_unaligned", "forged_stack", "destroyed_twice",
                     "used_after_destroy", *(f"given_to_{other}" for other in KINDS if other != kind)]:
            assert (kind, what) in seen, f"case {kind} {what} did not run"
    assert all(("size", what) in seen for what in SIZE_CASES)
    print(f"C ABI misuse under ASan ({lang}): {len(KINDS)} handle kinds x (NULL, 3 forged, {len(KINDS) - 1} "
            f"wrong kinds, twice, after destroy) + {len(SIZE_CASES)} impossible sizes = {len(seen)} cases: "
            "no internal error, no ASan report")
