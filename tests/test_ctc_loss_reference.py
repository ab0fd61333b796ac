"""NumPy CTC reference (aclnn_gpu/reference/ctc_loss.py) vs PyTorch CPU in float64."""
import os

import numpy as np
import pytest
import torch

from aclnn_gpu.reference.ctc_loss import ctc_loss_backward, ctc_loss_forward
from seeding import draw_seed

# One seed for the module, from the run's (tests/seeding.py: replayed with ACLNN_GPU_TEST_SEED);
# CTC_SEED sets it directly.
SEED = int(os.environ.get("CTC_SEED", draw_seed("tests/test_ctc_loss_reference.py")))


def make_case(rng, T, N, C, max_l, blank=0, runs=False, tdtype=np.int64, min_in=None):
    x = rng.standard_normal((T, N, C)) * 2
    lp = torch.log_softmax(torch.tensor(x), -1).numpy()
    tl = rng.integers(0, max_l + 1, N)
    il = np.array([rng.integers(min(T, l if min_in is None else min_in), T + 1) for l in tl])
    labels = [c for c in range(C) if c != blank]
    tg = rng.choice(labels, (N, max(max_l, 1)))
    if runs:
        for b in range(N):
            tg[b, : max_l] = tg[b, 0]
            if max_l > 4:
                tg[b, max_l // 2:] = labels[-1]
    return lp, tg.astype(tdtype), il.astype(np.int64), tl.astype(np.int64)


def torch_ref(lp, tg, il, tl, blank, zero_inf, g, one_d):
    lpt = torch.tensor(lp, requires_grad=True)
    tgt = torch.tensor(np.concatenate([tg[b, :tl[b]] for b in range(len(tl))]) if one_d else tg)
    nll, la = torch.ops.aten._ctc_loss(lpt, tgt, list(map(int, il)), list(map(int, tl)), blank, zero_inf)
    grad = torch.ops.aten._ctc_loss_backward(torch.tensor(g), lpt.detach(), tgt, list(map(int, il)),
                                             list(map(int, tl)), nll.detach(), la.detach(), blank, zero_inf)
    return tgt.numpy(), nll.detach().numpy(), la.detach().numpy(), grad.numpy()


def check(lp, tg, il, tl, blank=0, zero_inf=False, one_d=False, pad=0, seed=SEED, rng=None):
    N = lp.shape[1]
    g = (rng or np.random.default_rng(0)).standard_normal(N)
    tgt, tnll, tla, tgrad = torch_ref(lp, tg, il, tl, blank, zero_inf, g, one_d)
    tgt = tgt.astype(tg.dtype)
    nll, la = ctc_loss_forward(lp, tgt, il, tl, blank, zero_inf)
    exp_nll = np.where(zero_inf & np.isinf(tnll), 0, tnll)
    np.testing.assert_allclose(nll, exp_nll, rtol=1e-10, atol=1e-10, err_msg=f"seed {seed}")
    assert la.shape == tla.shape
    for b in range(N):
        a, t = la[b, : il[b], : 2 * tl[b] + 1], tla[b, : il[b], : 2 * tl[b] + 1]
        np.testing.assert_allclose(a, t, rtol=1e-10, atol=1e-10, err_msg=f"seed {seed} b {b}")
        assert np.all(la[b, il[b]:] == -np.inf) and np.all(la[b, :, 2 * tl[b] + 1:] == -np.inf)
    # the backward reads torch's raw nll and a padded log_alpha (padding never read)
    la_in = tla
    if pad:
        la_in = np.concatenate([tla, np.full(tla.shape[:2] + (pad,), -99999.0)], axis=2)
        for b in range(N):
            la_in[b, il[b]:] = np.nan
            la_in[b, :, 2 * tl[b] + 1:] = -99999.0
    grad = ctc_loss_backward(g, lp, tgt, il, tl, tnll, la_in, blank, zero_inf)
    assert grad.shape == lp.shape and grad.dtype == lp.dtype
    np.testing.assert_allclose(grad, tgrad, rtol=1e-9, atol=1e-10, equal_nan=True, err_msg=f"seed {seed}")
    return grad, tgrad


@pytest.mark.parametrize("i", range(6))
def test_random_mixed(i):
    rng = np.random.default_rng([SEED, i])
    T, N, C = int(rng.integers(1, 30)), int(rng.integers(1, 7)), int(rng.integers(2, 9))
    blank = int(rng.integers(0, C))
    lp, tg, il, tl = make_case(rng, T, N, C, int(rng.integers(0, 8)), blank=blank,
                               tdtype=[np.int32, np.int64][i % 2], runs=i % 3 == 2)
    check(lp, tg, il, tl, blank=blank, zero_inf=bool(i % 2), one_d=i % 4 < 2, pad=[0, 5][i % 2], rng=rng)


def test_repeated_and_runs_long():
    rng = np.random.default_rng([SEED, 100])
    lp, tg, il, tl = make_case(rng, 60, 3, 5, 12, runs=True, min_in=24)
    check(lp, tg, il, tl, rng=rng)


def test_c2_t1_and_empty_targets():
    rng = np.random.default_rng([SEED, 101])
    lp, tg, il, tl = make_case(rng, 10, 3, 2, 3, blank=1)
    check(lp, tg, il, tl, blank=1, rng=rng)
    lp, tg, il, tl = make_case(rng, 1, 3, 4, 1)
    check(lp, tg, il, tl, one_d=True, rng=rng)
    lp, tg, il, _ = make_case(rng, 7, 3, 4, 2)
    check(lp, tg, il, np.zeros(3, np.int64), one_d=True, rng=rng)
    check(lp, tg, np.array([0, 7, 3]), np.array([0, 1, 2]), rng=rng)   # Lin = 0


@pytest.mark.parametrize("zero_inf", [False, True])
def test_input_too_short(zero_inf):
    rng = np.random.default_rng([SEED, 102])
    lp, tg, _, _ = make_case(rng, 8, 3, 5, 4)
    tg[0, :4] = [1, 1, 1, 1]            # needs 7 frames
    il, tl = np.array([5, 8, 2]), np.array([4, 2, 3])
    grad, _ = check(lp, tg, il, tl, zero_inf=zero_inf, rng=rng)
    if zero_inf:
        assert np.all(grad[:, 0] == 0) and np.all(grad[:, 2] == 0)
    else:
        assert not np.isfinite(grad[:5, 0]).any()


def test_unnormalised_and_bad_label():
    rng = np.random.default_rng([SEED, 103])
    lp, tg, il, tl = make_case(rng, 9, 3, 5, 3, min_in=7)
    lp = lp + 0.3            # unnormalised: formula literally, exp(lp) term included
    check(lp, tg, il, tl, rng=rng)
    tl = np.array([3, 3, 3])
    tg[1, 1] = 7
    tg[2, 0] = -1
    nll, la = ctc_loss_forward(lp, tg, il, tl)
    assert np.isfinite(nll[0]) and np.isnan(nll[1:]).all() and np.isnan(la[1:]).all()
    g = np.ones(3)
    grad = ctc_loss_backward(g, lp, tg, il, tl, np.array([1.0, 1.0, 1.0]), la, 0, False)
    assert np.isnan(grad[:, 1:]).all() and np.isfinite(grad[:, 0]).all()


def test_autograd_logits():
    """Spec 1.2: the output is d(loss)/d(logits) for normalised log_probs."""
    rng = np.random.default_rng([SEED, 104])
    T, N, C = 11, 3, 5
    x = torch.tensor(rng.standard_normal((T, N, C)), requires_grad=True)
    lp = torch.log_softmax(x, -1)
    tg = torch.tensor(rng.integers(1, C, (N, 4)))
    il, tl = [11, 9, 6], [4, 2, 3]
    loss = torch.nn.functional.ctc_loss(lp, tg, il, tl, reduction="sum")
    loss.backward()
    nll, la = ctc_loss_forward(lp.detach().numpy(), tg.numpy(), il, tl)
    np.testing.assert_allclose(nll.sum(), loss.item(), rtol=1e-12)
    grad = ctc_loss_backward(np.ones(N), lp.detach().numpy(), tg.numpy(), il, tl, nll, la)
    np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_low_precision_dtypes(dt):
    import ml_dtypes
    dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dt]
    rng = np.random.default_rng([SEED, 105])
    lp, tg, il, tl = make_case(rng, 15, 3, 6, 4, min_in=8)
    lpl = lp.astype(dtype)
    nll, la = ctc_loss_forward(lpl, tg, il, tl)
    assert nll.dtype == dtype and la.dtype == dtype
    lp64 = lpl.astype(np.float64)
    n64, la64 = ctc_loss_forward(lp64, tg, il, tl)
    tol = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}[dt]
    np.testing.assert_allclose(nll.astype(np.float64), n64, rtol=tol)
    g = np.ones(3)
    grad = ctc_loss_backward(g.astype(dtype), lpl, tg, il, tl, nll, la)
    ref = ctc_loss_backward(g, lp64, tg, il, tl, n64, la64)
    np.testing.assert_allclose(grad.astype(np.float64), ref, atol=tol * 4, rtol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_batch_slices_give_the_same_bits(monkeypatch, dtype):
    """The backward of a large batch runs in slices on several threads: any split gives the result of
    one slice, bit for bit (repeated labels, a blank label, an infinite loss and a bad label included)."""
    from aclnn_gpu.reference import ctc_loss as reference
    rng = np.random.default_rng([SEED, 99])
    lp, tg, il, tl = make_case(rng, 60, 23, 7, 9, runs=True)
    lp = lp.astype(dtype)
    tg[3, 0], tl[3], il[5], tl[5] = 0, max(tl[3], 1), 3, 9      # blank as a label; too short an input
    tg[7, 0], tl[7] = 99, max(tl[7], 1)                             # a label outside [0, C)
    il[0] = 60                                                       # feasible (runs need 2L+1 steps)
    nll, la = ctc_loss_forward(lp, tg, il, tl)
    la = la.copy()
    la[11, 1, 0] = np.nan        # a garbage entry: that sample takes the log-space fallback
    g = rng.standard_normal(23).astype(dtype)

    def backward(min_state_steps, slice_samples):
        monkeypatch.setattr(reference, "_PARALLEL_MIN_STATE_STEPS", min_state_steps)
        monkeypatch.setattr(reference, "_SLICE_SAMPLES", slice_samples)
        return ctc_loss_backward(g, lp, tg, il, tl, nll, la)

    whole = backward(1 << 60, 1 << 30)
    assert np.isinf(nll[5]) and np.isnan(whole[:, 7]).all() and np.isfinite(whole[:, 0]).all()
    for slice_samples in (1, 4, 10):
        np.testing.assert_array_equal(backward(0, slice_samples), whole, err_msg=f"slices of {slice_samples}")


def test_garbage_log_alpha_of_a_short_sample_does_not_depend_on_the_batch(monkeypatch):
    """A NaN in a short sample's log_alpha at its last step, at a state PyTorch does not read there
    (s < 2L-1): the sample gives the same bits alone in its slice (the recursion stops at its own
    last step) as in a batch with longer inputs (where the next step's factors multiply it), and
    PyTorch's finite values."""
    from aclnn_gpu.reference import ctc_loss as reference
    rng = np.random.default_rng([SEED, 97])
    lp, tg, il, tl = make_case(rng, 30, 4, 5, 3)
    il[0], tl[0] = 30, 3
    il[2], tl[2] = 2, 1                       # two steps, one label
    nll, la = ctc_loss_forward(lp, tg, il, tl)
    la = la.copy()
    la[2, 1, 0] = np.nan                      # t = Lin-1, s = 0: not read by PyTorch (only 2L-1, 2L)
    g = np.ones(4)
    whole = ctc_loss_backward(g, lp, tg, il, tl, nll, la)
    monkeypatch.setattr(reference, "_PARALLEL_MIN_STATE_STEPS", 0)
    monkeypatch.setattr(reference, "_SLICE_SAMPLES", 1)
    np.testing.assert_array_equal(ctc_loss_backward(g, lp, tg, il, tl, nll, la), whole)
    expected = torch.ops.aten._ctc_loss_backward(
        torch.tensor(g), torch.tensor(lp), torch.tensor(tg), il.tolist(), tl.tolist(), torch.tensor(nll),
        torch.tensor(la), 0, False).numpy()
    assert np.isfinite(expected[:, 2]).all()
    np.testing.assert_allclose(whole[:, 2], expected[:, 2], rtol=1e-10, atol=1e-12)


def test_scalar_grad_out_serves_every_sample(monkeypatch):
    """grad_out given as one value: the same as that value repeated, in one slice or many."""
    from aclnn_gpu.reference import ctc_loss as reference
    rng = np.random.default_rng([SEED, 98])
    lp, tg, il, tl = make_case(rng, 20, 9, 5, 4)
    nll, la = ctc_loss_forward(lp, tg, il, tl)
    expected = ctc_loss_backward(np.full(9, 0.5), lp, tg, il, tl, nll, la)
    monkeypatch.setattr(reference, "_PARALLEL_MIN_STATE_STEPS", 0)
    monkeypatch.setattr(reference, "_SLICE_SAMPLES", 2)
    np.testing.assert_array_equal(ctc_loss_backward(np.array(0.5), lp, tg, il, tl, nll, la), expected)


def _forward_paths(monkeypatch, lp, tg, il, tl, blank=0):
    """(linear, log space, [(samples, first row)] the linear path sent to log space) of one call."""
    from aclnn_gpu.reference import ctc_loss as reference
    assert lp.shape[1] * (2 * int(max(tl)) + 1) <= reference._LINEAR_MAX_STATES
    redone = []
    log_space = reference._alpha

    def spy(lp_in, md, lprime, skip, tmax, lt, start=0):
        redone.append((lp_in.shape[1], start))
        return log_space(lp_in, md, lprime, skip, tmax, lt, start)

    monkeypatch.setattr(reference, "_alpha", spy)
    linear = ctc_loss_forward(lp, tg, il, tl, blank)
    monkeypatch.setattr(reference, "_LINEAR_MAX_STATES", 0)
    logs = ctc_loss_forward(lp, tg, il, tl, blank)
    monkeypatch.undo()
    return linear, logs, redone[:-1]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_linear_forward_matches_log_space(monkeypatch, dtype):
    """Small calls run the alpha recursion in scaled float64 linear space (_alpha_linear): no sample is
    redone in log space for ordinary log-probs, the -inf pattern of log_alpha is the log-space one and
    PyTorch's, and the values agree within the log-space path's rounding (float64: 1e-10 against
    PyTorch float64); repeated labels, a blank label, an input too short and an empty target included."""
    import ml_dtypes
    dt = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    rng = np.random.default_rng([SEED, 95])
    lp, tg, il, tl = make_case(rng, 70, 5, 6, 9, runs=True)
    tg[1, 0], tl[1] = 0, max(tl[1], 1)                  # the blank as a label
    il[2], tl[2] = 4, 9                                 # too short an input: infinite loss
    il[3], tl[3] = 70, 0                                # empty target
    il[0], tl[0] = 70, 9
    lpd = lp.astype(dt)
    (nll, la), (nll_log, la_log), redone = _forward_paths(monkeypatch, lpd, tg, il, tl)
    assert redone == []
    f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    assert (np.isfinite(f64(la)) == np.isfinite(f64(la_log))).all()
    assert (np.isinf(f64(nll)) == np.isinf(f64(nll_log))).all() and np.isinf(f64(nll[2]))
    tol = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}[dtype]
    fin = np.isfinite(f64(la))
    np.testing.assert_allclose(f64(la)[fin], f64(la_log)[fin], rtol=tol, atol=tol)
    np.testing.assert_allclose(f64(nll), f64(nll_log), rtol=tol)
    if dt == np.float64:
        _, tnll, tla, _ = torch_ref(lp, tg, il, tl, 0, False, np.ones(5), False)
        for b in range(5):
            a, t = la[b, :il[b], :2 * tl[b] + 1], tla[b, :il[b], :2 * tl[b] + 1]
            assert (np.isfinite(a) == np.isfinite(t)).all()
            np.testing.assert_allclose(a, t, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("rows", [256, 8])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_linear_forward_redoes_what_it_cannot_take(monkeypatch, dtype, rows):
    """A sample whose scaled alpha underflows (a label 800 nats less likely than the rest), holds a
    -inf or NaN log-prob in its region, or overflows (a garbage log-prob of +800) is redone in log
    space, alone: its result is the log-space path's bit for bit, the others' stay linear, and the
    finite values match PyTorch float64 (in one block of rows, and in blocks of 8)."""
    from aclnn_gpu.reference import ctc_loss as reference
    monkeypatch.setattr(reference, "_LINEAR_BLOCK_ROWS", rows)
    rng = np.random.default_rng([SEED, 94])
    lp, tg, il, tl = make_case(rng, 40, 6, 5, 4, min_in=20)
    il[:] = 40
    tl[:] = 4
    tg[:, :4] = [1, 2, 3, 4]
    lp[:, 1, 3] -= 800.0                     # underflow: states past label 3 are e^-800 below the others
    lp[5, 2, 2] = -np.inf                    # a -inf log-prob at a label of the sample
    lp[7, 3, 4] = np.nan                     # NaN
    lp[9, 4, 1] = 800.0                      # overflow
    lp[39, 5, 0] = np.nan                    # sample 5: NaN at its last step, in its region too
    lp = lp.astype(dtype)
    (nll, la), (nll_log, la_log), redone = _forward_paths(monkeypatch, lp, tg, il, tl)
    assert redone == [(5, 0)]                # samples 1-5, in one log-space call; sample 0 stays linear
    for b in (1, 2, 3, 4, 5):
        np.testing.assert_array_equal(la[b], la_log[b])
        np.testing.assert_array_equal(nll[b], nll_log[b])
    assert np.isfinite(nll[0]) and np.isfinite(la[0]).any()
    if dtype == np.float64:
        _, tnll, tla, _ = torch_ref(lp, tg, il, tl, 0, False, np.ones(6), False)
        for b in (0, 1, 2):
            a, t = la[b, :, :9], tla[b, :, :9]
            assert (np.isfinite(a) == np.isfinite(t)).all()
            np.testing.assert_allclose(a, t, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_linear_forward_sample_bits_do_not_depend_on_the_batch(monkeypatch, dtype):
    """Each sample of a small call gives the same log_alpha bits alone as in its batch, in blocks of 8
    or 16 rows as in one block (the running log-scale and the last row carried across blocks), and
    the step's sum by np.vecdot gives the bits of a multiply and a reduction (NumPy without vecdot)."""
    from aclnn_gpu.reference import ctc_loss as reference
    rng = np.random.default_rng([SEED, 93])
    lp, tg, il, tl = make_case(rng, 50, 7, 6, 5, runs=True)
    il[0], tl[0] = 50, 5
    lp = lp.astype(dtype)
    nll, la = ctc_loss_forward(lp, tg, il, tl)
    for b in range(7):
        n1, l1 = ctc_loss_forward(np.ascontiguousarray(lp[:, b:b + 1]), tg[b:b + 1], il[b:b + 1], tl[b:b + 1])
        np.testing.assert_array_equal(n1[0], nll[b])
        w = l1.shape[2]
        np.testing.assert_array_equal(l1[0], la[b, :, :w])
    for rows in (8, 16):
        monkeypatch.setattr(reference, "_LINEAR_BLOCK_ROWS", rows)
        n2, l2 = ctc_loss_forward(lp, tg, il, tl)
        np.testing.assert_array_equal(l2, la)
        np.testing.assert_array_equal(n2, nll)
    monkeypatch.delattr(np, "vecdot", raising=False)
    n2, l2 = ctc_loss_forward(lp, tg, il, tl)
    np.testing.assert_array_equal(l2, la)
    np.testing.assert_array_equal(n2, nll)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_backward_vecdot_and_multiply_give_the_same_bits(monkeypatch, dtype):
    """The backward sums each step's three terms by np.vecdot for small batches (over a state axis
    laid out backwards in memory) and by a multiply and a reduction for larger ones: the same bits
    (repeated labels, a blank label, an infinite loss, a bad label and the log-space redo included)."""
    from aclnn_gpu.reference import ctc_loss as reference
    rng = np.random.default_rng([SEED, 92])
    lp, tg, il, tl = make_case(rng, 40, 6, 7, 6, runs=True)
    lp = lp.astype(dtype)
    tg[1, 0], tl[1] = 0, max(tl[1], 1)
    il[2], tl[2] = 3, 6
    tg[3, 0], tl[3] = 99, max(tl[3], 1)
    il[0], tl[0] = 40, 6
    nll, la = ctc_loss_forward(lp, tg, il, tl)
    la = la.copy()
    la[4, 1, 0] = np.nan
    g = rng.standard_normal(6).astype(dtype)
    got = {}
    for states in (0, 1 << 30):
        monkeypatch.setattr(reference, "_VECDOT_MAX_STATES", states)
        got[states] = ctc_loss_backward(g, lp, tg, il, tl, nll, la)
    np.testing.assert_array_equal(got[0], got[1 << 30])
    assert np.isfinite(got[0][:, 0]).all() and np.isnan(got[0][:, 3]).all()


def test_linear_forward_leaves_long_samples_and_stops_when_all_fail(monkeypatch):
    """A sample longer than _LINEAR_MAX_STEPS goes to log space without a linear attempt; a call whose
    samples have all failed stops the linear recursion at the end of the block (the samples redone in
    log space give the log-space path's bits)."""
    from aclnn_gpu.reference import ctc_loss as reference
    rng = np.random.default_rng([SEED, 91])
    lp, tg, il, tl = make_case(rng, 48, 3, 5, 3, min_in=20)
    il[:] = [48, 20, 30]
    tl[:] = 3
    monkeypatch.setattr(reference, "_LINEAR_MAX_STEPS", 25)          # samples 0 and 2 are long
    monkeypatch.setattr(reference, "_LINEAR_BLOCK_ROWS", 8)
    (nll, la), (nll_log, la_log), redone = _forward_paths(monkeypatch, lp, tg, il, tl)
    assert redone == [(2, 0)]
    np.testing.assert_array_equal(la[[0, 2]], la_log[[0, 2]])
    _, tnll, tla, _ = torch_ref(lp, tg, il, tl, 0, False, np.ones(3), False)
    np.testing.assert_allclose(nll, tnll, rtol=1e-10)
    # every sample fails in the first block (a label 800 nats below the rest): the recursion stops there
    lp2 = lp.copy()
    lp2[:, :, tg[0, 1]] -= 800.0
    lp2[:, :, tg[1, 1]] -= 800.0
    lp2[:, :, tg[2, 1]] -= 800.0
    monkeypatch.setattr(reference, "_LINEAR_MAX_STEPS", 512)
    monkeypatch.setattr(reference, "_LINEAR_BLOCK_ROWS", 8)
    monkeypatch.setattr(reference, "_LINEAR_MIN_LOG_PROB", -np.inf)
    steps = []
    linear = reference._alpha_linear

    def spy(lp_in, lprime, skip, il_, tl_, tmax, lt):
        out = linear(lp_in, lprime, skip, il_, tl_, tmax, lt)
        steps.append(out.copy())
        return out

    monkeypatch.setattr(reference, "_alpha_linear", spy)
    (nll, la), (nll_log, la_log), redone = _forward_paths(monkeypatch, lp2, tg, il, tl)
    assert redone == [(3, 0)] and (steps[0] == 0).all()
    np.testing.assert_array_equal(la, la_log)
    np.testing.assert_array_equal(nll, nll_log)


@pytest.mark.parametrize("rows", [256, 8])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_linear_forward_resumes_an_underflow_in_log_space(monkeypatch, dtype, rows):
    """A sample that underflows late (its label 3 becomes 800 nats less likely from t = 20 on) keeps its
    exact linear rows before the failing segment of 8 rows and resumes in log space from that
    segment's first row (16), in blocks of 256 or 8 rows: PyTorch float64's values, the log-space
    path's -inf pattern."""
    from aclnn_gpu.reference import ctc_loss as reference
    monkeypatch.setattr(reference, "_LINEAR_BLOCK_ROWS", rows)
    monkeypatch.setattr(reference, "_LINEAR_MIN_LOG_PROB", -np.inf)   # no log-prob sends it to log space first
    rng = np.random.default_rng([SEED, 90])
    lp, tg, il, tl = make_case(rng, 40, 2, 5, 4, min_in=20)
    il[:], tl[:] = 40, 4
    tg[:, :4] = [1, 2, 3, 4]
    lp[20:, 1, 3] -= 800.0
    lp = lp.astype(dtype)
    (nll, la), (nll_log, la_log), redone = _forward_paths(monkeypatch, lp, tg, il, tl)
    assert redone == [(1, 16)]
    np.testing.assert_array_equal(np.isfinite(la), np.isfinite(la_log))
    tol = 1e-10 if dtype == np.float64 else 1e-5
    fin = np.isfinite(la)
    np.testing.assert_allclose(la[fin], la_log[fin], rtol=tol, atol=tol)
    np.testing.assert_allclose(nll, nll_log, rtol=tol)
    if dtype == np.float64:
        _, tnll, tla, _ = torch_ref(lp, tg, il, tl, 0, False, np.ones(2), False)
        np.testing.assert_allclose(la[1], tla[1], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(nll, tnll, rtol=1e-10)


def test_linear_forward_sends_peaked_samples_to_log_space(monkeypatch):
    """A sample with a log-prob below _LINEAR_MIN_LOG_PROB (a trained model's peaked output) or a NaN
    goes to log space without a linear attempt, the others stay linear; every value is the log-space
    path's (bits) or PyTorch float64's."""
    rng = np.random.default_rng([SEED, 89])
    lp, tg, il, tl = make_case(rng, 30, 3, 5, 3, min_in=10)
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((30, 3, 5))), -1).numpy()
    lp[:, 1] = torch.log_softmax(torch.tensor(rng.standard_normal((30, 5)) + 25 * np.eye(5)[rng.integers(0, 5, 30)]),
                                 -1).numpy()
    lp[2, 2, 4] = np.nan
    il[:] = 30
    (nll, la), (nll_log, la_log), redone = _forward_paths(monkeypatch, lp, tg, il, tl)
    assert redone == [(2, 0)]
    np.testing.assert_array_equal(la[1:], la_log[1:])
    np.testing.assert_array_equal(nll[1:], nll_log[1:])
    _, tnll, tla, _ = torch_ref(lp, tg, il, tl, 0, False, np.ones(3), False)
    np.testing.assert_allclose(nll[:2], tnll[:2], rtol=1e-10)
