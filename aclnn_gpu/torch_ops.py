"""The operators as PyTorch custom operators: `torch.library` definitions in the namespace `aclnn`, with
fake (meta) implementations that give the exact output shapes and dtypes, and autograd formulas
registered through the library, so `torch.compile(fullgraph=True)` traces through them, `torch.export`
holds them and `torch.library.opcheck` passes for each. `aclnn_gpu.torch`'s PyTorch-shaped functions
call these; they can also be called directly as `torch.ops.aclnn.<name>`.

    aclnn::ctc_loss(Tensor log_probs, Tensor targets, SymInt[] input_lengths, SymInt[] target_lengths,
                    int blank, bool zero_infinity) -> (Tensor neg_log_likelihood, Tensor log_alpha)
    aclnn::ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, SymInt[] input_lengths,
                    SymInt[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank,
                    bool zero_infinity) -> Tensor
    aclnn::cross_entropy_loss(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index,
                    float label_smoothing) -> (Tensor loss, Tensor log_prob)
    aclnn::cross_entropy_loss_zloss(Tensor input, Tensor target, Tensor? weight, str reduction,
                    int ignore_index, float label_smoothing, float lse_square_scale_for_zloss)
                    -> (Tensor loss, Tensor log_prob, Tensor lse_for_zloss)      (CANN's z-loss added)
    aclnn::cross_entropy_loss_grad(Tensor grad_loss, Tensor log_prob, Tensor target, Tensor? weight,
                    str reduction, int ignore_index, float label_smoothing, Tensor? lse_for_zloss=None,
                    float lse_square_scale_for_zloss=0.0) -> Tensor
    aclnn::nll_loss(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index) -> Tensor
    aclnn::kl_div(Tensor self, Tensor target, str reduction, bool log_target) -> Tensor
    aclnn::kl_div_backward(Tensor grad_output, Tensor self, Tensor target, str reduction, bool log_target)
                    -> Tensor
    aclnn::conv_tbc(Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) -> Tensor
    aclnn::conv_tbc_backward(Tensor grad, Tensor input, Tensor weight, Tensor bias, int pad,
                    int cube_math_type) -> (Tensor, Tensor, Tensor)
    aclnn::scaled_masked_softmax(Tensor x, Tensor? mask, float scale, bool fix_triu_mask) -> Tensor
    aclnn::scaled_masked_softmax_backward(Tensor grad_output, Tensor y, Tensor? mask, float scale,
                    bool fix_triu_mask) -> Tensor

The forward operators are the functional calls of the same names (`ctc_loss`, as aten::_ctc_loss, returns
the raw loss: zero_infinity changes only the backward); `nll_loss` is PyTorch's own forward with
aclnnCrossEntropyLossGrad as its backward. Each forward's autograd formula calls its backward operator;
the outputs that are internal state (log_alpha, log_prob) are not differentiable. A backward operator
differentiated again (create_graph=True, then a second backward) raises: the operators give first
derivatives only.

Where each call runs: on CUDA tensors with the `cuda` device in use, on PyTorch's current stream, with
results and workspace from PyTorch's caching allocator, returning without waiting
(`aclnn_gpu/torch_stream.py`); otherwise through `functional`, which lends CPU tensors to the cpu and
emulated devices zero-copy and waits for its stream (results are moved to the input's device when
they come back elsewhere).

Class targets: on the host path cross_entropy checks them as PyTorch's CPU kernel does (IndexError
"Target 9 is out of bounds."); on the GPU it does not look (that would wait for the GPU), and a row
with an out-of-range target becomes NaN, the operator's documented device behaviour (PyTorch's CUDA
kernel raises a device-side assertion instead).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from . import functional as _F
from . import torch_stream as _stream

NAMESPACE = "aclnn"
FIRST_ORDER_ONLY = "aclnn_gpu.torch: the operators give first derivatives only (no double backward)"


def _on(result: Any, like: torch.Tensor) -> torch.Tensor:
    """A functional result as a torch tensor on `like`'s device (no copy when already there)."""
    if not isinstance(result, torch.Tensor):
        result = torch.from_dlpack(result)
    return result if result.device == like.device else result.to(like.device)


