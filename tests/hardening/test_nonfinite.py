"""Non-finite inputs, one table: for every operator, forward and backward, every floating input
(the saved forward results a backward takes included: logProb, lse, negLogLikelihood, logAlpha, y),
each of +inf, -inf and NaN at chosen places (first, last, a target column, an ignored row, a masked
position, a blank, a padded time step or state, ...), on every device under test (cpu = NumPy,
emulated = the .cu kernels; cuda where ACLNN_GPU_TEST_DEVICES names it).

The expected result is PyTorch's formula in float64 on the same values: NaN where it gives NaN, the
same infinity where it gives one, the same finite value (to float32 accuracy) elsewhere. Each
reference function says which PyTorch formula it is (autograd, or the aten backward kernel on the
saved values); the documented departures of docs/API.md §7 are applied in the reference where they
apply, each with a comment naming its row there.

After the table, regressions with extreme finite values (-1e30) and long rows, which are not table
cells."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import aclnn_gpu as acl
import aclnn_gpu.functional as F
from aclnn_gpu.demo.samples import DeviceArrays
from support import DEVICE_KINDS, use_device

# (the kernels mark, which the sanitizer runs select, on the kernel devices' rows only: the cpu rows
# run NumPy, which ASan and UBSan do not instrument)
pytestmark = [pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")]
f32 = np.float32
VALUES = {"+inf": np.inf, "-inf": -np.inf, "nan": np.nan}


_ARRAYS: list[DeviceArrays] = []   # the device memory and stream of the two-phase calls of one device kind


@pytest.fixture(scope="module", params=[kind if kind == "cpu" else pytest.param(kind, marks=pytest.mark.kernels)
                                        for kind in DEVICE_KINDS])
def device(request):
    """One device switch and one stream per kind for the whole module (the table has hundreds of small
    calls; a stream per call would cost more than the calls)."""
    use_device(request.param)
    _ARRAYS.append(DeviceArrays())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # the references are tiny: a thread team per op waits on the busy cores
    yield request.param
    torch.set_num_threads(threads)
    _ARRAYS.pop().close()


def same(got, expected, what):
    """Equal non-finite pattern (NaN where NaN, the same signed infinities) and close finite values
    (to the result's own precision: float16 results carry its rounding)."""
    rtol, atol = (4e-3, 1e-3) if np.asarray(got).dtype == np.float16 else (2e-5, 2e-6)
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    for kind in (np.isnan, np.isposinf, np.isneginf):
        bad = kind(got) != kind(expected)
        assert not bad.any(), (f"{what}: {kind.__name__} differs at {np.argwhere(bad).tolist()}\n"
                               f"got\n{got}\nexpected\n{expected}")
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=rtol, atol=atol, err_msg=what)


def t64(a):
    return torch.tensor(np.asarray(a, np.float64))


# ---------------------------------------------------------------------------------------------- table
class Op(NamedTuple):
    """One operator's rows: clean inputs per configuration, the places to poison in each floating
    input, the library's call and PyTorch's float64 formula (both return {output name: array})."""
    configs: dict[str, dict[str, Any]]
    inputs: Callable[[dict[str, Any]], dict[str, np.ndarray]]
    places: Callable[[dict[str, Any]], dict[str, dict[str, tuple]]]
    run: Callable[[dict[str, Any], dict[str, np.ndarray]], dict[str, np.ndarray]]
    reference: Callable[[dict[str, Any], dict[str, np.ndarray]], dict[str, np.ndarray]]


def _rng(seed):
    return np.random.default_rng(seed)


# ---- KL divergence: self (2, 3), target (2, 3) or self (1, 3) broadcast against target (2, 3)
KL_CONFIGS = {"none": dict(reduction="none", log_target=False, self_shape=(2, 3)),
              "none-f16": dict(reduction="none", log_target=False, self_shape=(2, 3), dtype=np.float16),
              "sum-logtarget": dict(reduction="sum", log_target=True, self_shape=(2, 3)),
              "mean": dict(reduction="mean", log_target=False, self_shape=(2, 3)),
              "batchmean-broadcast": dict(reduction="batchmean", log_target=False, self_shape=(1, 3))}


