"""aclnnConvTbcBackward and aclnnConvTbc: checks in CANN's order, dtype/stride staging, then the plan.

Owns the host side of ConvTBC (spec/ops.md §4): validation (161001 for a null tensor; 161002 for
dtypes outside FLOAT/FLOAT16/BF16, formats other than ND/NCL for the 3-D tensors or ND for
bias/gradBias, an empty `self`, ranks and shape relations, pad < 0, Tout < 0, cubeMathType outside
0..3), the memory/alias checks, and the staging around the GPU plan of `ops/conv_tbc_gpu.py`,
which takes contiguous tensors of ONE dtype:
  * mixed dtypes among self/input/weight (forward: input/weight/bias) are promoted (all equal: that
    dtype; otherwise float32) and non-contiguous or converted operands are copied into the
    workspace by `tbc_pad_copy<Tin, Tout>` (strided gather + conversion in one pass);
  * outputs of another dtype or non-contiguous are produced in a workspace buffer, converted by
    `tbc_pad_copy` and, if strided, scattered with `Staging`. Each output keeps its own dtype.
The cpu device runs `reference/conv_tbc.py` (float32 BLAS math whatever cubeMathType says).

cubeMathType -> GPU matrix precision (kernels/gemm.compute_mode): 0 KEEP_DTYPE: fp32 inputs in true
fp32 (CUBLAS_COMPUTE_32F); 1 ALLOW_FP32_DOWN_PRECISION and 3 USE_HF32: TF32 tensor cores
(COMPUTE_32F_FAST_TF32); 2 USE_FP16: fp32 operands rounded to fp16, fp32 accumulation. fp16 and
bf16 inputs always run their own tensor-core path with fp32 accumulation.

Why the GEMM plan beats PyTorch's conv_tbc backward (2K separate products, a zero-filled gradInput
and clipped narrow()/addmm_ per tap): gradWeight is ONE strided-batched GEMM over the K taps (K
times more tiles in flight for the small Cin x Cout outputs, one launch), and gradInput is K
full-range GEMMs accumulating into one buffer whose first tap writes with beta = 0 (no zero fill,
one full pass of T*B*Cin saved; fp16/bf16 accumulate in fp32 and round once); gradBias is one
deterministic column reduction. Details: the docstring of ops/conv_tbc_gpu.py.

Empty input/weight (T, Cin or K == 0 with a non-empty self): gradInput = gradWeight = 0 and
gradBias = sum of self over time and batch (API.md §6; CANN writes B*Tout), on every device.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..executor import make_execute, make_get_workspace_size
from ..kernels.context import ptr
from ..reference import conv_tbc as reference
from ..status import aclDataType as D
from ..status import aclFormat as F
from ..tensor import aclTensor
from . import conv_tbc_gpu as gpu
from .checks import INVALID, Checks
from .plan import EmptyPlan, Plan, Staging, WorkspaceLayout, host_array, tensor_ptr, write_out

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
FORMATS_3D = (F.ACL_FORMAT_ND, F.ACL_FORMAT_NCL)
FORMATS_1D = (F.ACL_FORMAT_ND,)
CUBE_MATH = {0: "KEEP_DTYPE", 1: "ALLOW_FP32_DOWN_PRECISION", 2: "USE_FP16", 3: "USE_HF32"}


def _np(tensor: aclTensor) -> np.dtype:
    return dtypes.to_numpy(tensor.dtype)


def promote(*tensors: aclTensor) -> np.dtype:
    """The compute dtype of the GPU plan: the common dtype, float32 when they differ."""
    kinds = {_np(t) for t in tensors}
    return kinds.pop() if len(kinds) == 1 else np.dtype(np.float32)


def _cube_math(c: Checks, value: Any) -> int:
    v = c.integer("cubeMathType", value)
    if v not in CUBE_MATH:
        c.fail(INVALID, f"cubeMathType {v} must be 0 (KEEP_DTYPE), 1 (ALLOW_FP32_DOWN_PRECISION), "
                        "2 (USE_FP16) or 3 (USE_HF32)")
    return v


# ------------------------------------------------------------------------------ GPU staging
class _Io:
    """Where the one-dtype contiguous GPU plan reads its operands and writes its results."""

    def __init__(self, compute: np.dtype, gpu_device: bool):
        self.compute = compute
        self.layout = WorkspaceLayout()
        self.staging = Staging(self.layout)
        self.inputs: list[tuple[aclTensor, int | None]] = []     # (tensor, ws offset of the converted copy)
        self.outputs: list[tuple[aclTensor, int | None]] = []    # (tensor, ws offset of the compute buffer)
        self.plan_offset = 0
        self.gpu = gpu_device

    def _converted(self, t: aclTensor) -> bool:
        return t.numel > 0 and (_np(t) != self.compute or not t.is_contiguous())

    def add_in(self, t: aclTensor) -> None:
        off = self.layout.take(t.numel * self.compute.itemsize) if self._converted(t) else None
        self.inputs.append((t, off))

    def add_out(self, t: aclTensor) -> None:
        if not self._converted(t):
            self.outputs.append((t, None))
            return
        off = self.layout.take(t.numel * self.compute.itemsize) if _np(t) != self.compute else None
        if not t.is_contiguous():
            self.staging.need_out(t)
        self.outputs.append((t, off))

    def finish(self, plan_bytes: int) -> int:
        self.plan_offset = self.layout.take(0)
        self.layout.take(plan_bytes)
        return self.layout.size

    def _where(self, entries, t: aclTensor, ws: int) -> int:
        for tensor, off in entries:
            if tensor is t:
                if off is not None:
                    return ws + off
                return self.staging.address(t, ws) if t.numel else 0
        raise KeyError(t)

    def address_in(self, t: aclTensor, ws: int) -> int:
        return self._where(self.inputs, t, ws)

    def address_out(self, t: aclTensor, ws: int) -> int:
        return self._where(self.outputs, t, ws)

    def gather(self, ctx: Any, ws: int) -> None:
        """Strided gather + conversion of every operand that needs it (one tbc_pad_copy each)."""
        for t, off in self.inputs:
            if off is None:
                continue
            s = t.strides
            ctx.launch(gpu.FILE, f"tbc_pad_copy<{gpu._ct(_np(t))}, {gpu._ct(self.compute)}>",
                       gpu._grid(ctx, t.numel), (gpu.BLOCK, 1, 1), _copy_args(t, tensor_ptr(t), ws + off, s))

    def scatter(self, ctx: Any, ws: int) -> None:
        for t, off in self.outputs:
            if off is not None:   # convert the compute-dtype result into the output's dtype
                dst = self.staging.address(t, ws)
                shape = _as3(t.shape)
                ctx.launch(gpu.FILE, f"tbc_pad_copy<{gpu._ct(self.compute)}, {gpu._ct(_np(t))}>",
                           gpu._grid(ctx, t.numel), (gpu.BLOCK, 1, 1),
                           _copy_args_dense(shape, ws + off, dst))
        self.staging.scatter(ctx, [t for t, _ in self.outputs], ws)


def _as3(shape) -> tuple[int, int, int]:
    return tuple(shape) if len(shape) == 3 else (1, 1, int(shape[0]))  # type: ignore[return-value]


def _copy_args(t: aclTensor, src: int, dst: int, strides) -> tuple:
    if t.rank == 3:
        (R, B, C), (st, sb, sc) = t.shape, strides
    else:
        R, B, C, st, sb, sc = 1, 1, t.shape[0], 0, 0, strides[0]
    return (ptr(src), ptr(dst), np.int64(R), np.int64(0), np.int64(R), np.int64(B), np.int64(C),
            np.int64(st), np.int64(sb), np.int64(sc))


def _copy_args_dense(shape, src: int, dst: int) -> tuple:
    R, B, C = shape
    return (ptr(src), ptr(dst), np.int64(R), np.int64(0), np.int64(R), np.int64(B), np.int64(C),
            np.int64(B * C), np.int64(C), np.int64(1))


def _gemm_limits(c: Checks, T, B, Cin, Cout, K, pad) -> None:
    msg = gpu.check_gemm_limits(T, B, Cin, Cout, K, pad)
    if msg is not None:
        c.fail(INVALID, msg)


# ------------------------------------------------------------------------------ plans
class ConvTbcBackwardPlan(Plan):
    op = "aclnnConvTbcBackward"

    def __init__(self, device: Any, grad: aclTensor, input: aclTensor, weight: aclTensor, bias: aclTensor,
                 pad: int, cube_math_type: int, grad_input: aclTensor, grad_weight: aclTensor,
                 grad_bias: aclTensor):
        self.grad, self.input, self.weight, self.bias = grad, input, weight, bias
        self.grad_input, self.grad_weight, self.grad_bias = grad_input, grad_weight, grad_bias
        self.pad, self.cube_math_type = pad, cube_math_type
        self.tensors = {"self": grad, "input": input, "weight": weight, "bias": bias, "gradInput": grad_input,
                        "gradWeight": grad_weight, "gradBias": grad_bias}
        self.T, self.B, self.Cin = input.shape
        self.K, _, self.Cout = weight.shape
        self.compute = promote(grad, input, weight)
        self.io = None
        self.workspace_size = 0
        if device.kind != "cpu":
            io = _Io(self.compute, True)
            for t in (grad, input, weight):
                io.add_in(t)
            for t in (grad_input, grad_weight, grad_bias):
                io.add_out(t)
            self.workspace_size = io.finish(gpu.backward_workspace_bytes(
                self.T, self.B, self.Cin, self.Cout, self.K, pad, self.compute, cube_math_type))
            self.io = io

    def run_host(self, device: Any, workspace: int) -> None:
        g, x, w = (host_array(device, t) for t in (self.grad, self.input, self.weight))
        gi_v, gw_v, gb_v = (host_array(device, t) for t in (self.grad_input, self.grad_weight, self.grad_bias))
        # results come back in the operand's dtype: hand over fp32 where the output dtype differs
        # so that each result is rounded once, to its output's dtype
        if gi_v.dtype != x.dtype:
            x = x.astype(np.float32)
        if gw_v.dtype != w.dtype:
            w = w.astype(np.float32)
        gi, gw, gb = reference.conv_tbc_backward(g, x, w, np.empty(0, gb_v.dtype), self.pad)
        write_out(gi_v, gi)
        write_out(gw_v, gw)
        write_out(gb_v, gb)

    def run_kernels(self, ctx: Any, workspace: int) -> None:
        io = self.io
        io.gather(ctx, workspace)
        gpu.launch_backward(
            ctx, T=self.T, B=self.B, Cin=self.Cin, Cout=self.Cout, K=self.K, pad=self.pad, dtype=self.compute,
            cube_math_type=self.cube_math_type, grad=io.address_in(self.grad, workspace),
            input=io.address_in(self.input, workspace), weight=io.address_in(self.weight, workspace),
            grad_input=io.address_out(self.grad_input, workspace),
            grad_weight=io.address_out(self.grad_weight, workspace),
            grad_bias=io.address_out(self.grad_bias, workspace), workspace_ptr=workspace + io.plan_offset)
        io.scatter(ctx, workspace)


class ConvTbcPlan(Plan):
    op = "aclnnConvTbc"

    def __init__(self, device: Any, input: aclTensor, weight: aclTensor, bias: aclTensor, pad: int,
                 out: aclTensor, cube_math_type: int):
        self.input, self.weight, self.bias, self.out = input, weight, bias, out
        self.pad, self.cube_math_type = pad, cube_math_type
        self.tensors = {"self": input, "weight": weight, "bias": bias, "out": out}
        self.T, self.B, self.Cin = input.shape
        self.K, _, self.Cout = weight.shape
        self.compute = promote(input, weight, bias)
        self.io = None
        self.workspace_size = 0
        if device.kind != "cpu":
            io = _Io(self.compute, True)
            for t in (input, weight, bias):
                io.add_in(t)
            io.add_out(out)
            self.workspace_size = io.finish(gpu.forward_workspace_bytes(
                self.T, self.B, self.Cin, self.Cout, self.K, pad, self.compute, cube_math_type))
            self.io = io

    def run_host(self, device: Any, workspace: int) -> None:
        x, w, b = (host_array(device, t) for t in (self.input, self.weight, self.bias))
        y_v = host_array(device, self.out)
        if y_v.dtype != x.dtype:
            x = x.astype(np.float32)
        write_out(y_v, reference.conv_tbc(x, w, b, self.pad))

    def run_kernels(self, ctx: Any, workspace: int) -> None:
        io = self.io
        io.gather(ctx, workspace)
        gpu.launch_forward(
            ctx, T=self.T, B=self.B, Cin=self.Cin, Cout=self.Cout, K=self.K, pad=self.pad, dtype=self.compute,
            cube_math_type=self.cube_math_type, input=io.address_in(self.input, workspace),
            weight=io.address_in(self.weight, workspace), bias=io.address_in(self.bias, workspace),
            out=io.address_out(self.out, workspace), workspace_ptr=workspace + io.plan_offset)
        io.scatter(ctx, workspace)


# ------------------------------------------------------------------------------ phase 1
def _build_backward(device: Any, self: Any, input: Any, weight: Any, bias: Any, pad: Any, cubeMathType: Any,
                    gradInput: Any, gradWeight: Any, gradBias: Any) -> Plan:
    """aclnnConvTbcBackwardGetWorkspaceSize(self, input, weight, bias, pad, cubeMathType, gradInput,
    gradWeight, gradBias) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnConvTbcBackward", device)
    c.not_null(self=self, input=input, weight=weight, bias=bias, gradInput=gradInput, gradWeight=gradWeight,
               gradBias=gradBias)
    named = {n: c.tensor(n, t) for n, t in (("self", self), ("input", input), ("weight", weight),
                                             ("bias", bias), ("gradInput", gradInput),
                                             ("gradWeight", gradWeight), ("gradBias", gradBias))}
    dy, x, w, b, gi, gw, gb = named.values()
    for name in ("self", "input", "weight", "gradInput", "gradWeight", "gradBias", "bias"):
        c.dtype_in(name, named[name], FLOAT_TYPES)
    for name in ("self", "input", "weight", "gradInput", "gradWeight"):
        c.format_in(name, named[name], FORMATS_3D)
    for name in ("bias", "gradBias"):
        c.format_in(name, named[name], FORMATS_1D)
    if dy.numel == 0:
        c.fail(INVALID, f"self (the output gradient) must not be empty, got shape {list(dy.shape)}")
    for name in ("self", "input", "weight", "gradInput", "gradWeight"):
        c.rank(name, named[name], 3)
    for name in ("bias", "gradBias"):
        c.rank(name, named[name], 1)
    T, B, Cin = x.shape
    K, wcin, Cout = w.shape
    if wcin != Cin:
        c.fail(INVALID, f"weight shape {list(w.shape)}: dim 1 must equal input's channels {Cin} "
                        f"(input shape {list(x.shape)})")
    if b.shape[0] != Cout:
        c.fail(INVALID, f"bias shape {list(b.shape)} must equal weight's output channels [{Cout}]")
    pad = c.integer("pad", pad)
    if pad < 0:
        c.fail(INVALID, f"pad {pad} must be >= 0")
    Tout = reference.out_len(T, K, pad)
    if Tout < 0:
        c.fail(INVALID, f"output length Tout = T + 2*pad - K + 1 = {T} + {2 * pad} - {K} + 1 = {Tout} must be >= 0")
    c.shape_eq("self", dy, (Tout, B, Cout), "(Tout, B, Cout) =")
    c.shape_eq("gradInput", gi, x.shape, "input shape")
    c.shape_eq("gradWeight", gw, w.shape, "weight shape")
    c.shape_eq("gradBias", gb, b.shape, "bias shape")
    cube = _cube_math(c, cubeMathType)
    if device.kind != "cpu":
        _gemm_limits(c, T, B, Cin, Cout, K, pad)
    c.memory(self=dy, input=x, weight=w, bias=b, gradInput=gi, gradWeight=gw, gradBias=gb)
    ins = dict(self=dy, input=x, weight=w, bias=b)
    c.output("gradInput", gi, **ins, gradWeight=gw, gradBias=gb)
    c.output("gradWeight", gw, **ins, gradBias=gb)
    c.output("gradBias", gb, **ins)
    return ConvTbcBackwardPlan(device, dy, x, w, b, pad, cube, gi, gw, gb)


