"""The per-operator table: for each of the ten operators, our kernels' DRAM bytes and modelled
H100 time (the emulator's profiler, aclnn_gpu/profile) beside PyTorch CUDA's launch sequence read
from its source (bench/torch_launches.py: an estimate, priced with the same roofline model), and the
cpu device against PyTorch CPU from one run of bench.cpu_gap at bench's mid sizes.

    python -m bench.gpu_model                   # all ten; prints the Markdown table
    python -m bench.gpu_model --write-readme    # and replaces the generated block in bench/README.md
    python -m bench.gpu_model --ops CtcLossBackward,ConvTbcBackward --no-cpu
    python -m bench.gpu_model --cpu-json FILE   # cpu figures from an earlier bench.cpu_gap --json run
    python -m bench.gpu_model --conv-tbc        # ConvTbc's launch lists on the parallelism-aware H200 model

Nothing here ran on a GPU: the GPU columns are models. The emulator needs clang++ (like the profiler).
The cpu timings run in a child process on the cpu device (the profiler needs the emulated device with
its profiling build in this one); run with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

# (profiler operator, dims, dtype): realistic training shapes, scaled down where the emulator needs
# it (traffic is linear in the scaled dimension, bench/README.md); bench family and direction of the
# cpu row
CASES: list[tuple[str, dict, str, str, str]] = [
    ("KlDiv", {"N": 2048, "C": 4096}, "fp32", "KlDiv", "forward"),
    ("KlDivBackward", {"N": 2048, "C": 4096}, "fp32", "KlDiv", "backward"),
    ("CrossEntropyLoss", {"N": 256, "C": 128256}, "bf16", "CrossEntropy", "forward"),
    ("CrossEntropyLossGrad", {"N": 256, "C": 128256}, "bf16", "CrossEntropy", "backward"),
    ("CtcLoss", {"T": 1000, "N": 2, "C": 5000, "L": 100}, "fp32", "CtcLoss", "forward"),
    ("CtcLossBackward", {"T": 1000, "N": 2, "C": 5000, "L": 100}, "fp32", "CtcLoss", "backward"),
    ("ConvTbc", {"T": 1024, "B": 4, "Cin": 1024, "Cout": 1024, "K": 3, "pad": 1}, "fp16", "ConvTbc", "forward"),
    ("ConvTbcBackward", {"T": 1024, "B": 4, "Cin": 1024, "Cout": 1024, "K": 3, "pad": 1}, "fp16", "ConvTbc",
     "backward"),
    ("ScaledMaskedSoftmax", {"B": 1, "H": 4, "S1": 1024, "S2": 1024, "MB": 1, "MH": 1}, "fp16",
     "ScaledMaskedSoftmax", "forward"),
    ("ScaledMaskedSoftmaxBackward", {"B": 1, "H": 4, "S1": 1024, "S2": 1024, "MB": 1, "MH": 1}, "fp16",
     "ScaledMaskedSoftmax", "backward"),
]
BEGIN, END = "<!-- bench.gpu_model: begin -->", "<!-- bench.gpu_model: end -->"


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _us(s: float) -> str:
    return f"{s * 1e6:.1f} us"


def profile(cases: list[tuple], sample: int) -> list[dict]:
    """Our launches, bytes and modelled time per case (emulated device, profiling build)."""
    os.environ["ACLNN_GPU_DEVICE"] = "emulated"
    os.environ["ACLNN_GPU_EMU_PROFILE"] = "1"
    from aclnn_gpu.profile import profile_call
    from aclnn_gpu.profile.operators import DTYPES

    from bench import torch_launches
    rows = []
    for op, dims, dtype, _, _ in cases:
        t0 = time.perf_counter()
        p = profile_call(op, dims, dtype, sample_every=sample)
        e = DTYPES[dtype].itemsize
        theirs = torch_launches.model(op, p.dims, e, DTYPES[dtype].name)
        apex = (torch_launches.model(op, p.dims, e, DTYPES[dtype].name, torch_launches.APEX)
                if op in torch_launches.APEX else None)
        rows.append({"op": op, "dims": p.dims, "dtype": dtype, "launches": len(p.launches),
                     "kernels": [x.kernel for x in p.launches], "dram_bytes": p.dram_bytes,
                     "l2_dram_bytes": p.l2_dram_bytes, "min_bytes": p.min_bytes, "seconds": p.model_seconds,
                     "latency_seconds": p.latency_model_seconds,
                     "torch": theirs, "apex": apex, "emulator_s": time.perf_counter() - t0})
        print(f"  profiled {op} in {rows[-1]['emulator_s']:.0f} s", file=sys.stderr, flush=True)
    return rows


def cpu_rows(cases: list[tuple], reps: int) -> dict:
    """bench.cpu_gap at the mid sizes, in a child process on the cpu device."""
    families = sorted({c[3] for c in cases})
    directions = sorted({c[4] for c in cases})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cpu.json"
        env = dict(os.environ, ACLNN_GPU_DEVICE="cpu", PYTHONPATH=str(ROOT))
        env.pop("ACLNN_GPU_EMU_PROFILE", None)
        subprocess.run([sys.executable, "-m", "bench.cpu_gap", "--sizes", "mid", "--ops", ",".join(families),
                        "--dirs", ",".join(directions), "--reps", str(reps), "--json", str(out)],
                       cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def _lat(r: dict) -> float:
    """The latency-aware model's seconds (profile/latency.py: recursions priced by their steps'
    critical path); rows without one (no recursion kernel) equal the bytes-only model."""
    return r.get("latency_seconds", r["seconds"])


def _dims(d: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items() if k not in ("strided", "none", "bcast", "stridedout",
                                                                   "fptargets"))


def render(rows: list[dict], cpu: dict | None) -> str:
    by_case = {}
    if cpu:
        for r in cpu["rows"]:
            by_case[(r["family"], r["direction"])] = r
    lines = [
        "| operator | profiled shape | ours: launches | ours: DRAM bytes (L2 model) | minimum "
        "| ours: modelled H100, bytes-only / latency-aware "
        "| PyTorch: launches (est.) | PyTorch: bytes (est.) "
        "| PyTorch: modelled H100 (est.), bytes-only / latency-aware "
        "| ours / PyTorch (model), bytes-only / latency-aware "
        "| cpu: bench mid shape (fp32) | cpu ours fastest / median (ms) | cpu PyTorch fastest / median (ms) "
        "| cpu ratio fastest (median) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r, case in zip(rows, CASES_BY_OP(rows)):
        t = r["torch"]
        c = by_case.get((case[3], case[4]))
        cpu_cells = ["", "", "", ""] if c is None else [
            c["shapes"], f"{c['ours_min_ms']:.3g} / {c['ours_ms']:.3g}",
            f"{c['torch_min_ms']:.3g} / {c['torch_ms']:.3g}",
            f"{c['ours_min_ms'] / c['torch_min_ms']:.2f}x ({c['ours_ms'] / c['torch_ms']:.2f}x)"]
        lines.append("| " + " | ".join([
            f"aclnn{r['op']}", f"{_dims(r['dims'])} {r['dtype']}", str(r["launches"]), _bytes(r["l2_dram_bytes"]),
            _bytes(r["min_bytes"]), f"{_us(r['seconds'])} / {_us(_lat(r))}", str(t["launches"]), _bytes(t["bytes"]),
            f"{_us(t['seconds'])} / {_us(_lat(t))}",
            f"{r['seconds'] / t['seconds']:.2f}x / {_lat(r) / _lat(t):.2f}x", *cpu_cells]) + " |")
    notes = [f"- {r['op']}: apex's fused kernel would be {r['apex']['launches']} launch, {_bytes(r['apex']['bytes'])}, "
             f"{_us(r['apex']['seconds'])} (ours / apex {r['seconds'] / r['apex']['seconds']:.2f}x)"
             for r in rows if r.get("apex")]
    seqs = [f"- {r['op']}: " + "; ".join(r["torch"]["names"]) for r in rows]
    head = [f"Generated {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC. GPU columns are models: "
            "bytes-only = DRAM bytes at 3.35 TB/s + 3 us per launch; latency-aware = the same, except that a "
            "recursion kernel (CTC's alpha and beta, both sides) costs the larger of its bytes and its T steps' "
            "critical path (aclnn_gpu/profile/latency.py)."]
    if cpu:
        head.append(f"cpu columns: one `bench.cpu_gap --sizes mid` run, load average {cpu['load_start']:.1f} at "
                    f"its start (2 cores), fastest and median of each library's blocks; cpu FASTEST-RUN GOAL "
                    f"geomean {cpu['goal']['geomean']:.2f} (<= 0.6).")
    return "\n".join([" ".join(head), ""] + lines + ["", "PyTorch sequences priced (bench/torch_launches.py):"] + seqs
                     + ([""] + notes if notes else []))


def CASES_BY_OP(rows: list[dict]) -> list[tuple]:  # noqa: N802 - the CASES entry of each row
    index = {c[0]: c for c in CASES}
    return [index[r["op"]] for r in rows]


def write_readme(block: str, path: Path = ROOT / "bench" / "README.md") -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + BEGIN + "\n" + block + "\n" + END + tail)


# ------------------------------------------------------------------ launch lists at the bench ladder
LADDER = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)   # bench/run.py's ladder positions (full and --quick)


class ShapeBuffers:
    """A bench.common.Buffers stand-in that gives each tensor device memory without copying anything
    into it: a plan's launch list depends on shapes, dtypes, addresses and host arguments (CTC's lengths),
    never on device values, so the bench's largest shapes cost no data. `op` runs GetWorkspaceSize and
    returns the plan (the emulated device records it for its own SM count; `parallel.plan_steps`
    records it again for the modelled GPU's)."""

    def __init__(self) -> None:
        self.pointers: list[int] = []
        self.tensors: list = []
        self.arrays: list = []
        self.executors: list = []

    def malloc(self, nbytes: int) -> int:
        import aclnn_gpu as acl
        status, ptr = acl.aclrtMalloc(max(int(nbytes), 1), 0)
        assert status == 0, acl.aclGetRecentErrMsg()
        self.pointers.append(ptr)
        return ptr

    def tensor(self, array):
        import aclnn_gpu as acl
        from aclnn_gpu.base import dtypes
        shape = list(array.shape)
        t = acl.aclCreateTensor(shape, dtypes.from_numpy(array.dtype), None, 0, acl.ACL_FORMAT_ND, shape,
                                self.malloc(array.nbytes))
        self.tensors.append(t)
        return t

    def empty(self, shape, dtype):
        return self.tensor(np.empty(tuple(shape), np.dtype(dtype)))

    def int_array(self, values):
        import aclnn_gpu as acl
        a = acl.aclCreateIntArray([int(v) for v in values])
        self.arrays.append(a)
        return a

    def op(self, get_ws, execute, *args):
        import aclnn_gpu as acl
        status, _, ex = get_ws(*args)
        assert status == 0, acl.aclGetRecentErrMsg()
        self.executors.append(ex)
        return ex.plan

    def close(self) -> None:
        import aclnn_gpu as acl
        for ex in self.executors:
            acl.aclDestroyAclOpExecutor(ex)
        for t in self.tensors:
            acl.aclDestroyTensor(t)
        for a in self.arrays:
            acl.aclDestroyIntArray(a)
        for p in self.pointers:
            acl.aclrtFree(p)
        self.__init__()


def shape_data(fam, p: tuple, dt) -> dict:
    """The inputs `fam.ours` reads, as uninitialised host arrays of the right shapes (no page touched);
    CTC's real data (its lengths are host arguments the plan reads; small at every ladder shape)."""
    e = lambda *shape, t=dt: np.empty(shape, t)  # noqa: E731
    if fam.name == "KlDiv":
        return {"x": e(*p), "t": e(*p), "g": e()}
    if fam.name == "CrossEntropy":
        return {"x": e(*p), "t": e(p[0], t=np.int64), "lp": e(*p), "g": e()}
    if fam.name == "ConvTbc":
        T, B, Cin, Cout, K, pad = p
        return {"g": e(T + 2 * pad - K + 1, B, Cout), "x": e(T, B, Cin), "w": e(K, Cin, Cout), "b": e(Cout)}
    if fam.name == "ScaledMaskedSoftmax":
        B, N, S1, S2 = p
        return {"x": e(*p), "y": e(*p), "g": e(*p), "mask": e(B, 1, S1, S2, t=np.bool_)}
    return fam.data(p, dt, np.random.default_rng(0))


def ladder_plans(fams=None, ladder=LADDER, dt=np.dtype(np.float32), directions=("forward", "backward")):
    """(family, direction, params, plan) of every operator at every ladder shape, plans built on the
    current device (emulated in the test) over ShapeBuffers. A generator: each case's buffers are freed
    once the next is asked for."""
    from bench.families import FAMILIES
    for fam in fams or FAMILIES:
        for e_ in ladder:
            p = fam.params(e_)
            for direction in directions:
                b = ShapeBuffers()
                try:
                    plan = fam.ours(b, shape_data(fam, p, dt), direction, p)
                    yield fam, direction, p, plan
                finally:
                    b.close()


# ------------------------------------------------------------------ ConvTbc on the parallel model
CONV_SHAPES = [(2530, 16, 128, 3, 1), (2530, 16, 64, 3, 1), (1024, 16, 1024, 5, 2), (50, 256, 128, 3, 1)]


def conv_tbc_model(shapes=CONV_SHAPES, dtypes=("fp32", "fp16", "bf16")) -> list[dict]:
    """ConvTbc forward and backward's present launch lists (recorded for the H200's 132 SMs on the
    emulated device, cubeMathType 0) priced by aclnn_gpu/profile/parallel.py: a MODEL, not a
    measurement. Needs the emulated device selected (`main` does it)."""
    from aclnn_gpu.profile import parallel
    from aclnn_gpu.profile.operators import DTYPES
    from bench.families import ConvTbc
    fam = ConvTbc()
    rows = []
    for T, B, C, K, pad in shapes:
        p = (T, B, C, C, K, pad)
        for dtype in dtypes:
            for direction in ("forward", "backward"):
                b = ShapeBuffers()
                try:
                    plan = fam.ours(b, shape_data(fam, p, DTYPES[dtype]), direction, p)
                    steps = parallel.plan_steps(plan)
                finally:
                    b.close()
                slowest = max(steps, key=lambda s: s.seconds)
                rows.append({"shape": p, "dtype": dtype, "direction": direction, "launches": len(steps),
                             "seconds": sum(s.seconds for s in steps),
                             "full_seconds": sum(s.full_seconds for s in steps),
                             "fill_problems": parallel.fill_problems(steps), "slowest": slowest.describe(),
                             "slowest_seconds": slowest.seconds})
    return rows


def render_conv_tbc(rows: list[dict]) -> str:
    lines = ["ConvTbc's present launch lists on the parallelism-aware H200 MODEL (aclnn_gpu/profile/parallel.py: "
             "132 SMs, 4.0 TB/s, dense fp32 67 / TF32 495 / fp16 and bf16 989 TFLOP/s, 3 us per launch; "
             "cubeMathType 0), beside the same launches priced as if each filled the GPU (the roofline). "
             "Not a measurement.", "",
             "| input (T, B, C), K, pad | dtype | direction | launches | model | if every launch filled the GPU "
             "| launches under the fill rule | slowest launch (model) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        T, B, C, _, K, pad = r["shape"]
        lines.append(f"| ({T}, {B}, {C}), K={K}, pad={pad} | {r['dtype']} | {r['direction']} | {r['launches']} | "
                     f"{_us(r['seconds'])} | {_us(r['full_seconds'])} | {len(r['fill_problems'])} | "
                     f"{r['slowest']}: {_us(r['slowest_seconds'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated aclnn names without 'aclnn' (default: all ten)")
    ap.add_argument("--no-cpu", action="store_true", help="leave the cpu columns empty")
    ap.add_argument("--cpu-json", metavar="PATH", help="cpu figures from an earlier `bench.cpu_gap --json` run")
    ap.add_argument("--reps", type=int, default=9, help="cpu runs per block (default 9)")
    ap.add_argument("--sample", type=int, default=1, metavar="N", help="profiler: trace every N-th block")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--write-readme", action="store_true", help="replace the generated block of bench/README.md")
    ap.add_argument("--conv-tbc", action="store_true",
                    help="only ConvTbc's launch lists at the GPU check's four shapes on the parallelism-aware "
                         "H200 model (seconds, no emulator run)")
    args = ap.parse_args(argv)
    if args.conv_tbc:
        os.environ["ACLNN_GPU_DEVICE"] = "emulated"
        import aclnn_gpu as acl
        assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
        rows = conv_tbc_model()
        print(render_conv_tbc(rows))
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
        return 0
    wanted = [s for s in args.ops.split(",") if s]
    cases = [c for c in CASES if not wanted or c[0] in wanted]
    if not cases:
        ap.error(f"no operator among {wanted}")
    cpu = None
    if args.cpu_json:
        cpu = json.loads(Path(args.cpu_json).read_text())
    elif not args.no_cpu:
        cpu = cpu_rows(cases, args.reps)
    rows = profile(cases, args.sample)
    block = render(rows, cpu)
    print(block)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "cpu": cpu}, indent=1, default=str))
    if args.write_readme:
        write_readme(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
