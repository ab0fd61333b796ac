"""aclnnCrossEntropyLossGrad and its forward aclnnCrossEntropyLoss: checks in CANN's order, then the plan.

Backward (docs/OPERATORS.md §2): the gradient with respect to the logits, given logProb = log_softmax(x):
    out[i,j] = nllg_i * (p[i,j] - [j == t_i]) + sm_i * (p[i,j] * sum_c w[c] - w[j]),  p = exp(logProb)
with weights, ignoreIndex of any sign (a row whose target equals it gives a zero row), reductions
none / mean / sum ("mean" divides by D = sum of w[t_i] over the rows not ignored; D == 0 gives zeros,
docs/API.md §7) and the full label-smoothing term. A target outside [0, C) that is not ignoreIndex makes
its row NaN and is never used as an index.

Forward: (loss, logProb) of cross_entropy(input, target, weight, reduction, ignoreIndex,
labelSmoothing); "mean" over no counted row gives 0.

z-loss, beyond CANN's current tables (CANN documents the parameters and formulas as not yet effective;
the rulings: docs/API.md §7): lseSquareScaleForZloss = k in [0, 1) (561002 outside, NaN included).
Forward: every row whose target != ignoreIndex adds z_i = k * lse_i^2 to its loss, unweighted; "mean"
divides the z-loss sum by the number n of such rows, "sum" sums it. returnZloss=True writes that term
alone, reduced like the loss, to zlossOut (shaped like lossOut; null -> 161001); lseForZlossOut, when
given, receives lse_i (N,) of every row; a zlossOut given with returnZloss=False is checked, never
written. Backward: out += 2 k lse_i (G_i + gradZloss_i) [/ n] * p[i, :] for the rows not ignored, with
lse_i from lseForZlossOptional ((N,); null while k != 0 -> 161001) and gradZlossOptional shaped like
gradLoss (null: 0); k == 0 reads neither. Every z-loss tensor has the dtype of input / logProb (161002)
and, when k != 0, its documented shape (561002). With k == 0 CANN checks the z-loss tensors' dtypes
alone (its system tests pass them in any shape): the backward neither checks nor reads
gradZlossOptional / lseForZlossOptional then, and the forward leaves a zlossOut / lseForZlossOut of
another shape than documented unwritten.

Codes (docs/OPERATORS.md §2; CrossEntropyLossGrad is an auto-generated API, so shape problems are tiling
errors): 161001 a null required tensor; 161002 dtypes (gradLoss / logProb / out one dtype among
FLOAT16, FLOAT, BFLOAT16 and, as this library's extension, DOUBLE; weight FLOAT; target INT64 or
INT32), a non-tensor argument, a non-integer ignoreIndex; 561002 (ACLNN_ERR_INNER_TILING_ERROR) for
an unknown reduction string, labelSmoothing outside [0, 1], logProb not 2-D, target not (N,),
weight not (C,), gradLoss not (N,) for none / 0-D or [1] for mean and sum, out not (N, C).
A null reductionOptional means "mean". An empty output is a successful no-op. Then memory checks:
every tensor in a live device allocation, out neither overlapping itself nor any input.

The cpu device runs `reference/cross_entropy.py` on host views (strided views are fine); cuda and
emulated run `ops/cross_entropy/launch.py`, whose kernels want contiguous tensors: strided operands
are gathered into (and strided outputs scattered from) workspace copies through the plan's `Workspace`. The
workspace is [staging copies][the GPU plan's own bytes].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...executor import make_execute, make_get_workspace_size
from ...reference import cross_entropy as reference
from ...base.status import aclDataType as D
from ...meta.tensor import aclTensor
from . import launch as gpu
from ...plans.checks import INVALID, NULLPTR, TILING, Checks
from ...plans.plan import STRIDED_COPY, EmptyPlan, Plan, Workspace, WorkspaceBuilder, host_array, write_out

FLOAT_TYPES = (D.ACL_FLOAT16, D.ACL_FLOAT, D.ACL_BF16, D.ACL_DOUBLE)
TARGET_TYPES = (D.ACL_INT64, D.ACL_INT32)
WEIGHT_TYPES = (D.ACL_FLOAT,)
REDUCTIONS = ("none", "mean", "sum")

GRAD_OP = "aclnnCrossEntropyLossGrad"
FORWARD_OP = "aclnnCrossEntropyLoss"



def _reduction(c: Checks, value: Any) -> str:
    """reductionOptional: a C string ("none" / "mean" / "sum"); null means "mean" (the op default)."""
    if value is None:
        return "mean"
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            c.fail(TILING, f"reductionOptional {value!r} must be \"none\", \"mean\" or \"sum\"")
    if not isinstance(value, str):
        c.fail(INVALID, f"reductionOptional must be a string (\"none\", \"mean\" or \"sum\") or null, "
                        f"got {type(value).__name__}")
    if value not in REDUCTIONS:
        c.fail(TILING, f"reductionOptional {value!r} must be \"none\", \"mean\" or \"sum\"")
    return value


def _label_smoothing(c: Checks, value: Any) -> float:
    smoothing = c.real("labelSmoothing", value)
    if not (0.0 <= smoothing <= 1.0):  # NaN fails too
        c.fail(TILING, f"labelSmoothing {smoothing!r} must be in [0, 1]")
    return smoothing


def _zloss_scale(c: Checks, value: Any) -> float:
    """lseSquareScaleForZloss: CANN's documented range [0, 1) (a tiling-stage value check, like
    labelSmoothing's)."""
    scale = c.real("lseSquareScaleForZloss", value)
    if not (0.0 <= scale < 1.0):  # NaN fails too
        c.fail(TILING, f"lseSquareScaleForZloss {scale!r} must be in [0, 1)")
    return scale


