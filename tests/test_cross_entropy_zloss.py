"""CANN's z-loss in aclnnCrossEntropyLoss / aclnnCrossEntropyLossGrad (docs/API.md §7), on every test
device (cpu, emulated; cuda where ACLNN_GPU_TEST_DEVICES names it), against PyTorch autograd in float64
of the same formula:

    loss = CE(x) + Z(x),   Z = k * logsumexp(x_i)^2 over the rows i whose target != ignoreIndex,
    reduced like the loss: per row ("none"), summed ("sum"), or divided by the number n of those rows
    ("mean": unweighted, where CE divides by D = sum of w[t_i]; D == 0 gives a CE part of 0)
    d/dx of  gradLoss . loss + gradZloss . Z      (CANN's gradZ = grad + gradZloss)

plus the refusals, the bits of k = 0, non-finite logits, the functional / torch layers and the NumPy
reference at sizes that take its threaded and shifted-row paths."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu import functional as fn
from aclnn_gpu.reference import cross_entropy as reference
from support import assert_close, assert_refused
from test_cross_entropy import FLOAT_DTYPES, REDUCTIONS, draw_case
from test_cross_entropy_reference import nonfinite_case, same_nonfinite

GRAD = (acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad)
FWD = (acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss)
f32 = np.float32


def torch_zloss(x64, t, w, reduction, ii, ls, k, g, gz=None):
    """(loss, zloss, lse of every row, d (g . loss + gz . zloss) / dx) in float64, the formula above."""
    x = torch.tensor(np.asarray(x64, np.float64), requires_grad=True)
    N, C = x.shape
    tt = torch.tensor(np.asarray(t, np.int64))
    w64 = None if w is None else torch.tensor(np.asarray(w, np.float64))
    ce_rows = F.cross_entropy(x, tt, weight=w64, ignore_index=ii, reduction="none", label_smoothing=ls)
    counted = torch.nonzero(tt != ii)[:, 0]
    lse = torch.logsumexp(x[counted], 1)     # ignored rows: never read
    z_rows = k * lse * lse
    if reduction == "none":
        ce, z = ce_rows, torch.zeros(N, dtype=torch.float64).index_add(0, counted, z_rows)
    else:
        ce, z = ce_rows.sum(), z_rows.sum()
        if reduction == "mean":
            D = (torch.ones(N, dtype=torch.float64) if w64 is None else w64[tt.clamp(0, C - 1)])[counted].sum()
            ce = ce / D if D != 0 else ce * 0.0
            z = z / counted.numel() if counted.numel() else z * 0.0
    loss = ce + z
    total = (loss * torch.tensor(np.asarray(g, np.float64)).reshape(loss.shape)).sum()
    if gz is not None:
        total = total + (z * torch.tensor(np.asarray(gz, np.float64)).reshape(z.shape)).sum()
    total.backward()
    with torch.no_grad():
        lse_all = torch.logsumexp(x, 1)
    return loss.detach().numpy(), z.detach().numpy(), lse_all.numpy(), x.grad.numpy()


def run_forward(s, x, t, w, reduction, ii, ls, k, *, return_zloss=True, want_lse=True, strided=False):
    """(loss, logProb, zloss or None, lse or None) through the two-phase API."""
    N, C = x.shape
    shape = (N,) if reduction == "none" else ()
    loss = s.poisoned(shape, x.dtype, strided=strided and reduction == "none")
    lp = s.poisoned((N, C), x.dtype, strided=strided)
    zl = s.poisoned(shape, x.dtype, strided=strided and reduction == "none") if return_zloss else None
    lse = s.poisoned((N,), x.dtype, strided=strided) if want_lse else None
    status = s.run(*FWD, s.tensor(x, strided=strided, offset=1), s.tensor(t, strided=strided),
                   None if w is None else s.tensor(w), reduction, ii, ls, k, return_zloss, loss, lp, zl, lse)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(loss), s.read(lp), None if zl is None else s.read(zl), None if lse is None else s.read(lse)


def run_grad(s, g, lp, t, w, reduction, ii, ls, k, gz, lse, *, strided=False):
    out = s.poisoned(lp.shape, lp.dtype, strided=strided)
    status = s.run(*GRAD, s.tensor(g), s.tensor(lp, strided=strided, offset=1), s.tensor(t, strided=strided),
                   None if w is None else s.tensor(w), None if gz is None else s.tensor(gz),
                   None if lse is None else s.tensor(lse, strided=strided), reduction, ii, ls, k, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(out)


def loss_input(rng, reduction, N, dtype):
    return (rng.standard_normal(N) if reduction == "none" else np.asarray(rng.standard_normal())).astype(dtype)


# ------------------------------------------------------------------------------------ values
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_zloss_forward_and_backward_vs_torch(session, rng, dtype, reduction):
    """Random shapes, weights, ignoreIndex of any sign, label smoothing, int32 / int64 targets, strided
    views: loss, zlossOut, lseForZlossOut and the gradient (gradZloss given or null) match autograd."""
    for trial in range(3):
        x, t, w, ii = draw_case(rng)
        N, C = x.shape
        if reduction == "mean" and (t == ii).all():
            t[0] = (ii + 1) % C if 0 <= ii + 1 < C else 0
        x = x.astype(dtype)
        ls = float(rng.choice([0.0, 0.1]))
        k = float(rng.choice([1e-4, 0.05, 0.3]))
        g = loss_input(rng, reduction, N, dtype)
        gz = loss_input(rng, reduction, N, dtype) if trial != 1 else None
        want_loss, want_z, want_lse, want_grad = torch_zloss(x.astype(np.float64), t, w, reduction, ii, ls, k,
                                                             g.astype(np.float64),
                                                             None if gz is None else gz.astype(np.float64))
        strided = bool(rng.integers(0, 2))
        tt = t.astype(np.int32 if trial % 2 else np.int64)
        loss, lp, zl, lse = run_forward(session, x, tt, w, reduction, ii, ls, k, strided=strided)
        what = f"N={N} C={C} ii={ii} w={w is not None} ls={ls} k={k} strided={strided} t={t}"
        red_scale = 4.0 * (np.sqrt(N) if reduction != "none" else 1.0)
        assert_close(lse, want_lse, dtype, scale=4.0, what=what)
        assert_close(zl, want_z, dtype, scale=red_scale, what=what)
        assert_close(loss, want_loss, dtype, scale=red_scale, what=what)
        grad = run_grad(session, g, lp, tt, w, reduction, ii, ls, k, gz, lse, strided=strided)
        assert not np.isnan(grad.astype(np.float64)).any(), what
        assert_close(grad, want_grad, dtype, scale=4.0, what=what)
        assert not grad[t == ii].any(), "ignored rows: zeros"


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_zloss_mean_counts_rows_not_weights(session, rng, reduction):
    """The z-loss is unweighted and its "mean" divides by the rows not ignored (CANN's sum(ignoreMask)),
    not by the weighted D of the cross-entropy part; with D == 0 (only zero-weight targets) the loss and
    the gradient are the z-loss's alone."""
    N, C, k = 6, 5, 0.2
    x = rng.standard_normal((N, C)) * 2
    t = np.array([0, 1, -100, 3, 3, 4])
    w = np.array([0.5, 2.0, 3.0, 0.25, 4.0], f32)
    g = loss_input(rng, reduction, N, np.float64)
    loss, lp, zl, lse = run_forward(session, x, t, w, reduction, -100, 0.0, k)
    counted = t != -100
    lse64 = torch.logsumexp(torch.tensor(x), 1).numpy()
    rows = np.where(counted, k * lse64 ** 2, 0.0)
    want_z = rows if reduction == "none" else rows.sum() / (counted.sum() if reduction == "mean" else 1)
    np.testing.assert_allclose(zl, want_z, rtol=1e-12)
    want = torch_zloss(x, t, w, reduction, -100, 0.0, k, g)
    np.testing.assert_allclose(loss, want[0], rtol=1e-12)
    np.testing.assert_allclose(run_grad(session, g, lp, t, w, reduction, -100, 0.0, k, None, lse), want[3],
                               rtol=1e-10, atol=1e-14)
    # D == 0: every counted target has weight 0
    w0 = w.copy()
    w0[[0, 1, 3, 4]] = 0.0
    loss0, lp0, zl0, lse0 = run_forward(session, x, t, w0, reduction, -100, 0.0, k)
    want0 = torch_zloss(x, t, w0, reduction, -100, 0.0, k, g)
    np.testing.assert_allclose(loss0, want0[0], rtol=1e-12)
    np.testing.assert_allclose(zl0, want_z, rtol=1e-12)
    grad0 = run_grad(session, g, lp0, t, w0, reduction, -100, 0.0, k, None, lse0)
    np.testing.assert_allclose(grad0, want0[3], rtol=1e-10, atol=1e-14)
    assert np.abs(grad0[counted]).min() > 0 and not grad0[~counted].any()


def test_zloss_gradient_of_zlossout_alone(session, rng):
    """gradLoss = 0 and gradZloss = 1: out is d zloss / dx (CANN: gradZ = grad + gradZloss), which the
    flash-attn and Liger kernels drop; gradZloss null: out is d loss / dx."""
    N, C, k = 5, 7, 0.1
    x = rng.standard_normal((N, C)) * 3
    t = np.array([0, 6, -100, 2, 2])
    for reduction in REDUCTIONS:
        zero = np.zeros(N) if reduction == "none" else np.zeros(())
        one = np.ones(N) if reduction == "none" else np.ones(())
        _, lp, _, lse = run_forward(session, x, t, None, reduction, -100, 0.1, k)
        got = run_grad(session, zero, lp, t, None, reduction, -100, 0.1, k, one, lse)
        want = torch_zloss(x, t, None, reduction, -100, 0.1, k, zero, one)[3]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)
        # the z-loss's gradient is 2 k lse p (/ n): no target column term
        n = 4 if reduction == "mean" else 1
        p = np.exp(lp)
        np.testing.assert_allclose(got, np.where((t != -100)[:, None], 2 * k * lse[:, None] * p / n, 0),
                                   rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_zloss_scale_zero_is_the_plain_loss(session, rng, reduction):
    """lseSquareScaleForZloss = 0: the loss, logProb and gradient bits of the call without z-loss
    arguments; zlossOut (returnZloss) is 0; lseForZlossOut is still written; gradZloss and lse
    (NaN-filled) are not read."""
    N, C = 6, 11
    x = (rng.standard_normal((N, C)) * 2).astype(f32)
    t = rng.integers(0, C, N)
    t[2] = -100
    w = rng.uniform(0.5, 2, C).astype(f32)
    plain_loss, plain_lp, _, _ = run_forward(session, x, t, w, reduction, -100, 0.1, 0.0, return_zloss=False,
                                             want_lse=False)
    loss, lp, zl, lse = run_forward(session, x, t, w, reduction, -100, 0.1, 0.0)
    assert loss.tobytes() == plain_loss.tobytes() and lp.tobytes() == plain_lp.tobytes()
    assert not zl.any()
    assert_close(lse, torch.logsumexp(torch.tensor(x, dtype=torch.float64), 1).numpy(), f32)
    g = loss_input(rng, reduction, N, f32)
    nan_gz = np.full(g.shape, np.nan, f32)
    plain = run_grad(session, g, lp, t, w, reduction, -100, 0.1, 0.0, None, None)
    got = run_grad(session, g, lp, t, w, reduction, -100, 0.1, 0.0, nan_gz, np.full(N, np.nan, f32))
    assert got.tobytes() == plain.tobytes()


# z-loss tensors of any shape at scale 0, as CANN's own system tests of aclnnCrossEntropyLossGrad pass
# them ((17,) or (256,) with N = 7 or 17, 0-D, 2-D) and of aclnnCrossEntropyLoss ([1]-shaped outputs)
ANY_ZLOSS_SHAPES = [((17,), (256,)), ((256,), ()), ((), (17,)), ((3, 5), (1,)), ((9,), (7, 1))]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", ANY_ZLOSS_SHAPES, ids=str)
def test_zloss_scale_zero_grad_takes_any_shape(session, rng, reduction, shapes):
    """lseSquareScaleForZloss = 0: gradZlossOptional / lseForZlossOptional of any shape are accepted
    (CANN checks only their dtype then) and not read: the gradient has the bits of the call without
    them, and matches PyTorch."""
    N, C = 7, 5
    gz_shape, lse_shape = shapes
    x = (rng.standard_normal((N, C)) * 2).astype(f32)
    t = rng.integers(0, C, N)
    t[1] = -100
    lp = torch.log_softmax(torch.tensor(x, dtype=torch.float64), 1).numpy().astype(f32)
    g = loss_input(rng, reduction, N, f32)
    plain = run_grad(session, g, lp, t, None, reduction, -100, 0.0, 0.0, None, None)
    got = run_grad(session, g, lp, t, None, reduction, -100, 0.0, 0.0, np.full(gz_shape, np.nan, f32),
                   np.full(lse_shape, np.nan, f32))
    assert got.tobytes() == plain.tobytes()
    want = torch_zloss(lp.astype(np.float64), t, None, reduction, -100, 0.0, 0.0, g)[3]
    assert_close(got, want, f32, scale=4)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("return_zloss", [False, True])
def test_zloss_scale_zero_forward_takes_cann_output_shapes(session, rng, reduction, return_zloss):
    """lseSquareScaleForZloss = 0 with CANN's system-test outputs: zlossOut and lseForZlossOut [1]
    whatever N and the reduction. Accepted; the loss and logProb are the plain call's; an output whose
    shape is not the documented one is left untouched."""
    N, C = 6, 4
    x = (rng.standard_normal((N, C)) * 2).astype(f32)
    t = rng.integers(0, C, N)
    shape = (N,) if reduction == "none" else ()
    results = []
    for zl_shape in (None, (1,)):   # the plain call, then CANN's [1] buffers
        loss, lp = session.poisoned(shape, f32), session.poisoned((N, C), f32)
        zl = lse = None if zl_shape is None else session.poisoned(zl_shape, f32)
        if zl_shape is not None:
            lse = session.poisoned(zl_shape, f32)
        status = session.run(*FWD, session.tensor(x), session.tensor(t), None, reduction, -100, 0.0, 0.0,
                             return_zloss and zl is not None, loss, lp, zl, lse)
        assert status == 0, acl.aclGetRecentErrMsg()
        results.append(session.read(loss).tobytes() + session.read(lp).tobytes())
    assert results[0] == results[1]
    assert_close(session.read(loss), F.cross_entropy(torch.tensor(x, dtype=torch.float64), torch.tensor(t),
                                                     reduction=reduction).numpy(), f32)
    assert np.isnan(session.read(lse)).all()
    if reduction == "none":   # (1,) is not the documented (N,): untouched
        assert np.isnan(session.read(zl)).all()
    else:                     # [1] is the documented shape: the z-loss, 0 at k = 0, when asked for
        assert (session.read(zl) == 0).all() if return_zloss else np.isnan(session.read(zl)).all()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64), dtypes.bfloat16],
                         ids=lambda d: d.name)
