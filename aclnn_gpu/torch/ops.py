"""The operators as PyTorch custom operators: `torch.library` definitions in the namespace `aclnn`, with
fake (meta) implementations that give the exact output shapes and dtypes, an Autograd kernel with
reverse- AND forward-mode rules, and autocast rules, so `torch.compile(fullgraph=True)` traces through
them, `torch.export` holds them and `torch.library.opcheck` passes for each. (They are defined with
`torch.library.Library`, not `torch.library.custom_op`, whose autograd kernel has no forward-mode rule:
PyTorch then propagates zero tangents silently.) `aclnn_gpu.torch`'s PyTorch-shaped functions
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
log_alpha (internal state) is not differentiable, log_prob is (log_softmax's rules). The backward
operators have autograd rules of their own (explicit second-order formulas, written with the operators
and PyTorch's ops), so double backward, gradgradcheck and Hessians work, except for CTC: its backward
operator raises when differentiated (PyTorch's _ctc_loss_backward has no derivative either), and its
forward-mode rule raises NotImplementedError as PyTorch's does. Forward-mode rules: cross_entropy's
loss tangent is <gradient, tangent> (the gradient operator given ones), kl_div's is the slope
-target (-exp(target)) times the tangent, reduced; softmax's y * scale * (t - sum(y * t)); conv_tbc's
conv_tbc(t_input, weight, 0) + conv_tbc(input, t_weight, t_bias).

float64: aclnnConvTbc and aclnnScaledMaskedSoftmax take FLOAT, FLOAT16, BFLOAT16 (CANN's contract, kept
at the aclnn level); this module computes their float64 forward and backward itself with PyTorch's ops
on the tensors' device, the same formulas. Autocast: the losses on PyTorch's float32 list, conv_tbc in
the autocast dtype, the fused softmax in its input's dtype (apex's behaviour).

Where each call runs: on CUDA tensors with the `cuda` device in use, on PyTorch's current stream, with
results and workspace from PyTorch's caching allocator, returning without waiting
(`aclnn_gpu/torch/stream.py`); otherwise through `functional`, which lends CPU tensors to the cpu and
emulated devices zero-copy and waits for its stream (results are moved to the input's device when
they come back elsewhere).

Class targets: on the host path cross_entropy checks them as PyTorch's CPU kernel does (IndexError
"Target 9 is out of bounds."); on the GPU it does not look (that would wait for the GPU), and a row
with an out-of-range target becomes NaN, the operator's documented device behaviour (PyTorch's CUDA
kernel raises a device-side assertion instead).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
import torch.autograd.forward_ad as forward_ad
from torch._functorch.utils import enable_single_level_autograd_function
from torch._library.utils import fill_defaults

from .. import functional as _F
from . import stream as _stream

NAMESPACE = "aclnn"
# PyTorch's own messages for the same refusals (aten::_ctc_loss_backward has no derivative, _ctc_loss no
# forward-mode rule), naming these operators
FIRST_ORDER_ONLY = ("derivative for aclnn::ctc_loss_backward is not implemented (as PyTorch's for "
                    "aten::_ctc_loss_backward: no double backward through the CTC loss)")
NO_FORWARD_AD = ("Trying to use forward AD with aclnn::ctc_loss that does not support it because it has not been "
                 "implemented yet (as PyTorch's _ctc_loss)")

_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")


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
    """The operator `aclnn::name`: `impl` for every backend (CompositeExplicitAutograd, as custom_op
    registers it), `fake` for FakeTensor / meta tracing; returns its OpOverload. Its Autograd kernel comes
    from `_autograd` (every operator here gets one)."""
    _LIB.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def _has_tangent(args: tuple) -> bool:
    """Whether a tensor argument carries a forward-mode tangent of torch.autograd.forward_ad (torch.func's
    transforms are seen by the kernel itself). Tangents exist only inside a dual_level: outside one,
    nothing is unpacked (that costs microseconds per tensor, a call's whole host budget on a GPU)."""
    if forward_ad._current_level < 0:
        return False
    return any(isinstance(a, torch.Tensor) and torch._VF._unpack_dual(a, 0)[1] is not None for a in args)


def _autograd(op: Any, setup: Callable[..., None], backward: Callable[..., Any], jvp: Callable[..., Any]) -> None:
    """The operator's Autograd kernel: an autograd.Function with PyTorch's three rules, each given here:
    `setup(ctx, inputs, output)` saves what the rules read (with ctx.save_for_backward AND
    ctx.save_for_forward of the same tensors, so ctx.saved_tensors is the same in both), `backward(ctx,
    *grads)` (reverse mode, written with operators that have autograd kernels themselves, so it can be
    differentiated again) and `jvp(ctx, *tangents)` (forward mode: torch.autograd.forward_ad,
    torch.func.jvp / jacfwd / hessian). torch.library.custom_op's own kernel has no forward-mode rule,
    and PyTorch then gives zero tangents without a word: hence this kernel, modelled on custom_op's.

    The Function runs at the dispatcher level (below any torch.func transform, as custom_op's does):
    applied as a single-level Function, its forward redispatches below autograd with forward grad on
    and the caller's grad mode (autograd turns both off around a Function's forward), so that the
    transforms of lower levels still work inside it: the jvp under jacfwd(jacrev(f)) sees its tangents,
    the reverse mode under jacrev(jacfwd(f)) records. It is applied whenever a rule may be needed (an
    input requires grad, carries a tangent, or a torch.func transform is active). torch.compile sees only
    the operator (Dynamo does not look inside), and AOTAutograd traces this kernel as it traces
    custom_op's."""

    class Function(torch.autograd.Function):
        # apply(keyset, grad_mode, *args): grad_mode is the caller's, which autograd turns off around
        # forward and jvp; restored there, the transforms of lower levels (the reverse mode under
        # jacrev(jacfwd(f))) still record what runs inside them
        @staticmethod
        def forward(keyset: Any, grad_mode: bool, *args: Any) -> Any:
            with torch._C._AutoDispatchBelowAutograd(), forward_ad._set_fwd_grad_enabled(True), \
                    torch.set_grad_enabled(grad_mode):
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            ctx.grad_mode = inputs[1]
            setup(ctx, inputs[2:], output)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            needs = ctx.needs_input_grad
            if all(g is None for g in grads):           # (grads are not materialised: _save)
                return (None,) * len(needs)
            try:
                ctx.needs_input_grad = needs[2:]
                result = backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = needs
            return (None, None, *result) if isinstance(result, tuple) else (None, None, result)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            with torch.set_grad_enabled(ctx.grad_mode):
                return jvp(ctx, *tangents[2:])

    Function.__name__ = Function.__qualname__ = f"{op._opname}_function"
    apply = super(torch.autograd.Function, Function).apply   # the C++ apply: one level, no functorch lifting

    schema = op._schema
    defaults = any(a.has_default_value() for a in schema.arguments)

    def kernel(keyset: Any, *args: Any) -> Any:
        if defaults and len(args) < len(schema.arguments):   # the rules see every argument (as custom_op's)
            args = tuple(fill_defaults(schema, args, {})[0])
        if ((torch.is_grad_enabled() and torch._C._any_requires_grad(*args))
                or torch._C._are_functorch_transforms_active() or _has_tangent(args)):
            with enable_single_level_autograd_function():
                return apply(keyset, torch.is_grad_enabled(), *args)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIB.impl(op._opname, kernel, "Autograd", with_keyset=True)


def _save(ctx: Any, *tensors: Any) -> None:
    ctx.set_materialize_grads(False)    # None, not zeros, for what has no gradient / tangent (jvp alike)
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)


