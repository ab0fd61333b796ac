"""Cross-entropy and NLL as PyTorch custom operators (data for `aclnn_gpu.torch`, which registers them):

    aclnn::cross_entropy_loss(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index,
                    float label_smoothing) -> (Tensor loss, Tensor log_prob)
    aclnn::cross_entropy_loss_zloss(Tensor input, Tensor target, Tensor? weight, str reduction,
                    int ignore_index, float label_smoothing, float lse_square_scale_for_zloss)
                    -> (Tensor loss, Tensor log_prob, Tensor lse_for_zloss)      (CANN's z-loss added)
    aclnn::cross_entropy_loss_grad(Tensor grad_loss, Tensor log_prob, Tensor target, Tensor? weight,
                    str reduction, int ignore_index, float label_smoothing, Tensor? lse_for_zloss=None,
                    float lse_square_scale_for_zloss=0.0) -> Tensor
    aclnn::nll_loss(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index) -> Tensor

The forwards are functional's cross_entropy_loss; `nll_loss` is PyTorch's own forward with
aclnnCrossEntropyLossGrad as its backward. log_prob is differentiable (log_softmax's rules), the lse is
not. The gradient operator has explicit second-order rules (double backward, Hessians). Forward mode: the
loss's tangent is <gradient, tangent> (the gradient operator given ones). Autocast: float32 (PyTorch's
list: cross_entropy = log_softmax + nll_loss, both float32).

Class targets: on the host path the forward checks them as PyTorch's CPU kernel does (IndexError
"Target 9 is out of bounds."); on the GPU it does not look (that would wait for the GPU), and a row with
an out-of-range target becomes NaN, the operator's documented device behaviour (PyTorch's CUDA kernel
raises a device-side assertion instead). Imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

import torch

from ..torch_rules import AUTOCAST_FLOAT32, TorchOperator, add, dense, no_tangent, save


def _loss_grad(*args):
    """aclnn::cross_entropy_loss_grad, looked up when called (aclnn_gpu.torch registers it)."""
    return torch.ops.aclnn.cross_entropy_loss_grad.default(*args)


def check_class_targets(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """PyTorch's host check of class indices (IndexError "Target 9 is out of bounds."); the operators
    make such rows NaN on the device instead, which a PyTorch caller does not expect."""
    if target.numel() == 0:
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bool(bad.any()):
        raise IndexError(f"Target {int(target[bad].reshape(-1)[0])} is out of bounds.")


def cross_entropy_loss(run, input, target, weight, reduction, ignore_index, label_smoothing):
    if not run.on_stream(input):
        check_class_targets(target, input.shape[1], ignore_index)
    return run(input, input, target, weight, reduction, ignore_index, label_smoothing)


def cross_entropy_loss_fake(input, target, weight, reduction, ignore_index, label_smoothing):
    loss = input.new_empty((input.shape[0],) if reduction == "none" else ())
    return loss, input.new_empty(input.shape)


def cross_entropy_loss_grad(run, grad_loss, log_prob, target, weight, reduction, ignore_index, label_smoothing,
                             lse_for_zloss=None, lse_square_scale_for_zloss=0.0):
    return run(log_prob, grad_loss, log_prob, target, weight, reduction, ignore_index,
                label_smoothing, lse_square_scale_for_zloss, lse_for_zloss)


def cross_entropy_loss_grad_fake(grad_loss, log_prob, *rest):
    return log_prob.new_empty(log_prob.shape)


def _log_softmax_backward(log_prob: torch.Tensor, log_prob_grad: torch.Tensor) -> torch.Tensor:
    return log_prob_grad - log_prob.exp() * log_prob_grad.sum(-1, keepdim=True)


def _log_softmax_jvp(log_prob: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    return tangent - (log_prob.exp() * tangent).sum(-1, keepdim=True)


def _loss_jvp(gradient_of_ones: torch.Tensor, tangent: torch.Tensor, reduction: str) -> torch.Tensor:
    """The loss's tangent from its gradient (the backward operator given a grad_loss of ones): the
    directional derivative, row by row for "none"."""
    product = gradient_of_ones * tangent
    return product.sum(-1) if reduction == "none" else product.sum()


def _ones_like_loss(log_prob: torch.Tensor, reduction: str) -> torch.Tensor:
    return log_prob.new_ones((log_prob.shape[0],) if reduction == "none" else ())


def _ce_setup(ctx, inputs, output):
    input, target, weight, reduction, ignore_index, label_smoothing = inputs
    loss, log_prob = output
    ctx.set_materialize_grads(False)                    # log_prob's gradient is None unless it is used
    save(ctx, log_prob, target, weight)                # not the input: it may change or go after the forward
    ctx.args = (reduction, ignore_index, label_smoothing)


def _ce_backward(ctx, grad, log_prob_grad):
    """aclnnCrossEntropyLossGrad for the loss; for log_prob (log_softmax(input)), when it is used,
    log_softmax's own gradient."""
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None
    log_prob, target, weight = ctx.saved_tensors
    g = None
    if grad is not None:
        g = _loss_grad(dense(grad).to(log_prob.dtype), log_prob, target, weight, *ctx.args)
    if log_prob_grad is not None:
        g = add(g, _log_softmax_backward(log_prob, log_prob_grad))
    return g, None, None, None, None, None


