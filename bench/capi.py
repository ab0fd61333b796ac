"""Call overhead through the C ABI, beside the same calls from Python, in one run (cpu device).

    python -m bench.capi [--calls N]
    python -m bench.capi --callgrind [--calls N]   instructions per call instead (valgrind's callgrind)

Compiles bench/capi_bench.c against `python -m aclnn_gpu.capi --cflags --libs`, runs it (the best of
5 batches of N calls per row), times the same calls through the Python API in this process the same
way, and prints a Markdown table of microseconds per call. The difference is what the C ABI adds per
call: cffi's entry into the embedded interpreter, the argument conversions and the handle table.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _compile(tmp: str) -> Path:
    flags = subprocess.run([sys.executable, "-m", "aclnn_gpu.capi", "--cflags", "--libs"], capture_output=True,
                           text=True, check=True).stdout.split()
    exe = Path(tmp) / "capi_bench"
    subprocess.run([os.environ.get("CC", "gcc"), "-O2", "-std=c99", "-pthread", str(HERE / "capi_bench.c"), "-o",
                    str(exe), *flags], check=True)
    return exe


def c_side(calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([str(_compile(tmp)), str(calls)], capture_output=True, text=True, check=True,
                             env=dict(os.environ, ACLNN_GPU_DEVICE="cpu")).stdout
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in out.splitlines() if line.strip()}


# --------------------------------------------------------------------------- instructions (callgrind)
COUNTED = {"trivial": "aclrtGetDeviceCount", "pair": "KlDivBackward GetWorkspaceSize + execute, empty"}


def _callgrind(command: list[str], options: list[str], env: dict) -> list[int]:
    """The totals of a callgrind run's dumps: the numbered dumps in order, then the final one."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        run = subprocess.run(["valgrind", "--tool=callgrind", *options, f"--callgrind-out-file={out}", *command],
                             env=env, capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"callgrind run failed ({run.returncode}):\n{run.stderr[-3000:]}")
        files = sorted(Path(tmp).glob("callgrind.out.*"), key=lambda f: int(f.suffix[1:])) + [out]
        return [next(int(line.split()[1]) for line in f.read_text().splitlines()
                     if line.startswith(("totals:", "summary:"))) for f in files]


def c_counts(exe: Path, calls: int, env: dict) -> dict[str, float]:
    """Instructions per call of capi_bench.c's measure_trivial and measure_pair (after their warm-up):
    one run collecting inside measure_*, dumped before measure_pair starts."""
    trivial, pair = _callgrind([str(exe), str(calls), "callgrind"],
                               ["--toggle-collect=measure_*", "--dump-before=measure_pair"], env)
    return {"trivial": trivial / calls, "pair": pair / calls}


def _counting_env() -> dict:
    # a coverage tracer (pytest-cov starts one in subprocesses through these) would be counted too
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_CORE_", "COVERAGE_"))}
    env.update(ACLNN_GPU_DEVICE="cpu", PYTHONHASHSEED="0")
    return env


def callgrind_counts(calls: int) -> dict[str, dict[str, float]]:
    """Instructions per call of the trivial call and of the empty pair, through the C ABI (capi_bench.c's
    measure_* loops, after a warm-up run) and from Python (`_python_loops`, the same calls, each loop
    in sys.call_tracing, which callgrind alone collects; set-up and a warm-up run are not counted)."""
    env = _counting_env()
    with tempfile.TemporaryDirectory() as tmp:
        c = c_counts(_compile(tmp), calls, env)
    # each loop in sys.call_tracing: collected inside _PyEval_CallTracing only, dumped when it returns
    py = _callgrind([sys.executable, "-m", "bench.capi", "--python-loops", "--calls", str(calls)],
                    ["--toggle-collect=_PyEval_CallTracing", "--dump-after=_PyEval_CallTracing"],
                    dict(env, PYTHONPATH=str(ROOT)))
    return {what: {"c": c[what], "python": total / calls} for what, total in zip(COUNTED, py)}


def _python_loops(calls: int) -> None:
    """The Python twins of capi_bench.c's measure_* loops, in COUNTED's order: each one warm-up run, then
    one in sys.call_tracing."""
    import aclnn_gpu as acl
    acl.aclInit(None)
    acl.aclrtSetDevice(0)
    _, stream = acl.aclrtCreateStream()
    e = []
    for i in range(4):
        _, p = acl.aclrtMalloc(128, 0)
        shape = [0, 8] if i else []
        e.append(acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, p))
    get_ws, run, count = acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward, acl.aclrtGetDeviceCount

    def trivial() -> None:
        for _ in range(calls):
            count()

    def pair() -> None:
        for _ in range(calls):
            _, ws, ex = get_ws(e[0], e[1], e[2], 1, False, e[3])
            run(None, ws, ex, stream)
    for loop in (trivial, pair):   # COUNTED's order
        loop()
        sys.call_tracing(loop, ())


