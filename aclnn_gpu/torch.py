"""PyTorch autograd for the five operators: `torch.autograd.Function` wrappers whose forward AND
backward run this library's aclnn operators through `aclnn_gpu.functional`.

    import aclnn_gpu.torch as acl_torch
    loss = acl_torch.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0,
                              reduction="mean", zero_infinity=False)
    loss.backward()                     # aclnnCtcLossBackward computes d loss / d log_probs

Importing `aclnn_gpu` never imports torch; importing this module does (the `torch` extra).
Each function takes exactly the parameters (names, order, defaults) of its PyTorch counterpart, so
a model switches by changing one import:

    ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False)                                       # torch.nn.functional
    cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0)                 # torch.nn.functional
    nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean")                                          # torch.nn.functional
    kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False)
    conv_tbc(input, weight, bias, pad=0)                                # torch.conv_tbc
    scaled_masked_softmax(inputs, mask, scale)                          # apex / Megatron fused softmax
    scaled_upper_triang_masked_softmax(inputs, _, scale)                # apex / Megatron, causal

| function | forward / backward | gradients for |
| --- | --- | --- |
| ctc_loss | aclnnCtcLoss / aclnnCtcLossBackward | log_probs |
| cross_entropy | aclnnCrossEntropyLoss / aclnnCrossEntropyLossGrad | input |
| nll_loss | PyTorch's gather (no NLL operator) / aclnnCrossEntropyLossGrad | input |
| kl_div | aclnnKlDiv / aclnnKlDivBackward | input |
| conv_tbc | aclnnConvTbc / aclnnConvTbcBackward | input, weight, bias |
| scaled_masked_softmax | aclnnScaledMaskedSoftmax / ...Backward | inputs |

Errors where PyTorch raises, with the same exception type: a bad reduction string (ValueError), an
out-of-range class label of cross_entropy / nll_loss ("Target 9 is out of bounds.", IndexError),
floating-point CTC length tensors ("input_lengths must be integral", RuntimeError). The deprecated
size_average / reduce arguments are mapped to a reduction exactly as PyTorch maps them (with its
deprecation warning). conv_tbc's GPU matrix precision (CANN's cubeMathType) follows PyTorch's own
setting, torch.get_float32_matmul_precision(): "highest" keeps fp32 (KEEP_DTYPE), "high" and
"medium" allow TF32 (ALLOW_FP32_DOWN_PRECISION); ConvTbcFunction.apply takes it explicitly.

Memory: tensors cross by DLPack. On the `cpu` device (and `emulated`) torch CPU tensors are lent to
the library zero-copy for the length of the call and the results come back as torch tensors over
the library's output buffers (`torch.from_numpy`, no copy). Results are moved to the input's torch
device when they come back elsewhere (a torch CUDA tensor on the `cuda` device: `functional` stages
through host memory today, see its `_to_numpy`).

Semantics, and where they differ from PyTorch:
  * ctc_loss: reduction "none" | "mean" (each loss divided by its target length, clamped to >= 1,
    then the batch mean, as PyTorch) | "sum", built with torch ops on top of the raw per-sample
    losses. The forward always runs with zeroInfinity=false and keeps that RAW loss for the backward,
    as PyTorch's autograd does (aclnnCtcLossBackward zeroes a sample that cannot align given either
    that +inf or the forward's zeroed 0, ops/ctc_loss/api.py); zero_infinity then zeroes the returned
    loss and the backward gradient. The
    gradient is PyTorch's `_ctc_loss_backward` convention (d loss / d logits when log_probs =
    log_softmax(logits)), so it matches torch.nn.functional.ctc_loss through a log_softmax.
  * cross_entropy: class-index targets, input (N, C), (C,) or (N, C, d1, ...). The operator wants a
    float32 weight, so `weight` is cast to float32 (a float64 input keeps float64 math otherwise).
    No gradient for weight.
  * kl_div: reductions "none" | "mean" | "sum" | "batchmean" (batchmean divides by the broadcast
    shape's dim 0, CANN's rule; PyTorch divides by input.size(0): equal unless input broadcasts in
    dim 0). No gradient for target: a target that requires grad is refused.
  * conv_tbc / scaled_masked_softmax: FLOAT, FLOAT16, BFLOAT16 only (the operators refuse DOUBLE).
    The mask is bool (or uint8, as apex takes it), true = masked out; a fully masked row gives zeros
    (PyTorch's softmax gives NaN, apex's -10000 fill a uniform row).
  * kl_div with reduction "mean" does not repeat PyTorch's warning that "mean" is not the
    mathematical KL divergence; the value is PyTorch's.
  * Zeros where PyTorch gives NaN (docs/API.md §7): cross_entropy "mean" with every target ignored,
    kl_div "mean" / "batchmean" of an empty input. Out-of-range CTC labels are not checked on the
    host (PyTorch does not check them either): the operator's documented device behaviour applies.
  * First derivatives only: with create_graph=True a double backward raises instead of silently
    dropping the second-order terms.
Failures raise `aclnn_gpu.AclnnError` (a RuntimeError with `.status`); arguments that are not torch
tensors raise TypeError.
"""
from __future__ import annotations