def _kl_inputs(c):
    r = _rng(1)
    target = r.uniform(0.1, 1.0, (2, 3))
    return {"self": r.standard_normal(c["self_shape"]).astype(f32),
            "target": (np.log(target) if c["log_target"] else target).astype(f32),
            "grad_output": (r.standard_normal((2, 3)) if c["reduction"] == "none" else
                            np.asarray(r.standard_normal())).astype(f32)}


def _corners(shape):
    first, last = (0,) * len(shape), tuple(n - 1 for n in shape)
    return {"first": first} if first == last else {"first": first, "last": last}


def _kl_forward(c, a):
    return {"out": F.kl_div(a["self"], a["target"], c["reduction"], c["log_target"])}


def _kl(c, x, t):
    # torch.nn.functional.kl_div (xlogy(t, t) - t * x, or exp(t) * (t - x) with log_target), except that
    # batchmean divides by the broadcast shape's dim 0 (docs/API.md §7, "KL batchmean divisor": CANN's
    # rule; PyTorch divides by self.size(0), which differs only when target broadcasts self there)
    if c["reduction"] == "batchmean":
        return TF.kl_div(x, t, reduction="sum", log_target=c["log_target"]) / torch.broadcast_shapes(x.shape,
                                                                                                     t.shape)[0]
    return TF.kl_div(x, t, reduction=c["reduction"], log_target=c["log_target"])


def _kl_forward_ref(c, a):
    return {"out": _kl(c, t64(a["self"]), t64(a["target"])).numpy()}


def _kl_backward(c, a):
    return {"grad": F.kl_div_backward(a["grad_output"], a["self"], a["target"], c["reduction"], c["log_target"])}


def _kl_backward_ref(c, a):
    # autograd of the forward's formula with respect to self (self broadcast: summed back)
    x = t64(a["self"]).requires_grad_()
    _kl(c, x, t64(a["target"])).backward(t64(a["grad_output"]))
    return {"grad": x.grad.numpy()}


KL_DIV = Op(KL_CONFIGS, _kl_inputs,
            lambda c: {"self": _corners(c["self_shape"]), "target": _corners((2, 3))}, _kl_forward, _kl_forward_ref)
KL_DIV_BACKWARD = Op(KL_CONFIGS, _kl_inputs,
                     lambda c: {"grad_output": _corners((2, 3) if c["reduction"] == "none" else ()),
                                "self": _corners(c["self_shape"]), "target": _corners((2, 3))},
                     _kl_backward, _kl_backward_ref)

# ---- cross-entropy: N = 3, C = 4, targets [1, ignored, 3]
CE_TARGET = np.array([1, -100, 3])
CE_CONFIGS = {"none": dict(reduction="none", weight=False, ls=0.0, k=0.0),
              "mean-weight-smooth": dict(reduction="mean", weight=True, ls=0.1, k=0.0),
              "sum-zloss": dict(reduction="sum", weight=False, ls=0.0, k=0.25),
              "mean-weight-smooth-zloss": dict(reduction="mean", weight=True, ls=0.1, k=0.25),
              "none-smooth-zloss": dict(reduction="none", weight=False, ls=0.2, k=0.25),
              "sum-weight": dict(reduction="sum", weight=True, ls=0.0, k=0.0),
              "none-weight-smooth-zloss-f16": dict(reduction="none", weight=True, ls=0.1, k=0.25, dtype=np.float16)}
CE_LOGIT_PLACES = {"first": (0, 0), "target": (0, 1), "ignored-row": (1, 2), "last-target": (2, 3)}
CE_ROW_PLACES = {"first": (0,), "ignored-row": (1,), "last": (2,)}
CE_WEIGHT_PLACES = {"unused-class": (0,), "target-class": (1,), "last-target-class": (3,)}
FWD = (acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss)
GRAD = (acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad)


def _ce_inputs(c):
    r = _rng(2)
    x = r.standard_normal((3, 4))
    shape = (3,) if c["reduction"] == "none" else ()
    lp = torch.log_softmax(torch.tensor(x), 1)
    a = {"input": x.astype(f32), "log_prob": lp.numpy().astype(f32),
         "grad_loss": r.standard_normal(shape).astype(f32)}
    if c["weight"]:
        a["weight"] = r.uniform(0.5, 2.0, 4).astype(f32)
    if c["k"]:
        a["lse_for_zloss"] = torch.logsumexp(torch.tensor(x), 1).numpy().astype(f32)
        a["grad_zloss"] = r.standard_normal(shape).astype(f32)
    return a


