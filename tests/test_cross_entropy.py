"""aclnnCrossEntropyLossGrad / aclnnCrossEntropyLoss through the two-phase API on the cpu and emulated
devices against PyTorch CPU autograd in float64, plus the bad-input tables, phase-2 checks and the
functional layer. Shapes are drawn fresh per run (the seed is printed) and kept small for the emulator."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu import functional as fn
from support import assert_close, assert_refused, near_end

REDUCTIONS = ["none", "mean", "sum"]
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16, np.dtype(np.float64)]
TARGET_DTYPES = [np.dtype(np.int64), np.dtype(np.int32)]
GRAD = (acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad)
FWD = (acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss)


def torch_ce(x64, target, weight, reduction, ignore_index, ls, grad):
    """(loss, log_prob, d loss / d x) in float64 with PyTorch's semantics."""
    x = torch.tensor(x64, requires_grad=True)
    w = None if weight is None else torch.tensor(np.asarray(weight, np.float64))
    loss = F.cross_entropy(x, torch.tensor(np.asarray(target, np.int64)), weight=w, ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=ls)
    loss.backward(torch.tensor(np.asarray(grad, np.float64)).reshape(loss.shape))
    return loss.detach().numpy(), torch.log_softmax(x.detach(), 1).numpy(), x.grad.numpy()


def draw_case(rng, max_n=7, max_c=9):
    """Logits, targets (some rows == ignore_index), weight or None, ignore_index (any sign)."""
    N, C = int(rng.integers(1, max_n + 1)), int(rng.integers(1, max_c + 1))
    x = rng.standard_normal((N, C)) * rng.choice([0.5, 2.0, 4.0])
    t = rng.integers(0, C, N)
    ignore_index = int(rng.choice([-100, -1, int(rng.integers(0, C)), C + 3]))
    hit = rng.random(N) < 0.3
    t[hit] = ignore_index
    weight = rng.uniform(0.25, 2.0, C).astype(np.float32) if rng.integers(0, 2) else None
    return x, t, weight, ignore_index


def grad_input(rng, reduction, N, dtype):
    if reduction == "none":
        return rng.standard_normal(N).astype(dtype)
    return rng.standard_normal(() if rng.integers(0, 2) else (1,)).astype(dtype)


def run_grad(s, g, lp, t, w, reduction, ignore_index, ls, *, strided=False, zloss=None, offset=0):
    out = s.poisoned(lp.shape, lp.dtype, strided=strided)
    gz, lse, scale = zloss if zloss is not None else (None, None, 0.0)
    status = s.run(*GRAD, s.tensor(g, strided=strided and g.ndim == 1), s.tensor(lp, strided=strided, offset=offset),
                   s.tensor(t, strided=strided, offset=offset), None if w is None else s.tensor(w, strided=strided),
                   gz, lse, reduction, ignore_index, ls, scale, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(out)


def check_grad(got, expected, dtype, reduction, what):
    assert not np.isnan(got.astype(np.float64)).any(), f"an output element was left unwritten or NaN: {what}"
    assert_close(got, expected, dtype, scale=2.0, what=what)


# ------------------------------------------------------------------------------------ backward
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_grad_random(session, rng, dtype, reduction):
    for trial in range(3):
        x, t, w, ii = draw_case(rng)
        N, C = x.shape
        ls = float(rng.choice([0.0, 0.0, 0.1, 0.35]))
        g = grad_input(rng, reduction, N, dtype)
        tdt = TARGET_DTYPES[trial % 2]
        _, lp64, expected = torch_ce(x, t, w, reduction, ii, ls, g.astype(np.float64))
        lp = lp64.astype(dtype)
        strided = bool(rng.integers(0, 2))
        got = run_grad(session, g, lp, t.astype(tdt), w, reduction, ii, ls, strided=strided, offset=trial)
        if t.size and (t == ii).all() and reduction == "mean":
            expected = np.zeros_like(expected)
        check_grad(got, expected, dtype, reduction,
                   f"N={N} C={C} ii={ii} w={w is not None} ls={ls} strided={strided} t={t}")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["noweight", "weight"])
