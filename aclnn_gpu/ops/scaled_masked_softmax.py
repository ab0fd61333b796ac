"""aclnnScaledMaskedSoftmaxBackward and aclnnScaledMaskedSoftmax: checks in CANN's order, then the plan.

Backward (spec/ops.md §5, API.md §6-§7), per row of the last axis (length S2):

    out = scale * y * (gradOutput - sum_row(gradOutput * y)), then exactly 0 wherever masked

with the row sum over the whole row (masked positions included) and fp32 math. Forward:
`y = softmax(scale * x)` with masked positions excluded; a fully masked row gives zeros. The mask is
BOOL, 4-D (Bm, Nm, S1, S2), Bm in {B, 1}, Nm in {N, 1}; true means "masked out".

Checks (backward; the forward mirrors them with x / y), in this order:
  1. gradOutput, y, out null -> 161001; mask null -> 161001 unless fixTriuMask is true (then the
     causal mask alone is used, API.md §7);
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
There is no S2 <= 4096 limit (API.md §6): any row length works on every device.

Devices: cpu runs `reference/scaled_masked_softmax.py` on host views (strided views read in place,
a broadcast mask is never expanded); cuda and emulated run the GPU plan of
`ops/scaled_masked_softmax_gpu.py`, which wants contiguous tensors: any strided operand (the mask
included) is gathered into the workspace by `Staging` and a strided output is produced there and
scattered back. A mask whose batch or head dim is a stride-0 broadcast view is passed to the kernels
as Bm = 1 / Nm = 1 instead of being expanded. The workspace is zero unless something is staged.
"""
from __future__ import annotations

import numbers
from typing import Any

from .. import dtypes
from ..executor import make_execute, make_get_workspace_size
from ..reference import scaled_masked_softmax as reference
from ..status import aclDataType as D
from ..status import aclFormat as F
from ..tensor import aclTensor
from . import scaled_masked_softmax_gpu as gpu
from .checks import INVALID, Checks
from .plan import EmptyPlan, Plan, Staging, WorkspaceLayout, host_array, write_out

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
MASK_TYPES = (D.ACL_BOOL,)
NZ_FORMATS = tuple(f for f in F if f.name.startswith("ACL_FORMAT_FRACTAL_NZ"))


def _fix_flag(value: Any) -> bool:
    """fixTriuMask as far as the null check of `mask` needs it (its type is checked later)."""
    return isinstance(value, (bool, numbers.Integral)) and bool(value)


def _mask_view(mask: aclTensor | None, B: int, N: int) -> tuple[aclTensor | None, int, int, bool]:
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


class _SmsmPlan(Plan):
    """Shared by both directions: `ins` are the float operands, `outs` the one output."""

    direction = "bwd"

    def _setup(self, device: Any, ins: tuple[aclTensor, ...], mask: aclTensor | None, out: aclTensor,
               scale: float, fix: bool) -> None:
        self.ins, self.mask, self.out = ins, mask, out
        self.scale, self.fix = scale, fix
        names = ("gradOutput", "y") if self.op == "aclnnScaledMaskedSoftmaxBackward" else ("x",)
        out_name = "out" if self.op == "aclnnScaledMaskedSoftmaxBackward" else "y"
        self.tensors = {**dict(zip(names, ins)), "mask": mask, out_name: out}
        self.B, self.N, self.S1, self.S2 = out.shape
        self.dtype = dtypes.to_numpy(out.dtype)
        self.workspace_size = 0
        self.staging = None
        if device.kind == "cpu":
            return
        layout = WorkspaceLayout()
        staging = Staging(layout)
        for t in ins:
            staging.need_in(t)
        mask_t, self.Bm, self.Nm, stage_mask = _mask_view(mask, self.B, self.N)
        self.mask_staged = stage_mask
        if stage_mask:
            staging.need_in(mask_t)
            self.Bm, self.Nm = mask_t.shape[0], mask_t.shape[1]
        staging.need_out(out)
        self.workspace_size = layout.size + gpu.workspace_bytes(self.B, self.N, self.S1, self.S2, self.dtype)
        self.staging = staging

    def _mask_host(self, device: Any):
        return None if self.mask is None else host_array(device, self.mask)

    def _gather(self, ctx: Any, workspace: int) -> None:
        self.staging.gather(ctx, list(self.ins) + ([self.mask] if self.mask_staged else []), workspace)

    def _mask_ptr(self, workspace: int) -> int:
        return 0 if self.mask is None else self.staging.address(self.mask, workspace)


class ScaledMaskedSoftmaxBackwardPlan(_SmsmPlan):
    op = "aclnnScaledMaskedSoftmaxBackward"

    def __init__(self, device: Any, grad: aclTensor, y: aclTensor, mask: aclTensor | None, out: aclTensor,
                 scale: float, fix: bool):
        self._setup(device, (grad, y), mask, out, scale, fix)

    def run_host(self, device: Any, workspace: int) -> None:
        g, y = (host_array(device, t) for t in self.ins)
        reference.scaled_masked_softmax_backward(g, y, self._mask_host(device), self.scale, self.fix,
                                                 out=host_array(device, self.out))

    def run_kernels(self, ctx: Any, workspace: int) -> None:
        grad, y = self.ins
        self._gather(ctx, workspace)
        gpu.launch_backward(ctx, grad_ptr=self.staging.address(grad, workspace),
                            y_ptr=self.staging.address(y, workspace), mask_ptr=self._mask_ptr(workspace),
                            out_ptr=self.staging.address(self.out, workspace), workspace_ptr=workspace,
                            B=self.B, N=self.N, S1=self.S1, S2=self.S2, Bm=self.Bm, Nm=self.Nm,
                            dtype=self.dtype, scale=self.scale, fix_triu_mask=self.fix)
        self.staging.scatter(ctx, [self.out], workspace)


