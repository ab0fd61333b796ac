"""aclnnKlDiv and aclnnKlDivBackward: checks in CANN's order, then the plan.

Owns the host side of KL divergence (docs/OPERATORS.md §3). On B = broadcast(self, target):
forward `out = reduce(target * (log(target) - self))` (logTarget: `exp(target) * (target - self)`;
0 * log 0 = 0), none giving shape B and sum / mean / batchmean one element (0-D or [1] out);
backward `out = sum_to(self.shape, -(e * gradOutput) * coef)`, e = target or exp(target);
coef 1 (none, sum), 1/numel(B) (mean), 1/B[0] (batchmean, CANN's divisor).
Codes: 161001 for a null tensor, 161002 for dtypes, ranks over 8, shapes that do not broadcast, a
gradOutput that would enlarge B, an out shape other than self's (backward) or than B / one element
(forward), and (this library's decision, docs/API.md §7) a reduction code outside 0..3.
The cpu device runs `reference/kl_div.py`; cuda and emulated run `ops/kl_div/launch.py`, whose kernels
index strided and broadcast views directly (no staging). Workspace: launch.py's formulas (0 or
its 512-byte tiling block, plus the forward's per-block partials for a reduction), asked for on
every device.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...executor import make_execute, make_get_workspace_size
from ...reference import kl_div as reference
from ...base.status import aclDataType as D
from ...meta.tensor import aclTensor
from . import launch
from ...plans.checks import INVALID, Checks, broadcast_shapes
from ...plans.plan import DERIVED, EmptyPlan, Plan, Workspace, WorkspaceBuilder, host_array, tensor_ptr, write_out

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE)
REDUCTIONS = {0: "none", 1: "mean", 2: "sum", 3: "batchmean"}


def _math_dtype(*tensors: aclTensor) -> np.dtype:
    """The reference's math precision: float64 when any operand is DOUBLE, else float32."""
    return np.dtype(np.float64) if any(t.dtype == D.ACL_DOUBLE for t in tensors) else np.dtype(np.float32)


def _kernel_operand(tensor: aclTensor) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    """A tensor as `launch` takes it: (address with view offset, shape, strides, dtype code)."""
    return tensor_ptr(tensor), tensor.shape, tensor.strides, int(tensor.dtype)


def _reduction(c: Checks, reduction: Any) -> int:
    value = c.integer("reduction", reduction)
    if value not in REDUCTIONS:
        c.fail(INVALID, f"reduction {value} must be 0 (none), 1 (mean), 2 (sum) or 3 (batchmean)")
    return value


def _broadcast_shape(c: Checks, self_: aclTensor, target: aclTensor) -> tuple[int, ...]:
    broadcast = broadcast_shapes(self_.shape, target.shape)
    if broadcast is None:
        c.fail(INVALID, f"self shape {list(self_.shape)} and target shape {list(target.shape)} do not broadcast")
    return broadcast


def _workspace(tiling_bytes: int) -> Workspace:
    """The launcher's tiling (and the forward's partials) at the workspace head; asked for on every device."""
    builder = WorkspaceBuilder()
    builder.reserve("tiling", tiling_bytes)
    return builder.build()


@dataclass(frozen=True, eq=False, kw_only=True)
class _KlDivPlan(Plan):
    """Both directions: the target, the output, the reduction; each direction adds the launcher's
    layout decisions (`launch.plan_*`), made once for the workspace size and the launch."""

    kernel_files: ClassVar[tuple[str, ...]] = (launch.FILE,)

    target: aclTensor
    out: aclTensor
    reduction: int
    log_target: bool
    math: np.dtype          # the reference's math precision


@dataclass(frozen=True, eq=False, kw_only=True)
class KlDivBackwardPlan(_KlDivPlan):
    op: ClassVar[str] = "aclnnKlDivBackward"
    outputs: ClassVar[tuple[str, ...]] = ("out",)
    grad_output: aclTensor
    self_shape: tuple[int, ...]
    layout: launch.BackwardLayout = field(metadata=DERIVED)   # from the fields above

    @classmethod
    def build(cls, grad_output: aclTensor, self_: aclTensor, target: aclTensor, out: aclTensor, reduction: int,
              log_target: bool) -> KlDivBackwardPlan:
        args = _backward_args(grad_output, self_.shape, target, out, reduction, log_target)
        layout = launch.plan_backward(**args)
        return cls(tensors={"gradOutput": grad_output, "self": self_, "target": target, "out": out},
                   workspace=_workspace(launch.backward_workspace_bytes(**args, layout=layout)), target=target,
                   out=out, reduction=reduction, log_target=log_target,
                   math=_math_dtype(grad_output, self_, target), layout=layout, grad_output=grad_output,
                   self_shape=self_.shape)

    def run_host(self, device: Any, workspace: int) -> None:
        reference.kl_div_backward(host_array(device, self.grad_output), host_array(device, self.target),
                                  self.self_shape, self.reduction, self.log_target, self.math,
                                  out=host_array(device, self.out))

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        launch.launch_backward(ctx, **_backward_args(self.grad_output, self.self_shape, self.target, self.out,
                                                     self.reduction, self.log_target),
                               workspace_ptr=self.workspace.at("tiling", workspace), layout=self.layout)


def _backward_args(grad_output: aclTensor, self_shape: tuple[int, ...], target: aclTensor, out: aclTensor,
                   reduction: int, log_target: bool) -> dict[str, Any]:
    return dict(grad_output=_kernel_operand(grad_output), target=_kernel_operand(target), out=_kernel_operand(out),
                self_shape=self_shape, reduction=reduction, log_target=log_target)


