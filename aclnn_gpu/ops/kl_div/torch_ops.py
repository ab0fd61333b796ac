"""The KL divergence as PyTorch custom operators (data for `aclnn_gpu.torch`, which registers them):

    aclnn::kl_div(Tensor self, Tensor target, str reduction, bool log_target) -> Tensor
    aclnn::kl_div_backward(Tensor grad_output, Tensor self, Tensor target, str reduction, bool log_target)
                    -> Tensor

The forward and backward are functional's kl_div and kl_div_backward; the forward's autograd formula
calls the backward operator, whose own rules are explicit (it is linear in grad_output and does not depend
on self), so double backward works. Forward mode: the slope -target (-exp(target)) times the tangent,
reduced. Autocast: float32 (PyTorch's list). Imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

import math

import torch

from ..torch_rules import AUTOCAST_FLOAT32, TorchOperator, dense, no_tangent, save


def _backward_op(*args):
    """aclnn::kl_div_backward, looked up when called (aclnn_gpu.torch registers it)."""
    return torch.ops.aclnn.kl_div_backward.default(*args)


def kl_div(run, self, target, reduction, log_target):
    return run(self, self, target, reduction, log_target)


def kl_div_fake(self, target, reduction, log_target):
    shape = torch.broadcast_shapes(self.shape, target.shape) if reduction == "none" else ()
    return self.new_empty(shape)


def kl_div_backward(run, grad_output, self, target, reduction, log_target):
    return run(self, grad_output, self, target, reduction, log_target)


def kl_div_backward_fake(grad_output, self, target, reduction, log_target):
    return self.new_empty(self.shape)


def _kl_slope(self: torch.Tensor, target: torch.Tensor, reduction: str, log_target: bool) -> torch.Tensor:
    """d loss_elementwise / d self over the broadcast shape B, times the reduction's coefficient (1 for
    none and sum, 1 / numel(B) for mean, 1 / B[0] for batchmean: CANN's divisor)."""
    shape = torch.broadcast_shapes(self.shape, target.shape)
    slope = -(target.exp() if log_target else target)
    slope = slope.expand(shape)
    if reduction == "mean":
        slope = slope / math.prod(shape)
    elif reduction == "batchmean" and len(shape):
        slope = slope / shape[0]
    return slope


def _kl_setup(ctx, inputs, output):
    input, target, reduction, log_target = inputs
    save(ctx, input, target)
    ctx.args = (reduction, log_target)


def _kl_backward(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None
    input, target = ctx.saved_tensors
    return _backward_op(dense(grad), input, target, *ctx.args), None, None, None


def _kl_jvp(ctx, t_input, t_target, *_):
    no_tangent("aclnn::kl_div", target=t_target)
    input, target = ctx.saved_tensors
    reduction, log_target = ctx.args
    product = _kl_slope(input, target, reduction, log_target) * t_input
    return product if reduction == "none" else product.sum()


def _kl_backward_setup(ctx, inputs, output):
    grad_output, input, target, reduction, log_target = inputs
    save(ctx, grad_output, input, target)
    ctx.args = (reduction, log_target)


def _kl_backward_backward(ctx, u):
    """The gradient is linear in grad_output and does not depend on self (its derivative there is 0)."""
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None
    grad_output, input, target = ctx.saved_tensors
    d_grad = (_kl_slope(input, target, *ctx.args) * u).sum_to_size(grad_output.shape)
    return d_grad, None, None, None, None


def _kl_backward_jvp(ctx, t_grad, t_input, t_target, *_):
    no_tangent("aclnn::kl_div_backward", target=t_target)
    grad_output, input, target = ctx.saved_tensors
    if t_grad is None:
        return torch.zeros_like(input)
    return _backward_op(dense(t_grad), input, target, *ctx.args)



OPERATORS = (
    TorchOperator("kl_div", "(Tensor self, Tensor target, str reduction, bool log_target) -> Tensor", kl_div,
                  kl_div_fake, _kl_setup, _kl_backward, _kl_jvp, functional="kl_div", autocast=AUTOCAST_FLOAT32),
    TorchOperator("kl_div_backward", "(Tensor grad_output, Tensor self, Tensor target, str reduction, "
                  "bool log_target) -> Tensor", kl_div_backward, kl_div_backward_fake, _kl_backward_setup,
                  _kl_backward_backward, _kl_backward_jvp, functional="kl_div_backward"),
)

__all__ = ["OPERATORS"]
