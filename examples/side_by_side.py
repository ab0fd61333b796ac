"""What the training examples (train_ctc.py, train_attention.py) share: the training loop, run once
with aclnn_gpu's operators and once with PyTorch's from the same initial weights and batches, the
per-step agreement check, the table, the PNG plot and the command line.

Not an example itself: the scripts import it by path (`sys.path.insert` of their own folder).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

try:
    import aclnn_gpu.torch as acl_torch
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import aclnn_gpu.torch as acl_torch
import aclnn_gpu

__all__ = ["acl_torch", "train", "main"]


def train(params0: dict[str, torch.Tensor], lr: float, steps: int,
          step_loss: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> tuple[list[float], float]:
    """Adam from a copy of params0; step_loss(params) draws the next batch and returns its loss.
    The per-step losses and the wall time."""
    params = {k: v.clone().requires_grad_(True) for k, v in params0.items()}
    opt = torch.optim.Adam(params.values(), lr=lr)
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        loss = step_loss(params)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, time.perf_counter() - start


def plot(curves: dict[str, list[float]], title: str, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for (label, values), style in zip(curves.items(), ("-", "--")):
        ax.plot(range(1, len(values) + 1), values, style, label=label, linewidth=2 if style == "-" else 1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if all(v > 0 for values in curves.values() for v in values):
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None, *, doc: str, name: str, default_steps: int,
         run: Callable[[int, bool], tuple[list[float], float]], describe: Callable[[int], str],
         aclnn_label: str, title: str, learn_ratio: float) -> int:
    """The command line of a training example `name` (train_<name>.py): run(steps, use_aclnn) both
    ways, print describe(steps) and the table, plot to <out>/train_<name>.png, and fail (1) if the
    curves disagree or, for 20 steps or more, the final loss is not below learn_ratio x the first."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=int(os.environ.get("ACLNN_EXAMPLE_STEPS", str(default_steps))),
                        help="training steps (default: ACLNN_EXAMPLE_STEPS, else %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the PNG (default: a temp folder)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="allowed |ours - torch| / (1 + |torch|) per step")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    # one intra-op thread: the library's cpu device computes on its own stream worker thread, and
    # PyTorch's OpenMP pool spinning against it slows BOTH runs ~10x on a loaded 2-core machine
    torch.set_num_threads(int(os.environ.get("ACLNN_EXAMPLE_THREADS", "1")))

    ours, t_ours = run(args.steps, True)
    theirs, t_theirs = run(args.steps, False)

    print(f"{describe(args.steps)}; aclnn_gpu device: {aclnn_gpu.current_device_kind()}")
    print(f"| {'step':>4} | {'aclnn_gpu loss':>14} | {'PyTorch loss':>12} | {'rel. diff':>9} |")
    print(f"|{'-' * 6}|{'-' * 16}|{'-' * 14}|{'-' * 11}|")
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, theirs), 1):
        diff = abs(a - b) / (1 + abs(b))
        worst = max(worst, diff)
        print(f"| {i:4d} | {a:14.6f} | {b:12.6f} | {diff:9.2e} |")
    print(f"training time: aclnn_gpu {t_ours:.2f} s, PyTorch {t_theirs:.2f} s; largest relative difference "
          f"{worst:.2e} (tolerance {args.rtol:.0e})")

    out = args.out or Path(tempfile.mkdtemp(prefix=f"aclnn_gpu_train_{name}_"))
    png = plot({aclnn_label: ours, "PyTorch": theirs}, title, out / f"train_{name}.png")
    if png:
        print(f"plot: {png}")

    if not worst <= args.rtol:
        print("FAILED: the loss curves disagree")
        return 1
    if args.steps >= 20 and not ours[-1] < learn_ratio * ours[0]:
        print("FAILED: the model did not learn")
        return 1
    return 0


if __name__ == "__main__":
    print("side_by_side.py holds what the training examples share; run examples/train_ctc.py or "
          "examples/train_attention.py")
