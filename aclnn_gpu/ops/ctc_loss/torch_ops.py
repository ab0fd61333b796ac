"""The CTC loss as PyTorch custom operators (data for `aclnn_gpu.torch`, which registers them):

    aclnn::ctc_loss(Tensor log_probs, Tensor targets, SymInt[] input_lengths, SymInt[] target_lengths,
                    int blank, bool zero_infinity) -> (Tensor neg_log_likelihood, Tensor log_alpha)
    aclnn::ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, SymInt[] input_lengths,
                    SymInt[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank,
                    bool zero_infinity) -> Tensor

The forward is functional's ctc_loss, as aten::_ctc_loss: it returns the raw loss (zero_infinity changes
only the backward); log_alpha (internal state) is not differentiable. The backward operator raises when
differentiated (PyTorch's _ctc_loss_backward has no derivative either), and the forward-mode rule raises
NotImplementedError as PyTorch's does. Autocast: float32 (PyTorch's list). Imports torch: only
`aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from ..torch_rules import AUTOCAST_FLOAT32, TorchOperator, dense, save

# PyTorch's own messages for the same refusals (aten::_ctc_loss_backward has no derivative, _ctc_loss no
# forward-mode rule), naming these operators
FIRST_ORDER_ONLY = ("derivative for aclnn::ctc_loss_backward is not implemented (as PyTorch's for "
                    "aten::_ctc_loss_backward: no double backward through the CTC loss)")
NO_FORWARD_AD = ("Trying to use forward AD with aclnn::ctc_loss that does not support it because it has not been "
                 "implemented yet (as PyTorch's _ctc_loss)")


def ctc_loss(run: Any, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list, target_lengths: list,
             blank: int, zero_infinity: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return run(log_probs, log_probs, targets, list(input_lengths), list(target_lengths), blank, False)


def ctc_loss_fake(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    max_l = functools.reduce(torch.sym_max, target_lengths, 0)
    n, t = log_probs.shape[1], log_probs.shape[0]
    return log_probs.new_empty((n,)), log_probs.new_empty((n, t, 2 * max_l + 1))


def ctc_loss_backward(run, grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                      blank, zero_infinity):
    return run(log_probs, grad, log_probs, targets, list(input_lengths), list(target_lengths), neg_log_likelihood,
               log_alpha, blank, zero_infinity)


def ctc_loss_backward_fake(grad, log_probs, *rest):
    return log_probs.new_empty(log_probs.shape, dtype=grad.dtype)


def _ctc_setup(ctx, inputs, output):
    log_probs, targets, input_lengths, target_lengths, blank, zero_infinity = inputs
    nll, log_alpha = output
    ctx.mark_non_differentiable(log_alpha)
    save(ctx, log_probs, targets, nll, log_alpha)
    ctx.args = (input_lengths, target_lengths, blank, zero_infinity)


def _ctc_backward(ctx, grad, _log_alpha_grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None
    log_probs, targets, nll, log_alpha = ctx.saved_tensors
    input_lengths, target_lengths, blank, zero_infinity = ctx.args
    g = torch.ops.aclnn.ctc_loss_backward.default(dense(grad).to(log_probs.dtype), log_probs, targets, input_lengths,
                                                  target_lengths, nll, log_alpha, blank, zero_infinity)
    return g, None, None, None, None, None


def _ctc_jvp(ctx, *tangents):
    raise NotImplementedError(NO_FORWARD_AD)


def _ctc_backward_setup(ctx, inputs, output):
    pass


def _ctc_backward_backward(ctx, *grads):
    raise RuntimeError(FIRST_ORDER_ONLY)


OPERATORS = (
    TorchOperator("ctc_loss", "(Tensor log_probs, Tensor targets, SymInt[] input_lengths, SymInt[] target_lengths, "
                  "int blank, bool zero_infinity) -> (Tensor, Tensor)", ctc_loss, ctc_loss_fake, _ctc_setup,
                  _ctc_backward, _ctc_jvp, functional="ctc_loss", autocast=AUTOCAST_FLOAT32),
    TorchOperator("ctc_loss_backward", "(Tensor grad, Tensor log_probs, Tensor targets, SymInt[] input_lengths, "
                  "SymInt[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, "
                  "bool zero_infinity) -> Tensor", ctc_loss_backward, ctc_loss_backward_fake, _ctc_backward_setup,
                  _ctc_backward_backward, _ctc_jvp, functional="ctc_loss_backward"),
)

__all__ = ["OPERATORS", "FIRST_ORDER_ONLY", "NO_FORWARD_AD"]
