"""aclnnCtcLoss / aclnnCtcLossBackward through the two-phase API on the cpu and emulated devices,
against PyTorch CPU float64 (aten._ctc_loss / _ctc_loss_backward), the bad-input table, phase-2
checks and the functional layer."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu import functional as F
from support import assert_close, assert_refused, near_end

FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16, np.dtype(np.float64)]
BWD = (acl.aclnnCtcLossBackwardGetWorkspaceSize, acl.aclnnCtcLossBackward)
FWD = (acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss)


def ia(values):
    return acl.aclCreateIntArray([int(v) for v in values])


def f64(a):
    return np.asarray(a).astype(np.float64)


def torch_fwd(lp64, tg, il, tl, blank):
    """Raw (never zeroed) nll and log_alpha in float64."""
    tgt = torch.tensor(np.asarray(tg).astype(np.int64))
    nll, la = torch.ops.aten._ctc_loss(torch.tensor(f64(lp64)), tgt, list(map(int, il)), list(map(int, tl)),
                                       int(blank), False)
    la = la.numpy().copy()
    for b in range(la.shape[0]):  # PyTorch leaves rows t >= Lin uninitialised; ours are -inf
        la[b, int(il[b]):, :] = -np.inf
        la[b, :, 2 * int(tl[b]) + 1:] = -np.inf
    return nll.numpy(), la


def torch_bwd(g64, lp64, tg, il, tl, nll64, la64, blank, zero_inf):
    tgt = torch.tensor(np.asarray(tg).astype(np.int64))
    return torch.ops.aten._ctc_loss_backward(
        torch.tensor(f64(g64)), torch.tensor(f64(lp64)), tgt, list(map(int, il)), list(map(int, tl)),
        torch.tensor(f64(nll64)), torch.tensor(f64(la64)), int(blank), bool(zero_inf)).numpy()


def make_case(rng, T, N, C, max_l, blank=0, dtype=np.float32, runs=False, short=0.1):
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C)) * 2), -1).numpy().astype(dtype)
    tl = rng.integers(0, max_l + 1, N)
    tl[0] = max_l
    il = np.array([rng.integers(0, T + 1) if rng.random() < short else rng.integers(min(T, 2 * l + 1), T + 1)
                   for l in tl])
    labels = [c for c in range(C) if c != blank]
    tg = rng.choice(labels, (N, max(max_l, 1)))
    if runs:
        tg[:, :] = tg[:, :1]
    return lp, tg, il.astype(np.int64), tl.astype(np.int64)


def concat(tg, tl):
    return np.concatenate([tg[b, :tl[b]] for b in range(len(tl))] + [tg[:0, 0]]).astype(tg.dtype)


def run_fwd(s, lp, tg, il, tl, blank=0, zero_inf=False, strided=False):
    T, N, _ = lp.shape
    X = 2 * int(max([0, *tl])) + 1
    nll = s.poisoned((N,), lp.dtype)
    la = s.poisoned((N, T, X), lp.dtype, strided=strided)
    status = s.run(*FWD, s.tensor(lp, strided=strided, offset=1), s.tensor(tg), ia(il), ia(tl), blank, zero_inf,
                   nll, la)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(nll), s.read(la)


def run_bwd(s, g, lp, tg, il, tl, nll, la, blank=0, zero_inf=False, strided=False, tg_code=None):
    out = s.poisoned(lp.shape, lp.dtype, strided=strided)
    status = s.run(*BWD, s.tensor(g), s.tensor(lp, strided=strided, offset=3),
                   s.tensor(tg, strided=strided, dtype_code=tg_code), ia(il), ia(tl), s.tensor(nll),
                   s.tensor(la, strided=strided), blank, zero_inf, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(out)


def check_case(s, lp, tg, il, tl, blank, zero_inf, g, one_d=False, pad=0, strided=False, what=""):
    """Forward vs PyTorch, then the backward fed PyTorch's nll/log_alpha rounded to the dtype (padded
    with -99999 columns) vs PyTorch's backward on exactly those rounded values; for FLOAT16 / BFLOAT16,
    whose backward computes alpha and the loss again in fp32 instead of reading them (docs/API.md §7),
    vs PyTorch's backward on the float64 values they were rounded from."""
    dt = lp.dtype
    tgt = concat(tg, tl) if one_d else tg
    nll, la = run_fwd(s, lp, tgt, il, tl, blank, zero_inf, strided=strided)
    rn, rla = torch_fwd(lp, tgt, il, tl, blank)
    en = np.where(np.isinf(rn), 0, rn) if zero_inf else rn
    scale = 1 + float(np.max(np.abs(np.where(np.isfinite(en), en, 0)), initial=0)) / 4
    assert not np.isnan(f64(nll)).any() and not np.isnan(f64(la)).any(), what
    assert_close(nll, en, dt, scale=scale, what=what)
    fin = np.isfinite(rla)
    assert (np.isfinite(f64(la)) == fin).all() or dt.itemsize <= 2, what
    assert_close(f64(la)[fin], rla[fin], dt, scale=scale * 4, what=what)
    # backward on the same rounded inputs as PyTorch
    nll_in = rn.astype(dt)
    la_in = rla.astype(dt)
    if pad:
        la_in = np.concatenate([la_in, np.full(la_in.shape[:2] + (pad,), -99999 if dt.itemsize > 2 else -6e4, dt)], axis=2)
    g = g.astype(dt)
    got = run_bwd(s, g, lp, tgt, il, tl, nll_in, la_in, blank, zero_inf, strided=strided)
    if dt.itemsize == 2:
        exp = torch_bwd(g, lp, tgt, il, tl, rn, rla, blank, zero_inf)
    else:
        exp = torch_bwd(g, lp, tgt, il, tl, nll_in, f64(la_in)[:, :, :rla.shape[2]], blank, zero_inf)
    finite = np.isfinite(exp)
    assert (np.isfinite(f64(got)) == finite).all(), what
    assert_close(f64(got)[finite], exp[finite], dt, scale=8, what=what)
    for b in range(lp.shape[1]):      # rows t >= inputLength are exactly 0
        assert (f64(got)[il[b]:, b] == 0).all(), what
    return got


