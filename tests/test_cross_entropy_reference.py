"""NumPy cross-entropy reference vs PyTorch CPU autograd (float64), fresh random cases per run."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from aclnn_gpu.reference.cross_entropy import cross_entropy_loss, cross_entropy_loss_grad  # noqa: E402

REDUCTIONS = ["none", "mean", "sum"]


def torch_ce(x, t, w, reduction, ignore_index, ls, g):
    """PyTorch forward value and gradient w.r.t. the logits, float64."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = None if w is None else torch.tensor(w, dtype=torch.float64)
    loss = F.cross_entropy(xt, torch.tensor(t, dtype=torch.int64), weight=wt, reduction=reduction,
                           ignore_index=ignore_index, label_smoothing=ls)
    loss.backward(torch.tensor(g, dtype=torch.float64))
    return loss.detach().numpy(), xt.grad.numpy()


def case(rng, N, C, *, weighted, ignore_index, ignore_frac=0.3, reduction="mean"):
    x = rng.standard_normal((N, C)) * rng.uniform(0.5, 4)
    t = rng.integers(0, C, N)
    if 0 <= ignore_index < C:
        pass  # targets equal to ignore_index appear naturally too
    hit = rng.random(N) < ignore_frac
    t[hit] = ignore_index
    w = rng.uniform(0.1, 2.0, C) if weighted else None
    g = rng.standard_normal(N) if reduction == "none" else np.float64(rng.standard_normal())
    return x, t, w, g


