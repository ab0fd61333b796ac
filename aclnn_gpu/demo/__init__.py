"""The main job: every operator, forward and backward, on the best device present, through the
two-phase API as Ascend's samples call it. Prints a table (operator, shapes, dtype, device, max
error against a float64 reference, time) and returns non-zero if any result is wrong.

Layer 17 of docs/DESIGN.md, "Import layers" (demo): it calls the public API as a user would;
`samples` holds the sample-program helpers (host arrays in and out of device tensors). Each family's
cases (inputs, the two phases, the float64 reference) are in its ops/<family>/samples.py; the demo runs
them in ops/registry.py's DEMO_ORDER.

`python -m aclnn_gpu [--device cpu|cuda|emulated] [--repeat N]`
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from ..ops.samples import DemoEntry


def build_cases(rng: np.random.Generator, small: bool) -> list[DemoEntry]:
    """(case, get_workspace_size, execute, args builder) of every family's demo cases (ops/<family>/samples.py),
    in ops/registry.py's DEMO_ORDER."""
    from ..ops.registry import DEMO_ORDER, family_modules
    return [case for module in family_modules(DEMO_ORDER, "samples") for case in module.demo_cases(rng, small)]


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64)


def _timed_run(session: Any, get_workspace_size: Callable, execute: Callable, args: tuple, repeat: int) -> float:
    """Median milliseconds of execute + synchronize with one repeatable executor, after one untimed
    run (the first call of a kernel on the emulated device may build it: seconds, not the kernel)."""
    import aclnn_gpu as acl
    status, workspace, size, executor = session.prepare(get_workspace_size, *args)
    if status:
        raise RuntimeError(acl.aclGetRecentErrMsg())
    acl.aclSetAclOpExecutorRepeatable(executor)
    times = []
    for run in range(repeat + 1):
        start = time.perf_counter()
        if execute(workspace, size, executor, session.stream):
            raise RuntimeError(acl.aclGetRecentErrMsg())
        if acl.aclrtSynchronizeStream(session.stream):
            raise RuntimeError(acl.aclGetRecentErrMsg())
        if run:
            times.append(time.perf_counter() - start)
    acl.aclDestroyAclOpExecutor(executor)
    return float(np.median(times) * 1e3)


def max_error(results: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """Largest |result - expected| / (1 + |expected|) over all outputs (NaN where one was unwritten)."""
    worst = 0.0
    for got, want in zip(results, expected):
        got64, want64 = _f64(got), _f64(want)
        if got64.shape != want64.shape or np.isnan(got64).any() != np.isnan(want64).any():
            return float("nan")
        finite = np.isfinite(want64)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(got64[finite] - want64[finite]) / (1 + np.abs(want64[finite])))))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aclnn_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda", "emulated"], default=None,
                        help="device kind (default: ACLNN_GPU_DEVICE, else auto)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per operator (median reported)")
    args = parser.parse_args(argv)
    if args.device:
        os.environ["ACLNN_GPU_DEVICE"] = args.device
    import aclnn_gpu as acl
    if acl.aclrtSetDevice(0) != 0:
        print(f"error: {acl.aclGetRecentErrMsg()}", file=sys.stderr)
        return 2
    from ..runtime import get_device
    from .samples import DeviceArrays
    device = get_device()
    small = device.kind == "emulated"
    repeat = args.repeat or (2 if small else 10)
    print(f"aclnn_gpu {acl.__version__} demo on {device.describe()}\n")
    header = f"| {'operator':34} | {'shapes':46} | {'dtype':8} | {'device':8} | {'max error':>9} | {'ms':>8} | ok |"
    print(header)
    print("|" + "|".join("-" * (len(p)) for p in header.split("|")[1:-1]) + "|")
    failures = 0
    rng = np.random.default_rng(2026)
    cases = build_cases(rng, small)
    with DeviceArrays() as session:
        for case, get_ws, execute, build_args in cases:
            try:
                ms = _timed_run(session, get_ws, execute, build_args(session), repeat)
                error = max_error(case.run(session), case.reference())
                ok = error <= case.tolerance
            except Exception as e:  # noqa: BLE001 - the demo reports, then fails
                ms, error, ok = float("nan"), float("nan"), False
                print(f"  {case.name}: {e}", file=sys.stderr)
            failures += not ok
            print(f"| {case.name:34} | {case.shapes[:46]:46} | {case.dtype.name:8} | {device.kind:8} | "
                  f"{error:9.2e} | {ms:8.2f} | {'ok' if ok else 'NO'} |")
    print(f"\n{len(cases) - failures} of {len(cases)} operators correct "
          "(max error is relative: |got - ref| / (1 + |ref|)).")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
