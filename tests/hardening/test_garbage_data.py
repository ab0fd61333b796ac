"""Garbage device data on the emulated device (the .cu kernels), checked against the cpu
device / float64 reference: labels and targets out of range (negative, >= C, huge int64), NaN and Inf
inputs, uninitialised logAlpha padding, BOOL mask bytes other than 0/1.

docs/API.md §7: an out-of-range label makes its rows NaN (CTC: the whole sample), every other row
stays exact. Every output lies inside a NaN guard band (its allocation is 64 elements longer on both
sides) that must come back bit-identical: a kernel writing out of bounds shows here, and CI re-runs
this file with the AddressSanitizer build of the emulator (marked `kernels`), which catches reads.
"""
from __future__ import annotations

import numpy as np
import pytest

import aclnn_gpu as acl
from support import Session

pytestmark = pytest.mark.kernels
G = 64  # guard elements on each side of every output
F32 = np.float32


class Guarded:
    """Outputs inside NaN guard bands on one device session."""

    def __init__(self, s: Session):
        self.s, self.guards = s, []

    def out(self, shape, dtype=F32):
        n = int(np.prod(shape))
        storage = np.full(n + 2 * G, np.nan, dtype)
        base = self.s.tensor(storage)
        t = acl.aclCreateTensor(list(shape), int(base.dtype), None, G, int(acl.ACL_FORMAT_ND), [n + 2 * G], base.data)
        self.s.tensors.append(t)
        self.guards.append((base, n, storage.tobytes()))
        return t

    def check(self):
        for base, n, before in self.guards:
            after = self.s.read(base).tobytes()
            k = np.dtype(F32).itemsize * G
            assert after[:k] == before[:k] and after[-k:] == before[-k:], "a kernel wrote outside its output"


def _run(s, gws, exe, *args):
    assert s.run(gws, exe, *args) == 0, acl.aclGetRecentErrMsg()


def _lsm(x):
    x = x - x.max(-1, keepdims=True)
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(F32)


def _both(fn):
    """Run fn(session) on emulated and cpu; return both results."""
    out = {}
    for kind in ("emulated", "cpu"):
        s = Session(kind)
        try:
            out[kind] = fn(s)
        finally:
            s.close()
    return out["emulated"], out["cpu"]


BAD_LABELS = [-5, 7, 2 ** 40, -(2 ** 62)]