def run_both(x, t, w, reduction, ii, ls, g, tdtype=np.int64):
    loss, lp = cross_entropy_loss(x, t.astype(tdtype), w, reduction, ii, ls)
    grad = cross_entropy_loss_grad(g, lp, t.astype(tdtype), w, reduction, ii, ls)
    return loss, lp, grad


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [-100, 2, -1])
def test_vs_torch(rng, reduction, weighted, ls, ignore_index):
    for _ in range(3):
        N, C = int(rng.integers(1, 40)), int(rng.integers(3, 50))
        x, t, w, g = case(rng, N, C, weighted=weighted, ignore_index=ignore_index, reduction=reduction)
        if reduction == "mean" and not np.any(t != ignore_index):
            t[0] = (ignore_index + 1) % C  # keep D > 0 here; all-ignored has its own test
        ref_loss, ref_grad = torch_ce(x, t, w, reduction, ignore_index, ls, g)
        loss, lp, grad = run_both(x, t, w, reduction, ignore_index, ls, g)
        assert loss.dtype == np.float64 and grad.dtype == np.float64
        assert loss.shape == ((N,) if reduction == "none" else ())
        np.testing.assert_allclose(lp, torch.log_softmax(torch.tensor(x), 1).numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_target_int32_and_float32(rng, reduction, dtype):
    N, C = 17, 11
    x, t, w, g = case(rng, N, C, weighted=True, ignore_index=3, reduction=reduction)
    t[0] = 1
    ref_loss, ref_grad = torch_ce(x, t, w, reduction, 3, 0.1, g)
    if dtype is np.float32:
        loss, lp = cross_entropy_loss(x.astype(np.float32), t, w.astype(np.float32), reduction, 3, 0.1)
        grad = cross_entropy_loss_grad(np.float32(g) if np.ndim(g) == 0 else g.astype(np.float32), lp, t,
                                       w.astype(np.float32), reduction, 3, 0.1)
        assert lp.dtype == grad.dtype == loss.dtype == np.float32
        tol = dict(rtol=2e-5, atol=2e-6)
    else:
        loss, lp, grad = run_both(x, t, w, reduction, 3, 0.1, g, tdtype=np.int32)
        tol = dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(loss, ref_loss, **tol)
    np.testing.assert_allclose(grad, ref_grad, **tol)


@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_all_rows_ignored(rng, ls, weighted, reduction):
    N, C = 9, 5
    x, t, w, g = case(rng, N, C, weighted=weighted, ignore_index=-100, ignore_frac=1.0, reduction=reduction)
    loss, lp, grad = run_both(x, t, w, reduction, -100, ls, g)
    ref_loss, ref_grad = torch_ce(x, t, w, reduction, -100, ls, g)
    np.testing.assert_array_equal(grad, np.zeros((N, C)))
    np.testing.assert_array_equal(grad, ref_grad)       # PyTorch's autograd gives zeros too
    if reduction == "mean":
        assert np.isnan(ref_loss)                       # PyTorch: 0/0
        assert loss == 0.0                              # ours: 0, consistent with the zero gradient
    else:
        np.testing.assert_array_equal(loss, ref_loss)


def test_c_equals_one(rng):
    N = 6
    x = rng.standard_normal((N, 1))
    t = np.zeros(N, np.int64)
    t[2] = -100
    for reduction in REDUCTIONS:
        for ls in (0.0, 0.1):
            g = rng.standard_normal(N) if reduction == "none" else np.float64(1.3)
            ref_loss, ref_grad = torch_ce(x, t, None, reduction, -100, ls, g)
            loss, lp, grad = run_both(x, t, None, reduction, -100, ls, g)
            np.testing.assert_array_equal(lp, 0.0)
            np.testing.assert_allclose(loss, ref_loss, atol=1e-15)
            np.testing.assert_allclose(grad, ref_grad, atol=1e-15)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_n_zero(reduction):
    x = np.zeros((0, 7))
    t = np.zeros(0, np.int64)
    g = np.zeros(0) if reduction == "none" else np.float64(1.0)
    loss, lp, grad = run_both(x, t, None, reduction, -100, 0.1, g)
    assert lp.shape == grad.shape == (0, 7)
    if reduction == "none":
        assert loss.shape == (0,)
    else:
        assert loss.shape == () and loss == 0.0  # mean: D = 0 -> 0 (PyTorch: NaN)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("bad_value", [7, 1000, -5, -(2**40)])
def test_out_of_range_target_nan_row_only(rng, reduction, bad_value):
    N, C = 8, 7
    x, t, w, g = case(rng, N, C, weighted=True, ignore_index=-100, ignore_frac=0.2, reduction=reduction)
    t[0] = 1
    good_t = t.copy()
    bad = 3
    t[bad] = bad_value
    good_t[bad] = -100  # the bad row contributes nothing else, like an ignored row
    loss, lp, grad = run_both(x, t, w, reduction, -100, 0.1, g)
    ref_loss, ref_grad = torch_ce(x, good_t, w, reduction, -100, 0.1, g)
    assert np.all(np.isnan(grad[bad]))
    keep = np.arange(N) != bad
    np.testing.assert_allclose(grad[keep], ref_grad[keep], rtol=1e-10, atol=1e-12)
    if reduction == "none":
        assert np.isnan(loss[bad])
        np.testing.assert_allclose(loss[keep], ref_loss[keep], rtol=1e-10, atol=1e-12)
    else:
        assert np.isnan(loss)


def test_nan_in_ignored_row_stays_zero(rng):
    N, C = 5, 4
    x, t, w, g = case(rng, N, C, weighted=False, ignore_index=-100, ignore_frac=0.0)
    t[1] = -100
    _, lp = cross_entropy_loss(x, t, None, "mean", -100, 0.1)
    lp[1] = np.nan
    grad = cross_entropy_loss_grad(np.float64(1.0), lp, t, None, "mean", -100, 0.1)
    np.testing.assert_array_equal(grad[1], 0.0)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_low_precision_near_one_hot_target_column(dtype_name):
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16) if dtype_name == "bfloat16" else np.dtype(np.float16)
    N, C = 4, 16
    lp64 = np.full((N, C), -20.0)
    t = np.arange(N) % C
    lp64[np.arange(N), t] = [-1e-6, -3e-5, -2e-3, -0.0]
    lp = lp64.astype(dt)
    grad = cross_entropy_loss_grad(np.float32(1.0).astype(dt), lp, t, None, "sum", -100, 0.0)
    exact = np.expm1(lp.astype(np.float64)[np.arange(N), t])
    np.testing.assert_array_equal(grad[np.arange(N), t], exact.astype(dt))
    assert grad.dtype == dt


def test_large_rows_chunking(rng):
    # rows longer than the scratch chunk and many rows per chunk: same as float64 torch
    for N, C in ((3, 70000), (5000, 3)):
        x, t, w, g = case(rng, N, C, weighted=True, ignore_index=-100, reduction="sum")
        ref_loss, ref_grad = torch_ce(x, t, w, "sum", -100, 0.1, g)
        loss, lp, grad = run_both(x, t, w, "sum", -100, 0.1, g)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-9, atol=1e-15)


