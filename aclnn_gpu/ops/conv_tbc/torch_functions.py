"""ConvTBC with PyTorch's signature, published as `aclnn_gpu.torch.conv_tbc` (with the former
autograd.Function `ConvTbcFunction`): the custom operator `aclnn::conv_tbc` (`torch_ops.py`), whose
forward and backward are aclnnConvTbc / aclnnConvTbcBackward, gradients for input, weight and bias.

    conv_tbc(input, weight, bias, pad=0)                                # torch.conv_tbc

The GPU matrix precision (CANN's cubeMathType) follows PyTorch's own setting,
torch.get_float32_matmul_precision(): "highest" keeps fp32 (KEEP_DTYPE), "high" and "medium" allow TF32
(ALLOW_FP32_DOWN_PRECISION); a constant to torch.compile, which guards on the precision (a change
recompiles). ConvTbcFunction.apply takes it explicitly. The operator takes FLOAT, FLOAT16, BFLOAT16
(CANN's contract); float64 tensors, and inputs that do not reach the last tap with one side's padding
(T + pad < K, which aclnnConvTbc refuses as CANN does), are computed by the custom operator with
PyTorch's own ops (`torch_ops.py`).

Layer 11 (operators), imports torch: only `aclnn_gpu.torch` imports this module.
"""
from __future__ import annotations

import torch

from .. import torch_rules as rules

_aclnn = torch.ops.aclnn   # the operators, registered by aclnn_gpu.torch, looked up when called


@torch.compiler.assume_constant_result
def _cube_math_type() -> int:
    """CANN's cubeMathType from PyTorch's float32 matmul precision: "highest" -> 0 (KEEP_DTYPE, true
    fp32), "high" / "medium" -> 1 (ALLOW_FP32_DOWN_PRECISION, TF32 on a GPU). A constant to
    torch.compile, which guards on the precision (a change recompiles)."""
    return 0 if torch.get_float32_matmul_precision() == "highest" else 1


@rules.not_scriptable
def conv_tbc(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """torch.conv_tbc through aclnnConvTbc / aclnnConvTbcBackward: input (T, B, Cin), weight
    (K, Cin, Cout), bias (Cout,) -> (T + 2*pad - K + 1, B, Cout). The GPU matrix precision follows
    torch.get_float32_matmul_precision() (the cpu device computes in fp32 whatever it says)."""
    rules.tensors("conv_tbc", input=input, weight=weight, bias=bias)
    return _aclnn.conv_tbc(input, weight, bias, pad, _cube_math_type())


class ConvTbcFunction:
    """`apply(input, weight, bias, pad, cube_math_type)`: conv_tbc with CANN's cubeMathType given
    explicitly (aclnn::conv_tbc)."""

    @staticmethod
    def apply(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, pad: int,
              cube_math_type: int) -> torch.Tensor:
        return _aclnn.conv_tbc(input, weight, bias, pad, cube_math_type)


# What aclnn_gpu.torch publishes of this family: its functions, then its former autograd.Function classes
PUBLIC = (conv_tbc, ConvTbcFunction)

__all__ = ["conv_tbc", "ConvTbcFunction", "PUBLIC"]
