"""The fused scaled masked softmax with apex's / Megatron's signatures, published as
`aclnn_gpu.torch.scaled_masked_softmax` and `scaled_upper_triang_masked_softmax` (with the former
autograd.Function `ScaledMaskedSoftmaxFunction`): the custom operator `aclnn::scaled_masked_softmax`
(`torch_ops.py`), whose forward and backward are aclnnScaledMaskedSoftmax / ...Backward.

    scaled_masked_softmax(inputs, mask, scale)                          # apex / Megatron fused softmax
    scaled_upper_triang_masked_softmax(inputs, _, scale)                # apex / Megatron, causal

The mask is bool (or uint8, as apex takes it), true = masked out, or None (nothing masked); it gets no
gradient. A fully masked row gives zeros (PyTorch's softmax gives NaN, apex's -10000 fill a uniform
row). The operator takes FLOAT, FLOAT16, BFLOAT16 (CANN's contract); float64 is computed by the custom
operator with PyTorch's own ops (`torch_ops.py`). Under autocast it keeps its input's dtype, as apex's
kernel does.

Layer 11 (operators), imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import torch_rules as rules

_aclnn = torch.ops.aclnn   # the operators, registered by aclnn_gpu.torch, looked up when called


def _softmax(function: str, inputs: torch.Tensor, mask: torch.Tensor | None, scale: float,
             fix_triu_mask: bool) -> torch.Tensor:
    rules.tensors(function, inputs=inputs)
    if mask is not None:
        rules.tensors(function, mask=mask)
        mask = mask.detach()
        if mask.dtype != torch.bool:
            mask = mask.to(torch.bool)
    return _aclnn.scaled_masked_softmax(inputs, mask, scale, fix_triu_mask)


@rules.not_scriptable
def scaled_masked_softmax(inputs: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """apex's / Megatron's scaled_masked_softmax(inputs, mask, scale): softmax(scale * inputs) over the
    last axis with masked positions (mask true / 1) excluded, through aclnnScaledMaskedSoftmax /
    aclnnScaledMaskedSoftmaxBackward. inputs (B, N, S1, S2); mask bool or uint8 (Bm, Nm, S1, S2) with
    Bm in {B, 1}, Nm in {N, 1}, or None (no mask)."""
    return _softmax("scaled_masked_softmax", inputs, mask, scale, False)


@rules.not_scriptable
def scaled_upper_triang_masked_softmax(inputs: torch.Tensor, _: Any, scale: float) -> torch.Tensor:
    """apex's / Megatron's scaled_upper_triang_masked_softmax(inputs, _, scale): the causal softmax
    (entry j of row i masked when j > i) of inputs (attn_batches, S1, S2) or (B, N, S1, S2); the second
    argument is ignored, as apex ignores it. Through aclnnScaledMaskedSoftmax with fixTriuMask=true."""
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 3:
        return _softmax("scaled_upper_triang_masked_softmax", inputs.unsqueeze(0), None, scale, True).squeeze(0)
    return _softmax("scaled_upper_triang_masked_softmax", inputs, None, scale, True)


class ScaledMaskedSoftmaxFunction:
    """`apply(x, mask, scale, fix_triu_mask, link=None)`: the operator's mask and causal mask together,
    which apex has no call for (aclnn::scaled_masked_softmax); `link` is ignored."""

    @staticmethod
    def apply(x: torch.Tensor, mask: torch.Tensor | None, scale: float, fix_triu_mask: bool,
              link: Any = None) -> torch.Tensor:
        return _aclnn.scaled_masked_softmax(x, mask, scale, fix_triu_mask)


# What aclnn_gpu.torch publishes of this family: its functions, then its former autograd.Function classes
PUBLIC = (scaled_masked_softmax, scaled_upper_triang_masked_softmax, ScaledMaskedSoftmaxFunction)

__all__ = ["scaled_masked_softmax", "scaled_upper_triang_masked_softmax", "ScaledMaskedSoftmaxFunction", "PUBLIC"]