# ------------------------------------------------------------------------------ numerics
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("tdtype", [np.int32, np.int64], ids=["int32", "int64"])
def test_random_batches(session, rng, dtype, tdtype):
    for trial in range(2):
        T, N, C = int(rng.integers(1, 12)), int(rng.integers(1, 5)), int(rng.choice([2, 3, 6, 16]))
        blank = int(rng.integers(0, C))
        lp, tg, il, tl = make_case(rng, T, N, C, int(rng.integers(0, 5)), blank, dtype, runs=rng.random() < 0.2)
        check_case(session, lp, tg.astype(tdtype), il, tl, blank, bool(rng.integers(0, 2)),
                   rng.standard_normal(N), one_d=bool(rng.integers(0, 2)), pad=int(rng.integers(0, 6)),
                   what=f"T={T} N={N} C={C} blank={blank} il={il} tl={tl}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("tdtype", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.kernels
def test_long_labels_few_steps(session, rng, dtype, tdtype):
    """maxL = 300 (601 states: the recursions' many-states-per-thread instantiation on cuda/emulated) over 8
    steps: a sample whose 300 labels cannot align (an infinite loss) beside one of 3 labels that can.
    Cheap, so it is also what the TSan replay of those instantiations runs (the 1,100-step tests cost
    it minutes each)."""
    lp, tg, _, _ = make_case(rng, 8, 2, 5, 300, 0, dtype)
    il, tl = np.array([8, 8]), np.array([300, 3])
    for zero_inf in (False, True):
        check_case(session, lp, tg.astype(tdtype), il, tl, 0, zero_inf, rng.standard_normal(2),
                   what=f"maxL=300 T=8 zero_infinity={zero_inf}")


def test_strided_views(session, rng):
    lp, tg, il, tl = make_case(rng, 7, 3, 5, 3, blank=2, dtype=np.float32)
    check_case(session, lp, tg, il, tl, 2, False, rng.standard_normal(3), strided=True, pad=3)


def test_repeated_labels_and_runs(session, rng):
    lp, tg, il, tl = make_case(rng, 14, 3, 4, 5, dtype=np.float64)
    tg[0] = [1, 1, 1, 1, 1]
    tg[1] = [2, 2, 3, 3, 2]
    il[:] = [14, 13, 12]
    check_case(session, lp, tg, il, tl, 0, False, rng.standard_normal(3))


def test_c2_t1_and_empty_targets(session, rng):
    for T, C, max_l in ((1, 2, 0), (1, 2, 1), (5, 2, 2), (4, 3, 0)):
        lp, tg, il, tl = make_case(rng, T, 3, C, max_l, dtype=np.float64, short=0)
        check_case(session, lp, tg, il, tl, 0, False, rng.standard_normal(3), what=f"T={T} C={C} L={max_l}")
    # some target lengths 0, and 1-D empty targets with every length 0
    lp, tg, il, tl = make_case(rng, 5, 3, 4, 2, dtype=np.float32, short=0)
    tl[1] = 0
    check_case(session, lp, tg, il, tl, 0, False, rng.standard_normal(3), one_d=True)
    tl[:] = 0
    check_case(session, lp, tg, il, tl, 0, False, rng.standard_normal(3), one_d=True)


@pytest.mark.parametrize("zero_inf", [False, True])
def test_input_too_short(session, rng, zero_inf):
    lp, tg, il, tl = make_case(rng, 6, 3, 4, 3, dtype=np.float32)
    tg[0] = [2, 2, 2]
    il[:] = [4, 6, 0]
    tl[:] = [3, 2, 1]
    got = check_case(session, lp, tg, il, tl, 0, zero_inf, np.ones(3))
    if zero_inf:
        assert (got[:, 0] == 0).all() and (got[:, 2] == 0).all()
    else:
        assert not np.isfinite(got[:4, 0]).any()
    nll, _ = run_fwd(session, lp, tg, il, tl, 0, zero_inf)
    assert nll[0] == (0 if zero_inf else np.inf)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_minus_inf_log_probs(session, rng, dtype):
    """lp = -inf (probability 0) at a label, at the blank and at a column outside the target: the
    formula gives NaN there for t < Lin, as PyTorch does (-inf - -inf in its exponent), 0 for
    t >= Lin, and every other entry stays exact."""
    lp, tg, il, tl = make_case(rng, 9, 3, 6, 2, dtype=dtype, short=0)
    tl[:], il[:] = 2, [9, 7, 9]
    tg[2] = [1, 2]
    lp[2, 0, tg[0, 0]] = -np.inf     # a label
    lp[3, 1, 0] = -np.inf            # the blank
    lp[1, 2, 5] = -np.inf            # a column without states
    lp[8, 1, 4] = -np.inf            # past sample 1's input length
    got = check_case(session, lp, tg, il, tl, 0, False, rng.standard_normal(3))
    assert np.isnan(f64(got)[[2, 3, 1], [0, 1, 2], [tg[0, 0], 0, 5]]).all()
    assert f64(got)[8, 1, 4] == 0


def test_zero_infinity_zeroes_what_cannot_align(session, rng):
    """zeroInfinity zeroes a sample when the nll given is +inf (spec 1.2 step 1) and also when
    logAlpha says it cannot align (both final states -inf), whatever nll is given; without
    zeroInfinity, or with a final state reachable, the nll given is used as it is."""
    lp, tg, il, tl = make_case(rng, 4, 1, 4, 3, dtype=np.float64)
    il[:], tl[:] = [3], [3]
    la = np.full((1, 4, 7), -np.inf)
    for nll in (np.zeros(1), np.full(1, 7.5), np.full(1, np.inf)):
        assert (run_bwd(session, np.ones(1), lp, tg, il, tl, nll, la, 0, True) == 0).all()
    got = run_bwd(session, np.ones(1), lp, tg, il, tl, np.zeros(1), la, 0, False)
    np.testing.assert_allclose(got[:3, 0], np.where(np.isfinite(got[:3, 0]), np.exp(lp[:3, 0]), got[:3, 0]))
    la[0, 2, 5] = -3.0        # (Lin-1, 2L-1) reachable: not zeroed, the given nll is used
    got = run_bwd(session, np.ones(1), lp, tg, il, tl, np.zeros(1), la, 0, True)
    assert np.isfinite(got[:3, 0]).all() and (got[:3, 0] != 0).any()


def cann_width(max_l):
    """logAlpha's last dimension on Atlas A2/A3 (ops-nn ctc_loss_v2.cpp): 2*maxL+1 rounded up to 8."""
    return (2 * max_l + 1 + 7) // 8 * 8


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_forward_cann_padded_log_alpha(session, rng, dtype):
    """CANN's own aclnnCtcLoss sample: logProbs (12, 4, 5), targets (4, 7), inputLengths 10,
    targetLengths {2, 3, 1, 5} and logAlphaOut (4, 12, 16), A2/A3's width (11 states rounded up to
    16). The first 11 columns equal the unpadded call's, the padding is -inf (as CANN's kernel
    writes it), and the backward given the padded logAlpha with NaN in the padding (never read)
    gives the unpadded call's gradient, bit for bit, and PyTorch's."""
    s = session
    T, N, C = 12, 4, 5
    lp, tg, il, tl = make_case(rng, T, N, C, 7, dtype=dtype, short=0)
    il[:], tl[:] = 10, [2, 3, 1, 5]
    nll_p, la_p = s.poisoned((N,), dtype), s.poisoned((N, T, cann_width(5)), dtype)
    status = s.run(*FWD, s.tensor(lp), s.tensor(tg), ia(il), ia(tl), 0, False, nll_p, la_p)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert cann_width(5) == 16
    nll, la = run_fwd(s, lp, tg, il, tl)
    padded = s.read(la_p)
    assert np.array_equal(f64(s.read(nll_p)), f64(nll)) and np.array_equal(f64(padded[:, :, :11]), f64(la))
    assert (f64(padded[:, :, 11:]) == -np.inf).all()
    g = rng.standard_normal(N).astype(dtype)
    la_in = padded.copy()
    la_in[:, :, 11:] = np.nan
    got = run_bwd(s, g, lp, tg, il, tl, nll, la_in)
    assert np.array_equal(f64(got), f64(run_bwd(s, g, lp, tg, il, tl, nll, la)))
    if np.dtype(dtype).itemsize > 2:   # PyTorch's backward on exactly the values the forward returned
        exp = torch_bwd(g, lp, tg, il, tl, nll, la, 0, False)
    else:   # 16-bit: our backward recomputes alpha and the loss in fp32 (docs/API.md §7): the float64 ones
        rn, rla = torch_fwd(lp, tg, il, tl, 0)
        exp = torch_bwd(g, lp, tg, il, tl, rn, rla, 0, False)
    assert_close(got, exp, dtype, scale=8)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("padded", [False, True], ids=["pytorch_layout", "cann_layout"])
def test_zero_infinity_chain_matches_torch(session, rng, dtype, padded):
    """aclnnCtcLoss(zeroInfinity=true) then aclnnCtcLossBackward(zeroInfinity=true) on what the
    forward returned (nll 0 for a sample that cannot align), per sample against PyTorch's
    ctc_loss(reduction="none", zero_infinity=True) and its autograd gradient: the samples that
    cannot align (a repeated label too long for its input, a target longer than its input, no input
    at all) get loss 0 and gradient exactly 0, the others PyTorch's values."""
    s = session
    T, N, C = 9, 5, 5
    lp, tg, il, tl = make_case(rng, T, N, C, 3, dtype=dtype, short=0)
    tl[:] = [3, 2, 3, 1, 3]
    il[:] = [4, 9, 2, 0, 9]            # sample 0: [2, 2, 2] needs 5 steps; 2: L > Lin; 3: Lin = 0 < L
    tg[0] = [2, 2, 2]
    cannot = np.array([True, False, True, True, False])
    X = cann_width(3) if padded else 7
    nll_o, la_o = s.poisoned((N,), dtype), s.poisoned((N, T, X), dtype)
    status = s.run(*FWD, s.tensor(lp), s.tensor(tg), ia(il), ia(tl), 0, True, nll_o, la_o)
    assert status == 0, acl.aclGetRecentErrMsg()
    nll, la = s.read(nll_o), s.read(la_o)
    g = rng.uniform(0.5, 2, N).astype(dtype)
    got = f64(run_bwd(s, g, lp, tg, il, tl, nll, la, 0, True))
    # PyTorch, float64 from the same rounded log-probs
    lp64 = torch.tensor(f64(lp), requires_grad=True)
    loss = torch.nn.functional.ctc_loss(lp64, torch.tensor(tg.astype(np.int64)), torch.tensor(il), torch.tensor(tl),
                                        blank=0, reduction="none", zero_infinity=True)
    (loss * torch.tensor(f64(g))).sum().backward()
    exp_nll, exp = loss.detach().numpy(), lp64.grad.numpy()
    assert (exp_nll[cannot] == 0).all() and (exp[:, cannot] == 0).all()
    assert (f64(nll)[cannot] == 0).all() and (got[:, cannot] == 0).all(), got[:, cannot]
    assert_close(nll, exp_nll, dtype, scale=1 + float(np.abs(exp_nll).max()) / 4)
    if dtype.itemsize > 2:
        assert_close(got, exp, dtype, scale=8)
    else:   # 16-bit: the backward recomputes alpha and the loss in fp32 (docs/API.md §7): PyTorch's
        ok = ~cannot   # backward on the float64 values, not on the rounded ones the forward returned
        rn, rla = torch_fwd(lp[:, ok], tg[ok], il[ok], tl[ok], 0)
        ref = torch_bwd(g[ok], lp[:, ok], tg[ok], il[ok], tl[ok], rn, rla, 0, True)
        assert_close(got[:, ok], ref, dtype, scale=8)


def test_target_dtype_casts(session, rng):
    lp, tg, il, tl = make_case(rng, 8, 3, 5, 3, blank=0, dtype=np.float32)
    g = rng.standard_normal(3).astype(np.float32)
    rn, rla = torch_fwd(lp, tg, il, tl, 0)
    exp = torch_bwd(g, lp, tg, il, tl, rn.astype(np.float32), rla.astype(np.float32), 0, False)
    for tgx, code in ((tg.astype(np.float32) + 0.25, None), (tg.astype(np.float16), acl.ACL_FLOAT16)):
        got = run_bwd(session, g, lp, tgx, il, tl, rn.astype(np.float32), rla.astype(np.float32), tg_code=code)
        assert_close(got, exp, np.float32, scale=8)
        nll, _ = run_fwd(session, lp, tgx, il, tl)
        assert_close(nll, rn, np.float32, scale=8)
    # BOOL targets (labels 0/1 with blank 2), strided
    tb = rng.integers(0, 2, (3, 3)).astype(np.bool_)
    rn, rla = torch_fwd(lp, tb, il, tl, 2)
    exp = torch_bwd(g, lp, tb, il, tl, rn.astype(np.float32), rla.astype(np.float32), 2, False)
    got = run_bwd(session, g, lp, tb, il, tl, rn.astype(np.float32), rla.astype(np.float32), blank=2, strided=True)
    fin = np.isfinite(exp)
    assert_close(got[fin], exp[fin], np.float32, scale=8)


def test_label_out_of_range_nan_sample_only(session, rng):
    lp, tg, il, tl = make_case(rng, 7, 3, 5, 3, dtype=np.float32, short=0)
    il[:], tl[:] = 7, 3
    good = tg.copy()
    tg[1, 1] = 9
    tg[2, 2] = -4
    nll, la = run_fwd(session, lp, tg, il, tl)
    assert np.isnan(nll[1:]).all() and np.isfinite(nll[0]) and np.isnan(la[1:]).all()
    rn, rla = torch_fwd(lp[:, :1], good[:1], il[:1], tl[:1], 0)
    assert_close(nll[:1], rn, np.float32, scale=8)
    la_in = np.concatenate([rla, rla, rla]).astype(np.float32)
    g = np.ones(3, np.float32)
    got = run_bwd(session, g, lp, tg, il, tl, np.full(3, rn[0], np.float32), la_in)
    assert np.isnan(got[:, 1:]).all() and np.isfinite(got[:, 0]).all()
    exp = torch_bwd(g[:1], lp[:, :1], good[:1], il[:1], tl[:1], rn.astype(np.float32), rla.astype(np.float32), 0,
                    False)
    assert_close(got[:, :1], exp, np.float32, scale=8)


def test_long_targets_1100(session, rng):
    """2L+1 = 2201 states (PyTorch's CUDA kernel once failed past 1024), tiny C, T just long enough."""
    L, T, C = 1100, 1103, 3
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, 1, C))), -1).numpy()
    tg = np.where(np.arange(L) % 2 == 0, 1, 2)[None, :].astype(np.int64)
    tg[0, 600:602] = 1
    il, tl = np.array([T]), np.array([L])
    nll, la = run_fwd(session, lp, tg, il, tl)
    rn, rla = torch_fwd(lp, tg, il, tl, 0)
    assert np.isfinite(nll).all()
    np.testing.assert_allclose(nll, rn, rtol=1e-10)
    fin = np.isfinite(rla)
    assert (np.isfinite(la) == fin).all()
    np.testing.assert_allclose(la[fin], rla[fin], rtol=1e-10)
    g = np.ones(1)
    got = run_bwd(session, g, lp, tg, il, tl, rn, rla)
    np.testing.assert_allclose(got, torch_bwd(g, lp, tg, il, tl, rn, rla, 0, False), atol=1e-9)