def nonfinite_case(rng, C, *, weighted, ignore_index, reduction):
    """Rows holding -inf, +inf and NaN logits (BUG-3 / BUG-4 of docs/HARDENING.md), next to finite
    and ignored rows; the same row patterns as the kernel test of the same name."""
    inf, nan = np.inf, np.nan
    N = 14
    x = rng.standard_normal((N, C)) * 2.0
    z = int(rng.choice([c for c in range(C) if c != ignore_index]))  # the zero-weight class (weighted)
    t = rng.choice([c for c in range(C) if c not in (z, ignore_index)], N)  # no accidental ignores

    def other(i):  # a column that is not row i's target (nor z)
        return next(c for c in rng.permutation(C) if c != t[i] and c != z)

    x[1, other(1)] = -inf                      # -inf off the target: finite loss unless smoothing
    x[2, t[2]] = -inf                          # -inf on the target: loss inf
    x[3, other(3)] = inf                       # +inf: NaN row
    x[4, other(4)] = nan                       # NaN: NaN row
    x[5] = -inf                                # all -inf: NaN row (PyTorch: -inf - -inf)
    x[6, [other(6), other(6)]] = -inf
    x[6, t[6]] = inf                           # +inf on the target among -infs: NaN row
    x[7, other(7)], t[7] = -inf, ignore_index  # ignored rows: loss 0 whatever they hold
    x[8, other(8)], t[8] = nan, ignore_index
    x[9, other(9)], t[9] = inf, ignore_index
    t[10] = z
    x[10, z] = -inf                            # -inf on a zero-weight target: 0 * inf = NaN (weighted)
    x[11] = inf                                # all +inf
    x[12] = -inf
    x[12, other(12)] = nan                     # only NaN and -inf
    t[13] = ignore_index                       # finite, ignored
    w = None
    if weighted:
        w = rng.uniform(0.1, 2.0, C)
        w[z] = 0.0
    g = rng.standard_normal(N) if reduction == "none" else np.float64(rng.standard_normal())
    return x, t, w, g


def same_nonfinite(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    for f in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(f(got), f(want)), f"{what}: {f.__name__} positions differ\n{got}\n{want}"


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("C", [5, 37])
def test_nonfinite_logits_vs_torch(rng, reduction, weighted, ls, ignore_index, C):
    """+inf / -inf / NaN logits follow PyTorch float64 exactly: log_prob, loss (inf and NaN where
    PyTorch has them) and the gradient of the rows that count (ignored rows: zeros, docs/API.md §7, where
    autograd gives NaN for a NaN row since exp(NaN) * 0 is NaN)."""
    x, t, w, g = nonfinite_case(rng, C, weighted=weighted, ignore_index=ignore_index, reduction=reduction)
    ref_loss, ref_grad = torch_ce(x, t, w, reduction, ignore_index, ls, g)
    ref_lp = torch.log_softmax(torch.tensor(x), 1).numpy()
    loss, lp, grad = run_both(x, t, w, reduction, ignore_index, ls, g)
    same_nonfinite(lp, ref_lp, "log_prob")
    np.testing.assert_allclose(lp, ref_lp, rtol=1e-12, atol=1e-12)
    same_nonfinite(loss, ref_loss, "loss")
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10, atol=1e-12)
    counted = t != ignore_index
    same_nonfinite(grad[counted], ref_grad[counted], "grad")
    np.testing.assert_allclose(grad[counted], ref_grad[counted], rtol=1e-10, atol=1e-12)
    assert np.all(grad[~counted] == 0)
    if reduction == "none":  # the documented cases, spelled out
        assert np.all(np.isnan(lp[[3, 4, 5, 6, 11, 12]])) and np.isnan(loss[[3, 4, 5, 6, 11, 12]]).all()
        assert np.all(loss[[7, 8, 9, 13]] == 0)
        assert loss[2] == np.inf
        assert np.isfinite(loss[1]) == (ls == 0.0)
        assert np.isnan(loss[10]) == weighted and not np.isnan(loss[[0, 1, 2]]).any()
        assert np.isfinite(grad[[1, 2]]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_nonfinite_logits_low_precision_positions(rng, dtype):
    """float32 / float16 storage: the same NaN / inf positions as float64."""
    for reduction in REDUCTIONS:
        x, t, w, g = nonfinite_case(rng, 9, weighted=True, ignore_index=-100, reduction=reduction)
        for ls in (0.0, 0.1):
            loss64, lp64 = cross_entropy_loss(x, t, w, reduction, -100, ls)
            loss, lp = cross_entropy_loss(x.astype(dtype), t, w.astype(np.float32), reduction, -100, ls)
            same_nonfinite(lp, lp64, "log_prob")
            same_nonfinite(loss, loss64, "loss")


def test_forward_into_a_strided_output_gives_the_same_bits():
    """log_prob_out of any strides: the same loss and log_prob bits as a fresh C-order result."""
    from aclnn_gpu.reference.cross_entropy import cross_entropy_loss
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 9)).astype(np.float32)
    t = rng.integers(0, 9, 16)
    w = rng.uniform(0.5, 2, 9).astype(np.float32)
    loss, lp = cross_entropy_loss(x, t, w, "none", -100, 0.2)
    out = np.asfortranarray(np.full((16, 9), np.nan, np.float32))
    loss_f, lp_f = cross_entropy_loss(x, t, w, "none", -100, 0.2, log_prob_out=out)
    assert lp_f is out
    np.testing.assert_array_equal(loss_f, loss)
    np.testing.assert_array_equal(out, lp)


