"""The compile report (NVRTC, no GPU): parses ptxas's resource lines, fails on spills, warnings and
errors, and writes JSON. Uses the fixtures (fast), not the whole manifest (CI runs that)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from aclnn_gpu.kernels import report  # noqa: E402

FIX = Path(__file__).resolve().parent / "fixtures"


def test_cuda_headers_found():
    assert report.cuda_include_dirs(), "no directory with cuda_fp16.h (nvidia-cuda-runtime wheel?)"


def test_clean_file_passes_with_usage_rows(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = report.main([f"{FIX / 'features.cu'}:block_reverse<float, 128>", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["ok"] and not data["failures"]
    rows = [k for r in data["results"] for k in r["kernels"]]
    assert {r["arch"] for r in rows} == {"80", "90"}
    tmpl = [r for r in rows if r["kernel"] == "block_reverse<float, 128>"]
    assert len(tmpl) == 2 and all(r["static_smem"] == 512 and r["barriers"] == 1 for r in tmpl)
    assert any(r["kernel"] == "dyn_reduce" and r["registers"] > 0 for r in rows)
    assert "OK" in capsys.readouterr().out


def test_spill_fails(capsys):
    rc = report.main([str(FIX / "spill.cu"), "--arch", "90"])
    assert rc == 1
    captured = capsys.readouterr()
    assert "SPILL" in captured.out and "spill_heavy spills" in captured.err


def test_warning_fails(tmp_path, capsys):
    src = tmp_path / "warn.cu"
    src.write_text('extern "C" __global__ void k(float* y) { int unused = 3; y[0] = 1.f; }\n')
    assert report.main([str(src), "--arch", "80"]) == 1
    assert "warning" in capsys.readouterr().err


def test_compile_error_fails(tmp_path, capsys):
    src = tmp_path / "bad.cu"
    src.write_text('extern "C" __global__ void k(float* y) { y[0] = undeclared; }\n')
    assert report.main([str(src), "--arch", "80"]) == 1
    assert "compile error" in capsys.readouterr().err


def test_options_are_those_cupy_compiles_with():
    """The report's registers are those of the loaded code: CuPy 14 adds -ftz=true and
    --device-as-default-execution-space to every RawModule compile (read from CuPy's source when it is
    installed) and the cuda device passes loader.nvrtc_options()."""
    from aclnn_gpu.kernels import loader
    opts = report.nvrtc_options("90", report.cuda_include_dirs())
    assert "-ftz=true" in opts and "--device-as-default-execution-space" in opts and "-arch=sm_90" in opts
    assert "-std=c++17" in opts and f"-I{loader.KERNEL_DIR}" in opts
    try:
        import cupy.cuda.compiler as cc
    except Exception:  # noqa: BLE001 - CuPy is optional here
        return
    text = Path(cc.__file__).read_text()
    for o in report.CUPY_ADDED_OPTIONS:
        assert f"'{o}'" in text, f"CuPy no longer adds {o}: update report.CUPY_ADDED_OPTIONS"