@pytest.mark.parametrize("bad", BAD_LABELS)
def test_cross_entropy_labels_out_of_range(bad):
    rng = np.random.default_rng(7)
    N, C = 6, 7
    x = rng.standard_normal((N, C)).astype(F32)
    target = np.array([0, bad, 3, -100, 6, bad], np.int64)
    good = np.array([True, False, True, True, True, False])

    def fn(s):
        g = Guarded(s)
        loss, lp = g.out((N,)), g.out((N, C))
        _run(s, acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, s.tensor(x), s.tensor(target),
             None, "none", -100, 0.0, 0.0, False, loss, lp, None, None)
        grad = g.out((N, C))
        _run(s, acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad,
             s.tensor(np.ones(N, F32)), s.tensor(s.read(lp)), s.tensor(target), None, None, None, "none", -100,
             0.0, 0.0, grad)
        g.check()
        return s.read(loss), s.read(grad)

    (loss_e, grad_e), (loss_c, grad_c) = _both(fn)
    for loss, grad in ((loss_e, grad_e), (loss_c, grad_c)):
        assert np.isnan(loss[~good]).all() and np.isnan(grad[~good]).all(), "bad-label rows must be NaN"
        assert not np.isnan(loss[good]).any() and not np.isnan(grad[good]).any()
    np.testing.assert_allclose(loss_e[good], loss_c[good], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(grad_e[good], grad_c[good], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("bad", BAD_LABELS)
def test_ctc_labels_out_of_range_and_garbage_padding(bad):
    rng = np.random.default_rng(11)
    T, N, C, L = 8, 3, 7, 3
    lp = _lsm(rng.standard_normal((T, N, C)))
    targets = np.array([[1, 2, 3], [2, bad, 4], [5, 5, 1]], np.int64)
    il, tl = [8, 7, 8], [3, 3, 2]
    X = 2 * L + 1 + 5  # logAlpha wider than needed: its padding is never written by the forward

    def fn(s):
        g = Guarded(s)
        nll, la = g.out((N,)), g.out((N, T, 2 * L + 1))
        _run(s, acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss, s.tensor(lp), s.tensor(targets),
             s.int_array(il), s.int_array(tl), 0, False, nll, la)
        la_host = s.read(la)
        padded = np.frombuffer(rng.bytes(N * T * X * 4), F32).reshape(N, T, X).copy()  # uninitialised bytes
        padded[:, :, :2 * L + 1] = la_host
        grad = g.out((T, N, C))
        _run(s, acl.aclnnCtcLossBackwardGetWorkspaceSize, acl.aclnnCtcLossBackward, s.tensor(np.ones(N, F32)),
             s.tensor(lp), s.tensor(targets), s.int_array(il), s.int_array(tl), s.tensor(s.read(nll)),
             s.tensor(padded), 0, False, grad)
        g.check()
        return s.read(nll), s.read(grad)

    (nll_e, grad_e), (nll_c, grad_c) = _both(fn)
    for nll, grad in ((nll_e, grad_e), (nll_c, grad_c)):
        assert np.isnan(nll[1]) and np.isnan(grad[:, 1]).all(), "the bad sample must be NaN"
        assert not np.isnan(nll[[0, 2]]).any() and not np.isnan(grad[:, [0, 2]]).any()
    np.testing.assert_allclose(nll_e[[0, 2]], nll_c[[0, 2]], rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(grad_e[:, [0, 2]], grad_c[:, [0, 2]], rtol=2e-5, atol=1e-5)


def _poison(a, rng):
    a = a.copy()
    flat = a.reshape(-1)
    idx = rng.choice(flat.size, 4, replace=False)
    flat[idx] = [np.nan, np.inf, -np.inf, np.nan]
    return a


def test_nan_inf_inputs_all_families():
    """NaN/Inf in the inputs of every family: emulated == cpu bit-for-bit where NaN (NaN positions
    equal), within tolerance elsewhere, guard bands intact."""
    rng = np.random.default_rng(3)
    x4 = _poison(rng.standard_normal((2, 2, 4, 16)).astype(F32), rng)
    mask = rng.random((2, 1, 4, 16)) < 0.3
    kl_x, kl_t = _poison(rng.standard_normal((3, 5)).astype(F32), rng), rng.random((3, 5)).astype(F32)
    cx = _poison(rng.standard_normal((6, 2, 3)).astype(F32), rng)
    w, b = rng.standard_normal((3, 3, 4)).astype(F32), rng.standard_normal(4).astype(F32)
    ce_x = _poison(rng.standard_normal((5, 6)).astype(F32), rng)
    ctc_lp = _poison(_lsm(rng.standard_normal((6, 2, 5))), rng)

    def fn(s):
        g, res = Guarded(s), {}
        y = g.out(x4.shape)
        _run(s, acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax, s.tensor(x4),
             s.tensor(mask), 0.5, False, y)
        res["sms"] = s.read(y)
        gy = g.out(x4.shape)
        _run(s, acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, acl.aclnnScaledMaskedSoftmaxBackward,
             s.tensor(x4), s.tensor(np.nan_to_num(res["sms"])), s.tensor(mask), 0.5, False, gy)
        res["sms_bw"] = s.read(gy)
        o = g.out((3, 5))
        _run(s, acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, s.tensor(kl_x), s.tensor(kl_t), 0, False, o)
        res["kl"] = s.read(o)
        o = g.out((3, 5))
        _run(s, acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward, s.tensor(kl_x), s.tensor(kl_x),
             s.tensor(kl_t), 0, False, o)
        res["kl_bw"] = s.read(o)
        o = g.out((6, 2, 4))
        _run(s, acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, s.tensor(cx), s.tensor(w), s.tensor(b), 1, o, 0)
        res["conv"] = s.read(o)
        gi, gw, gb = g.out((6, 2, 3)), g.out((3, 3, 4)), g.out((4,))
        _run(s, acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward, s.tensor(np.nan_to_num(res["conv"], posinf=1e30, neginf=-1e30)),
             s.tensor(cx), s.tensor(w), s.tensor(b), 1, 0, gi, gw, gb)
        res["conv_bw"] = np.concatenate([s.read(t).ravel() for t in (gi, gw, gb)])
        loss, lp = g.out((5,)), g.out((5, 6))
        _run(s, acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, s.tensor(ce_x),
             s.tensor(np.array([0, 1, 2, 3, 4], np.int64)), None, "none", -100, 0.1, 0.0, False, loss, lp, None, None)
        res["ce"] = np.concatenate([s.read(loss).ravel(), s.read(lp).ravel()])
        nll, la = g.out((2,)), g.out((2, 6, 5))
        _run(s, acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss, s.tensor(ctc_lp),
             s.tensor(np.array([[1, 2], [3, 4]], np.int64)), s.int_array([6, 6]), s.int_array([2, 2]), 0, False, nll, la)
        res["ctc"] = s.read(nll)
        g.check()
        return res

    emu, cpu = _both(fn)
    for key in sorted(emu):
        e, c = emu[key].astype(np.float64), cpu[key].astype(np.float64)
        if key == "conv_bw":  # GEMM summation order decides inf vs NaN (inf + -inf); finiteness must agree
            assert np.array_equal(np.isfinite(e), np.isfinite(c)), \
                f"conv_bw: finite positions differ: {np.flatnonzero(np.isfinite(e) != np.isfinite(c))}"
            f = np.isfinite(e)
            np.testing.assert_allclose(e[f], c[f], rtol=1e-4, atol=1e-5, err_msg=key)
            continue
        assert np.array_equal(np.isnan(e), np.isnan(c)), f"{key}: NaN positions differ between emulated and cpu"
        np.testing.assert_allclose(e, c, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=key)


def test_mask_bytes_other_than_0_1():
    """A BOOL mask holding 2, 7, 255 ... is read as 'masked' (non-zero) by every device, as C does."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 4, 16)).astype(F32)
    raw = rng.integers(0, 256, (2, 2, 4, 16)).astype(np.uint8)
    raw[raw < 160] = 0

    def fn(s):
        g = Guarded(s)
        mask = s.tensor(raw, dtype_code=int(acl.ACL_BOOL))
        y = g.out(x.shape)
        _run(s, acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax, s.tensor(x), mask, 1.0,
             False, y)
        gy = g.out(x.shape)
        _run(s, acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, acl.aclnnScaledMaskedSoftmaxBackward,
             s.tensor(x), s.tensor(s.read(y)), mask, 1.0, False, gy)
        g.check()
        return s.read(y), s.read(gy)

    (y_e, g_e), (y_c, g_c) = _both(fn)
    from aclnn_gpu.reference.scaled_masked_softmax import scaled_masked_softmax
    expected = scaled_masked_softmax(x, raw != 0, 1.0, False)
    np.testing.assert_allclose(y_e, expected, rtol=2e-5, atol=1e-6, err_msg="emulated")
    np.testing.assert_allclose(y_c, expected, rtol=2e-5, atol=1e-6, err_msg="cpu")
    np.testing.assert_allclose(g_e, g_c, rtol=2e-5, atol=1e-6)