def python_side(calls: int) -> dict[str, float]:
    os.environ["ACLNN_GPU_DEVICE"] = "cpu"
    import aclnn_gpu as acl

    def best(body) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                body()
            times.append((time.perf_counter() - t0) / calls * 1e6)
        return min(times)

    acl.aclInit(None)
    acl.aclrtSetDevice(0)
    _, stream = acl.aclrtCreateStream()
    ones = np.full(32, 0.5, np.float32)
    ptrs, ts = [], []
    for i in range(4):
        _, p = acl.aclrtMalloc(128, 0)
        acl.aclrtMemcpy(p, 128, ones, 128, acl.ACL_MEMCPY_HOST_TO_DEVICE)
        shape = [4, 8] if i else []
        ptrs.append(p)
        ts.append(acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, p))

    def full():
        _, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(ts[0], ts[1], ts[2], 1, False, ts[3])
        acl.aclnnKlDivBackward(None, ws, ex, stream)
        acl.aclrtSynchronizeStream(stream)

    out = {
        "aclrtGetDeviceCount": best(acl.aclrtGetDeviceCount),
        "aclCreateTensor+aclDestroyTensor": best(lambda: acl.aclDestroyTensor(acl.aclCreateTensor(
            [4, 8], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [4, 8], ptrs[1]))),
        "aclrtMemcpy H2D 128 B": best(lambda: acl.aclrtMemcpy(ptrs[1], 128, ones, 128, acl.ACL_MEMCPY_HOST_TO_DEVICE)),
        "KlDivBackward GetWorkspaceSize+execute+sync": best(full),
    }
    empty = [acl.aclCreateTensor([0, 8] if i else [], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND,
                                 [0, 8] if i else [], p) for i, p in enumerate(ptrs)]

    def empty_pair():
        _, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(empty[0], empty[1], empty[2], 1, False, empty[3])
        acl.aclnnKlDivBackward(None, ws, ex, stream)
    out["KlDivBackward GetWorkspaceSize+execute, empty (nothing queued)"] = best(empty_pair)
    for t in empty:
        acl.aclDestroyTensor(t)
    _, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(ts[0], ts[1], ts[2], 1, False, ts[3])
    acl.aclSetAclOpExecutorRepeatable(ex)
    out["KlDivBackward reused executor: execute+sync"] = best(
        lambda: (acl.aclnnKlDivBackward(None, ws, ex, stream), acl.aclrtSynchronizeStream(stream)))
    acl.aclDestroyAclOpExecutor(ex)
    for n in (1, 2, 4):
        out[f"threads {n}"] = _threads(acl, n, ptrs)
    for t, p in zip(ts, ptrs):
        acl.aclDestroyTensor(t)
        acl.aclrtFree(p)
    acl.aclrtDestroyStream(stream)
    return out


def _threads(acl, n: int, ptrs: list[int]) -> float:
    """Pairs per second from `n` Python threads, each on its own empty tensors and stream (as the C side)."""
    import threading
    stop, counts = threading.Event(), [0] * n
    work = []
    for _ in range(n):
        _, stream = acl.aclrtCreateStream()
        work.append(([acl.aclCreateTensor([0, 8] if i else [1], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND,
                                          [0, 8] if i else [1], p) for i, p in enumerate(ptrs)], stream))

    def worker(k: int) -> None:
        t, stream = work[k]
        while not stop.is_set():
            _, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, False, t[3])
            acl.aclnnKlDivBackward(None, ws, ex, stream)
            counts[k] += 1
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join()
    rate = sum(counts) / (time.perf_counter() - t0)
    for t, stream in work:
        for tensor in t:
            acl.aclDestroyTensor(tensor)
        acl.aclrtDestroyStream(stream)
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capi", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per batch (best of 5 batches)")
    parser.add_argument("--callgrind", action="store_true",
                        help="instructions per call under valgrind's callgrind instead of microseconds")
    parser.add_argument("--python-loops", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.python_loops:
        _python_loops(args.calls)
        return 0
    if args.callgrind:
        counts = callgrind_counts(args.calls)
        print(f"C ABI instructions per call (callgrind), cpu device, {args.calls} calls\n")
        print("| call | C ABI | Python API | C ABI - Python |\n| --- | ---: | ---: | ---: |")
        for what, c in counts.items():
            print(f"| {COUNTED[what]} | {c['c']:,.0f} | {c['python']:,.0f} | {c['c'] - c['python']:+,.0f} |")
        return 0
    c = c_side(args.calls)
    py = python_side(args.calls)
    load = os.getloadavg()
    print(f"C ABI call overhead, cpu device, {args.calls} calls x best of 5 batches, "
          f"load average {load[0]:.2f} on {os.cpu_count()} CPUs\n")
    print("| call | C ABI (us) | Python API (us) | C ABI - Python (us) |\n| --- | ---: | ---: | ---: |")
    for name, us in c.items():
        if not name.startswith("threads"):
            print(f"| {name} | {us:.2f} | {py[name]:.2f} | {us - py[name]:+.2f} |")
    print("\nThreads: KlDivBackward GetWorkspaceSize + execute on empty tensors (executor-cache hits, nothing "
          "queued), each thread on its own tensors and stream, pairs per second over 1 s\n")
    print("| threads | C threads | vs 1 | Python threads | vs 1 |\n| ---: | ---: | ---: | ---: | ---: |")
    for n in (1, 2, 4):
        key = f"threads {n}"
        print(f"| {n} | {c[key]:,.0f} | {c[key] / c['threads 1']:.2f}x | {py[key]:,.0f} | "
              f"{py[key] / py['threads 1']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
