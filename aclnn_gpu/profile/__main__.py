"""python -m aclnn_gpu.profile: GPU memory cost of operator calls, measured on the emulated device."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

# The profiling build of the emulated device must be chosen before aclnn_gpu builds any kernel.
os.environ["ACLNN_GPU_DEVICE"] = "emulated"
os.environ["ACLNN_GPU_EMU_PROFILE"] = "1"

from . import profile_call  # noqa: E402
from .operators import DTYPES, OPERATORS  # noqa: E402


def _epilog() -> str:
    example = next(iter(OPERATORS.values()))   # the first family's first operator, four times its default size
    sizes = " ".join(f"-D {k}={4 * v if v > 1 else v}" for k, v in example.dims.items())   # (flags as they are)
    lines = ["operators and their dimensions (-D NAME=VALUE; defaults are small, for seconds-long runs):"]
    for op in OPERATORS.values():
        dims = " ".join(f"{k}={v}" for k, v in op.dims.items())
        lines.append(f"  {op.name:28s} {dims}  [{op.dtype}]  {op.doc}")
    lines += ["", "The table per launch: access sites (file:line, inline chain), warp requests, 32-byte sectors "
              "per request against the ideal for the access width, sector efficiency (bytes asked / sector bytes), "
              "shared-memory wavefronts and bank conflicts, DRAM bytes (cold cache, and a 50 MiB L2 LRU model "
              "warm across the call's launches). The summary gives the operator's minimum bytes (bench/README.md), "
              "the ratio, and a modelled H100 time (3.35 TB/s + 3 us per launch; a roofline model, not a "
              "measurement). Needs clang++ and llvm-symbolizer (Debian: apt-get install -y clang llvm).",
              "", "examples:",
              f"  python -m aclnn_gpu.profile {example.name} {sizes}",
              "  python -m aclnn_gpu.profile all --json profile.json",
              "  python -m aclnn_gpu.profile --coverage            # every kernel of the ten operators",
              "  python -m aclnn_gpu.profile --check-budget       # CI: fails when a kernel exceeds its budget"]
    return "\n".join(lines)


def _dims(pairs) -> dict:
    out = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep:
            raise SystemExit(f"-D {p!r}: expected NAME=VALUE")
        out[k.strip()] = int(v)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aclnn_gpu.profile", description=__doc__,
                                 epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", nargs="?", help="operator (aclnn name, see below) or 'all'")
    ap.add_argument("-D", dest="dims", action="append", metavar="NAME=VALUE", help="a dimension (repeatable)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), help="element type (default: the operator's)")
    ap.add_argument("--sample", type=int, default=1, metavar="N",
                    help="trace every N-th block only (DRAM bytes scaled to the grid, site counts are those "
                         "of the traced blocks; default 1)")
    ap.add_argument("--l2-mib", type=float, default=50, help="L2 size of the cache model (default 50 MiB, H100)")
    ap.add_argument("--json", metavar="PATH", help="also write the profiles as JSON")
    ap.add_argument("--check-budget", nargs="?", const="", metavar="FILE",
                    help="profile every case of the traffic budget (default: every aclnn_gpu/ops/<family>/"
                         "traffic_budget.json and aclnn_gpu/kernels/traffic_budget.json; or FILE only) and exit 1 "
                         "when a kernel exceeds it")
    ap.add_argument("--coverage", action="store_true",
                    help="profile the cases that together launch every kernel of the ten operators (defaults plus "
                         "layout variants) and exit 1 if a kernel of kernels/manifest.py was not launched")
    a = ap.parse_args(argv)
    if a.check_budget is not None:
        return _check_budget(a.check_budget or None, a.json)
    if a.coverage:
        return _coverage(a.json)
    if not a.op:
        ap.error("give an operator (or 'all', or --check-budget)")
    names = list(OPERATORS) if a.op == "all" else [a.op]
    for n in names:
        if n not in OPERATORS:
            ap.error(f"unknown operator {n!r}; known: {', '.join(OPERATORS)}")
    dims = _dims(a.dims)
    results = []
    for n in names:
        unknown = set(dims) - set(OPERATORS[n].dims)
        if unknown and a.op != "all":
            ap.error(f"{n} has no dimension {sorted(unknown)}; its dimensions: {', '.join(OPERATORS[n].dims)}")
        own = {k: v for k, v in dims.items() if k in OPERATORS[n].dims}
        t0 = time.perf_counter()
        p = profile_call(n, own, a.dtype, sample_every=a.sample, l2_mib=a.l2_mib)
        from .report import render
        print(render(p))
        print(f"({time.perf_counter() - t0:.1f} s on the emulator)\n")
        results.append(p)
    if a.json:
        from .report import to_json
        with open(a.json, "w") as f:
            json.dump([to_json(p) for p in results], f, indent=1)
    return 0


def _family(kernel: str) -> str:
    return kernel.split("<")[0].split("::")[-1]


def _coverage(json_path) -> int:
    from ..kernels import manifest
    from . import GemmLaunch
    from .operators import COVERAGE
    from .report import render, to_json
    want = {_family(k) for names in manifest.KERNELS.values() for k in names}
    seen: set[str] = set()
    results = []
    for op, dims, *dtype in COVERAGE:
        p = profile_call(op, dims, *dtype)
        print(render(p) + "\n")
        results.append(to_json(p))
        seen |= {_family(x.kernel) for x in p.launches if not isinstance(x, GemmLaunch)}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    missing = sorted(want - seen)
    print(f"kernel coverage: {len(want & seen)} of {len(want)} kernel templates of kernels/manifest.py launched "
          "(each at one or more of its type instantiations)"
          + (f"; never launched: {', '.join(missing)}" if missing else ""))
    return 1 if missing else 0


def _check_budget(path, json_path) -> int:
    from .budget import check_call, load
    from .report import render, to_json
    bad, results = [], []
    for case in load(path):
        p = profile_call(case["op"], case.get("dims"), case.get("dtype"))
        print(render(p) + "\n")
        results.append(to_json(p))
        bad += check_call(p, case)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    for b in bad:
        print(f"BUDGET EXCEEDED {b}", file=sys.stderr)
    print(f"traffic budget: {len(results)} case(s), {'OK' if not bad else f'{len(bad)} failure(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
