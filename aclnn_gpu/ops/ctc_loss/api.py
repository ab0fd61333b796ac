"""aclnnCtcLossBackward and aclnnCtcLoss: checks in CANN's order, target cast, staging, then the plan.

Owns the host side of CTC loss (docs/OPERATORS.md §1, docs/API.md §7). The math lives in
`reference/ctc_loss.py` (NumPy, the cpu device) and `ops/ctc_loss/launch.py` + `kernels/ctc_loss.cu`
(cuda and emulated devices).

Backward checks (docs/OPERATORS.md §1 order; 161001 for a null tensor or length array, 161002 otherwise):
  nulls -> logProbs.shape[0] == 0 (T == 0) -> ranks (gradOut 1, negLogLikelihood 1, logProbs 3,
  logAlpha 3, targets 1 or 2, out 3) -> blank in [0, C) -> maxTargetLength <= (X-1)//2 ->
  batch (logProbs N == gradOut == out.shape[1] == negLogLikelihood == logAlpha.shape[0] ==
  len(inputLengths) == len(targetLengths) [== targets.shape[0] for 2-D]) -> negative lengths
  (our decision) -> 2-D targets width >= maxTargetLength -> time (out.shape[0] == T ==
  logAlpha.shape[1], max(inputLengths) <= T) -> out.shape[2] == C -> 1-D targets length ==
  sum(targetLengths) -> out shape == logProbs shape -> dtypes (logProbs FLOAT/FLOAT16/BF16/DOUBLE;
  gradOut, negLogLikelihood, logAlpha, out equal to it; targets INT32/INT64/BOOL/FLOAT/FLOAT16)
  -> zeroInfinity -> N == 0: success, workspace 0, no work -> memory ranges -> out must not overlap itself
  or alias any input. CANN's A2/A3-only refusals of FLOAT16/BF16 for C > 200000, N > 8180 or
  (X-1)/2 > 1000 are not applied (no such limit here).
The forward (`aclnnCtcLoss`, prefix "aclnnCtcLoss: ") checks the same rules in the same order for
its operands; logAlphaOut must be (N, T, 2*maxL+1) (PyTorch's and Ascend 950's layout) or (N, T,
padded_width(maxL)) (Atlas A2/A3: 2*maxL+1 rounded up to a multiple of 8, CANN's own sample uses it),
whose padding columns are written -inf, as CANN's A2/A3 kernel writes them; the backward accepts any
X >= 2*maxL+1 and never reads past column 2L of a sample. negLogLikelihoodOut is (N,).

zeroInfinity: the forward returns 0 for an infinite loss (CANN's forward rule, docs/API.md §7); the
backward zeroes a sample when the negLogLikelihood it is given is +inf (docs/OPERATORS.md §1 step 1)
and also when the sample cannot align, read from logAlpha (both final states (Lin-1, 2L), (Lin-1,
2L-1) -inf), whatever nll it is given: backward(forward(zero_infinity=True)) zeroes an infeasible
sample, as PyTorch's ctc_loss(zero_infinity=True) does (CANN's backward, which tests nll == inf
only, leaves such a sample the gradient exp(lp) * gradOut).

FLOAT16 / BFLOAT16 (beyond CANN's current tables, docs/API.md §7): fp32 math throughout; the
forward stores logAlphaOut and negLogLikelihoodOut in the 16-bit type, as CANN's dtype rule has them,
and the backward recomputes alpha and the loss in fp32 from logProbs instead of reading those rounded
values (the given negLogLikelihood only decides zeroInfinity; workspace: + round256(4 * N), and on the
register path + the occupancy range's size again for its fp32 alpha).

Targets of dtype BOOL / FLOAT / FLOAT16 are cast to int64 as CANN does (truncation toward zero;
NaN, inf or huge values become -1, an out-of-range label that makes that sample NaN). A label
outside [0, C) in device data makes that sample's loss / logAlpha slice / gradient NaN only.

GPU workspace (bytes; each range rounded up to 256, in this order):
    sum over strided operands of round256(numel * itemsize) + 256     (staged copy + its tiling)
  + round256(8 * numel(targets))   only for BOOL / FLOAT / FLOAT16 targets (int64 cast copy)
  + launch.backward_workspace_bytes(T, N, maxL, math size)   (forward: forward_workspace_bytes(N,
    maxL, math size, T)): tiling [Lin, L, offset] per sample, the backward's label tables and (T, N,
    2*maxL+1) occupancies, the long-target path's per-block slots, the split recursions' step counts
    and boundary values (ops/ctc_loss/launch.py)
(0 when N == 0). The cpu device needs no workspace.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from ...base import dtypes
from ...executor import make_execute, make_get_workspace_size
from ...kernels.context import ptr
from ...kernels.occupancy import wave_grid
from ...reference import ctc_loss as reference
from ...base.status import aclDataType as D
from ...meta.tensor import aclTensor
from . import launch as gpu
from ...plans.checks import INVALID, Checks
from ...plans.plan import (NO_WORKSPACE, STRIDED_COPY, EmptyPlan, Plan, Workspace, WorkspaceBuilder, host_array,
                           write_out)

__all__ = ["aclnnCtcLoss", "aclnnCtcLossGetWorkspaceSize",
           "aclnnCtcLossBackward", "aclnnCtcLossBackwardGetWorkspaceSize"]

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE)
TARGET_TYPES = (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL, D.ACL_FLOAT, D.ACL_FLOAT16)
CAST_TYPES = (D.ACL_BOOL, D.ACL_FLOAT, D.ACL_FLOAT16)
CAST_BLOCK = 256


def cast_targets_host(targets: np.ndarray) -> np.ndarray:
    """CANN's cast of BOOL / FLOAT / FLOAT16 targets to int64 (NaN, inf, huge -> -1); ints unchanged."""
    labels = np.asarray(targets)
    if labels.dtype.kind in "iu":
        return labels
    if labels.dtype.kind == "b":
        return labels.astype(np.int64)
    as_float = labels.astype(np.float32)
    representable = np.isfinite(as_float) & (np.abs(as_float) < 4.6116860184e18)
    return np.where(representable, np.trunc(np.where(representable, as_float, 0)), -1).astype(np.int64)