def _ignore_index(c: Checks, value: Any) -> int:
    index = c.integer("ignoreIndex", value)
    if not -(1 << 63) <= index < (1 << 63):
        c.fail(INVALID, f"ignoreIndex {index} does not fit in int64")
    return index


def _check_dtypes_scalars_shapes(c: Checks, x_name: str, x: aclTensor, same_as_x: dict[str, aclTensor],
                                 target: aclTensor, weight: aclTensor | None, reductionOptional: Any,
                                 ignoreIndex: Any, labelSmoothing: Any, lseSquareScaleForZloss: Any
                                 ) -> tuple[str, int, float, float, int, int]:
    """The checks both directions share, in CANN's order: dtypes (161002; `x` is logProb or input,
    `same_as_x` the tensors of its dtype), host scalars, then the (N, C) shapes of x, target and
    weight (561002). Returns (reduction, ignore_index, label_smoothing, zloss_scale, N, C)."""
    c.dtype_in(x_name, x, FLOAT_TYPES)
    for name, tensor in same_as_x.items():
        c.same_dtype(name, tensor, x_name, x)
    c.dtype_in("target", target, TARGET_TYPES)
    if weight is not None:
        c.dtype_in("weightOptional", weight, WEIGHT_TYPES)
    reduction = _reduction(c, reductionOptional)
    ignore_index = _ignore_index(c, ignoreIndex)
    label_smoothing = _label_smoothing(c, labelSmoothing)
    zloss_scale = _zloss_scale(c, lseSquareScaleForZloss)
    if x.rank != 2:
        c.fail(TILING, f"{x_name} must be 2-D (N, C), got shape {list(x.shape)}")
    N, C = x.shape
    if tuple(target.shape) != (N,):
        c.fail(TILING, f"target shape {list(target.shape)} must be 1-D [N] = [{N}] ({x_name} is {list(x.shape)})")
    if weight is not None and tuple(weight.shape) != (C,):
        c.fail(TILING, f"weightOptional shape {list(weight.shape)} must be 1-D [C] = [{C}] "
                       f"({x_name} is {list(x.shape)})")
    return reduction, ignore_index, label_smoothing, zloss_scale, N, C


