"""aclnnConvTbcBackward and aclnnConvTbc: checks in CANN's order, dtype/stride staging, then the plan.

Owns the host side of ConvTBC (docs/OPERATORS.md §4), out[t, b] = bias + sum_k input[t + k - pad, b] @ weight[k]
with Tout = T + 2*pad - K + 1: validation (161001 for a null tensor; 161002 for
dtypes outside FLOAT/FLOAT16/BF16, formats other than ND/NCL for the 3-D tensors or ND for
bias/gradBias, an empty `self`, ranks and shape relations, pad < 0, Tout < 0, cubeMathType outside
0..3), the memory/alias checks, and the staging around the GPU plan of `ops/conv_tbc/launch.py`,
which takes contiguous tensors of ONE dtype:
  * mixed dtypes among self/input/weight (forward: input/weight/bias) are promoted (all equal: that
    dtype; otherwise float32) and non-contiguous or converted operands are copied into the
    workspace by `tbc_copy<Tin, Tout>` (strided gather + conversion in one pass);
  * outputs of another dtype or non-contiguous are produced in a workspace buffer, converted by
    `tbc_copy` and, if strided, scattered (`WorkspaceBuilder.stage`). Each output keeps its own dtype.
The cpu device runs `reference/conv_tbc.py` (float32 BLAS math whatever cubeMathType says) and
needs no workspace. GPU workspace, in this order (`WorkspaceBuilder` ranges): a compute-dtype copy of
each converted or strided input, then per output its compute-dtype buffer (other dtype) and its
staged copy (strided), then the GEMM plan's own bytes (launch.*_workspace_bytes).

cubeMathType -> GPU matrix precision (kernels/gemm.compute_mode): 0 KEEP_DTYPE: fp32 inputs in true
fp32 (CUBLAS_COMPUTE_32F); 1 ALLOW_FP32_DOWN_PRECISION and 3 USE_HF32: TF32 tensor cores
(COMPUTE_32F_FAST_TF32); 2 USE_FP16: fp32 operands rounded to fp16, fp32 accumulation. fp16 and
bf16 inputs always run their own tensor-core path with fp32 accumulation.

The GPU plan (ops/conv_tbc/launch.py) is ATen's: one GEMM per tap on row-shifted views of the
time-major tensors (no copy of x or dy, no padding multiplied: inf/NaN meet exactly the outputs they
meet in PyTorch), gradWeight split along its depth into fixed-order fp32 partials when its output
tiles are too few to fill the GPU, gradBias as full-grid column sums, fp16/bf16 outputs rounded once.

Empty input/weight (T, Cin or K == 0 with a non-empty self): gradInput = gradWeight = 0 and
gradBias = sum of self over time and batch (docs/API.md §7; CANN writes B*Tout), on every device.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from ...executor import make_execute, make_get_workspace_size
from ...reference import conv_tbc as reference
from ...base.status import aclDataType as D
from ...base.status import aclFormat as F
from ...meta.tensor import aclTensor
from . import launch as gpu
from ...plans.checks import INVALID, Checks
from ...plans.plan import (STRIDED_COPY, NO_WORKSPACE, EmptyPlan, Plan, Workspace, WorkspaceBuilder, host_array,
                           write_out)

__all__ = ["aclnnConvTbc", "aclnnConvTbcGetWorkspaceSize",
           "aclnnConvTbcBackward", "aclnnConvTbcBackwardGetWorkspaceSize"]

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
FORMATS_3D = (F.ACL_FORMAT_ND, F.ACL_FORMAT_NCL)
FORMATS_1D = (F.ACL_FORMAT_ND,)
CUBE_MATH = {0: "KEEP_DTYPE", 1: "ALLOW_FP32_DOWN_PRECISION", 2: "USE_FP16", 3: "USE_HF32"}



def promote(*tensors: aclTensor) -> np.dtype:
    """The compute dtype of the GPU plan: the common dtype, float32 when they differ."""
    kinds = {t.numpy_dtype for t in tensors}
    return kinds.pop() if len(kinds) == 1 else np.dtype(np.float32)


def _cube_math(c: Checks, value: Any) -> int:
    v = c.integer("cubeMathType", value)
    if v not in CUBE_MATH:
        c.fail(INVALID, f"cubeMathType {v} must be 0 (KEEP_DTYPE), 1 (ALLOW_FP32_DOWN_PRECISION), "
                        "2 (USE_FP16) or 3 (USE_HF32)")
    return v


# ------------------------------------------------------------------------------ workspace
def _convert_in(tensor: aclTensor, compute: np.dtype, ctx: Any, src: int, dst: int) -> None:
    """A converted operand: strided gather + conversion to the compute dtype (one tbc_copy)."""
    shape, strides = _as3(tensor)
    gpu.convert_copy(ctx, tensor.numpy_dtype, compute, shape, strides, src, dst)


def _convert_out(tensor: aclTensor, compute: np.dtype, ctx: Any, src: int, dst: int) -> None:
    """A compute-dtype result converted into its output's dtype (then scattered if strided)."""
    shape, _ = _as3(tensor)
    gpu.convert_copy(ctx, compute, tensor.numpy_dtype, shape, (shape[1] * shape[2], shape[2], 1), src, dst)