def test_zloss_nonfinite_logits(session, rng, reduction, dtype):
    """-inf / +inf / NaN logits: lseForZlossOut is torch.logsumexp's (+inf for a row holding +inf, -inf
    for an all -inf row, NaN for a NaN), zlossOut and the loss have autograd's NaN / inf positions, and
    the gradient (from the forward's logProb and lse) has them for the rows that count; ignored rows
    stay 0 whatever they hold."""
    k, ii = 0.05, -100
    x, t, w, g = nonfinite_case(rng, 9, weighted=True, ignore_index=ii, reduction=reduction)
    x = x.astype(dtype)
    w = w.astype(f32)
    want_loss, want_z, want_lse, want_grad = torch_zloss(x.astype(np.float64), t, w, reduction, ii, 0.1, k, g)
    loss, lp, zl, lse = run_forward(session, x, t, w, reduction, ii, 0.1, k)
    same_nonfinite(lse, want_lse, "lseForZlossOut")
    same_nonfinite(zl, want_z, "zlossOut")
    same_nonfinite(loss, want_loss, "loss")
    grad = run_grad(session, np.asarray(g, dtype), lp, t, w, reduction, ii, 0.1, k, None, lse)
    counted = t != ii
    same_nonfinite(grad[counted], want_grad[counted], "grad")
    assert not grad[~counted].any()
    if reduction == "none":
        assert np.isposinf(lse[[3, 9, 11]]).all() and np.isneginf(lse[5]) and np.isnan(lse[[4, 8, 12]]).all()
        assert np.isposinf(zl[[3, 5, 11]]).all() and not zl[[7, 8, 9, 13]].any()