def _ce_jvp(ctx, t_input, t_target, t_weight, *_):
    """d loss = <gradient, t> (the gradient operator given ones), d log_prob = log_softmax's jvp."""
    no_tangent("aclnn::cross_entropy_loss", weight=t_weight)
    log_prob, target, weight = ctx.saved_tensors
    ones = _ones_like_loss(log_prob, ctx.args[0])
    gradient = _loss_grad(ones, log_prob, target, weight, *ctx.args)
    return _loss_jvp(gradient, t_input, ctx.args[0]), _log_softmax_jvp(log_prob, t_input)


def _ce_grad_setup(ctx, inputs, output):
    grad_loss, log_prob, target, weight, reduction, ignore_index, label_smoothing, lse, zloss_scale = inputs
    ctx.set_materialize_grads(False)
    save(ctx, grad_loss, log_prob, target, weight, lse, output)
    ctx.args = (reduction, ignore_index, label_smoothing)
    ctx.zloss_scale = zloss_scale


def _ce_grad_slope(ctx) -> torch.Tensor:
    """The operator's derivative in log_prob, element by element. It is linear in grad_loss and, element
    by element, affine in exp(log_prob): out = grad_loss * (c * exp(log_prob) - d), c a per-row factor, d
    independent of log_prob; so out - out(log_prob = -inf) = d out / d log_prob. (It is also linear in
    grad_loss: the operator given a grad_loss of ones is its derivative there.) With the z-loss, c holds
    the lse, another input: refused."""
    grad_loss, log_prob, target, weight, lse, out = ctx.saved_tensors
    if ctx.zloss_scale:
        raise NotImplementedError("aclnn::cross_entropy_loss_grad: no derivative in log_prob with the z-loss "
                                  "(lse_square_scale_for_zloss != 0; its term depends on the lse too)")
    no_prob = torch.full_like(log_prob, -torch.inf)
    return out - _loss_grad(grad_loss, no_prob, target, weight, *ctx.args)


def _ce_grad_backward(ctx, u):
    """Double backward of cross-entropy: explicit second-order formulas (_ce_grad_slope)."""
    need = ctx.needs_input_grad
    if u is None or not (need[0] or need[1]):
        return (None,) * 9
    grad_loss, log_prob, target, weight, lse, out = ctx.saved_tensors
    d_grad_loss = d_log_prob = None
    if need[0]:
        unit = _loss_grad(torch.ones_like(grad_loss), log_prob, target, weight, *ctx.args, lse,
                                       ctx.zloss_scale)
        d_grad_loss = _loss_jvp(unit, u, "none" if grad_loss.dim() else "mean").reshape(grad_loss.shape)
    if need[1]:
        d_log_prob = u * _ce_grad_slope(ctx)
    return d_grad_loss, d_log_prob, None, None, None, None, None, None, None


def _ce_grad_jvp(ctx, t_grad_loss, t_log_prob, t_target, t_weight, t_lse, *_):
    no_tangent("aclnn::cross_entropy_loss_grad", weight=t_weight, lse_for_zloss=t_lse)
    grad_loss, log_prob, target, weight, lse, out = ctx.saved_tensors
    terms = []
    if t_grad_loss is not None:
        terms.append(_loss_grad(t_grad_loss, log_prob, target, weight, *ctx.args, lse, ctx.zloss_scale))
    if t_log_prob is not None:
        terms.append(t_log_prob * _ce_grad_slope(ctx))
    return add(*terms) if terms else torch.zeros_like(out)


# CANN's z-loss (docs/API.md §7): the loss with k * lse^2 per row not ignored; lse kept for the backward
def cross_entropy_loss_zloss(run, input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale):
    if not zloss_scale:   # functional returns no lse then: PyTorch's (the wrapper takes the plain operator)
        loss, log_prob = cross_entropy_loss(run, input, target, weight, reduction, ignore_index, label_smoothing)
        return loss, log_prob, torch.logsumexp(input, 1)
    if not run.on_stream(input):
        check_class_targets(target, input.shape[1], ignore_index)
    return run(input, input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale)


def cross_entropy_loss_zloss_fake(input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale):
    loss, log_prob = cross_entropy_loss_fake(input, target, weight, reduction, ignore_index, label_smoothing)
    return loss, log_prob, input.new_empty((input.shape[0],))


