"""The CTC loss with PyTorch's signature, published as `aclnn_gpu.torch.ctc_loss` (with the former
autograd.Function `CtcLossFunction`): PyTorch's argument rules, then the custom operator
`aclnn::ctc_loss` (`torch_ops.py`), whose forward and backward are aclnnCtcLoss / aclnnCtcLossBackward.

    ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False)                                       # torch.nn.functional

Semantics, and where they differ from PyTorch: reduction "none" | "mean" (each loss divided by its
target length, clamped to >= 1, then the batch mean, as PyTorch) | "sum", built with torch ops on top
of the raw per-sample losses. The forward always runs with zeroInfinity=false and keeps that RAW loss
for the backward, as PyTorch's autograd does (aclnnCtcLossBackward zeroes a sample that cannot align
given either that +inf or the forward's zeroed 0, ops/ctc_loss/api.py); zero_infinity then zeroes the
returned loss and the backward gradient. The gradient is PyTorch's `_ctc_loss_backward` convention
(d loss / d logits when log_probs = log_softmax(logits)), so it matches
torch.nn.functional.ctc_loss through a log_softmax. Targets of any integer type (uint8, int8 and int16
are widened to int64 for the operator); floating-point length tensors raise RuntimeError ("input_lengths
must be integral"). Out-of-range labels are not checked on the host (PyTorch does not check them
either): the operator's documented device behaviour applies. Lengths given as tensors are read with
`.tolist()` (a graph break under torch.compile, as PyTorch's own; CUDA length tensors are read on the
host, which no CUDA graph capture allows: give host values there). Forward mode raises
NotImplementedError and double backward raises, as PyTorch's.

Layer 11 (operators), imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import torch_rules as rules

_aclnn = torch.ops.aclnn   # the operators, registered by aclnn_gpu.torch, looked up when called


def _ctc_per_sample(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list, target_lengths: list,
                    blank: int, zero_infinity: bool) -> torch.Tensor:
    nll, _ = _aclnn.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if zero_infinity:
        return torch.where(torch.isinf(nll), torch.zeros((), dtype=nll.dtype, device=nll.device), nll)
    return nll


def _as_tensor(values: list, like: torch.Tensor) -> torch.Tensor:
    """Host ints as a tensor like `like`: eager, one copy that waits for nothing on a GPU (non_blocking
    from pageable memory returns once the bytes are staged); under torch.compile, from the (symbolic)
    ints themselves, so new lengths do not recompile; while `like`'s stream captures a CUDA graph, made
    on the GPU too (a copy from pageable memory cannot be captured: PyTorch refuses it)."""
    if torch.compiler.is_compiling() or rules.capturing_for(like):
        return torch.stack([torch.full((), v, dtype=like.dtype, device=like.device) for v in values])
    return torch.as_tensor(values, dtype=like.dtype).to(like.device, non_blocking=True)


@rules.not_scriptable
def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any,
             blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> torch.Tensor:
    """torch.nn.functional.ctc_loss through aclnnCtcLoss / aclnnCtcLossBackward. log_probs (T, N, C)
    (or (T, C) unbatched), targets (N, S) padded or 1-D concatenated, lengths as tensors or sequences."""
    rules.tensors("ctc_loss", log_probs=log_probs, targets=targets)
    reduction = rules.reduction(reduction)
    input_lengths = rules.lengths(input_lengths, "input_lengths")
    target_lengths = rules.lengths(target_lengths, "target_lengths")
    if targets.dtype in (torch.uint8, torch.int8, torch.int16):   # PyTorch takes any integer type
        targets = targets.long()
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
    loss = _ctc_per_sample(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if reduction == "mean":
        return (loss / _as_tensor(target_lengths, loss).clamp(min=1)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss[0] if unbatched else loss


class CtcLossFunction:
    """`apply(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)`: the per-sample
    loss (T, N, C) -> (N,), zero_infinity applied (aclnn::ctc_loss). Kept for code written against the
    autograd.Function `aclnn_gpu.torch` had before its operators were torch.library custom operators."""

    @staticmethod
    def apply(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any, blank: int,
              zero_infinity: bool) -> torch.Tensor:
        return _ctc_per_sample(log_probs, targets, rules.lengths(input_lengths), rules.lengths(target_lengths),
                               blank, zero_infinity)


# What aclnn_gpu.torch publishes of this family: its functions, then its former autograd.Function classes
PUBLIC = (ctc_loss, CtcLossFunction)

__all__ = ["ctc_loss", "CtcLossFunction", "PUBLIC"]
