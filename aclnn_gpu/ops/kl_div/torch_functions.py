"""The KL divergence with PyTorch's signature, published as `aclnn_gpu.torch.kl_div` (with the former
autograd.Function `KlDivFunction`): PyTorch's argument rules, then the custom operator `aclnn::kl_div`
(`torch_ops.py`), whose forward and backward are aclnnKlDiv / aclnnKlDivBackward.

    kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False)

Semantics, and where they differ from PyTorch: reductions "none" | "mean" | "sum" | "batchmean"
(batchmean divides by the broadcast shape's dim 0, CANN's rule; PyTorch divides by input.size(0): equal
unless input broadcasts in dim 0). "mean" does not repeat PyTorch's warning that it is not the
mathematical KL divergence; the value is PyTorch's. "mean" / "batchmean" of an empty input is NaN
(0 / 0), as PyTorch's, on every device. No gradient for target: a target that requires grad is refused,
and a tangent on it raises NotImplementedError.

Layer 11 (operators), imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

import torch

from .. import torch_rules as rules

_aclnn = torch.ops.aclnn   # the operators, registered by aclnn_gpu.torch, looked up when called


@rules.not_scriptable
def kl_div(input: torch.Tensor, target: torch.Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> torch.Tensor:
    """torch.nn.functional.kl_div through aclnnKlDiv / aclnnKlDivBackward: input holds log-probabilities,
    target probabilities (log-probabilities with log_target). Gradient for input only."""
    rules.tensors("kl_div", input=input, target=target)
    reduction = rules.reduction(reduction, size_average, reduce, rules.REDUCTIONS + ("batchmean",))
    if target.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("kl_div: no gradient for target (aclnnKlDivBackward gives the input's only); "
                                  "pass target.detach()")
    return _aclnn.kl_div(input, target, reduction, log_target)


class KlDivFunction:
    """`apply(input, target, reduction, log_target)` (aclnn::kl_div)."""

    @staticmethod
    def apply(input: torch.Tensor, target: torch.Tensor, reduction: str, log_target: bool) -> torch.Tensor:
        return _aclnn.kl_div(input, target, reduction, log_target)


# What aclnn_gpu.torch publishes of this family: its functions, then its former autograd.Function classes
PUBLIC = (kl_div, KlDivFunction)

__all__ = ["kl_div", "KlDivFunction", "PUBLIC"]