def _ce_places(c, names):
    rows = CE_ROW_PLACES if c["reduction"] == "none" else {"scalar": ()}
    table = {"input": CE_LOGIT_PLACES, "log_prob": CE_LOGIT_PLACES, "grad_loss": rows, "grad_zloss": rows,
             "weight": CE_WEIGHT_PLACES, "lse_for_zloss": CE_ROW_PLACES}
    return {n: table[n] for n in names if (n != "weight" or c["weight"])
            and (n not in ("grad_zloss", "lse_for_zloss") or c["k"])}


def _two_phase(get_workspace_size_and_execute, dtype, *args):
    """Both phases of an operator with NumPy arrays (and None) as tensors; the last argument lists the
    shapes of the outputs of `dtype` (None: a null output). Returns the outputs read back."""
    s = _ARRAYS[-1]
    tensors, pointers = len(s.tensors), len(s.pointers)
    outs = [s.empty(shape, dtype) if shape is not None else None for shape in args[-1]]
    status = s.run(*get_workspace_size_and_execute, *[s.tensor(a) if isinstance(a, np.ndarray) else a
                                                      for a in args[:-1]], *outs)
    assert status == 0, acl.aclGetRecentErrMsg()
    results = [None if o is None else s.read(o) for o in outs]
    for tensor in s.tensors[tensors:]:          # this call's memory goes back at once: the stream stays
        acl.aclDestroyTensor(tensor)
    for pointer in s.pointers[pointers:]:
        acl.aclrtFree(pointer)
    del s.tensors[tensors:], s.pointers[pointers:]
    return results


def _ce_forward(c, a):
    shape = (3,) if c["reduction"] == "none" else ()
    k = c["k"]
    loss, lp, zloss, lse = _two_phase(FWD, a["input"].dtype, a["input"], CE_TARGET, a.get("weight"), c["reduction"], -100, c["ls"],
                                      k, bool(k), [shape, (3, 4), shape if k else None, (3,) if k else None])
    out = {"loss": loss, "log_prob": lp}
    if k:
        out.update(zloss=zloss, lse=lse)
    return out


def _zloss_rows(c, lse, counted):
    # CANN's zloss_n = k lse_n^2 over the rows not ignored (docs/API.md §7, "Cross-entropy z-loss"):
    # ignored rows are selected out, not multiplied by 0, so what they hold never shows
    z = torch.where(counted, c["k"] * lse * lse, torch.zeros_like(lse))
    if c["reduction"] == "none":
        return z
    return z.sum() / counted.sum() if c["reduction"] == "mean" else z.sum()


def _ce_forward_ref(c, a):
    # torch.nn.functional.cross_entropy and torch.log_softmax on the logits; the z-loss term with
    # lse = torch.logsumexp (CANN's formula)
    x, t = t64(a["input"]), torch.tensor(CE_TARGET)
    w = t64(a["weight"]) if c["weight"] else None
    loss = TF.cross_entropy(x, t, weight=w, ignore_index=-100, reduction=c["reduction"], label_smoothing=c["ls"])
    out = {"log_prob": torch.log_softmax(x, 1).numpy()}
    if c["k"]:
        lse = torch.logsumexp(x, 1)
        z = _zloss_rows(c, lse, t != -100)
        loss = loss + z
        out.update(zloss=z.numpy(), lse=lse.numpy())
    out["loss"] = loss.numpy()
    return out


def _ce_grad(c, a):
    k = c["k"]
    (grad,) = _two_phase(GRAD, a["log_prob"].dtype, a["grad_loss"], a["log_prob"], CE_TARGET, a.get("weight"), a.get("grad_zloss"),
                         a.get("lse_for_zloss"), c["reduction"], -100, c["ls"], k, [(3, 4)])
    return {"grad": grad}