def _check_lse_shape(c: Checks, name: str, lse: aclTensor | None, N: int) -> None:
    """lseForZlossOut / lseForZlossOptional: (N,) (561002)."""
    if lse is not None and tuple(lse.shape) != (N,):
        c.fail(TILING, f"{name} shape {list(lse.shape)} must be 1-D [N] = [{N}]")


def _loss_shape_ok(loss: aclTensor, reduction: str, N: int) -> bool:
    """A per-row loss (or its gradient) is (N,) for none, 0-D or [1] for mean and sum."""
    if reduction == "none":
        return tuple(loss.shape) == (N,)
    return loss.rank == 0 or tuple(loss.shape) == (1,)


def _check_loss_shape(c: Checks, name: str, loss: aclTensor, reduction: str, N: int) -> None:
    """_loss_shape_ok, or 561002."""
    if not _loss_shape_ok(loss, reduction, N):
        if reduction == "none":
            c.fail(TILING, f"{name} shape {list(loss.shape)} must be 1-D [N] = [{N}] for reduction none")
        c.fail(TILING, f"{name} shape {list(loss.shape)} must be 0-D (or [1]) for reduction {reduction}")


def _workspace(inputs: list[aclTensor | None], outputs: list[aclTensor | None], plan_bytes: int) -> Workspace:
    """Staged copies of strided operands, then the GPU plan's own bytes (asked for on every device)."""
    builder = WorkspaceBuilder()
    builder.stage_all(inputs, outputs)
    builder.reserve("kernels", plan_bytes)
    return builder.build()


@dataclass(frozen=True, eq=False, kw_only=True)
class _CrossEntropyPlan(Plan):
    """Both directions: the target, the optional weight, the reduction and its parameters."""

    kernel_files: ClassVar[tuple[str, ...]] = (gpu.FILE, STRIDED_COPY.file)

    target: aclTensor
    weight: aclTensor | None
    reduction: str
    ignore_index: int
    label_smoothing: float
    N: int
    C: int

    def _host_weight(self, device: Any) -> np.ndarray | None:
        return None if self.weight is None else host_array(device, self.weight)

    def _launch_args(self, workspace: int, x: aclTensor) -> dict[str, Any]:
        """The kernel arguments both launches share (`x`: the (N, C) input whose dtype they run in)."""
        ws = self.workspace
        return dict(target_ptr=ws.address(self.target, workspace), weight_ptr=ws.address(self.weight, workspace),
                    workspace_ptr=ws.at("kernels", workspace), N=self.N, C=self.C, dtype=x.numpy_dtype,
                    target_dtype=self.target.numpy_dtype, reduction=self.reduction, ignore_index=self.ignore_index,
                    label_smoothing=self.label_smoothing)


@dataclass(frozen=True, eq=False, kw_only=True)
class CrossEntropyLossGradPlan(_CrossEntropyPlan):
    """out = d loss / d logits from gradLoss and logProb: ce_weight_sums (when D, sum_c w[c] or the
    z-loss count n is needed, into the workspace), then ce_grad (the z-loss term in the same pass)."""

    op: ClassVar[str] = GRAD_OP
    outputs: ClassVar[tuple[str, ...]] = ("out",)
    grad_loss: aclTensor
    log_prob: aclTensor
    out: aclTensor
    zloss_scale: float
    grad_zloss: aclTensor | None   # both None when zloss_scale == 0 (never read then)
    lse: aclTensor | None

    def run_host(self, device: Any, workspace: int) -> None:
        reference.cross_entropy_loss_grad(  # straight into out (any strides; checked not to alias the inputs)
            host_array(device, self.grad_loss), host_array(device, self.log_prob), host_array(device, self.target),
            self._host_weight(device), self.reduction, self.ignore_index, self.label_smoothing,
            out=host_array(device, self.out),
            grad_zloss=None if self.grad_zloss is None else host_array(device, self.grad_zloss),
            lse_for_zloss=None if self.lse is None else host_array(device, self.lse),
            lse_square_scale_for_zloss=self.zloss_scale)

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_grad(ctx, grad_loss_ptr=ws.address(self.grad_loss, workspace),
                        log_prob_ptr=ws.address(self.log_prob, workspace), out_ptr=ws.address(self.out, workspace),
                        grad_zloss_ptr=ws.address(self.grad_zloss, workspace), lse_ptr=ws.address(self.lse, workspace),
                        zscale=self.zloss_scale, **self._launch_args(workspace, self.log_prob))