def test_empty_batch(session):
    lp = np.zeros((3, 0, 4), np.float32)
    status, ws, ex = acl.aclnnCtcLossBackwardGetWorkspaceSize(
        session.tensor(np.zeros(0, np.float32)), session.tensor(lp), session.tensor(np.zeros((0, 2), np.int64)),
        ia([]), ia([]), session.tensor(np.zeros(0, np.float32)), session.tensor(np.zeros((0, 3, 5), np.float32)),
        0, False, session.tensor(lp))
    assert (status, ws) == (0, 0), acl.aclGetRecentErrMsg()
    assert acl.aclnnCtcLossBackward(None, 0, ex, session.stream) == 0
    status, ws, ex = acl.aclnnCtcLossGetWorkspaceSize(
        session.tensor(lp), session.tensor(np.zeros(0, np.int64)), ia([]), ia([]), 0, False,
        session.tensor(np.zeros(0, np.float32)), session.tensor(np.zeros((0, 3, 1), np.float32)))
    assert (status, ws) == (0, 0), acl.aclGetRecentErrMsg()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_targets_beyond_the_register_recursion(session, rng, dtype):
    """No target-length limit on any device: 1300 labels (past the cuda/emulated register path's
    1279 fp64 / 2047 fp32 states, so fp64 takes the long path) through both phases, 2-D targets
    padded, against PyTorch float64."""
    L, T, C = 1300, 1306, 4
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, 2, C))), -1).numpy().astype(dtype)
    tg = (1 + np.cumsum(rng.integers(1, C - 1, (2, L + 3)), axis=1) % (C - 1)).astype(np.int64)
    il, tl = np.array([T, T - 2]), np.array([L, L - 4])
    nll, la = run_fwd(session, lp, tg, il, tl)
    rn, rla = torch_fwd(lp, tg, il, tl, 0)
    assert np.isfinite(rn).all()
    assert_close(nll, rn, dtype, scale=L)
    g = rng.standard_normal(2).astype(dtype)
    got = run_bwd(session, g, lp, tg, il, tl, nll, la)
    expected = torch_bwd(g, lp, tg, il, tl, nll, la, 0, False)
    # an fp32 recursion of T steps in log space reaching |nll|: eps * |nll| per rounding, adding up
    # like a random walk (tests/kernels/test_ctc_loss_kernels.py: log_space_atol)
    atol = 1e-9 if dtype == np.float64 else float(np.finfo(np.float32).eps * np.max(np.abs(rn)) * np.sqrt(T))
    np.testing.assert_allclose(f64(got), expected, atol=atol)