def _ce_grad_ref(c, a):
    # PyTorch's backward kernels on the saved log_prob: autograd of cross_entropy's loss written on
    # log_prob (nll_loss plus, with label smoothing, aten's cross_entropy_loss_label_smoothing term)
    # gives grad_lp, then aten._log_softmax_backward_data(grad_lp, log_prob) = grad_lp - exp(lp) sum(grad_lp);
    # the z-loss adds autograd's d/dlse of (g + gz) . zloss times logsumexp's backward exp(lp)
    lp, t = t64(a["log_prob"]).requires_grad_(), torch.tensor(CE_TARGET)
    counted = t != -100
    w = t64(a["weight"]) if c["weight"] else None
    loss = TF.nll_loss(lp, t, weight=w, ignore_index=-100, reduction=c["reduction"])
    if c["ls"]:
        smooth = -(lp * w).sum(1) if w is not None else -lp.sum(1)
        smooth = smooth.masked_fill(~counted, 0.0)
        if c["reduction"] == "mean":
            smooth = smooth.sum() / (w[t[counted]].sum() if w is not None else counted.sum())
        elif c["reduction"] == "sum":
            smooth = smooth.sum()
        loss = (1 - c["ls"]) * loss + smooth * (c["ls"] / 4)
    g = t64(a["grad_loss"])
    (grad_lp,) = torch.autograd.grad(loss, lp, g)
    grad = torch.ops.aten._log_softmax_backward_data(grad_lp, lp.detach(), 1, torch.float64)
    if c["k"]:
        lse = t64(a["lse_for_zloss"]).requires_grad_()
        (dlse,) = torch.autograd.grad(_zloss_rows(c, lse, counted), lse, g + t64(a["grad_zloss"]))
        grad = grad + dlse[:, None] * lp.detach().exp()
    # docs/API.md §7, "CE grad, an ignored row": 0 whatever the row's logProb, weight or lse hold
    # (PyTorch's log_softmax backward gives exp(lp) * 0 there: NaN for a NaN or +inf logProb)
    grad[~counted] = 0.0
    return {"grad": grad.numpy()}


CROSS_ENTROPY = Op(CE_CONFIGS, _ce_inputs, lambda c: _ce_places(c, ("input", "weight")), _ce_forward,
                   _ce_forward_ref)
CROSS_ENTROPY_GRAD = Op(CE_CONFIGS, _ce_inputs,
                        lambda c: _ce_places(c, ("grad_loss", "log_prob", "weight", "grad_zloss", "lse_for_zloss")),
                        _ce_grad, _ce_grad_ref)

# ---- CTC: T = 5, N = 4, C = 4, blank 0; targets [1, 2] (a skip), [3] (input length 4: t = 4 is
# padding; states 3, 4 of log_alpha are padding), [1, 1] (a repeat: no skip), [2, 3] (input length
# 3: its last step t = 2 has label 2 in state 1 only, before the final states 3, 4)
CTC_TARGETS = np.array([[1, 2], [3, 0], [1, 1], [2, 3]])
CTC_IL, CTC_TL = [5, 4, 5, 3], [2, 1, 2, 2]
CTC_CONFIGS = {"plain": dict(zero_infinity=False), "zero-infinity": dict(zero_infinity=True),
               "plain-f16": dict(zero_infinity=False, dtype=np.float16)}
# the last step's early-label places: a column whose only state there is s < 2L-1 (PyTorch's term
# exp(-inf + nll - lp): NaN for lp = -inf, 0 for +inf)
CTC_LP_PLACES = {"first-blank": (0, 0, 0), "label": (2, 0, 2), "unused-class": (1, 0, 3),
                 "padded-time": (4, 1, 3), "last-blank": (4, 2, 0), "last-label": (4, 2, 1),
                 "last-early-label": (4, 0, 1), "shorter-last-early-label": (2, 3, 2),
                 "shorter-last-final-label": (2, 3, 3), "shorter-last-blank": (2, 3, 0)}


def _ctc_inputs(c):
    r = _rng(3)
    lp = torch.log_softmax(torch.tensor(r.standard_normal((5, 4, 4))), -1).numpy().astype(f32)
    nll, la = F.ctc_loss(lp, CTC_TARGETS, CTC_IL, CTC_TL, 0, c["zero_infinity"])
    return {"log_probs": lp, "grad_out": r.uniform(0.5, 1.5, 4).astype(f32), "neg_log_likelihood": nll,
            "log_alpha": la}


