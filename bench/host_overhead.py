"""The "cuda code path" host-overhead table: what one call costs in the library's own Python when
the GPU and CuPy cost nothing.

The `cuda` device's code runs over `bench/instant_cupy.py` (launches, copies and synchronizes
return at once; libcublas's C entry points are a null library, `null_cublas.c`, under the library's
own GEMM wrapper), so a timed call is exactly the host time a GPU user pays before any kernel runs:
the executor checks, the pointer checks, the frozen launches and the cuBLAS calls. Timed for the five backward
operators on tiny tensors (the figures do not depend on the size: nothing is computed), beside
one tiny PyTorch op (`torch.add` of two 8-element tensors) timed in the same run. Per-call figures
are medians over batches of calls. Also run alone: `python -m bench.host_overhead [--calls N]`.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import common, instant_cupy
from .families import FAMILIES


def batch_us(fn: Callable[[], Any], calls: int, batches: int, after: Callable[[], Any] = lambda: None) -> list[float]:
    """Per-call microseconds of each of `batches` timed batches of `calls` calls, after one warm-up
    batch; `after` runs between batches, untimed (the cpu device's synchronize)."""
    for _ in range(calls):
        fn()
    after()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        after()
    return samples


def per_call_us(fn: Callable[[], Any], calls: int, batches: int, after: Callable[[], Any] = lambda: None,
                pick: Callable[[list[float]], float] = statistics.median) -> float:
    """The median (or `pick`) of batch_us: the per-call figure of the host-overhead tables."""
    return pick(batch_us(fn, calls, batches, after))


class InstantDevice:
    """The cuda device over instant_cupy, its GEMMs through the library's cuBLAS wrapper into
    `instant_cupy.null_cublas()`, as the calling thread's current device for the `with` block. With
    `binding="nvmath"` the GEMMs go through nvmath-python's binding (kernels/gemm.NvmathHandle) into the
    same null library, loaded under libcublas's soname beside a null driver (bench/launch_paths.py):
    nvmath-python must be importable, and the process keeps the null libraries."""

    def __init__(self, binding: str = "ctypes"):
        self.binding = binding

    def __enter__(self) -> Any:
        from aclnn_gpu import runtime
        from aclnn_gpu.device.cuda import CudaDevice
        from aclnn_gpu.kernels import gemm

        self.functions = gemm._FUNCTIONS
        self.chosen = os.environ.get(gemm.BINDING_ENV)
        if self.binding == "nvmath":
            from . import launch_paths
            launch_paths.load_null_libraries()
        os.environ[gemm.BINDING_ENV] = self.binding    # read when the device makes its handle pool
        gemm._FUNCTIONS = instant_cupy.null_cublas()   # what gemm.cublas_functions() hands the handles
        self.scope = runtime.using_device(CudaDevice(instant_cupy, kind="cuda"))
        return self.scope.__enter__()

    def __exit__(self, *exc: object) -> None:
        from aclnn_gpu.kernels import gemm
        try:
            self.scope.__exit__(*exc)
        finally:
            gemm._FUNCTIONS = self.functions
            if self.chosen is None:
                os.environ.pop(gemm.BINDING_ENV, None)
            else:
                os.environ[gemm.BINDING_ENV] = self.chosen


def cuda_code_path(families: list, calls: int = 200, batches: int = 9,
                   pick: Callable[[list[float]], float] = statistics.median, binding: str = "ctypes") -> dict:
    """Per-call microseconds of the five backward operators over the instant CuPy stand-in."""
    with InstantDevice(binding):
        return per_operator(families, calls, batches, pick)


def per_operator(families: list, calls: int = 200, batches: int = 9,
                 pick: Callable[[list[float]], float] = statistics.median) -> dict:
    """Per-call microseconds of the five backward operators on the process's device: execute of a
    repeatable executor (queued only) and GetWorkspaceSize + execute; the median batch, or `pick`'s
    (min: the fastest batch, the figure that escapes preemption on a loaded machine)."""
    import torch

    import aclnn_gpu as acl
    a, b = torch.ones(8), torch.ones(8)
    rows = []
    for fam in families:
        p = fam.tiny()
        d = fam.data(p, np.dtype(np.float32), np.random.default_rng(1))
        buffers = common.Buffers()
        try:
            op = fam.ours(buffers, d, "backward", p)
            get_ws, execute, args = _second_call(fam, buffers, d, p)
            work = buffers.malloc(max(op.ws, 1 << 16))
            stream = buffers.stream

            def fresh() -> None:
                _, ws, ex = get_ws(*args)
                execute(work if ws else None, ws, ex, stream)

            def sync() -> None:
                acl.aclrtSynchronizeStream(stream)

            def uncached() -> None:
                _, ws, ex = get_ws.uncached(*args)
                execute(work if ws else None, ws, ex, stream)

            rows.append({"operator": fam.backward,
                         "execute_us": per_call_us(op.enqueue, calls, batches, sync, pick),
                         "get_ws_execute_us": per_call_us(fresh, calls, batches, sync, pick),
                         "uncached_get_ws_execute_us": per_call_us(uncached, calls, batches, sync, pick)})
        finally:
            buffers.close()
    torch_us = per_call_us(lambda: torch.add(a, b), calls, batches, pick=pick)
    for row in rows:
        row["torch_add_us"] = torch_us
    return {"rows": rows, "torch_add_us": torch_us,
            "median_execute_us": statistics.median(r["execute_us"] for r in rows),
            "median_get_ws_execute_us": statistics.median(r["get_ws_execute_us"] for r in rows),
            "median_uncached_get_ws_execute_us": statistics.median(r["uncached_get_ws_execute_us"] for r in rows)}


def _second_call(fam: Any, buffers: Any, d: dict, p: tuple) -> tuple:
    """The (GetWorkspaceSize, execute, arguments) `fam.ours` builds, captured without running it."""
    captured: dict = {}
    real = buffers.op

    def grab(get_ws: Callable, execute: Callable, *args: Any) -> Any:
        captured.update(get_ws=get_ws, execute=execute, args=args)
        return real(get_ws, execute, *args)
    buffers.op = grab
    try:
        fam.ours(buffers, d, "backward", p)
    finally:
        buffers.op = real
    return captured["get_ws"], captured["execute"], captured["args"]


class _Stop(Exception):
    """Raised after an operator's last output check: phase 1 stopped where its checks end."""


@contextlib.contextmanager
def operator_case(fam: Any) -> Iterator[SimpleNamespace]:
    """One backward operator on tiny tensors over the process's device: its GetWorkspaceSize, execute
    and arguments, a repeatable executor `op` over them, a workspace and a stream."""
    p = fam.tiny()
    d = fam.data(p, np.dtype(np.float32), np.random.default_rng(1))
    buffers = common.Buffers()
    try:
        op = fam.ours(buffers, d, "backward", p)
        get_ws, execute, args = _second_call(fam, buffers, d, p)
        yield SimpleNamespace(name=fam.backward, op=op, get_ws=get_ws, execute=execute, args=args,
                              work=buffers.malloc(max(op.ws, 1 << 16)), stream=buffers.stream)
    finally:
        buffers.close()


def phase_calls(case: SimpleNamespace) -> dict[str, Callable[[], Any]]:
    """The pieces of one GetWorkspaceSize + execute, each a callable that does only that piece (and what
    it needs before it); `phase_table` turns their costs into the cost of each phase by differences."""
    from aclnn_gpu import executor as executor_module
    from aclnn_gpu.plans import checks as checks_module
    from aclnn_gpu.runtime import get_device, resolve_stream

    device = get_device()
    get_ws, execute, args, work, stream = case.get_ws, case.execute, case.args, case.work, case.stream
    build = case.op.ex.source[0].build   # the operator's phase 1, as its executor keeps it to plan again
    plan = case.op.ex.plan
    bare = build(device, *args)            # before its launch is recorded
    sm_count, arch = device.sm_count, device.arch
    impl = resolve_stream(stream, case.name, device=device)
    ws_arg = work if plan.workspace_size else 0

    def total() -> None:                   # the uncached path (as with ACLNN_CACHE_LIMIT=0)
        _, ws, ex = get_ws.uncached(*args)
        execute(work if ws else None, ws, ex, stream)

    def total_cached() -> None:            # a hit of phase 1's executor cache
        _, ws, ex = get_ws(*args)
        execute(work if ws else None, ws, ex, stream)

    from aclnn_gpu.device.registry import Registry
    from aclnn_gpu.executor.cache import cache

    def hit_executor() -> Any:   # as an executor-cache hit makes it: its tensors proven at this generation
        ex = executor_module.aclOpExecutor(case.name, plan, device)
        ex.checked_generation = Registry.generation
        return ex

    real_output = checks_module.Checks.output
    outputs = 0

    def counting(*a: Any, **k: Any) -> None:   # (no `self` parameter: ConvTbc names an input `self`)
        nonlocal outputs
        outputs += 1
        real_output(*a, **k)
    checks_module.Checks.output = counting   # type: ignore[method-assign]
    try:
        build(device, *args)
    finally:
        checks_module.Checks.output = real_output   # type: ignore[method-assign]
    last = outputs

    def checks() -> None:
        seen = 0

        def stopping(*a: Any, **k: Any) -> None:
            nonlocal seen
            real_output(*a, **k)
            seen += 1
            if seen == last:
                raise _Stop
        checks_module.Checks.output = stopping   # type: ignore[method-assign]
        try:
            build(device, *args)
        except _Stop:
            pass
        finally:
            checks_module.Checks.output = real_output   # type: ignore[method-assign]

    def stop_baseline() -> None:   # what `checks` adds around the checks themselves
        def stopping(*a: Any, **k: Any) -> None:
            raise _Stop
        checks_module.Checks.output = stopping   # type: ignore[method-assign]
        try:
            try:
                checks_module.Checks("x").output()
            except _Stop:
                pass
        finally:
            checks_module.Checks.output = real_output   # type: ignore[method-assign]

    return {
        "total": total,
        "total_cached": total_cached,
        "lookup": lambda: cache.lookup(cache.key(build, device, args), args),
        "checks": checks,
        "stop_baseline": stop_baseline,
        "build": lambda: build(device, *args),
        "key": bare.launch_key,
        "record": lambda: bare.with_frozen_launch(sm_count, arch),
        "executor": lambda: executor_module.aclOpExecutor(case.name, plan, device),
        "execute": case.op.enqueue,
        "execute_fresh": lambda: execute(work if plan.workspace_size else None, plan.workspace_size,
                                         executor_module.aclOpExecutor(case.name, plan, device), stream),
        "execute_hit": lambda: execute(work if plan.workspace_size else None, plan.workspace_size,
                                       hit_executor(), stream),
        "enqueue": lambda: device.enqueue(impl, plan, ws_arg),
    }


PHASES = ("argument reading", "checks", "key", "plan", "launch record", "executor", "execute checks", "enqueue")
CACHED_PHASES = ("argument reading", "cache key and proof", "executor", "execute checks", "enqueue")


def phase_costs(c: dict[str, float], cached: bool = False) -> dict[str, float]:
    """The cost of each phase (PHASES, or CACHED_PHASES for a hit of the executor cache) from the costs
    of `phase_calls`' pieces, and the total."""
    out = {"executor": c["executor"], "enqueue": c["enqueue"],
           "execute checks": c["execute_fresh"] - c["executor"] - c["enqueue"]}
    if cached:
        out["cache key and proof"] = c["lookup"]
        out["execute checks"] = c["execute_hit"] - c["executor"] - c["enqueue"]
        # the rest: the entry points (c_api), the current device, the arguments handed on
        out["argument reading"] = c["total_cached"] - c["lookup"] - c["execute_hit"]
        out["total"] = c["total_cached"]
        return {name: out[name] for name in (*CACHED_PHASES, "total")}
    checks = max(c["checks"] - c["stop_baseline"], 0.0)
    out.update({"checks": checks, "plan": c["build"] - checks, "key": c["key"],
                "launch record": c["record"] - c["key"]})
    out["argument reading"] = c["total"] - c["build"] - c["record"] - c["execute_fresh"]
    out["total"] = c["total"]
    return {name: out[name] for name in (*PHASES, "total")}


def phases_us(families: list, calls: int = 200, batches: int = 9) -> dict[str, dict[str, float]]:
    """Per operator, microseconds per call of each piece of `phase_calls` over the null GPU."""
    out = {}
    with InstantDevice():
        for fam in families:
            with operator_case(fam) as case:
                pieces = phase_calls(case)
                sync = functools.partial(_sync, case.stream)
                out[case.name] = {name: per_call_us(fn, calls, batches, sync) for name, fn in pieces.items()}
    return out


def _sync(stream: Any) -> None:
    import aclnn_gpu as acl
    acl.aclrtSynchronizeStream(stream)


def phase_table(pieces: dict[str, dict[str, float]], unit: str = "us") -> str:
    """Both paths' phases per operator, from the pieces' costs (`phases_us` or `callgrind_counts`)."""
    names = list(pieces)
    headers = ["phase", *[n.removeprefix("aclnn") for n in names]]
    tables = []
    for cached, title in ((False, "GetWorkspaceSize + execute, uncached (checks, plan, launch record)"),
                          (True, "GetWorkspaceSize + execute, an executor-cache hit")):
        costs = {n: phase_costs(pieces[n], cached) for n in names}
        rows = [[phase, *[costs[n][phase] for n in names]] for phase in (*(CACHED_PHASES if cached else PHASES),
                                                                          "total")]
        tables.append(f"{title} ({unit} per call):\n\n" + common.markdown_table(headers, rows, "l" + "r" * len(names)))
    return "\n\n".join(tables)


# ------------------------------------------------------------------ threads
def threads_throughput(families: list, counts: tuple[int, ...] = (1, 2, 4), seconds: float = 1.0) -> list[dict]:
    """Calls per second of GetWorkspaceSize + execute (executor-cache hits) over the null GPU from 1, 2
    and 4 Python threads at once, each on its own tensors and stream of the first family's backward
    operator, for about `seconds` per count. Python runs one thread at a time (the GIL): what this shows
    is that nothing else serialises them, and what switching between threads costs."""
    import aclnn_gpu as acl
    from aclnn_gpu import runtime
    out = []
    with InstantDevice() as device, contextlib.ExitStack() as stack:
        cases = [stack.enter_context(operator_case(families[0])) for _ in range(max(counts))]
        for n in counts:
            done = [0] * n
            start = threading.Barrier(n + 1)
            stop = threading.Event()

            def worker(k: int) -> None:
                case = cases[k]
                get_ws, execute, args, work, stream = case.get_ws, case.execute, case.args, case.work, case.stream
                with runtime.using_device(device):
                    start.wait()
                    while not stop.is_set():
                        for _ in range(50):
                            _, ws, ex = get_ws(*args)
                            execute(work if ws else None, ws, ex, stream)
                        done[k] += 50
                    acl.aclrtSynchronizeStream(stream)
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
            for t in threads:
                t.start()
            start.wait()
            t0 = time.perf_counter()
            time.sleep(seconds)
            stop.set()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            out.append({"threads": n, "calls_per_s": sum(done) / elapsed})
    return out


def threads_table(rows: list[dict]) -> str:
    one = rows[0]["calls_per_s"]
    return (common.markdown_table(["Python threads", "GetWorkspaceSize + execute per second", "vs 1 thread"],
                                  [[r["threads"], f"{r['calls_per_s']:,.0f}", f"{r['calls_per_s'] / one:.2f}x"]
                                   for r in rows], "rrr")
            + f"\n\n(executor-cache hits over the null GPU; load average {os.getloadavg()[0]:.2f} on "
            + f"{os.cpu_count()} CPUs)")


# ------------------------------------------------------------------ instructions per call (callgrind)
# Each measured loop runs inside sys.call_tracing, which nothing else calls: callgrind collects inside
# _PyEval_CallTracing only and dumps when it returns, so every loop gets its own deterministic count
# (interpreter start, imports and set-up are not collected; instrumentation is switched on only
# before the first loop when callgrind_control is there, which makes the run about 3x faster).
CALLGRIND = ("valgrind", "--tool=callgrind", "--toggle-collect=_PyEval_CallTracing",
             "--dump-after=_PyEval_CallTracing")


def callgrind_unavailable() -> str | None:
    """Why instruction counts cannot be taken here (None: they can)."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed"
    return None


def callgrind_counts(measures: list[str], operators: list[str] | None = None,
                     calls: int = 50, binding: str = "ctypes") -> dict[str, dict[str, float]]:
    """Instructions per call of each of `measures` (`measure_calls` names) for each backward operator
    (all, or those of `operators`), over the null GPU, under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        fast = shutil.which("callgrind_control") is not None
        command = [*CALLGRIND, f"--instr-atstart={'no' if fast else 'yes'}", f"--callgrind-out-file={out}",
                   sys.executable, "-m", "bench.host_overhead", "--callgrind-child", "--calls", str(calls),
                   "--measures", ",".join(measures), "--binding", binding]
        if operators:
            command += ["--operators", ",".join(operators)]
        # a coverage tracer (pytest-cov starts one in subprocesses through these) would be counted too
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_CORE_", "COVERAGE_"))}
        env.update(PYTHONHASHSEED="0", ACLNN_GPU_DEVICE="cpu")
        run = subprocess.run(command, cwd=common.ROOT, env=env, capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"callgrind run failed ({run.returncode}):\n{run.stderr[-3000:]}")
        order = json.loads(run.stdout.strip().splitlines()[-1])
        result: dict[str, dict[str, float]] = {}
        for k, (operator, measure, n) in enumerate(order, start=1):
            text = Path(f"{out}.{k}").read_text()
            totals = next(int(line.split()[1]) for line in text.splitlines()
                          if line.startswith(("totals:", "summary:")))
            result.setdefault(operator, {})[measure] = totals / n
        return result


def measure_calls(case: SimpleNamespace) -> dict[str, Callable[[], Any]]:
    """What `callgrind_counts` can measure for one operator: the pieces of `phase_calls`, "execute" (a
    repeatable executor), and "nothing" (an empty call: the loop's own cost)."""
    return {**phase_calls(case), "nothing": lambda: None}


def measure_calls_names() -> tuple[str, ...]:
    return ("total", "total_cached", "lookup", "checks", "stop_baseline", "build", "key", "record", "executor",
            "execute_fresh", "execute_hit", "enqueue")


HEADLINE = ("execute", "total_cached", "total")   # the instruction table's columns
CEILINGS = Path(__file__).with_name("callgrind_ceilings.json")


def instructions_table(counts: dict[str, dict[str, float]]) -> str:
    rows = [[op, c["execute"], c["total_cached"], c["total"]] for op, c in counts.items()]
    for name, pick in (("median", statistics.median), ("slowest", max)):
        rows.append([name, *[pick(c[m] for c in counts.values()) for m in HEADLINE]])
    return (common.markdown_table(["operator", "execute (repeatable executor)", "GetWorkspaceSize + execute",
                                   "the same, uncached"], [[r[0], *[f"{v:,.0f}" for v in r[1:]]] for r in rows],
                                  "lrrr")
            + "\n\n(instructions per call under callgrind, over the null GPU)")


def over_ceiling(counts: dict[str, dict[str, float]]) -> list[str]:
    """The counts above their committed ceiling (bench/callgrind_ceilings.json), one line each."""
    ceilings = json.loads(CEILINGS.read_text())["ceilings"]
    return [f"{op} {measure}: {count:,.0f} instructions per call > ceiling {ceilings[op][measure]:,}"
            for op, by_measure in counts.items() for measure, count in by_measure.items()
            if measure in ceilings.get(op, {}) and count > ceilings[op][measure]]


def _callgrind_child(calls: int, measures: list[str], operators: list[str] | None, binding: str) -> None:
    order = []
    instrumenting = shutil.which("callgrind_control") is None
    with InstantDevice(binding):
        for fam in FAMILIES:
            if operators and fam.backward not in operators:
                continue
            with operator_case(fam) as case:
                pieces = measure_calls(case)
                for measure in measures:
                    fn = pieces[measure]
                    for _ in range(min(calls, 20)):
                        fn()
                    _sync(case.stream)
                    if not instrumenting:
                        subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True,
                                       capture_output=True)
                        instrumenting = True

                    def loop() -> None:
                        for _ in range(calls):
                            fn()
                    sys.call_tracing(loop, ())
                    _sync(case.stream)
                    order.append((fam.backward, measure, calls))
    print(json.dumps(order))