def test_grad_label_smoothing(session, rng, reduction, weighted):
    N, C = int(rng.integers(3, 7)), int(rng.integers(2, 9))
    x = rng.standard_normal((N, C))
    t = rng.integers(0, C, N)
    t[0] = -100
    w = rng.uniform(0.25, 2.0, C).astype(np.float32) if weighted else None
    g = grad_input(rng, reduction, N, np.float32)
    _, lp64, expected = torch_ce(x, t, w, reduction, -100, 0.1, g.astype(np.float64))
    got = run_grad(session, g, lp64.astype(np.float32), t, w, reduction, -100, 0.1)
    check_grad(got, expected, np.float32, reduction, f"N={N} C={C}")
    assert not got[0].any()  # the ignored row


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_grad_weights_with_ignored_rows(session, rng, reduction):
    N, C = 6, 5
    x = rng.standard_normal((N, C))
    t = np.array([0, 3, 3, 1, 4, 2])
    t[[1, 4]] = 3  # ignore_index = 3 hits rows 1, 2 (and targets 3)
    w = np.array([0.5, 2.0, 1.5, 9.0, 0.75], np.float32)
    g = grad_input(rng, reduction, N, np.float64)
    _, lp64, expected = torch_ce(x, t, w, reduction, 3, 0.0, g)
    got = run_grad(session, g, lp64, t, w, reduction, 3, 0.0)
    assert_close(got, expected, np.float64)
    assert not got[t == 3].any()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_grad_all_rows_ignored(session, rng, reduction, ls):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    lp = torch.log_softmax(torch.tensor(x), 1).numpy()
    t = np.full(4, -7)
    g = grad_input(rng, reduction, 4, np.float32)
    got = run_grad(session, g, lp, t, rng.uniform(0.5, 1.0, 6).astype(np.float32), reduction, -7, ls)
    assert np.array_equal(got, np.zeros((4, 6), np.float32))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_grad_negative_ignore_index_and_c1(session, rng, reduction):
    # negative ignore_index: rows whose target equals it are ignored whatever the sign
    x = rng.standard_normal((5, 4))
    t = np.array([1, -5, 0, -5, 3])
    g = grad_input(rng, reduction, 5, np.float64)
    _, lp64, expected = torch_ce(x, t, None, reduction, -5, 0.0, g)
    assert_close(run_grad(session, g, lp64, t, None, reduction, -5, 0.0), expected, np.float64)
    # C == 1: log_prob is 0, the gradient is 0 for every counted row (and with smoothing)
    x1 = rng.standard_normal((3, 1))
    t1 = np.array([0, 0, 2])
    _, lp1, expected1 = torch_ce(x1, t1, None, reduction, 2, 0.1, grad_input(rng, reduction, 3, np.float64))
    got1 = run_grad(session, grad_input(rng, reduction, 3, np.float32), lp1.astype(np.float32), t1, None,
                    reduction, 2, 0.1)
    assert_close(got1, expected1 * 0, np.float32)