def test_repeatable_executor(session, rng):
    s = session
    lp, tg, il, tl = make_case(rng, 6, 2, 4, 2, dtype=np.float32, short=0)
    rn, rla = torch_fwd(lp, tg, il, tl, 0)
    g = np.ones(2, np.float32)
    out = s.poisoned(lp.shape, np.float32)
    status, ws, ex = acl.aclnnCtcLossBackwardGetWorkspaceSize(
        s.tensor(g), s.tensor(lp), s.tensor(tg), ia(il), ia(tl), s.tensor(rn.astype(np.float32)),
        s.tensor(rla.astype(np.float32)), 0, False, out)
    assert status == 0
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    w = s.malloc(ws) if ws else None
    for _ in range(2):
        assert acl.aclnnCtcLossBackward(w, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert_close(s.read(out), torch_bwd(g, lp, tg, il, tl, rn.astype(np.float32), rla.astype(np.float32), 0,
                                        False), np.float32, scale=8)


# ------------------------------------------------------------------------------ bad inputs
def _bad_cases():
    f32 = np.float32
    T, N, C, L = 5, 2, 4, 2

    def ok(s, **change):
        args = dict(gradOut=s.tensor(np.ones(N, f32)), logProbs=s.tensor(np.full((T, N, C), -1.4, f32)),
                    targets=s.tensor(np.ones((N, L), np.int64)), inputLengths=ia([5, 4]),
                    targetLengths=ia([2, 1]), negLogLikelihood=s.tensor(np.ones(N, f32)),
                    logAlpha=s.tensor(np.zeros((N, T, 2 * L + 1), f32)), blank=0, zeroInfinity=False,
                    out=s.poisoned((T, N, C), f32))
        args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
        return args

    I, NP = 161002, 161001
    t = lambda shape, dt=f32: (lambda s: s.tensor(np.zeros(shape, dt)))  # noqa: E731
    cases = [(f"null {name}", (lambda n: lambda s: ok(s, **{n: None}))(name), NP)
             for name in ("gradOut", "logProbs", "targets", "inputLengths", "targetLengths", "negLogLikelihood",
                          "logAlpha", "out")]
    cases += [
        ("T == 0", lambda s: ok(s, logProbs=t((0, N, C)), out=t((0, N, C)), logAlpha=t((N, 0, 5))), I),
        ("gradOut rank 2", lambda s: ok(s, gradOut=t((N, 1))), I),
        ("negLogLikelihood rank 0", lambda s: ok(s, negLogLikelihood=t(())), I),
        ("logProbs rank 2", lambda s: ok(s, logProbs=t((T, N))), I),
        ("logAlpha rank 2", lambda s: ok(s, logAlpha=t((N, T))), I),
        ("targets rank 3", lambda s: ok(s, targets=t((N, L, 1), np.int64)), I),
        ("out rank 2", lambda s: ok(s, out=t((T, N))), I),
        ("blank == C", lambda s: ok(s, blank=C), I),
        ("blank negative", lambda s: ok(s, blank=-1), I),
        ("maxTargetLength > (X-1)/2", lambda s: ok(s, logAlpha=t((N, T, 4))), I),
        ("gradOut batch", lambda s: ok(s, gradOut=t((3,))), I),
        ("inputLengths length", lambda s: ok(s, inputLengths=ia([5])), I),
        ("targetLengths length", lambda s: ok(s, targetLengths=ia([2, 1, 1])), I),
        ("logAlpha batch", lambda s: ok(s, logAlpha=t((3, T, 5))), I),
        ("2-D targets batch", lambda s: ok(s, targets=t((3, L), np.int64)), I),
        ("negative input length", lambda s: ok(s, inputLengths=ia([5, -1])), I),
        ("negative target length", lambda s: ok(s, targetLengths=ia([-2, 1])), I),
        ("2-D targets too narrow", lambda s: ok(s, targets=t((N, 1), np.int64)), I),
        ("logAlpha time", lambda s: ok(s, logAlpha=t((N, T + 1, 5))), I),
        ("input length > T", lambda s: ok(s, inputLengths=ia([6, 4])), I),
        ("out C", lambda s: ok(s, out=t((T, N, C + 1))), I),
        ("1-D targets wrong length", lambda s: ok(s, targets=t((4,), np.int64)), I),
        ("out time", lambda s: ok(s, out=t((T + 1, N, C))), I),
        ("logProbs int32", lambda s: ok(s, logProbs=t((T, N, C), np.int32)), I),
        ("gradOut float64", lambda s: ok(s, gradOut=t((N,), np.float64)), I),
        ("logAlpha float16", lambda s: ok(s, logAlpha=t((N, T, 5), np.float16)), I),
        ("out float64", lambda s: ok(s, out=t((T, N, C), np.float64)), I),
        ("targets uint8", lambda s: ok(s, targets=t((N, L), np.uint8)), I),
        ("blank not int", lambda s: ok(s, blank=0.5), I),
        ("inputLengths not an aclIntArray", lambda s: ok(s, inputLengths=[5, 4]), I),
        ("logProbs not a tensor", lambda s: ok(s, logProbs=np.zeros((T, N, C), f32)), I),
        ("freed logAlpha", lambda s: ok(s, logAlpha=lambda s: _freed(s, (N, T, 5))), I),
        ("foreign pointer", lambda s: ok(s, gradOut=lambda s: acl.aclCreateTensor(
            (N,), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (N,), np.ones(N, f32).ctypes.data)), I),
        ("too-short range", lambda s: ok(s, negLogLikelihood=lambda s: acl.aclCreateTensor(
            (N,), acl.ACL_FLOAT, None, 2, acl.ACL_FORMAT_ND, (N,), near_end(s.malloc(8), 8))), I),
        ("out overlaps itself", lambda s: ok(s, out=lambda s: acl.aclCreateTensor(
            (T, N, C), acl.ACL_FLOAT, (0, C, 1), 0, acl.ACL_FORMAT_ND, (N * C,), s.malloc(4 * N * C))), I),
        ("out aliases logProbs", lambda s: _alias(ok(s)), I),
    ]
    return cases


def _freed(s, shape):
    n = int(np.prod(shape)) * 4
    status, p = acl.aclrtMalloc(n, 0)
    t = acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, p)
    acl.aclrtFree(p)
    return t


