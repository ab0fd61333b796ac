"""python -m aclnn_gpu.profile.ncu_compare: the profiler's modelled sectors and DRAM bytes beside Nsight
Compute's measured ones, one launch per kernel, for the cases of the traffic budget (a GPU and `ncu` on
PATH needed; scripts/gpu_check.sh runs it). Each case runs twice: on the emulated device under the
profiler (a subprocess), and on the cuda device under `ncu --csv` (cold cache: ncu flushes caches
before each profiled launch by default, the profiler's cold-cache figure is the one to compare)."""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")
ROOT = Path(__file__).resolve().parents[2]

_RUN_ON_CUDA = """
import json, sys, numpy as np
from aclnn_gpu.profile import operators
case = json.loads(sys.argv[1])
op = operators.OPERATORS[case["op"]]
d = dict(op.dims, **case.get("dims", {}))
call = op.setup(d, operators.DTYPES[case.get("dtype") or op.dtype], np.random.default_rng(0))
call()
"""


def _profile(case: dict, out: Path) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "aclnn_gpu.profile", case["op"], "--json", str(out)]
    for k, v in case.get("dims", {}).items():
        cmd += ["-D", f"{k}={v}"]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return json.loads(out.read_text())[0]["launches"]


def _ncu(case: dict) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), ACLNN_GPU_DEVICE="cuda")
    r = subprocess.run(["ncu", "--csv", "--metrics", ",".join(METRICS), sys.executable, "-c", _RUN_ON_CUDA,
                        json.dumps(case)], env=env, capture_output=True, text=True, check=True)
    text = r.stdout[r.stdout.find('"ID"'):]
    first: dict[str, dict[str, float]] = {}
    first_id: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(text)):
        name = row.get("Kernel Name", "")
        if first_id.setdefault(name, row.get("ID", "")) != row.get("ID", ""):
            continue       # keep the first launch of each kernel only
        first.setdefault(name, {})[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    return first


def main(argv=None) -> int:
    from .budget import load
    ap = argparse.ArgumentParser(prog="python -m aclnn_gpu.profile.ncu_compare", description=__doc__)
    ap.add_argument("--out", default="ncu_compare", help="folder for the JSON of both sides")
    ap.add_argument("--ncu-only", metavar="JSON", help="measure with ncu only (no emulated profiler: the GPU machine "
                    "may have no C++ compiler) and write {op: {kernel: metrics}} to JSON after each case; "
                    "--from-ncu JSON later pairs it with the profiler's figures on any machine")
    ap.add_argument("--cases", metavar="OP,OP", help="only these cases of the traffic budget (by operator name)")
    ap.add_argument("--from-ncu", metavar="JSON", help="pair the figures of an earlier --ncu-only run with the "
                    "profiler's (no GPU needed)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.ncu_only:
        measured: dict[str, Any] = {}
        wanted = set(a.cases.split(",")) if a.cases else None
        for case in load():
            if wanted is not None and case["op"] not in wanted:
                continue
            try:
                measured[case["op"]] = _ncu(case)
            except subprocess.CalledProcessError as e:   # ncu refused or the program failed: recorded, next case
                measured[case["op"]] = {"error": (e.stderr or e.stdout or str(e))[-2000:]}
            Path(a.ncu_only).write_text(json.dumps(measured, indent=1))
            print(f"ncu {case['op']}: {len(measured[case['op']])} kernels", flush=True)
        return 0
    recorded = json.loads(Path(a.from_ncu).read_text()) if a.from_ncu else None
    rows = []
    for i, case in enumerate(load()):
        ours = _profile(case, out / f"profile_{i}.json")
        theirs = recorded.get(case["op"], {}) if recorded is not None else _ncu(case)
        for launch in ours:
            if launch.get("modelled"):
                continue
            short = launch["kernel"].split("<")[0].split("::")[-1]
            match = next((v for k, v in theirs.items() if short in k), {})
            sectors = sum(s["sectors"] for s in launch["sites"] if not s["shared"])
            rows.append({"op": case["op"], "kernel": launch["kernel"], "profiler_dram_bytes": launch["dram_bytes"],
                         "ncu_dram_bytes": match.get(METRICS[0], 0) + match.get(METRICS[1], 0),
                         "profiler_sectors": sectors,
                         "ncu_sectors": match.get(METRICS[2], 0) + match.get(METRICS[3], 0)})
            r = rows[-1]
            print(f"{r['op']:28s} {r['kernel'][:40]:40s} DRAM {r['profiler_dram_bytes']:>12d} vs ncu "
                  f"{r['ncu_dram_bytes']:>14.0f}   sectors {r['profiler_sectors']:>10d} "
                  f"vs ncu {r['ncu_sectors']:>12.0f}")
    (out / "comparison.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
