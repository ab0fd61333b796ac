"""Cross-entropy GPU plan (kernels/cross_entropy.cu) in the CPU emulator vs the NumPy reference.

Outputs are NaN-poisoned before every launch; launches stay small (each emulated thread costs ~20 us).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from aclnn_gpu.emulator.context import StandaloneEmuContext
from aclnn_gpu.kernels.occupancy import blocks_per_sm
from aclnn_gpu.ops.cross_entropy import launch as plan
from aclnn_gpu.reference.cross_entropy import cross_entropy_loss, cross_entropy_loss_grad

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
TOL = {"float32": (2e-5, 2e-6), "float64": (1e-12, 1e-14), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
REDUCTIONS = ["none", "mean", "sum"]


@pytest.fixture(scope="module")
def ctx():
    return StandaloneEmuContext(sm_count=4)


def dev(a, misalign=0):
    """A copy of `a` in a fresh buffer whose base is 64-byte aligned plus `misalign` elements."""
    a = np.asarray(a)
    item = a.dtype.itemsize
    raw = np.full(a.nbytes + 128 + misalign * item, GUARD, np.uint8)
    off = (-raw.ctypes.data) % 64 + misalign * item
    out = raw[off: off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


GUARD = 0xA5


def guard_intact(view):
    """The bytes around a `dev` buffer (written by nobody) still hold the guard pattern."""
    raw = view
    while raw.base is not None:
        raw = raw.base
    off = view.ctypes.data - raw.ctypes.data
    return bool(np.all(raw[:off] == GUARD) and np.all(raw[off + view.nbytes:] == GUARD))


def poison(shape, dtype, misalign=0):
    if np.dtype(dtype).kind in "iu":
        return dev(np.full(shape, 0xFF, dtype), misalign)  # NaN bytes when read as floats
    return dev(np.full(shape, np.nan, dtype), misalign)


def p(a):
    return 0 if a is None else a.ctypes.data


def close(got, want, dtype, scale=None):
    rtol, atol = TOL[np.dtype(dtype).name]
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    fin = np.abs(w[np.isfinite(w)])  # the scale of the finite values (inf / NaN positions: checked exactly)
    s = scale if scale is not None else max(1.0, float(fin.max()) if fin.size else 1.0)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * s, equal_nan=True)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))


def make_case(rng, N, C, dtype, *, weighted, ignore_index, reduction, bad_row=None, ignore_frac=0.25):
    x = (rng.standard_normal((N, C)) * rng.uniform(0.5, 3)).astype(np.float32).astype(dtype)
    t = rng.integers(0, C, N)
    t[rng.random(N) < ignore_frac] = ignore_index
    if N and reduction == "mean" and np.all(t == ignore_index):
        t[0] = 0 if ignore_index != 0 else min(1, C - 1)
    if bad_row is not None and N > bad_row:
        t[bad_row] = C + 3 if bad_row % 2 else -7 if ignore_index != -7 else -8
    w = rng.uniform(0.1, 2.0, C).astype(np.float32) if weighted else None
    g = (rng.standard_normal(N) if reduction == "none" else np.array(rng.standard_normal())).astype(np.float32).astype(dtype)
    return x, t, w, g


def run_grad(ctx, g, lp, t, w, reduction, ii, ls, *, tdtype=np.int64, misalign=(0, 0), **geom):
    N, C = lp.shape
    gd, lpd, td = dev(g), dev(lp, misalign[0]), dev(t.astype(tdtype))
    wd = None if w is None else dev(w)
    out = poison((N, C), lp.dtype, misalign[1])
    ws = poison(max(1, plan.grad_workspace_bytes(N, C, reduction, ls, w is not None)), np.uint8)
    plan.launch_grad(ctx, grad_loss_ptr=p(gd), log_prob_ptr=p(lpd), target_ptr=p(td), weight_ptr=p(wd),
                     out_ptr=p(out), workspace_ptr=p(ws), N=N, C=C, dtype=lp.dtype, target_dtype=tdtype,
                     reduction=reduction, ignore_index=ii, label_smoothing=ls, **geom)
    assert guard_intact(out) and guard_intact(ws)
    return np.array(out)


def run_forward(ctx, x, t, w, reduction, ii, ls, *, tdtype=np.int64, misalign=(0, 0), **geom):
    N, C = x.shape
    xd, td = dev(x, misalign[0]), dev(t.astype(tdtype))
    wd = None if w is None else dev(w)
    lp = poison((N, C), x.dtype, misalign[1])
    loss = poison((N,) if reduction == "none" else (1,), x.dtype)
    ws = poison(max(1, plan.forward_workspace_bytes(N, C, reduction)), np.uint8)
    plan.launch_forward(ctx, input_ptr=p(xd), target_ptr=p(td), weight_ptr=p(wd), loss_ptr=p(loss),
                        log_prob_ptr=p(lp), workspace_ptr=p(ws), N=N, C=C, dtype=x.dtype, target_dtype=tdtype,
                        reduction=reduction, ignore_index=ii, label_smoothing=ls, **geom)
    assert guard_intact(lp) and guard_intact(loss) and guard_intact(ws)
    return (np.array(loss) if reduction == "none" else np.array(loss[0])), np.array(lp)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_grad_vs_reference(ctx, rng, dtype, reduction):
    for k, (weighted, ls, ii, tdt) in enumerate([(True, 0.1, -100, np.int64), (False, 0.0, 2, np.int32),
                                                  (False, 0.1, -1, np.int64), (True, 0.0, 0, np.int32)]):
        N, C = int(rng.integers(3, 9)), int(rng.integers(5, 70))
        x, t, w, g = make_case(rng, N, C, dtype, weighted=weighted, ignore_index=ii, reduction=reduction,
                               bad_row=1 if k == 0 else None)
        _, lp = cross_entropy_loss(x, t, w, reduction, ii, ls)
        want = cross_entropy_loss_grad(g, lp, t, w, reduction, ii, ls)
        got = run_grad(ctx, g, lp, t, w, reduction, ii, ls, tdtype=tdt)
        close(got, want, dtype)
        # ignored rows are exact zeros, bad rows NaN
        assert np.all(got[t == ii] == 0)
        if k == 0:
            assert np.all(np.isnan(got[1])) and not np.isnan(np.delete(got, 1, 0)).any()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_forward_vs_reference(ctx, rng, dtype, reduction):
    for k, (weighted, ls, ii, tdt) in enumerate([(True, 0.1, -100, np.int32), (False, 0.0, 1, np.int64),
                                                  (True, 0.0, -3, np.int64)]):
        N, C = int(rng.integers(2, 7)), int(rng.integers(1, 90))
        x, t, w, g = make_case(rng, N, C, dtype, weighted=weighted, ignore_index=ii, reduction=reduction,
                               bad_row=0 if (k == 2 and reduction == "none") else None)
        want_loss, want_lp = cross_entropy_loss(x, t, w, reduction, ii, ls)
        loss, lp = run_forward(ctx, x, t, w, reduction, ii, ls, tdtype=tdt)
        close(lp, want_lp, dtype)
        close(loss, want_loss, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_unaligned_rows_and_bases(ctx, rng, dtype):
    # C not a multiple of the vector width; bases misaligned alike (vector body after a head) and
    # differently (scalar path)
    N, C = 5, 29
    x, t, w, g = make_case(rng, N, C, dtype, weighted=True, ignore_index=-100, reduction="sum")
    want_loss, want_lp = cross_entropy_loss(x, t, w, "sum", -100, 0.1)
    want = cross_entropy_loss_grad(g, want_lp, t, w, "sum", -100, 0.1)
    for mis in [(1, 1), (3, 3), (1, 0), (0, 2)]:
        loss, lp = run_forward(ctx, x, t, w, "sum", -100, 0.1, misalign=mis)
        close(lp, want_lp, dtype)
        close(loss, want_loss, dtype)
        got = run_grad(ctx, g, want_lp, t, w, "sum", -100, 0.1, misalign=mis)
        close(got, want, dtype)


def test_ragged_grids(ctx, rng):
    dtype = np.dtype(np.float32)
    for N, C, block, max_blocks in [(11, 300, 32, 3), (2, 1000, 32, 4), (1, 4099, 64, 4), (7, 3, 32, 1)]:
        x, t, w, g = make_case(rng, N, C, dtype, weighted=True, ignore_index=-100, reduction="mean", ignore_frac=0.2)
        want_loss, want_lp = cross_entropy_loss(x, t, w, "mean", -100, 0.1)
        want = cross_entropy_loss_grad(g, want_lp, t, w, "mean", -100, 0.1)
        got = run_grad(ctx, g, want_lp, t, w, "mean", -100, 0.1, block=block, max_blocks=max_blocks)
        close(got, want, dtype)
        loss, lp = run_forward(ctx, x, t, w, "mean", -100, 0.1, block=block, max_blocks=max_blocks)
        close(lp, want_lp, dtype)
        close(loss, want_loss, dtype)


def test_grad_geometry_spans_blocks_for_few_long_rows(ctx):
    expr = plan.KERNELS.name("ce_grad", "__half", "long long")
    grid, block, group = plan.grad_geometry(ctx, expr, 2, 262144, 2)
    wave = ctx.sm_count * blocks_per_sm(ctx.arch, plan.FILE, expr, block)   # the occupancy table's
    per = group // block   # blocks per row group: the grid is the wave rounded down to whole groups
    assert group > block and (grid * block) % group == 0 and wave - per < grid <= wave


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=lambda d: d.name)
def test_long_rows_256k(ctx, rng, dtype):
    N, C = 2, 262144
    x, t, w, g = make_case(rng, N, C, dtype, weighted=False, ignore_index=-100, reduction="none", ignore_frac=0)
    want_loss, want_lp = cross_entropy_loss(x, t, None, "none", -100, 0.1)
    loss, lp = run_forward(ctx, x, t, None, "none", -100, 0.1)
    close(lp, want_lp, dtype)
    close(loss, want_loss, dtype)
    want = cross_entropy_loss_grad(g, want_lp, t, None, "none", -100, 0.1)
    got = run_grad(ctx, g, want_lp, t, None, "none", -100, 0.1)
    close(got, want, dtype)


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_all_rows_ignored_mean(ctx, rng, ls):
    N, C = 6, 10
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, N, C, dtype, weighted=True, ignore_index=-100, reduction="mean", ignore_frac=0)
    t[:] = -100
    _, lp = cross_entropy_loss(x, t, w, "mean", -100, ls)
    lp[2] = np.nan  # ignored rows are written without being read
    got = run_grad(ctx, g, lp, t, w, "mean", -100, ls)
    np.testing.assert_array_equal(got, 0.0)
    loss, _ = run_forward(ctx, x, t, w, "mean", -100, ls)
    assert loss == 0.0


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_c_equals_one_and_n_zero(ctx, rng, reduction):
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, 5, 1, dtype, weighted=True, ignore_index=-100, reduction=reduction)
    want_loss, want_lp = cross_entropy_loss(x, t, w, reduction, -100, 0.1)
    loss, lp = run_forward(ctx, x, t, w, reduction, -100, 0.1)
    close(lp, want_lp, dtype)
    close(loss, want_loss, dtype)
    close(run_grad(ctx, g, lp, t, w, reduction, -100, 0.1),
          cross_entropy_loss_grad(g, want_lp, t, w, reduction, -100, 0.1), dtype)
    # N = 0: nothing to write but the reduced loss (0)
    x0, t0 = np.zeros((0, 4), dtype), np.zeros(0, np.int64)
    loss, lp = run_forward(ctx, x0, t0, None, reduction, -100, 0.0)
    if reduction != "none":
        assert loss == 0.0
    assert run_grad(ctx, np.zeros(0 if reduction == "none" else 1, dtype), x0, t0, None, reduction, -100, 0.0).shape == (0, 4)


def test_bf16_near_one_hot_target_column(ctx):
    N, C = 4, 24
    lp = np.full((N, C), -30.0)
    t = np.array([0, 9, 17, 23])
    lp[np.arange(N), t] = [-1e-6, -3e-5, -2e-3, -0.0]
    lp = lp.astype(BF16)
    g = np.array(1.5, BF16)
    got = run_grad(ctx, g, lp, t, None, "sum", -100, 0.0)
    exact = 1.5 * np.expm1(lp.astype(np.float64)[np.arange(N), t])
    col = got[np.arange(N), t].astype(np.float64)
    np.testing.assert_allclose(col, exact, rtol=2.0 ** -8, atol=0)  # one bf16 rounding only
    np.testing.assert_array_equal(got, cross_entropy_loss_grad(g, lp, t, None, "sum", -100, 0.0))


def test_deterministic(ctx, rng):
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, 9, 77, dtype, weighted=True, ignore_index=-100, reduction="mean")
    a = run_forward(ctx, x, t, w, "mean", -100, 0.1)
    b = run_forward(ctx, x, t, w, "mean", -100, 0.1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    ga = run_grad(ctx, g, a[1], t, w, "mean", -100, 0.1)
    gb = run_grad(ctx, g, a[1], t, w, "mean", -100, 0.1)
    assert ga.tobytes() == gb.tobytes()


@pytest.mark.parametrize("tdtype", [np.int32, np.int64])
def test_garbage_targets_make_nan_rows_only(ctx, rng, tdtype):
    info = np.iinfo(tdtype)
    N, C = 6, 13
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, N, C, dtype, weighted=True, ignore_index=-100, reduction="mean", ignore_frac=0)
    t[:4] = [info.min, info.max, C, -1]
    for reduction in REDUCTIONS:
        gg = g if reduction != "none" else rng.standard_normal(N).astype(np.float32)
        loss, lp = run_forward(ctx, x, t, w, reduction, -100, 0.1, tdtype=tdtype)
        want_loss, want_lp = cross_entropy_loss(x, t.astype(tdtype), w, reduction, -100, 0.1)
        close(lp, want_lp, dtype)
        close(loss, want_loss, dtype)
        got = run_grad(ctx, gg, want_lp, t, w, reduction, -100, 0.1, tdtype=tdtype)
        assert np.isnan(got[:4]).all() and np.isfinite(got[4:]).all()
        close(got, cross_entropy_loss_grad(gg, want_lp, t.astype(tdtype), w, reduction, -100, 0.1), dtype)


def nonfinite_case(rng, C, dtype, *, weighted, ignore_index, reduction, far=False):
    """Rows holding -inf, +inf and NaN logits (BUG-3 / BUG-4 of docs/HARDENING.md), next to finite and
    ignored rows (the row patterns of tests/test_cross_entropy_reference.py, checked there against
    PyTorch). far: the non-finite values sit in the last columns, read by threads other than thread 0."""
    inf, nan = np.inf, np.nan
    N = 14
    x = rng.standard_normal((N, C)) * 2.0
    z = int(rng.choice([c for c in range(C) if c != ignore_index]))  # the zero-weight class
    t = rng.choice([c for c in range(C) if c not in (z, ignore_index)], N)
    lo = C // 2 if far else 0

    def other(i):
        return next(c for c in rng.permutation(np.arange(lo, C)) if c != t[i] and c != z)

    x[1, other(1)] = -inf
    x[2, t[2]] = -inf
    x[3, other(3)] = inf
    x[4, other(4)] = nan
    x[5] = -inf
    x[6, [other(6), other(6)]] = -inf
    x[6, t[6]] = inf
    x[7, other(7)], t[7] = -inf, ignore_index
    x[8, other(8)], t[8] = nan, ignore_index
    x[9, other(9)], t[9] = inf, ignore_index
    t[10] = z
    x[10, z] = -inf
    x[11] = inf
    x[12] = -inf
    x[12, other(12)] = nan
    t[13] = ignore_index
    w = None
    if weighted:
        w = rng.uniform(0.1, 2.0, C).astype(np.float32)
        w[z] = 0.0
    x = x.astype(np.float32).astype(dtype)
    g = (rng.standard_normal(N) if reduction == "none" else np.array(rng.standard_normal())).astype(np.float32)
    return x, t, w, g.astype(dtype)


def same_nonfinite(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    for f in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(f(got), f(want)), f"{what}: {f.__name__} positions differ\n{got}\n{want}"


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_nonfinite_logits_vs_reference(ctx, rng, dtype, reduction):
    """+inf / -inf / NaN logits: ce_forward gives the reference's (= PyTorch's) NaN and inf positions
    bit for bit in logProb and the loss (a +inf or a NaN makes the row NaN, wherever it sits in the
    row: the NaN survives the block's max/sum merge); ce_grad on such a logProb matches the reference
    (finite where logProb is -inf, NaN rows where it is NaN, zeros for ignored rows)."""
    for k, (weighted, ls, ii, C, far, block) in enumerate([
            (False, 0.0, -100, 6, False, None), (True, 0.1, -100, 41, True, 32), (True, 0.0, 1, 300, True, None),
            (False, 0.1, 3, 300, True, 64)]):
        x, t, w, g = nonfinite_case(rng, C, dtype, weighted=weighted, ignore_index=ii, reduction=reduction, far=far)
        want_loss, want_lp = cross_entropy_loss(x, t, w, reduction, ii, ls)
        loss, lp = run_forward(ctx, x, t, w, reduction, ii, ls, tdtype=np.int32 if k % 2 else np.int64,
                               block=block)
        same_nonfinite(lp, want_lp, "logProb")
        same_nonfinite(loss, want_loss, "loss")
        close(lp, want_lp, dtype)
        close(loss, want_loss, dtype)
        if reduction == "none":
            assert np.isnan(np.asarray(lp, np.float64)[[3, 4, 5, 6, 11, 12]]).all()
            assert np.all(np.asarray(loss, np.float64)[[7, 8, 9, 13]] == 0)
        want = cross_entropy_loss_grad(g, want_lp, t, w, reduction, ii, ls)
        got = run_grad(ctx, g, want_lp, t, w, reduction, ii, ls)
        same_nonfinite(got, want, "grad")
        close(got, want, dtype)
        assert np.all(got[t == ii] == 0) and np.isfinite(got[[0, 1, 2]]).all()


# ------------------------------------------------------------------------------ z-loss (docs/API.md §7)
def run_grad_z(ctx, g, lp, t, w, reduction, ii, ls, k, gz, lse, *, tdtype=np.int64, misalign=(0, 0), **geom):
    N, C = lp.shape
    gd, lpd, td = dev(g), dev(lp, misalign[0]), dev(t.astype(tdtype))
    wd = None if w is None else dev(w)
    gzd, lsed = (None if gz is None else dev(gz)), dev(lse)
    out = poison((N, C), lp.dtype, misalign[1])
    ws = poison(max(1, plan.grad_workspace_bytes(N, C, reduction, ls, w is not None, k != 0)), np.uint8)
    plan.launch_grad(ctx, grad_loss_ptr=p(gd), log_prob_ptr=p(lpd), target_ptr=p(td), weight_ptr=p(wd),
                     out_ptr=p(out), workspace_ptr=p(ws), N=N, C=C, dtype=lp.dtype, target_dtype=tdtype,
                     reduction=reduction, ignore_index=ii, label_smoothing=ls, grad_zloss_ptr=p(gzd),
                     lse_ptr=p(lsed), zscale=k, **geom)
    assert guard_intact(out) and guard_intact(ws)
    return np.array(out)


def run_forward_z(ctx, x, t, w, reduction, ii, ls, k, *, tdtype=np.int64, misalign=(0, 0), **geom):
    """(loss, log_prob, zloss, lse), the reduced ones as scalars."""
    N, C = x.shape
    xd, td = dev(x, misalign[0]), dev(t.astype(tdtype))
    wd = None if w is None else dev(w)
    lp = poison((N, C), x.dtype, misalign[1])
    shape = (N,) if reduction == "none" else (1,)
    loss, zl, lse = poison(shape, x.dtype), poison(shape, x.dtype), poison((N,), x.dtype)
    ws = poison(max(1, plan.forward_workspace_bytes(N, C, reduction, k != 0)), np.uint8)
    plan.launch_forward(ctx, input_ptr=p(xd), target_ptr=p(td), weight_ptr=p(wd), loss_ptr=p(loss),
                        log_prob_ptr=p(lp), workspace_ptr=p(ws), N=N, C=C, dtype=x.dtype, target_dtype=tdtype,
                        reduction=reduction, ignore_index=ii, label_smoothing=ls, zscale=k, zloss_ptr=p(zl),
                        lse_ptr=p(lse), **geom)
    assert all(guard_intact(a) for a in (lp, loss, zl, lse, ws))
    one = (lambda a: np.array(a)) if reduction == "none" else (lambda a: np.array(a[0]))
    return one(loss), np.array(lp), one(zl), np.array(lse)


def reference_z(x, t, w, reduction, ii, ls, k, g, gz):
    lse = np.empty(x.shape[0], x.dtype)
    loss, lp, zl = cross_entropy_loss(x, t, w, reduction, ii, ls, lse_square_scale_for_zloss=k, return_zloss=True,
                                      lse_out=lse)
    grad = cross_entropy_loss_grad(g, lp, t, w, reduction, ii, ls, grad_zloss=gz, lse_for_zloss=lse,
                                   lse_square_scale_for_zloss=k)
    return loss, lp, zl, lse, grad


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_zloss_vs_reference(ctx, rng, dtype, reduction):
    """ce_forward's loss, z-loss and lse and ce_grad's gradient with the z-loss against the NumPy
    reference (itself checked against PyTorch autograd in tests/test_cross_entropy_zloss.py), with
    weights, smoothing, ignored and out-of-range rows, gradZloss given or not."""
    for k_, (weighted, ls, ii, tdt, with_gz) in enumerate([(True, 0.1, -100, np.int64, True),
                                                          (False, 0.0, 2, np.int32, False),
                                                          (True, 0.0, -1, np.int32, True)]):
        N, C = int(rng.integers(3, 9)), int(rng.integers(5, 70))
        x, t, w, g = make_case(rng, N, C, dtype, weighted=weighted, ignore_index=ii, reduction=reduction,
                               bad_row=1 if k_ == 0 else None)
        gz = (rng.standard_normal(g.shape).astype(np.float32).astype(dtype)) if with_gz else None
        k = float(rng.choice([1e-3, 0.1]))
        want = reference_z(x, t, w, reduction, ii, ls, k, g, gz)
        loss, lp, zl, lse = run_forward_z(ctx, x, t, w, reduction, ii, ls, k, tdtype=tdt)
        close(lp, want[1], dtype)
        close(lse, want[3], dtype)
        close(zl, want[2], dtype)
        close(loss, want[0], dtype)
        got = run_grad_z(ctx, g, want[1], t, w, reduction, ii, ls, k, gz, want[3], tdtype=tdt)
        close(got, want[4], dtype)
        assert np.all(got[t == ii] == 0)
        if k_ == 0:
            assert np.all(np.isnan(got[1])) and not np.isnan(np.delete(got, 1, 0)).any()


@pytest.mark.parametrize("k", [0.0, 0.05])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=lambda d: d.name)
def test_target_column_at_every_position(ctx, rng, dtype, k):
    """ce_grad writes each row in one pass, then the lane that wrote the target column rewrites it:
    targets at every column (scalar head, vector body, scalar tail) of misaligned rows, groups of every
    width and a group spanning several blocks (few long rows) give the reference, with the z-loss and
    without it."""
    # (300 rows of 300 with 32-lane groups: each lane owns several vectors of a row, so lanes before and
    # after the owner meet every target column)
    for N, C, mis, geom in [(37, 37, (1, 1), {}), (45, 45, (3, 3), {"block": 32, "max_blocks": 2}),
                            (300, 300, (1, 1), {"block": 32, "max_blocks": 2}),
                            (29, 29, (1, 0), {}), (3, 5003, (1, 1), {"block": 32, "max_blocks": 4}),
                            (2, 1500, (0, 0), {"block": 64, "max_blocks": 3})]:
        x, _, w, g = make_case(rng, N, C, dtype, weighted=True, ignore_index=-100, reduction="sum", ignore_frac=0)
        t = np.arange(N) * (C - 1) // max(N - 1, 1)   # N == C: every column; else first, middle(s), last
        gz = np.asarray(rng.standard_normal(), np.float32).astype(dtype)
        want = reference_z(x, t, w, "sum", -100, 0.1, k, g, gz)
        got = run_grad_z(ctx, g, want[1], t, w, "sum", -100, 0.1, k, gz, want[3], misalign=mis, **geom)
        close(got, want[4], dtype)
        cols = got[np.arange(N), t].astype(np.float64)
        np.testing.assert_allclose(cols, want[4][np.arange(N), t].astype(np.float64), rtol=2e-2, atol=1e-6)


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_zloss_mean_with_zero_weight_targets_and_all_ignored(ctx, rng, ls):
    """"mean" with D == 0 (only zero-weight targets): no cross-entropy term, the z-loss's gradient and loss
    remain (its mean divides by the rows, not by D); every row ignored: zeros and a 0 loss."""
    N, C, k = 6, 10, 0.05
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, N, C, dtype, weighted=True, ignore_index=-100, reduction="mean", ignore_frac=0)
    t[1] = -100
    w[t[t != -100]] = 0.0
    want = reference_z(x, t, w, "mean", -100, ls, k, g, None)
    loss, lp, zl, lse = run_forward_z(ctx, x, t, w, "mean", -100, ls, k)
    close(loss, want[0], dtype)
    close(zl, want[2], dtype)
    assert loss == zl and zl > 0
    got = run_grad_z(ctx, g, want[1], t, w, "mean", -100, ls, k, None, want[3])
    close(got, want[4], dtype)
    assert np.all(got[1] == 0) and np.all(np.delete(got, 1, 0) != 0)
    t[:] = -100
    loss, lp, zl, lse = run_forward_z(ctx, x, t, w, "mean", -100, ls, k)
    assert loss == 0 and zl == 0
    np.testing.assert_array_equal(run_grad_z(ctx, g, lp, t, w, "mean", -100, ls, k, None, lse), 0.0)
    x0, t0 = np.zeros((0, 4), dtype), np.zeros(0, np.int64)
    for reduction in ("mean", "sum"):
        loss, _, zl, _ = run_forward_z(ctx, x0, t0, None, reduction, -100, 0.0, k)
        assert loss == 0 and zl == 0


def test_zloss_deterministic(ctx, rng):
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, 9, 77, dtype, weighted=True, ignore_index=-100, reduction="mean")
    a = run_forward_z(ctx, x, t, w, "mean", -100, 0.1, 0.01)
    b = run_forward_z(ctx, x, t, w, "mean", -100, 0.1, 0.01)
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b))
    ga = run_grad_z(ctx, g, a[1], t, w, "mean", -100, 0.1, 0.01, g, a[3])
    gb = run_grad_z(ctx, g, a[1], t, w, "mean", -100, 0.1, 0.01, g, a[3])
    assert ga.tobytes() == gb.tobytes()


# ------------------------------------------------------------------------------ the forward's row split
@pytest.fixture
def small_split(monkeypatch):
    """forward_split's thresholds lowered so that small emulated rows split into chunks of 16 elements
    (a chunk is then a scalar head, a few 16-byte vectors and a scalar tail of a misaligned row)."""
    monkeypatch.setattr(plan, "SPLIT_MIN_ELEMENTS", 1)
    monkeypatch.setattr(plan, "SPLIT_MIN_CHUNK", 16)
    monkeypatch.setattr(plan, "SPLIT_ALIGN", 16)
    monkeypatch.setattr(plan, "SPLIT_TARGET_BLOCKS", 24)


def test_forward_split_is_a_function_of_the_shape():
    # the bench's few long rows: enough (row, chunk) blocks for 132 SMs; many rows, or small logits: no split
    for N in (19, 60):
        S, chunk = plan.forward_split(N, 8192)
        assert S > 1 and N * S >= 132 and (S - 1) * chunk < 8192 <= S * chunk and chunk % plan.SPLIT_ALIGN == 0
    assert plan.forward_split(plan.SPLIT_TARGET_BLOCKS, 8192) == (1, 8192)
    assert plan.forward_split(4, 1000) == (1, 1000)
    S = plan.forward_split(19, 8192)[0]
    assert plan.forward_workspace_bytes(19, 8192, "none") == 8 * 19 * (4 * S + 4)
    assert plan.forward_workspace_bytes(19, 8192, "mean", True) == 32 * 19 + 8 * 19 * (4 * S + 4)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_split_forward_vs_reference(ctx, rng, small_split, dtype, reduction):
    """Rows split over several blocks (ce_forward_stats / _write / _finish): logProb, loss, z-loss and
    lse against the reference with weights, smoothing, ignored and out-of-range targets, misaligned
    bases, targets in every chunk, and non-finite logits (a +inf, -inf or NaN in one chunk decides the
    whole row)."""
    N, C = 5, 83
    assert plan.forward_split(N, C)[0] > 2
    for k_, (weighted, ls, ii, tdt, k, mis) in enumerate([(True, 0.1, -100, np.int64, 0.0, (0, 0)),
                                                         (False, 0.0, 2, np.int32, 0.05, (1, 1)),
                                                         (True, 0.1, -1, np.int32, 1e-3, (3, 1))]):
        x, t, w, g = make_case(rng, N, C, dtype, weighted=weighted, ignore_index=ii, reduction=reduction,
                               bad_row=1 if k_ == 0 else None, ignore_frac=0.2)
        t[2], t[3], t[4] = C - 1, 32, 63    # the last chunk's tail, either side of a chunk boundary
        if k_ == 2:
            x[0, 40], x[3, 70], x[4, 5] = np.inf, np.nan, -np.inf
            x[2] = -np.inf
        want = reference_z(x, t, w, reduction, ii, ls, k, g, None)
        loss, lp, zl, lse = run_forward_z(ctx, x, t, w, reduction, ii, ls, k, tdtype=tdt, misalign=mis)
        for got, ref, what in [(lp, want[1], "logProb"), (lse, want[3], "lse"), (loss, want[0], "loss"),
                               (zl, want[2], "zloss")]:
            same_nonfinite(got, ref, what)
            close(got, ref, dtype)


def test_split_forward_matches_one_block_per_row_and_repeats(ctx, rng, small_split, monkeypatch):
    """The split and the one-block rows agree to rounding, and the split repeats bit for bit."""
    dtype = np.dtype(np.float32)
    x, t, w, g = make_case(rng, 6, 120, dtype, weighted=True, ignore_index=-100, reduction="mean")
    a = run_forward_z(ctx, x, t, w, "mean", -100, 0.1, 0.01)
    b = run_forward_z(ctx, x, t, w, "mean", -100, 0.1, 0.01)
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b))
    monkeypatch.setattr(plan, "SPLIT_MIN_ELEMENTS", 1 << 62)
    c = run_forward_z(ctx, x, t, w, "mean", -100, 0.1, 0.01)
    for u, v in zip(a, c):
        np.testing.assert_allclose(u, v, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=lambda d: d.name)
def test_split_forward_many_chunks_one_merged_state(ctx, rng, monkeypatch, dtype):
    """More chunks than a warp has lanes (ce::merge_parts: a lane merges several records before the
    butterfly): every (row, chunk) block of ce_forward_write and ce_forward_finish see the same merged
    state, so a row's loss (no weight, no smoothing) is -logProb[target] bit for bit wherever the
    target's chunk is; both against the reference, with a NaN and a +inf in late chunks."""
    monkeypatch.setattr(plan, "SPLIT_MIN_ELEMENTS", 1)
    monkeypatch.setattr(plan, "SPLIT_MIN_CHUNK", 16)
    monkeypatch.setattr(plan, "SPLIT_ALIGN", 16)
    monkeypatch.setattr(plan, "SPLIT_TARGET_BLOCKS", 280)
    N, C = 4, 16 * 70
    S, _ = plan.forward_split(N, C)
    assert S == 70
    x = (rng.standard_normal((N, C)) * 4).astype(dtype)
    x[1, 16 * 50 + 3] = 30.0           # the row's max in a chunk merged by a lane's second record
    x[2, 16 * 66] = np.nan
    x[3, 16 * 45 + 7] = np.inf
    t = np.array([16 * 69 + 5, 16 * 33 + 1, 7, 16 * 40], np.int64)
    want = reference_z(x, t, None, "none", -100, 0.0, 0.0, np.ones(N, dtype), None)
    loss, lp, _, lse = run_forward_z(ctx, x, t, None, "none", -100, 0.0, 0.0)
    for got, ref, what in [(lp, want[1], "logProb"), (lse, want[3], "lse"), (loss, want[0], "loss")]:
        same_nonfinite(got, ref, what)
        close(got, ref, dtype)
    for i in range(N):
        assert np.asarray(loss[i]).tobytes() == np.asarray(-lp[i, t[i]]).tobytes(), i