class ScaledMaskedSoftmaxPlan(_SmsmPlan):
    op = "aclnnScaledMaskedSoftmax"

    def __init__(self, device: Any, x: aclTensor, mask: aclTensor | None, y: aclTensor, scale: float, fix: bool):
        self._setup(device, (x,), mask, y, scale, fix)

    def run_host(self, device: Any, workspace: int) -> None:
        result = reference.scaled_masked_softmax(host_array(device, self.ins[0]), self._mask_host(device),
                                                 self.scale, self.fix)
        write_out(host_array(device, self.out), result)

    def run_kernels(self, ctx: Any, workspace: int) -> None:
        x = self.ins[0]
        self._gather(ctx, workspace)
        gpu.launch_forward(ctx, x_ptr=self.staging.address(x, workspace), mask_ptr=self._mask_ptr(workspace),
                           y_ptr=self.staging.address(self.out, workspace), workspace_ptr=workspace,
                           B=self.B, N=self.N, S1=self.S1, S2=self.S2, Bm=self.Bm, Nm=self.Nm,
                           dtype=self.dtype, scale=self.scale, fix_triu_mask=self.fix)
        self.staging.scatter(ctx, [self.out], workspace)


# ------------------------------------------------------------------------------ shared checks
def _validate(c: Checks, first: str, floats: dict[str, Any], mask: Any, scale: Any, fixTriuMask: Any
              ) -> tuple[dict[str, aclTensor], aclTensor | None, float, bool]:
    """Steps 1-6 of the module docstring; `floats` are the float tensors in C order, `first` the one
    whose shape and dtype the others must match."""
    fix_hint = _fix_flag(fixTriuMask)
    names = list(floats)
    nulls = {n: floats[n] for n in names[:-1]}
    nulls.update({} if fix_hint else {"mask": mask})
    nulls[names[-1]] = floats[names[-1]]
    c.not_null(**nulls)
    ts = {n: c.tensor(n, v) for n, v in floats.items()}
    m = None if mask is None else c.tensor("mask", mask)
    for n in names:
        c.dtype_in(n, ts[n], FLOAT_TYPES)
    if m is not None:
        c.dtype_in("mask", m, MASK_TYPES)
    for n, t in list(ts.items()) + ([("mask", m)] if m is not None else []):
        if t.format in NZ_FORMATS:
            c.fail(INVALID, f"{n} format {F(t.format).name} is not supported (ND tensors only)")
    ref = ts[first]
    c.rank(first, ref, 4)
    B, N, S1, S2 = ref.shape
    for n in names:
        if n != first:
            c.shape_eq(n, ts[n], ref.shape, f"{first} shape")
    if m is not None:
        c.rank("mask", m, 4)
        if tuple(m.shape[2:]) != (S1, S2):
            c.fail(INVALID, f"mask shape {list(m.shape)}: the last two dims must equal (S1, S2) = ({S1}, {S2}) "
                            f"of {first} shape {list(ref.shape)}")
        if m.shape[0] not in (B, 1) or m.shape[1] not in (N, 1):
            c.fail(INVALID, f"mask shape {list(m.shape)}: dim 0 must be {B} or 1 and dim 1 must be {N} or 1 "
                            f"to broadcast over {first} shape {list(ref.shape)}")
    fix = c.boolean("fixTriuMask", fixTriuMask)
    value = c.real("scale", scale)
    for n in names:
        if n != first:
            c.same_dtype(n, ts[n], first, ref)
    return ts, m, value, fix


def _build_backward(device: Any, gradOutput: Any, y: Any, mask: Any, scale: Any, fixTriuMask: Any,
                    out: Any) -> Plan:
    """aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(gradOutput, y, mask, scale, fixTriuMask, out)
    -> (status, workspaceSize, executor)."""
    c = Checks("aclnnScaledMaskedSoftmaxBackward", device)
    ts, m, value, fix = _validate(c, "gradOutput", {"gradOutput": gradOutput, "y": y, "out": out}, mask, scale,
                                  fixTriuMask)
    g, y_, out_ = ts["gradOutput"], ts["y"], ts["out"]
    if out_.numel == 0:
        return EmptyPlan(c.op)
    c.memory(gradOutput=g, y=y_, mask=m, out=out_)
    c.output("out", out_, gradOutput=g, y=y_, mask=m)
    return ScaledMaskedSoftmaxBackwardPlan(device, g, y_, m, out_, value, fix)


def _build_forward(device: Any, x: Any, mask: Any, scale: Any, fixTriuMask: Any, y: Any) -> Plan:
    """aclnnScaledMaskedSoftmaxGetWorkspaceSize(x, mask, scale, fixTriuMask, y)
    -> (status, workspaceSize, executor)."""
    c = Checks("aclnnScaledMaskedSoftmax", device)
    ts, m, value, fix = _validate(c, "x", {"x": x, "y": y}, mask, scale, fixTriuMask)
    x_, y_ = ts["x"], ts["y"]
    if y_.numel == 0:
        return EmptyPlan(c.op)
    c.memory(x=x_, mask=m, y=y_)
    c.output("y", y_, x=x_, mask=m)
    return ScaledMaskedSoftmaxPlan(device, x_, m, y_, value, fix)


aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize = make_get_workspace_size("aclnnScaledMaskedSoftmaxBackward",
                                                                           _build_backward)
aclnnScaledMaskedSoftmaxBackward = make_execute("aclnnScaledMaskedSoftmaxBackward")
aclnnScaledMaskedSoftmaxGetWorkspaceSize = make_get_workspace_size("aclnnScaledMaskedSoftmax", _build_forward)
aclnnScaledMaskedSoftmax = make_execute("aclnnScaledMaskedSoftmax")
