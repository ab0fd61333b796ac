"""The C ABI from C and C++ programs: the five C++ sample programs of examples/cpp and the C program
of examples/c, compiled with g++ / gcc against `python -m aclnn_gpu.capi --cflags --libs`, run on the
cpu and emulated devices, their printed results checked against PyTorch (float64); bad input through
the C ABI (tests/capi/bad_input.c) answered with the Python API's codes and messages; threads of a C
program; memory over create/run/destroy cycles (tests/capi/cycles.c); pkg-config and CMake; the
headers' constants against the Python enums; the guard for functions the package does not have.

Every program is compiled once per session (one g++ call each) into the session's temporary folder.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aclnn_gpu as acl

pytest.importorskip("cffi")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BACKWARD_SAMPLES = ["ctc_loss_backward", "cross_entropy_loss_grad", "kl_div_backward", "conv_tbc_backward",
                    "scaled_masked_softmax_backward"]
FORWARD_SAMPLES = ["ctc_loss", "cross_entropy_loss", "kl_div", "conv_tbc", "scaled_masked_softmax"]
SAMPLES = BACKWARD_SAMPLES + FORWARD_SAMPLES
CXX, CC = os.environ.get("CXX", "g++"), os.environ.get("CC", "gcc")


def _env(device: str) -> dict:
    return dict(os.environ, ACLNN_GPU_DEVICE=device,
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="session")
def flags() -> list[str]:
    """`python -m aclnn_gpu.capi --cflags --libs`, exactly as a user runs it (builds the library if needed)."""
    proc = subprocess.run([sys.executable, "-m", "aclnn_gpu.capi", "--cflags", "--libs"], env=_env("cpu"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "-lascendcl" in lines[0] and "-I" in lines[0], proc.stdout
    return lines[0].split()


@pytest.fixture(scope="session")
def compile_program(flags, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("capi_programs")
    built: dict[Path, Path] = {}

    def compile_(source: Path, extra=()) -> Path:
        if source not in built:
            is_c = source.suffix == ".c"
            cmd = ([CC, "-std=c99", "-pedantic", "-Werror"] if is_c else [CXX, "-std=c++17"])
            cmd += ["-Wall", "-Wextra", "-O1", f"-I{source.parent}", str(source), "-o",
                    str(out_dir / source.stem), "-pthread", *extra, *flags]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, " ".join(cmd) + "\n" + proc.stderr
            built[source] = out_dir / source.stem
        return built[source]

    return compile_


def run(program: Path, device: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(program), *args], env=_env(device), capture_output=True, text=True, timeout=timeout)


def parse(stdout: str) -> tuple[dict, dict]:
    """The printed inputs ("input name [d0,d1] : v ...") and results ("name[i] is: v")."""
    inputs, results = {}, {}
    for line in stdout.splitlines():
        m = re.match(r"input (\w+) \[([\d,]*)\] :(.*)$", line)
        if m:
            shape = tuple(int(d) for d in m.group(2).split(",") if d)
            inputs[m.group(1)] = np.array([float(v) for v in m.group(3).split()], np.float64).reshape(shape)
        m = re.match(r"(\w+)\[(\d+)\] is: (\S+)$", line)
        if m:
            results.setdefault(m.group(1), []).append(float(m.group(3)))
    return inputs, {k: np.array(v) for k, v in results.items()}


def t64(a) -> torch.Tensor:
    return torch.tensor(np.asarray(a, np.float64))


def reference(name: str, x: dict) -> dict:
    """PyTorch CPU float64 for each sample's printed inputs."""
    if name in ("kl_div_backward", "kl_div_backward_c"):
        self = t64(x["self"]).requires_grad_()
        reduction = {0: "none", 1: "mean", 2: "sum", 3: "batchmean"}[int(x["reduction"])]
        loss = torch.nn.functional.kl_div(self, t64(x["target"]), reduction=reduction,  # (PyTorch warns on "mean")
                                          log_target=bool(x["logTarget"]))
        (loss * t64(x["gradOutput"])).sum().backward()
        return {"result": self.grad.numpy()}
    if name == "cross_entropy_loss_grad":
        logits = t64(x["logProb"]).requires_grad_()   # log_softmax(logProb) == logProb
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(x["target"].astype(np.int64)),
                                                 weight=t64(x["weight"]), ignore_index=int(x["ignoreIndex"]))
        (loss * t64(x["gradLoss"])).backward()
        return {"result": logits.grad.numpy()}
    if name == "conv_tbc_backward":
        inp, w, b = (t64(x[k]).requires_grad_() for k in ("input", "weight", "bias"))
        torch.conv_tbc(inp, w, b, int(x["pad"])).backward(t64(x["self"]))
        return {"gradInput": inp.grad.numpy(), "gradWeight": w.grad.numpy(), "gradBias": b.grad.numpy()}
    if name == "scaled_masked_softmax_backward":
        g, y = t64(x["gradOutput"]), t64(x["y"])
        grad = torch.ops.aten._softmax_backward_data(g, y, -1, torch.float64) * float(x["scale"])
        return {"result": grad.masked_fill(torch.tensor(x["mask"] != 0), 0.0).numpy()}
    if name == "ctc_loss_backward":
        lp, tg = t64(x["logProbs"]), torch.tensor(x["targets"].astype(np.int64))
        il, tl = [int(v) for v in x["inputLengths"]], [int(v) for v in x["targetLengths"]]
        blank = int(x["blank"])
        nll, alpha = torch.ops.aten._ctc_loss(lp, tg, il, tl, blank, False)
        grad = torch.ops.aten._ctc_loss_backward(t64(x["gradOut"]), lp, tg, il, tl, nll, alpha, blank, False)
        return {"negLogLikelihood": nll.numpy(), "result": grad.numpy()}
    if name == "kl_div":
        reduction = {0: "none", 1: "mean", 2: "sum", 3: "batchmean"}[int(x["reduction"])]
        loss = torch.nn.functional.kl_div(t64(x["self"]), t64(x["target"]), reduction=reduction,
                                          log_target=bool(x["logTarget"]))
        return {"result": loss.numpy()}
    if name == "cross_entropy_loss":
        logits, target = t64(x["input"]), torch.tensor(x["target"].astype(np.int64))
        loss = torch.nn.functional.cross_entropy(logits, target, weight=t64(x["weight"]),
                                                 ignore_index=int(x["ignoreIndex"]))
        return {"loss": loss.numpy(), "logProb": torch.log_softmax(logits, -1).numpy()}
    if name == "conv_tbc":
        return {"result": torch.conv_tbc(t64(x["input"]), t64(x["weight"]), t64(x["bias"]), int(x["pad"])).numpy()}
    if name == "scaled_masked_softmax":
        mask = torch.tensor(x["mask"] != 0)
        y = torch.softmax((t64(x["x"]) * float(x["scale"])).masked_fill(mask, -float("inf")), -1)
        return {"result": y.masked_fill(mask, 0.0).numpy()}
    if name == "ctc_loss":
        lp, tg = t64(x["logProbs"]), torch.tensor(x["targets"].astype(np.int64))
        il, tl = [int(v) for v in x["inputLengths"]], [int(v) for v in x["targetLengths"]]
        nll, _ = torch.ops.aten._ctc_loss(lp, tg, il, tl, int(x["blank"]), False)
        return {"negLogLikelihood": nll.numpy()}
    raise AssertionError(name)


