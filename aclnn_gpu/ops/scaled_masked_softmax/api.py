"""aclnnScaledMaskedSoftmaxBackward and aclnnScaledMaskedSoftmax: checks in CANN's order, then the plan.

Backward (docs/OPERATORS.md §5, docs/API.md §7), per row of the last axis (length S2):

    out = scale * y * (gradOutput - sum_row(gradOutput * y)), then exactly 0 wherever masked

with the row sum over the whole row (masked positions included) and fp32 math. Forward:
`y = softmax(scale * x)` with masked positions excluded; a fully masked row gives zeros. The mask is
BOOL, 4-D (Bm, Nm, S1, S2), Bm in {B, 1}, Nm in {N, 1}; true means "masked out".

Checks (backward; the forward mirrors them with x / y), in this order:
  1. gradOutput, y, out null -> 161001; mask null -> 161001 unless fixTriuMask is true (then the
     causal mask alone is used, docs/API.md §7);
  2. gradOutput / y / out dtype not FLOAT, FLOAT16, BFLOAT16, mask not BOOL -> 161002;
  3. a FRACTAL_NZ format -> 161002;
  4. gradOutput rank != 4, y / out shape != gradOutput shape, mask rank != 4, mask's last two dims
     != (S1, S2), mask dims 0/1 not in {B, 1} / {N, 1} -> 161002;
  5. fixTriuMask not a bool, scale not a real number -> 161002 (fixTriuMask=True is ACCEPTED: the
     causal mask j > i is built in-kernel, or-ed with the given mask);
  6. y dtype != gradOutput dtype -> 161002 (CANN's inner op); out dtype != gradOutput dtype -> 161002
     (this library's decision: CANN would silently write gradOutput-dtype bytes into `out`);
  7. empty output -> success, workspace 0, nothing launched;
  8. memory (every range in a live device allocation) and aliasing (out overlapping itself or an
     input) -> 161002.
There is no S2 <= 4096 limit (docs/API.md §7): any row length works on every device.

Devices: cpu runs `reference/scaled_masked_softmax.py` on host views (strided views read in place,
a broadcast mask is never expanded); cuda and emulated run the GPU plan of
`ops/scaled_masked_softmax/launch.py`, which wants contiguous tensors: any strided operand (the mask
included) is gathered into the workspace (`WorkspaceBuilder.stage`) and a strided output is produced there and
scattered back. A mask whose batch or head dim is a stride-0 broadcast view is passed to the kernels
as Bm = 1 / Nm = 1 instead of being expanded. The workspace is zero unless something is staged.
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...base import dtypes
from ...executor import make_execute, make_get_workspace_size
from ...reference import scaled_masked_softmax as reference
from ...base.status import aclDataType as D
from ...base.status import aclFormat as F
from ...meta.tensor import aclTensor
from . import launch as gpu
from ...plans.checks import INVALID, Checks
from ...plans.plan import STRIDED_COPY, NO_WORKSPACE, EmptyPlan, Plan, WorkspaceBuilder, host_array, write_out

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
MASK_TYPES = (D.ACL_BOOL,)
NZ_FORMATS = tuple(f for f in F if f.name.startswith("ACL_FORMAT_FRACTAL_NZ"))


def _fix_flag(value: Any) -> bool:
    """fixTriuMask as far as the null check of `mask` needs it (its type is checked later)."""
    return isinstance(value, (bool, numbers.Integral)) and bool(value)


def _mask_view(mask: aclTensor | None) -> tuple[aclTensor | None, int, int, bool]:
    """(mask, Bm, Nm, needs staging) for the GPU plan. A dim of size > 1 with stride 0 (an expanded
    view) is passed as a broadcast dim; whatever else is not contiguous is staged."""
    if mask is None:
        return None, 1, 1, False
    Bm, Nm, S1, S2 = mask.shape
    sb, sn, s1, s2 = mask.strides
    if Bm > 1 and sb == 0:
        Bm = 1
    if Nm > 1 and sn == 0:
        Nm = 1
    # the kernels index the mask as a contiguous (Bm, Nm, S1, S2) block
    want = (Nm * S1 * S2, S1 * S2, S2, 1)
    dense = all(n <= 1 or s == w for n, s, w in zip((Bm, Nm, S1, S2), (sb, sn, s1, s2), want))
    return mask, Bm, Nm, not dense


@dataclass(frozen=True, eq=False, kw_only=True)
class _SmsmPlan(Plan):
    """Shared by both directions: `inputs` are the float operands, `out` the one output; Bm, Nm the
    mask's batch and head sizes as the kernels index it (1 for a broadcast dim)."""

    kernel_files: ClassVar[tuple[str, ...]] = (gpu.FILE, STRIDED_COPY.file)

    inputs: tuple[aclTensor, ...]
    mask: aclTensor | None
    out: aclTensor
    scale: float
    fix_triu_mask: bool
    B: int
    N: int
    S1: int
    S2: int
    Bm: int
    Nm: int
    dtype: np.dtype

    def _mask_host(self, device: Any):
        return None if self.mask is None else host_array(device, self.mask)

    def _launch_args(self, workspace: int) -> dict[str, Any]:
        """The kernel arguments both launches share."""
        return dict(mask_ptr=self.workspace.address(self.mask, workspace), workspace_ptr=workspace, B=self.B,
                    N=self.N, S1=self.S1, S2=self.S2, Bm=self.Bm, Nm=self.Nm, dtype=self.dtype, scale=self.scale,
                    fix_triu_mask=self.fix_triu_mask)