def _storage(name):
    import ml_dtypes
    return {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
            "bfloat16": np.dtype(ml_dtypes.bfloat16)}[name]


def mixed_magnitude_logits(rng, N, C):
    """Rows for both forms of the forward: ordinary logits (the unshifted form), a row with a logit
    above float32's exp overflow, a row entirely below -44 (sum under 2^-64), a confident row offset
    by +40, a NaN row and an ignored one (both redone in the shifted form or zeroed)."""
    x = rng.standard_normal((N, C)) * 3
    x[1, 2] = 95.0
    x[2] -= 60.0
    x[3] += 40.0
    x[3, 0] += 15.0
    x[4, 1] = np.nan
    t = rng.integers(0, C, N)
    t[3] = 0
    t[5] = -100
    return x, t


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("ls,weighted", [(0.0, False), (0.1, True)])
def test_unshifted_forward_matches_the_shifted_form_and_torch(rng, monkeypatch, dtype, ls, weighted):
    """The forward's unshifted form (exp, row sum, x - hi - lo) against its shifted form (every row
    redone, as PyTorch computes it) and PyTorch float64, on the same storage dtype; NaN-poisoned
    log_prob_out; rows of both kinds in one call."""
    import aclnn_gpu.reference.cross_entropy as ce
    dt = _storage(dtype)
    N, C = 12, 37
    x, t = mixed_magnitude_logits(rng, N, C)
    xs = x.astype(dt)
    x64 = xs.astype(np.float64)
    w = rng.uniform(0.5, 2, C) if weighted else None
    wm = None if w is None else w.astype(np.float64 if dt == np.float64 else np.float32)

    def run():
        out = np.full((N, C), np.nan, dt)
        loss, lp = ce.cross_entropy_loss(xs, t, wm, "none", -100, ls, log_prob_out=out)
        assert lp is out and not np.isnan(lp[[0, 1, 2, 3, 5]].astype(np.float64)).any()
        return loss.astype(np.float64), lp.astype(np.float64)

    loss, lp = run()
    monkeypatch.setattr(ce, "_LSE_MIN", {k: np.inf for k in ce._LSE_MIN})   # every row shifted
    loss_s, lp_s = run()
    ref_lp = torch.log_softmax(torch.tensor(x64), 1).numpy()
    ref_loss = F.cross_entropy(torch.tensor(x64), torch.tensor(t), None if w is None else torch.tensor(
        wm.astype(np.float64)), reduction="none", label_smoothing=ls).numpy()
    tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 2e-6}.get(dt, 1e-2)
    for got in (lp, lp_s):
        same_nonfinite(got, ref_lp, "log_prob")
        np.testing.assert_allclose(got, ref_lp, rtol=tol, atol=tol)
    for got in (loss, loss_s):
        same_nonfinite(got, np.where(t == -100, 0.0, ref_loss), "loss")
        np.testing.assert_allclose(got, np.where(t == -100, 0.0, ref_loss), rtol=tol, atol=tol)
    np.testing.assert_allclose(lp, lp_s, rtol=tol, atol=tol)