def _alias(args):
    lp = args["logProbs"]
    args["out"] = acl.aclCreateTensor(lp.shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, lp.shape, lp.data)
    return args


BAD = _bad_cases()


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(cpu_session, case):
    name, build, expected = case
    assert_refused(cpu_session, acl.aclnnCtcLossBackwardGetWorkspaceSize, "aclnnCtcLossBackward", build(cpu_session), expected)


def test_bad_input_table_is_large():
    assert len(BAD) >= 25


def test_bad_messages():
    """A few messages name the parameter and the rule."""
    from support import Session
    s = Session("cpu")
    try:
        args = BAD[[c[0] for c in BAD].index("blank == C")][1](s)
        acl.aclnnCtcLossBackwardGetWorkspaceSize(*args.values())
        assert acl.aclGetRecentErrMsg() == "aclnnCtcLossBackward: blank (4) must be in [0, C=4)"
        args = BAD[[c[0] for c in BAD].index("input length > T")][1](s)
        acl.aclnnCtcLossBackwardGetWorkspaceSize(*args.values())
        assert "inputLengths[0] = 6 must be <= T = 5" in acl.aclGetRecentErrMsg()
    finally:
        s.close()


def test_forward_bad_inputs(cpu_session):
    s = cpu_session
    lp = s.tensor(np.full((5, 2, 4), -1.4, np.float32))
    tg = s.tensor(np.ones((2, 2), np.int64))

    def fwd(**kw):
        args = dict(logProbs=lp, targets=tg, inputLengths=ia([5, 4]), targetLengths=ia([2, 1]), blank=0,
                    zeroInfinity=False, nll=s.poisoned((2,), np.float32), la=s.poisoned((2, 5, 5), np.float32))
        args.update(kw)
        status, ws, ex = acl.aclnnCtcLossGetWorkspaceSize(*args.values())
        msg = acl.aclGetRecentErrMsg()
        assert status != 0 or msg == "" or True
        return status, msg

    assert fwd()[0] == 0
    assert fwd(logProbs=None)[0] == 161001
    assert fwd(la=s.poisoned((2, 5, 8), np.float32))[0] == 0               # CANN's A2/A3 width: 5 rounded up to 8
    for bad in (6, 7, 16):                                                  # X: 2*maxL+1 or that rounded up to 8
        status, msg = fwd(la=s.poisoned((2, 5, bad), np.float32))
        assert status == 161002 and msg == (
            f"aclnnCtcLoss: logAlphaOut shape [2, 5, {bad}] must equal (N, T, 2*max(targetLengths)+1) = [2, 5, 5] "
            "or, CANN's A2/A3 layout, (N, T, (2*max(targetLengths)+1) rounded up to a multiple of 8) = [2, 5, 8]")
    assert fwd(nll=s.poisoned((3,), np.float32))[0] == 161002
    assert fwd(blank=4) == (161002, "aclnnCtcLoss: blank (4) must be in [0, C=4)")
    assert fwd(inputLengths=ia([6, 4]))[0] == 161002
    assert fwd(la=s.poisoned((2, 5, 5), np.float64))[0] == 161002
    assert fwd(la=lp)[0] == 161002


