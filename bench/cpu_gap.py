"""The cpu goal on the fastest runs, measured on its own: the ten operators (forward and backward, fp32) on the
cpu device against PyTorch CPU, fastest run and median of each library, at the ladder sizes of
`python -m bench` plus the cases of `ISSUE_CASES` (realistic sizes beside bench's own).

    python -m bench.cpu_gap [--ops CtcLoss,KlDiv] [--dirs forward,backward] [--reps 9]
                            [--sizes mid|ladder|issue|all] [--json PATH]

Each case runs in blocks (all runs of ours, then all runs of PyTorch, twice; bench/README.md
explains why), keeping the fastest run and the better block median of each. The closing line is the
goal on the fastest runs: geomean over the ten operators at the mid size (<= 0.6) and the worst
ratio over the cases where PyTorch's fastest run takes more than 0.2 ms (<= 1.3). Run it with the
workplace's OpenBLAS variables unset (`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench import common, run  # noqa: E402
else:
    from . import common, run

# Ladder positions of the full bench run (bench/run.py) and its mid size.
LADDER = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
MID = 1.0
# Realistic sizes beside bench's own (family name -> params); `--sizes issue` picks them.
ISSUE_CASES = {
    "KlDiv": [(2048, 2048)],
    "CtcLoss": [(200, 16, 50, 40)],
    "ScaledMaskedSoftmax": [(4, 8, 256, 256)],
}


def cases(sizes: str, families: list, directions: list[str]) -> list[tuple]:
    """(family, params, direction, is_mid) of the chosen size set."""
    out = []
    for fam in families:
        picks = []
        if sizes in ("mid", "all", "ladder"):
            ladder = LADDER if sizes != "mid" else [MID]
            picks += [(fam.params(e), e == MID) for e in ladder]
        if sizes in ("issue", "all"):
            picks += [(p, False) for p in ISSUE_CASES.get(fam.name, [])]
        for p, mid in picks:
            for d in directions:
                out.append((fam, p, d, mid))
    return out


def measure(cases_: list[tuple], reps: int, progress: bool = True) -> list[dict]:
    """Fastest and median of ours and PyTorch for every case (cpu device)."""
    bench = run.Bench("cpu", quick=False)
    bench.cpu_kw = dict(warmup=2, reps=reps, budget_s=4.0, pause_s=0.1, min_reps=min(reps, 5))
    rows = []
    for fam, p, d, mid in cases_:
        r = bench.measure(fam, p, d, run.F32)
        name = fam.forward if d == "forward" else fam.backward
        rows.append({"operator": name, "family": fam.name, "direction": d, "params": list(p),
                     "shapes": fam.shapes(p), "mid": mid, **r})
        if progress:
            print(f"  {name} {fam.shapes(p)}: ours {r['ours_min_ms']:.3g} ms, torch {r['torch_min_ms']:.3g} ms "
                  f"({r['ours_min_ms'] / r['torch_min_ms']:.2f}x)", file=sys.stderr, flush=True)
    return rows


def goal(rows: list[dict]) -> dict:
    """The cpu goal on the fastest runs: geomean at mid size <= 0.6, max <= 1.3 where PyTorch takes > 0.2 ms."""
    mids = [r["ours_min_ms"] / r["torch_min_ms"] for r in rows if r["mid"]]
    slow = [r for r in rows if r["torch_min_ms"] > 0.2] or rows
    worst = max(slow, key=lambda r: r["ours_min_ms"] / r["torch_min_ms"])
    return {"geomean": common.geomean(mids) if mids else float("nan"), "operators": len(mids),
            "max": worst["ours_min_ms"] / worst["torch_min_ms"], "max_case": f"{worst['operator']} {worst['shapes']}"}


def table(rows: list[dict]) -> str:
    head = ("| operator | shapes | ours fastest / median (ms) | torch fastest / median (ms) | ratio fastest "
            "| ratio median |\n| --- | --- | ---: | ---: | ---: | ---: |")
    lines = [head]
    for r in rows:
        lines.append(f"| {r['operator']} | {r['shapes']} | {r['ours_min_ms']:.3g} / {r['ours_ms']:.3g} "
                     f"| {r['torch_min_ms']:.3g} / {r['torch_ms']:.3g} | {r['ours_min_ms'] / r['torch_min_ms']:.2f}x "
                     f"| {r['ours_ms'] / r['torch_ms']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu_gap", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated families (KlDiv, CrossEntropy, CtcLoss, ConvTbc, "
                                              "ScaledMaskedSoftmax); default all")
    ap.add_argument("--dirs", default="forward,backward")
    ap.add_argument("--sizes", choices=["mid", "ladder", "issue", "all"], default="all")
    ap.add_argument("--reps", type=int, default=9, help="runs per block (default 9)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    common.setup_device("cpu")
    wanted = [s for s in args.ops.split(",") if s]
    families = [f for f in run.FAMILIES if not wanted or f.name in wanted]
    load = os.getloadavg()[0]
    rows = measure(cases(args.sizes, families, args.dirs.split(",")), args.reps)
    print(f"load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}\n")
    print(table(rows))
    g = goal(rows)
    print(f"\nFASTEST-RUN GOAL geomean {g['geomean']:.2f} over {g['operators']} mid-size cases (<= 0.6); "
          f"max {g['max']:.2f} {g['max_case']} (<= 1.3, PyTorch > 0.2 ms)")
    if args.json:
        common.write_json(Path(args.json), {"load_start": load, "rows": rows, "goal": g})
    return 0


if __name__ == "__main__":
    sys.exit(main())
