"""Cross-entropy and NLL with PyTorch's signatures, published as `aclnn_gpu.torch.cross_entropy` and
`aclnn_gpu.torch.nll_loss` (with the former autograd.Functions `CrossEntropyFunction`, `NllLossFunction`):
PyTorch's argument rules, then the custom operators `aclnn::cross_entropy_loss` (`_zloss`) and
`aclnn::nll_loss` (`torch_ops.py`).

    cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0,                 # torch.nn.functional
                  *, lse_square_scale_for_zloss=0.0)                     # + CANN's z-loss (beyond PyTorch)
    nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean")                                          # torch.nn.functional

Semantics, and where they differ from PyTorch: class-index targets (int64 or uint8, PyTorch's two), input
(N, C), (C,) or (N, C, d1, ...); class-probability targets raise NotImplementedError. The operator wants a
float32 weight, so `weight` is cast to float32 (a float64 input keeps float64 math otherwise); no
gradient for weight (a weight that requires grad is refused). A target whose batch size is not the
input's raises ValueError ("Expected input batch_size (3) to match target batch_size (2).", the shapes as
passed), other shape mismatches RuntimeError, as PyTorch's. The keyword-only `lse_square_scale_for_zloss`
(default 0.0 = PyTorch's loss) adds CANN's z-loss k * logsumexp(x_i)^2 per row not ignored, reduced like
the loss ("mean": over those rows, unweighted; docs/API.md §7), with its gradient (none in second order).
cross_entropy "mean" with every target ignored gives 0 where PyTorch gives NaN. nll_loss's forward is
PyTorch's own nll_loss (there is no NLL operator); its gradient is aclnnCrossEntropyLossGrad's.

Layer 11 (operators), imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import torch_rules as rules

_aclnn = torch.ops.aclnn   # the operators, registered by aclnn_gpu.torch, looked up when called


def _check_class_shapes(input: torch.Tensor, target: torch.Tensor) -> None:
    """PyTorch's checks (and exception types) of a class-index target against the input, quoting the
    shapes as passed (the operator would see them flattened)."""
    if input.dim() < 2:
        return
    batch = target.shape[0] if target.dim() else 0
    if batch != input.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size ({batch}).")
    if input.dim() == 2 and target.dim() != 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    expected = [input.shape[0], *input.shape[2:]]
    if input.dim() > 2 and list(target.shape) != expected:
        raise RuntimeError(f"Expected target size {expected}, got {list(target.shape)}")


def _class_inputs(function: str, input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, tuple | None]:
    """cross_entropy / nll_loss arguments as the operator takes them: (N, C) input, (N,) target, float32
    weight, and the shape of a "none" result ((), (N,), (N, d1, ...)) when it is not (N,)."""
    rules.tensors(function, input=input, target=target)
    if target.is_floating_point():
        raise NotImplementedError(f"{function}: class-probability targets are not supported (class indices only)")
    _check_class_shapes(input, target)
    if target.dtype == torch.uint8:                   # PyTorch takes Long or Byte class indices
        target = target.long()
    if weight is not None:
        if weight.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError(f"{function}: no gradient for weight (aclnnCrossEntropyLossGrad gives "
                                      "the input's only); pass weight.detach()")
        weight = weight.detach().to(torch.float32)   # the operator's weight dtype
    shape: tuple | None = None
    if input.dim() == 1:                              # unbatched: (C,), target ()
        input, target, shape = input.unsqueeze(0), target.reshape(1), ()
    elif input.dim() > 2:                             # (N, C, d1, ...) -> (N*d1*..., C)
        shape = (input.shape[0],) + tuple(input.shape[2:])
        input = input.movedim(1, -1).reshape(-1, input.shape[1])
        target = target.reshape(-1)
    return input, target, weight, shape


@rules.not_scriptable
def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0, *,
                  lse_square_scale_for_zloss: float = 0.0) -> torch.Tensor:
    """torch.nn.functional.cross_entropy (class-index targets) through aclnnCrossEntropyLoss /
    aclnnCrossEntropyLossGrad. input (N, C), (C,) or (N, C, d1, ...); target of input's shape minus C.
    lse_square_scale_for_zloss (keyword-only, beyond PyTorch's signature): CANN's z-loss scale k in
    [0, 1); k != 0 adds k * logsumexp(row)^2 for every row not ignored, reduced like the loss."""
    reduction = rules.reduction(reduction, size_average, reduce)
    input, target, weight, shape = _class_inputs("cross_entropy", input, target, weight)
    if lse_square_scale_for_zloss:
        loss = _aclnn.cross_entropy_loss_zloss(input, target, weight, reduction, ignore_index, label_smoothing,
                                               float(lse_square_scale_for_zloss))[0]
    else:
        loss, _ = _aclnn.cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)
    return loss.reshape(shape) if reduction == "none" and shape is not None else loss


@rules.not_scriptable
def nll_loss(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
             reduction: str = "mean") -> torch.Tensor:
    """torch.nn.functional.nll_loss on log-probabilities: input (N, C), (C,) or (N, C, d1, ...), target
    class indices. The gradient is aclnnCrossEntropyLossGrad's (aclnn::nll_loss)."""
    reduction = rules.reduction(reduction, size_average, reduce)
    input, target, weight, shape = _class_inputs("nll_loss", input, target, weight)
    loss = _aclnn.nll_loss(input, target, weight, reduction, ignore_index)
    return loss.reshape(shape) if reduction == "none" and shape is not None else loss


class CrossEntropyFunction:
    """`apply(input, target, weight, reduction, ignore_index, label_smoothing, link=None)` over (N, C)
    logits (aclnn::cross_entropy_loss); `link` is ignored (kept for old callers)."""

    @staticmethod
    def apply(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: str,
              ignore_index: int, label_smoothing: float, link: Any = None) -> torch.Tensor:
        return _aclnn.cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)[0]


class NllLossFunction:
    """`apply(input, target, weight, reduction, ignore_index, link=None)` over (N, C) log-probabilities
    (aclnn::nll_loss); `link` is ignored."""

    @staticmethod
    def apply(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: str,
              ignore_index: int, link: Any = None) -> torch.Tensor:
        return _aclnn.nll_loss(input, target, weight, reduction, ignore_index)


# What aclnn_gpu.torch publishes of this family: its functions, then its former autograd.Function classes
PUBLIC = (cross_entropy, nll_loss, CrossEntropyFunction, NllLossFunction)

__all__ = ["cross_entropy", "nll_loss", "CrossEntropyFunction", "NllLossFunction", "PUBLIC"]