def test_phase_two_checks(session, rng):
    s = session
    lp, tg, il, tl = make_case(rng, 6, 2, 4, 2, dtype=np.float32, short=0)
    out = s.poisoned(lp.shape, np.float32, strided=True)
    before = s.raw(out)
    status, ws, ex = acl.aclnnCtcLossBackwardGetWorkspaceSize(
        s.tensor(np.ones(2, np.float32)), s.tensor(lp, strided=True), s.tensor(tg), ia(il), ia(tl),
        s.tensor(np.ones(2, np.float32)), s.tensor(np.zeros((2, 6, 5), np.float32)), 0, False, out)
    assert status == 0
    if s.kind == "cpu":
        assert ws == 0
        return
    assert ws > 0
    w = s.malloc(ws)
    assert acl.aclnnCtcLossBackward(w, ws - 1, ex, s.stream) == 161002     # workspace too short
    assert acl.aclnnCtcLossBackward(None, ws, ex, s.stream) == 161001
    assert acl.aclnnCtcLossBackward(near_end(w, ws) + 8, ws, ex, s.stream) == 161002
    assert acl.aclnnCtcLoss(w, ws, ex, s.stream) == 161002
    assert s.raw(out) == before
    assert acl.aclnnCtcLossBackward(w, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0


# ------------------------------------------------------------------------------ functional
@pytest.mark.parametrize("kind", ["cpu", "emulated"])
def test_functional_numpy_and_torch(kind, rng):
    from support import use_device
    use_device(kind)
    lp, tg, il, tl = make_case(rng, 7, 3, 5, 3, blank=1, dtype=np.float32, short=0)
    nll, la = F.ctc_loss(lp, tg, il, tl, blank=1)
    rn, rla = torch_fwd(lp, tg, il, tl, 1)
    assert isinstance(nll, np.ndarray) and la.shape == rla.shape and la.dtype == np.float32
    assert_close(nll, rn, np.float32, scale=8)
    g = rng.standard_normal(3).astype(np.float32)
    grad = F.ctc_loss_backward(torch.tensor(g), torch.tensor(lp), torch.tensor(tg), torch.tensor(il), tuple(tl),
                               torch.tensor(nll), torch.tensor(la), blank=1)
    assert isinstance(grad, torch.Tensor) and grad.dtype == torch.float32
    exp = torch_bwd(g, lp, tg, il, tl, nll, la, 1, False)
    assert_close(grad.numpy(), exp, np.float32, scale=8)
    # 1-D targets as a list of lengths, zero_infinity on an infeasible sample
    tl2 = [3, 0, 1]
    nll, _ = F.ctc_loss(lp, concat(tg, tl2), [1, 7, 7], tl2, blank=1, zero_infinity=True)
    assert nll[0] == 0 and np.isfinite(nll).all()
    with pytest.raises(F.AclnnError) as e:
        F.ctc_loss(lp, tg, [8, 7, 7], tl, blank=1)
    assert e.value.status == 161002


def test_bf16_functional(rng):
    from support import use_device
    use_device("cpu")
    lp, tg, il, tl = make_case(rng, 5, 2, 3, 2, dtype=ml_dtypes.bfloat16, short=0)
    nll, la = F.ctc_loss(torch.tensor(lp.astype(np.float32)).bfloat16(), tg, il, tl)
    assert nll.dtype == torch.bfloat16 and la.dtype == torch.bfloat16