def check_padded_log_alpha(stdout: str) -> None:
    """ctc_loss.cpp's logAlpha (N, T, (2*maxL+1+7)//8*8), the layout of Atlas A2/A3: its first
    2*maxL+1 columns are PyTorch's log_alpha (N, T, 2*maxL+1) where PyTorch writes it (t < inputLengths[n],
    s < 2*targetLengths[n]+1) and finite, and -inf (or below any reachable log-probability) where PyTorch's
    is -inf; the padding columns are not read."""
    x, results = parse(stdout)
    lp, tg = t64(x["logProbs"]), torch.tensor(x["targets"].astype(np.int64))
    il, tl = [int(v) for v in x["inputLengths"]], [int(v) for v in x["targetLengths"]]
    _, alpha = torch.ops.aten._ctc_loss(lp, tg, il, tl, int(x["blank"]), False)
    N, T, S = alpha.shape
    width = (S + 7) // 8 * 8
    assert width == 16 and results["logAlpha"].size == N * T * width
    got = results["logAlpha"].reshape(N, T, width)[:, :, :S]
    want = alpha.numpy()
    written = np.zeros(want.shape, bool)   # PyTorch leaves the rest of its log_alpha uninitialised
    for n in range(N):
        written[n, :il[n], :2 * tl[n] + 1] = True
    finite, unreachable = written & np.isfinite(want), written & np.isneginf(want)
    assert finite.sum() > 50 and unreachable.sum() > 10
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)
    assert (got[unreachable] < -1e30).all()


def check_against_torch(name: str, stdout: str) -> None:
    inputs, results = parse(stdout)
    expected = reference(name, inputs)
    assert set(expected) <= set(results), (sorted(results), sorted(expected))
    for key, want in expected.items():
        got = results[key]
        assert got.size == want.size, key
        np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-4, atol=1e-5 * (1 + np.abs(want).max()),
                                   err_msg=f"{name}: {key}")
        assert np.isfinite(got).all()


@pytest.mark.parametrize("device", ["cpu", "emulated"])
@pytest.mark.parametrize("name", SAMPLES)
def test_cpp_sample(name, device, compile_program):
    program = compile_program(ROOT / "examples" / "cpp" / f"{name}.cpp")
    proc = run(program, device)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_against_torch(name, proc.stdout)
    if name == "ctc_loss":
        check_padded_log_alpha(proc.stdout)


def test_every_operator_has_a_cpp_sample():
    """The five backward operators and their five forwards, each one program."""
    assert sorted(p.stem for p in (ROOT / "examples" / "cpp").glob("*.cpp")) == sorted(SAMPLES)


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_c_program(device, compile_program):
    """Plain C99 (-pedantic -Werror) including every header of the C ABI."""
    program = compile_program(ROOT / "examples" / "c" / "kl_div_backward.c")
    proc = run(program, device)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_against_torch("kl_div_backward_c", proc.stdout)