def _workspace(device: Any, compute: np.dtype, inputs: tuple[aclTensor, ...], outputs: tuple[aclTensor, ...],
               plan_bytes: int) -> Workspace:
    """A compute-dtype copy of each converted or strided input, then per output its compute-dtype
    buffer (other dtype) and its staged copy (strided), then the GEMM plan's own bytes."""
    if device.kind == "cpu":
        return NO_WORKSPACE
    builder = WorkspaceBuilder()
    for tensor in inputs:
        if tensor.numel > 0 and (tensor.numpy_dtype != compute or not tensor.is_contiguous()):
            builder.convert(tensor, tensor.numel * compute.itemsize, partial(_convert_in, tensor, compute))
    for tensor in outputs:
        if tensor.numel > 0 and tensor.numpy_dtype != compute:
            builder.convert(tensor, tensor.numel * compute.itemsize, partial(_convert_out, tensor, compute),
                            output=True)
        builder.stage(tensor, output=True)
    builder.reserve("gemm", plan_bytes)
    return builder.build()


def _as3(tensor: aclTensor) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(shape, element strides) of a 3-D operand as (R, B, C); a 1-D bias is (1, 1, C)."""
    if tensor.rank == 3:
        return tuple(tensor.shape), tuple(tensor.strides)  # type: ignore[return-value]
    return (1, 1, int(tensor.shape[0])), (0, 0, int(tensor.strides[0]))


def _check_dtypes_and_formats(c: Checks, tensors: dict[str, aclTensor], dtype_order: tuple[str, ...],
                              three_d: tuple[str, ...], one_d: tuple[str, ...]) -> None:
    for name in dtype_order:
        c.dtype_in(name, tensors[name], FLOAT_TYPES)
    for name in three_d:
        c.format_in(name, tensors[name], FORMATS_3D)
    for name in one_d:
        c.format_in(name, tensors[name], FORMATS_1D)


def _check_ranks(c: Checks, tensors: dict[str, aclTensor], three_d: tuple[str, ...], one_d: tuple[str, ...]) -> None:
    for name in three_d:
        c.rank(name, tensors[name], 3)
    for name in one_d:
        c.rank(name, tensors[name], 1)


def _check_sizes_and_pad(c: Checks, input_name: str, input_: aclTensor, weight: aclTensor, bias: aclTensor,
                         pad: Any) -> tuple[int, int, int, int, int, int, int]:
    """(T, B, Cin, K, Cout, pad, Tout) after the channel, bias, pad and Tout checks both directions share;
    `input_name` is the C name of the (T, B, Cin) input ("input" backward, "self" forward)."""
    T, B, Cin = input_.shape
    K, weight_cin, Cout = weight.shape
    if weight_cin != Cin:
        c.fail(INVALID, f"weight shape {list(weight.shape)}: dim 1 must equal {input_name}'s channels {Cin} "
                        f"({input_name} shape {list(input_.shape)})")
    if bias.shape[0] != Cout:
        c.fail(INVALID, f"bias shape {list(bias.shape)} must equal weight's output channels [{Cout}]")
    pad = c.integer("pad", pad)
    if pad < 0:
        c.fail(INVALID, f"pad {pad} must be >= 0")
    Tout = reference.out_len(T, K, pad)
    if Tout < 0:
        c.fail(INVALID, f"output length Tout = T + 2*pad - K + 1 = {T} + {2 * pad} - {K} + 1 = {Tout} must be >= 0")
    return T, B, Cin, K, Cout, pad, Tout


def _check_forward_window(c: Checks, input_: aclTensor, weight: aclTensor, T: int, K: int, pad: int) -> None:
    """aclnnConvTbc's own two rules beyond the backward's (ops-nn's ValueCheckerTbc, which its unit tests
    test_convTbc_empty_tensor_1 and _3 exercise): the kernel size K > 0, and a non-empty self must reach
    the last tap with one side's padding, T + pad - (K - 1) - 1 >= 0 (an output of length 0 from
    T + 2*pad - K + 1 is not enough)."""
    if K <= 0:
        c.fail(INVALID, f"weight shape {list(weight.shape)}: dim 0 (the kernel size K) must be > 0")
    if input_.numel > 0 and T + pad - (K - 1) - 1 < 0:
        c.fail(INVALID, f"self shape {list(input_.shape)}, weight shape {list(weight.shape)}, pad {pad}: "
                        f"T + pad - (K - 1) - 1 = {T} + {pad} - {K - 1} - 1 = {T + pad - K} must be >= 0")


def _check_gemm_limits(c: Checks, device: Any, T: int, B: int, Cin: int, Cout: int, K: int, pad: int) -> None:
    """Sizes the GPU GEMM plan cannot address are refused here (161002); the cpu has no limit."""
    if device.kind == "cpu":
        return
    message = gpu.check_gemm_limits(T, B, Cin, Cout, K, pad)
    if message is not None:
        c.fail(INVALID, message)


# ------------------------------------------------------------------------------ plans
@dataclass(frozen=True, eq=False, kw_only=True)
class _ConvTbcPlan(Plan):
    """What both directions pass to the GPU plan besides their operands."""

    kernel_files: ClassVar[tuple[str, ...]] = (gpu.FILE, STRIDED_COPY.file)

    T: int
    B: int
    Cin: int
    K: int
    Cout: int
    pad: int
    cube_math_type: int
    compute: np.dtype          # the one dtype the GEMM plan runs in (`promote`)

    def _launch_args(self, workspace: int) -> dict[str, Any]:
        return dict(T=self.T, B=self.B, Cin=self.Cin, Cout=self.Cout, K=self.K, pad=self.pad, dtype=self.compute,
                    cube_math_type=self.cube_math_type,
                    workspace_ptr=workspace + self.workspace.ranges.get("gemm", 0))


@dataclass(frozen=True, eq=False, kw_only=True)
class ConvTbcBackwardPlan(_ConvTbcPlan):
    op: ClassVar[str] = "aclnnConvTbcBackward"
    outputs: ClassVar[tuple[str, ...]] = ("gradInput", "gradWeight", "gradBias")
    grad: aclTensor
    input: aclTensor
    weight: aclTensor
    bias: aclTensor
    grad_input: aclTensor
    grad_weight: aclTensor
    grad_bias: aclTensor

    def run_host(self, device: Any, workspace: int) -> None:
        grad, input_, weight = (host_array(device, t) for t in (self.grad, self.input, self.weight))
        grad_input, grad_weight, grad_bias = (host_array(device, t)
                                              for t in (self.grad_input, self.grad_weight, self.grad_bias))
        # results come back in the operand's dtype: hand over fp32 where the output dtype differs
        # so that each result is rounded once, to its output's dtype
        if grad_input.dtype != input_.dtype:
            input_ = input_.astype(np.float32)
        if grad_weight.dtype != weight.dtype:
            weight = weight.astype(np.float32)
        results = reference.conv_tbc_backward(grad, input_, weight, np.empty(0, grad_bias.dtype), self.pad)
        for view, result in zip((grad_input, grad_weight, grad_bias), results):
            write_out(view, result)

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_backward(
            ctx, grad=ws.address(self.grad, workspace), input=ws.address(self.input, workspace),
            weight=ws.address(self.weight, workspace), grad_input=ws.address(self.grad_input, workspace),
            grad_weight=ws.address(self.grad_weight, workspace),
            grad_bias=ws.address(self.grad_bias, workspace), **self._launch_args(workspace))


@dataclass(frozen=True, eq=False, kw_only=True)
class ConvTbcPlan(_ConvTbcPlan):
    op: ClassVar[str] = "aclnnConvTbc"
    outputs: ClassVar[tuple[str, ...]] = ("out",)
    input: aclTensor
    weight: aclTensor
    bias: aclTensor
    out: aclTensor

    def run_host(self, device: Any, workspace: int) -> None:
        input_, weight, bias = (host_array(device, t) for t in (self.input, self.weight, self.bias))
        out = host_array(device, self.out)
        if out.dtype != input_.dtype:  # as in the backward: one rounding, to out's dtype
            input_ = input_.astype(np.float32)
        write_out(out, reference.conv_tbc(input_, weight, bias, self.pad))

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_forward(
            ctx, input=ws.address(self.input, workspace), weight=ws.address(self.weight, workspace),
            bias=ws.address(self.bias, workspace), out=ws.address(self.out, workspace),
            **self._launch_args(workspace))


# ------------------------------------------------------------------------------ phase 1
def _build_backward(device: Any, self: Any, input: Any, weight: Any, bias: Any, pad: Any, cubeMathType: Any,
                    gradInput: Any, gradWeight: Any, gradBias: Any) -> Plan | EmptyPlan:
    """aclnnConvTbcBackwardGetWorkspaceSize(self, input, weight, bias, pad, cubeMathType, gradInput,
    gradWeight, gradBias) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnConvTbcBackward", device)
    c.not_null(self=self, input=input, weight=weight, bias=bias, gradInput=gradInput, gradWeight=gradWeight,
               gradBias=gradBias)
    tensors = {name: c.tensor(name, t) for name, t in (("self", self), ("input", input), ("weight", weight),
                                                       ("bias", bias), ("gradInput", gradInput),
                                                       ("gradWeight", gradWeight), ("gradBias", gradBias))}
    grad, input_, weight_, bias_, grad_input, grad_weight, grad_bias = tensors.values()
    three_d, one_d = ("self", "input", "weight", "gradInput", "gradWeight"), ("bias", "gradBias")
    _check_dtypes_and_formats(c, tensors, ("self", "input", "weight", "gradInput", "gradWeight", "gradBias", "bias"),
                              three_d, one_d)
    if grad.numel == 0:
        c.fail(INVALID, f"self (the output gradient) must not be empty, got shape {list(grad.shape)}")
    _check_ranks(c, tensors, three_d, one_d)
    T, B, Cin, K, Cout, pad, Tout = _check_sizes_and_pad(c, "input", input_, weight_, bias_, pad)
    c.shape_eq("self", grad, (Tout, B, Cout), "(Tout, B, Cout) =")
    c.shape_eq("gradInput", grad_input, input_.shape, "input shape")
    c.shape_eq("gradWeight", grad_weight, weight_.shape, "weight shape")
    c.shape_eq("gradBias", grad_bias, bias_.shape, "bias shape")
    cube_math_type = _cube_math(c, cubeMathType)
    _check_gemm_limits(c, device, T, B, Cin, Cout, K, pad)
    c.memory(self=grad, input=input_, weight=weight_, bias=bias_, gradInput=grad_input, gradWeight=grad_weight,
             gradBias=grad_bias)
    inputs = dict(self=grad, input=input_, weight=weight_, bias=bias_)
    c.output("gradInput", grad_input, **inputs, gradWeight=grad_weight, gradBias=grad_bias)
    c.output("gradWeight", grad_weight, **inputs, gradBias=grad_bias)
    c.output("gradBias", grad_bias, **inputs)
    K = weight_.shape[0]
    compute = promote(grad, input_, weight_)
    workspace = _workspace(device, compute, (grad, input_, weight_), (grad_input, grad_weight, grad_bias),
                           gpu.backward_workspace_bytes(T, B, Cin, Cout, K, pad, compute, cube_math_type))
    return ConvTbcBackwardPlan(
        tensors=tensors, workspace=workspace, T=T, B=B, Cin=Cin, K=K, Cout=Cout, pad=pad,
        cube_math_type=cube_math_type, compute=compute, grad=grad, input=input_, weight=weight_, bias=bias_,
        grad_input=grad_input, grad_weight=grad_weight, grad_bias=grad_bias)