# ------------------------------------------------------------------------------------ refusals
I, NUL, TIL = 161002, 161001, 561002


def _t(shape, dtype=f32, fill=1.0):
    return lambda s: s.tensor(np.full(shape, fill, dtype))


def _fwd(s, **change):
    args = dict(input=s.tensor(np.ones((2, 3), f32)), target=s.tensor(np.array([0, 2])), weightOptional=None,
                reductionOptional="mean", ignoreIndex=-100, labelSmoothing=0.0, lseSquareScaleForZloss=0.1,
                returnZloss=True, lossOut=s.poisoned((), f32), logProbOut=s.poisoned((2, 3), f32),
                zlossOut=s.poisoned((), f32), lseForZlossOut=s.poisoned((2,), f32))
    args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
    return args


def _alias(name, of):
    def build(s):
        args = _fwd(s)
        src = args[of]
        args[name] = acl.aclCreateTensor(tuple(args[name].shape), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND,
                                         tuple(args[name].shape) or (1,), src.data)
        return args
    return build


def _destroyed(tensor):
    acl.aclDestroyTensor(tensor)
    return tensor


BAD_FORWARD = [
    ("returnZloss with a null zlossOut", lambda s: _fwd(s, zlossOut=None), NUL, "zlossOut"),
    ("fp16 zlossOut", lambda s: _fwd(s, zlossOut=_t((), np.float16)), I, "zlossOut"),
    ("int32 lseForZlossOut", lambda s: _fwd(s, lseForZlossOut=_t((2,), np.int32)), I, "lseForZlossOut"),
    ("zlossOut (N,) under mean", lambda s: _fwd(s, zlossOut=_t((2,))), TIL, "zlossOut"),
    ("zlossOut 0-D under none", lambda s: _fwd(s, reductionOptional="none", lossOut=_t((2,))), TIL, "zlossOut"),
    ("zlossOut of the wrong shape, not asked for", lambda s: _fwd(s, returnZloss=False, zlossOut=_t((2,))), TIL,
     "zlossOut"),
    ("lseForZlossOut (3,)", lambda s: _fwd(s, lseForZlossOut=_t((3,))), TIL, "lseForZlossOut"),
    ("lseForZlossOut 2-D", lambda s: _fwd(s, lseForZlossOut=_t((2, 1))), TIL, "lseForZlossOut"),
    ("zlossOut not a tensor", lambda s: _fwd(s, zlossOut=np.zeros((), f32)), I, "zlossOut"),
    ("destroyed lseForZlossOut", lambda s: _fwd(s, lseForZlossOut=lambda s: _destroyed(s.tensor(np.ones(2, f32)))),
     I, "lseForZlossOut"),
    ("scale 1.0", lambda s: _fwd(s, lseSquareScaleForZloss=1.0), TIL, "lseSquareScaleForZloss"),
    ("scale -0.01", lambda s: _fwd(s, lseSquareScaleForZloss=-0.01), TIL, "lseSquareScaleForZloss"),
    ("scale nan", lambda s: _fwd(s, lseSquareScaleForZloss=float("nan")), TIL, "lseSquareScaleForZloss"),
    ("scale inf", lambda s: _fwd(s, lseSquareScaleForZloss=float("inf")), TIL, "lseSquareScaleForZloss"),
    ("scale a string", lambda s: _fwd(s, lseSquareScaleForZloss="0.1"), I, "lseSquareScaleForZloss"),
    ("zlossOut aliases input", _alias("zlossOut", "input"), I, "zlossOut"),
    ("lseForZlossOut aliases logProbOut", _alias("lseForZlossOut", "logProbOut"), I, "lseForZlossOut"),
    ("lseForZlossOut aliases zlossOut", _alias("lseForZlossOut", "zlossOut"), I, "lseForZlossOut"),
]