def test_unshifted_forward_keeps_confident_rows_accurate():
    """float32 logits offset by +40 with one class ahead by 12: the target's log-prob (about -2e-4)
    within 3e-7 of float64 (x - lse in one float32 subtraction errs by half an ulp of lse, ~1.9e-6;
    the hi + lo split keeps the error of PyTorch's shifted form)."""
    rng = np.random.default_rng(11)
    N, C = 64, 1000
    x = (rng.standard_normal((N, C)) + 40).astype(np.float32)
    t = rng.integers(0, C, N)
    x[np.arange(N), t] += 12
    _, lp = cross_entropy_loss(x, t, None, "none")
    ref = torch.log_softmax(torch.tensor(x, dtype=torch.float64), 1).numpy()
    err = np.abs(lp[np.arange(N), t] - ref[np.arange(N), t])
    assert err.max() < 3e-7, err.max()


def test_forward_and_grad_same_bits_for_any_thread_split(monkeypatch):
    """Large problems split their rows over the pool: the same bits as one thread, weighted and
    smoothed included (each row's arithmetic does not depend on its block)."""
    import aclnn_gpu.reference.cross_entropy as ce
    rng = np.random.default_rng(5)
    N, C = 2 * ce._PARALLEL_MIN // 512 + 7, 512
    x = (rng.standard_normal((N, C)) * 3).astype(np.float32)
    x[5, 3] = 100.0                       # one row redone in the shifted form
    t = rng.integers(0, C, N)
    t[::5] = -100
    w = rng.uniform(0.5, 2, C).astype(np.float32)
    parallel_result = [ce.cross_entropy_loss(x, t, w, "none", -100, 0.1)]
    parallel_result.append(ce.cross_entropy_loss_grad(np.float32(0.7), parallel_result[0][1], t, w, "mean", -100, 0.1))
    monkeypatch.setattr(ce, "_PARALLEL_MIN", 1 << 62)
    loss, lp = ce.cross_entropy_loss(x, t, w, "none", -100, 0.1)
    grad = ce.cross_entropy_loss_grad(np.float32(0.7), lp, t, w, "mean", -100, 0.1)
    assert loss.tobytes() == parallel_result[0][0].tobytes()
    assert lp.tobytes() == parallel_result[0][1].tobytes()
    assert grad.tobytes() == parallel_result[1].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_near_certain_rows_give_no_negative_loss(dtype):
    """Rows whose target leads by 20-40: the loss is >= 0 and within float rounding of float64, and
    the target's log-prob is <= 0, as PyTorch's shifted form guarantees."""
    rng = np.random.default_rng(8)
    N, C = 256, 64
    x = rng.standard_normal((N, C)) + rng.uniform(-30, 30, (N, 1))
    t = rng.integers(0, C, N)
    x[np.arange(N), t] += rng.uniform(20, 40, N)
    x = x.astype(dtype)
    loss, lp = cross_entropy_loss(x, t, None, "none")
    assert (loss >= 0).all() and (lp[np.arange(N), t] <= 0).all()
    ref = F.cross_entropy(torch.tensor(x, dtype=torch.float64), torch.tensor(t), reduction="none").numpy()
    # float64: its lse split through long double (x86's 64-bit mantissa; where long double is double,
    # the split is void and the error is half an ulp of lse)
    wide = np.finfo(np.longdouble).nmant > 52
    np.testing.assert_allclose(loss, ref, rtol=0, atol=3e-7 if dtype == np.float32 else 1e-15 if wide else 1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_log_prob_never_positive_when_another_class_leads(dtype):
    """A row led by 25 at a class other than the target: the unshifted form's float32 sum rounding
    must not leave that class's log-prob above 0 (it would survive rounding to fp16 / bf16 and give
    the gradient p - 1 the wrong sign there). PyTorch's log_softmax is <= 0 everywhere."""
    rng = np.random.default_rng(11)
    N, C = 4000, 8
    x = rng.standard_normal((N, C))
    x[:, 0] += 25
    t = np.ones(N, np.int64)
    loss, lp = cross_entropy_loss(x.astype(dtype), t, None, "none")
    assert (np.asarray(lp, np.float64) <= 0).all()
    ref = torch.log_softmax(torch.tensor(np.asarray(x.astype(dtype), np.float64)), 1).numpy()
    tol = {np.dtype(np.float32): 3e-6, np.dtype(np.float64): 1e-12}.get(np.dtype(dtype), 1e-2)
    np.testing.assert_allclose(np.asarray(lp, np.float64), ref, rtol=tol, atol=tol)
