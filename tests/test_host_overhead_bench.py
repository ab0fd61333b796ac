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