@pytest.mark.parametrize("case", BAD_FORWARD, ids=[c[0] for c in BAD_FORWARD])
def test_zloss_bad_input_forward(cpu_session, case):
    name, build, expected, word = case
    message = assert_refused(cpu_session, acl.aclnnCrossEntropyLossGetWorkspaceSize, "aclnnCrossEntropyLoss",
                             build(cpu_session), expected, outputs=("lossOut", "logProbOut", "zlossOut",
                                                                    "lseForZlossOut"))
    assert word in message, message


def _bwd(s, **change):
    args = dict(gradLoss=s.tensor(np.ones((), f32)), logProb=s.tensor(np.full((2, 3), -1.1, f32)),
                target=s.tensor(np.array([0, 2])), weightOptional=None, gradZlossOptional=s.tensor(np.ones((), f32)),
                lseForZlossOptional=s.tensor(np.ones(2, f32)), reductionOptional="mean", ignoreIndex=-100,
                labelSmoothing=0.0, lseSquareScaleForZloss=0.1, out=s.poisoned((2, 3), f32))
    args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
    return args


def _out_aliases_lse(s):
    args = _bwd(s)
    args["lseForZlossOptional"] = acl.aclCreateTensor((2,), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2,),
                                                      args["out"].data)
    return args


BAD_GRAD = [
    ("scale != 0 with a null lse", lambda s: _bwd(s, lseForZlossOptional=None), NUL, "lseForZlossOptional"),
    ("lse (3,)", lambda s: _bwd(s, lseForZlossOptional=_t((3,))), TIL, "lseForZlossOptional"),
    ("lse 0-D", lambda s: _bwd(s, lseForZlossOptional=_t(())), TIL, "lseForZlossOptional"),
    ("fp16 lse with fp32 logProb", lambda s: _bwd(s, lseForZlossOptional=_t((2,), np.float16)), I,
     "lseForZlossOptional"),
    ("gradZloss (N,) under mean", lambda s: _bwd(s, gradZlossOptional=_t((2,))), TIL, "gradZlossOptional"),
    ("gradZloss 0-D under none", lambda s: _bwd(s, reductionOptional="none", gradLoss=_t((2,))), TIL,
     "gradZlossOptional"),
    ("gradZloss (3,) under none", lambda s: _bwd(s, reductionOptional="none", gradLoss=_t((2,)),
                                                 gradZlossOptional=_t((3,))), TIL, "gradZlossOptional"),
    ("bf16 gradZloss with fp32 logProb", lambda s: _bwd(s, gradZlossOptional=_t((), dtypes.bfloat16)), I,
     "gradZlossOptional"),
    ("fp16 gradZloss at scale 0 (CANN checks the dtype whatever the scale)",
     lambda s: _bwd(s, lseSquareScaleForZloss=0.0, gradZlossOptional=_t((17,), np.float16)), I, "gradZlossOptional"),
    ("fp16 lse at scale 0", lambda s: _bwd(s, lseSquareScaleForZloss=0.0, lseForZlossOptional=_t((256,), np.float16)),
     I, "lseForZlossOptional"),
    ("scale 1.5", lambda s: _bwd(s, lseSquareScaleForZloss=1.5), TIL, "lseSquareScaleForZloss"),
    ("scale nan", lambda s: _bwd(s, lseSquareScaleForZloss=float("nan")), TIL, "lseSquareScaleForZloss"),
    ("out aliases lse", _out_aliases_lse, I, "out"),
]