def _ctc_forward(c, a):
    nll, la = F.ctc_loss(a["log_probs"], CTC_TARGETS, CTC_IL, CTC_TL, 0, c["zero_infinity"])
    return {"neg_log_likelihood": nll, "log_alpha": la}


def _ctc_forward_ref(c, a):
    # aten._ctc_loss (PyTorch's CPU forward); zero_infinity as torch.nn.functional.ctc_loss applies it
    # (an nll of +inf becomes 0). log_alpha: aten's inside the valid region (t < Lin, s <= 2L), -inf
    # outside (aten leaves it unwritten; docs/API.md §7, "CtcLoss logAlphaOut width": -inf)
    nll, la = torch.ops.aten._ctc_loss(t64(a["log_probs"]), torch.tensor(CTC_TARGETS), CTC_IL, CTC_TL, 0, False)
    if c["zero_infinity"]:
        nll = torch.where(nll == np.inf, torch.zeros_like(nll), nll)
    valid = np.full(la.shape, -np.inf)
    for b, (il, tl) in enumerate(zip(CTC_IL, CTC_TL)):
        valid[b, :il, :2 * tl + 1] = la[b, :il, :2 * tl + 1].numpy()
    return {"neg_log_likelihood": nll.numpy(), "log_alpha": valid}


def _ctc_backward(c, a):
    return {"grad": F.ctc_loss_backward(a["grad_out"], a["log_probs"], CTC_TARGETS, CTC_IL, CTC_TL,
                                        a["neg_log_likelihood"], a["log_alpha"], 0, c["zero_infinity"])}


def _ctc_backward_ref(c, a):
    # aten._ctc_loss_backward, PyTorch's CPU backward kernel, on the same saved nll and log_alpha;
    # 16-bit: on aten._ctc_loss's in float64 of the same log-probs (docs/API.md §7, "CTC in FLOAT16 /
    # BFLOAT16, the ruling": the backward runs the forward again and reads neither given)
    nll, la = t64(a["neg_log_likelihood"]), t64(a["log_alpha"])
    if "dtype" in c:
        nll, la = torch.ops.aten._ctc_loss(t64(a["log_probs"]), torch.tensor(CTC_TARGETS), CTC_IL, CTC_TL, 0, False)
    grad = torch.ops.aten._ctc_loss_backward(t64(a["grad_out"]), t64(a["log_probs"]), torch.tensor(CTC_TARGETS),
                                             CTC_IL, CTC_TL, nll, la, 0, c["zero_infinity"]).numpy()
    if c["zero_infinity"]:
        # docs/API.md §7, "CTC backward, zeroInfinity, a sample that cannot align": 0 also when
        # logAlpha says so (both final states -inf), whatever nll is given
        la = a["log_alpha"]
        for b, (il, tl) in enumerate(zip(CTC_IL, CTC_TL)):
            if np.isneginf(la[b, il - 1, 2 * tl]) and np.isneginf(la[b, il - 1, 2 * tl - 1]):
                grad[:, b] = 0.0
    return {"grad": grad}


CTC_LOSS = Op(CTC_CONFIGS, _ctc_inputs, lambda c: {"log_probs": CTC_LP_PLACES}, _ctc_forward, _ctc_forward_ref)
CTC_LOSS_BACKWARD = Op(
    # float16: gradOut and logProbs only; the given nll and logAlpha are not read for the 16-bit
    # backward's math (docs/API.md §7, the 16-bit ruling)
    CTC_CONFIGS, _ctc_inputs,
    lambda c: {"grad_out": {"first": (0,), "padded-sample": (1,)},
               "log_probs": CTC_LP_PLACES} if "dtype" in c else
              {"grad_out": {"first": (0,), "padded-sample": (1,)},
               "log_probs": CTC_LP_PLACES,
               "neg_log_likelihood": {"first": (0,), "padded-sample": (1,)},
               # (b, t, s): state 3 at t = 0 is unreachable; sample 1 has t = 4 and s >= 3 as padding
               "log_alpha": {"first": (0, 0, 0), "unreachable": (0, 0, 3), "final-blank": (0, 4, 4),
                             "final-label": (2, 4, 3), "last-step-early-state": (2, 4, 0),
                             "padded-time": (1, 4, 1), "padded-state": (1, 2, 4)}},
    _ctc_backward, _ctc_backward_ref)