@dataclass(frozen=True, eq=False, kw_only=True)
class CrossEntropyLossPlan(_CrossEntropyPlan):
    """(loss, logProb[, zloss][, lse]) of the logits `input`: ce_forward, then ce_loss_reduce for mean
    and sum; few long rows split over blocks (launch.forward_split)."""

    op: ClassVar[str] = FORWARD_OP
    outputs: ClassVar[tuple[str, ...]] = ("lossOut", "logProbOut", "zlossOut", "lseForZlossOut")
    input: aclTensor
    loss: aclTensor
    log_prob: aclTensor
    zloss_scale: float
    zloss: aclTensor | None        # written only when returnZloss
    lse: aclTensor | None          # lseForZlossOut, written when given

    def run_host(self, device: Any, workspace: int) -> None:
        log_prob_out = host_array(device, self.log_prob) if self.log_prob.numel else None
        result = reference.cross_entropy_loss(
            host_array(device, self.input), host_array(device, self.target), self._host_weight(device),
            self.reduction, self.ignore_index, self.label_smoothing, log_prob_out=log_prob_out,
            lse_square_scale_for_zloss=self.zloss_scale, return_zloss=self.zloss is not None,
            lse_out=None if self.lse is None else host_array(device, self.lse))
        write_out(host_array(device, self.loss), np.reshape(result[0], self.loss.shape))
        if self.zloss is not None:
            write_out(host_array(device, self.zloss), np.reshape(result[2], self.zloss.shape))

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_forward(ctx, input_ptr=ws.address(self.input, workspace),
                           loss_ptr=ws.address(self.loss, workspace), log_prob_ptr=ws.address(self.log_prob, workspace),
                           zscale=self.zloss_scale, zloss_ptr=ws.address(self.zloss, workspace),
                           lse_ptr=ws.address(self.lse, workspace), **self._launch_args(workspace, self.input))


