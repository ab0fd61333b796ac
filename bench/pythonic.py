"""The pythonic layers' table: tiny `aclnn_gpu.functional` and `aclnn_gpu.torch` calls of the ten
operators beside PyTorch's own call of the same operator, on the cpu device, in the same run.

A functional call is timed whole (arrays in, result out: signature, the cached plan or phase 1,
synchronize, the NumPy work, the result as torch tensors), with torch CPU tensors in, as PyTorch's
call gets them; beside it the same call with the cache off (`call_cache.disabled()`: descriptors,
lending, GetWorkspaceSize, execute on the stream's worker thread, synchronize: the path every call
took before the cache) and PyTorch's call of the same operator (the callable the operators table
of `python -m bench` times). An `aclnn_gpu.torch` row is the autograd wrapper against PyTorch's
autograd of the same op: forward with inputs that require grad, backward as `torch.autograd.grad`.
Per-call figures over batches of calls (a batch lasts about a millisecond, so that on a loaded
machine many batches escape preemption): the fastest batch and the median one; ratio = ours /
PyTorch.
Also run alone: `python -m bench.pythonic [--calls N]`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import common
from .families import FAMILIES
from .host_overhead import batch_us

SCALE = 0.125


def _functional(torch: Any, name: str, T: dict, p: tuple) -> dict[str, Callable[[], Any]]:
    """direction -> a tiny functional call of the family's operator, on the tensors `T`."""
    import aclnn_gpu.functional as F
    if name == "KlDiv":
        return {"forward": lambda: F.kl_div(T["x"], T["t"], "batchmean"),
                "backward": lambda: F.kl_div_backward(T["g"], T["x"], T["t"], "batchmean")}
    if name == "CrossEntropy":
        return {"forward": lambda: F.cross_entropy_loss(T["x"], T["t"]),
                "backward": lambda: F.cross_entropy_loss_grad(T["g"], T["lp"], T["t"])}
    if name == "CtcLoss":
        il, tl = T["il"].tolist(), T["tl"].tolist()
        return {"forward": lambda: F.ctc_loss(T["lp"], T["tg"], il, tl),
                "backward": lambda: F.ctc_loss_backward(T["g"], T["lp"], T["tg"], il, tl, T["nll"], T["alpha"])}
    if name == "ConvTbc":
        return {"forward": lambda: F.conv_tbc(T["x"], T["w"], T["b"], p[5]),
                "backward": lambda: F.conv_tbc_backward(T["g"], T["x"], T["w"], T["b"], p[5])}
    return {"forward": lambda: F.scaled_masked_softmax(T["x"], T["mask"], SCALE),
            "backward": lambda: F.scaled_masked_softmax_backward(T["g"], T["y"], T["mask"], SCALE)}


def _autograd(torch: Any, name: str, T: dict, p: tuple) -> tuple[Callable, Callable, list]:
    """(aclnn_gpu.torch forward, PyTorch's forward, the tensors the gradient is taken for)."""
    import torch.nn.functional as TF

    import aclnn_gpu.torch as AT
    if name == "KlDiv":
        x = T["x"].clone().requires_grad_()
        return (lambda: AT.kl_div(x, T["t"], reduction="batchmean"),
                lambda: TF.kl_div(x, T["t"], reduction="batchmean"), [x])
    if name == "CrossEntropy":
        x = T["x"].clone().requires_grad_()
        return lambda: AT.cross_entropy(x, T["t"]), lambda: TF.cross_entropy(x, T["t"]), [x]
    if name == "CtcLoss":
        lp = T["lp"].clone().requires_grad_()
        args = (T["tg"], T["il"], T["tl"])
        return (lambda: AT.ctc_loss(lp, *args, reduction="sum"), lambda: TF.ctc_loss(lp, *args, reduction="sum"),
                [lp])
    if name == "ConvTbc":
        x, w, b = (T[k].clone().requires_grad_() for k in ("x", "w", "b"))
        return lambda: AT.conv_tbc(x, w, b, p[5]), lambda: torch.conv_tbc(x, w, b, p[5]), [x, w, b]
    x = T["x"].clone().requires_grad_()
    return (lambda: AT.scaled_masked_softmax(x, T["mask"], SCALE),
            lambda: torch.softmax(x.mul(SCALE).masked_fill(T["mask"], -10000.0), -1), [x])


def _backward(torch: Any, forward: Callable, inputs: list) -> Callable[[], Any]:
    """A backward call of one graph built once: torch.autograd.grad, the graph kept for the next."""
    out = forward()
    seed = None if out.dim() == 0 else torch.ones_like(out)
    return lambda: torch.autograd.grad(out, inputs, seed, retain_graph=True)


BATCH_US = 1000.0   # a batch lasts about this long: short enough that many escape preemption on a loaded machine


def _batch_calls(fn: Callable[[], Any], calls: int) -> int:
    """Calls per batch: at most `calls`, fewer for a slow call, so that one batch lasts ~BATCH_US."""
    start = time.perf_counter()
    for _ in range(3):
        fn()
    each = (time.perf_counter() - start) / 3 * 1e6
    return max(1, min(calls, int(BATCH_US / max(each, 1e-3))))


