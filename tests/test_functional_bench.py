"""The pythonic layers' bench (`python -m bench.pythonic`, a table of `python -m bench`) still runs:
every functional and aclnn_gpu.torch call of the ten operators is timed beside PyTorch's, cached and
uncached. Figures are not judged here (a benchmark, not a timed test); only that every row is there,
every figure is a positive number, and the table prints."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import use_device

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/ is not installed with the package
pytest.importorskip("torch")
pythonic = pytest.importorskip("bench.pythonic")
FAMILIES = pytest.importorskip("bench.run").FAMILIES


def test_every_operator_and_layer_is_timed():
    use_device("cpu")
    result = pythonic.measure(FAMILIES, calls=1, batches=1)
    expected = [op for fam in FAMILIES for op in (fam.forward, fam.backward)]
    assert [row["operator"] for row in result["rows"]] == expected
    for row in result["rows"]:
        for column in ("functional", "functional_uncached", "torch", "autograd", "autograd_uncached",
                       "torch_autograd", "plan_run"):
            fastest, median = row[column]
            assert 0 < fastest <= median, (row["operator"], column)
    text = pythonic.table(result)
    assert text.count("aclnnCtcLossBackward") == 2 and "Load average" in text