def _build_forward(device: Any, self: Any, weight: Any, bias: Any, pad: Any, out: Any, cubeMathType: Any) -> Plan:
    """aclnnConvTbcGetWorkspaceSize(self, weight, bias, pad, out, cubeMathType) -> (status, workspaceSize,
    executor); `self` is the input (T, B, Cin)."""
    c = Checks("aclnnConvTbc", device)
    c.not_null(self=self, weight=weight, bias=bias, out=out)
    named = {n: c.tensor(n, t) for n, t in (("self", self), ("weight", weight), ("bias", bias), ("out", out))}
    x, w, b, y = named.values()
    for name in ("self", "weight", "bias", "out"):
        c.dtype_in(name, named[name], FLOAT_TYPES)
    for name in ("self", "weight", "out"):
        c.format_in(name, named[name], FORMATS_3D)
    c.format_in("bias", b, FORMATS_1D)
    for name in ("self", "weight", "out"):
        c.rank(name, named[name], 3)
    c.rank("bias", b, 1)
    T, B, Cin = x.shape
    K, wcin, Cout = w.shape
    if wcin != Cin:
        c.fail(INVALID, f"weight shape {list(w.shape)}: dim 1 must equal self's channels {Cin} "
                        f"(self shape {list(x.shape)})")
    if b.shape[0] != Cout:
        c.fail(INVALID, f"bias shape {list(b.shape)} must equal weight's output channels [{Cout}]")
    pad = c.integer("pad", pad)
    if pad < 0:
        c.fail(INVALID, f"pad {pad} must be >= 0")
    Tout = reference.out_len(T, K, pad)
    if Tout < 0:
        c.fail(INVALID, f"output length Tout = T + 2*pad - K + 1 = {T} + {2 * pad} - {K} + 1 = {Tout} must be >= 0")
    c.shape_eq("out", y, (Tout, B, Cout), "(Tout, B, Cout) =")
    cube = _cube_math(c, cubeMathType)
    if y.numel == 0:
        return EmptyPlan(c.op)
    if device.kind != "cpu":
        _gemm_limits(c, T, B, Cin, Cout, K, pad)
    c.memory(self=x, weight=w, bias=b, out=y)
    c.output("out", y, self=x, weight=w, bias=b)
    return ConvTbcPlan(device, x, w, b, pad, y, cube)


aclnnConvTbcBackwardGetWorkspaceSize = make_get_workspace_size("aclnnConvTbcBackward", _build_backward)
aclnnConvTbcBackward = make_execute("aclnnConvTbcBackward")
aclnnConvTbcGetWorkspaceSize = make_get_workspace_size("aclnnConvTbc", _build_forward)
aclnnConvTbc = make_execute("aclnnConvTbc")