def _forward_args(self_: aclTensor, target: aclTensor, out: aclTensor, reduction: int, log_target: bool
                  ) -> dict[str, Any]:
    return dict(self=_kernel_operand(self_), target=_kernel_operand(target), out=_kernel_operand(out),
                reduction=reduction, log_target=log_target)


@dataclass(frozen=True, eq=False, kw_only=True)
class KlDivPlan(_KlDivPlan):
    op: ClassVar[str] = "aclnnKlDiv"
    outputs: ClassVar[tuple[str, ...]] = ("out",)
    self_: aclTensor
    layout: launch.ForwardLayout = field(metadata=DERIVED)   # from the fields above

    @classmethod
    def build(cls, self_: aclTensor, target: aclTensor, out: aclTensor, reduction: int, log_target: bool
              ) -> KlDivPlan:
        args = _forward_args(self_, target, out, reduction, log_target)
        layout = launch.plan_forward(**args)
        return cls(tensors={"self": self_, "target": target, "out": out},
                   workspace=_workspace(launch.forward_workspace_bytes(**args, layout=layout)), target=target,
                   out=out, reduction=reduction, log_target=log_target, math=_math_dtype(self_, target),
                   layout=layout, self_=self_)

    def run_host(self, device: Any, workspace: int) -> None:
        result = reference.kl_div(host_array(device, self.self_), host_array(device, self.target),
                                  self.reduction, self.log_target, self.math)
        write_out(host_array(device, self.out), result)

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        launch.launch_forward(ctx, **_forward_args(self.self_, self.target, self.out, self.reduction, self.log_target),
                              workspace_ptr=self.workspace.at("tiling", workspace), layout=self.layout)


def _build_backward(device: Any, gradOutput: Any, self: Any, target: Any, reduction: Any, logTarget: Any,
                    out: Any) -> Plan | EmptyPlan:
    """aclnnKlDivBackwardGetWorkspaceSize(gradOutput, self, target, reduction, logTarget, out)
    -> (status, workspaceSize, executor)."""
    c = Checks("aclnnKlDivBackward", device)
    c.not_null(gradOutput=gradOutput, self=self, target=target, out=out)
    tensors = {name: c.tensor(name, t) for name, t in (("gradOutput", gradOutput), ("self", self),
                                                       ("target", target), ("out", out))}
    grad_output, self_, target_, out_ = tensors.values()
    for name, tensor in tensors.items():  # every dtype, then every rank (forward: per tensor)
        c.dtype_in(name, tensor, FLOAT_TYPES)
    for name, tensor in tensors.items():
        c.max_rank(name, tensor)
    broadcast = _broadcast_shape(c, self_, target_)
    if broadcast_shapes(grad_output.shape, broadcast) != broadcast:
        c.fail(INVALID, f"gradOutput shape {list(grad_output.shape)} must broadcast to the broadcast shape "
                        f"{list(broadcast)} of self and target without enlarging it")
    c.shape_eq("out", out_, self_.shape, "self shape")
    reduction = _reduction(c, reduction)
    log_target = c.boolean("logTarget", logTarget)
    if out_.numel == 0:
        return EmptyPlan(c.op)
    c.memory(gradOutput=grad_output, self=self_, target=target_, out=out_)
    c.output("out", out_, gradOutput=grad_output, target=target_)  # self's values are never read
    return KlDivBackwardPlan.build(grad_output, self_, target_, out_, reduction, log_target)


def _build_forward(device: Any, self: Any, target: Any, reduction: Any, logTarget: Any, out: Any
                   ) -> Plan | EmptyPlan:
    """aclnnKlDivGetWorkspaceSize(self, target, reduction, logTarget, out) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnKlDiv", device)
    c.not_null(self=self, target=target, out=out)
    self_, target_, out_ = (c.tensor(n, t) for n, t in (("self", self), ("target", target), ("out", out)))
    for name, tensor in (("self", self_), ("target", target_), ("out", out_)):
        c.dtype_in(name, tensor, FLOAT_TYPES)
        c.max_rank(name, tensor)
    broadcast = _broadcast_shape(c, self_, target_)
    reduction = _reduction(c, reduction)
    log_target = c.boolean("logTarget", logTarget)
    if reduction == 0:
        c.shape_eq("out", out_, broadcast, "the broadcast shape of self and target")
    elif out_.numel != 1 or out_.rank > 1:
        c.fail(INVALID, f"out shape {list(out_.shape)} must be 0-D (or [1]) for reduction {REDUCTIONS[reduction]}")
    if out_.numel == 0:
        return EmptyPlan(c.op)
    c.memory(self=self_, target=target_, out=out_)
    c.output("out", out_, self=self_, target=target_)
    return KlDivPlan.build(self_, target_, out_, reduction, log_target)


aclnnKlDivBackwardGetWorkspaceSize = make_get_workspace_size(KlDivBackwardPlan, _build_backward)
aclnnKlDivBackward = make_execute("aclnnKlDivBackward")
aclnnKlDivGetWorkspaceSize = make_get_workspace_size(KlDivPlan, _build_forward)
aclnnKlDiv = make_execute("aclnnKlDiv")

__all__ = ["aclnnKlDiv", "aclnnKlDivGetWorkspaceSize", "aclnnKlDivBackward", "aclnnKlDivBackwardGetWorkspaceSize"]
