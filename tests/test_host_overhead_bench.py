"""The host-overhead bench (`python -m bench.host_overhead`) still runs: the cuda device's code over the
instant CuPy stand-in, and the cpu device. Figures are not judged here (a benchmark, not a timed test);
only that every backward operator is timed and nothing raised."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/ is not installed with the package
host_overhead = pytest.importorskip("bench.host_overhead")
FAMILIES = pytest.importorskip("bench.run").FAMILIES


@pytest.mark.parametrize("path", ["cuda code path", "cpu device"])
def test_every_backward_operator_is_timed(path, monkeypatch):
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "cpu")
    measure = host_overhead.cuda_code_path if path == "cuda code path" else host_overhead.per_operator
    result = measure(FAMILIES, calls=2, batches=1)
    assert [row["operator"] for row in result["rows"]] == [fam.backward for fam in FAMILIES]
    assert len(result["rows"]) == 5
    assert all(row["execute_us"] > 0 and row["get_ws_execute_us"] > 0 for row in result["rows"])


def test_phase_tables_and_threads_run(monkeypatch):
    """--phases (both paths' tables from the pieces' costs) and --threads, with a few calls."""
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "cpu")
    pieces = host_overhead.phases_us(FAMILIES[:2], calls=2, batches=1)
    text = host_overhead.phase_table(pieces)
    for phase in (*host_overhead.PHASES, *host_overhead.CACHED_PHASES):
        assert f"| {phase} |" in text
    rows = host_overhead.threads_throughput(FAMILIES, counts=(1, 2), seconds=0.05)
    assert [r["threads"] for r in rows] == [1, 2] and all(r["calls_per_s"] > 0 for r in rows)


def test_over_ceiling_names_exactly_the_counts_above_their_ceiling(tmp_path, monkeypatch):
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text('{"ceilings": {"aclnnX": {"execute": 100, "total_cached": 200}}}')
    monkeypatch.setattr(host_overhead, "CEILINGS", ceilings)
    over = host_overhead.over_ceiling({"aclnnX": {"execute": 100.0, "total_cached": 250.0, "total": 9e9},
                                       "aclnnY": {"execute": 1e9}})
    assert over == ["aclnnX total_cached: 250 instructions per call > ceiling 200"]


@pytest.mark.skipif(host_overhead.callgrind_unavailable() is not None, reason="valgrind (callgrind) is not installed")
def test_instruction_counts_stay_under_their_committed_ceilings():
    """The CI-visible regression check, not a timed one: instructions per call of the execute and of the
    cached GetWorkspaceSize + execute of KlDivBackward (one kernel launch) and ConvTbcBackward (its GEMMs
    through the library's cuBLAS wrapper into the null libcublas) under callgrind (deterministic), against
    bench/callgrind_ceilings.json. One valgrind run of ~20 s. A GetWorkspaceSize that missed the executor
    cache would cost ~4x its ceiling; a GEMM back at the former wrapper's cost (a handle fetched and its
    modes read, set and restored per call) ~10x ConvTbc's."""
    operators = ["aclnnKlDivBackward", "aclnnConvTbcBackward"]
    counts = host_overhead.callgrind_counts(["execute", "total_cached"], operators, calls=10)
    print(f"instructions per call: {counts}")
    for operator in operators:
        assert counts[operator]["total_cached"] > counts[operator]["execute"] > 1000, operator
    assert host_overhead.over_ceiling(counts) == []


def test_the_null_gpu_keeps_the_gemm_wrapper_and_stubs_only_libcublas():
    """Over the bench's stand-in the cuda device's GEMMs run the library's own wrapper (the device's
    cuBLAS handle, the frozen step's converted arguments) into the null libcublas's C entry points."""
    from aclnn_gpu.device.cuda import CudaDevice
    from aclnn_gpu.kernels import gemm
    conv_tbc = next(fam for fam in FAMILIES if fam.backward == "aclnnConvTbcBackward")
    with host_overhead.InstantDevice() as device, host_overhead.operator_case(conv_tbc) as case:
        assert type(device) is CudaDevice and device.native_gemm
        assert type(gemm.cublas_functions().cublasGemmStridedBatchedEx).__module__ == "ctypes"
        case.op.enqueue()
        host_overhead._sync(case.stream)
        steps = case.op.ex.plan.frozen.steps
        assert any(type(step).__name__ == "Gemm" and step._native[1] is not None for step in steps)
        handle = device._cublas_pool.for_thread()
        assert handle.stream_ptr == case.stream.impl.cupy.ptr and handle.workspace is None


def test_launch_paths_run_over_the_null_driver_and_the_null_cublas():
    """`python -m bench.launch_paths` (its own process: it loads a null libcuda.so.1) times the library's
    GEMM call and cuda-bindings' cuLaunchKernel over null libraries; paths this machine lacks (nvmath-python,
    cuda.core) say why instead of a figure."""
    import subprocess
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-m", "bench.launch_paths", "--batches", "1"], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1].strip(" |")
            for line in run.stdout.splitlines()[2:] if line.startswith("| ")}   # (after the header rows)
    measured = [name for name, value in rows.items() if value.replace(".", "", 1).isdigit()]
    for path in ("GEMM: ctypes, C arguments with the handle built once (the replay program)",
                 "launch: cuda-bindings cuLaunchKernel, parameters packed once",
                 "reference: torch.add of 8 elements (CPU)"):
        assert path in measured, run.stdout
    assert len(rows) == 8 and all(name in measured or rows[name].startswith("n/a: ") for name in rows), run.stdout


@pytest.mark.skipif(__import__("importlib").util.find_spec("nvmath") is None,
                    reason="nvmath-python is not installed (it is not a dependency)")
def test_the_nvmath_binding_runs_over_the_null_libraries():
    """`--binding nvmath`: the GEMMs through nvmath-python's binding into the null libcublas (its own
    process: it loads the null driver nvmath needs)."""
    import subprocess
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-m", "bench.host_overhead", "--binding", "nvmath", "--calls", "2"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert sum(line.startswith(f"| {fam.backward} ") for fam in FAMILIES for line in run.stdout.splitlines()) == 5
