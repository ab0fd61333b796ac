"""aclnnCtcLossBackward and aclnnCtcLoss: checks in CANN's order, target cast, staging, then the plan.

Owns the host side of CTC loss (spec/ops.md §1, API.md §6-7). The math lives in
`reference/ctc_loss.py` (NumPy, the cpu device) and `ops/ctc_loss_gpu.py` + `kernels/ctc_loss.cu`
(cuda and emulated devices).

Backward checks (spec §1.4 order; 161001 for a null tensor or length array, 161002 otherwise):
  nulls -> logProbs.shape[0] == 0 (T == 0) -> ranks (gradOut 1, negLogLikelihood 1, logProbs 3,
  logAlpha 3, targets 1 or 2, out 3) -> blank in [0, C) -> maxTargetLength <= (X-1)//2 ->
  batch (logProbs N == gradOut == out.shape[1] == negLogLikelihood == logAlpha.shape[0] ==
  len(inputLengths) == len(targetLengths) [== targets.shape[0] for 2-D]) -> negative lengths
  (our decision) -> 2-D targets width >= maxTargetLength -> time (out.shape[0] == T ==
  logAlpha.shape[1], max(inputLengths) <= T) -> out.shape[2] == C -> 1-D targets length ==
  sum(targetLengths) -> out shape == logProbs shape -> dtypes (logProbs FLOAT/FLOAT16/BF16/DOUBLE;
  gradOut, negLogLikelihood, logAlpha, out equal to it; targets INT32/INT64/BOOL/FLOAT/FLOAT16)
  -> zeroInfinity -> N == 0: success, workspace 0, no work -> cuda/emulated: the recursion limit
  (2*maxL+1 <= 4096 states with fp32 math, <= 2560 with fp64, i.e. maxL <= 2047 / 1279) refused
  with 161002 here rather than failing at launch -> memory ranges -> out must not overlap itself
  or alias any input. CANN's A2/A3-only refusals of FLOAT16/BF16 for C > 200000, N > 8180 or
  (X-1)/2 > 1000 are not applied (no such limit here).
The forward (`aclnnCtcLoss`, prefix "aclnnCtcLoss: ") checks the same rules in the same order for
its operands; logAlphaOut must be exactly (N, T, 2*maxL+1) (PyTorch's layout; the backward accepts
any X >= 2*maxL+1, e.g. CANN's 8-aligned layout padded with -99999) and negLogLikelihoodOut (N,).

zeroInfinity: the forward returns 0 for an infinite loss (CANN's forward rule, API.md §7); the
backward zeroes a sample only when the negLogLikelihood it is GIVEN is exactly +inf (spec §1.2
step 1). So backward(forward(zero_infinity=True)) does NOT zero an infeasible sample (its nll is
0, giving a finite but meaningless gradient): an autograd wrapper must pass the raw (inf) loss to
the backward, as PyTorch's does internally.

Targets of dtype BOOL / FLOAT / FLOAT16 are cast to int64 as CANN does (truncation toward zero;
NaN, inf or huge values become -1, an out-of-range label that makes that sample NaN). A label
outside [0, C) in device data makes that sample's loss / logAlpha slice / gradient NaN only.

GPU workspace (bytes; each range rounded up to 256, in this order):
    round256(24 * N)                                   tiling [Lin, L, offset] per sample
  + sum over strided operands of round256(numel * itemsize) + 256     (Staging copy + its tiling)
  + round256(8 * numel(targets))   only for BOOL / FLOAT / FLOAT16 targets (int64 cast copy)
(0 when N == 0). The cpu device needs no workspace.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..executor import make_execute, make_get_workspace_size
from ..kernels.context import ptr
from ..reference import ctc_loss as reference
from ..status import aclDataType as D
from ..tensor import aclTensor
from . import ctc_loss_gpu as gpu
from .checks import INVALID, Checks
from .plan import EmptyPlan, Plan, Staging, WorkspaceLayout, grid_for, host_array, tensor_ptr, write_out

FLOAT_TYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE)
TARGET_TYPES = (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL, D.ACL_FLOAT, D.ACL_FLOAT16)
CAST_TYPES = (D.ACL_BOOL, D.ACL_FLOAT, D.ACL_FLOAT16)
CAST_BLOCK = 256


def cast_targets_host(targets: np.ndarray) -> np.ndarray:
    """CANN's cast of BOOL / FLOAT / FLOAT16 targets to int64 (NaN, inf, huge -> -1); ints unchanged."""
    t = np.asarray(targets)
    if t.dtype.kind in "iu":
        return t
    if t.dtype.kind == "b":
        return t.astype(np.int64)
    v = t.astype(np.float32)
    ok = np.isfinite(v) & (np.abs(v) < 4.6116860184e18)
    return np.where(ok, np.trunc(np.where(ok, v, 0)), -1).astype(np.int64)


