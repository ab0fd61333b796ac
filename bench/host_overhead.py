"""The "cuda code path" host-overhead table: what one call costs in the library's own Python when
the GPU and CuPy cost nothing.

The `cuda` device's code runs over `bench/instant_cupy.py` (launches, copies and synchronizes
return at once), so a timed call is exactly the Python a GPU user pays before any kernel runs:
the executor checks, the pointer checks and the frozen launches. Timed for the five backward
operators on tiny tensors (the figures do not depend on the size: nothing is computed), beside
one tiny PyTorch op (`torch.add` of two 8-element tensors) timed in the same run. Per-call figures
are medians over batches of calls. Also run alone: `python -m bench.host_overhead [--calls N]`.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import common, instant_cupy


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


def per_call_us(fn: Callable[[], Any], calls: int, batches: int, after: Callable[[], Any] = lambda: None) -> float:
    """The median of batch_us: the per-call figure of the host-overhead tables."""
    return statistics.median(batch_us(fn, calls, batches, after))


class InstantDevice:
    """The cuda device over instant_cupy as the calling thread's current device for the `with` block."""

    def __enter__(self) -> Any:
        from aclnn_gpu import runtime
        from aclnn_gpu.device.cuda import CudaDevice

        class InstantCudaDevice(CudaDevice):
            def gemm(self, stream: Any, *args: Any, **kwargs: Any) -> None:
                return None  # cuBLAS is CuPy's cost, not the library's

        self.scope = runtime.using_device(InstantCudaDevice(instant_cupy, kind="cuda"))
        return self.scope.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.scope.__exit__(*exc)


def cuda_code_path(families: list, calls: int = 200, batches: int = 9) -> dict:
    """Per-call microseconds of the five backward operators over the instant CuPy stand-in."""
    with InstantDevice():
        return per_operator(families, calls, batches)


def per_operator(families: list, calls: int = 200, batches: int = 9) -> dict:
    """Per-call microseconds of the five backward operators on the process's device: execute of a
    repeatable executor (queued only) and GetWorkspaceSize + execute."""
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

            rows.append({"operator": fam.backward,
                         "execute_us": per_call_us(op.enqueue, calls, batches, sync),
                         "get_ws_execute_us": per_call_us(fresh, calls, batches, sync)})
        finally:
            buffers.close()
    torch_us = per_call_us(lambda: torch.add(a, b), calls, batches)
    for row in rows:
        row["torch_add_us"] = torch_us
    return {"rows": rows, "torch_add_us": torch_us,
            "median_execute_us": statistics.median(r["execute_us"] for r in rows),
            "median_get_ws_execute_us": statistics.median(r["get_ws_execute_us"] for r in rows)}


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


def table(result: dict) -> str:
    rows = [[r["operator"], r["execute_us"], r["get_ws_execute_us"], f"{r['execute_us'] / r['torch_add_us']:.1f}x"]
            for r in result["rows"]]
    rows.append(["median", result["median_execute_us"], result["median_get_ws_execute_us"],
                 f"{result['median_execute_us'] / result['torch_add_us']:.1f}x"])
    return (common.markdown_table(["operator", "execute (repeatable executor)", "GetWorkspaceSize + execute",
                                   "execute / torch.add"], rows, "lrrr")
            + f"\n\nOne tiny PyTorch op (torch.add, 8 elements), same run: {result['torch_add_us']:.2f} us.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.host_overhead",
                                 description="Per-call host overhead of the cuda device's code path, "
                                             "over a CuPy stand-in whose launches return at once.")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed batch (default 200)")
    ap.add_argument("--cpu", action="store_true", help="time the cpu device instead (execute only queues)")
    args = ap.parse_args(argv)
    common.setup_device("cpu")
    from .run import FAMILIES
    print(table(per_operator(FAMILIES, args.calls) if args.cpu else cuda_code_path(FAMILIES, args.calls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
