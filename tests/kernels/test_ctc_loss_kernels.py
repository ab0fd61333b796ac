"""CTC kernels (ctc_loss.cu) through the GPU plan (ops/ctc_loss/launch.py) on StandaloneEmuContext,
vs the NumPy reference and PyTorch. Outputs are poisoned with NaN before every launch."""
import os

import ml_dtypes
import numpy as np
import pytest
import torch

from aclnn_gpu.emulator.context import StandaloneEmuContext
from aclnn_gpu.ops.ctc_loss import launch as P
from aclnn_gpu.reference.ctc_loss import ctc_loss_backward, ctc_loss_forward
from seeding import draw_seed

# One seed for the module, from the run's (tests/seeding.py: replayed with ACLNN_GPU_TEST_SEED);
# CTC_SEED sets it directly.
SEED = int(os.environ.get("CTC_SEED", draw_seed("tests/kernels/test_ctc_loss_kernels.py")))
DT = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TOL = {"float32": 2e-5, "float64": 1e-11, "float16": 3e-3, "bfloat16": 2e-2}


@pytest.fixture(scope="module")
def ctx():
    return StandaloneEmuContext(sm_count=4)


def aligned(shape, dtype, fill=np.nan):
    """A 16-byte aligned array filled with `fill` (NaN poison)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + 16, np.uint8)
    off = (-raw.ctypes.data) % 16
    a = raw[off:off + n].view(dtype).reshape(shape)
    a[...] = fill
    return a


def run(ctx, lp, tg, il, tl, blank=0, zero_inf=False, g=None, one_d=False, X_pad=0, nll_in=None, long_path=None,
        reference=True, la_in=None, log_alpha_value=None, split=None):
    """Forward then backward through the launchers (long_path: force the recursion path, None: the
    launcher's choice; split: force the split recursions' chunk of `split` states, 0: no split; nll_in / la_in: given to the backward instead of the forward's); with the NumPy
    reference's results unless reference=False.
    log_alpha_value: ((b, t, s), value) written into the forward's log_alpha before the backward."""
    T, N, C = lp.shape
    dt = lp.dtype.name if lp.dtype != ml_dtypes.bfloat16 else "bfloat16"
    tgt = np.concatenate([tg[b, :tl[b]] for b in range(N)]).astype(tg.dtype) if one_d else tg
    tgt = np.ascontiguousarray(tgt)
    max_l = int(np.max(tl))
    math_size = 8 if dt == "float64" else 4
    ws_bytes = P.backward_workspace_bytes(T, N, max_l, math_size, long_path, recompute=dt in P.HALF, split=split)
    ws = aligned((max(ws_bytes // 8, 1),), np.int64, fill=0)
    lpa = aligned(lp.shape, lp.dtype)
    lpa[...] = lp
    X = 2 * max_l + 1
    nll = aligned((N,), lp.dtype)
    la = aligned((N, T, X), lp.dtype)
    common = dict(targets_ptr=tgt.ctypes.data, workspace_ptr=ws.ctypes.data, T=T, N=N, C=C, dtype=dt,
                  target_dtype=tgt.dtype.name, targets_2d_stride=0 if one_d else tgt.shape[1],
                  targets_numel=tgt.size, input_lengths=il, target_lengths=tl, blank=blank,
                  zero_infinity=zero_inf, long_path=long_path, split=split)
    P.launch_forward(ctx, log_probs_ptr=lpa.ctypes.data, neg_log_likelihood_ptr=nll.ctypes.data,
                     log_alpha_ptr=la.ctypes.data, **common)
    la_in = la if la_in is None else la_in
    la_in = np.concatenate([la_in, np.full((N, T, X_pad), -99999.0 if lp.dtype.itemsize > 2 else -6e4, lp.dtype)], axis=2) if X_pad else la_in
    la_in = np.ascontiguousarray(la_in)
    if log_alpha_value is not None:
        la_in[log_alpha_value[0]] = log_alpha_value[1]
    g = np.ones(N, lp.dtype) if g is None else g.astype(lp.dtype)
    nll_b = nll.copy() if nll_in is None else nll_in.astype(lp.dtype)
    out = aligned(lp.shape, lp.dtype)
    P.launch_backward(ctx, grad_out_ptr=g.ctypes.data, log_probs_ptr=lpa.ctypes.data,
                      neg_log_likelihood_ptr=nll_b.ctypes.data, log_alpha_ptr=la_in.ctypes.data,
                      out_ptr=out.ctypes.data, X=X + X_pad, **common)
    if not reference:
        return nll, la, out
    rn, rla = ctc_loss_forward(lp, tgt, il, tl, blank, zero_inf)
    rg = ctc_loss_backward(g, lp, tgt, il, tl, nll_b, la_in, blank, zero_inf)
    return nll, la, out, rn, rla, rg


def f64(a):
    return np.asarray(a).astype(np.float64)


def case(rng, T, N, C, max_l, blank=0, tdtype=np.int64, runs=False, dtype=np.float64):
    x = rng.standard_normal((T, N, C)) * 2
    lp = torch.log_softmax(torch.tensor(x), -1).numpy()
    tl = rng.integers(0, max_l + 1, N)
    tl[0] = max_l
    il = np.array([rng.integers(min(T, 2 * l + 1) if rng.random() < 0.8 else 0, T + 1) for l in tl])
    labels = [c for c in range(C) if c != blank]
    tg = rng.choice(labels, (N, max(max_l, 1)))
    if runs:
        tg[:, :] = tg[:, :1]
    return lp.astype(dtype), tg.astype(tdtype), il.astype(np.int64), tl.astype(np.int64)


def compare(res, dt, seed, il):
    nll, la, out, rn, rla, rg = res
    tol = TOL[dt]
    msg = f"seed {seed} dtype {dt}"
    np.testing.assert_allclose(f64(nll), f64(rn), rtol=tol, atol=tol, equal_nan=True, err_msg=msg)
    np.testing.assert_allclose(f64(la), f64(rla), rtol=tol, atol=tol, equal_nan=True, err_msg=msg)
    np.testing.assert_allclose(f64(out), f64(rg), rtol=tol, atol=tol * 4, equal_nan=True, err_msg=msg)


@pytest.mark.parametrize("dt", list(DT))
@pytest.mark.parametrize("tdt", [np.int32, np.int64])
def test_random_batches(ctx, dt, tdt):
    rng = np.random.default_rng([SEED, len(dt), np.dtype(tdt).itemsize])
    T, N, C = int(rng.integers(1, 14)), int(rng.integers(1, 5)), int(rng.choice([2, 5, 8, 16]))
    blank = int(rng.integers(0, C))
    lp, tg, il, tl = case(rng, T, N, C, int(rng.integers(0, 5)), blank=blank, tdtype=tdt, dtype=DT[dt])
    one_d = bool(rng.integers(0, 2))
    res = run(ctx, lp, tg, il, tl, blank=blank, zero_inf=bool(rng.integers(0, 2)),
              g=rng.standard_normal(N), one_d=one_d, X_pad=int(rng.integers(0, 4)))
    compare(res, dt, SEED, il)


def test_against_torch_float64(ctx):
    rng = np.random.default_rng([SEED, 7])
    lp, tg, il, tl = case(rng, 16, 3, 5, 4)
    tg[1, :] = 3                           # a long run of one label
    g = rng.standard_normal(3)
    nll, la, out, *_ = run(ctx, lp, tg, il, tl, g=g)
    lpt = torch.tensor(lp)
    tn, tla = torch.ops.aten._ctc_loss(lpt, torch.tensor(tg), list(il), list(tl), 0, False)
    tgr = torch.ops.aten._ctc_loss_backward(torch.tensor(g), lpt, torch.tensor(tg), list(il), list(tl), tn, tla, 0,
                                            False)
    np.testing.assert_allclose(nll, tn.numpy(), rtol=1e-11, err_msg=f"seed {SEED}")
    np.testing.assert_allclose(out, tgr.numpy(), rtol=1e-10, atol=1e-12, equal_nan=True, err_msg=f"seed {SEED}")


def test_too_short_and_zero_infinity(ctx):
    rng = np.random.default_rng([SEED, 8])
    lp, tg, _, _ = case(rng, 6, 3, 4, 3, dtype=np.float32)
    tg[0, :3] = [2, 2, 2]
    il, tl = np.array([4, 6, 0]), np.array([3, 2, 1])
    for zi in (False, True):
        # the backward gets the raw (infinite) loss, as PyTorch's _ctc_loss hands it over
        raw = ctc_loss_forward(lp, tg, il, tl)[0] if zi else None
        res = run(ctx, lp, tg, il, tl, zero_inf=zi, nll_in=raw)
        compare(res, "float32", SEED, il)
        nll, _, out = res[:3]
        if zi:
            assert np.isinf(raw[0])
            assert nll[0] == 0 and nll[2] == 0 and np.all(out[:, 0] == 0)
        else:
            assert nll[0] == np.inf and not np.isfinite(out[:4, 0]).any()


def test_garbage_label_nan_sample_only(ctx):
    rng = np.random.default_rng([SEED, 9])
    lp, tg, il, tl = case(rng, 7, 3, 5, 3, dtype=np.float32)
    il[:] = 7
    tl[:] = 3
    tg[1, 1] = 9
    tg[2, 2] = -4
    nll, la, out, rn, rla, rg = run(ctx, lp, tg, il, tl, nll_in=np.ones(3))
    assert np.isnan(nll[1:]).all() and np.isfinite(nll[0]) and np.isnan(la[1:]).all()
    assert np.isnan(out[:, 1:]).all() and np.isfinite(out[:, 0]).all()
    np.testing.assert_allclose(out[:, 0], rg[:, 0], rtol=2e-5, atol=2e-5)


def float64_gradient(lp, tg, il, tl, nll, la, g=None):
    """The reference gradient in float64 from the same (fp32) inputs the kernel saw."""
    g = np.ones(lp.shape[1]) if g is None else np.asarray(g, np.float64)
    return ctc_loss_backward(g, lp.astype(np.float64), tg, np.asarray(il), np.asarray(tl), nll.astype(np.float64),
                             la.astype(np.float64), 0, False)


def log_space_atol(nll, T):
    """fp32 gradient tolerance of a long recursion: log-alpha and log-beta reach |nll| (~1500 for 1100
    labels), where one fp32 rounding is eps*|nll|/2, and T such roundings add up like a random walk.
    The occupancy exp(alpha + beta - lp + nll) <= 1 inherits that relative error (measured over 60
    seeds of test_long_target_1100: at most 0.53 of this bound; PyTorch's fp32 recursion is alike).
    That walk's size is one standard deviation, not a bound: at L = 3000 one seed in a few dozen reached
    1.16 of it (CTC_SEED=1542983580), so the tolerance is three of them, as a random walk needs to keep
    a correct kernel from failing by chance; a wrong recursion is off by orders more."""
    return float(3 * np.finfo(np.float32).eps * np.max(np.abs(nll)) * np.sqrt(T))


def test_ragged_grid_and_scalar_path(ctx):
    """More samples than blocks (grid-stride) and C not a multiple of the vector width."""
    rng = np.random.default_rng([SEED, 10])
    lp, tg, il, tl = case(rng, 5, 150, 3, 2, dtype=np.float32)
    compare(run(ctx, lp, tg, il, tl, one_d=True), "float32", SEED, il)


def test_long_target_1100(ctx):
    """2L+1 = 2201 states: 1024 threads x 3 states, chains across many warps."""
    rng = np.random.default_rng([SEED, 11])
    L, T, C = 1100, 1104, 3
    x = rng.standard_normal((T, 1, C))
    lp = torch.log_softmax(torch.tensor(x), -1).numpy().astype(np.float32)
    tg = np.where(np.arange(L) % 2 == 0, 1, 2)[None, :].astype(np.int32)
    tg[0, 500:503] = 1        # a short repeat: needs an extra blank
    res = run(ctx, lp, tg, np.array([T]), np.array([L]))
    nll, la, out, rn, rla, rg = res
    assert np.isfinite(nll).all()
    np.testing.assert_allclose(nll, rn, rtol=1e-4)
    fin = np.isfinite(rla)
    np.testing.assert_allclose(la[fin], rla[fin], rtol=1e-4, atol=1e-2)
    # two fp32 recursions over 1100 steps differ by their rounding: judge each against float64
    np.testing.assert_allclose(out, float64_gradient(lp, tg, [T], [L], nll, la), atol=log_space_atol(nll, T),
                               err_msg=f"seed {SEED}")


@pytest.mark.parametrize("L,dt", [(40, "float64"), (300, "float32"), (1100, "float64")])
def test_multi_warp_boundaries(ctx, L, dt):
    """per = 1 across 3 warps (L=40), per = 2 (L=300), per = 5 in fp64 (L=1100): warp-boundary slots."""
    rng = np.random.default_rng([SEED, 12, L])
    T, C = 2 * L + 6, 4
    x = rng.standard_normal((T, 2, C))
    lp = torch.log_softmax(torch.tensor(x), -1).numpy().astype(DT[dt])
    tg = rng.integers(1, C, (2, L)).astype(np.int64)
    tg[1, L // 3: L // 3 + 5] = 2        # a run: consecutive equal labels
    rng_g = rng.standard_normal(2)
    res = run(ctx, lp, tg, np.array([T, T - 3]), np.array([L, L - 1]), g=rng_g)
    nll, la, out, rn, rla, rg = res
    assert np.isfinite(nll).all()
    np.testing.assert_allclose(nll, rn, rtol=1e-5 if dt == "float32" else 1e-10, err_msg=f"seed {SEED}")
    expected = float64_gradient(lp, tg, [T, T - 3], [L, L - 1], nll, la, g=rng_g) if dt == "float32" else rg
    np.testing.assert_allclose(out, expected, atol=log_space_atol(nll, T) if dt == "float32" else 1e-9, err_msg=f"seed {SEED}")


@pytest.mark.parametrize("dt", list(DT))
def test_long_path_matches_short_path(ctx, dt):
    """The long-target path forced at short lengths: loss, log_alpha and gradient bit-identical to the
    register path (same lse3 operands in the same order, the same ctc_grad sums).
    2-D and 1-D targets, repeated labels, empty targets, a nonzero blank, zero_infinity, an infeasible
    sample, a garbage label and more samples than slots are all in the batch."""
    rng = np.random.default_rng([SEED, 13, len(dt)])
    for one_d, zero_inf, N in ((False, False, 5), (True, True, 4), (False, False, P.LONG_SLOTS + 3)):
        T, C, blank = 9, 6, 2
        lp, tg, il, tl = case(rng, T, N, C, 4, blank=blank, runs=N == 4, dtype=DT[dt])
        tl[1] = 0
        il[2], tl[2] = 1, 3                      # infeasible: nll = inf
        if not one_d:
            tg[3, 0], tl[3] = C + 5, 4           # garbage label: that sample NaN
        g = rng.standard_normal(N)
        short = run(ctx, lp, tg, il, tl, blank=blank, zero_inf=zero_inf, g=g, one_d=one_d, long_path=False,
                    reference=False)
        long = run(ctx, lp, tg, il, tl, blank=blank, zero_inf=zero_inf, g=g, one_d=one_d, long_path=True,
                   reference=False)
        msg = f"seed {SEED} dtype {dt} one_d {one_d}"
        assert np.isnan(f64(short[2][:, 3])).all() != one_d, msg     # the garbage label (2-D only)
        for a, b in zip(short, long):
            np.testing.assert_array_equal(f64(a), f64(b), err_msg=msg)


def test_long_path_matches_short_path_nonfinite_log_alpha(ctx):
    """A non-finite logAlpha entry the formula never reads (the last step before the final states, a
    padded step, a padded state) or reads (a final state, an early step): both recursion paths give
    the same bits, and the NumPy reference's non-finite pattern."""
    rng = np.random.default_rng([SEED, 17])
    lp, tg, _, _ = case(rng, 7, 3, 5, 3, dtype=np.float32)
    il, tl = np.array([7, 5, 7]), np.array([3, 2, 3])
    for where in ((0, il[0] - 1, 0), (1, 6, 1), (1, 2, 2 * 3), (2, il[2] - 1, 2 * tl[2]), (0, 1, 1)):
        for value in (np.inf, -np.inf, np.nan):
            short = run(ctx, lp, tg, il, tl, long_path=False, reference=False, log_alpha_value=(where, value))
            long = run(ctx, lp, tg, il, tl, long_path=True, reference=False, log_alpha_value=(where, value))
            msg = f"seed {SEED} log_alpha{where} = {value}"
            np.testing.assert_array_equal(f64(short[2]), f64(long[2]), err_msg=msg)
            la = short[1].copy()
            la[where] = value
            want = ctc_loss_backward(np.ones(3, np.float32), lp, tg, il, tl, short[0], la)
            np.testing.assert_array_equal(np.isnan(short[2]), np.isnan(want), err_msg=msg)
            np.testing.assert_array_equal(np.isinf(short[2]), np.isinf(want), err_msg=msg)


@pytest.mark.parametrize("long_path", [False, True])
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_last_step_nonfinite_log_prob(ctx, dt, long_path):
    """+inf, -inf or NaN in a log-prob at a sample's last step (t = Lin-1; a shorter input too): in a
    column whose only state there is s < 2L-1 (PyTorch's term exp(-inf + nll - lp): NaN for -inf, 0
    for +inf, whatever alpha is), the blank column and a final label's: PyTorch float64's pattern and
    values, on both recursion paths (16-bit: against PyTorch on the same values, its forward again)."""
    rng = np.random.default_rng([SEED, 18, len(dt), long_path])
    T, C = 6, 5
    clean = torch.log_softmax(torch.tensor(rng.standard_normal((T, 2, C))), -1).numpy().astype(DT[dt])
    tg, il, tl = np.array([[1, 2, 3], [2, 4, 0]]), np.array([6, 4]), np.array([3, 2])
    rtol, atol = (4e-3, 1e-3) if dt == "float16" else (2e-5, 2e-6)
    for where in ((5, 0, 1), (5, 0, 0), (5, 0, 3), (3, 1, 2), (3, 1, 0), (3, 1, 4)):
        for value in (np.inf, -np.inf, np.nan):
            lp = clean.copy()
            lp[where] = value
            *_, out = run(ctx, lp, tg, il, tl, long_path=long_path, reference=False)
            x = torch.tensor(lp.astype(np.float64))
            nll, la = torch.ops.aten._ctc_loss(x, torch.tensor(tg), il.tolist(), tl.tolist(), 0, False)
            want = torch.ops.aten._ctc_loss_backward(torch.ones(2, dtype=torch.float64), x, torch.tensor(tg),
                                                     il.tolist(), tl.tolist(), nll, la, 0, False).numpy()
            got, msg = f64(out), f"seed {SEED} {dt} long_path={long_path} log_probs{where} = {value}"
            for kind in (np.isnan, np.isposinf, np.isneginf):
                np.testing.assert_array_equal(kind(got), kind(want), err_msg=f"{msg}: {kind.__name__}")
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol, err_msg=msg)


@pytest.mark.parametrize("L,dt", [(3000, "float32"), (5000, "float64")])
def test_long_targets_beyond_the_register_path(ctx, L, dt):
    """Targets past the short path's limit (2047 fp32, 1279 fp64) take the long path: against the
    NumPy reference and PyTorch float64 autograd."""
    rng = np.random.default_rng([SEED, 14, L])
    T, C = L + 12, 4
    assert P.recursion_geometry(L, 8 if dt == "float64" else 4).long
    x = rng.standard_normal((T, 2, C))
    lp = torch.log_softmax(torch.tensor(x), -1).numpy().astype(DT[dt])
    # labels 1..3 with no two neighbours equal (a repeat costs a time step), then one run of 4
    tg = (1 + np.cumsum(rng.integers(1, C - 1, (2, L)), axis=1) % (C - 1)).astype(np.int64)
    tg[0, L // 2: L // 2 + 4] = 3
    il, tl = np.array([T, T - 5]), np.array([L, L - 7])
    g = rng.standard_normal(2)
    nll, la, out, rn, rla, rg = run(ctx, lp, tg, il, tl, g=g, one_d=True)
    assert np.isfinite(nll).all()
    np.testing.assert_allclose(nll, rn, rtol=1e-5 if dt == "float32" else 1e-10, err_msg=f"seed {SEED}")
    # PyTorch float64 autograd of the same log-probs
    lpt = torch.tensor(lp.astype(np.float64), requires_grad=True)
    loss = torch.nn.functional.ctc_loss(lpt, torch.tensor(tg), torch.tensor(il), torch.tensor(tl),
                                        reduction="none")
    (loss * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(f64(nll), loss.detach().numpy(), rtol=1e-5 if dt == "float32" else 1e-10,
                               err_msg=f"seed {SEED}")
    atol = log_space_atol(nll, T) if dt == "float32" else 1e-8
    np.testing.assert_allclose(f64(out), lpt.grad.numpy(), atol=atol, err_msg=f"seed {SEED}")
    np.testing.assert_allclose(f64(out), float64_gradient(lp, tg, il, tl, nll, la, g=g) if dt == "float32" else rg,
                               atol=atol, err_msg=f"seed {SEED}")


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_prefetch_ring_every_input_length(ctx, dt):
    """The 8-step register ring of the P = 1 recursions (launch.RING): input lengths 0..T in one batch
    cover every residue of the ring and rings longer than the recursion; against the NumPy reference
    and bit-identical to the long path, which has no ring."""
    rng = np.random.default_rng([SEED, 15, len(dt)])
    T, N, C = 19, 20, 5
    geo = P.recursion_geometry(3, 8 if dt == "float64" else 4)
    assert geo.P == 1 and P.prefetch_distance(geo) == 8 > 1
    lp, tg, _, tl = case(rng, T, N, C, 3, dtype=DT[dt])
    il = np.arange(N, dtype=np.int64) % (T + 1)
    res = run(ctx, lp, tg, il, tl, g=rng.standard_normal(N))
    compare(res, dt, SEED, il)
    long = run(ctx, lp, tg, il, tl, g=np.ones(N), long_path=True,
               reference=False)
    short = run(ctx, lp, tg, il, tl, g=np.ones(N), long_path=False, reference=False)
    for a, b in zip(short, long):
        np.testing.assert_array_equal(f64(a), f64(b), err_msg=f"seed {SEED} dtype {dt}")


@pytest.mark.parametrize("L,long_path", [(6, False), (300, False), (6, True)])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_backward_is_the_fp32_backward_rounded(ctx, dt, L, long_path):
    """16-bit storage (ctc_alpha_math, ctc_beta_math): the gradient is the fp32 launchers' gradient on
    the same values rounded once, bit for bit (the same recursions in fp32, only the stores differ), on
    the P = 1 (L = 6), P = 8 (L = 300: 2 states per thread) and long paths; the 16-bit log_alpha and
    nll given are not read for the math (other finite values in them change nothing)."""
    rng = np.random.default_rng([SEED, 16, L, len(dt), long_path])
    T, N, C = 2 * L + 5, 3, 5
    half = DT[dt]
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C)) * 2), -1).numpy().astype(half)
    tg = (1 + np.cumsum(rng.integers(1, C - 1, (N, L)), axis=1) % (C - 1)).astype(np.int64)
    il, tl = np.array([T, T - 2, L + 3]), np.array([L, L - 1, L // 2])
    g = rng.standard_normal(N).astype(half)
    *_, out32 = run(ctx, lp.astype(np.float32), tg, il, tl, g=g.astype(np.float32), long_path=long_path,
                    reference=False)
    nll, la, out = run(ctx, lp, tg, il, tl, g=g, long_path=long_path, reference=False)
    assert np.isfinite(f64(out)).all()
    np.testing.assert_array_equal(f64(out), f64(out32.astype(half)), err_msg=f"seed {SEED}")
    la_other = la.copy()
    la_other[np.isfinite(f64(la))] = 1.0
    nll_other = np.full(N, 3.0, half)
    *_, again = run(ctx, lp, tg, il, tl, g=g, long_path=long_path, reference=False, nll_in=nll_other,
                    la_in=la_other)
    np.testing.assert_array_equal(f64(again), f64(out), err_msg=f"seed {SEED}")


# ------------------------------------------------------------------------------ split recursions
class Recording(StandaloneEmuContext):
    """StandaloneEmuContext that keeps the name of every kernel it launches."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.names: list[str] = []

    def launch(self, file, expr, grid, block, args, shared_mem=0):
        self.names.append(expr)
        super().launch(file, expr, grid, block, args, shared_mem)


@pytest.fixture(scope="module")
def rctx():
    return Recording(sm_count=4)


def test_recursion_split_at_the_bench_shapes():
    """The bench's few samples (T = 200, L = 40): enough (sample, chunk) blocks for 132 SMs, chunks of
    2..32 states that cover 2L+1; many samples, small problems, forced paths: one block per sample."""
    for N in (16, 50):
        J, cs = P.recursion_split(200, N, 40)
        assert N * J >= 132 and 2 <= cs <= P.SPLIT_THREADS and (J - 1) * cs < 81 <= J * cs
    assert P.recursion_split(200, P.SPLIT_TARGET_BLOCKS, 40) == (1, 0)
    assert P.recursion_split(8, 2, 3) == (1, 0)
    assert P.recursion_split(200, 16, 40, long_path=False) == (1, 0)
    assert P.recursion_split(200, 16, 40, split=0) == (1, 0)
    assert P.recursion_split(200, 16, 40, split=5) == (17, 5)
    # the workspace holds the sync words and the boundary values only where the recursions split
    plain = P.forward_workspace_bytes(16, 40, 4, T=200, split=0)
    J, _ = P.recursion_split(200, 16, 40)
    assert P.forward_workspace_bytes(16, 40, 4, T=200) == (plain + P._round(4 * (P.SYNC_WORDS + 16 * J))
                                                           + P._round(16 * J * 200 * 8))


def test_recursion_split_bounds_the_boundary_values():
    """The launcher splits only while one recursion's boundary values (N * J * T * 2 * math size bytes)
    fit SPLIT_XCHG_MAX, judged at the real math size (fp64: 8); a forced split is not bounded."""
    J, cs = P.recursion_split(200, 16, 40)
    per_step = 16 * J * 2
    T_max = P.SPLIT_XCHG_MAX // (per_step * 4)
    assert P.recursion_split(T_max, 16, 40) == (J, cs)
    assert P.recursion_split(T_max + 1, 16, 40) == (1, 0)
    assert P.recursion_split(T_max, 16, 40, math_size=8) == (1, 0)
    assert P.recursion_split(T_max // 2, 16, 40, math_size=8) == (J, cs)
    assert P.recursion_split(10 * T_max, 16, 40, split=cs) == (J, cs)


def test_split_falls_back_where_the_blocks_cannot_all_be_resident():
    """More (sample, chunk) blocks than the device keeps resident take the one-block-per-sample path (a
    performance choice: the kernels' tickets need no residency)."""
    from aclnn_gpu.kernels.occupancy import blocks_per_sm
    one_sm = StandaloneEmuContext(sm_count=1)
    kernel = "aclg::ctc_alpha_split<float, long long>"
    per_sm = blocks_per_sm(one_sm.arch, P.FILE, kernel, P.SPLIT_THREADS, P.split_shared_bytes(40))
    assert 1 < per_sm <= 32
    assert P.split_resident(one_sm, kernel, per_sm, 40) and not P.split_resident(one_sm, kernel, per_sm + 1, 40)


@pytest.mark.parametrize("dt", list(DT))
def test_split_recursions_bit_identical_to_the_register_path(rctx, dt):
    """ctc_alpha_split / ctc_beta_split (ctc_recursions_math_split for 16-bit storage) against the
    register path on the same inputs, bit for bit, and against the reference: chunks of 2, 3 and 7
    states, T = 45 (more than one batch of boundary steps and a partial prefetch ring), 1-D and 2-D
    targets, repeated labels, zero_infinity, padded log_alpha, input lengths from 0 to T."""
    rng = np.random.default_rng([SEED, 21, len(dt)])
    for k, cs in enumerate((2, 3, 7)):
        T, N, C = 45, 3, 6
        blank = int(rng.integers(0, C))
        lp, tg, il, tl = case(rng, T, N, C, 6, blank=blank, dtype=DT[dt], runs=k == 1)
        il[1] = 0 if k == 0 else T - 1
        kw = dict(blank=blank, zero_inf=k != 1, one_d=k == 2, X_pad=k, g=rng.standard_normal(N))
        rctx.names.clear()
        got = run(rctx, lp, tg, il, tl, split=cs, **kw)
        assert any("_split<" in n for n in rctx.names) and not any(", 1>" in n for n in rctx.names)
        want = run(rctx, lp, tg, il, tl, split=0, reference=False, **kw)
        for a, b, what in zip(got[:3], want, ("nll", "log_alpha", "grad")):
            assert a.tobytes() == b.tobytes(), f"seed {SEED} dtype {dt} cs {cs}: {what} differs"
        compare(got, dt, SEED, il)


def test_split_bad_labels_and_impossible_alignments(rctx):
    """A label out of range makes that sample NaN in every chunk; a sample too short to align gives
    +inf (0 under zero_infinity), as on the register path."""
    rng = np.random.default_rng([SEED, 22])
    lp, tg, il, tl = case(rng, 9, 4, 5, 4, dtype=np.float32)
    tl[:] = 4
    il[:] = [9, 9, 5, 9]
    tg[1, 2] = 11
    tg[2, :] = 3                                 # repeats need 2L+... steps: too short for 5
    for zi in (False, True):
        raw = ctc_loss_forward(lp, tg, il, tl)[0] if zi else None
        got = run(rctx, lp, tg, il, tl, split=2, zero_inf=zi, nll_in=raw)
        want = run(rctx, lp, tg, il, tl, split=0, zero_inf=zi, nll_in=raw, reference=False)
        for a, b in zip(got[:3], want):
            assert a.tobytes() == b.tobytes()
        assert np.isnan(got[0][1]) and np.isnan(got[2][:, 1]).all()
        compare(got, "float32", SEED, il)



@pytest.mark.parametrize("dt,long_path", [("float16", False), ("bfloat16", False), ("float32", False),
                                          ("float16", True)])
def test_infinite_grad_sign_where_exp_lp_and_the_term_underflow(ctx, dt, long_path):
    """An infinite gradOut times exp(lp) - term with lp in [-140, -90]: both sides below float32's normal
    range (0 under CuPy's -ftz=true, which the emulator's MXCSR mimics), so ctc_grad compares them scaled
    by e^64. The sign asserted is PyTorch float64's: + for a class the target never emits (term 0), -
    for the target's labels and the blank where their posterior exceeds exp(lp). Where ctc_grad forms
    the occupancies itself (16-bit storage, register path: alpha and beta in log space) it forms the
    term again scaled, so every sign is PyTorch's; where they come formed (float32 / float64, the long
    path) an occupancy below FLT_MIN was flushed where it was formed, so only term-0 classes are
    asserted there (docs/API.md: either infinity, never NaN)."""
    rng = np.random.default_rng(SEED)
    T, N, C = 4, 4, 5
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C))), -1).numpy()
    tg = np.array([[1, 2], [1, 2], [2, 1], [3, 3]], np.int64)
    tl = np.array([2, 1, 2, 1], np.int64)
    il = np.array([T, T, T, 3], np.int64)
    tiny = [(0, 0, 1), (0, 0, 4), (1, 1, 1), (2, 1, 0), (3, 2, 2), (1, 2, 4), (0, 3, 0), (2, 3, 3), (1, 3, 4)]
    for t, b, c in tiny:
        lp[t, b, c] = rng.uniform(-140, -90)
    lpd = lp.astype(DT[dt])
    g = np.array([np.inf, -np.inf, np.inf, -np.inf], DT[dt])
    _, _, out = run(ctx, lpd, tg, il, tl, g=g, reference=False, long_path=long_path)
    lp64 = torch.tensor(lpd.astype(np.float64), requires_grad=True)
    loss = torch.nn.functional.ctc_loss(lp64, torch.tensor(tg), torch.tensor(il), torch.tensor(tl), 0, "none")
    loss.backward(torch.ones(N, dtype=torch.float64))
    d = lp64.grad.numpy()    # exp(lp) - term in float64 (gradOut 1)
    formed_here = dt in P.HALF and not long_path
    checked = set()
    for t, b, c in tiny:
        assert d[t, b, c] != 0 and np.exp(float(lpd[t, b, c])) < np.finfo(np.float32).tiny
        if formed_here or c not in (0, *tg[b, :tl[b]]):
            got = f64(out)[t, b, c]
            assert got == np.sign(d[t, b, c]) * f64(g)[b], (t, b, c, d[t, b, c], got)
            checked.add(np.sign(d[t, b, c]))
    assert checked == ({-1.0, 1.0} if formed_here else {1.0})   # both signs asserted where the kernel can tell


@pytest.mark.parametrize("dt", ["float32", "float16"])
def test_split_wait_that_times_out_marks_the_samples_failed(rctx, monkeypatch, dt):
    """A count that never comes ends the wait after SPLIT_TIMEOUT_NS (here 20 ms): the launch sets its
    abort word and the samples turn NaN (loss, gradient) instead of a trap or a hang. Forced by sync
    words whose ticket starts at 1: no block takes unit 0 (sample 0's first chunk), the block of unit 1
    waits for it (float16: ctc_recursions_math_split, one ticket over alpha's and beta's units)."""
    def ticket_from_one(units):
        sync = np.zeros(P.SYNC_WORDS + units, np.int32)
        sync[0] = 1
        return sync

    monkeypatch.setattr(P, "SPLIT_TIMEOUT_NS", 20_000_000)
    monkeypatch.setattr(P, "split_sync", ticket_from_one)
    rng = np.random.default_rng([SEED, 23])
    lp, tg, il, tl = case(rng, 12, 2, 5, 4, dtype=DT[dt])
    tl[:] = 4
    il[:] = 12
    rctx.names.clear()
    finite = ctc_loss_forward(lp, tg, il, tl)[0]   # the backward's losses: its NaN can only be the status's
    nll, _, grad = run(rctx, lp, tg, il, tl, split=2, nll_in=finite, reference=False)
    assert sum("_split<" in n for n in rctx.names) == 2
    assert np.isfinite(finite).all()
    # sample 0: its waiting blocks fail; sample 1: computed in full (the emulator runs the blocks one after
    # another), then marked by its blocks that end with the abort word set (outputs start as NaN poison,
    # so the loss and the gradient were written: sample 1's by the check at the end)
    assert np.isnan(nll).all() and np.isnan(grad).all()
