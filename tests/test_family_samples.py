"""Each family's samples (ops/<family>/samples.py) and traffic budget (ops/<family>/traffic_budget.json):
every family of the registry has them, a budget case names one of its own family's profiler cases, and
importing the library loads no samples module (the demo and the profiler do)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from aclnn_gpu.ops import registry

PACKAGE = Path(registry.__file__).resolve().parent.parent


def test_every_family_has_samples_in_both_orders():
    assert set(registry.SAMPLES) == set(registry.DEMO_ORDER) == set(registry.FUNCTIONAL)
    assert len(registry.SAMPLES) == len(set(registry.SAMPLES))


def test_budget_cases_name_their_own_familys_operators():
    for family in registry.SAMPLES:
        samples = importlib.import_module(f"aclnn_gpu.ops.{family}.samples")
        own = {case.name for case in samples.PROFILE_CASES}
        cases = json.loads((PACKAGE / "ops" / family / "traffic_budget.json").read_text())["cases"]
        assert cases and {case["op"] for case in cases} <= own, family
        assert {case[0] for case in samples.COVERAGE} <= own, family


def test_demo_cases_are_the_families_operators():
    rng = np.random.default_rng(0)
    for family in registry.DEMO_ORDER:
        samples = importlib.import_module(f"aclnn_gpu.ops.{family}.samples")
        names = {entry[0].name for entry in samples.demo_cases(rng, True)}
        assert names == {"aclnn" + case.name for case in samples.PROFILE_CASES}, family


def test_importing_the_library_loads_no_samples():
    code = ("import sys, aclnn_gpu, aclnn_gpu.functional; "
            "print([m for m in sys.modules if m.startswith('aclnn_gpu.ops') and m.endswith('samples')])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.strip() == "[]"