@pytest.mark.parametrize("case", BAD_GRAD, ids=[c[0] for c in BAD_GRAD])
def test_zloss_bad_input_grad(cpu_session, case):
    name, build, expected, word = case
    message = assert_refused(cpu_session, acl.aclnnCrossEntropyLossGradGetWorkspaceSize, "aclnnCrossEntropyLossGrad",
                             build(cpu_session), expected)
    assert word in message, message


# ------------------------------------------------------------------------------------ functional, torch
def test_zloss_functional_numpy(rng):
    from support import use_device
    use_device("cpu")
    x = rng.standard_normal((6, 9)).astype(f32) * 3
    t = np.array([0, 8, -100, 3, 3, 1])
    w = rng.uniform(0.5, 2, 9).astype(f32)
    for reduction in REDUCTIONS:
        g = np.ones(6, f32) if reduction == "none" else np.float32(1.5)
        loss, lp, lse = fn.cross_entropy_loss(x, t, w, reduction=reduction, label_smoothing=0.1,
                                              lse_square_scale_for_zloss=0.02)
        want_loss, _, want_lse, want_grad = torch_zloss(x.astype(np.float64), t, w, reduction, -100, 0.1, 0.02, g)
        assert_close(loss, want_loss, f32, scale=4)
        assert_close(lse, want_lse, f32)
        grad = fn.cross_entropy_loss_grad(np.asarray(g), lp, t, w, reduction=reduction, label_smoothing=0.1,
                                          lse_square_scale_for_zloss=0.02, lse_for_zloss=lse)
        assert_close(grad, want_grad, f32)
    assert len(fn.cross_entropy_loss(x, t)) == 2   # without the z-loss: (loss, log_prob) as before