def _build_backward(device: Any, gradLoss: Any, logProb: Any, target: Any, weightOptional: Any,
                    gradZlossOptional: Any, lseForZlossOptional: Any, reductionOptional: Any, ignoreIndex: Any,
                    labelSmoothing: Any, lseSquareScaleForZloss: Any, out: Any) -> Plan | EmptyPlan:
    """aclnnCrossEntropyLossGradGetWorkspaceSize(gradLoss, logProb, target, weightOptional,
    gradZlossOptional, lseForZlossOptional, reductionOptional, ignoreIndex, labelSmoothing,
    lseSquareScaleForZloss, out) -> (status, workspaceSize, executor)."""
    c = Checks(GRAD_OP, device)
    c.not_null(gradLoss=gradLoss, logProb=logProb, target=target, out=out)
    grad_loss, log_prob, target_, out_ = (c.tensor(n, t) for n, t in (
        ("gradLoss", gradLoss), ("logProb", logProb), ("target", target), ("out", out)))
    weight = None if weightOptional is None else c.tensor("weightOptional", weightOptional)
    # z-loss inputs: a tensor given must be a live aclTensor of logProb's dtype (CANN's dtype table);
    # its documented shape is checked, and it is read, only when lseSquareScaleForZloss != 0
    grad_z = None if gradZlossOptional is None else c.tensor("gradZlossOptional", gradZlossOptional)
    lse = None if lseForZlossOptional is None else c.tensor("lseForZlossOptional", lseForZlossOptional)
    same_as_log_prob = {"gradLoss": grad_loss, "out": out_}
    for name, tensor in (("gradZlossOptional", grad_z), ("lseForZlossOptional", lse)):
        if tensor is not None:
            same_as_log_prob[name] = tensor
    reduction, ignore_index, label_smoothing, zscale, N, C = _check_dtypes_scalars_shapes(
        c, "logProb", log_prob, same_as_log_prob, target_, weight, reductionOptional,
        ignoreIndex, labelSmoothing, lseSquareScaleForZloss)
    if zscale != 0.0 and lse is None:
        c.fail(NULLPTR, f"lseForZlossOptional is null, but lseSquareScaleForZloss = {zscale!r} != 0 needs the "
                        "forward's lse (its lseForZlossOut)")
    _check_loss_shape(c, "gradLoss", grad_loss, reduction, N)
    if zscale != 0.0:
        # their shapes matter only to the z-loss term; with k = 0 CANN checks their dtypes alone (its
        # system tests pass them in any shape), so the library does too
        if grad_z is not None:
            _check_loss_shape(c, "gradZlossOptional", grad_z, reduction, N)
        _check_lse_shape(c, "lseForZlossOptional", lse, N)
    if tuple(out_.shape) != (N, C):
        c.fail(TILING, f"out shape {list(out_.shape)} must equal logProb shape {[N, C]}")
    if out_.numel == 0:
        return EmptyPlan(c.op)
    if zscale == 0.0:   # not read: neither checked further nor staged
        grad_z = lse = None
    c.memory(gradLoss=grad_loss, logProb=log_prob, target=target_, weightOptional=weight, out=out_,
             gradZlossOptional=grad_z, lseForZlossOptional=lse)
    c.output("out", out_, gradLoss=grad_loss, logProb=log_prob, target=target_, weightOptional=weight,
             gradZlossOptional=grad_z, lseForZlossOptional=lse)
    workspace = _workspace([grad_loss, log_prob, target_, weight, grad_z, lse], [out_], gpu.grad_workspace_bytes(
        N, C, reduction, label_smoothing, weight is not None, zscale != 0.0))
    return CrossEntropyLossGradPlan(
        tensors={"gradLoss": grad_loss, "logProb": log_prob, "target": target_, "weightOptional": weight,
                 "gradZlossOptional": grad_z, "lseForZlossOptional": lse, "out": out_},
        workspace=workspace, target=target_, weight=weight, reduction=reduction, ignore_index=ignore_index,
        label_smoothing=label_smoothing, N=N, C=C, grad_loss=grad_loss, log_prob=log_prob, out=out_,
        zloss_scale=zscale, grad_zloss=grad_z, lse=lse)