from typing import Any

import functools

import torch
from torch._C import _functions as _autograd_functions

from . import functional as _F

__all__ = ["ctc_loss", "cross_entropy", "nll_loss", "kl_div", "conv_tbc", "scaled_masked_softmax",
           "scaled_upper_triang_masked_softmax", "CtcLossFunction", "CrossEntropyFunction", "NllLossFunction",
           "KlDivFunction", "ConvTbcFunction", "ScaledMaskedSoftmaxFunction"]


def _on(result: Any, like: torch.Tensor) -> torch.Tensor:
    """A functional result as a torch tensor on `like`'s device (no copy when already there)."""
    if not isinstance(result, torch.Tensor):
        result = torch.from_dlpack(result)
    return result if result.device == like.device else result.to(like.device)


def _save(ctx: Any, saved: tuple, links: tuple) -> None:
    """save_for_backward of what the backward reads, then of the inputs the gradient flows to (the
    `links` that _first_order hangs its raising node below)."""
    ctx.n_saved = len(saved)
    ctx.save_for_backward(*saved, *links)


def _saved(ctx: Any) -> tuple:
    return ctx.saved_tensors[:ctx.n_saved]


def _link(tensor: torch.Tensor) -> torch.Tensor | None:
    """For a Function that does not save its input: a 0-d tensor computed from it (the sum of an
    empty slice) when it takes part in a graph. It ties _first_order's raising node to that graph
    without keeping the input's memory alive or pinning its version (in-place changes to the input
    after the forward stay allowed, as with PyTorch's own softmax and cross_entropy)."""
    if not (torch.is_grad_enabled() and tensor.requires_grad):
        return None
    return (tensor.reshape(1) if tensor.dim() == 0 else tensor).narrow(0, 0, 0).sum()


def _first_order(backward: Any) -> Any:
    """The operators give first derivatives only. With create_graph=True the gradients come back
    from a node that raises when differentiated and that hangs below the inputs they depend on, so
    a double backward (a Hessian, a gradient penalty) fails loudly instead of silently missing the
    second-order terms. (PyTorch's once_differentiable raises only when the incoming gradient
    requires grad, which a loss's does not, and its node links to no input.)"""
    @functools.wraps(backward)
    def wrapper(ctx: Any, *grads: Any) -> Any:
        with torch.no_grad():
            outputs = backward(ctx, *grads)
        links = [t for t in ctx.saved_tensors[ctx.n_saved:] if t is not None and t.requires_grad]
        if not torch.is_grad_enabled() or not links:
            return outputs
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        raising = _autograd_functions.DelayedError(
            b"aclnn_gpu.torch: the operators give first derivatives only (no double backward)",
            len(outputs) + len(links))
        detached: list[Any] = [None if o is None else o.detach() for o in outputs]   # None: no gradient
        attached = raising(*detached, *links)[:len(outputs)]
        return attached[0] if single else attached
    return wrapper


def _tensors(function: str, **tensors: Any) -> None:
    """The wrappers take torch tensors (NumPy and CuPy arrays go to aclnn_gpu.functional)."""
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{function}: {name} must be a torch.Tensor, got {type(value).__name__}")


def _lengths(values: Any, name: str = "lengths") -> list[int]:
    if isinstance(values, torch.Tensor):
        if values.is_floating_point() or values.is_complex():
            raise RuntimeError(f"{name} must be integral")      # PyTorch's ctc_loss message
        return [int(v) for v in values.reshape(-1).tolist()]
    if isinstance(values, int):
        return [values]
    values = list(values)
    if any(isinstance(v, float) for v in values):
        raise RuntimeError(f"{name} must be integral")
    return [int(v) for v in values]


_REDUCTIONS = ("none", "mean", "sum")