@pytest.mark.parametrize("kind", ["cpu", "emulated"])
@pytest.mark.parametrize("tdtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_zloss_torch_cross_entropy(rng, kind, tdtype):
    """aclnn_gpu.torch.cross_entropy(..., lse_square_scale_for_zloss=k): value and input gradient of the
    formula, (N, C) and (N, C, d) inputs, weights, ignore_index, every reduction; k = 0 is PyTorch's."""
    import aclnn_gpu.torch as AT
    from support import use_device
    use_device(kind)
    k = 1e-2
    x64 = rng.standard_normal((4, 6, 3)) * 3
    t = rng.integers(0, 6, (4, 3))
    t[1, 2] = -1
    w = torch.tensor(rng.uniform(0.5, 2, 6), dtype=torch.float32)
    for reduction in REDUCTIONS:
        x = torch.tensor(x64, dtype=tdtype, requires_grad=True)
        loss = AT.cross_entropy(x, torch.tensor(t), weight=w, ignore_index=-1, reduction=reduction,
                                lse_square_scale_for_zloss=k)
        g = torch.ones_like(loss)
        loss.backward(g)
        rows = x.detach().double().movedim(1, -1).reshape(-1, 6).numpy()
        want_loss, _, _, want_grad = torch_zloss(rows, t.reshape(-1), w.numpy(), reduction, -1, 0.0, k,
                                                 np.ones(rows.shape[0]) if reduction == "none" else np.ones(()))
        dt = np.dtype(np.float32) if tdtype == torch.float32 else dtypes.bfloat16
        assert_close(loss.detach().float().numpy().reshape(-1), want_loss.reshape(-1), dt, scale=8)
        grad = x.grad.float().movedim(1, -1).reshape(-1, 6).numpy()
        assert_close(grad, want_grad, dt, scale=2)
    x = torch.tensor(x64[:, :, 0], dtype=torch.float32, requires_grad=True)
    assert torch.equal(AT.cross_entropy(x, torch.tensor(t[:, 0]), lse_square_scale_for_zloss=0.0),
                       AT.cross_entropy(x, torch.tensor(t[:, 0])))


# ------------------------------------------------------------------------------------ the NumPy reference
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_zloss_reference_threaded_and_shifted_rows(rng, reduction):
    """The cpu device's NumPy code at a size that splits rows over the thread pool, with rows redone in
    the shifted form (a logit of 100; every logit near -100; C == 1 takes that form for every row): lse,
    the loss and the gradient against float64 autograd, and the same bits for one thread."""
    N, C = 2 * reference._PARALLEL_MIN // 512 + 5, 512
    x = (rng.standard_normal((N, C)) * 3).astype(f32)
    x[5, 3] = 100.0
    x[9] -= 110.0
    t = rng.integers(0, C, N)
    t[::7] = -100
    w = rng.uniform(0.5, 2, C).astype(f32)
    k = 3e-3
    g = loss_input(rng, reduction, N, f32)
    lse = np.empty(N, f32)
    loss, lp, zl = reference.cross_entropy_loss(x, t, w, reduction, -100, 0.1, lse_square_scale_for_zloss=k,
                                                return_zloss=True, lse_out=lse)
    grad = reference.cross_entropy_loss_grad(g, lp, t, w, reduction, -100, 0.1, lse_for_zloss=lse,
                                             lse_square_scale_for_zloss=k)
    want_loss, want_z, want_lse, want_grad = torch_zloss(x.astype(np.float64), t, w, reduction, -100, 0.1, k,
                                                         g.astype(np.float64))
    np.testing.assert_allclose(lse, want_lse, rtol=3e-7)
    np.testing.assert_allclose(zl, want_z, rtol=2e-6, atol=1e-9)
    np.testing.assert_allclose(loss, want_loss, rtol=2e-6, atol=1e-6)
    assert_close(grad, want_grad, f32, scale=2)
    one = np.empty(N, f32)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(reference, "_PARALLEL_MIN", 1 << 62)
        loss1, lp1, zl1 = reference.cross_entropy_loss(x, t, w, reduction, -100, 0.1, lse_square_scale_for_zloss=k,
                                                       return_zloss=True, lse_out=one)
        grad1 = reference.cross_entropy_loss_grad(g, lp1, t, w, reduction, -100, 0.1, lse_for_zloss=one,
                                                  lse_square_scale_for_zloss=k)
    assert one.tobytes() == lse.tobytes() and loss1.tobytes() == loss.tobytes() and zl1.tobytes() == zl.tobytes()
    assert grad1.tobytes() == grad.tobytes()
    # C == 1: log_prob 0, lse = x; the z-loss gradient 2 k x p with p = 1
    x1 = rng.standard_normal((4, 1)).astype(f32) * 5
    t1 = np.array([0, 0, -100, 0])
    lse1 = np.empty(4, f32)
    _, lp1c = reference.cross_entropy_loss(x1, t1, None, reduction, -100, 0.0, lse_square_scale_for_zloss=k,
                                           lse_out=lse1)
    np.testing.assert_array_equal(lse1, x1[:, 0])
    g1 = loss_input(rng, reduction, 4, f32)
    got = reference.cross_entropy_loss_grad(g1, lp1c, t1, None, reduction, -100, 0.0, lse_for_zloss=lse1,
                                            lse_square_scale_for_zloss=k)
    assert_close(got, torch_zloss(x1.astype(np.float64), t1, None, reduction, -100, 0.0, k, g1)[3], f32)