def test_grad_out_of_range_target_row_is_nan(session, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    lp = torch.log_softmax(torch.tensor(x), 1).numpy()
    t = np.array([1, 7, 2, -3])  # 7 and -3 are neither in [0, 5) nor ignore_index (-100)
    got = run_grad(session, np.ones(4, np.float32), lp, t, None, "none", -100, 0.0)
    assert np.isnan(got[[1, 3]]).all()
    _, _, expected = torch_ce(x.astype(np.float64)[[0, 2]], t[[0, 2]], None, "none", -100, 0.0, np.ones(2))
    assert_close(got[[0, 2]], expected, np.float32)


@pytest.mark.parametrize("tdt", TARGET_DTYPES, ids=lambda d: d.name)
def test_grad_bf16_near_one_hot(session, rng, tdt):
    """The target column keeps fp32 accuracy before the final rounding: p_t - 1 = expm1(lp_t)."""
    N, C = 4, 8
    x = rng.standard_normal((N, C)) - 12.0
    t = rng.integers(0, C, N)
    x[np.arange(N), t] = rng.uniform(-2, 2, N) + 4.0 * np.arange(1, N + 1)   # p_t from ~0.99 to ~1 - 1e-7
    lp = torch.log_softmax(torch.tensor(x), 1).numpy().astype(dtypes.bfloat16)
    for reduction, g in (("sum", np.ones((), dtypes.bfloat16)), ("none", np.full(N, 2, dtypes.bfloat16))):
        got = run_grad(session, g, lp, t.astype(tdt), None, reduction, -100, 0.0)
        lpt = lp[np.arange(N), t].astype(np.float64)
        want = np.expm1(lpt) * g.astype(np.float64)
        col = got[np.arange(N), t].astype(np.float64)
        np.testing.assert_allclose(col, want, rtol=1e-2, atol=0)
        others = np.exp(lp.astype(np.float64)) * np.broadcast_to(g.astype(np.float64), (N,))[:, None]
        mask = np.ones((N, C), bool)
        mask[np.arange(N), t] = False
        np.testing.assert_allclose(got.astype(np.float64)[mask], others[mask], rtol=1e-2, atol=1e-30)


def test_grad_empty_outputs(session):
    for N, C, red, gshape in ((0, 5, "none", (0,)), (0, 5, "mean", ()), (3, 0, "sum", ())):
        out = session.poisoned((N, C), np.float32)
        status, ws, ex = acl.aclnnCrossEntropyLossGradGetWorkspaceSize(
            session.tensor(np.ones(gshape, np.float32)), session.tensor(np.zeros((N, C), np.float32)),
            session.tensor(np.zeros(N, np.int64)), None, None, None, red, -100, 0.0, 0.0, out)
        assert (status, ws) == (0, 0), acl.aclGetRecentErrMsg()
        assert acl.aclnnCrossEntropyLossGrad(None, 0, ex, session.stream) == 0
        assert acl.aclrtSynchronizeStream(session.stream) == 0


def test_grad_zloss_tensors_unread_at_scale_zero_and_null_reduction(session, rng):
    """lseSquareScaleForZloss = 0: gradZlossOptional / lseForZlossOptional are checked but never read
    (NaN-filled here); the z-loss itself is tests/test_cross_entropy_zloss.py's."""
    x = rng.standard_normal((5, 6))
    t = np.array([0, 5, 2, -100, 1])
    w = rng.uniform(0.5, 2, 6).astype(np.float32)
    g = np.asarray(0.7, np.float32)
    _, lp64, expected = torch_ce(x, t, w, "mean", -100, 0.0, g)
    lp = lp64.astype(np.float32)
    zl = (session.tensor(np.full((), np.nan, np.float32)), session.tensor(np.full(5, np.nan, np.float32)), 0.0)
    got = run_grad(session, g, lp, t, w, None, -100, 0.0, zloss=zl)  # null reduction: mean
    assert_close(got, expected, np.float32)


# ------------------------------------------------------------------------------------ forward
def run_forward(s, x, t, w, reduction, ii, ls, *, strided=False):
    N, C = x.shape
    loss = s.poisoned((N,) if reduction == "none" else (), x.dtype, strided=strided and reduction == "none")
    lp = s.poisoned((N, C), x.dtype, strided=strided)
    status = s.run(*FWD, s.tensor(x, strided=strided, offset=1), s.tensor(t, strided=strided),
                   None if w is None else s.tensor(w), reduction, ii, ls, 0.0, False, loss, lp, None, None)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(loss), s.read(lp)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_forward_random(session, rng, dtype, reduction):
    for trial in range(2):
        x, t, w, ii = draw_case(rng)
        N, C = x.shape
        ls = float(rng.choice([0.0, 0.1]))
        xd = x.astype(dtype)
        expected, lp_expected, _ = torch_ce(xd.astype(np.float64), t, w, reduction, ii, ls, np.ones(()) if
                                            reduction != "none" else np.ones(N))
        if reduction == "mean" and (t == ii).all():
            expected = np.zeros(())
        loss, lp = run_forward(session, xd, t.astype(TARGET_DTYPES[trial]), w, reduction, ii, ls,
                               strided=bool(rng.integers(0, 2)))
        what = f"N={N} C={C} ii={ii} w={w is not None} ls={ls}"
        assert_close(lp, lp_expected, dtype, scale=4.0, what=what)
        assert_close(loss, expected, dtype, scale=4.0 * (np.sqrt(N) if reduction != "none" else 1.0), what=what)


def test_forward_n0_and_all_ignored(session):
    for reduction in ("mean", "sum"):
        loss, lp = run_forward(session, np.zeros((0, 4), np.float32), np.zeros(0, np.int64), None, reduction,
                               -100, 0.0)
        assert lp.shape == (0, 4) and loss.shape == () and loss == 0
    loss, _ = run_forward(session, np.ones((3, 4), np.float32), np.full(3, 2), None, "mean", 2, 0.1)
    assert loss == 0


# ------------------------------------------------------------------------------------ bad inputs
I, NUL, TIL = 161002, 161001, 561002
f32 = np.float32


def _ok(s, **change):
    args = dict(gradLoss=s.tensor(np.ones((), f32)), logProb=s.tensor(np.full((2, 3), -1.1, f32)),
                target=s.tensor(np.array([0, 2])), weightOptional=s.tensor(np.ones(3, f32)),
                gradZlossOptional=None, lseForZlossOptional=None, reductionOptional="mean", ignoreIndex=-100,
                labelSmoothing=0.0, lseSquareScaleForZloss=0.0, out=s.poisoned((2, 3), f32))
    args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
    return args


def _destroyed(tensor):
    acl.aclDestroyTensor(tensor)
    return tensor


def _freed(shape, code=acl.ACL_INT64, nbytes=16):
    status, ptr = acl.aclrtMalloc(nbytes, 0)
    t = acl.aclCreateTensor(shape, code, None, 0, acl.ACL_FORMAT_ND, shape, ptr)
    acl.aclrtFree(ptr)
    return t


def _alias(args, name):
    args["out"] = acl.aclCreateTensor((2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3), args[name].data)
    return args


def _t(shape, dtype=f32, fill=1):
    return lambda s: s.tensor(np.full(shape, fill, dtype))


BAD = [
    ("null gradLoss", lambda s: _ok(s, gradLoss=None), NUL),
    ("null logProb", lambda s: _ok(s, logProb=None), NUL),
    ("null target", lambda s: _ok(s, target=None), NUL),
    ("null out", lambda s: _ok(s, out=None), NUL),
    ("int32 logProb", lambda s: _ok(s, logProb=_t((2, 3), np.int32)), I),
    ("fp16 gradLoss with fp32 logProb", lambda s: _ok(s, gradLoss=_t((), np.float16)), I),
    ("fp64 out with fp32 logProb", lambda s: _ok(s, out=_t((2, 3), np.float64)), I),
    ("float target", lambda s: _ok(s, target=_t((2,), f32, 0)), I),
    ("uint8 target", lambda s: _ok(s, target=_t((2,), np.uint8, 0)), I),
    ("fp16 weight", lambda s: _ok(s, weightOptional=_t((3,), np.float16)), I),
    ("fp64 weight", lambda s: _ok(s, weightOptional=_t((3,), np.float64)), I),
    ("logProb not a tensor", lambda s: _ok(s, logProb=np.ones((2, 3), f32)), I),
    ("destroyed target", lambda s: _ok(s, target=lambda s: _destroyed(s.tensor(np.array([0, 1])))), I),
    ("reduction 'avg'", lambda s: _ok(s, reductionOptional="avg"), TIL),
    ("reduction ''", lambda s: _ok(s, reductionOptional=""), TIL),
    ("reduction 'batchmean'", lambda s: _ok(s, reductionOptional="batchmean"), TIL),
    ("reduction not a string", lambda s: _ok(s, reductionOptional=1), I),
    ("labelSmoothing -0.1", lambda s: _ok(s, labelSmoothing=-0.1), TIL),
    ("labelSmoothing 1.5", lambda s: _ok(s, labelSmoothing=1.5), TIL),
    ("labelSmoothing nan", lambda s: _ok(s, labelSmoothing=float("nan")), TIL),
    ("ignoreIndex not an integer", lambda s: _ok(s, ignoreIndex=1.5), I),
    ("gradZloss not a tensor", lambda s: _ok(s, gradZlossOptional="garbage"), I),
    ("int32 gradZloss", lambda s: _ok(s, gradZlossOptional=_t((2,), np.int32)), I),
    ("fp16 lseForZloss with fp32 logProb", lambda s: _ok(s, lseForZlossOptional=_t((2,), np.float16)), I),
    ("destroyed lseForZloss", lambda s: _ok(s, lseForZlossOptional=lambda s: _destroyed(s.tensor(np.ones(2, f32)))),
     I),
    ("logProb 1-D", lambda s: _ok(s, logProb=_t((2,))), TIL),
    ("logProb 3-D", lambda s: _ok(s, logProb=_t((2, 3, 1))), TIL),
    ("target N mismatch", lambda s: _ok(s, target=_t((3,), np.int64, 0)), TIL),
    ("target 2-D", lambda s: _ok(s, target=_t((2, 1), np.int64, 0)), TIL),
    ("weight C mismatch", lambda s: _ok(s, weightOptional=_t((4,))), TIL),
    ("weight 2-D", lambda s: _ok(s, weightOptional=_t((1, 3))), TIL),
    ("gradLoss (N,) under mean", lambda s: _ok(s, gradLoss=_t((2,))), TIL),
    ("gradLoss [2] under sum", lambda s: _ok(s, gradLoss=_t((2,)), reductionOptional="sum"), TIL),
    ("gradLoss 0-D under none", lambda s: _ok(s, reductionOptional="none"), TIL),
    ("gradLoss (3,) under none", lambda s: _ok(s, gradLoss=_t((3,)), reductionOptional="none"), TIL),
    ("out shape", lambda s: _ok(s, out=lambda s: s.poisoned((3, 2), f32)), TIL),
    ("foreign pointer", lambda s: _ok(s, logProb=lambda s: acl.aclCreateTensor(
        (2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3), np.ones(6, f32).ctypes.data)), I),
    ("freed pointer", lambda s: _ok(s, target=lambda s: _freed((2,))), I),
    ("too-short range", lambda s: _ok(s, logProb=lambda s: acl.aclCreateTensor(
        (2, 3), acl.ACL_FLOAT, None, 2, acl.ACL_FORMAT_ND, (2, 3), near_end(s.malloc(24), 24))), I),
    ("null data", lambda s: _ok(s, target=lambda s: acl.aclCreateTensor(
        (2,), acl.ACL_INT64, None, 0, acl.ACL_FORMAT_ND, (2,), None)), NUL),
    ("host memory as data", lambda s: _ok(s, weightOptional=lambda s: acl.aclCreateTensor(
        (3,), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (3,), acl.aclrtMallocHost(12)[1])), I),
    ("out overlaps itself", lambda s: _ok(s, out=lambda s: acl.aclCreateTensor(
        (2, 3), acl.ACL_FLOAT, (0, 1), 0, acl.ACL_FORMAT_ND, (3,), s.malloc(12))), I),
    ("out aliases logProb", lambda s: _alias(_ok(s), "logProb"), I),
    ("out aliases weight", lambda s: _alias(_ok(s, weightOptional=_t((6,)), out=lambda s: s.poisoned((2, 3), f32),
                                                logProb=_t((2, 6))), "weightOptional"), TIL),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(cpu_session, case):
    name, build, expected = case
    assert_refused(cpu_session, acl.aclnnCrossEntropyLossGradGetWorkspaceSize, "aclnnCrossEntropyLossGrad", build(cpu_session), expected)


def test_bad_input_table_is_large():
    assert len(BAD) >= 25


def _fwd_ok(s, **change):
    args = dict(input=s.tensor(np.ones((2, 3), f32)), target=s.tensor(np.array([0, 2])), weightOptional=None,
                reductionOptional="mean", ignoreIndex=-100, labelSmoothing=0.0, lseSquareScaleForZloss=0.0,
                returnZloss=False, lossOut=s.poisoned((), f32), logProbOut=s.poisoned((2, 3), f32),
                zlossOut=None, lseForZlossOut=None)
    args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
    return args


BAD_FORWARD = [
    ("returnZloss with a null zlossOut", lambda s: _fwd_ok(s, returnZloss=True), NUL, "returnZloss"),
    ("null input", lambda s: _fwd_ok(s, input=None), NUL, "input"),
    ("null lossOut", lambda s: _fwd_ok(s, lossOut=None), NUL, "lossOut"),
    ("null logProbOut", lambda s: _fwd_ok(s, logProbOut=None), NUL, "logProbOut"),
    ("int64 input", lambda s: _fwd_ok(s, input=_t((2, 3), np.int64)), I, "input"),
    ("fp16 lossOut", lambda s: _fwd_ok(s, lossOut=_t((), np.float16)), I, "lossOut"),
    ("fp16 weight", lambda s: _fwd_ok(s, weightOptional=_t((3,), np.float16)), I, "weight"),
    ("C == 0", lambda s: _fwd_ok(s, input=_t((2, 0)), logProbOut=_t((2, 0))), TIL, "C > 0"),
    ("lossOut (N,) under mean", lambda s: _fwd_ok(s, lossOut=_t((2,))), TIL, "lossOut"),
    ("lossOut 0-D under none", lambda s: _fwd_ok(s, reductionOptional="none"), TIL, "lossOut"),
    ("logProbOut shape", lambda s: _fwd_ok(s, logProbOut=_t((3, 2))), TIL, "logProbOut"),
    ("bad reduction", lambda s: _fwd_ok(s, reductionOptional="max"), TIL, "reduction"),
    ("labelSmoothing 2", lambda s: _fwd_ok(s, labelSmoothing=2.0), TIL, "labelSmoothing"),
    ("logProbOut aliases input", lambda s: _fwd_ok(s, logProbOut=lambda s: acl.aclCreateTensor(
        (2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3), s.tensors[0].data)), I, "input"),
]


@pytest.mark.parametrize("case", BAD_FORWARD, ids=[c[0] for c in BAD_FORWARD])
def test_bad_input_forward(cpu_session, case):
    name, build, expected, word = case
    args = build(cpu_session)
    outs = [t for t in (args["lossOut"], args["logProbOut"]) if t is not None and t.data and t.numel]
    before = [cpu_session.raw(t) for t in outs]
    status, ws, executor = acl.aclnnCrossEntropyLossGetWorkspaceSize(*args.values())
    message = acl.aclGetRecentErrMsg()
    assert (status, ws, executor) == (expected, None, None), message
    assert message.startswith("aclnnCrossEntropyLoss: ") and word in message, message
    assert [cpu_session.raw(t) for t in outs] == before


# ------------------------------------------------------------------------------------ phase 2
def test_phase_two_checks(session, rng):
    s = session
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((6, 5))), 1).numpy().astype(np.float32)
    out = s.poisoned((6, 5), np.float32, strided=True)
    before = s.raw(out)
    status, ws, ex = acl.aclnnCrossEntropyLossGradGetWorkspaceSize(
        s.tensor(np.ones((), f32)), s.tensor(lp, strided=True), s.tensor(np.arange(6) % 5), None, None, None,
        "mean", -100, 0.0, 0.0, out)
    assert status == 0 and ws > 0
    small = s.malloc(ws)
    assert acl.aclnnCrossEntropyLossGrad(None, ws, ex, s.stream) == 161001         # workspace null
    assert acl.aclnnCrossEntropyLossGrad(small, ws - 1, ex, s.stream) == 161002    # workspace too short
    assert acl.aclnnCrossEntropyLossGrad(near_end(small, ws) + 8, ws, ex, s.stream) == 161002  # past the allocation
    assert acl.aclnnCrossEntropyLoss(small, ws, ex, s.stream) == 161002            # another op's executor
    assert s.raw(out) == before
    assert acl.aclnnCrossEntropyLossGrad(small, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    _, _, expected = torch_ce(lp.astype(np.float64), np.arange(6) % 5, None, "mean", -100, 0.0, np.ones(()))
    assert_close(s.read(out), expected, np.float32)
    assert acl.aclnnCrossEntropyLossGrad(small, ws, ex, s.stream) == 161002        # spent


def test_repeatable_executor(session, rng):
    s = session
    x = rng.standard_normal((4, 7)).astype(np.float32)
    t = np.array([0, 6, 3, 1])
    loss, lp = s.poisoned((), f32), s.poisoned((4, 7), f32)
    status, ws, ex = acl.aclnnCrossEntropyLossGetWorkspaceSize(s.tensor(x), s.tensor(t), None, "sum", -100, 0.0,
                                                               0.0, False, loss, lp, None, None)
    assert status == 0 and acl.aclSetAclOpExecutorRepeatable(ex) == 0
    work = s.malloc(ws) if ws else None
    for _ in range(3):
        assert acl.aclnnCrossEntropyLoss(work, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    expected, lp_expected, _ = torch_ce(x.astype(np.float64), t, None, "sum", -100, 0.0, np.ones(()))
    assert_close(s.read(loss), expected, f32, scale=4)
    assert_close(s.read(lp), lp_expected, f32)
    assert acl.aclDestroyAclOpExecutor(ex) == 0


# ------------------------------------------------------------------------------------ functional
def test_functional_numpy(rng):
    from support import use_device
    use_device("cpu")
    x = rng.standard_normal((6, 9)).astype(np.float32)
    t = np.array([0, 8, -100, 3, 3, 1])
    w = rng.uniform(0.5, 2, 9).astype(np.float32)
    for reduction in REDUCTIONS:
        g = np.ones(6, f32) if reduction == "none" else np.float32(1.5)
        loss, lp = fn.cross_entropy_loss(x, t, w, reduction=reduction, label_smoothing=0.1)
        exp_loss, exp_lp, exp_grad = torch_ce(x.astype(np.float64), t, w, reduction, -100, 0.1, g)
        assert isinstance(loss, np.ndarray) and loss.shape == exp_loss.shape and lp.dtype == np.float32
        assert_close(loss, exp_loss, f32, scale=4)
        assert_close(lp, exp_lp, f32)
        grad = fn.cross_entropy_loss_grad(np.asarray(g), lp, t, w, reduction=reduction, label_smoothing=0.1)
        assert_close(grad, exp_grad, f32)
    grad = fn.cross_entropy_loss_grad(np.float32(1), lp, t.astype(np.int32), reduction=1)  # integer code
    assert_close(grad, torch_ce(x.astype(np.float64), t, None, "mean", -100, 0.0, np.ones(()))[2], f32)
    with pytest.raises(fn.AclnnError) as e:
        fn.cross_entropy_loss_grad(np.float32(1), lp, t, reduction="avg")
    assert e.value.status == 561002
    with pytest.raises(fn.AclnnError) as e:
        fn.cross_entropy_loss_grad(np.float32(1), lp, t[:5])
    assert e.value.status == 561002


@pytest.mark.parametrize("kind", ["cpu", "emulated"])
def test_functional_torch(rng, kind):
    from support import use_device
    use_device(kind)
    x = torch.tensor(rng.standard_normal((5, 6)), dtype=torch.bfloat16)
    t = torch.tensor([1, 5, 0, -1, 2])
    loss, lp = fn.cross_entropy_loss(x, t, ignore_index=-1)
    assert isinstance(loss, torch.Tensor) and lp.dtype == torch.bfloat16 and loss.shape == ()
    exp_loss, exp_lp, exp_grad = torch_ce(x.double().numpy(), t.numpy(), None, "mean", -1, 0.0, np.ones(()))
    assert_close(loss.float().numpy(), exp_loss, dtypes.bfloat16)
    assert_close(lp.float().numpy(), exp_lp, dtypes.bfloat16, scale=2)
    grad = fn.cross_entropy_loss_grad(torch.tensor(1.0, dtype=torch.bfloat16), lp, t, ignore_index=-1)
    assert isinstance(grad, torch.Tensor) and grad.dtype == torch.bfloat16
    assert_close(grad.float().numpy(), exp_grad, dtypes.bfloat16)
    assert x.grad is None and not torch.isnan(lp.float()).any()