def _build_forward(device: Any, self: Any, weight: Any, bias: Any, pad: Any, out: Any, cubeMathType: Any
                   ) -> Plan | EmptyPlan:
    """aclnnConvTbcGetWorkspaceSize(self, weight, bias, pad, out, cubeMathType) -> (status, workspaceSize,
    executor); `self` is the input (T, B, Cin)."""
    c = Checks("aclnnConvTbc", device)
    c.not_null(self=self, weight=weight, bias=bias, out=out)
    tensors = {name: c.tensor(name, t) for name, t in (("self", self), ("weight", weight), ("bias", bias),
                                                       ("out", out))}
    input_, weight_, bias_, out_ = tensors.values()
    three_d, one_d = ("self", "weight", "out"), ("bias",)
    _check_dtypes_and_formats(c, tensors, ("self", "weight", "bias", "out"), three_d, one_d)
    _check_ranks(c, tensors, three_d, one_d)
    T, B, Cin, K, Cout, pad, Tout = _check_sizes_and_pad(c, "self", input_, weight_, bias_, pad)
    _check_forward_window(c, input_, weight_, T, K, pad)
    c.shape_eq("out", out_, (Tout, B, Cout), "(Tout, B, Cout) =")
    cube_math_type = _cube_math(c, cubeMathType)
    if out_.numel == 0:
        return EmptyPlan(c.op)
    _check_gemm_limits(c, device, T, B, Cin, Cout, K, pad)
    c.memory(self=input_, weight=weight_, bias=bias_, out=out_)
    c.output("out", out_, self=input_, weight=weight_, bias=bias_)
    compute = promote(input_, weight_, bias_)
    workspace = _workspace(device, compute, (input_, weight_, bias_), (out_,),
                           gpu.forward_workspace_bytes(T, B, Cin, Cout, K, pad, compute, cube_math_type))
    return ConvTbcPlan(
        tensors=tensors, workspace=workspace, T=T, B=B, Cin=Cin, K=K, Cout=Cout, pad=pad,
        cube_math_type=cube_math_type, compute=compute, input=input_, weight=weight_, bias=bias_, out=out_)


aclnnConvTbcBackwardGetWorkspaceSize = make_get_workspace_size(ConvTbcBackwardPlan, _build_backward)
aclnnConvTbcBackward = make_execute("aclnnConvTbcBackward")
aclnnConvTbcGetWorkspaceSize = make_get_workspace_size(ConvTbcPlan, _build_forward)
aclnnConvTbc = make_execute("aclnnConvTbc")
