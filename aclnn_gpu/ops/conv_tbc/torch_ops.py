"""ConvTBC as PyTorch custom operators (data for `aclnn_gpu.torch`, which registers them):

    aclnn::conv_tbc(Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) -> Tensor
    aclnn::conv_tbc_backward(Tensor grad, Tensor input, Tensor weight, Tensor bias, int pad,
                    int cube_math_type) -> (Tensor, Tensor, Tensor)

The forward and backward are functional's conv_tbc and conv_tbc_backward; the backward operator has
explicit second-order rules (the gradients are bilinear). Forward mode: conv_tbc(t_input, weight, 0) +
conv_tbc(input, t_weight, t_bias). float64, which aclnnConvTbc refuses (FLOAT, FLOAT16, BFLOAT16: CANN's
contract, kept at the aclnn level), is computed here with PyTorch's ops on the tensors' device, the same
formulas; the window shapes CANN's forward refuses and torch.conv_tbc computes get PyTorch's answer.
Autocast: the autocast dtype (PyTorch's lower-precision list). Imports torch: only `aclnn_gpu.torch`
imports this module.
"""
from __future__ import annotations

from typing import Any

import torch

from ..torch_rules import AUTOCAST_LOWER_PRECISION, TorchOperator, add, dense, save


def _forward_op(*args):
    """aclnn::conv_tbc, looked up when called (aclnn_gpu.torch registers it)."""
    return torch.ops.aclnn.conv_tbc.default(*args)


def _backward_op(*args):
    """aclnn::conv_tbc_backward, looked up when called."""
    return torch.ops.aclnn.conv_tbc_backward.default(*args)


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


def conv_tbc(run, input, weight, bias, pad, cube_math_type):
    if _float64(input, weight, bias):
        return _conv_tbc_float64(input, weight, bias, pad)
    if _conv_tbc_window_refused(input, weight, pad):   # PyTorch's answer, by PyTorch's own op
        return torch.conv_tbc(input, weight, bias, pad)
    return run(input, input, weight, bias, pad, cube_math_type)


def conv_tbc_fake(input, weight, bias, pad, cube_math_type):
    time = torch.sym_max(input.shape[0] + 2 * pad - weight.shape[0] + 1, 0)
    return input.new_empty((time, input.shape[1], weight.shape[2]))


def conv_tbc_backward(run, grad, input, weight, bias, pad, cube_math_type):
    if grad.numel() == 0:   # an empty output (Tout or B = 0): the operator refuses it; every gradient is 0
        return tuple(torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (input, weight, bias))
    if _float64(grad, input, weight, bias):
        return _conv_tbc_backward_float64(grad, input, weight, bias, pad)
    return run(input, grad, input, weight, bias, pad, cube_math_type)


def conv_tbc_backward_fake(grad, input, weight, bias, pad, cube_math_type):
    return input.new_empty(input.shape), weight.new_empty(weight.shape), bias.new_empty(bias.shape)


def _conv_setup(ctx, inputs, output):
    input, weight, bias, pad, cube_math_type = inputs
    save(ctx, input, weight, bias)
    ctx.args = (pad, cube_math_type)


def _conv_backward(ctx, grad):
    input, weight, bias = ctx.saved_tensors
    gi, gw, gb = _backward_op(dense(grad), input, weight, bias, *ctx.args)
    need = ctx.needs_input_grad
    return gi if need[0] else None, gw if need[1] else None, gb if need[2] else None, None, None


def _conv_linear(input, weight, bias, t_input, t_weight, t_bias, args) -> Any:
    """conv_tbc is bilinear in (input, weight) plus bias: its tangent is
    conv_tbc(t_input, weight, 0) + conv_tbc(input, t_weight, t_bias)."""
    terms = []
    if t_input is not None:
        terms.append(_forward_op(t_input, weight, torch.zeros_like(bias), *args))
    if t_weight is not None or t_bias is not None:
        terms.append(_forward_op(input, torch.zeros_like(weight) if t_weight is None else t_weight,
                                 torch.zeros_like(bias) if t_bias is None else t_bias, *args))
    return add(*terms)


def _conv_jvp(ctx, t_input, t_weight, t_bias, *_):
    input, weight, bias = ctx.saved_tensors
    return _conv_linear(input, weight, bias, t_input, t_weight, t_bias, ctx.args)


def _conv_backward_setup(ctx, inputs, output):
    grad, input, weight, bias, pad, cube_math_type = inputs
    ctx.set_materialize_grads(False)
    save(ctx, grad, input, weight, bias)
    ctx.args = (pad, cube_math_type)


def _conv_backward_backward(ctx, u_input, u_weight, u_bias):
    """Double backward: (gi, gw, gb) are bilinear in grad and (weight, input), so
    d grad = conv_tbc(u_input, weight, u_bias) + conv_tbc(input, u_weight, 0),
    d input = gi of conv_tbc_backward(grad, input, u_weight), d weight = gw of conv_tbc_backward(grad, u_input,
    weight); the bias does not enter the gradients."""
    grad, input, weight, bias = ctx.saved_tensors
    need = ctx.needs_input_grad
    d_grad = _conv_linear(input, weight, bias, u_input, u_weight, u_bias, ctx.args) if need[0] else None
    d_input = _backward_op(grad, input, u_weight, bias, *ctx.args)[0] if need[1] and u_weight is not None \
        else None
    d_weight = _backward_op(grad, u_input, weight, bias, *ctx.args)[1] if need[2] and u_input is not None \
        else None
    return d_grad, d_input, d_weight, None, None, None


def _conv_backward_jvp(ctx, t_grad, t_input, t_weight, t_bias, *_):
    grad, input, weight, bias = ctx.saved_tensors
    gi = gw = gb = None
    if t_grad is not None:
        gi, gw, gb = _backward_op(t_grad, input, weight, bias, *ctx.args)
    if t_weight is not None:
        gi = add(gi, _backward_op(grad, input, t_weight, bias, *ctx.args)[0])
    if t_input is not None:
        gw = add(gw, _backward_op(grad, t_input, weight, bias, *ctx.args)[1])
    return (torch.zeros_like(input) if gi is None else gi, torch.zeros_like(weight) if gw is None else gw,
            torch.zeros_like(bias) if gb is None else gb)



OPERATORS = (
    TorchOperator("conv_tbc", "(Tensor input, Tensor weight, Tensor bias, int pad, int cube_math_type) -> Tensor",
                  conv_tbc, conv_tbc_fake, _conv_setup, _conv_backward, _conv_jvp, functional="conv_tbc",
                  autocast=AUTOCAST_LOWER_PRECISION),
    TorchOperator("conv_tbc_backward", "(Tensor grad, Tensor input, Tensor weight, Tensor bias, int pad, "
                  "int cube_math_type) -> (Tensor, Tensor, Tensor)", conv_tbc_backward, conv_tbc_backward_fake,
                  _conv_backward_setup, _conv_backward_backward, _conv_backward_jvp, functional="conv_tbc_backward"),
)

__all__ = ["OPERATORS"]