def _reduction(reduction: str, size_average: Any = None, reduce: Any = None, allowed: tuple = _REDUCTIONS) -> str:
    """PyTorch's rule: the deprecated size_average / reduce, when either is given, decide the reduction
    (torch.nn._reduction.legacy_get_string, with its warning); an unknown string is a ValueError."""
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction as legacy
        return legacy.legacy_get_string(size_average, reduce)
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _check_class_targets(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """PyTorch's host check of class indices (IndexError "Target 9 is out of bounds."); the operators
    make such rows NaN on the device instead, which a PyTorch caller does not expect."""
    if target.numel() == 0:
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bool(bad.any()):
        raise IndexError(f"Target {int(target[bad].reshape(-1)[0])} is out of bounds.")


def _grad(grad: torch.Tensor) -> torch.Tensor:
    # autograd often hands an expanded (stride-0) or otherwise strided gradient; the operators take
    # any strides on the cpu device, but a dense gradient keeps the GPU paths free of staging copies
    return grad if grad.is_contiguous() else grad.contiguous()


# ---------------------------------------------------------------------------- CTC loss
class CtcLossFunction(torch.autograd.Function):
    """Per-sample CTC loss (T, N, C) log_probs -> (N,), with zero_infinity applied to the output;
    the raw loss and log_alpha are kept for aclnnCtcLossBackward."""

    @staticmethod
    def forward(ctx, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
        il, tl = _lengths(input_lengths), _lengths(target_lengths)
        nll, log_alpha = _F.ctc_loss(log_probs.detach(), targets.detach(), il, tl, blank, False)
        nll, log_alpha = _on(nll, log_probs), _on(log_alpha, log_probs)
        _save(ctx, (log_probs, targets, nll, log_alpha), links=(log_probs,))
        ctx.lengths, ctx.blank, ctx.zero_infinity = (il, tl), int(blank), bool(zero_infinity)
        if zero_infinity:
            return torch.where(torch.isinf(nll), torch.zeros((), dtype=nll.dtype, device=nll.device), nll)
        return nll.clone()

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        log_probs, targets, nll, log_alpha = _saved(ctx)
        il, tl = ctx.lengths
        g = _F.ctc_loss_backward(_grad(grad).to(log_probs.dtype), log_probs.detach(), targets, il, tl, nll,
                                 log_alpha, ctx.blank, ctx.zero_infinity)
        return _on(g, log_probs), None, None, None, None, None


def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any,
             blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> torch.Tensor:
    """torch.nn.functional.ctc_loss through aclnnCtcLoss / aclnnCtcLossBackward. log_probs (T, N, C)
    (or (T, C) unbatched), targets (N, S) padded or 1-D concatenated, lengths as tensors or sequences."""
    _tensors("ctc_loss", log_probs=log_probs, targets=targets)
    reduction = _reduction(reduction)
    input_lengths, target_lengths = _lengths(input_lengths, "input_lengths"), _lengths(target_lengths, "target_lengths")
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
    loss = CtcLossFunction.apply(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if reduction == "mean":
        tl = torch.as_tensor(target_lengths, dtype=loss.dtype, device=loss.device)
        return (loss / tl.clamp(min=1)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss[0] if unbatched else loss


# ---------------------------------------------------------------------------- cross-entropy
class CrossEntropyFunction(torch.autograd.Function):
    """cross_entropy over (N, C) logits with class-index targets; log_softmax is kept for the grad."""

    @staticmethod
    def forward(ctx, input, target, weight, reduction, ignore_index, label_smoothing, link):
        loss, log_prob = _F.cross_entropy_loss(input.detach(), target.detach(), weight, reduction, ignore_index,
                                               label_smoothing)
        log_prob = _on(log_prob, input)
        _save(ctx, (log_prob, target, weight), links=(link,))
        ctx.args = (reduction, int(ignore_index), float(label_smoothing))
        return _on(loss, input)

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None, None
        log_prob, target, weight = _saved(ctx)
        reduction, ignore_index, label_smoothing = ctx.args
        g = _F.cross_entropy_loss_grad(_grad(grad).to(log_prob.dtype), log_prob, target, weight, reduction,
                                       ignore_index, label_smoothing)
        return _on(g, log_prob), None, None, None, None, None, None


def _class_inputs(function: str, input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                  ignore_index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, tuple | None]:
    """cross_entropy / nll_loss arguments as the operator takes them: (N, C) input, (N,) target, float32
    weight, and the shape of a "none" result ((), (N,), (N, d1, ...)) when it is not (N,)."""
    _tensors(function, input=input, target=target)
    if target.is_floating_point():
        raise NotImplementedError(f"{function}: class-probability targets are not supported (class indices only)")
    if weight is not None:
        if weight.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError(f"{function}: no gradient for weight (aclnnCrossEntropyLossGrad gives "
                                      "the input's only); pass weight.detach()")
        weight = weight.detach().to(torch.float32)   # the operator's weight dtype
    _check_class_targets(target, input.shape[1] if input.dim() > 1 else input.shape[0], ignore_index)
    shape: tuple | None = None
    if input.dim() == 1:                              # unbatched: (C,), target ()
        input, target, shape = input.unsqueeze(0), target.reshape(1), ()
    elif input.dim() > 2:                             # (N, C, d1, ...) -> (N*d1*..., C)
        shape = (input.shape[0],) + tuple(input.shape[2:])
        input = input.movedim(1, -1).reshape(-1, input.shape[1])
        target = target.reshape(-1)
    return input, target, weight, shape


def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """torch.nn.functional.cross_entropy (class-index targets) through aclnnCrossEntropyLoss /
    aclnnCrossEntropyLossGrad. input (N, C), (C,) or (N, C, d1, ...); target of input's shape minus C."""
    reduction = _reduction(reduction, size_average, reduce)
    input, target, weight, shape = _class_inputs("cross_entropy", input, target, weight, ignore_index)
    loss = CrossEntropyFunction.apply(input, target, weight, reduction, ignore_index, label_smoothing, _link(input))
    return loss.reshape(shape) if reduction == "none" and shape is not None else loss


class NllLossFunction(torch.autograd.Function):
    """nll_loss over (N, C) log-probabilities. The backward is aclnnCrossEntropyLossGrad given a logProb
    of -inf everywhere: its gradient (exp(logProb) - one_hot) * weight * scale then reduces to NLL's
    own, -one_hot * weight * scale, with the operator's ignore_index and "mean" weight-sum rules."""

    @staticmethod
    def forward(ctx, input, target, weight, reduction, ignore_index, link):
        import torch.nn.functional as TF
        _save(ctx, (target, weight), links=(link,))
        ctx.args = (reduction, int(ignore_index), input.shape, input.dtype)
        w = None if weight is None else weight.to(input.dtype)
        return TF.nll_loss(input.detach(), target, w, ignore_index=ignore_index, reduction=reduction)

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        target, weight = _saved(ctx)
        reduction, ignore_index, shape, dtype = ctx.args
        no_prob = torch.full(shape, -torch.inf, dtype=dtype, device=target.device)
        g = _F.cross_entropy_loss_grad(_grad(grad).to(dtype), no_prob, target, weight, reduction, ignore_index, 0.0)
        return _on(g, no_prob), None, None, None, None, None


def nll_loss(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
             reduction: str = "mean") -> torch.Tensor:
    """torch.nn.functional.nll_loss on log-probabilities: input (N, C), (C,) or (N, C, d1, ...), target
    class indices. The gradient is aclnnCrossEntropyLossGrad's (see NllLossFunction)."""
    reduction = _reduction(reduction, size_average, reduce)
    input, target, weight, shape = _class_inputs("nll_loss", input, target, weight, ignore_index)
    loss = NllLossFunction.apply(input, target, weight, reduction, ignore_index, _link(input))
    return loss.reshape(shape) if reduction == "none" and shape is not None else loss


# ---------------------------------------------------------------------------- KL divergence
class KlDivFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, target, reduction, log_target):
        out = _F.kl_div(input.detach(), target.detach(), reduction, log_target)
        _save(ctx, (input, target), links=(input,))
        ctx.args = (reduction, bool(log_target))
        return _on(out, input)

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        input, target = _saved(ctx)
        reduction, log_target = ctx.args
        g = _F.kl_div_backward(_grad(grad), input.detach(), target.detach(), reduction, log_target)
        return _on(g, input), None, None, None


def kl_div(input: torch.Tensor, target: torch.Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> torch.Tensor:
    """torch.nn.functional.kl_div through aclnnKlDiv / aclnnKlDivBackward: input holds log-probabilities,
    target probabilities (log-probabilities with log_target). Gradient for input only."""
    _tensors("kl_div", input=input, target=target)
    reduction = _reduction(reduction, size_average, reduce, _REDUCTIONS + ("batchmean",))
    if target.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("kl_div: no gradient for target (aclnnKlDivBackward gives the input's only); "
                                  "pass target.detach()")
    return KlDivFunction.apply(input, target, reduction, log_target)


# ---------------------------------------------------------------------------- ConvTBC
class ConvTbcFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, pad, cube_math_type):
        out = _F.conv_tbc(input.detach(), weight.detach(), bias.detach(), pad, cube_math_type)
        _save(ctx, (input, weight, bias), links=(input, weight, bias))
        ctx.args = (int(pad), int(cube_math_type))
        return _on(out, input)

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        input, weight, bias = _saved(ctx)
        pad, cube_math_type = ctx.args
        if grad.numel() == 0:   # an empty output (Tout or B = 0): the operator refuses it; every gradient is 0
            gi, gw, gb = torch.zeros_like(input), torch.zeros_like(weight), torch.zeros_like(bias)
        else:
            gi, gw, gb = _F.conv_tbc_backward(_grad(grad), input.detach(), weight.detach(), bias.detach(), pad,
                                              cube_math_type)
        need = ctx.needs_input_grad
        return (_on(gi, input) if need[0] else None, _on(gw, weight) if need[1] else None,
                _on(gb, bias) if need[2] else None, None, None)


def _cube_math_type() -> int:
    """CANN's cubeMathType from PyTorch's float32 matmul precision: "highest" -> 0 (KEEP_DTYPE, true
    fp32), "high" / "medium" -> 1 (ALLOW_FP32_DOWN_PRECISION, TF32 on a GPU)."""
    return 0 if torch.get_float32_matmul_precision() == "highest" else 1


def conv_tbc(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """torch.conv_tbc through aclnnConvTbc / aclnnConvTbcBackward: input (T, B, Cin), weight
    (K, Cin, Cout), bias (Cout,) -> (T + 2*pad - K + 1, B, Cout). The GPU matrix precision follows
    torch.get_float32_matmul_precision() (the cpu device computes in fp32 whatever it says)."""
    _tensors("conv_tbc", input=input, weight=weight, bias=bias)
    return ConvTbcFunction.apply(input, weight, bias, pad, _cube_math_type())


# ---------------------------------------------------------------------------- scaled masked softmax
class ScaledMaskedSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask, scale, fix_triu_mask, link):
        y = _on(_F.scaled_masked_softmax(x.detach(), mask, scale, fix_triu_mask), x)
        _save(ctx, (y, mask), links=(link,))
        ctx.args = (float(scale), bool(fix_triu_mask))
        return y

    @staticmethod
    @_first_order
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        y, mask = _saved(ctx)
        scale, fix_triu_mask = ctx.args
        g = _F.scaled_masked_softmax_backward(_grad(grad).to(y.dtype), y, mask, scale, fix_triu_mask)
        return _on(g, y), None, None, None, None


def _softmax(function: str, inputs: torch.Tensor, mask: torch.Tensor | None, scale: float,
             fix_triu_mask: bool) -> torch.Tensor:
    _tensors(function, inputs=inputs)
    if mask is not None:
        _tensors(function, mask=mask)
        mask = mask.detach()
        if mask.dtype != torch.bool:
            mask = mask.to(torch.bool)
    return ScaledMaskedSoftmaxFunction.apply(inputs, mask, scale, fix_triu_mask, _link(inputs))


def scaled_masked_softmax(inputs: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """apex's / Megatron's scaled_masked_softmax(inputs, mask, scale): softmax(scale * inputs) over the
    last axis with masked positions (mask true / 1) excluded, through aclnnScaledMaskedSoftmax /
    aclnnScaledMaskedSoftmaxBackward. inputs (B, N, S1, S2); mask bool or uint8 (Bm, Nm, S1, S2) with
    Bm in {B, 1}, Nm in {N, 1}, or None (no mask)."""
    return _softmax("scaled_masked_softmax", inputs, mask, scale, False)


def scaled_upper_triang_masked_softmax(inputs: torch.Tensor, _: Any, scale: float) -> torch.Tensor:
    """apex's / Megatron's scaled_upper_triang_masked_softmax(inputs, _, scale): the causal softmax
    (entry j of row i masked when j > i) of inputs (attn_batches, S1, S2) or (B, N, S1, S2); the second
    argument is ignored, as apex ignores it. Through aclnnScaledMaskedSoftmax with fixTriuMask=true."""
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 3:
        return _softmax("scaled_upper_triang_masked_softmax", inputs.unsqueeze(0), None, scale, True).squeeze(0)
    return _softmax("scaled_upper_triang_masked_softmax", inputs, None, scale, True)

