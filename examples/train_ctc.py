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

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as TF

sys.path.insert(0, str(Path(__file__).resolve().parent))  # side_by_side.py: the shared part, beside this file
import side_by_side  # noqa: E402
from side_by_side import acl_torch  # noqa: E402

T, N, F, H, C = 48, 16, 12, 32, 8          # frames, batch, features, hidden, classes (0 = blank)


def make_batch(rng: np.random.Generator, prototypes: np.ndarray):
    feats = rng.standard_normal((T, N, F)).astype(np.float32) * 0.5
    targets = np.zeros((N, 8), np.int64)
    il, tl = [], []
    for n in range(N):
        length = int(rng.integers(1, 5))
        labels = rng.integers(1, C, length)
        t = int(rng.integers(0, 3))
        for c in labels:
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
    rng = np.random.default_rng(seed)
    prototypes = rng.standard_normal((C, F)).astype(np.float32) * 1.5
    if use_aclnn:
        conv_tbc = acl_torch.conv_tbc
        ctc_loss = lambda lp, t, il, tl: acl_torch.ctc_loss(lp, t, il, tl, blank=0, reduction="mean")  # noqa: E731
    else:
        conv_tbc = lambda x, w, b, pad: torch.conv_tbc(x, w, b, pad)  # noqa: E731
        ctc_loss = lambda lp, t, il, tl: TF.ctc_loss(lp, t, il, tl, blank=0, reduction="mean")  # noqa: E731
    return side_by_side.train(init_params(seed), 3e-2, steps,
                              lambda params: loss_fn(params, make_batch(rng, prototypes), conv_tbc, ctc_loss))


def main(argv: list[str] | None = None) -> int:
    return side_by_side.main(
        argv, doc=__doc__, name="ctc", default_steps=100, run=train,
        describe=lambda steps: f"CTC acoustic model, {steps} steps of Adam, batch {N} x {T} frames, {C} classes",
        aclnn_label="aclnn_gpu (ConvTbc, CtcLoss)", title="CTC training loss: aclnn_gpu vs PyTorch",
        learn_ratio=0.7)


if __name__ == "__main__":
    sys.exit(main())