# ------------------------------------------------------------------------------ shared checks
class _Shape:
    """Host facts shared by both directions after the checks."""

    def __init__(self, T: int, N: int, C: int, il: tuple[int, ...], tl: tuple[int, ...], max_l: int,
                 two_d: bool):
        self.T, self.N, self.C, self.il, self.tl, self.max_l, self.two_d = T, N, C, il, tl, max_l, two_d


def _lengths_nonneg(c: Checks, il: tuple[int, ...], tl: tuple[int, ...]) -> None:
    for name, values in (("inputLengths", il), ("targetLengths", tl)):
        for b, v in enumerate(values):
            if v < 0:
                c.fail(INVALID, f"{name}[{b}] = {v} must be >= 0")


def _check_targets_and_time(c: Checks, targets: aclTensor, il, tl, N: int, T: int, max_l: int,
                            time_extra: list[tuple[str, int]]) -> None:
    if targets.rank == 2 and targets.shape[1] < max_l:
        c.fail(INVALID, f"targets shape {list(targets.shape)}: 2-D targets need shape[1] >= "
                        f"max(targetLengths) = {max_l}")
    for name, value in time_extra:
        if value != T:
            c.fail(INVALID, f"{name} = {value} must equal logProbs.shape[0] T = {T}")
    for b, v in enumerate(il):
        if v > T:
            c.fail(INVALID, f"inputLengths[{b}] = {v} must be <= T = {T}")


def _check_1d_targets(c: Checks, targets: aclTensor, tl) -> None:
    if targets.rank == 1 and targets.shape[0] != sum(tl):
        c.fail(INVALID, f"1-D targets shape {list(targets.shape)} must equal [sum(targetLengths) = {sum(tl)}]")


def _gpu_limit(c: Checks, device: Any, max_l: int, lp: aclTensor) -> None:
    if device.kind == "cpu":
        return
    msize = 8 if lp.dtype == D.ACL_DOUBLE else 4
    try:
        gpu.recursion_geometry(max_l, msize)
    except NotImplementedError:
        limit = 1279 if msize == 8 else 2047
        c.fail(INVALID, f"max(targetLengths) = {max_l} exceeds this device's CTC kernel limit {limit} "
                        f"({'float64' if msize == 8 else 'float32'} math: 2*maxL+1 <= {2 * limit + 1} states)")


# ------------------------------------------------------------------------------ GPU staging
class _GpuIo:
    """Workspace layout: tiling, Staging copies of strided operands, the int64 cast of targets."""

    def __init__(self, N: int, inputs: list[aclTensor], outputs: list[aclTensor], targets: aclTensor):
        self.layout = WorkspaceLayout()
        self.plan_offset = self.layout.take(gpu.backward_workspace_bytes(N))
        self.staging = Staging(self.layout)
        self.inputs = [t for t in inputs if t is not None]
        self.outputs = outputs
        for t in self.inputs:
            self.staging.need_in(t)
        for t in outputs:
            self.staging.need_out(t)
        self.targets = targets
        self.cast = targets.dtype in CAST_TYPES and targets.numel > 0
        self.cast_offset = self.layout.take(8 * targets.numel) if self.cast else None
        self.size = self.layout.size

    def target_dtype(self) -> str:
        if self.cast or self.targets.dtype == D.ACL_INT64:
            return "int64"
        return "int32"

    def gather(self, ctx: Any, ws: int) -> int:
        """Contiguous copies of strided inputs; returns the address of the (cast) targets."""
        self.staging.gather(ctx, self.inputs, ws)
        src = self.staging.address(self.targets, ws) if self.targets.numel else 0
        if not self.cast:
            return src
        dst = ws + self.cast_offset
        n = self.targets.numel
        ctx.launch(gpu.FILE, "aclg::ctc_cast_targets", (grid_for(n, CAST_BLOCK, ctx.sm_count),), (CAST_BLOCK,),
                   (ptr(src), ptr(dst), np.int64(n), np.int32(int(self.targets.dtype)),
                    np.int32(self.targets.dtype == D.ACL_BOOL)))
        return dst

    def address(self, t: aclTensor, ws: int) -> int:
        return self.staging.address(t, ws)

    def scatter(self, ctx: Any, ws: int) -> None:
        self.staging.scatter(ctx, self.outputs, ws)


