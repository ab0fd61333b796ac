"""The fused scaled masked softmax as PyTorch custom operators (data for `aclnn_gpu.torch`, which
registers them):

    aclnn::scaled_masked_softmax(Tensor x, Tensor? mask, float scale, bool fix_triu_mask) -> Tensor
    aclnn::scaled_masked_softmax_backward(Tensor grad_output, Tensor y, Tensor? mask, float scale,
                    bool fix_triu_mask) -> Tensor

The forward and backward are functional's scaled_masked_softmax and scaled_masked_softmax_backward; the
backward operator has explicit second-order rules. Forward mode: y * scale * (t - sum(y * t)). float64,
which aclnnScaledMaskedSoftmax refuses (FLOAT, FLOAT16, BFLOAT16), is computed here with PyTorch's ops on
the tensors' device, the same formulas. No autocast rule: the fused softmax is apex's, which runs in its
input's dtype (Megatron feeds it half scores under autocast). Imports torch: only `aclnn_gpu.torch`
imports this module.
"""
from __future__ import annotations

import torch

from ..torch_rules import TorchOperator, add, dense, save


def _backward_op(*args):
    """aclnn::scaled_masked_softmax_backward, looked up when called (aclnn_gpu.torch registers it)."""
    return torch.ops.aclnn.scaled_masked_softmax_backward.default(*args)


def _softmax_mask(x: torch.Tensor, mask: torch.Tensor | None, fix_triu_mask: bool) -> torch.Tensor | None:
    """The positions masked out, broadcastable to x (None: none): mask, or-ed with the causal mask."""
    if fix_triu_mask:
        rows, cols = x.shape[-2], x.shape[-1]
        causal = torch.ones((rows, cols), dtype=torch.bool, device=x.device).triu(1)
        mask = causal if mask is None else mask | causal
    return mask


def _softmax_float64(x, mask, scale, fix_triu_mask):
    """float64, which aclnnScaledMaskedSoftmax refuses: the operator's formula with PyTorch's ops on the
    tensors' device, rows with nothing kept (masked, or -inf) giving zeros as the operator's do."""
    masked = _softmax_mask(x, mask, fix_triu_mask)
    scores = x * scale
    if masked is not None:
        scores = scores.masked_fill(masked, -torch.inf)
    empty_row = scores.amax(-1, keepdim=True) == -torch.inf
    return torch.softmax(scores, -1).masked_fill(empty_row, 0.0)


def _softmax_backward_float64(grad_output, y, mask, scale, fix_triu_mask):
    grad = scale * y * (grad_output - (grad_output * y).sum(-1, keepdim=True))
    masked = _softmax_mask(y, mask, fix_triu_mask)
    return grad if masked is None else grad.masked_fill(masked, 0.0)


def _operator_mask(x: torch.Tensor, mask: torch.Tensor | None, fix_triu_mask: bool) -> torch.Tensor | None:
    """The operator wants a mask unless fixTriuMask: no mask is one that masks nothing, (1, 1, S1, S2)."""
    if mask is None and not fix_triu_mask:
        return torch.zeros((1, 1) + tuple(x.shape[-2:]), dtype=torch.bool, device=x.device)
    return mask


def scaled_masked_softmax(run, x, mask, scale, fix_triu_mask):
    if x.dtype == torch.float64:
        return _softmax_float64(x, mask, scale, fix_triu_mask)
    return run(x, x, _operator_mask(x, mask, fix_triu_mask), scale, fix_triu_mask)


def scaled_masked_softmax_fake(x, mask, scale, fix_triu_mask):
    return x.new_empty(x.shape)


def scaled_masked_softmax_backward(run, grad_output, y, mask, scale, fix_triu_mask):
    if y.dtype == torch.float64 and grad_output.dtype == torch.float64:
        return _softmax_backward_float64(grad_output, y, mask, scale, fix_triu_mask)
    return run(y, grad_output, y, _operator_mask(y, mask, fix_triu_mask), scale,
                fix_triu_mask)


def scaled_masked_softmax_backward_fake(grad_output, y, mask, scale, fix_triu_mask):
    return grad_output.new_empty(grad_output.shape)


def _softmax_setup(ctx, inputs, output):
    x, mask, scale, fix_triu_mask = inputs
    save(ctx, output, mask)                              # y, not x
    ctx.args = (scale, fix_triu_mask)


def _softmax_backward_formula(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None
    y, mask = ctx.saved_tensors
    return _backward_op(dense(grad).to(y.dtype), y, mask, *ctx.args), None, None, None


def _softmax_jvp(ctx, t_x, *_):
    """d y = scale * y * (t - sum(y * t)) (y is 0 where masked)."""
    y, mask = ctx.saved_tensors
    scale = ctx.args[0]
    return scale * y * (t_x - (y * t_x).sum(-1, keepdim=True))


def _softmax_backward_setup(ctx, inputs, output):
    grad_output, y, mask, scale, fix_triu_mask = inputs
    save(ctx, grad_output, y, mask)
    ctx.args = (scale, fix_triu_mask)


def _softmax_backward_backward(ctx, u):
    """out = s * y * (g - sum(g * y)): in g the map is its own adjoint (d g = the backward of u); in y,
    d y = s * (u * (g - sum(g * y)) - g * sum(u * y))."""
    grad_output, y, mask = ctx.saved_tensors
    scale = ctx.args[0]
    need = ctx.needs_input_grad
    d_grad = _backward_op(dense(u), y, mask, *ctx.args) if need[0] else None
    d_y = None
    if need[1]:
        d_y = scale * (u * (grad_output - (grad_output * y).sum(-1, keepdim=True))
                       - grad_output * (u * y).sum(-1, keepdim=True))
    return d_grad, d_y, None, None, None


def _softmax_backward_jvp(ctx, t_grad, t_y, *_):
    grad_output, y, mask = ctx.saved_tensors
    scale = ctx.args[0]
    terms = []
    if t_grad is not None:
        terms.append(_backward_op(dense(t_grad), y, mask, *ctx.args))
    if t_y is not None:
        terms.append(scale * (t_y * (grad_output - (grad_output * y).sum(-1, keepdim=True))
                              - y * (grad_output * t_y).sum(-1, keepdim=True)))
    return add(*terms) if terms else torch.zeros_like(y)



OPERATORS = (
    TorchOperator("scaled_masked_softmax", "(Tensor x, Tensor? mask, float scale, bool fix_triu_mask) -> Tensor",
                  scaled_masked_softmax, scaled_masked_softmax_fake, _softmax_setup, _softmax_backward_formula,
                  _softmax_jvp, functional="scaled_masked_softmax"),
    TorchOperator("scaled_masked_softmax_backward", "(Tensor grad_output, Tensor y, Tensor? mask, float scale, "
                  "bool fix_triu_mask) -> Tensor", scaled_masked_softmax_backward,
                  scaled_masked_softmax_backward_fake, _softmax_backward_setup, _softmax_backward_backward,
                  _softmax_backward_jvp, functional="scaled_masked_softmax_backward"),
)

__all__ = ["OPERATORS"]