def _run(function: Callable[..., Any], like: torch.Tensor, *args: Any) -> Any:
    """`function` (a functional operator) on PyTorch's stream for a GPU `like`, else through functional."""
    if _stream.runs_on_stream(like):
        return _stream.call(function, like, *args)
    results = function(*args)
    if isinstance(results, tuple):
        return tuple(_on(r, like) for r in results)
    return _on(results, like)


def _dense(grad: torch.Tensor) -> torch.Tensor:
    # autograd often hands an expanded (stride-0) gradient; a dense one keeps the GPU path free of staging
    return grad if grad.is_contiguous() else grad.contiguous()


def _define(name: str, schema: str, impl: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op


def _first_order_only(ctx: Any, *grads: Any) -> Any:
    raise RuntimeError(FIRST_ORDER_ONLY)


def _backward_op(name: str, schema: str, impl: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    """A backward operator: differentiating it raises (see the module docstring)."""
    op = _define(name, schema, impl, fake)
    op.register_autograd(_first_order_only, setup_context=lambda ctx, inputs, output: None)
    return op


def check_class_targets(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """PyTorch's host check of class indices (IndexError "Target 9 is out of bounds."); the operators
    make such rows NaN on the device instead, which a PyTorch caller does not expect."""
    if target.numel() == 0:
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bool(bad.any()):
        raise IndexError(f"Target {int(target[bad].reshape(-1)[0])} is out of bounds.")


# ---------------------------------------------------------------------------- CTC loss
def _ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list, target_lengths: list, blank: int,
              zero_infinity: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _run(_F.ctc_loss, log_probs, log_probs, targets, list(input_lengths), list(target_lengths), blank, False)


def _ctc_loss_fake(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    max_l = functools.reduce(torch.sym_max, target_lengths, 0)
    n, t = log_probs.shape[1], log_probs.shape[0]
    return log_probs.new_empty((n,)), log_probs.new_empty((n, t, 2 * max_l + 1))


def _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
                       zero_infinity):
    return _run(_F.ctc_loss_backward, log_probs, grad, log_probs, targets, list(input_lengths), list(target_lengths),
                neg_log_likelihood, log_alpha, blank, zero_infinity)


def _ctc_loss_backward_fake(grad, log_probs, *rest):
    return log_probs.new_empty(log_probs.shape, dtype=grad.dtype)


ctc_loss = _define(
    "ctc_loss", "(Tensor log_probs, Tensor targets, SymInt[] input_lengths, SymInt[] target_lengths, int blank, "
    "bool zero_infinity) -> (Tensor, Tensor)", _ctc_loss, _ctc_loss_fake)
ctc_loss_backward = _backward_op(
    "ctc_loss_backward", "(Tensor grad, Tensor log_probs, Tensor targets, SymInt[] input_lengths, "
    "SymInt[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity) -> Tensor",
    _ctc_loss_backward, _ctc_loss_backward_fake)


def _ctc_setup(ctx, inputs, output):
    log_probs, targets, input_lengths, target_lengths, blank, zero_infinity = inputs
    nll, log_alpha = output
    ctx.mark_non_differentiable(log_alpha)
    ctx.save_for_backward(log_probs, targets, nll, log_alpha)
    ctx.args = (input_lengths, target_lengths, blank, zero_infinity)


def _ctc_backward(ctx, grad, _log_alpha_grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None
    log_probs, targets, nll, log_alpha = ctx.saved_tensors
    input_lengths, target_lengths, blank, zero_infinity = ctx.args
    g = ctc_loss_backward(_dense(grad).to(log_probs.dtype), log_probs, targets, input_lengths, target_lengths, nll,
                          log_alpha, blank, zero_infinity)
    return g, None, None, None, None, None


ctc_loss.register_autograd(_ctc_backward, setup_context=_ctc_setup)


# ---------------------------------------------------------------------------- cross-entropy and NLL
def _cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing):
    if not _stream.runs_on_stream(input):
        check_class_targets(target, input.shape[1], ignore_index)
    return _run(_F.cross_entropy_loss, input, input, target, weight, reduction, ignore_index, label_smoothing)


def _cross_entropy_loss_fake(input, target, weight, reduction, ignore_index, label_smoothing):
    loss = input.new_empty((input.shape[0],) if reduction == "none" else ())
    return loss, input.new_empty(input.shape)


def _cross_entropy_loss_grad(grad_loss, log_prob, target, weight, reduction, ignore_index, label_smoothing,
                             lse_for_zloss=None, lse_square_scale_for_zloss=0.0):
    return _run(_F.cross_entropy_loss_grad, log_prob, grad_loss, log_prob, target, weight, reduction, ignore_index,
                label_smoothing, lse_square_scale_for_zloss, lse_for_zloss)


def _cross_entropy_loss_grad_fake(grad_loss, log_prob, *rest):
    return log_prob.new_empty(log_prob.shape)


cross_entropy_loss = _define(
    "cross_entropy_loss", "(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index, "
    "float label_smoothing) -> (Tensor, Tensor)", _cross_entropy_loss, _cross_entropy_loss_fake)
cross_entropy_loss_grad = _backward_op(
    "cross_entropy_loss_grad", "(Tensor grad_loss, Tensor log_prob, Tensor target, Tensor? weight, str reduction, "
    "int ignore_index, float label_smoothing, Tensor? lse_for_zloss=None, float lse_square_scale_for_zloss=0.0) "
    "-> Tensor", _cross_entropy_loss_grad, _cross_entropy_loss_grad_fake)


def _ce_setup(ctx, inputs, output):
    input, target, weight, reduction, ignore_index, label_smoothing = inputs
    loss, log_prob = output
    ctx.set_materialize_grads(False)                    # log_prob's gradient is None unless it is used
    ctx.save_for_backward(log_prob, target, weight)     # not the input: it may change or go after the forward
    ctx.args = (reduction, ignore_index, label_smoothing)


def _ce_backward(ctx, grad, log_prob_grad):
    """aclnnCrossEntropyLossGrad for the loss; for log_prob (log_softmax(input)), when it is used,
    log_softmax's own gradient."""
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None
    log_prob, target, weight = ctx.saved_tensors
    g = None
    if grad is not None:
        g = cross_entropy_loss_grad(_dense(grad).to(log_prob.dtype), log_prob, target, weight, *ctx.args)
    if log_prob_grad is not None:
        g_lp = log_prob_grad - log_prob.exp() * log_prob_grad.sum(-1, keepdim=True)
        g = g_lp if g is None else g + g_lp
    return g, None, None, None, None, None


cross_entropy_loss.register_autograd(_ce_backward, setup_context=_ce_setup)


# CANN's z-loss (docs/API.md §7): the loss with k * lse^2 per row not ignored; lse kept for the backward
def _cross_entropy_loss_zloss(input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale):
    if not zloss_scale:   # functional returns no lse then: PyTorch's (the wrapper takes the plain operator)
        loss, log_prob = _cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)
        return loss, log_prob, torch.logsumexp(input, 1)
    if not _stream.runs_on_stream(input):
        check_class_targets(target, input.shape[1], ignore_index)
    return _run(_F.cross_entropy_loss, input, input, target, weight, reduction, ignore_index, label_smoothing,
                zloss_scale)


def _cross_entropy_loss_zloss_fake(input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale):
    loss, log_prob = _cross_entropy_loss_fake(input, target, weight, reduction, ignore_index, label_smoothing)
    return loss, log_prob, input.new_empty((input.shape[0],))


cross_entropy_loss_zloss = _define(
    "cross_entropy_loss_zloss", "(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index, "
    "float label_smoothing, float lse_square_scale_for_zloss) -> (Tensor, Tensor, Tensor)",
    _cross_entropy_loss_zloss, _cross_entropy_loss_zloss_fake)


def _ce_zloss_setup(ctx, inputs, output):
    input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale = inputs
    loss, log_prob, lse = output
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(log_prob, target, weight, lse)
    ctx.args = (reduction, ignore_index, label_smoothing, zloss_scale)


def _ce_zloss_backward(ctx, grad, log_prob_grad, lse_grad):
    """aclnnCrossEntropyLossGrad with the z-loss term for the loss; log_softmax's own gradient for
    log_prob when it is used; lse (internal state) is not differentiable."""
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None, None
    log_prob, target, weight, lse = ctx.saved_tensors
    reduction, ignore_index, label_smoothing, zloss_scale = ctx.args
    g = None
    if grad is not None:
        g = cross_entropy_loss_grad(_dense(grad).to(log_prob.dtype), log_prob, target, weight, reduction,
                                    ignore_index, label_smoothing, lse, zloss_scale)
    if log_prob_grad is not None:
        g_lp = log_prob_grad - log_prob.exp() * log_prob_grad.sum(-1, keepdim=True)
        g = g_lp if g is None else g + g_lp
    return g, None, None, None, None, None, None


cross_entropy_loss_zloss.register_autograd(_ce_zloss_backward, setup_context=_ce_zloss_setup)


def _nll_loss(input, target, weight, reduction, ignore_index):
    import torch.nn.functional as TF
    w = None if weight is None else weight.to(input.dtype)
    return TF.nll_loss(input, target, w, ignore_index=ignore_index, reduction=reduction)


def _nll_loss_fake(input, target, weight, reduction, ignore_index):
    return input.new_empty((input.shape[0],) if reduction == "none" else ())


nll_loss = _define("nll_loss", "(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index) "
                   "-> Tensor", _nll_loss, _nll_loss_fake)


def _nll_setup(ctx, inputs, output):
    input, target, weight, reduction, ignore_index = inputs
    ctx.save_for_backward(target, weight)
    ctx.args = (reduction, ignore_index, input.shape, input.dtype, input.device)


def _nll_backward(ctx, grad):
    """aclnnCrossEntropyLossGrad given a logProb of -inf everywhere: its gradient (exp(logProb) - one_hot)
    * weight * scale reduces to NLL's own, -one_hot * weight * scale, with the operator's ignore_index and
    "mean" weight-sum rules."""
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None
    target, weight = ctx.saved_tensors
    reduction, ignore_index, shape, dtype, device = ctx.args
    no_prob = torch.full(shape, -torch.inf, dtype=dtype, device=device)
    g = cross_entropy_loss_grad(_dense(grad).to(dtype), no_prob, target, weight, reduction, ignore_index, 0.0)
    return g, None, None, None, None


nll_loss.register_autograd(_nll_backward, setup_context=_nll_setup)


# ---------------------------------------------------------------------------- KL divergence
def _kl_div(self, target, reduction, log_target):
    return _run(_F.kl_div, self, self, target, reduction, log_target)


def _kl_div_fake(self, target, reduction, log_target):
    shape = torch.broadcast_shapes(self.shape, target.shape) if reduction == "none" else ()
    return self.new_empty(shape)


def _kl_div_backward(grad_output, self, target, reduction, log_target):
    return _run(_F.kl_div_backward, self, grad_output, self, target, reduction, log_target)


def _kl_div_backward_fake(grad_output, self, target, reduction, log_target):
    return self.new_empty(self.shape)


kl_div = _define("kl_div", "(Tensor self, Tensor target, str reduction, bool log_target) -> Tensor", _kl_div,
                 _kl_div_fake)
kl_div_backward = _backward_op(
    "kl_div_backward", "(Tensor grad_output, Tensor self, Tensor target, str reduction, bool log_target) -> Tensor",
    _kl_div_backward, _kl_div_backward_fake)


def _kl_setup(ctx, inputs, output):
    input, target, reduction, log_target = inputs
    ctx.save_for_backward(input, target)
    ctx.args = (reduction, log_target)


def _kl_backward(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None
    input, target = ctx.saved_tensors
    return kl_div_backward(_dense(grad), input, target, *ctx.args), None, None, None


kl_div.register_autograd(_kl_backward, setup_context=_kl_setup)


# ---------------------------------------------------------------------------- ConvTBC
def _conv_tbc(input, weight, bias, pad, cube_math_type):
    return _run(_F.conv_tbc, input, input, weight, bias, pad, cube_math_type)


def _conv_tbc_fake(input, weight, bias, pad, cube_math_type):
    time = torch.sym_max(input.shape[0] + 2 * pad - weight.shape[0] + 1, 0)
    return input.new_empty((time, input.shape[1], weight.shape[2]))


def _conv_tbc_backward(grad, input, weight, bias, pad, cube_math_type):
    if grad.numel() == 0:   # an empty output (Tout or B = 0): the operator refuses it; every gradient is 0
        return tuple(torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (input, weight, bias))
    return _run(_F.conv_tbc_backward, input, grad, input, weight, bias, pad, cube_math_type)


def _conv_tbc_backward_fake(grad, input, weight, bias, pad, cube_math_type):
    return input.new_empty(input.shape), weight.new_empty(weight.shape), bias.new_empty(bias.shape)


conv_tbc = _define("conv_tbc", "(Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) -> Tensor",
                   _conv_tbc, _conv_tbc_fake)
conv_tbc_backward = _backward_op(
    "conv_tbc_backward", "(Tensor grad, Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) "
    "-> (Tensor, Tensor, Tensor)", _conv_tbc_backward, _conv_tbc_backward_fake)


def _conv_setup(ctx, inputs, output):
    input, weight, bias, pad, cube_math_type = inputs
    ctx.save_for_backward(input, weight, bias)
    ctx.args = (pad, cube_math_type)


def _conv_backward(ctx, grad):
    input, weight, bias = ctx.saved_tensors
    gi, gw, gb = conv_tbc_backward(_dense(grad), input, weight, bias, *ctx.args)
    need = ctx.needs_input_grad
    return gi if need[0] else None, gw if need[1] else None, gb if need[2] else None, None, None


conv_tbc.register_autograd(_conv_backward, setup_context=_conv_setup)


# ---------------------------------------------------------------------------- scaled masked softmax
def _softmax(x, mask, scale, fix_triu_mask):
    return _run(_F.scaled_masked_softmax, x, x, mask, scale, fix_triu_mask)


def _softmax_fake(x, mask, scale, fix_triu_mask):
    return x.new_empty(x.shape)


def _softmax_backward(grad_output, y, mask, scale, fix_triu_mask):
    return _run(_F.scaled_masked_softmax_backward, y, grad_output, y, mask, scale, fix_triu_mask)


def _softmax_backward_fake(grad_output, y, mask, scale, fix_triu_mask):
    return grad_output.new_empty(grad_output.shape)


scaled_masked_softmax = _define(
    "scaled_masked_softmax", "(Tensor x, Tensor? mask, float scale, bool fix_triu_mask) -> Tensor", _softmax,
    _softmax_fake)
scaled_masked_softmax_backward = _backward_op(
    "scaled_masked_softmax_backward", "(Tensor grad_output, Tensor y, Tensor? mask, float scale, bool fix_triu_mask) "
    "-> Tensor", _softmax_backward, _softmax_backward_fake)


def _softmax_setup(ctx, inputs, output):
    x, mask, scale, fix_triu_mask = inputs
    ctx.save_for_backward(output, mask)                   # y, not x
    ctx.args = (scale, fix_triu_mask)


def _softmax_backward_formula(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None
    y, mask = ctx.saved_tensors
    return scaled_masked_softmax_backward(_dense(grad).to(y.dtype), y, mask, *ctx.args), None, None, None


scaled_masked_softmax.register_autograd(_softmax_backward_formula, setup_context=_softmax_setup)


OPERATORS = {"ctc_loss": ctc_loss, "ctc_loss_backward": ctc_loss_backward, "cross_entropy_loss": cross_entropy_loss,
             "cross_entropy_loss_zloss": cross_entropy_loss_zloss, "cross_entropy_loss_grad": cross_entropy_loss_grad,
             "nll_loss": nll_loss, "kl_div": kl_div, "kl_div_backward": kl_div_backward, "conv_tbc": conv_tbc,
             "conv_tbc_backward": conv_tbc_backward, "scaled_masked_softmax": scaled_masked_softmax,
             "scaled_masked_softmax_backward": scaled_masked_softmax_backward}

__all__ = ["NAMESPACE", "OPERATORS", "FIRST_ORDER_ONLY", "check_class_targets", "ctc_loss", "ctc_loss_backward",
           "cross_entropy_loss", "cross_entropy_loss_zloss", "cross_entropy_loss_grad", "nll_loss", "kl_div",
           "kl_div_backward", "conv_tbc", "conv_tbc_backward", "scaled_masked_softmax",
           "scaled_masked_softmax_backward"]