def _dtype_name(t: aclTensor) -> str:
    dt = dtypes.to_numpy(t.dtype)
    return "bfloat16" if dt == dtypes.bfloat16 else dt.name


# ------------------------------------------------------------------------------ plans
class CtcLossBackwardPlan(Plan):
    op = "aclnnCtcLossBackward"

    def __init__(self, device: Any, g: aclTensor, lp: aclTensor, tg: aclTensor, nll: aclTensor, la: aclTensor,
                 out: aclTensor, sh: _Shape, blank: int, zero_inf: bool):
        self.g, self.lp, self.tg, self.nll, self.la, self.out = g, lp, tg, nll, la, out
        self.sh, self.blank, self.zero_inf = sh, blank, zero_inf
        self.tensors = {"gradOut": g, "logProbs": lp, "targets": tg, "negLogLikelihood": nll, "logAlpha": la,
                        "out": out}
        self.io = None
        self.workspace_size = 0
        if device.kind != "cpu":
            self.io = _GpuIo(sh.N, [g, lp, tg, nll, la], [out], tg)
            self.workspace_size = self.io.size

    def run_host(self, device: Any, workspace: int) -> None:
        sh = self.sh
        tg = cast_targets_host(host_array(device, self.tg))
        grad = reference.ctc_loss_backward(
            host_array(device, self.g), host_array(device, self.lp), tg, np.array(sh.il, np.int64),
            np.array(sh.tl, np.int64), host_array(device, self.nll), host_array(device, self.la), self.blank,
            self.zero_inf)
        write_out(host_array(device, self.out), grad)

    def run_kernels(self, ctx: Any, workspace: int) -> None:
        io, sh = self.io, self.sh
        tgt = io.gather(ctx, workspace)
        gpu.launch_backward(
            ctx, grad_out_ptr=io.address(self.g, workspace), log_probs_ptr=io.address(self.lp, workspace),
            targets_ptr=tgt, neg_log_likelihood_ptr=io.address(self.nll, workspace),
            log_alpha_ptr=io.address(self.la, workspace), out_ptr=io.address(self.out, workspace),
            workspace_ptr=workspace + io.plan_offset, T=sh.T, N=sh.N, C=sh.C, X=self.la.shape[2],
            dtype=_dtype_name(self.lp), target_dtype=io.target_dtype(),
            targets_2d_stride=self.tg.shape[1] if sh.two_d else 0, targets_numel=self.tg.numel,
            input_lengths=np.array(sh.il, np.int64), target_lengths=np.array(sh.tl, np.int64), blank=self.blank,
            zero_infinity=self.zero_inf)
        io.scatter(ctx, workspace)


class CtcLossPlan(Plan):
    op = "aclnnCtcLoss"

    def __init__(self, device: Any, lp: aclTensor, tg: aclTensor, nll: aclTensor, la: aclTensor, sh: _Shape,
                 blank: int, zero_inf: bool):
        self.lp, self.tg, self.nll, self.la = lp, tg, nll, la
        self.sh, self.blank, self.zero_inf = sh, blank, zero_inf
        self.tensors = {"logProbs": lp, "targets": tg, "negLogLikelihoodOut": nll, "logAlphaOut": la}
        self.io = None
        self.workspace_size = 0
        if device.kind != "cpu":
            self.io = _GpuIo(sh.N, [lp, tg], [nll, la], tg)
            self.workspace_size = self.io.size

    def run_host(self, device: Any, workspace: int) -> None:
        sh = self.sh
        tg = cast_targets_host(host_array(device, self.tg))
        nll, la = reference.ctc_loss_forward(host_array(device, self.lp), tg, np.array(sh.il, np.int64),
                                             np.array(sh.tl, np.int64), self.blank, self.zero_inf)
        write_out(host_array(device, self.nll), nll)
        write_out(host_array(device, self.la), la)

    def run_kernels(self, ctx: Any, workspace: int) -> None:
        io, sh = self.io, self.sh
        tgt = io.gather(ctx, workspace)
        gpu.launch_forward(
            ctx, log_probs_ptr=io.address(self.lp, workspace), targets_ptr=tgt,
            neg_log_likelihood_ptr=io.address(self.nll, workspace), log_alpha_ptr=io.address(self.la, workspace),
            workspace_ptr=workspace + io.plan_offset, T=sh.T, N=sh.N, C=sh.C, dtype=_dtype_name(self.lp),
            target_dtype=io.target_dtype(), targets_2d_stride=self.tg.shape[1] if sh.two_d else 0,
            targets_numel=self.tg.numel, input_lengths=np.array(sh.il, np.int64),
            target_lengths=np.array(sh.tl, np.int64), blank=self.blank, zero_infinity=self.zero_inf)
        io.scatter(ctx, workspace)