def padded_width(max_length: int) -> int:
    """logAlpha's last dimension on Atlas A2/A3: 2*maxL+1 rounded up to a multiple of 8 (ops-nn
    loss/ctc_loss_v2/op_api/ctc_loss_v2.cpp, CtcLossNpuOutputShape); Ascend 950 keeps 2*maxL+1."""
    return (2 * max_length + 1 + 7) // 8 * 8


# ------------------------------------------------------------------------------ shared checks
@dataclass(frozen=True)
class _Sizes:
    """Host facts shared by both directions after the checks."""
    T: int
    N: int
    C: int
    input_lengths: tuple[int, ...]
    target_lengths: tuple[int, ...]
    targets_2d: bool


def _check_time_not_empty(c: Checks, log_probs: aclTensor) -> None:
    if log_probs.rank >= 1 and log_probs.shape[0] == 0:
        c.fail(INVALID, f"logProbs shape {list(log_probs.shape)}: T = logProbs.shape[0] must be > 0 "
                        "(start (0) + length (1) exceeds dimension size (0))")


def _blank(c: Checks, blank: Any, C: int) -> int:
    blank = c.integer("blank", blank)
    if blank < 0 or blank >= C:
        c.fail(INVALID, f"blank ({blank}) must be in [0, C={C})")
    return blank


def _lengths_and_targets(c: Checks, logProbs: Any, targets: Any, inputLengths: Any, targetLengths: Any
                         ) -> tuple[aclTensor, aclTensor, tuple[int, ...], tuple[int, ...]]:
    """The operands both directions take, fetched in C order."""
    return (c.tensor("logProbs", logProbs), c.tensor("targets", targets),
            c.int_array("inputLengths", inputLengths), c.int_array("targetLengths", targetLengths))


