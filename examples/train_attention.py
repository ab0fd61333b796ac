#!/usr/bin/env python3
"""Train a tiny causal language model on synthetic sequences with aclnn_gpu's operators and, side by
side from the same initial weights and the same batches, with PyTorch's own; assert the two loss
curves agree at every step, print them as a table and plot them.

Model (tokens (B, T) -> next-token logits): embedding -> causal ConvTBC (K=3, left pad: pad=2, keep
the first T outputs) + residual -> one single-head causal self-attention (scores (B, 1, T, T),
softmax by apex's scaled_masked_softmax with the causal and key-padding masks) + residual ->
linear -> cross-entropy over the next token (ignore_index on padding, label smoothing 0.05).
The aclnn run uses aclnn_gpu.torch.conv_tbc / scaled_masked_softmax / cross_entropy (forward and
backward through aclnnConvTbc, aclnnScaledMaskedSoftmax, aclnnCrossEntropyLoss and their backward
operators); the PyTorch run uses torch.conv_tbc, masked_fill + softmax, and F.cross_entropy.

Data: sequences of a repeating random motif (period 3-5) over a small vocabulary, with random
lengths padded at the end; the next token is predictable once a period has been seen.

    python examples/train_attention.py [--steps N] [--out DIR] [--rtol R]
ACLNN_EXAMPLE_STEPS overrides the default step count (the tests use it to keep CI fast).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as TF

sys.path.insert(0, str(Path(__file__).resolve().parent))  # side_by_side.py: the shared part, beside this file
import side_by_side  # noqa: E402
from side_by_side import acl_torch  # noqa: E402

B, T, V, D = 16, 24, 12, 32                 # batch, sequence length, vocabulary (0 = padding), width
PAD = 0


def make_batch(rng: np.random.Generator):
    tokens = np.full((B, T + 1), PAD, np.int64)
    for b in range(B):
        motif = rng.integers(1, V, int(rng.integers(3, 6)))
        length = int(rng.integers(T // 2, T + 2))
        tokens[b, :length] = np.resize(motif, length)
    x, y = torch.from_numpy(tokens[:, :-1].copy()), torch.from_numpy(tokens[:, 1:].copy())
    y[x == PAD] = -100                       # no loss where the input is padding
    key_padding = (x == PAD)[:, None, None, :].expand(B, 1, T, T)   # (B, 1, T, T): true = masked out
    return x, y, key_padding.contiguous()


def init_params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, fan: torch.randn(*shape, generator=g) / math.sqrt(fan)  # noqa: E731
    return {"emb": r(V, D, fan=1) * 0.5, "pos": r(T, 1, D, fan=1) * 0.1,
            "wc": r(3, D, D, fan=3 * D), "bc": torch.zeros(D),
            "wq": r(D, D, fan=D), "wk": r(D, D, fan=D), "wv": r(D, D, fan=D), "wo": r(D, D, fan=D),
            "out": r(D, V, fan=D), "bout": torch.zeros(V)}


class AclnnOps:
    conv_tbc = staticmethod(lambda x, w, b, pad: acl_torch.conv_tbc(x, w, b, pad))
    # apex's call, as a Megatron model makes it: one mask, causal and key padding combined
    softmax = staticmethod(lambda s, mask, scale: acl_torch.scaled_masked_softmax(
        s, mask | torch.ones(T, T, dtype=torch.bool).triu(1), scale))
    cross_entropy = staticmethod(lambda logits, y: acl_torch.cross_entropy(logits, y, label_smoothing=0.05))


class TorchOps:
    # torch.conv_tbc views its input, so it wants a contiguous one (the aclnn operator takes any strides)
    conv_tbc = staticmethod(lambda x, w, b, pad: torch.conv_tbc(x.contiguous(), w, b, pad))

    @staticmethod
    def softmax(s, mask, scale):
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        y = (s * scale).masked_fill(mask | causal, float("-inf")).softmax(-1)
        return torch.nan_to_num(y, nan=0.0)  # fully masked rows: zeros, the aclnn operator's rule

    cross_entropy = staticmethod(lambda logits, y: TF.cross_entropy(logits, y, label_smoothing=0.05))


def loss_fn(p, batch, ops) -> torch.Tensor:
    x, y, key_padding = batch
    h = p["emb"][x.t()] + p["pos"]                                   # (T, B, D)
    h = h + torch.relu(ops.conv_tbc(h, p["wc"], p["bc"], 2)[:T])     # causal: output t sees t-2..t
    hb = h.transpose(0, 1)                                           # (B, T, D)
    q, k, v = hb @ p["wq"], hb @ p["wk"], hb @ p["wv"]
    scores = (q @ k.transpose(1, 2)).unsqueeze(1)                    # (B, 1, T, T)
    attn = ops.softmax(scores, key_padding, 1.0 / math.sqrt(D))
    hb = hb + (attn.squeeze(1) @ v) @ p["wo"]
    logits = hb @ p["out"] + p["bout"]                               # (B, T, V)
    return ops.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))


def train(steps: int, use_aclnn: bool, seed: int = 0) -> tuple[list[float], float]:
    rng = np.random.default_rng(seed)
    ops = AclnnOps if use_aclnn else TorchOps
    return side_by_side.train(init_params(seed), 1e-2, steps, lambda params: loss_fn(params, make_batch(rng), ops))


def main(argv: list[str] | None = None) -> int:
    return side_by_side.main(
        argv, doc=__doc__, name="attention", default_steps=200, run=train,
        describe=lambda steps: f"causal attention LM, {steps} steps of Adam, batch {B} x {T} tokens, vocabulary {V}",
        aclnn_label="aclnn_gpu (ConvTbc, ScaledMaskedSoftmax, CrossEntropyLoss)",
        title="Causal attention LM training loss: aclnn_gpu vs PyTorch", learn_ratio=0.8)


if __name__ == "__main__":
    sys.exit(main())