def _ce_zloss_setup(ctx, inputs, output):
    input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale = inputs
    loss, log_prob, lse = output
    ctx.set_materialize_grads(False)
    save(ctx, log_prob, target, weight, lse)
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
        g = _loss_grad(dense(grad).to(log_prob.dtype), log_prob, target, weight, reduction,
                                    ignore_index, label_smoothing, lse, zloss_scale)
    if log_prob_grad is not None:
        g = add(g, _log_softmax_backward(log_prob, log_prob_grad))
    return g, None, None, None, None, None, None


def _ce_zloss_jvp(ctx, t_input, t_target, t_weight, *_):
    no_tangent("aclnn::cross_entropy_loss_zloss", weight=t_weight)
    log_prob, target, weight, lse = ctx.saved_tensors
    reduction, ignore_index, label_smoothing, zloss_scale = ctx.args
    ones = _ones_like_loss(log_prob, reduction)
    gradient = _loss_grad(ones, log_prob, target, weight, reduction, ignore_index, label_smoothing,
                                       lse, zloss_scale)
    return (_loss_jvp(gradient, t_input, reduction), _log_softmax_jvp(log_prob, t_input),
            (log_prob.exp() * t_input).sum(-1))


def nll_loss(run, input, target, weight, reduction, ignore_index):
    import torch.nn.functional as TF
    w = None if weight is None else weight.to(input.dtype)
    return TF.nll_loss(input, target, w, ignore_index=ignore_index, reduction=reduction)


def nll_loss_fake(input, target, weight, reduction, ignore_index):
    return input.new_empty((input.shape[0],) if reduction == "none" else ())


def _nll_setup(ctx, inputs, output):
    input, target, weight, reduction, ignore_index = inputs
    save(ctx, target, weight)
    ctx.args = (reduction, ignore_index, input.shape, input.dtype, input.device)


def _nll_gradient(ctx, grad: torch.Tensor) -> torch.Tensor:
    """aclnnCrossEntropyLossGrad given a logProb of -inf everywhere: its gradient (exp(logProb) - one_hot)
    * weight * scale reduces to NLL's own, -one_hot * weight * scale, with the operator's ignore_index and
    "mean" weight-sum rules."""
    target, weight = ctx.saved_tensors
    reduction, ignore_index, shape, dtype, device = ctx.args
    no_prob = torch.full(shape, -torch.inf, dtype=dtype, device=device)
    return _loss_grad(dense(grad).to(dtype), no_prob, target, weight, reduction, ignore_index, 0.0)


def _nll_backward(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None
    return _nll_gradient(ctx, grad), None, None, None, None


def _nll_jvp(ctx, t_input, t_target, t_weight, *_):
    no_tangent("aclnn::nll_loss", weight=t_weight)
    reduction, _, shape, dtype, device = ctx.args
    ones = torch.ones((shape[0],) if reduction == "none" else (), dtype=dtype, device=device)
    return _loss_jvp(_nll_gradient(ctx, ones), t_input, reduction)



OPERATORS = (
    TorchOperator("cross_entropy_loss", "(Tensor input, Tensor target, Tensor? weight, str reduction, "
                  "int ignore_index, float label_smoothing) -> (Tensor, Tensor)", cross_entropy_loss,
                  cross_entropy_loss_fake, _ce_setup, _ce_backward, _ce_jvp, functional="cross_entropy_loss",
                  autocast=AUTOCAST_FLOAT32),
    TorchOperator("cross_entropy_loss_grad", "(Tensor grad_loss, Tensor log_prob, Tensor target, Tensor? weight, "
                  "str reduction, int ignore_index, float label_smoothing, Tensor? lse_for_zloss=None, "
                  "float lse_square_scale_for_zloss=0.0) -> Tensor", cross_entropy_loss_grad,
                  cross_entropy_loss_grad_fake, _ce_grad_setup, _ce_grad_backward, _ce_grad_jvp,
                  functional="cross_entropy_loss_grad"),
    TorchOperator("cross_entropy_loss_zloss", "(Tensor input, Tensor target, Tensor? weight, str reduction, "
                  "int ignore_index, float label_smoothing, float lse_square_scale_for_zloss) "
                  "-> (Tensor, Tensor, Tensor)", cross_entropy_loss_zloss, cross_entropy_loss_zloss_fake,
                  _ce_zloss_setup, _ce_zloss_backward, _ce_zloss_jvp, functional="cross_entropy_loss",
                  autocast=AUTOCAST_FLOAT32),
    TorchOperator("nll_loss", "(Tensor input, Tensor target, Tensor? weight, str reduction, int ignore_index) "
                  "-> Tensor", nll_loss, nll_loss_fake, _nll_setup, _nll_backward, _nll_jvp,
                  autocast=AUTOCAST_FLOAT32),
)

__all__ = ["OPERATORS", "check_class_targets"]
