"""The CI traffic budget (kernels/traffic_budget.json): per operator case, per kernel, limits on the
DRAM bytes and the sector efficiency of the main streams, checked against a profiled call.

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

from . import GemmLaunch
from .report import main_streams

BUDGET_FILE = Path(__file__).resolve().parent.parent / "kernels" / "traffic_budget.json"


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
    return json.loads(Path(path or BUDGET_FILE).read_text())["cases"]