# ---- ConvTBC: input (T 4, B 2, Cin 3), weight (K 3, Cin 3, Cout 2), bias (2); pad 1 makes the
# first and last taps meet the zero padding
CONV_CONFIGS = {"pad1": dict(pad=1), "pad0": dict(pad=0), "pad1-f16": dict(pad=1, dtype=np.float16)}


def _conv_inputs(c):
    r = _rng(4)
    t_out = 4 + 2 * c["pad"] - 3 + 1
    return {"input": r.standard_normal((4, 2, 3)).astype(f32), "weight": r.standard_normal((3, 3, 2)).astype(f32),
            "bias": r.standard_normal(2).astype(f32), "grad": r.standard_normal((t_out, 2, 2)).astype(f32)}


def _conv_places(c, names):
    t_out = 4 + 2 * c["pad"] - 3 + 1
    table = {"input": _corners((4, 2, 3)), "weight": _corners((3, 3, 2)), "bias": _corners((2,)),
             "grad": _corners((t_out, 2, 2))}
    return {n: table[n] for n in names}


def _conv_forward(c, a):
    return {"out": F.conv_tbc(a["input"], a["weight"], a["bias"], c["pad"])}


def _conv_forward_ref(c, a):
    # torch.conv_tbc (aten's: one addmm per tap over the valid time range, padding never multiplied)
    return {"out": torch.conv_tbc(t64(a["input"]), t64(a["weight"]), t64(a["bias"]), c["pad"]).numpy()}


def _conv_backward(c, a):
    gi, gw, gb = F.conv_tbc_backward(a["grad"], a["input"], a["weight"], a["bias"], c["pad"])
    return {"grad_input": gi, "grad_weight": gw, "grad_bias": gb}


def _conv_backward_ref(c, a):
    # aten.conv_tbc_backward, PyTorch's backward kernel (bias is not read)
    gi, gw, gb = torch.ops.aten.conv_tbc_backward(t64(a["grad"]), t64(a["input"]), t64(a["weight"]),
                                                  t64(a["bias"]), c["pad"])
    return {"grad_input": gi.numpy(), "grad_weight": gw.numpy(), "grad_bias": gb.numpy()}


CONV_TBC = Op(CONV_CONFIGS, _conv_inputs, lambda c: _conv_places(c, ("input", "weight", "bias")), _conv_forward,
              _conv_forward_ref)
CONV_TBC_BACKWARD = Op(CONV_CONFIGS, _conv_inputs, lambda c: _conv_places(c, ("grad", "input", "weight", "bias")),
                       _conv_backward, _conv_backward_ref)

