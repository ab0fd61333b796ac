"""KL divergence benchmark: aclnnKlDivBackward and aclnnKlDiv through the two-phase API (preallocated
buffers, repeatable executor; timed = execute + synchronize) against PyTorch's F.kl_div forward and
its backward (`torch.autograd.grad(loss, self)`) on the same device.

    python bench/kl_div.py [--device cpu|cuda|emulated] [--quick]

Minimum bytes: forward reads self and target (2*M*elem), backward reads target and writes the
gradient (2*M*elem; the gradient does not depend on self). GB/s against that, and its fraction of
the copy bandwidth measured in the same run (CPU: np.copyto of 256 MiB; GPU: a 1 GiB CuPy copy).
GPU: event timing with the L2 flushed between runs and three input copies rotated.
CPU / emulated: each library timed in its own block after a pause, median after warm-up;
ratio = ours / PyTorch (lower is better). Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402

REDUCTIONS = {"batchmean": 3, "sum": 2, "mean": 1, "none": 0}


def cases(kind: str, quick: bool):
    """(self shape, target shape, reduction, log_target, dtype name)."""
    if kind == "emulated":
        return [((8, 64), (8, 64), "batchmean", False, "float32"), ((4, 1, 64), (4, 8, 64), "sum", True, "float32")]
    if kind == "cuda":
        big = [((8192, 32768), (8192, 32768), "batchmean", False, "float32"),
               ((8192, 32768), (8192, 32768), "batchmean", False, "bfloat16")]
        return big[:1] if quick else big + [((8192, 32768), (8192, 32768), "none", True, "float32")]
    out = [((1000, 1024), (1000, 1024), "batchmean", False, "float32"),
           ((4000, 1024), (4000, 1024), "batchmean", False, "float32")]
    if not quick:
        out += [((10000, 1024), (10000, 1024), "batchmean", False, "float32"),
                ((4000, 1024), (4000, 1024), "none", True, "float32"),
                ((64, 1, 4096), (64, 16, 4096), "sum", False, "float32"),
                ((4000, 1024), (4000, 1024), "batchmean", False, "bfloat16")]
    return out


def build(b: common.Buffers, x, t, reduction, log_target, direction):
    import aclnn_gpu as acl
    code = REDUCTIONS[reduction]
    if direction == "forward":
        out_shape = np.broadcast_shapes(x.shape, t.shape) if code == 0 else ()
        return b.op(acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, b.tensor(x), b.tensor(t), code, log_target,
                    b.empty(out_shape, x.dtype))
    g_shape = np.broadcast_shapes(x.shape, t.shape) if code == 0 else ()
    g = np.ones(g_shape, x.dtype)
    return b.op(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward, b.tensor(g), b.tensor(x),
                b.tensor(t), code, log_target, b.empty(x.shape, x.dtype))


def torch_call(torch, x, t, reduction, log_target, direction, dev):
    import torch.nn.functional as F
    xt = common.to_torch(torch, x, dev).requires_grad_(direction == "backward")
    tt = common.to_torch(torch, t, dev)
    if direction == "forward":
        return lambda: F.kl_div(xt, tt, reduction=reduction, log_target=log_target)
    loss = F.kl_div(xt, tt, reduction=reduction, log_target=log_target)
    grad = torch.ones_like(loss)
    return lambda: torch.autograd.grad(loss, xt, grad, retain_graph=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda", "emulated"), default=None,
                    help="device kind (default: cuda when CuPy sees a GPU, else cpu)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs (CI)")
    args = ap.parse_args()
    kind = common.setup_device(args.device)
    import torch
    from aclnn_gpu.base import dtypes
    dev = common.torch_device(kind)
    if kind != "cuda":
        import os
        torch.set_num_threads(os.cpu_count() or 1)
    ceil = common.measure_ceilings(kind, quick=True)
    copies = 3 if kind == "cuda" else 1
    timer = common.GpuTimer() if kind == "cuda" else None
    kw = dict(warmup=1, reps=3, budget_s=0.5, pause_s=0.0) if kind == "emulated" else {}
    reps = 10 if args.quick else 30
    rows = []
    for xs, ts, red, logt, dname in cases(kind, args.quick):
        dt = dtypes.bfloat16 if dname == "bfloat16" else np.dtype(dname)
        rng = np.random.default_rng(0)
        data = []
        for _ in range(copies):
            x = rng.standard_normal(xs, dtype=np.float32)
            t = rng.standard_normal(ts, dtype=np.float32) if logt else rng.random(ts, dtype=np.float32)
            data.append((x.astype(dt), t.astype(dt)))
        M = int(np.prod(np.broadcast_shapes(xs, ts)))
        for direction in ("forward", "backward"):
            # forward: read target (M) and self; backward: read target (M), write gradSelf (|self|)
            minimum = (M + int(np.prod(xs))) * dt.itemsize
            b = common.Buffers()
            ops = [build(b, x, t, red, logt, direction) for x, t in data]
            if timer:
                ours = timer.cupy_ms([op.enqueue for op in ops], b.stream.impl.cupy, reps=reps)
            else:
                ours = common.median_ms(ops[0], **kw)
            b.close()
            fns = [torch_call(torch, x, t, red, logt, direction, dev) for x, t in data]
            theirs = timer.torch_ms(fns, reps=reps) if timer else common.median_ms(fns[0], **kw)
            gbs = minimum / ours / 1e6
            rows.append([f"self {xs}, target {ts}", red, str(logt), dname, direction, ours, theirs,
                         f"{ours / theirs:.2f}x", gbs, f"{100 * gbs / ceil['copy_GBps']:.0f}%"])
    print(f"\nKL divergence on device `{kind}` vs PyTorch ({dev}, {torch.get_num_threads()} threads), median ms; "
          f"copy bandwidth {ceil['copy_GBps']:.1f} GB/s measured in this run\n")
    print(common.markdown_table(["shapes", "reduction", "log_target", "dtype", "pass", "ours ms", "torch ms", "ratio",
                                 "ours GB/s", "of copy bw"], rows, "lllllrrrrr"))


if __name__ == "__main__":
    main()