def _check_batch_lengths_time(c: Checks, targets: aclTensor, input_lengths: tuple[int, ...],
                              target_lengths: tuple[int, ...], T: int, N: int, max_target_length: int,
                              batch_extra: list[tuple[str, int]], time_extra: list[tuple[str, int]]) -> None:
    """Batch sizes (`batch_extra` first), lengths >= 0, the 2-D targets width, then the time sizes
    (`time_extra` first) and max(inputLengths) <= T: the middle of the docs/OPERATORS.md §1 order."""
    batch = [*batch_extra, ("len(inputLengths)", len(input_lengths)), ("len(targetLengths)", len(target_lengths))]
    if targets.rank == 2:
        batch.append(("targets.shape[0]", targets.shape[0]))
    for name, value in batch:
        if value != N:
            c.fail(INVALID, f"{name} = {value} must equal the batch size logProbs.shape[1] N = {N}")
    # negative lengths are refused: our decision (CANN does not document them)
    for name, lengths in (("inputLengths", input_lengths), ("targetLengths", target_lengths)):
        for sample, length in enumerate(lengths):
            if length < 0:
                c.fail(INVALID, f"{name}[{sample}] = {length} must be >= 0")
    if targets.rank == 2 and targets.shape[1] < max_target_length:
        c.fail(INVALID, f"targets shape {list(targets.shape)}: 2-D targets need shape[1] >= "
                        f"max(targetLengths) = {max_target_length}")
    for name, value in time_extra:
        if value != T:
            c.fail(INVALID, f"{name} = {value} must equal logProbs.shape[0] T = {T}")
    for sample, length in enumerate(input_lengths):
        if length > T:
            c.fail(INVALID, f"inputLengths[{sample}] = {length} must be <= T = {T}")


def _check_1d_targets(c: Checks, targets: aclTensor, target_lengths: tuple[int, ...]) -> None:
    if targets.rank == 1 and targets.shape[0] != sum(target_lengths):
        c.fail(INVALID, f"1-D targets shape {list(targets.shape)} must equal "
                        f"[sum(targetLengths) = {sum(target_lengths)}]")


def _check_dtypes_and_zero_infinity(c: Checks, log_probs: aclTensor, targets: aclTensor,
                                    same_as_log_probs: dict[str, aclTensor], zeroInfinity: Any) -> bool:
    c.dtype_in("logProbs", log_probs, FLOAT_TYPES)
    for name, tensor in same_as_log_probs.items():
        c.same_dtype(name, tensor, "logProbs", log_probs)
    c.dtype_in("targets", targets, TARGET_TYPES)
    return c.boolean("zeroInfinity", zeroInfinity)