def _autocast(op: Any, dtype: torch.dtype | None) -> None:
    """PyTorch's autocast policy for the operator, on cpu and cuda: its floating-point tensors (float32,
    float16, bfloat16 on the autocast device) cast to `dtype` (None: the autocast dtype), then the
    operator with autocast off, as PyTorch's own autocast kernels run."""
    for device_type, key in (("cpu", "AutocastCPU"), ("cuda", "AutocastCUDA")):
        excluded = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

        def kernel(keyset: Any, *args: Any, _device: str = device_type, _excluded: Any = excluded) -> Any:
            to = dtype if dtype is not None else torch.get_autocast_dtype(_device)
            cast = [a.to(to) if isinstance(a, torch.Tensor) and a.device.type == _device and a.is_floating_point()
                    and a.dtype != torch.float64 and a.dtype != to else a for a in args]
            with torch._C._ExcludeDispatchKeyGuard(_excluded):
                return op(*cast)

        _LIB.impl(op._opname, kernel, key, with_keyset=True)


def _no_tangent(function: str, **tangents: Any) -> None:
    """Forward mode through an argument the operator gives no derivative for: refused, never a zero."""
    for name, tangent in tangents.items():
        if tangent is not None:
            raise NotImplementedError(f"{function}: no forward-mode derivative for {name} (its reverse-mode "
                                      "gradient is not given either)")