def table(result: dict) -> str:
    torch_us = result["torch_add_us"]
    rows = [[r["operator"], r["execute_us"], r["get_ws_execute_us"], r["uncached_get_ws_execute_us"],
             f"{r['get_ws_execute_us'] / torch_us:.1f}x"] for r in result["rows"]]
    rows = [[*r, f"{r[1] / torch_us:.1f}x"] for r in rows]
    rows.append(["median", result["median_execute_us"], result["median_get_ws_execute_us"],
                 result["median_uncached_get_ws_execute_us"],
                 f"{result['median_get_ws_execute_us'] / torch_us:.1f}x",
                 f"{result['median_execute_us'] / torch_us:.1f}x"])
    slowest = [max(r[k] for r in result["rows"]) for k in ("execute_us", "get_ws_execute_us",
                                                           "uncached_get_ws_execute_us")]
    rows.append(["slowest", *slowest, f"{slowest[1] / torch_us:.1f}x", f"{slowest[0] / torch_us:.1f}x"])
    return (common.markdown_table(["operator", "execute (repeatable executor)", "GetWorkspaceSize + execute",
                                   "the same, uncached (ACLNN_CACHE_LIMIT=0)",
                                   "GetWorkspaceSize + execute / torch.add", "execute / torch.add"],
                                  rows, "lrrrrr")
            + f"\n\nOne tiny PyTorch op (torch.add, 8 elements), same run: {torch_us:.2f} us. "
            + f"Load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.host_overhead",
                                 description="Per-call host overhead of the cuda device's code path, "
                                             "over a CuPy stand-in whose launches return at once.")
    ap.add_argument("--calls", type=int, default=None, help="calls per timed batch (default 200; 50 with --fastest)")
    ap.add_argument("--cpu", action="store_true", help="time the cpu device instead (execute only queues)")
    ap.add_argument("--fastest", action="store_true",
                    help="the fastest of 41 batches instead of the median of 9 (a loaded machine: default 50 calls)")
    ap.add_argument("--phases", action="store_true", help="the cost of each phase of GetWorkspaceSize + execute")
    ap.add_argument("--callgrind", action="store_true",
                    help="instructions per call under callgrind instead of microseconds (deterministic)")
    ap.add_argument("--threads", action="store_true", help="calls per second from 1, 2 and 4 Python threads")
    ap.add_argument("--check", action="store_true",
                    help=f"with --callgrind: compare the counts with the ceilings of {CEILINGS.name}; exit 1 over one")
    ap.add_argument("--binding", choices=("ctypes", "nvmath"), default="ctypes",
                    help="the cuBLAS binding of the GEMMs (nvmath: nvmath-python's, which must be importable)")
    ap.add_argument("--callgrind-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--measures", default="", help=argparse.SUPPRESS)
    ap.add_argument("--operators", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    fastest_calls = args.calls or 50
    args.calls = args.calls or 200
    common.setup_device("cpu")
    if args.callgrind_child:
        _callgrind_child(args.calls, args.measures.split(","), [o for o in args.operators.split(",") if o],
                         args.binding)
        return 0
    if args.callgrind:
        why = callgrind_unavailable()
        if why is not None:
            print(f"no instruction counts: {why}")
            return 1 if args.check else 0
    if args.phases and args.callgrind:
        print(phase_table(callgrind_counts(list(measure_calls_names()), calls=min(args.calls, 50)), "instructions"))
        return 0
    if args.callgrind:
        counts = callgrind_counts(list(HEADLINE), calls=min(args.calls, 50), binding=args.binding)
        print(instructions_table(counts))
        if args.check:
            over = over_ceiling(counts)
            print("\n" + ("\n".join(over) if over else f"every count is under its ceiling ({CEILINGS.name})"))
            return 1 if over else 0
        return 0
    if args.phases:
        print(phase_table(phases_us(FAMILIES, args.calls)))
        return 0
    if args.threads:
        print(threads_table(threads_throughput(FAMILIES)))
        return 0
    batches, pick = (41, min) if args.fastest else (9, statistics.median)
    calls = fastest_calls if args.fastest else args.calls
    if args.cpu:
        print(table(per_operator(FAMILIES, calls, batches, pick)))
    else:
        print(table(cuda_code_path(FAMILIES, calls, batches, pick, args.binding)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