# ------------------------------------------------------------------------------ workspace
def _cast_targets(targets: aclTensor, ctx: Any, src: int, dst: int) -> None:
    """The int64 copy of BOOL / FLOAT / FLOAT16 targets (kernel ctc_cast_targets, CANN's cast)."""
    count = targets.numel
    grid = wave_grid(ctx, gpu.FILE, "aclg::ctc_cast_targets", -(-count // CAST_BLOCK), CAST_BLOCK)
    ctx.launch(gpu.FILE, "aclg::ctc_cast_targets", (grid,), (CAST_BLOCK,),
               (ptr(src), ptr(dst), np.int64(count), np.int32(int(targets.dtype)),
                np.int32(targets.dtype == D.ACL_BOOL)))


def _workspace(device: Any, plan_bytes: int, inputs: list[aclTensor], outputs: list[aclTensor],
               targets: aclTensor) -> Workspace:
    """Staged copies of strided operands, the int64 cast of targets given in another dtype, then the
    launcher's own bytes (launch.layout: tiling, the backward's tables and occupancies, the long
    path's slots; cuda/emulated, the cpu device needs none)."""
    if device.kind == "cpu":
        return NO_WORKSPACE
    builder = WorkspaceBuilder()
    builder.stage_all(inputs, outputs)
    if targets.dtype in CAST_TYPES and targets.numel > 0:
        builder.convert(targets, 8 * targets.numel, partial(_cast_targets, targets))
    builder.reserve("tiling", plan_bytes)
    return builder.build()


def _dtype_name(tensor: aclTensor) -> str:
    dt = dtypes.to_numpy(tensor.dtype)
    return "bfloat16" if dt == dtypes.bfloat16 else dt.name


# ------------------------------------------------------------------------------ plans
@dataclass(frozen=True, eq=False, kw_only=True)
class _CtcPlan(Plan):
    """What both directions keep: sizes, blank, zeroInfinity, the element types the kernels see."""

    kernel_files: ClassVar[tuple[str, ...]] = (gpu.FILE, STRIDED_COPY.file)

    log_probs: aclTensor
    targets: aclTensor
    sizes: _Sizes
    blank: int
    zero_infinity: bool

    @property
    def target_dtype(self) -> str:
        """The targets' type in the kernels: int64 after the cast, else the given int32 / int64."""
        cast = self.targets.dtype in CAST_TYPES and self.targets.numel > 0
        return "int64" if cast or self.targets.dtype == D.ACL_INT64 else "int32"

    def _lengths(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array(self.sizes.input_lengths, np.int64), np.array(self.sizes.target_lengths, np.int64)

    def _host_targets(self, device: Any) -> np.ndarray:
        return cast_targets_host(host_array(device, self.targets))

    def _launch_args(self, workspace: int) -> dict[str, Any]:
        """The kernel arguments both launches share."""
        sizes, ws = self.sizes, self.workspace
        input_lengths, target_lengths = self._lengths()
        return dict(log_probs_ptr=ws.address(self.log_probs, workspace),
                    targets_ptr=ws.address(self.targets, workspace), workspace_ptr=ws.at("tiling", workspace),
                    T=sizes.T, N=sizes.N, C=sizes.C, dtype=_dtype_name(self.log_probs),
                    target_dtype=self.target_dtype, targets_2d_stride=self.targets.shape[1] if sizes.targets_2d else 0,
                    targets_numel=self.targets.numel, input_lengths=input_lengths, target_lengths=target_lengths,
                    blank=self.blank, zero_infinity=self.zero_infinity)


@dataclass(frozen=True, eq=False, kw_only=True)
class CtcLossBackwardPlan(_CtcPlan):
    op: ClassVar[str] = "aclnnCtcLossBackward"
    outputs: ClassVar[tuple[str, ...]] = ("out",)
    grad_out: aclTensor
    neg_log_likelihood: aclTensor
    log_alpha: aclTensor
    out: aclTensor

    def run_host(self, device: Any, workspace: int) -> None:
        input_lengths, target_lengths = self._lengths()
        grad = reference.ctc_loss_backward(
            host_array(device, self.grad_out), host_array(device, self.log_probs), self._host_targets(device),
            input_lengths, target_lengths, host_array(device, self.neg_log_likelihood),
            host_array(device, self.log_alpha), self.blank, self.zero_infinity)
        write_out(host_array(device, self.out), grad)

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_backward(
            ctx, grad_out_ptr=ws.address(self.grad_out, workspace),
            neg_log_likelihood_ptr=ws.address(self.neg_log_likelihood, workspace),
            log_alpha_ptr=ws.address(self.log_alpha, workspace), out_ptr=ws.address(self.out, workspace),
            X=self.log_alpha.shape[2], **self._launch_args(workspace))


@dataclass(frozen=True, eq=False, kw_only=True)
class CtcLossPlan(_CtcPlan):
    op: ClassVar[str] = "aclnnCtcLoss"
    outputs: ClassVar[tuple[str, ...]] = ("negLogLikelihoodOut", "logAlphaOut")
    neg_log_likelihood: aclTensor
    log_alpha: aclTensor

    def run_host(self, device: Any, workspace: int) -> None:
        input_lengths, target_lengths = self._lengths()
        neg_log_likelihood, log_alpha = reference.ctc_loss_forward(
            host_array(device, self.log_probs), self._host_targets(device), input_lengths, target_lengths,
            self.blank, self.zero_infinity)
        write_out(host_array(device, self.neg_log_likelihood), neg_log_likelihood)
        out = host_array(device, self.log_alpha)
        S = log_alpha.shape[2]
        write_out(out[:, :, :S], log_alpha)
        write_out(out[:, :, S:], -np.inf)   # CANN's 8-aligned padding: unreachable states, -inf as CANN writes

    def launch_operator(self, ctx: Any, workspace: int) -> None:
        ws = self.workspace
        gpu.launch_forward(
            ctx, neg_log_likelihood_ptr=ws.address(self.neg_log_likelihood, workspace),
            log_alpha_ptr=ws.address(self.log_alpha, workspace), X=self.log_alpha.shape[2],
            **self._launch_args(workspace))


# ------------------------------------------------------------------------------ phase 1
def _build_backward(device: Any, gradOut: Any, logProbs: Any, targets: Any, inputLengths: Any,
                    targetLengths: Any, negLogLikelihood: Any, logAlpha: Any, blank: Any, zeroInfinity: Any,
                    out: Any) -> Plan | EmptyPlan:
    """aclnnCtcLossBackwardGetWorkspaceSize(gradOut, logProbs, targets, inputLengths, targetLengths,
    negLogLikelihood, logAlpha, blank, zeroInfinity, out) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnCtcLossBackward", device)
    c.not_null(gradOut=gradOut, logProbs=logProbs, targets=targets, inputLengths=inputLengths,
               targetLengths=targetLengths, negLogLikelihood=negLogLikelihood, logAlpha=logAlpha, out=out)
    grad_out = c.tensor("gradOut", gradOut)
    log_probs, targets_, input_lengths, target_lengths = _lengths_and_targets(c, logProbs, targets, inputLengths,
                                                                              targetLengths)
    neg_log_likelihood = c.tensor("negLogLikelihood", negLogLikelihood)
    log_alpha = c.tensor("logAlpha", logAlpha)
    out_ = c.tensor("out", out)
    _check_time_not_empty(c, log_probs)
    c.rank("gradOut", grad_out, 1)
    c.rank("negLogLikelihood", neg_log_likelihood, 1)
    c.rank("logProbs", log_probs, 3)
    c.rank("logAlpha", log_alpha, 3)
    c.rank("targets", targets_, (1, 2))
    c.rank("out", out_, 3)
    T, N, C = log_probs.shape
    blank = _blank(c, blank, C)
    max_length = max([0, *target_lengths])
    X = log_alpha.shape[2]
    if max_length > (X - 1) // 2:   # floor division: X = 0 is refused (CANN's C division accepts it)
        c.fail(INVALID, f"logAlpha.shape[2] = {X} must be >= 2 * max(targetLengths) + 1 = {2 * max_length + 1} "
                        f"(logAlpha shape {list(log_alpha.shape)}; the gradient reads its states 0 .. 2L)")
    _check_batch_lengths_time(
        c, targets_, input_lengths, target_lengths, T, N, max_length,
        batch_extra=[("gradOut.shape[0]", grad_out.shape[0]), ("out.shape[1]", out_.shape[1]),
                     ("negLogLikelihood.shape[0]", neg_log_likelihood.shape[0]),
                     ("logAlpha.shape[0]", log_alpha.shape[0])],
        time_extra=[("out.shape[0]", out_.shape[0]), ("logAlpha.shape[1]", log_alpha.shape[1])])
    if out_.shape[2] != C:
        c.fail(INVALID, f"out.shape[2] = {out_.shape[2]} must equal logProbs.shape[2] C = {C}")
    _check_1d_targets(c, targets_, target_lengths)
    c.shape_eq("out", out_, log_probs.shape, "logProbs shape")
    zero_infinity = _check_dtypes_and_zero_infinity(
        c, log_probs, targets_, {"gradOut": grad_out, "negLogLikelihood": neg_log_likelihood, "logAlpha": log_alpha,
                                 "out": out_}, zeroInfinity)
    if N == 0:
        return EmptyPlan(c.op)
    c.memory(gradOut=grad_out, logProbs=log_probs, targets=targets_, negLogLikelihood=neg_log_likelihood,
             logAlpha=log_alpha, out=out_)
    c.output("out", out_, gradOut=grad_out, logProbs=log_probs, targets=targets_,
             negLogLikelihood=neg_log_likelihood, logAlpha=log_alpha)
    sizes = _Sizes(T, N, C, input_lengths, target_lengths, targets_.rank == 2)
    msize = gpu.math_size_of(_dtype_name(log_probs))
    workspace = _workspace(device, gpu.backward_workspace_bytes(T, N, max_length, msize,
                                                                recompute=_dtype_name(log_probs) in gpu.HALF),
                           [grad_out, log_probs, targets_, neg_log_likelihood, log_alpha], [out_], targets_)
    return CtcLossBackwardPlan(
        tensors={"gradOut": grad_out, "logProbs": log_probs, "targets": targets_,
                 "negLogLikelihood": neg_log_likelihood, "logAlpha": log_alpha, "out": out_},
        workspace=workspace, log_probs=log_probs, targets=targets_, sizes=sizes, blank=blank,
        zero_infinity=zero_infinity, grad_out=grad_out, neg_log_likelihood=neg_log_likelihood,
        log_alpha=log_alpha, out=out_)


def _build_forward(device: Any, logProbs: Any, targets: Any, inputLengths: Any, targetLengths: Any, blank: Any,
                   zeroInfinity: Any, negLogLikelihoodOut: Any, logAlphaOut: Any) -> Plan | EmptyPlan:
    """aclnnCtcLossGetWorkspaceSize(logProbs, targets, inputLengths, targetLengths, blank, zeroInfinity,
    negLogLikelihoodOut, logAlphaOut) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnCtcLoss", device)
    c.not_null(logProbs=logProbs, targets=targets, inputLengths=inputLengths, targetLengths=targetLengths,
               negLogLikelihoodOut=negLogLikelihoodOut, logAlphaOut=logAlphaOut)
    log_probs, targets_, input_lengths, target_lengths = _lengths_and_targets(c, logProbs, targets, inputLengths,
                                                                              targetLengths)
    neg_log_likelihood = c.tensor("negLogLikelihoodOut", negLogLikelihoodOut)
    log_alpha = c.tensor("logAlphaOut", logAlphaOut)
    _check_time_not_empty(c, log_probs)
    c.rank("logProbs", log_probs, 3)
    c.rank("targets", targets_, (1, 2))
    c.rank("negLogLikelihoodOut", neg_log_likelihood, 1)
    c.rank("logAlphaOut", log_alpha, 3)
    T, N, C = log_probs.shape
    blank = _blank(c, blank, C)
    max_length = max([0, *target_lengths])
    _check_batch_lengths_time(c, targets_, input_lengths, target_lengths, T, N, max_length, batch_extra=[],
                              time_extra=[])
    _check_1d_targets(c, targets_, target_lengths)
    c.shape_eq("negLogLikelihoodOut", neg_log_likelihood, (N,), "(N,) =")
    S = 2 * max_length + 1
    if tuple(log_alpha.shape) not in ((N, T, S), (N, T, padded_width(max_length))):
        c.fail(INVALID, f"logAlphaOut shape {list(log_alpha.shape)} must equal (N, T, 2*max(targetLengths)+1) = "
                        f"{[N, T, S]} or, CANN's A2/A3 layout, (N, T, (2*max(targetLengths)+1) rounded up to a "
                        f"multiple of 8) = {[N, T, padded_width(max_length)]}")
    zero_infinity = _check_dtypes_and_zero_infinity(
        c, log_probs, targets_, {"negLogLikelihoodOut": neg_log_likelihood, "logAlphaOut": log_alpha}, zeroInfinity)
    if N == 0:
        return EmptyPlan(c.op)
    c.memory(logProbs=log_probs, targets=targets_, negLogLikelihoodOut=neg_log_likelihood, logAlphaOut=log_alpha)
    c.output("negLogLikelihoodOut", neg_log_likelihood, logProbs=log_probs, targets=targets_, logAlphaOut=log_alpha)
    c.output("logAlphaOut", log_alpha, logProbs=log_probs, targets=targets_)
    sizes = _Sizes(T, N, C, input_lengths, target_lengths, targets_.rank == 2)
    workspace = _workspace(device, gpu.forward_workspace_bytes(N, max_length, gpu.math_size_of(_dtype_name(log_probs)),
                                                                T=T),
                           [log_probs, targets_], [neg_log_likelihood, log_alpha], targets_)
    return CtcLossPlan(
        tensors={"logProbs": log_probs, "targets": targets_, "negLogLikelihoodOut": neg_log_likelihood,
                 "logAlphaOut": log_alpha},
        workspace=workspace, log_probs=log_probs, targets=targets_, sizes=sizes, blank=blank,
        zero_infinity=zero_infinity, neg_log_likelihood=neg_log_likelihood, log_alpha=log_alpha)


aclnnCtcLossBackwardGetWorkspaceSize = make_get_workspace_size(CtcLossBackwardPlan, _build_backward)
aclnnCtcLossBackward = make_execute("aclnnCtcLossBackward")
aclnnCtcLossGetWorkspaceSize = make_get_workspace_size(CtcLossPlan, _build_forward)
aclnnCtcLoss = make_execute("aclnnCtcLoss")