def test_device_kind_that_cannot_run_is_refused(compile_program):
    """ACLNN_GPU_DEVICE=cuda on a machine without a GPU: aclrtSetDevice returns ACL_ERROR_RT_NO_DEVICE
    with the Python API's message, as from Python (a GPU machine runs the program instead)."""
    from aclnn_gpu.device.cuda import cuda_available
    proc = run(compile_program(ROOT / "examples" / "c" / "kl_div_backward.c"), "cuda")
    if cuda_available():
        assert proc.returncode == 0, proc.stdout[-3000:]
        check_against_torch("kl_div_backward_c", proc.stdout)
        return
    assert proc.returncode == 1
    assert "aclrtSetDevice(0) failed. ERROR: 207004" in proc.stdout, proc.stdout
    assert "aclGetRecentErrMsg: aclrtSetDevice: ACLNN_GPU_DEVICE=cuda" in proc.stdout, proc.stdout


def test_sample_failure_reports_the_code_and_message(compile_program, tmp_path):
    """CHECK_RET of a C++ sample prints CANN's code and aclGetRecentErrMsg and exits non-zero (blank 7)."""
    source = (ROOT / "examples/cpp/ctc_loss_backward.cpp").read_text()
    broken = source.replace("X = 2 * maxL + 1, blank = 0", "X = 2 * maxL + 1, blank = 7")
    assert broken != source
    (tmp_path / "acl_sample.h").write_text((ROOT / "examples/cpp/acl_sample.h").read_text())
    (tmp_path / "broken.cpp").write_text(broken)
    proc = run(compile_program(tmp_path / "broken.cpp"), "cpu")
    assert proc.returncode != 0
    assert "aclnnCtcLossGetWorkspaceSize failed. ERROR: 161002" in proc.stdout
    assert "aclGetRecentErrMsg: aclnnCtcLoss: blank (7)" in proc.stdout, proc.stdout[-2000:]


# ----------------------------------------------------------------------------- bad input
def _python_answers() -> dict[str, tuple[int, str]]:
    """The Python API's (code, message) for the mistakes of bad_input.c that have a Python spelling."""
    H2D = acl.ACL_MEMCPY_HOST_TO_DEVICE
    out = {}

    def note(name, result):
        code = -1 if result is None else (result if isinstance(result, int) else result[0])
        out[name] = (int(code), acl.aclGetRecentErrMsg())

    acl.aclrtSetDevice(0)
    _, stream = acl.aclrtCreateStream()
    bufs, ts = [], []
    for i in range(4):
        _, ptr = acl.aclrtMalloc(64, 0)
        acl.aclrtMemcpy(ptr, 64, np.ones(6, np.float32), 24, H2D)
        bufs.append(ptr)
        shape = [] if i == 0 else [2, 3]
        ts.append(acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, ptr))
    g, s, t, o = ts
    nd = acl.ACL_FORMAT_ND
    note("create_bad_dtype", acl.aclCreateTensor([2, 3], 99, None, 0, nd, [2, 3], bufs[1]))
    note("create_bad_format", acl.aclCreateTensor([2, 3], acl.ACL_FLOAT, None, 0, 77, [2, 3], bufs[1]))
    note("create_negative_dim", acl.aclCreateTensor([2, -3], acl.ACL_FLOAT, None, 0, nd, None, bufs[1]))
    note("int_array_null", acl.aclCreateIntArray(None))
    note("null_self", acl.aclnnKlDivBackwardGetWorkspaceSize(g, None, t, 1, False, o))
    note("bad_reduction", acl.aclnnKlDivBackwardGetWorkspaceSize(g, s, t, 7, False, o))
    _, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(g, s, t, 1, False, o)
    note("first_run", acl.aclnnKlDivBackward(None, ws, ex, stream))
    note("executor_used_twice", acl.aclnnKlDivBackward(None, ws, ex, stream))
    note("destroy_spent_executor", acl.aclDestroyAclOpExecutor(ex))
    note("executor_used_after_destroy", acl.aclnnKlDivBackward(None, ws, ex, stream))
    note("null_executor", acl.aclnnKlDivBackward(None, 0, None, stream))
    note("repeatable_null", acl.aclSetAclOpExecutorRepeatable(None))
    note("destroy_executor_null", acl.aclDestroyAclOpExecutor(None))
    note("destroy_tensor", acl.aclDestroyTensor(s))
    note("destroyed_tensor", acl.aclnnKlDivBackwardGetWorkspaceSize(g, s, t, 1, False, o))
    note("destroy_tensor_twice", acl.aclDestroyTensor(s))
    note("destroy_tensor_null", acl.aclDestroyTensor(None))
    note("malloc_zero", acl.aclrtMalloc(0, 0))
    note("memcpy_too_long", acl.aclrtMemcpy(bufs[2], 64, np.ones(32, np.float32), 128, H2D))
    note("memcpy_bad_kind", acl.aclrtMemcpy(bufs[2], 64, np.ones(1, np.float32), 4, 9))
    note("memcpy_null_src", acl.aclrtMemcpy(bufs[2], 64, None, 4, H2D))
    _, dead = acl.aclrtCreateStream()
    acl.aclrtDestroyStream(dead)
    note("destroyed_stream_sync", acl.aclrtSynchronizeStream(dead))
    note("destroyed_stream_destroy", acl.aclrtDestroyStream(dead))
    note("set_device_99", acl.aclrtSetDevice(99))
    for tensor in (g, t, o):
        acl.aclDestroyTensor(tensor)
    for ptr in bufs:
        acl.aclrtFree(ptr)
    acl.aclrtDestroyStream(stream)
    return out


