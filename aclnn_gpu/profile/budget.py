"""The CI traffic budget: per operator case, per kernel, limits on the DRAM bytes and the sector
efficiency of the main streams, checked against a profiled call. Each family's cases are in
ops/<family>/traffic_budget.json (read in ops/registry.py's SAMPLES order); kernels/traffic_budget.json
documents the rules and holds the cases of kernels that belong to no family.

A rule (per kernel name, matched as a prefix; "*" = every emulated kernel of the call):
  max_dram_ratio       cold-cache DRAM bytes of the kernel <= ratio x the operator's minimum bytes
  max_dram_bytes       cold-cache DRAM bytes <= this (a measured ceiling that may only go down)
  min_main_efficiency  every main stream (a global site carrying >= 10% of the launch's bytes) has
                       sector efficiency >= this
A case may also give `max_call_ratio`: the call's L2-model DRAM bytes <= ratio x minimum bytes.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..ops.registry import SAMPLES
from . import GemmLaunch
from .report import main_streams

PACKAGE = Path(__file__).resolve().parent.parent
BUDGET_FILE = PACKAGE / "kernels" / "traffic_budget.json"     # the rules, and kernels of no family


def budget_files() -> list[Path]:
    """Every budget file: each family's (those that have one), then kernels/traffic_budget.json."""
    families = [PACKAGE / "ops" / family / "traffic_budget.json" for family in SAMPLES]
    return [path for path in families if path.is_file()] + [BUDGET_FILE]


def check_launch(launch, rule: dict, min_bytes: int) -> list[str]:
    bad = []
    name = launch.kernel
    if "max_dram_ratio" in rule and launch.dram_bytes > rule["max_dram_ratio"] * min_bytes:
        bad.append(f"{name}: DRAM {launch.dram_bytes} bytes > {rule['max_dram_ratio']} x minimum {min_bytes} "
                   f"({launch.dram_bytes / max(min_bytes, 1):.3f}x)")
    if "max_dram_bytes" in rule and launch.dram_bytes > rule["max_dram_bytes"]:
        bad.append(f"{name}: DRAM {launch.dram_bytes} bytes > ceiling {rule['max_dram_bytes']}")
    if "min_main_efficiency" in rule:
        for s in main_streams(launch):
            if s.sector_efficiency < rule["min_main_efficiency"]:
                bad.append(f"{name}: main stream {s.site.label} ({s.site.kind}) sector efficiency "
                           f"{100 * s.sector_efficiency:.1f}% < {100 * rule['min_main_efficiency']:.0f}%")
    return bad


def check_call(profile, case: dict) -> list[str]:
    bad = []
    kernels = [x for x in profile.launches if not isinstance(x, GemmLaunch)]
    for pattern, rule in case.get("kernels", {}).items():
        matched = [x for x in kernels if pattern == "*" or x.kernel.startswith(pattern)]
        if not matched:
            bad.append(f"no launch of a kernel matching {pattern!r} (launched: {[x.kernel for x in kernels]})")
        for x in matched:
            bad += check_launch(x, rule, profile.min_bytes)
    if "max_call_ratio" in case and profile.l2_dram_bytes > case["max_call_ratio"] * profile.min_bytes:
        bad.append(f"call: L2-model DRAM {profile.l2_dram_bytes} bytes > {case['max_call_ratio']} x minimum "
                   f"{profile.min_bytes}")
    return [f"{profile.op}: {b}" for b in bad]


def load(path=None) -> list[dict]:
    """The cases of one budget file, or (no path) of every budget file in budget_files() order."""
    paths = [Path(path)] if path else budget_files()
    return [case for p in paths for case in json.loads(p.read_text())["cases"]]