def _build_forward(device: Any, input: Any, target: Any, weightOptional: Any, reductionOptional: Any,
                   ignoreIndex: Any, labelSmoothing: Any, lseSquareScaleForZloss: Any, returnZloss: Any,
                   lossOut: Any, logProbOut: Any, zlossOut: Any, lseForZlossOut: Any) -> Plan | EmptyPlan:
    """aclnnCrossEntropyLossGetWorkspaceSize(input, target, weightOptional, reductionOptional, ignoreIndex,
    labelSmoothing, lseSquareScaleForZloss, returnZloss, lossOut, logProbOut, zlossOut, lseForZlossOut)
    -> (status, workspaceSize, executor)."""
    c = Checks(FORWARD_OP, device)
    c.not_null(input=input, target=target, lossOut=lossOut, logProbOut=logProbOut)
    input_, target_, loss, log_prob = (c.tensor(n, t) for n, t in (
        ("input", input), ("target", target), ("lossOut", lossOut), ("logProbOut", logProbOut)))
    weight = None if weightOptional is None else c.tensor("weightOptional", weightOptional)
    return_zloss = c.boolean("returnZloss", returnZloss)
    zloss = None if zlossOut is None else c.tensor("zlossOut", zlossOut)
    lse = None if lseForZlossOut is None else c.tensor("lseForZlossOut", lseForZlossOut)
    if return_zloss and zloss is None:
        c.fail(NULLPTR, "zlossOut is null, but returnZloss is true (zlossOut receives the z-loss)")
    same_as_input = {"lossOut": loss, "logProbOut": log_prob}
    for name, tensor in (("zlossOut", zloss), ("lseForZlossOut", lse)):
        if tensor is not None:
            same_as_input[name] = tensor
    reduction, ignore_index, label_smoothing, zscale, N, C = _check_dtypes_scalars_shapes(
        c, "input", input_, same_as_input, target_, weight, reductionOptional,
        ignoreIndex, labelSmoothing, lseSquareScaleForZloss)
    if C == 0:
        c.fail(TILING, f"input shape {list(input_.shape)} must have C > 0 classes")
    _check_loss_shape(c, "lossOut", loss, reduction, N)
    if tuple(log_prob.shape) != (N, C):
        c.fail(TILING, f"logProbOut shape {list(log_prob.shape)} must equal input shape {[N, C]}")
    if zscale != 0.0:
        if zloss is not None:
            _check_loss_shape(c, "zlossOut", zloss, reduction, N)
        _check_lse_shape(c, "lseForZlossOut", lse, N)
    else:
        # k = 0: CANN checks the z-loss outputs' dtypes alone (its system tests pass [1]-shaped buffers
        # whatever N and the reduction); one of another shape than documented is accepted and not written
        if zloss is not None and not _loss_shape_ok(zloss, reduction, N):
            zloss = None
        if lse is not None and tuple(lse.shape) != (N,):
            lse = None
    if not return_zloss:   # given but not asked for: checked above, never written
        zloss = None
    if loss.numel == 0 and log_prob.numel == 0:   # N == 0 under "none": zlossOut and lse are empty too
        return EmptyPlan(c.op)
    c.memory(input=input_, target=target_, weightOptional=weight, lossOut=loss, logProbOut=log_prob,
             zlossOut=zloss, lseForZlossOut=lse)
    c.output("lossOut", loss, input=input_, target=target_, weightOptional=weight, logProbOut=log_prob)
    c.output("logProbOut", log_prob, input=input_, target=target_, weightOptional=weight)
    if zloss is not None:
        c.output("zlossOut", zloss, input=input_, target=target_, weightOptional=weight, lossOut=loss,
                 logProbOut=log_prob)
    if lse is not None:
        c.output("lseForZlossOut", lse, input=input_, target=target_, weightOptional=weight, lossOut=loss,
                 logProbOut=log_prob, zlossOut=zloss)
    workspace = _workspace([input_, target_, weight], [loss, log_prob, zloss, lse],
                           gpu.forward_workspace_bytes(N, C, reduction, zscale != 0.0))
    return CrossEntropyLossPlan(
        tensors={"input": input_, "target": target_, "weightOptional": weight, "lossOut": loss,
                 "logProbOut": log_prob, "zlossOut": zloss, "lseForZlossOut": lse},
        workspace=workspace, target=target_, weight=weight, reduction=reduction, ignore_index=ignore_index,
        label_smoothing=label_smoothing, N=N, C=C, input=input_, loss=loss, log_prob=log_prob,
        zloss_scale=zscale, zloss=zloss, lse=lse)


aclnnCrossEntropyLossGradGetWorkspaceSize = make_get_workspace_size(CrossEntropyLossGradPlan, _build_backward)
aclnnCrossEntropyLossGrad = make_execute(GRAD_OP)
aclnnCrossEntropyLossGetWorkspaceSize = make_get_workspace_size(CrossEntropyLossPlan, _build_forward)
aclnnCrossEntropyLoss = make_execute(FORWARD_OP)

__all__ = ["aclnnCrossEntropyLossGrad", "aclnnCrossEntropyLossGradGetWorkspaceSize", "aclnnCrossEntropyLoss",
           "aclnnCrossEntropyLossGetWorkspaceSize"]