# The C-only mistakes (no Python spelling): CANN's codes.
C_ONLY = {
    "create_null_dims": -1, "null_workspace_size_out": 161001, "null_executor_out": 161001,
    "never_created_tensor": 161002, "never_created_executor": 161002, "repeatable_never_created": 161002,
    "free_foreign": 107000, "free_null": 107000, "malloc_null_out": 107000, "memcpy_foreign_device": 107000,
    "stream_create_null_out": 107000, "never_created_stream": 107000, "never_created_event": 107000,
    "first_run_phase1": 0,
}


def test_bad_input_through_the_c_abi(compile_program, cpu_session):
    """Each case answers C as Python answers it: the same code, and the message in C's words
    (`bridge.c_words`: nullptr for Python's None / null, no UnknownHandle)."""
    from aclnn_gpu.capi.rules import c_words
    proc = run(compile_program(HERE / "bad_input.c"), "cpu")
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("survived"), proc.stdout[-3000:] + proc.stderr
    cases = {}
    for line in proc.stdout.splitlines():
        if line.startswith("case "):
            _, name, code, message = (line.split(" ", 3) + [""])[:4]
            cases[name] = (int(code), message)
    python = _python_answers()
    assert set(cases) == set(python) | set(C_ONLY), sorted(set(cases) ^ (set(python) | set(C_ONLY)))
    for name, (code, message) in python.items():
        assert cases[name][0] == code, (name, cases[name], code, message)
        if code != 0:
            assert cases[name][1] == c_words(message), (name, cases[name][1], message)
            assert not re.search(r"\bNone\b|UnknownHandle", cases[name][1]), (name, cases[name][1])
    for name, code in C_ONLY.items():
        assert cases[name][0] == code, (name, cases[name])
        if code != 0:
            assert cases[name][1].startswith(("acl", "aclnn")), (name, cases[name])


def test_threads_of_a_c_program(compile_program):
    proc = run(compile_program(HERE / "threads.c"), "cpu")
    assert proc.returncode == 0 and "threads ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("device", ["cpu", "emulated"])
@pytest.mark.parametrize("mode, code", [("return", 0), ("finalize", 0), ("exit", 7)])
def test_c_program_exits_cleanly_with_work_queued(compile_program, device, mode, code):
    """tests/capi/exit_queued.c ends with work queued (main returns, aclFinalize without a
    synchronize, exit() while threads call the operator): its own exit code, no signal, nothing on
    stderr but what it wrote (the C ABI stops the streams at exit, before the libraries' destructors)."""
    proc = run(compile_program(HERE / "exit_queued.c"), device, mode)
    assert (proc.returncode, proc.stderr) == (code, "exiting\n"), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout == "queued\n"