@dataclass(frozen=True, eq=False, kw_only=True)
class ScaledMaskedSoftmaxBackwardPlan(_SmsmPlan):
    op: ClassVar[str] = "aclnnScaledMaskedSoftmaxBackward"
    outputs: ClassVar[tuple[str, ...]] = ("out",)

    def run_host(self, device: Any, workspace: int) -> None:
        grad_output, y = (host_array(device, t) for t in self.inputs)
        reference.scaled_masked_softmax_backward(grad_output, y, self._mask_host(device), self.scale,
                                                 self.fix_triu_mask, out=host_array(device, self.out))

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        grad_output, y = self.inputs
        ws = self.workspace
        gpu.launch_backward(ctx, grad_ptr=ws.address(grad_output, workspace), y_ptr=ws.address(y, workspace),
                            out_ptr=ws.address(self.out, workspace), **self._launch_args(workspace))


@dataclass(frozen=True, eq=False, kw_only=True)
class ScaledMaskedSoftmaxPlan(_SmsmPlan):
    op: ClassVar[str] = "aclnnScaledMaskedSoftmax"
    outputs: ClassVar[tuple[str, ...]] = ("y",)

    def run_host(self, device: Any, workspace: int) -> None:
        result = reference.scaled_masked_softmax(host_array(device, self.inputs[0]), self._mask_host(device),
                                                 self.scale, self.fix_triu_mask)
        write_out(host_array(device, self.out), result)

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_forward(ctx, x_ptr=ws.address(self.inputs[0], workspace), y_ptr=ws.address(self.out, workspace),
                           **self._launch_args(workspace))


def _plan(plan_type: type[_SmsmPlan], device: Any, tensors: Mapping[str, aclTensor | None],
          inputs: tuple[aclTensor, ...], mask: aclTensor | None, out: aclTensor, scale: float,
          fix_triu_mask: bool) -> _SmsmPlan:
    """Either direction's plan: on cuda / emulated the workspace stages strided inputs, a mask the
    kernels cannot index in place (`_mask_view`) and a strided output."""
    B, N, S1, S2 = out.shape
    workspace = NO_WORKSPACE
    Bm = Nm = 1
    if device.kind != "cpu":
        builder = WorkspaceBuilder()
        builder.stage_all(inputs, ())
        mask_view, Bm, Nm, mask_staged = _mask_view(mask)
        if mask_view is not None and mask_staged:  # the staged copy is the whole contiguous mask
            builder.stage(mask_view)
            Bm, Nm = mask_view.shape[0], mask_view.shape[1]
        builder.stage(out, output=True)
        builder.reserve("kernels", gpu.workspace_bytes(B, N, S1, S2, dtypes.to_numpy(out.dtype)))
        workspace = builder.build()
    return plan_type(tensors=tensors, workspace=workspace, inputs=inputs, mask=mask, out=out, scale=scale,
                     fix_triu_mask=fix_triu_mask, B=B, N=N, S1=S1, S2=S2, Bm=Bm, Nm=Nm,
                     dtype=dtypes.to_numpy(out.dtype))


