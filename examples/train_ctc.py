#!/usr/bin/env python3
"""Train a small CTC acoustic model on synthetic data with aclnn_gpu's operators and, side by side
from the same initial weights and the same batches, with PyTorch's own; assert the two loss curves
agree at every step, print them as a table and plot them.

Model: features (T, N, F) -> ConvTBC (K=5, pad 2) -> tanh -> ConvTBC (K=3, pad 1) -> linear ->
log_softmax -> CTC loss (reduction "mean"). The aclnn run uses aclnn_gpu.torch.conv_tbc and
aclnn_gpu.torch.ctc_loss (forward and backward through aclnnConvTbc[Backward] and
aclnnCtcLoss[Backward]); the PyTorch run uses torch.conv_tbc and torch.nn.functional.ctc_loss.
Everything else (linear layer, log_softmax, Adam) is the same PyTorch code in both.

Data: each utterance is a random label sequence (1..4 labels out of C-1 classes); every label is
held for 2-5 frames of a class-specific feature vector plus noise, with blank-noise frames between.

    python examples/train_ctc.py [--steps N] [--out DIR] [--rtol R]
ACLNN_EXAMPLE_STEPS overrides the default step count (the tests use it to keep CI fast).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as TF

try:
    import aclnn_gpu.torch as acl_torch
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import aclnn_gpu.torch as acl_torch
import aclnn_gpu

T, N, F, H, C = 48, 16, 12, 32, 8          # frames, batch, features, hidden, classes (0 = blank)


def make_batch(rng: np.random.Generator, prototypes: np.ndarray):
    feats = rng.standard_normal((T, N, F)).astype(np.float32) * 0.5
    targets = np.zeros((N, 8), np.int64)
    il, tl = [], []
    for n in range(N):
        length = int(rng.integers(1, 5))
        labels = rng.integers(1, C, length)
        t = int(rng.integers(0, 3))
        for i, c in enumerate(labels):
            hold = int(rng.integers(2, 6))
            feats[t:t + hold, n] += prototypes[c]
            t += hold + int(rng.integers(1, 3))
        targets[n, :length] = labels
        il.append(min(T, t + int(rng.integers(0, 4))))
        tl.append(length)
    return torch.from_numpy(feats), torch.from_numpy(targets), torch.tensor(il), torch.tensor(tl)


def init_params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w1": torch.randn(5, F, H, generator=g) / np.sqrt(5 * F),
        "b1": torch.zeros(H),
        "w2": torch.randn(3, H, H, generator=g) / np.sqrt(3 * H),
        "b2": torch.zeros(H),
        "wo": torch.randn(H, C, generator=g) / np.sqrt(H),
        "bo": torch.zeros(C),
    }


def loss_fn(p, batch, conv_tbc, ctc_loss):
    x, targets, il, tl = batch
    h = torch.tanh(conv_tbc(x, p["w1"], p["b1"], 2))
    h = torch.tanh(conv_tbc(h, p["w2"], p["b2"], 1)) + h
    log_probs = (h @ p["wo"] + p["bo"]).log_softmax(-1)
    return ctc_loss(log_probs, targets, il, tl)


def train(steps: int, use_aclnn: bool, seed: int = 0) -> tuple[list[float], float]:
    params = {k: v.clone().requires_grad_(True) for k, v in init_params(seed).items()}
    opt = torch.optim.Adam(params.values(), lr=3e-2)
    rng = np.random.default_rng(seed)
    prototypes = rng.standard_normal((C, F)).astype(np.float32) * 1.5
    if use_aclnn:
        conv_tbc = acl_torch.conv_tbc
        ctc_loss = lambda lp, t, il, tl: acl_torch.ctc_loss(lp, t, il, tl, blank=0, reduction="mean")  # noqa: E731
    else:
        conv_tbc = lambda x, w, b, pad: torch.conv_tbc(x, w, b, pad)  # noqa: E731
        ctc_loss = lambda lp, t, il, tl: TF.ctc_loss(lp, t, il, tl, blank=0, reduction="mean")  # noqa: E731
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        batch = make_batch(rng, prototypes)
        loss = loss_fn(params, batch, conv_tbc, ctc_loss)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=int(os.environ.get("ACLNN_EXAMPLE_STEPS", "100")))
    parser.add_argument("--out", type=Path, default=None, help="folder for the PNG (default: a temp folder)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="allowed |ours - torch| / (1 + |torch|) per step")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    # one intra-op thread: the library's cpu device computes on its own stream worker thread, and
    # PyTorch's OpenMP pool spinning against it slows BOTH runs ~10x on a loaded 2-core machine
    torch.set_num_threads(int(os.environ.get("ACLNN_EXAMPLE_THREADS", "1")))

    ours, t_ours = train(args.steps, use_aclnn=True)
    theirs, t_theirs = train(args.steps, use_aclnn=False)

    print(f"CTC acoustic model, {args.steps} steps of Adam, batch {N} x {T} frames, {C} classes; "
          f"aclnn_gpu device: {aclnn_gpu.current_device_kind()}")
    print(f"| {'step':>4} | {'aclnn_gpu loss':>14} | {'PyTorch loss':>12} | {'rel. diff':>9} |")
    print(f"|{'-' * 6}|{'-' * 16}|{'-' * 14}|{'-' * 11}|")
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, theirs), 1):
        diff = abs(a - b) / (1 + abs(b))
        worst = max(worst, diff)
        print(f"| {i:4d} | {a:14.6f} | {b:12.6f} | {diff:9.2e} |")
    print(f"training time: aclnn_gpu {t_ours:.2f} s, PyTorch {t_theirs:.2f} s; largest relative difference "
          f"{worst:.2e} (tolerance {args.rtol:.0e})")

    out = args.out or Path(tempfile.mkdtemp(prefix="aclnn_gpu_train_ctc_"))
    png = plot({"aclnn_gpu (ConvTbc, CtcLoss)": ours, "PyTorch": theirs},
               "CTC training loss: aclnn_gpu vs PyTorch", out / "train_ctc.png")
    if png:
        print(f"plot: {png}")

    if not worst <= args.rtol:
        print("FAILED: the loss curves disagree")
        return 1
    if args.steps >= 20 and not ours[-1] < 0.7 * ours[0]:
        print("FAILED: the model did not learn")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
