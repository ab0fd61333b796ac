"""Non-finite and extreme values (NaN, +-inf, -1e30) in operator inputs: the cpu device (NumPy) and
the emulated device (the .cu kernels) give the same result, and it is PyTorch's wherever the formula
of docs/OPERATORS.md is PyTorch's. One row per bug found by auditing this family; each row failed before
its fix."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import aclnn_gpu.functional as F
from support import DEVICE_KINDS, use_device

pytestmark = pytest.mark.kernels
f32 = np.float32


@pytest.fixture(params=DEVICE_KINDS)
def device(request):
    use_device(request.param)
    return request.param


def same(got, expected, what):
    """Equal non-finite pattern (NaN where NaN, the same infinities) and close finite values."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=what)
    np.testing.assert_allclose(got[~np.isnan(got)], expected[~np.isnan(expected)], rtol=1e-5, atol=1e-6,
                               err_msg=what)


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


def test_kl_div_infinite_target(device):
    """xlogy(t, t) - t * x, PyTorch's form: t = inf gives inf - inf = NaN (not inf)."""
    x, t = np.array([0.5, 0.0], f32), np.array([np.inf, np.inf], f32)
    expected = torch.nn.functional.kl_div(torch.tensor(x), torch.tensor(t), reduction="none")
    same(F.kl_div(x, t, "none"), expected.numpy(), device)


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