def test_memory_over_cycles(compile_program):
    """10,000 create/run/destroy cycles (ACLNN_GPU_MEMORY_CYCLES): RSS after the warm-up tenth grows < 20 MB."""
    cycles = int(os.environ.get("ACLNN_GPU_MEMORY_CYCLES", "10000"))
    proc = run(compile_program(HERE / "cycles.c"), "cpu", str(cycles), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warm, end = map(int, re.search(r"rss (\d+) (\d+)", proc.stdout).groups())
    assert warm > 0 and end - warm < 20 * 1024, (warm, end)


# ----------------------------------------------------------------------------- build systems, headers, guards
def test_pkg_config_and_cmake(flags, tmp_path):
    prefix = subprocess.run([sys.executable, "-m", "aclnn_gpu.capi", "--prefix"], env=_env("cpu"),
                            capture_output=True, text=True, check=True).stdout.strip()
    lib64 = Path(prefix) / "lib64"
    for name in ("libascendcl.so", "libnnopbase.so", "libopapi.so", "libopapi_nn.so", "libopapi_math.so"):
        assert (lib64 / name).exists(), name
    pc = (lib64 / "pkgconfig" / "aclnn_gpu.pc").read_text()
    assert "-lascendcl" in pc and "prefix=${pcfiledir}/../.." in pc   # found from its own place (a copy works)
    if shutil.which("pkg-config"):
        proc = subprocess.run(["pkg-config", "--cflags", "--libs", "aclnn_gpu"], capture_output=True, text=True,
                              env=dict(os.environ, PKG_CONFIG_PATH=str(lib64 / "pkgconfig")))
        assert proc.returncode == 0 and "-lascendcl" in proc.stdout, proc.stderr
        include = next(w[2:] for w in proc.stdout.split() if w.startswith("-I"))
        assert Path(include).resolve() == Path(prefix).resolve() / "include"
    if not shutil.which("cmake"):
        pytest.skip("no cmake on this machine (pkg-config checked)")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(kl C)\nfind_package(aclnn_gpu REQUIRED)\n"
        f"add_executable(kl {ROOT / 'examples/c/kl_div_backward.c'})\n"
        "target_link_libraries(kl aclnn_gpu::ascendcl aclnn_gpu::nnopbase aclnn_gpu::opapi)\n")
    cmake_dir = lib64 / "cmake" / "aclnn_gpu"
    for cmd in (["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "b"), f"-Daclnn_gpu_DIR={cmake_dir}"],
                ["cmake", "--build", str(tmp_path / "b")]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = run(tmp_path / "b" / "kl", "cpu")
    assert proc.returncode == 0, proc.stdout[-2000:]
    check_against_torch("kl_div_backward_c", proc.stdout)


def test_header_constants_match_the_python_enums(flags, tmp_path):
    """Every CANN constant the headers define has the Python API's number (compile-time asserts, in C++:
    acl_base.h keeps the generic codes as `static const int`, as CANN does, which C cannot assert on)."""
    from aclnn_gpu.base import status
    from aclnn_gpu.capi.table import INCLUDE_DIR
    text = "\n".join(p.read_text() for p in INCLUDE_DIR.rglob("*.h"))
    checks = []
    for enum_cls in vars(status).values():
        if isinstance(enum_cls, type) and issubclass(enum_cls, int) and enum_cls is not int:
            for member in enum_cls:
                if re.search(rf"\b{member.name}\b", text):
                    checks.append(f'static_assert({member.name} == {int(member)}, "{member.name}");')
    assert len(checks) > 100, len(checks)
    source = tmp_path / "constants.cpp"
    source.write_text('#include "acl/acl.h"\n#include "aclnn/acl_meta.h"\n#include "hccl/hccl.h"\n'
                      "int main(void) {\n" + "\n".join(checks) + "\nreturn 0;\n}\n")
    proc = subprocess.run([CXX, "-std=c++17", "-c", str(source), "-o", str(tmp_path / "c.o"),
                           *[f for f in flags if f.startswith("-I")]], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_functions_missing_from_the_package_are_refused(flags):
    """A declared function whose Python name the package lacks returns the feature-unsupported code of
    its library with a message (the §8 names until their modules are merged); none crashes."""
    from aclnn_gpu.capi.bridge import python_function
    from aclnn_gpu.capi.table import entries
    missing = [e for e in entries() if e.returns == "status" and python_function(e) is None]
    if not missing:   # every declaration is implemented: the guard itself, on made-up declarations
        import cffi
        from aclnn_gpu.capi.bridge import make_wrapper
        from aclnn_gpu.capi.table import Entry
        for restype, code in (("aclError", 200006), ("aclnnStatus", 361001), ("HcclResult", 5)):
            wrapper = make_wrapper(cffi.FFI(), Entry("aclNoSuchFunction", restype, (), "acl/acl_rt.h"), None)
            assert wrapper() == code
            assert acl.aclGetRecentErrMsg().startswith("aclNoSuchFunction: not available"), acl.aclGetRecentErrMsg()
        return
    lib = Path(next(f[2:] for f in flags if f.startswith("-L"))) / "libascendcl.so"
    code = ("import ctypes, sys\nlib = ctypes.CDLL(sys.argv[1])\nlib.aclGetRecentErrMsg.restype = ctypes.c_char_p\n"
            "for name in sys.argv[2:]:\n    print(name, getattr(lib, name)(), lib.aclGetRecentErrMsg().decode())\n")
    proc = subprocess.run([sys.executable, "-c", code, str(lib), *[e.name for e in missing]], env=_env("cpu"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = {"aclError": 200006, "HcclResult": 5}
    for e, line in zip(missing, proc.stdout.splitlines()):
        name, code_, message = line.split(" ", 2)
        assert name == e.name and int(code_) == want[e.restype], line
        assert message.startswith(f"{e.name}: not available"), line


def test_a_python_host_keeps_its_interpreter(flags, cpu_session):
    """Loaded into a process that already runs Python (here: this one, through ctypes), the library uses
    that interpreter and the objects the C calls create are this process's Python objects."""
    import ctypes
    from aclnn_gpu.capi.handles import UnknownHandle, handles
    lib = ctypes.CDLL(str(Path(next(f[2:] for f in flags if f.startswith("-L"))) / "libascendcl.so"))
    lib.aclGetRecentErrMsg.restype = ctypes.c_char_p
    lib.aclCreateTensor.restype = ctypes.c_void_p
    count = ctypes.c_uint32(0)
    assert lib.aclrtGetDeviceCount(ctypes.byref(count)) == 0 and count.value >= 1
    _, ptr = acl.aclrtMalloc(64, 0)
    dims = (ctypes.c_int64 * 2)(2, 3)
    tensor = lib.aclCreateTensor(dims, ctypes.c_uint64(2), acl.ACL_FLOAT, None, ctypes.c_int64(0), acl.ACL_FORMAT_ND,
                                 dims, ctypes.c_uint64(2), ctypes.c_void_p(ptr))
    assert tensor, lib.aclGetRecentErrMsg()
    obj = handles.get(tensor)
    assert isinstance(obj, acl.aclTensor) and obj.shape == (2, 3) and obj.data == ptr
    assert lib.aclDestroyTensor(ctypes.c_void_p(tensor)) == 0 and obj.destroyed
    assert lib.aclDestroyTensor(ctypes.c_void_p(tensor)) == acl.ACLNN_ERR_PARAM_INVALID
    assert lib.aclGetRecentErrMsg() == b"aclDestroyTensor: tensor was already destroyed"
    assert isinstance(handles.get(0x1230), UnknownHandle)
    assert acl.aclrtFree(ptr) == 0


def test_hccl_through_the_c_abi(compile_program):
    """HcclGetRootInfo / HcclCommInitRootInfo / rank queries / HcclAllReduce / HcclCommDestroy from C, one rank."""
    if not hasattr(acl, "HcclAllReduce"):
        pytest.skip("this aclnn_gpu has no HCCL functions (the C ABI answers HCCL_E_NOT_SUPPORT)")
    proc = run(compile_program(HERE / "hccl.c"), "cpu", timeout=300)
    assert proc.returncode == 0 and "hccl ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "destroyed comm -> 1 HcclGetRankSize: comm was destroyed" in proc.stdout


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_capture_through_the_c_abi(compile_program, device):
    """tests/capi/capture.c: aclmdlRI* from C (states, refusals, a replay on another stream); the
    replayed KlDivBackward ("none" reduction) gives -target * grad."""
    proc = run(compile_program(HERE / "capture.c"), device)
    assert proc.returncode == 0 and "capture ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    values = [float(v) for v in re.search(r"replayed:(.*)", proc.stdout).group(1).split()]
    np.testing.assert_allclose(values, [-0.5, -0.25, -0.125, -1.0], rtol=1e-6)


def test_handle_keys_are_dense_and_unaligned_values_never_meet_them():
    """The table's key of a handle (the generated C rotates the value right by 4 bits): handles map to
    consecutive keys (a dict spreads them), every value maps back, and a value that is not a multiple of
    16 (a stray pointer into a handle) never has a live handle's key."""
    from aclnn_gpu.capi.handles import HANDLE_BASE, handle_of, key_of
    handles_ = [HANDLE_BASE + 16 * n for n in range(1, 6)]
    keys = [key_of(h) for h in handles_]
    assert [k - keys[0] for k in keys] == [0, 1, 2, 3, 4]
    for value in [*handles_, 0x1233, 2**64 - 8, HANDLE_BASE + 16 + 8]:
        assert handle_of(key_of(value)) == value
    assert all(key_of(h + off) not in keys for h in handles_ for off in range(1, 16))


def test_every_declared_function_is_marshalled_in_c_and_other_kinds_fall_back():
    """Every function of the headers with a status or handle answer and the generic kinds crosses
    through the generated C marshalling and a written-out Python wrapper; a custom conversion, a
    value answer, or a parameter kind the generator does not know crosses as declared
    (bridge.generic_wrapper)."""
    from aclnn_gpu.capi.build import marshalled
    from aclnn_gpu.capi.table import Entry, Param, entries
    from aclnn_gpu.capi.custom import CONVERSIONS
    assert all(marshalled(e) for e in entries()
               if e.returns in ("status", "handle") and e.name not in CONVERSIONS
               and all(p.kind != "handle_array" for p in e.params))
    assert sum(marshalled(e) for e in entries()) > 100
    odd = Entry("aclOdd", "aclError", (Param("const aclTensor *const *", "value", "handle_array", "aclTensor"),),
                "acl/acl_rt.h")
    assert not marshalled(odd)


def test_generic_wrapper_converts_declared_arguments(cpu_session, monkeypatch):
    """bridge.generic_wrapper, the path of a declaration the C does not marshal, run here on declared
    cffi arguments for functions whose written-out wrappers the C programs test: the same codes,
    out-parameters, handles and retirements."""
    cffi = pytest.importorskip("cffi")
    from aclnn_gpu.capi.bridge import generic_wrapper, handles
    from aclnn_gpu.capi.table import entries
    ffi = cffi.FFI()
    ffi.cdef("typedef struct { char internal[4108]; } HcclRootInfo; typedef struct aclTensor aclTensor;"
             "typedef struct aclOpExecutor aclOpExecutor; typedef void *aclrtStream;")
    E = {e.name: e for e in entries()}
    from aclnn_gpu import runtime   # as after a C program's aclInit (the C callers' runtime rule)
    monkeypatch.setattr(runtime.acl_state, "initialized", True)

    def wrap(name):
        return generic_wrapper(ffi, E[name], getattr(acl, name))

    count = ffi.new("uint32_t *")
    assert wrap("aclrtGetDeviceCount")(count) == 0 and count[0] >= 1
    assert wrap("aclrtGetDeviceCount")(ffi.NULL) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert acl.aclGetRecentErrMsg() == "aclrtGetDeviceCount: count is nullptr (out-parameter)"   # C's words
    ptrs = [acl.aclrtMalloc(64, 0)[1] for _ in range(4)]
    dims = ffi.new("int64_t[]", [2, 3])
    make = wrap("aclCreateTensor")
    tensors = [make(dims, 2, acl.ACL_FLOAT, ffi.NULL, 0, acl.ACL_FORMAT_ND, dims, 2, ffi.cast("void *", ptr))
               for ptr in ptrs[:3]]
    scalar = make(dims, 0, acl.ACL_FLOAT, ffi.NULL, 0, acl.ACL_FORMAT_ND, dims, 0, ffi.cast("void *", ptrs[3]))
    assert all(t != ffi.NULL for t in tensors) and scalar != ffi.NULL
    assert handles.get(int(ffi.cast("uintptr_t", tensors[0]))).shape == (2, 3)
    ws, ex = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    g, s, t = scalar, tensors[0], tensors[1]
    assert wrap("aclnnKlDivBackwardGetWorkspaceSize")(g, s, t, 1, False, tensors[2], ws, ex) == 0
    run = wrap("aclnnKlDivBackward")
    stream = ffi.cast("aclrtStream", handles.new(cpu_session.stream))
    assert run(ffi.NULL, ws[0], ex[0], stream) == 0, acl.aclGetRecentErrMsg()
    assert run(ffi.NULL, ws[0], ex[0], stream) == acl.ACLNN_ERR_PARAM_INVALID   # spent: retired, remembered
    assert "already" in acl.aclGetRecentErrMsg()
    destroy = wrap("aclDestroyTensor")
    assert all(destroy(x) == 0 for x in (*tensors, scalar))
    assert destroy(tensors[0]) == acl.ACLNN_ERR_PARAM_INVALID
    assert acl.aclGetRecentErrMsg() == "aclDestroyTensor: tensor was already destroyed"
    assert acl.aclrtSynchronizeStream(cpu_session.stream) == 0 and all(acl.aclrtFree(p) == 0 for p in ptrs)


# Instructions per call through the C ABI (bench/README.md, "C ABI call overhead": 5,450 and 49,161
# when set), with 1.5x headroom as bench/callgrind_ceilings.json has: only a real regression (the
# generic per-parameter path costs 13,500 and 89,000) crosses one.
C_ABI_CEILINGS = {"trivial": 8_200, "pair": 74_000}


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind (callgrind) is not installed")
def test_c_abi_instruction_counts_stay_under_their_ceilings(flags):
    """bench/capi_bench.c's measured loops under callgrind (deterministic whatever the machine's load):
    aclrtGetDeviceCount and KlDivBackward GetWorkspaceSize + execute on empty tensors, from C."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench.capi import _compile, _counting_env, c_counts
    finally:
        sys.path.remove(str(ROOT))
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        counts = c_counts(_compile(tmp), 300, _counting_env())
    for what, ceiling in C_ABI_CEILINGS.items():
        assert 0 < counts[what] < ceiling, (what, counts[what], ceiling)


# ----------------------------------------------------------------------------- CANN's idioms, C99 and C++17
@pytest.fixture(scope="session")
def idioms(flags, tmp_path_factory) -> dict[str, Path]:
    """tests/capi/cann_idioms.c built as C99 (-pedantic) and as C++17, both with -Wall -Wextra -Werror."""
    out = tmp_path_factory.mktemp("idioms")
    source = HERE / "cann_idioms.c"
    built = {}
    for lang, cmd in (("c99", [CC, "-std=c99", "-pedantic"]), ("c++17", [CXX, "-std=c++17", "-x", "c++"])):
        program = out / f"idioms_{lang}"
        full = [*cmd, "-Wall", "-Wextra", "-Werror", str(source), "-x", "none", "-o", str(program), "-pthread",
                *flags, "-lm"]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, " ".join(full) + "\n" + proc.stderr
        built[lang] = program
    return built


@pytest.mark.parametrize("device", ["cpu", "emulated"])
@pytest.mark.parametrize("lang", ["c99", "c++17"])
def test_cann_idioms_compile_and_run(idioms, lang, device):
    """Tagged enums, level2/ paths, aclnn_util.h, op_errno.h, ge_error_codes.h; the half conversions,
    contexts, stream query, memory info, copy kinds 5-7, out-arrays, lists, a repeatable executor
    rebound by aclSet{Input,Output}TensorAddr (its second run reads the new target, writes the new
    out), messages without Python's words, and the init rules (refused before aclInit and after
    aclFinalize with 100001 / 361001, aclnnInit opening the runtime)."""
    proc = run(idioms[lang], device)
    assert proc.returncode == 0 and "idioms ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_every_header_compiles_alone_in_c99_and_cpp(flags, tmp_path):
    """Each header, included first and alone, compiles as C99 (-pedantic) and C++17 with -Werror."""
    from aclnn_gpu.capi.table import headers
    for i, header in enumerate(headers()):
        source = tmp_path / f"h{i}.c"
        source.write_text(f'#include "{header}"\nint main(void) {{ return 0; }}\n')
        for cmd in ([CC, "-std=c99", "-pedantic"], [CXX, "-std=c++17", "-x", "c++"]):
            proc = subprocess.run([*cmd, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", str(source),
                                   *[f for f in flags if f.startswith("-I")]], capture_output=True, text=True)
            assert proc.returncode == 0, f"{header} ({cmd[1]}):\n{proc.stderr[-2000:]}"


def test_header_enums_are_tagged_where_cann_tags_them():
    """acl_rt.h's enums carry their tag (`enum aclrtMemcpyKind k;` compiles: the idioms test), and the
    HCCL enums end as CANN's do (HCCL_E_SUSPENDING, the RESERVED values, HCCL_DATA_TYPE_INT128)."""
    from aclnn_gpu.capi.table import INCLUDE_DIR
    rt = (INCLUDE_DIR / "acl" / "acl_rt.h").read_text()
    for name in ("aclrtMemMallocPolicy", "aclrtMemcpyKind", "aclrtEventRecordedStatus", "aclrtEventStatus",
                 "aclrtRunMode", "aclrtEventWaitStatus", "aclrtStreamStatus", "aclrtMemAttr"):
        assert f"typedef enum {name} {{" in rt, name
    types = (INCLUDE_DIR / "hccl" / "hccl_types.h").read_text()
    for text in ("HCCL_E_SUSPENDING = 22", "HCCL_E_RESERVED", "HCCL_REDUCE_RESERVED = 255", "HCCL_DATA_TYPE_INT128 = 12",
                 "HCCL_DATA_TYPE_RESERVED = 255", "} HcclCommConfig;", "} HcclSendRecvItem;"):
        assert text in types, text


def test_executor_outputs_are_the_headers_trailing_tensors():
    """Each operator's plan types' `outputs` (what aclSetOutputTensorAddr counts) name trailing aclTensor
    parameters of its C GetWorkspaceSize declaration that hold every non-const one."""
    from aclnn_gpu.capi.table import entries
    from aclnn_gpu.plans.plan import Plan

    def plan_types(cls: type) -> list[type]:
        return [t for sub in cls.__subclasses__() for t in (sub, *plan_types(sub))]
    OUTPUTS = {t.op: t.outputs for t in plan_types(Plan) if "op" in vars(t)}
    ops = {}
    for e in entries():
        if e.name.startswith("aclnn") and e.name.endswith("GetWorkspaceSize"):
            op = e.name[:-len("GetWorkspaceSize")]
            tensors = [p for p in e.params if p.base == "aclTensor"]
            outputs = OUTPUTS[op]
            assert tuple(p.name for p in tensors[len(tensors) - len(outputs):]) == outputs, op
            assert {p.name for p in tensors if "const" not in p.ctype} <= set(outputs), op
            ops[op] = outputs
    assert ops.keys() == OUTPUTS.keys()


def test_every_declared_function_has_its_python_function():
    """No declaration answers "not available": each C name is real in Python (or refused by it with
    CANN's code, which the Python tests check)."""
    from aclnn_gpu.capi.bridge import python_function
    from aclnn_gpu.capi.table import entries
    missing = [e.name for e in entries() if e.name != "aclGetRecentErrMsg" and python_function(e) is None]
    assert missing == []


def test_hccl_configs_v_collectives_and_batches_through_the_c_abi(compile_program):
    """tests/capi/hccl_more.c: HcclCommInitRootInfoConfig's name read back by HcclGetCommName, a bad
    config refused with HCCL_E_PARA naming its field, the V collectives over their uint64_t count arrays
    (results checked), HcclBatchSendRecv's items, HcclCreateSubCommConfig (comm by pointer),
    HcclCommInitAll's array of comms, null arrays refused with HCCL_E_PTR."""
    if not hasattr(acl, "HcclAllGatherV"):
        pytest.skip("this aclnn_gpu has no V collectives")
    proc = run(compile_program(HERE / "hccl_more.c"), "cpu", timeout=300)
    assert proc.returncode == 0 and "hccl more ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sub name: c_named_sub5" in proc.stdout and "batch: HcclBatchSendRecv:" in proc.stdout


def test_the_build_key_follows_every_file_that_shapes_the_generated_c(tmp_path, monkeypatch):
    """A cached libascendcl.so is reused only while its key holds: custom.py (which entries the C
    marshals, so the exported C signatures) and bridge.py change the key as build.py, table.py and the
    headers do, or a stale library would call wrappers written for other signatures."""
    from aclnn_gpu.capi import build
    for name in ("build.py", "table.py", "custom.py", "bridge.py", "handles.py"):
        shutil.copy(build.HERE / name, tmp_path / name)
    monkeypatch.setattr(build, "HERE", tmp_path)
    first = build._key()
    for name in ("custom.py", "bridge.py"):
        path = tmp_path / name
        original = path.read_text()
        path.write_text(original + "\n# changed\n")
        assert build._key() != first, name
        path.write_text(original)
    assert build._key() == first