# ------------------------------------------------------------------------------ phase 1
def _t0(c: Checks, lp: aclTensor) -> None:
    if lp.rank >= 1 and lp.shape[0] == 0:
        c.fail(INVALID, f"logProbs shape {list(lp.shape)}: T = logProbs.shape[0] must be > 0 "
                        "(start (0) + length (1) exceeds dimension size (0))")


def _blank(c: Checks, blank: Any, C: int) -> int:
    blank = c.integer("blank", blank)
    if blank < 0 or blank >= C:
        c.fail(INVALID, f"blank ({blank}) must be in [0, C={C})")
    return blank


def _build_backward(device: Any, gradOut: Any, logProbs: Any, targets: Any, inputLengths: Any,
                    targetLengths: Any, negLogLikelihood: Any, logAlpha: Any, blank: Any, zeroInfinity: Any,
                    out: Any) -> Plan:
    """aclnnCtcLossBackwardGetWorkspaceSize(gradOut, logProbs, targets, inputLengths, targetLengths,
    negLogLikelihood, logAlpha, blank, zeroInfinity, out) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnCtcLossBackward", device)
    c.not_null(gradOut=gradOut, logProbs=logProbs, targets=targets, inputLengths=inputLengths,
               targetLengths=targetLengths, negLogLikelihood=negLogLikelihood, logAlpha=logAlpha, out=out)
    g = c.tensor("gradOut", gradOut)
    lp = c.tensor("logProbs", logProbs)
    tg = c.tensor("targets", targets)
    il = c.int_array("inputLengths", inputLengths)
    tl = c.int_array("targetLengths", targetLengths)
    nll = c.tensor("negLogLikelihood", negLogLikelihood)
    la = c.tensor("logAlpha", logAlpha)
    o = c.tensor("out", out)
    _t0(c, lp)
    c.rank("gradOut", g, 1)
    c.rank("negLogLikelihood", nll, 1)
    c.rank("logProbs", lp, 3)
    c.rank("logAlpha", la, 3)
    c.rank("targets", tg, (1, 2))
    c.rank("out", o, 3)
    T, N, C = lp.shape
    blank = _blank(c, blank, C)
    max_l = max([0, *tl])
    X = la.shape[2]
    if max_l > (X - 1) // 2:
        c.fail(INVALID, f"max(targetLengths) = {max_l} must be <= (logAlpha.shape[2] - 1) / 2 = {(X - 1) // 2} "
                        f"(logAlpha shape {list(la.shape)})")
    batch = [("gradOut.shape[0]", g.shape[0]), ("out.shape[1]", o.shape[1]),
             ("negLogLikelihood.shape[0]", nll.shape[0]), ("logAlpha.shape[0]", la.shape[0]),
             ("len(inputLengths)", len(il)), ("len(targetLengths)", len(tl))]
    if tg.rank == 2:
        batch.append(("targets.shape[0]", tg.shape[0]))
    for name, value in batch:
        if value != N:
            c.fail(INVALID, f"{name} = {value} must equal the batch size logProbs.shape[1] N = {N}")
    _lengths_nonneg(c, il, tl)
    _check_targets_and_time(c, tg, il, tl, N, T, max_l, [("out.shape[0]", o.shape[0]),
                                                         ("logAlpha.shape[1]", la.shape[1])])
    if o.shape[2] != C:
        c.fail(INVALID, f"out.shape[2] = {o.shape[2]} must equal logProbs.shape[2] C = {C}")
    _check_1d_targets(c, tg, tl)
    c.shape_eq("out", o, lp.shape, "logProbs shape")
    c.dtype_in("logProbs", lp, FLOAT_TYPES)
    for name, t in (("gradOut", g), ("negLogLikelihood", nll), ("logAlpha", la), ("out", o)):
        c.same_dtype(name, t, "logProbs", lp)
    c.dtype_in("targets", tg, TARGET_TYPES)
    zero_inf = c.boolean("zeroInfinity", zeroInfinity)
    if N == 0:
        return EmptyPlan(c.op)
    _gpu_limit(c, device, max_l, lp)
    c.memory(gradOut=g, logProbs=lp, targets=tg, negLogLikelihood=nll, logAlpha=la, out=o)
    c.output("out", o, gradOut=g, logProbs=lp, targets=tg, negLogLikelihood=nll, logAlpha=la)
    return CtcLossBackwardPlan(device, g, lp, tg, nll, la, o, _Shape(T, N, C, il, tl, max_l, tg.rank == 2),
                               blank, zero_inf)


def _build_forward(device: Any, logProbs: Any, targets: Any, inputLengths: Any, targetLengths: Any, blank: Any,
                   zeroInfinity: Any, negLogLikelihoodOut: Any, logAlphaOut: Any) -> Plan:
    """aclnnCtcLossGetWorkspaceSize(logProbs, targets, inputLengths, targetLengths, blank, zeroInfinity,
    negLogLikelihoodOut, logAlphaOut) -> (status, workspaceSize, executor)."""
    c = Checks("aclnnCtcLoss", device)
    c.not_null(logProbs=logProbs, targets=targets, inputLengths=inputLengths, targetLengths=targetLengths,
               negLogLikelihoodOut=negLogLikelihoodOut, logAlphaOut=logAlphaOut)
    lp = c.tensor("logProbs", logProbs)
    tg = c.tensor("targets", targets)
    il = c.int_array("inputLengths", inputLengths)
    tl = c.int_array("targetLengths", targetLengths)
    nll = c.tensor("negLogLikelihoodOut", negLogLikelihoodOut)
    la = c.tensor("logAlphaOut", logAlphaOut)
    _t0(c, lp)
    c.rank("logProbs", lp, 3)
    c.rank("targets", tg, (1, 2))
    c.rank("negLogLikelihoodOut", nll, 1)
    c.rank("logAlphaOut", la, 3)
    T, N, C = lp.shape
    blank = _blank(c, blank, C)
    max_l = max([0, *tl])
    batch = [("len(inputLengths)", len(il)), ("len(targetLengths)", len(tl))]
    if tg.rank == 2:
        batch.append(("targets.shape[0]", tg.shape[0]))
    for name, value in batch:
        if value != N:
            c.fail(INVALID, f"{name} = {value} must equal the batch size logProbs.shape[1] N = {N}")
    _lengths_nonneg(c, il, tl)
    _check_targets_and_time(c, tg, il, tl, N, T, max_l, [])
    _check_1d_targets(c, tg, tl)
    c.shape_eq("negLogLikelihoodOut", nll, (N,), "(N,) =")
    c.shape_eq("logAlphaOut", la, (N, T, 2 * max_l + 1), "(N, T, 2*max(targetLengths)+1) =")
    c.dtype_in("logProbs", lp, FLOAT_TYPES)
    for name, t in (("negLogLikelihoodOut", nll), ("logAlphaOut", la)):
        c.same_dtype(name, t, "logProbs", lp)
    c.dtype_in("targets", tg, TARGET_TYPES)
    zero_inf = c.boolean("zeroInfinity", zeroInfinity)
    if N == 0:
        return EmptyPlan(c.op)
    _gpu_limit(c, device, max_l, lp)
    c.memory(logProbs=lp, targets=tg, negLogLikelihoodOut=nll, logAlphaOut=la)
    c.output("negLogLikelihoodOut", nll, logProbs=lp, targets=tg, logAlphaOut=la)
    c.output("logAlphaOut", la, logProbs=lp, targets=tg)
    return CtcLossPlan(device, lp, tg, nll, la, _Shape(T, N, C, il, tl, max_l, tg.rank == 2), blank, zero_inf)


aclnnCtcLossBackwardGetWorkspaceSize = make_get_workspace_size("aclnnCtcLossBackward", _build_backward)
aclnnCtcLossBackward = make_execute("aclnnCtcLossBackward")
aclnnCtcLossGetWorkspaceSize = make_get_workspace_size("aclnnCtcLoss", _build_forward)
aclnnCtcLoss = make_execute("aclnnCtcLoss")