def _add(*terms: Any) -> Any:
    """The sum of the terms that are not None (None when all are)."""
    present = [t for t in terms if t is not None]
    return functools.reduce(torch.add, present) if present else None


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
ctc_loss_backward = _define(
    "ctc_loss_backward", "(Tensor grad, Tensor log_probs, Tensor targets, SymInt[] input_lengths, "
    "SymInt[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity) -> Tensor",
    _ctc_loss_backward, _ctc_loss_backward_fake)


def _ctc_setup(ctx, inputs, output):
    log_probs, targets, input_lengths, target_lengths, blank, zero_infinity = inputs
    nll, log_alpha = output
    ctx.mark_non_differentiable(log_alpha)
    _save(ctx, log_probs, targets, nll, log_alpha)
    ctx.args = (input_lengths, target_lengths, blank, zero_infinity)


def _ctc_backward(ctx, grad, _log_alpha_grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None
    log_probs, targets, nll, log_alpha = ctx.saved_tensors
    input_lengths, target_lengths, blank, zero_infinity = ctx.args
    g = ctc_loss_backward(_dense(grad).to(log_probs.dtype), log_probs, targets, input_lengths, target_lengths, nll,
                          log_alpha, blank, zero_infinity)
    return g, None, None, None, None, None


def _ctc_jvp(ctx, *tangents):
    raise NotImplementedError(NO_FORWARD_AD)


def _ctc_backward_setup(ctx, inputs, output):
    pass


def _ctc_backward_backward(ctx, *grads):
    raise RuntimeError(FIRST_ORDER_ONLY)


_autograd(ctc_loss, _ctc_setup, _ctc_backward, _ctc_jvp)
_autograd(ctc_loss_backward, _ctc_backward_setup, _ctc_backward_backward, _ctc_jvp)


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
cross_entropy_loss_grad = _define(
    "cross_entropy_loss_grad", "(Tensor grad_loss, Tensor log_prob, Tensor target, Tensor? weight, str reduction, "
    "int ignore_index, float label_smoothing, Tensor? lse_for_zloss=None, float lse_square_scale_for_zloss=0.0) "
    "-> Tensor", _cross_entropy_loss_grad, _cross_entropy_loss_grad_fake)


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
    _save(ctx, log_prob, target, weight)                # not the input: it may change or go after the forward
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
        g = _add(g, _log_softmax_backward(log_prob, log_prob_grad))
    return g, None, None, None, None, None


def _ce_jvp(ctx, t_input, t_target, t_weight, *_):
    """d loss = <gradient, t> (the gradient operator given ones), d log_prob = log_softmax's jvp."""
    _no_tangent("aclnn::cross_entropy_loss", weight=t_weight)
    log_prob, target, weight = ctx.saved_tensors
    ones = _ones_like_loss(log_prob, ctx.args[0])
    gradient = cross_entropy_loss_grad(ones, log_prob, target, weight, *ctx.args)
    return _loss_jvp(gradient, t_input, ctx.args[0]), _log_softmax_jvp(log_prob, t_input)


_autograd(cross_entropy_loss, _ce_setup, _ce_backward, _ce_jvp)


def _ce_grad_setup(ctx, inputs, output):
    grad_loss, log_prob, target, weight, reduction, ignore_index, label_smoothing, lse, zloss_scale = inputs
    ctx.set_materialize_grads(False)
    _save(ctx, grad_loss, log_prob, target, weight, lse, output)
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
    return out - cross_entropy_loss_grad(grad_loss, no_prob, target, weight, *ctx.args)


def _ce_grad_backward(ctx, u):
    """Double backward of cross-entropy: explicit second-order formulas (_ce_grad_slope)."""
    need = ctx.needs_input_grad
    if u is None or not (need[0] or need[1]):
        return (None,) * 9
    grad_loss, log_prob, target, weight, lse, out = ctx.saved_tensors
    d_grad_loss = d_log_prob = None
    if need[0]:
        unit = cross_entropy_loss_grad(torch.ones_like(grad_loss), log_prob, target, weight, *ctx.args, lse,
                                       ctx.zloss_scale)
        d_grad_loss = _loss_jvp(unit, u, "none" if grad_loss.dim() else "mean").reshape(grad_loss.shape)
    if need[1]:
        d_log_prob = u * _ce_grad_slope(ctx)
    return d_grad_loss, d_log_prob, None, None, None, None, None, None, None


def _ce_grad_jvp(ctx, t_grad_loss, t_log_prob, t_target, t_weight, t_lse, *_):
    _no_tangent("aclnn::cross_entropy_loss_grad", weight=t_weight, lse_for_zloss=t_lse)
    grad_loss, log_prob, target, weight, lse, out = ctx.saved_tensors
    terms = []
    if t_grad_loss is not None:
        terms.append(cross_entropy_loss_grad(t_grad_loss, log_prob, target, weight, *ctx.args, lse, ctx.zloss_scale))
    if t_log_prob is not None:
        terms.append(t_log_prob * _ce_grad_slope(ctx))
    return _add(*terms) if terms else torch.zeros_like(out)


_autograd(cross_entropy_loss_grad, _ce_grad_setup, _ce_grad_backward, _ce_grad_jvp)


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
    _save(ctx, log_prob, target, weight, lse)
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
        g = _add(g, _log_softmax_backward(log_prob, log_prob_grad))
    return g, None, None, None, None, None, None


def _ce_zloss_jvp(ctx, t_input, t_target, t_weight, *_):
    _no_tangent("aclnn::cross_entropy_loss_zloss", weight=t_weight)
    log_prob, target, weight, lse = ctx.saved_tensors
    reduction, ignore_index, label_smoothing, zloss_scale = ctx.args
    ones = _ones_like_loss(log_prob, reduction)
    gradient = cross_entropy_loss_grad(ones, log_prob, target, weight, reduction, ignore_index, label_smoothing,
                                       lse, zloss_scale)
    return (_loss_jvp(gradient, t_input, reduction), _log_softmax_jvp(log_prob, t_input),
            (log_prob.exp() * t_input).sum(-1))


_autograd(cross_entropy_loss_zloss, _ce_zloss_setup, _ce_zloss_backward, _ce_zloss_jvp)


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
    _save(ctx, target, weight)
    ctx.args = (reduction, ignore_index, input.shape, input.dtype, input.device)


def _nll_gradient(ctx, grad: torch.Tensor) -> torch.Tensor:
    """aclnnCrossEntropyLossGrad given a logProb of -inf everywhere: its gradient (exp(logProb) - one_hot)
    * weight * scale reduces to NLL's own, -one_hot * weight * scale, with the operator's ignore_index and
    "mean" weight-sum rules."""
    target, weight = ctx.saved_tensors
    reduction, ignore_index, shape, dtype, device = ctx.args
    no_prob = torch.full(shape, -torch.inf, dtype=dtype, device=device)
    return cross_entropy_loss_grad(_dense(grad).to(dtype), no_prob, target, weight, reduction, ignore_index, 0.0)


def _nll_backward(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None
    return _nll_gradient(ctx, grad), None, None, None, None


def _nll_jvp(ctx, t_input, t_target, t_weight, *_):
    _no_tangent("aclnn::nll_loss", weight=t_weight)
    reduction, _, shape, dtype, device = ctx.args
    ones = torch.ones((shape[0],) if reduction == "none" else (), dtype=dtype, device=device)
    return _loss_jvp(_nll_gradient(ctx, ones), t_input, reduction)


_autograd(nll_loss, _nll_setup, _nll_backward, _nll_jvp)


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
kl_div_backward = _define(
    "kl_div_backward", "(Tensor grad_output, Tensor self, Tensor target, str reduction, bool log_target) -> Tensor",
    _kl_div_backward, _kl_div_backward_fake)


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
    _save(ctx, input, target)
    ctx.args = (reduction, log_target)


def _kl_backward(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None
    input, target = ctx.saved_tensors
    return kl_div_backward(_dense(grad), input, target, *ctx.args), None, None, None


def _kl_jvp(ctx, t_input, t_target, *_):
    _no_tangent("aclnn::kl_div", target=t_target)
    input, target = ctx.saved_tensors
    reduction, log_target = ctx.args
    product = _kl_slope(input, target, reduction, log_target) * t_input
    return product if reduction == "none" else product.sum()


_autograd(kl_div, _kl_setup, _kl_backward, _kl_jvp)


def _kl_backward_setup(ctx, inputs, output):
    grad_output, input, target, reduction, log_target = inputs
    _save(ctx, grad_output, input, target)
    ctx.args = (reduction, log_target)


def _kl_backward_backward(ctx, u):
    """The gradient is linear in grad_output and does not depend on self (its derivative there is 0)."""
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None
    grad_output, input, target = ctx.saved_tensors
    d_grad = (_kl_slope(input, target, *ctx.args) * u).sum_to_size(grad_output.shape)
    return d_grad, None, None, None, None


def _kl_backward_jvp(ctx, t_grad, t_input, t_target, *_):
    _no_tangent("aclnn::kl_div_backward", target=t_target)
    grad_output, input, target = ctx.saved_tensors
    if t_grad is None:
        return torch.zeros_like(input)
    return kl_div_backward(_dense(t_grad), input, target, *ctx.args)


_autograd(kl_div_backward, _kl_backward_setup, _kl_backward_backward, _kl_backward_jvp)


# ---------------------------------------------------------------------------- ConvTBC
def _conv_tbc_windows(input: torch.Tensor, kernel: int, pad: int) -> torch.Tensor:
    """(Tout, B, Cin, K): the K time steps each output step reads, over the zero-padded input."""
    padded = torch.nn.functional.pad(input, (0, 0, 0, 0, pad, pad))
    return padded.unfold(0, kernel, 1)


def _conv_tbc_float64(input, weight, bias, pad):
    """float64, which aclnnConvTbc refuses (FLOAT, FLOAT16, BFLOAT16): the same sum with PyTorch's ops on
    the tensors' device (out[t, b, o] = bias[o] + sum_k,c xpad[t + k, b, c] weight[k, c, o])."""
    time = max(input.shape[0] + 2 * pad - weight.shape[0] + 1, 0)
    if time == 0:
        return input.new_zeros((0, input.shape[1], weight.shape[2]))
    return torch.einsum("tbck,kco->tbo", _conv_tbc_windows(input, weight.shape[0], pad), weight) + bias


def _conv_tbc_backward_float64(grad, input, weight, bias, pad):
    kernel = weight.shape[0]
    flipped = weight.flip(0).transpose(1, 2)                 # (K, Cout, Cin)
    full = _conv_tbc_float64(grad, flipped, input.new_zeros(input.shape[2]), kernel - 1)
    grad_input = full[pad:pad + input.shape[0]]
    grad_weight = torch.einsum("tbck,tbo->kco", _conv_tbc_windows(input, kernel, pad), grad)
    return grad_input.contiguous(), grad_weight, grad.sum((0, 1))


def _float64(*tensors: torch.Tensor) -> bool:
    return all(t.dtype == torch.float64 for t in tensors)


def _conv_tbc_window_refused(input: torch.Tensor, weight: torch.Tensor, pad: int) -> bool:
    """The shapes aclnnConvTbc refuses, as CANN's forward does, though torch.conv_tbc computes them: a
    non-empty input that does not reach the last tap with one side's padding (T + pad < K, Tout >= 0)."""
    return input.numel() > 0 and input.shape[0] + pad < weight.shape[0] <= input.shape[0] + 2 * pad + 1


def _conv_tbc(input, weight, bias, pad, cube_math_type):
    if _float64(input, weight, bias):
        return _conv_tbc_float64(input, weight, bias, pad)
    if _conv_tbc_window_refused(input, weight, pad):   # PyTorch's answer, by PyTorch's own op
        return torch.conv_tbc(input, weight, bias, pad)
    return _run(_F.conv_tbc, input, input, weight, bias, pad, cube_math_type)


def _conv_tbc_fake(input, weight, bias, pad, cube_math_type):
    time = torch.sym_max(input.shape[0] + 2 * pad - weight.shape[0] + 1, 0)
    return input.new_empty((time, input.shape[1], weight.shape[2]))


def _conv_tbc_backward(grad, input, weight, bias, pad, cube_math_type):
    if grad.numel() == 0:   # an empty output (Tout or B = 0): the operator refuses it; every gradient is 0
        return tuple(torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (input, weight, bias))
    if _float64(grad, input, weight, bias):
        return _conv_tbc_backward_float64(grad, input, weight, bias, pad)
    return _run(_F.conv_tbc_backward, input, grad, input, weight, bias, pad, cube_math_type)


def _conv_tbc_backward_fake(grad, input, weight, bias, pad, cube_math_type):
    return input.new_empty(input.shape), weight.new_empty(weight.shape), bias.new_empty(bias.shape)


conv_tbc = _define("conv_tbc", "(Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) -> Tensor",
                   _conv_tbc, _conv_tbc_fake)
conv_tbc_backward = _define(
    "conv_tbc_backward", "(Tensor grad, Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) "
    "-> (Tensor, Tensor, Tensor)", _conv_tbc_backward, _conv_tbc_backward_fake)


def _conv_setup(ctx, inputs, output):
    input, weight, bias, pad, cube_math_type = inputs
    _save(ctx, input, weight, bias)
    ctx.args = (pad, cube_math_type)


def _conv_backward(ctx, grad):
    input, weight, bias = ctx.saved_tensors
    gi, gw, gb = conv_tbc_backward(_dense(grad), input, weight, bias, *ctx.args)
    need = ctx.needs_input_grad
    return gi if need[0] else None, gw if need[1] else None, gb if need[2] else None, None, None


def _conv_linear(input, weight, bias, t_input, t_weight, t_bias, args) -> Any:
    """conv_tbc is bilinear in (input, weight) plus bias: its tangent is
    conv_tbc(t_input, weight, 0) + conv_tbc(input, t_weight, t_bias)."""
    terms = []
    if t_input is not None:
        terms.append(conv_tbc(t_input, weight, torch.zeros_like(bias), *args))
    if t_weight is not None or t_bias is not None:
        terms.append(conv_tbc(input, torch.zeros_like(weight) if t_weight is None else t_weight,
                              torch.zeros_like(bias) if t_bias is None else t_bias, *args))
    return _add(*terms)


def _conv_jvp(ctx, t_input, t_weight, t_bias, *_):
    input, weight, bias = ctx.saved_tensors
    return _conv_linear(input, weight, bias, t_input, t_weight, t_bias, ctx.args)


_autograd(conv_tbc, _conv_setup, _conv_backward, _conv_jvp)


def _conv_backward_setup(ctx, inputs, output):
    grad, input, weight, bias, pad, cube_math_type = inputs
    ctx.set_materialize_grads(False)
    _save(ctx, grad, input, weight, bias)
    ctx.args = (pad, cube_math_type)


def _conv_backward_backward(ctx, u_input, u_weight, u_bias):
    """Double backward: (gi, gw, gb) are bilinear in grad and (weight, input), so
    d grad = conv_tbc(u_input, weight, u_bias) + conv_tbc(input, u_weight, 0),
    d input = gi of conv_tbc_backward(grad, input, u_weight), d weight = gw of conv_tbc_backward(grad, u_input,
    weight); the bias does not enter the gradients."""
    grad, input, weight, bias = ctx.saved_tensors
    need = ctx.needs_input_grad
    d_grad = _conv_linear(input, weight, bias, u_input, u_weight, u_bias, ctx.args) if need[0] else None
    d_input = conv_tbc_backward(grad, input, u_weight, bias, *ctx.args)[0] if need[1] and u_weight is not None \
        else None
    d_weight = conv_tbc_backward(grad, u_input, weight, bias, *ctx.args)[1] if need[2] and u_input is not None \
        else None
    return d_grad, d_input, d_weight, None, None, None


def _conv_backward_jvp(ctx, t_grad, t_input, t_weight, t_bias, *_):
    grad, input, weight, bias = ctx.saved_tensors
    gi = gw = gb = None
    if t_grad is not None:
        gi, gw, gb = conv_tbc_backward(t_grad, input, weight, bias, *ctx.args)
    if t_weight is not None:
        gi = _add(gi, conv_tbc_backward(grad, input, t_weight, bias, *ctx.args)[0])
    if t_input is not None:
        gw = _add(gw, conv_tbc_backward(grad, t_input, weight, bias, *ctx.args)[1])
    return (torch.zeros_like(input) if gi is None else gi, torch.zeros_like(weight) if gw is None else gw,
            torch.zeros_like(bias) if gb is None else gb)


_autograd(conv_tbc_backward, _conv_backward_setup, _conv_backward_backward, _conv_backward_jvp)


# ---------------------------------------------------------------------------- scaled masked softmax
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


def _softmax(x, mask, scale, fix_triu_mask):
    if x.dtype == torch.float64:
        return _softmax_float64(x, mask, scale, fix_triu_mask)
    return _run(_F.scaled_masked_softmax, x, x, _operator_mask(x, mask, fix_triu_mask), scale, fix_triu_mask)


def _softmax_fake(x, mask, scale, fix_triu_mask):
    return x.new_empty(x.shape)


def _softmax_backward(grad_output, y, mask, scale, fix_triu_mask):
    if y.dtype == torch.float64 and grad_output.dtype == torch.float64:
        return _softmax_backward_float64(grad_output, y, mask, scale, fix_triu_mask)
    return _run(_F.scaled_masked_softmax_backward, y, grad_output, y, _operator_mask(y, mask, fix_triu_mask), scale,
                fix_triu_mask)


def _softmax_backward_fake(grad_output, y, mask, scale, fix_triu_mask):
    return grad_output.new_empty(grad_output.shape)


scaled_masked_softmax = _define(
    "scaled_masked_softmax", "(Tensor x, Tensor? mask, float scale, bool fix_triu_mask) -> Tensor", _softmax,
    _softmax_fake)
scaled_masked_softmax_backward = _define(
    "scaled_masked_softmax_backward", "(Tensor grad_output, Tensor y, Tensor? mask, float scale, bool fix_triu_mask) "
    "-> Tensor", _softmax_backward, _softmax_backward_fake)


def _softmax_setup(ctx, inputs, output):
    x, mask, scale, fix_triu_mask = inputs
    _save(ctx, output, mask)                              # y, not x
    ctx.args = (scale, fix_triu_mask)


def _softmax_backward_formula(ctx, grad):
    if not ctx.needs_input_grad[0]:
        return None, None, None, None
    y, mask = ctx.saved_tensors
    return scaled_masked_softmax_backward(_dense(grad).to(y.dtype), y, mask, *ctx.args), None, None, None


def _softmax_jvp(ctx, t_x, *_):
    """d y = scale * y * (t - sum(y * t)) (y is 0 where masked)."""
    y, mask = ctx.saved_tensors
    scale = ctx.args[0]
    return scale * y * (t_x - (y * t_x).sum(-1, keepdim=True))


_autograd(scaled_masked_softmax, _softmax_setup, _softmax_backward_formula, _softmax_jvp)


def _softmax_backward_setup(ctx, inputs, output):
    grad_output, y, mask, scale, fix_triu_mask = inputs
    _save(ctx, grad_output, y, mask)
    ctx.args = (scale, fix_triu_mask)


def _softmax_backward_backward(ctx, u):
    """out = s * y * (g - sum(g * y)): in g the map is its own adjoint (d g = the backward of u); in y,
    d y = s * (u * (g - sum(g * y)) - g * sum(u * y))."""
    grad_output, y, mask = ctx.saved_tensors
    scale = ctx.args[0]
    need = ctx.needs_input_grad
    d_grad = scaled_masked_softmax_backward(_dense(u), y, mask, *ctx.args) if need[0] else None
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
        terms.append(scaled_masked_softmax_backward(_dense(t_grad), y, mask, *ctx.args))
    if t_y is not None:
        terms.append(scale * (t_y * (grad_output - (grad_output * y).sum(-1, keepdim=True))
                              - y * (grad_output * t_y).sum(-1, keepdim=True)))
    return _add(*terms) if terms else torch.zeros_like(y)


_autograd(scaled_masked_softmax_backward, _softmax_backward_setup, _softmax_backward_backward, _softmax_backward_jvp)


# ---------------------------------------------------------------------------- autocast (PyTorch's lists)
# The losses are on PyTorch's float32 list (nll_loss, kl_div; cross_entropy = log_softmax + nll_loss, both
# float32; ctc_loss on the CPU list), conv_tbc on its lower-precision list (the autocast dtype). The fused
# softmax is apex's, which runs in its input's dtype (Megatron feeds it half scores under autocast): no rule.
for _loss in (ctc_loss, cross_entropy_loss, cross_entropy_loss_zloss, nll_loss, kl_div):
    _autocast(_loss, torch.float32)
_autocast(conv_tbc, None)


OPERATORS = {"ctc_loss": ctc_loss, "ctc_loss_backward": ctc_loss_backward, "cross_entropy_loss": cross_entropy_loss,
             "cross_entropy_loss_zloss": cross_entropy_loss_zloss, "cross_entropy_loss_grad": cross_entropy_loss_grad,
             "nll_loss": nll_loss, "kl_div": kl_div, "kl_div_backward": kl_div_backward, "conv_tbc": conv_tbc,
             "conv_tbc_backward": conv_tbc_backward, "scaled_masked_softmax": scaled_masked_softmax,
             "scaled_masked_softmax_backward": scaled_masked_softmax_backward}

__all__ = ["NAMESPACE", "OPERATORS", "FIRST_ORDER_ONLY", "NO_FORWARD_AD", "check_class_targets", "ctc_loss",
           "ctc_loss_backward", "cross_entropy_loss", "cross_entropy_loss_zloss", "cross_entropy_loss_grad",
           "nll_loss", "kl_div", "kl_div_backward", "conv_tbc", "conv_tbc_backward", "scaled_masked_softmax",
           "scaled_masked_softmax_backward"]