def _timed(fn: Callable[[], Any], calls: int, batches: int) -> tuple[float, float]:
    samples = batch_us(fn, _batch_calls(fn, calls), batches)
    return min(samples), statistics.median(samples)


def _plan_run_us(call: Callable[[], Any], calls: int, batches: int) -> tuple[float, float]:
    """Per-call microseconds spent inside `call_cache.run` (the cached plan's NumPy work, on the
    calling thread) during batches of a cached call: the rest of the call is the library's Python."""
    from aclnn_gpu.functional import cache as call_cache
    real, spent = call_cache.run, [0.0]

    def timed(*args: Any) -> None:
        start = time.perf_counter()
        try:
            real(*args)
        finally:
            spent[0] += time.perf_counter() - start

    calls = _batch_calls(call, calls)
    call_cache.run = timed
    try:
        samples = []
        for _ in range(batches):
            spent[0] = 0.0
            for _ in range(calls):
                call()
            samples.append(spent[0] / calls * 1e6)
    finally:
        call_cache.run = real
    return min(samples), statistics.median(samples)


def measure(families: list, calls: int = 100, batches: int = 9) -> dict:
    """Both tables' rows (microseconds per call) and the load average before and after."""
    import torch
    load_before = os.getloadavg()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny tensors gain nothing from intra-op threads, which stall on a loaded machine
    try:
        rows = _rows(torch, families, calls, batches)
    finally:
        torch.set_num_threads(threads)
    return {"rows": rows, "calls": calls, "batches": batches, "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()), "cpu_count": os.cpu_count()}


def _rows(torch: Any, families: list, calls: int, batches: int) -> list[dict]:
    from aclnn_gpu.functional import cache as call_cache
    rows = []
    for fam in families:
        p = fam.tiny()
        d = fam.data(p, np.dtype(np.float32), np.random.default_rng(1))
        T = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in d.items()}
        autograd = _autograd(torch, fam.name, T, p)
        for direction, call in _functional(torch, fam.name, T, p).items():
            op = fam.forward if direction == "forward" else fam.backward
            theirs = fam.torch(torch, d, direction, p, "cpu")
            if direction == "forward":
                ours_ag, theirs_ag = autograd[0], autograd[1]
            else:
                ours_ag, theirs_ag = _backward(torch, autograd[0], autograd[2]), _backward(torch, autograd[1],
                                                                                        autograd[2])
            row: dict[str, Any] = {"operator": op, "direction": direction}
            row["functional"] = _timed(call, calls, batches)
            row["plan_run"] = _plan_run_us(call, calls, batches)
            row["torch"] = _timed(theirs, calls, batches)
            row["autograd"] = _timed(ours_ag, calls, batches)
            row["torch_autograd"] = _timed(theirs_ag, calls, batches)
            with call_cache.disabled():
                row["functional_uncached"] = _timed(call, calls, batches)
                row["autograd_uncached"] = _timed(ours_ag if direction == "forward"
                                                  else _backward(torch, autograd[0], autograd[2]), calls, batches)
            rows.append(row)
    return rows


def _pair(figures: tuple[float, float]) -> str:
    return f"{figures[0]:.1f} / {figures[1]:.1f}"


def table(result: dict) -> str:
    """The two Markdown tables, and the load the figures were taken under."""
    ratio = ["ratio (fastest)", "ratio (median)"]
    rows = []
    for r in result["rows"]:
        ours, theirs = r["functional"], r["torch"]
        rows.append([r["operator"], _pair(ours), _pair(r["plan_run"]), _pair(r["functional_uncached"]),
                     _pair(theirs), f"{ours[0] / theirs[0]:.1f}x", f"{ours[1] / theirs[1]:.1f}x"])
    functional = common.markdown_table(
        ["functional call", "us (fastest / median)", "of which the plan's NumPy run", "cache off",
         "PyTorch's call", *ratio], rows, "lrrrrrr")
    rows = []
    for r in result["rows"]:
        ours, theirs = r["autograd"], r["torch_autograd"]
        rows.append([r["operator"], _pair(ours), _pair(r["autograd_uncached"]), _pair(theirs),
                     f"{ours[0] / theirs[0]:.1f}x", f"{ours[1] / theirs[1]:.1f}x"])
    autograd = common.markdown_table(
        ["aclnn_gpu.torch (autograd)", "us (fastest / median)", "cache off", "PyTorch autograd", *ratio],
        rows, "lrrrrr")
    before, after = result["loadavg_before"][0], result["loadavg_after"][0]
    return (f"{functional}\n\n{autograd}\n\nLoad average {before:.2f} before, {after:.2f} after, on "
            f"{result['cpu_count']} cores; {result['calls']} calls per batch, {result['batches']} batches.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pythonic",
                                 description="Tiny functional and aclnn_gpu.torch calls beside PyTorch's, cpu device.")
    ap.add_argument("--calls", type=int, default=100, help="calls per timed batch (default 100)")
    ap.add_argument("--batches", type=int, default=9, help="timed batches (default 9)")
    args = ap.parse_args(argv)
    common.setup_device("cpu")
    print(table(measure(FAMILIES, args.calls, args.batches)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