# ---- scaled masked softmax: (B 1, N 2, S1 3, S2 5), mask (1, 1, 3, 5): row 0 two masked positions,
# row 1 one position kept, row 2 fully masked
SMS_MASK = np.array([[0, 0, 1, 0, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool).reshape(1, 1, 3, 5)
SMS_CONFIGS = {"scale1": dict(scale=1.0, triu=False), "scale0.5-triu": dict(scale=0.5, triu=True),
               "scale1-f16": dict(scale=1.0, triu=False, dtype=np.float16)}
SMS_PLACES = {"first": (0, 0, 0, 0), "masked": (0, 0, 0, 2), "lone-kept": (0, 1, 1, 4),
              "fully-masked-row": (0, 1, 2, 4), "last-kept-row0": (0, 1, 0, 3)}


def _sms_mask(c):
    mask = np.broadcast_to(SMS_MASK, (1, 2, 3, 5))
    return mask | (np.arange(5)[None, :] > np.arange(3)[:, None]) if c["triu"] else mask


def _sms_inputs(c):
    r = _rng(5)
    x = r.standard_normal((1, 2, 3, 5)).astype(f32)
    return {"x": x, "y": F.scaled_masked_softmax(x, SMS_MASK, c["scale"], c["triu"]),
            "grad_output": r.standard_normal((1, 2, 3, 5)).astype(f32)}


def _sms_forward(c, a):
    return {"y": F.scaled_masked_softmax(a["x"], SMS_MASK, c["scale"], c["triu"])}


def _sms_forward_ref(c, a):
    # torch.softmax(masked_fill(scale * x, mask, -inf)), except for the rows without a kept value above
    # -inf: 0 there, where softmax gives NaN (-inf - -inf). A fully masked row is the library's ruling
    # (docs/OPERATORS.md §5); a row whose kept values are all -inf is docs/API.md §7, "scaled masked
    # softmax, a row whose kept values are all -inf": -inf in x masks like the mask
    mask = torch.tensor(_sms_mask(c))
    t = (t64(a["x"]) * c["scale"]).masked_fill(mask, -np.inf)
    y = torch.softmax(t, -1)
    return {"y": y.masked_fill((t == -np.inf).all(-1, keepdim=True), 0.0).numpy()}


def _sms_backward(c, a):
    return {"grad": F.scaled_masked_softmax_backward(a["grad_output"], a["y"], SMS_MASK, c["scale"], c["triu"])}


def _sms_backward_ref(c, a):
    # autograd of the forward above on the saved y: aten._softmax_backward_data(g, y) = y (g - sum(g y))
    # over the whole row, masked_fill's backward (0 where masked), then scale
    grad = torch.ops.aten._softmax_backward_data(t64(a["grad_output"]), t64(a["y"]), -1, torch.float64)
    return {"grad": (grad.masked_fill(torch.tensor(_sms_mask(c)), 0.0) * c["scale"]).numpy()}


SCALED_MASKED_SOFTMAX = Op(SMS_CONFIGS, _sms_inputs, lambda c: {"x": SMS_PLACES}, _sms_forward, _sms_forward_ref)
SCALED_MASKED_SOFTMAX_BACKWARD = Op(SMS_CONFIGS, _sms_inputs,
                                    lambda c: {"grad_output": SMS_PLACES, "y": SMS_PLACES},
                                    _sms_backward, _sms_backward_ref)

OPS = {"KlDiv": KL_DIV, "KlDivBackward": KL_DIV_BACKWARD, "CrossEntropyLoss": CROSS_ENTROPY,
       "CrossEntropyLossGrad": CROSS_ENTROPY_GRAD, "CtcLoss": CTC_LOSS, "CtcLossBackward": CTC_LOSS_BACKWARD,
       "ConvTbc": CONV_TBC, "ConvTbcBackward": CONV_TBC_BACKWARD, "ScaledMaskedSoftmax": SCALED_MASKED_SOFTMAX,
       "ScaledMaskedSoftmaxBackward": SCALED_MASKED_SOFTMAX_BACKWARD}


def _rows():
    for op_name, op in OPS.items():
        for config_name, config in op.configs.items():
            for name, places in op.places(config).items():
                for place in places:
                    yield pytest.param(op_name, config_name, name, place,
                                       id=f"{op_name}-{config_name}-{name}@{place}")


@pytest.mark.parametrize("op_name,config_name,name,place", list(_rows()))
def test_nonfinite_table(device, op_name, config_name, name, place):
    """One input, one place, each of +inf, -inf and NaN: the library equals PyTorch's formula."""
    op = OPS[op_name]
    config = op.configs[config_name]
    # the inputs in the configuration's dtype (weight stays float32, CANN's only weight dtype); the
    # reference reads the same rounded values
    clean = {k: v if k == "weight" else v.astype(config.get("dtype", f32)) for k, v in op.inputs(config).items()}
    index = op.places(config)[name][place]
    for label, value in VALUES.items():
        inputs = dict(clean)
        inputs[name] = clean[name].copy()
        inputs[name][index] = value
        got, expected = op.run(config, inputs), op.reference(config, inputs)
        assert got.keys() == expected.keys()
        for output in expected:
            same(got[output], expected[output], f"{device} {op_name} {config_name}: {name}[{index}] = {label}, "
                                                f"{output}")


def test_table_covers_every_floating_input():
    """Every floating tensor each operator takes appears in its rows (a new input needs a row)."""
    want = {"KlDiv": {"self", "target"}, "KlDivBackward": {"grad_output", "self", "target"},
            "CrossEntropyLoss": {"input", "weight"},
            "CrossEntropyLossGrad": {"grad_loss", "log_prob", "weight", "grad_zloss", "lse_for_zloss"},
            "CtcLoss": {"log_probs"}, "CtcLossBackward": {"grad_out", "log_probs", "neg_log_likelihood", "log_alpha"},
            "ConvTbc": {"input", "weight", "bias"}, "ConvTbcBackward": {"grad", "input", "weight", "bias"},
            "ScaledMaskedSoftmax": {"x"}, "ScaledMaskedSoftmaxBackward": {"grad_output", "y"}}
    for op_name, op in OPS.items():
        covered = {name for config in op.configs.values() for name in op.places(config)}
        assert covered == want[op_name], op_name


# ------------------------------------------------------------------------- regressions beyond the table
def test_cross_entropy_grad_without_smoothing(device):
    """No label smoothing means no smoothing terms: exp(lp) = inf and an infinite gradLoss must not
    become 0 * inf = NaN in columns where PyTorch gives inf."""
    lp = np.full((1, 3), np.log(1 / 3), f32)
    lp_inf = lp.copy()
    lp_inf[0, 1] = np.inf
    got = F.cross_entropy_loss_grad(np.array(1, f32), lp_inf, np.array([1]), reduction="sum")
    same(got, [[1 / 3, np.inf, 1 / 3]], f"{device}: exp(lp) = inf at the target")
    got = F.cross_entropy_loss_grad(np.array([np.inf], f32), lp, np.array([1]), reduction="none")
    same(got[0, [0, 2]], [np.inf, np.inf], f"{device}: gradLoss = inf, non-target columns")


@pytest.mark.parametrize("what", ["+inf", "nan"])
def test_scaled_masked_softmax_long_rows(device, what):
    """Rows longer than 8192 (the online-softmax kernel): a +inf or a NaN makes the whole row NaN,
    masked positions included, as in the short-row kernels and PyTorch."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 1, 2, 8200)).astype(f32)
    x[0, 0, 1, 3] = np.inf if what == "+inf" else np.nan
    mask = np.zeros((1, 1, 2, 8200), bool)
    mask[..., 10:20] = True
    y = F.scaled_masked_softmax(x, mask, 1.0)
    assert np.isnan(y[0, 0, 1]).all(), f"{device}: row with {what}"
    assert np.isfinite(y[0, 0, 0]).all() and (y[0, 0, 0, 10:20] == 0).all(), f"{device}: the clean row"


def _ctc_torch_grad(lp, tg, il, tl, nll, la):
    return torch.ops.aten._ctc_loss_backward(torch.ones(lp.shape[1], dtype=torch.float64),
                                             torch.tensor(lp, dtype=torch.float64), torch.tensor(tg), il, tl,
                                             torch.tensor(nll, dtype=torch.float64),
                                             torch.tensor(la, dtype=torch.float64), 0, False).numpy()


@pytest.mark.parametrize("value", [-1e30, -1e10])
def test_ctc_backward_huge_negative_log_prob(device, value):
    """A log-prob of -1e30 (finite): the occupancy is exp(-huge) = 0, as in PyTorch; the cpu path's
    fast recursion cancels at 1e30 there and falls back to the log-space one."""
    lp = np.full((3, 1, 4), np.log(0.25), f32)
    lp[:, 0, 0] = value
    tg = np.array([[1]])
    nll, la = F.ctc_loss(lp, tg, [3], [1])
    got = F.ctc_loss_backward(np.ones(1, f32), lp, tg, [3], [1], nll, la)
    same(got, _ctc_torch_grad(lp, tg, [3], [1], nll, la), device)


def test_ctc_backward_nan_in_log_alpha(device):
    """A NaN inside the valid region of a given logAlpha spoils only the time step that reads it,
    as in PyTorch (the fast recursion would carry it to every earlier step)."""
    rng = np.random.default_rng(7)
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((6, 2, 4))), -1).numpy().astype(f32)
    tg = np.array([[1, 2, 2], [3, 1, 1]])
    nll, la = F.ctc_loss(lp, tg, [6, 6], [3, 2])
    la = la.copy()
    la[0, 2, 3] = np.nan
    got = F.ctc_loss_backward(np.ones(2, f32), lp, tg, [6, 6], [3, 2], nll, la)
    expected = _ctc_torch_grad(lp, tg, [6, 6], [3, 2], nll, la)
    same(got, expected, device)
    assert np.isfinite(got[:2, 0]).all() and np.isnan(got[2, 0]).any()
