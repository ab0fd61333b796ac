"""The benchmark runner: every operator, forward and backward, on the device present, against
PyTorch on the same device in the same process.

    python -m bench [--device cpu|cuda|emulated] [--quick] [--out DIR]
    python bench/run.py ...                           (the same)

Prints Markdown tables (operators at a mid size, host overhead, scaling of the backward operators,
the CPU acceptance line), writes DIR/bench.json and, with matplotlib, DIR/scaling.png and
DIR/roofline.png. bench/README.md explains the method.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench import capture, common, host_overhead, pythonic  # noqa: E402
    from bench.families import F32, FAMILIES, Family  # noqa: E402
else:
    from . import capture, common, host_overhead, pythonic
    from .families import F32, FAMILIES, Family


# --------------------------------------------------------------------------------- timing
class Bench:
    def __init__(self, kind: str, quick: bool) -> None:
        import torch
        self.torch, self.kind, self.quick = torch, kind, quick
        self.dev = common.torch_device(kind)
        self.copies = 3 if kind == "cuda" else 1       # input rotation (a GPU's L2 would hold one copy)
        self.gpu = common.GpuTimer() if kind == "cuda" else None
        if kind != "cuda":
            torch.set_num_threads(os.cpu_count() or 1)
        if quick:
            self.cpu_kw = dict(warmup=1, reps=5, budget_s=0.6, pause_s=0.1, min_reps=3)
        else:
            self.cpu_kw = dict(warmup=2, reps=11, budget_s=4.0, pause_s=0.25, min_reps=5)
        self.rounds = 1 if quick or kind == "emulated" else 2
        if kind == "emulated":
            self.cpu_kw = dict(warmup=1, reps=3, budget_s=0.5, pause_s=0.0, min_reps=1)

    def params(self, fam: Family, e: float) -> tuple:
        return fam.emulated(e) if self.kind == "emulated" else fam.params(e)

    def measure(self, fam: Family, p: tuple, direction: str, dt: np.dtype, seed: int = 0) -> dict:
        """ours and PyTorch on the same inputs, each in its own block: medians (ours_ms, torch_ms) and,
        on the CPU, fastest runs (ours_min_ms, torch_min_ms)."""
        rngs = [np.random.default_rng(seed + i) for i in range(self.copies)]
        datas = [fam.data(p, dt, r) for r in rngs]
        b = common.Buffers()
        try:
            ops = [fam.ours(b, d, direction, p) for d in datas]
            fns = [fam.torch(self.torch, d, direction, p, self.dev) for d in datas]
            if self.gpu:
                result = {"ours_ms": self.gpu.cupy_ms([op.enqueue for op in ops], b.stream.impl.cupy,
                                                      reps=10 if self.quick else 30),
                          "torch_ms": self.gpu.torch_ms(fns, reps=10 if self.quick else 30)}
            else:   # blocks: ours, PyTorch, (ours, PyTorch again); the best block median of each
                ours = theirs = ours_min = theirs_min = float("inf")
                for _ in range(self.rounds):
                    runs = common.sample_ms(ops[0], **self.cpu_kw)
                    ours, ours_min = min(ours, statistics.median(runs)), min(ours_min, *runs)
                    runs = common.sample_ms(fns[0], **self.cpu_kw)
                    theirs, theirs_min = min(theirs, statistics.median(runs)), min(theirs_min, *runs)
                result = {"ours_ms": ours, "torch_ms": theirs, "ours_min_ms": ours_min, "torch_min_ms": theirs_min}
        finally:
            b.close()
        del fns, datas
        return result

    def overhead(self, fam: Family, direction: str, n: int) -> dict:
        """Per-call microseconds for tiny tensors: GetWorkspaceSize + execute + synchronize (a fresh
        executor each call), the same without the synchronize (n calls queued, one synchronize at the
        end), and with a repeatable executor reused: execute + synchronize, execute alone (queued)."""
        import aclnn_gpu as acl
        p = fam.tiny()
        d = fam.data(p, F32, np.random.default_rng(1))
        b = common.Buffers()
        try:
            op = fam.ours(b, d, direction, p)            # builds the arguments once and gives get_ws/execute
            get_ws, execute, args = _last_call(fam, b, d, direction, p)
            work = b.malloc(max(op.ws, 1 << 20))
            stream = b.stream

            def fresh():
                st, ws, ex = get_ws(*args)
                execute(work if ws else None, ws, ex, stream)

            def fresh_sync():
                fresh()
                acl.aclrtSynchronizeStream(stream)

            def batch(fn):
                def run():
                    for _ in range(n):
                        fn()
                    acl.aclrtSynchronizeStream(stream)
                return run

            kw = dict(warmup=1, reps=5, budget_s=0.5, pause_s=0.05, min_reps=3)
            out = {
                "get_ws_execute_sync_us": common.median_ms(batch(fresh_sync), **kw) * 1e3 / n,
                "get_ws_execute_us": common.median_ms(batch(fresh), **kw) * 1e3 / n,
                "reused_execute_sync_us": common.median_ms(batch(op), **kw) * 1e3 / n,
                "reused_execute_us": common.median_ms(batch(op.enqueue), **kw) * 1e3 / n,
            }
        finally:
            b.close()
        fn = fam.torch(self.torch, d, direction, p, self.dev)
        sync = self.torch.cuda.synchronize if self.dev == "cuda" else (lambda: None)

        def torch_batch():
            for _ in range(n):
                fn()
            sync()
        out["torch_us"] = common.median_ms(torch_batch, **kw) * 1e3 / n
        return out


def _last_call(fam: Family, b: common.Buffers, d: dict, direction: str, p: tuple):
    """The (get_ws, execute, args) of a second call built like `fam.ours`, for the overhead loop."""
    captured = {}
    real_op = b.op

    def grab(get_ws, execute, *args):
        captured.update(get_ws=get_ws, execute=execute, args=args)
        return real_op(get_ws, execute, *args)
    b.op = grab
    try:
        fam.ours(b, d, direction, p)
    finally:
        b.op = real_op
    return captured["get_ws"], captured["execute"], captured["args"]


# ---------------------------------------------------------------------------------- output
def _fastest_cells(r: dict) -> list:
    """The fastest-run columns of a table row (cpu runs only: GPU times are event medians)."""
    if "ours_min_ms" not in r:
        return []
    return [r["ours_min_ms"], r["torch_min_ms"], f"{r['ours_min_ms'] / r['torch_min_ms']:.2f}x"]


def fmt_work(metric: str, value: float) -> str:
    if metric == "flops":
        return f"{value / 1e9:.2f} GFLOP"
    return f"{value / 2 ** 20:.1f} MiB" if value >= 2 ** 20 else f"{value / 1024:.1f} KiB"


def plots(out: Path, result: dict) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing (pip install -e '.[bench]'): no plots", file=sys.stderr)
        return []
    written = []
    scaling = result["scaling"]
    names = list(dict.fromkeys(r["operator"] for r in scaling))
    cols = 3
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        pts = [r for r in scaling if r["operator"] == name]
        xs = [r["size"] for r in pts]
        ax.loglog(xs, [r["ours_ms"] for r in pts], "o-", label="aclnn_gpu", color="tab:blue")
        ax.loglog(xs, [r["torch_ms"] for r in pts], "s--", label="PyTorch", color="tab:orange")
        if result["device"] != "cuda":
            ax.axhspan(5, 250, color="tab:green", alpha=0.07, lw=0)
        ax.set_title(name.replace("aclnn", ""), fontsize=10)
        ax.set_xlabel(pts[0]["size_unit"], fontsize=8)
        ax.set_ylabel("ms (median)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"Backward operators: time vs problem size on {result['device']} "
                 f"({result['date'][:10]}; shaded: PyTorch 5-250 ms)", fontsize=11)
    fig.tight_layout()
    path = out / "scaling.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(str(path))

    rows_ = result["operators"]
    labels = [f"{r['operator'].replace('aclnn', '')}" for r in rows_]
    ours = [r["ours_fraction"] for r in rows_]
    theirs = [r["torch_fraction"] for r in rows_]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    y = np.arange(len(rows_))
    ax.barh(y - 0.2, ours, 0.4, label="aclnn_gpu", color="tab:blue")
    ax.barh(y + 0.2, theirs, 0.4, label="PyTorch", color="tab:orange")
    ax.set_yticks(y)
    ax.set_yticklabels([f"{lbl} ({'matmul' if r['metric'] == 'flops' else 'copy bw'})"
                        for lbl, r in zip(labels, rows_)], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("fraction of the device's measured ceiling (copy bandwidth, or fp32 matmul for ConvTbc)")
    c = result["ceilings"]
    ax.set_title(f"Roofline fraction on {result['device']}: copy {c['copy_GBps']:.1f} GB/s, "
                 f"matmul {c['matmul_GFLOPs']:.0f} GFLOP/s, measured in the run", fontsize=10)
    for yi, v in zip(y, ours):
        ax.text(v, yi - 0.2, f" {v:.0%}", va="center", fontsize=7)
    for yi, v in zip(y, theirs):
        ax.text(v, yi + 0.2, f" {v:.0%}", va="center", fontsize=7)
    ax.set_xlim(0, max(1.05, max(ours + theirs) * 1.15))
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.25)
    fig.tight_layout()
    path = out / "roofline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(str(path))
    return written


def machine() -> dict:
    import torch
    info = {"platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "nproc": os.cpu_count()}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["numpy_blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # noqa: BLE001
        pass
    info["loadavg_at_start"] = list(os.getloadavg())
    info["thread_env"] = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                          if k in os.environ}
    return info


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda", "emulated"], default=None,
                    help="default: cuda when CuPy sees a GPU, else cpu")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs (CI; under a minute on 2 cores)")
    ap.add_argument("--out", default="bench/results", help="folder for bench.json and the PNG plots")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    kind = common.setup_device(args.device)
    import aclnn_gpu as acl
    mach = machine()                                     # load average at the start included
    bench = Bench(kind, args.quick)
    torch = bench.torch
    out = Path(args.out)
    dt = F32
    # ladder positions e: the problem is 100**e times the smallest one (a 1000x span in the full run,
    # 100x in the quick one); the operators table uses the size at `mid`
    ladder = [0.25, 0.75, 1.25] if args.quick else [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    mid = 1.25 if args.quick else 1.0
    n_calls = 50 if args.quick else 200
    if kind == "emulated":
        ladder, mid, n_calls = [0.0, 0.5, 1.0], 0.5, 5

    steps = 1 + len(FAMILIES) * (len(ladder) + 1 + 2)
    bar = common.Progress(steps, "bench")
    bar.note("device ceilings")
    ceilings = common.measure_ceilings(kind, args.quick)
    bar.step("ceilings")

    scaling, operators, overhead = [], [], []
    for fam in FAMILIES:
        for e in ladder:
            p = bench.params(fam, e)
            bar.note(f"{fam.backward} {p}")
            r = bench.measure(fam, p, "backward", dt)
            scaling.append({"operator": fam.backward, "e": e, "params": list(p), "shapes": fam.shapes(p),
                            "size": fam.size(p), "size_unit": "elements of the main input", **r})
            bar.step(fam.backward)
        for direction in ("forward", "backward"):
            name = fam.forward if direction == "forward" else fam.backward
            p = bench.params(fam, mid)
            hit = [s for s in scaling if s["operator"] == name and s["e"] == mid]
            if hit:
                r = {k: v for k, v in hit[0].items() if k.endswith("_ms")}
            else:
                bar.note(f"{name} {p}")
                r = bench.measure(fam, p, direction, dt)
                bar.step(name)
            w = fam.work(p, direction, dt)
            ceiling = ceilings["matmul_GFLOPs"] if fam.metric == "flops" else ceilings["copy_GBps"]
            ours_rate, torch_rate = w / r["ours_ms"] / 1e6, w / r["torch_ms"] / 1e6   # GB/s or GFLOP/s
            operators.append({"operator": name, "direction": direction, "shapes": fam.shapes(p), "params": list(p),
                              "dtype": dt.name, **r, "ratio": r["ours_ms"] / r["torch_ms"], "metric": fam.metric,
                              "work": w, "ours_rate": ours_rate, "torch_rate": torch_rate,
                              "ours_fraction": ours_rate / ceiling, "torch_fraction": torch_rate / ceiling})
            bar.note(f"{name} host overhead")
            overhead.append({"operator": name, **bench.overhead(fam, direction, n_calls)})
            bar.step(f"{name} overhead")
    bar.close()
    failed: list[str] = []

    def section(name: str, fn: Callable[[], Any]) -> Any:
        """A section that may fail on its own (a GPU rule the stand-in missed, say): the tables measured
        so far are still printed and written, the failure is reported and the exit status is 1."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - reported below, with its traceback now
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {type(e).__name__}: {e}")
            return {"error": failed[-1]}
    code_path = section("cuda code path", lambda: host_overhead.cuda_code_path(
        FAMILIES, calls=n_calls, batches=5 if args.quick else 9))
    replays = section("capture", lambda: capture.run(FAMILIES, calls=n_calls, batches=5 if args.quick else 9))
    # the pythonic layers on the cpu device (their cache serves the cpu device only)
    layers = pythonic.measure(FAMILIES, calls=min(n_calls, 100), batches=5 if args.quick else 9) \
        if kind == "cpu" else None
    if kind != "cuda":   # a loaded machine can spoil one measurement: the best of the start and the end
        again = common.measure_ceilings(kind, args.quick)
        ceilings = {k: max(v, again.get(k, v)) for k, v in ceilings.items()}
        for r in operators:
            ceiling = ceilings["matmul_GFLOPs"] if r["metric"] == "flops" else ceilings["copy_GBps"]
            r["ours_fraction"], r["torch_fraction"] = r["ours_rate"] / ceiling, r["torch_rate"] / ceiling

    # the acceptance line: backward operators at mid sizes (PyTorch 5 to 250 ms), fp32
    per_op = {}
    for fam in FAMILIES:
        pts = sorted((s for s in scaling if s["operator"] == fam.backward), key=lambda s: s["size"])
        # a point whose PyTorch time exceeds 1.5x that of a larger size is a scheduler stall (PyTorch's
        # OpenMP threads preempted on a loaded machine), not a mid size: such points are left out
        clean = [s for i, s in enumerate(pts) if all(s["torch_ms"] <= 1.5 * t["torch_ms"] for t in pts[i + 1:])]
        inside = [s for s in clean if 5.0 <= s["torch_ms"] <= 250.0]
        if not inside:   # none in range: the point nearest to it
            inside = [min(pts, key=lambda s: abs(math.log(max(s["torch_ms"], 1e-6) / 35.0)))]
        per_op[fam.backward] = {"ratio": common.geomean([s["ours_ms"] / s["torch_ms"] for s in inside]),
                                "points": [s["shapes"] for s in inside]}
    gm = common.geomean([v["ratio"] for v in per_op.values()])
    worst_name = max(per_op, key=lambda k: per_op[k]["ratio"])
    worst = per_op[worst_name]["ratio"]
    passed = gm <= 0.8 and worst <= 1.5
    goal = _fastest_goal(operators, scaling)
    elapsed = time.perf_counter() - t_start

    result = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "device": kind,
              "device_description": _describe(), "quick": args.quick, "dtype": dt.name, "machine": mach,
              "ceilings": ceilings, "operators": operators, "overhead": overhead,
              "cuda_code_path": code_path, "capture": replays, "pythonic": layers, "scaling": scaling,
              "acceptance": {"per_operator": per_op, "geomean": gm, "max": worst, "max_operator": worst_name,
                             "rule": "geomean <= 0.8 and max <= 1.5", "pass": passed,
                             "applies": kind == "cpu"},
              "fastest_goal": goal,
              "elapsed_s": elapsed}

    unit = "GFLOP/s" if kind != "cuda" else "TFLOP/s"
    print(f"# aclnn_gpu {acl.__version__} vs PyTorch {torch.__version__} on `{kind}` "
          f"({result['device_description']}), {dt.name}, {result['date']}\n")
    print(f"Measured ceilings: copy bandwidth {ceilings['copy_GBps']:.1f} GB/s (read + write), "
          f"fp32 matrix throughput {ceilings['matmul_GFLOPs']:.1f} GFLOP/s. Times are medians (ms), with "
          f"the fastest run beside them on the CPU; ratio = ours / PyTorch (lower is better).\n")
    load = result["machine"]["loadavg_at_start"][0]
    if kind != "cuda" and load > 0.5 * (os.cpu_count() or 1):
        print(f"WARNING: load average {load:.1f} on {os.cpu_count()} cores when the run started: other processes "
              f"share the CPU, so these times are noisy (run again on a quiet machine).\n")
    print("## Operators (mid size)\n")
    rows = []
    for r in operators:
        scale = 1e3 if (r["metric"] == "flops" and kind == "cuda") else 1.0
        rate = f"{r['ours_rate'] / scale:.1f} {unit}" if r["metric"] == "flops" else f"{r['ours_rate']:.1f} GB/s"
        rows.append([r["operator"], r["direction"], r["shapes"], r["dtype"], r["ours_ms"], r["torch_ms"],
                     f"{r['ratio']:.2f}x", *_fastest_cells(r), fmt_work(r["metric"], r["work"]), rate,
                     f"{100 * r['ours_fraction']:.0f}%", f"{100 * r['torch_fraction']:.0f}%"])
    fastest = ["ours fastest", "torch fastest", "ratio fastest"] if "ours_min_ms" in operators[0] else []
    print(common.markdown_table(["operator", "dir", "shapes", "dtype", "ours ms", "torch ms", "ratio", *fastest,
                                 "min bytes/FLOPs", "ours achieved", "ours % of ceiling", "torch % of ceiling"], rows,
                                "llll" + "r" * (7 + len(fastest))))
    print(f"\n## Host overhead per call, tiny tensors (microseconds; {n_calls} calls, median of batches)\n")
    print(common.markdown_table(
        ["operator", "GetWorkspaceSize + execute + sync", "GetWorkspaceSize + execute",
         "reused executor: execute + sync", "reused executor: execute", "PyTorch call"],
        [[o["operator"], o["get_ws_execute_sync_us"], o["get_ws_execute_us"], o["reused_execute_sync_us"],
          o["reused_execute_us"], o["torch_us"]] for o in overhead], "lrrrrr"))
    print("\n## Host overhead of the cuda code path (microseconds per call; CuPy stand-in whose launches "
          "return at once, tiny tensors, repeatable executor, median of batches)\n")
    print(code_path["error"] if "error" in code_path else host_overhead.table(code_path))
    print("\n## Replaying a captured model (aclmdlRIExecuteAsync) beside the direct calls (microseconds per "
          "operator; tiny tensors, median of batches)\n")
    print(replays["error"] if "error" in replays else capture.table(replays))
    if layers is not None:
        print("\n## Tiny functional and aclnn_gpu.torch calls beside PyTorch's (microseconds per call; cpu device)\n")
        print(pythonic.table(layers))
    print("\n## Scaling of the backward operators (ms)\n")
    print(common.markdown_table(["operator", "shapes", "elements", "ours ms", "torch ms", "ratio", *fastest],
                                [[s["operator"], s["shapes"], s["size"], s["ours_ms"], s["torch_ms"],
                                  f"{s['ours_ms'] / s['torch_ms']:.2f}x", *_fastest_cells(s)] for s in scaling],
                                "llrrrr" + "r" * len(fastest)))
    print("\n## Acceptance (cpu): backward operators, fp32, sizes where PyTorch takes 5-250 ms\n")
    print(common.markdown_table(["operator", "ours / torch (geomean over the sizes)", "sizes"],
                                [[k, f"{v['ratio']:.2f}x", "; ".join(v["points"])] for k, v in per_op.items()], "lrl"))
    verdict = "PASS" if passed else "FAIL"
    if kind != "cpu":
        verdict += " (the rule is for the cpu device; informational here)"
    print(f"\nACCEPTANCE geomean {gm:.3f} (<= 0.8), max {worst:.3f} {worst_name} (<= 1.5): {verdict}")
    if goal:
        print(f"FASTEST-RUN GOAL (fastest runs, informational): geomean over the operators table "
              f"{goal['geomean']:.2f} (<= 0.6); max {goal['max']:.2f} {goal['max_case']} over the rows where "
              f"PyTorch takes > 0.2 ms (<= 1.3)")
    write_json(out, result)
    for f in plots(out, result):
        print(f"wrote {f}")
    print(f"wrote {out / 'bench.json'}; {elapsed:.0f} s")
    for failure in failed:
        print(f"bench: a section FAILED: {failure}")
    return 1 if failed else 0


def _fastest_goal(operators: list[dict], scaling: list[dict]) -> dict | None:
    """The cpu goal on the fastest runs (less sensitive to a busy neighbour than medians):
    geomean of ours / PyTorch over the operators table, and the worst ratio over every row of the
    operators and scaling tables where PyTorch's fastest run takes more than 0.2 ms."""
    if not operators or "ours_min_ms" not in operators[0]:
        return None
    rows = [(r["operator"] + " " + r["shapes"], r["ours_min_ms"] / r["torch_min_ms"], r["torch_min_ms"])
            for r in operators + scaling]
    slow = [row for row in rows if row[2] > 0.2] or rows
    worst = max(slow, key=lambda row: row[1])
    return {"geomean": common.geomean([r["ours_min_ms"] / r["torch_min_ms"] for r in operators]),
            "max": worst[1], "max_case": worst[0]}


def write_json(out: Path, result: dict) -> None:
    common.write_json(out / "bench.json", result)


def _describe() -> str:
    from aclnn_gpu.runtime import get_device
    try:
        return get_device().describe()
    except Exception:  # noqa: BLE001
        return platform.processor() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