# ------------------------------------------------------------------------------ shared checks
def _validate(c: Checks, first: str, floats: dict[str, Any], mask: Any, scale: Any, fixTriuMask: Any
              ) -> tuple[dict[str, aclTensor], aclTensor | None, float, bool]:
    """Steps 1-6 of the module docstring; `floats` are the float tensors in C order, `first` the one
    whose shape and dtype the others must match. Returns (tensors, mask, scale, fixTriuMask)."""
    names = list(floats)
    # null checks in C order: the float inputs, mask (unless fixTriuMask makes it optional), the output
    nulls = {name: floats[name] for name in names[:-1]}
    nulls.update({} if _fix_flag(fixTriuMask) else {"mask": mask})
    nulls[names[-1]] = floats[names[-1]]
    c.not_null(**nulls)
    tensors = {name: c.tensor(name, value) for name, value in floats.items()}
    mask_ = None if mask is None else c.tensor("mask", mask)
    for name in names:
        c.dtype_in(name, tensors[name], FLOAT_TYPES)
    if mask_ is not None:
        c.dtype_in("mask", mask_, MASK_TYPES)
    for name, tensor in list(tensors.items()) + ([("mask", mask_)] if mask_ is not None else []):
        if tensor.format in NZ_FORMATS:
            c.fail(INVALID, f"{name} format {F(tensor.format).name} is not supported (ND tensors only)")
    reference_tensor = tensors[first]
    c.rank(first, reference_tensor, 4)
    B, N, S1, S2 = reference_tensor.shape
    shape = list(reference_tensor.shape)
    for name in names:
        if name != first:
            c.shape_eq(name, tensors[name], reference_tensor.shape, f"{first} shape")
    if mask_ is not None:
        c.rank("mask", mask_, 4)
        if tuple(mask_.shape[2:]) != (S1, S2):
            c.fail(INVALID, f"mask shape {list(mask_.shape)}: the last two dims must equal (S1, S2) = ({S1}, {S2}) "
                            f"of {first} shape {shape}")
        if mask_.shape[0] not in (B, 1) or mask_.shape[1] not in (N, 1):
            c.fail(INVALID, f"mask shape {list(mask_.shape)}: dim 0 must be {B} or 1 and dim 1 must be {N} or 1 "
                            f"to broadcast over {first} shape {shape}")
    fix_triu_mask = c.boolean("fixTriuMask", fixTriuMask)
    scale_value = c.real("scale", scale)
    for name in names:
        if name != first:
            c.same_dtype(name, tensors[name], first, reference_tensor)
    return tensors, mask_, scale_value, fix_triu_mask


def _build_backward(device: Any, gradOutput: Any, y: Any, mask: Any, scale: Any, fixTriuMask: Any,
                    out: Any) -> Plan | EmptyPlan:
    """aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(gradOutput, y, mask, scale, fixTriuMask, out)
    -> (status, workspaceSize, executor)."""
    c = Checks("aclnnScaledMaskedSoftmaxBackward", device)
    tensors, mask_, scale_value, fix_triu_mask = _validate(
        c, "gradOutput", {"gradOutput": gradOutput, "y": y, "out": out}, mask, scale, fixTriuMask)
    grad_output, y_, out_ = tensors["gradOutput"], tensors["y"], tensors["out"]
    if out_.numel == 0:
        return EmptyPlan(c.op)
    c.memory(gradOutput=grad_output, y=y_, mask=mask_, out=out_)
    c.output("out", out_, gradOutput=grad_output, y=y_, mask=mask_)
    return _plan(ScaledMaskedSoftmaxBackwardPlan, device, {"gradOutput": grad_output, "y": y_, "mask": mask_,
                                                           "out": out_},
                 (grad_output, y_), mask_, out_, scale_value, fix_triu_mask)


def _build_forward(device: Any, x: Any, mask: Any, scale: Any, fixTriuMask: Any, y: Any) -> Plan | EmptyPlan:
    """aclnnScaledMaskedSoftmaxGetWorkspaceSize(x, mask, scale, fixTriuMask, y)
    -> (status, workspaceSize, executor)."""
    c = Checks("aclnnScaledMaskedSoftmax", device)
    tensors, mask_, scale_value, fix_triu_mask = _validate(c, "x", {"x": x, "y": y}, mask, scale, fixTriuMask)
    x_, y_ = tensors["x"], tensors["y"]
    if y_.numel == 0:
        return EmptyPlan(c.op)
    c.memory(x=x_, mask=mask_, y=y_)
    c.output("y", y_, x=x_, mask=mask_)
    return _plan(ScaledMaskedSoftmaxPlan, device, {"x": x_, "mask": mask_, "y": y_}, (x_,), mask_, y_, scale_value,
                 fix_triu_mask)


aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize = make_get_workspace_size(ScaledMaskedSoftmaxBackwardPlan,
                                                                                  _build_backward)
aclnnScaledMaskedSoftmaxBackward = make_execute("aclnnScaledMaskedSoftmaxBackward")
aclnnScaledMaskedSoftmaxGetWorkspaceSize = make_get_workspace_size(ScaledMaskedSoftmaxPlan, _build_forward)
aclnnScaledMaskedSoftmax = make_execute("aclnnScaledMaskedSoftmax")

__all__ = ["aclnnScaledMaskedSoftmax", "aclnnScaledMaskedSoftmaxGetWorkspaceSize",
           "aclnnScaledMaskedSoftmaxBackward", "aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize"]
