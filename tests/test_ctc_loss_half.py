"""CTC loss in FLOAT16 / BFLOAT16 storage with fp32 math (docs/API.md §7), on every test device (cpu,
emulated; cuda where ACLNN_GPU_TEST_DEVICES names it): the gradient is held to PyTorch's fp32 CTC run
on the same 16-bit log-probs cast to float32, its result cast back to the 16-bit type:

    max |ours - ref64|  <=  2 * max |torch32 - ref64|  +  half an ulp of max |ref64| in the 16-bit type

where ref64 is PyTorch's CTC in float64 on the same 16-bit inputs. Random and peaked (a trained
model's) log-probs, short and long targets, zeroInfinity with a sample that cannot align, both
reductions, through the two-phase API (the forward's 16-bit logAlpha and negLogLikelihood fed to the
backward as CANN's tables have them) and through aclnn_gpu.torch.ctc_loss."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from support import DEVICE_KINDS
from test_ctc_loss import BWD, FWD, ia

HALF = {"float16": (np.dtype(np.float16), torch.float16, 10), "bfloat16": (dtypes.bfloat16, torch.bfloat16, 7)}


def half_ulp(x: float, mantissa_bits: int) -> float:
    """Half a unit in the last place of |x| in a type with that many stored mantissa bits."""
    return 0.5 * 2.0 ** (np.floor(np.log2(max(abs(x), 2.0 ** -14))) - mantissa_bits)


def draw(rng, T, N, C, lengths, peaked=False):
    """16-bit-representable log-probs (T, N, C) as float32, targets (N, maxL) without blank (0), and
    lengths: `lengths` the target lengths, inputs of length T (the first sample's may be shorter)."""
    logits = rng.standard_normal((T, N, C)) * 2
    if peaked:   # one class per step far above the rest, as a trained model's outputs
        logits[np.arange(T)[:, None], np.arange(N)[None, :], rng.integers(0, C, (T, N))] += 12
    lp = torch.log_softmax(torch.tensor(logits), -1)
    tl = np.asarray(lengths, np.int64)
    tg = rng.integers(1, C, (N, max(1, int(tl.max()))))
    return lp, tg, [T] * N, tl


def torch_grads(lp16, tg, il, tl, reduction, zero_inf):
    """(loss and gradient of PyTorch's float64 CTC on the 16-bit values, the gradient of PyTorch's
    float32 CTC on them cast back to the 16-bit type)."""
    out = []
    for dt in (torch.float64, torch.float32):
        x = lp16.to(dt).requires_grad_()
        loss = torch.nn.functional.ctc_loss(x, torch.tensor(tg), list(il), list(map(int, tl)), reduction=reduction,
                                            zero_infinity=zero_inf)
        loss.backward()
        out.append((loss.detach(), x.grad))
    (loss64, g64), (_, g32) = out
    return loss64.numpy(), g64.numpy(), g32.to(lp16.dtype).double().numpy()


def assert_as_accurate(ours, g64, g32, mantissa_bits, what):
    finite = np.isfinite(g64)
    assert (np.isfinite(ours) == finite).all(), what
    ours_err = np.abs(ours - g64)[finite].max(initial=0)
    torch_err = np.abs(g32 - g64)[finite].max(initial=0)
    bound = 2 * torch_err + half_ulp(np.abs(g64[finite]).max(initial=0), mantissa_bits)
    assert ours_err <= bound, f"{what}: max error {ours_err:.3g} > {bound:.3g} (PyTorch fp32: {torch_err:.3g})"


CASES = {   # name: (T, N, C, target lengths, peaked, zeroInfinity)
    "random-short": (24, 3, 7, [3, 1, 2], False, False),
    "random-long": (40, 3, 6, [18, 12, 15], False, False),
    "peaked-long": (40, 2, 9, [16, 11], True, False),
    "zero-infinity": (20, 3, 6, [4, 12, 2], False, True),   # sample 1: 12 labels in 11 steps (set below)
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dt", list(HALF))
def test_two_phase_gradient_as_accurate_as_torch_fp32(session, rng, dt, name):
    """aclnnCtcLoss then aclnnCtcLossBackward, all in the 16-bit type (per-sample gradOut 1: "sum")."""
    dtype, tdtype, bits = HALF[dt]
    T, N, C, lengths, peaked, zero_inf = CASES[name]
    lp, tg, il, tl = draw(rng, T, N, C, lengths, peaked)
    if name == "zero-infinity":
        tg[1] = np.arange(12) % (C - 1) + 1   # no label repeated twice in a row: 12 labels need 12 steps...
        il[1] = 11                            # ...and sample 1 has 11
    lp16 = lp.to(tdtype)
    host = lp16.float().numpy().astype(dtype)
    X = 2 * int(tl.max()) + 1
    nll, la = session.poisoned((N,), dtype), session.poisoned((N, T, X), dtype)
    assert session.run(*FWD, session.tensor(host), session.tensor(tg), ia(il), ia(tl), 0, zero_inf, nll, la) == 0
    out = session.poisoned((T, N, C), dtype)
    assert session.run(*BWD, session.tensor(np.ones(N, dtype)), session.tensor(host), session.tensor(tg), ia(il),
                       ia(tl), nll, la, 0, zero_inf, out) == 0, acl.aclGetRecentErrMsg()
    loss64, g64, g32 = torch_grads(lp16, tg, il, tl, "sum", zero_inf)
    got = session.read(out).astype(np.float64)
    assert_as_accurate(got, g64, g32, bits, f"{dt} {name}")
    if zero_inf:
        assert (got[:, 1] == 0).all() and session.read(nll).astype(np.float64)[1] == 0
    # the loss, stored in the 16-bit type: within half an ulp of PyTorch's float64 loss (fp32 math)
    want = torch.nn.functional.ctc_loss(lp16.double(), torch.tensor(tg), list(il), list(map(int, tl)),
                                        reduction="none", zero_infinity=zero_inf).numpy()
    loss = session.read(nll).astype(np.float64)
    assert all(abs(a - b) <= half_ulp(b, bits) + 1e-5 * abs(b) for a, b in zip(loss, want)), (loss, want)


@pytest.mark.parametrize("kind", DEVICE_KINDS)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("dt", list(HALF))
def test_torch_ctc_loss_gradient_as_accurate_as_torch_fp32(rng, kind, dt, reduction):
    """aclnn_gpu.torch.ctc_loss on 16-bit log-probs: autograd's gradient (gradOut rounded to the type,
    as the backward takes it) against the bound, peaked and random samples, long and short targets."""
    import aclnn_gpu.torch as AT
    from support import use_device
    use_device(kind)
    dtype, tdtype, bits = HALF[dt]
    for peaked, lengths in ((False, [14, 2, 9]), (True, [3, 15, 1])):
        lp, tg, il, tl = draw(rng, 36, 3, 8, lengths, peaked)
        x = lp.to(tdtype).requires_grad_()
        loss = AT.ctc_loss(x, torch.tensor(tg), il, list(map(int, tl)), reduction=reduction)
        loss.backward()
        assert loss.dtype == tdtype and x.grad.dtype == tdtype
        loss64, g64, g32 = torch_grads(x.detach(), tg, il, tl, reduction, False)
        assert_as_accurate(x.grad.double().numpy(), g64, g32, bits, f"{dt} {reduction} peaked={peaked}")
        # the reduced loss: each sample's loss rounded once to the type (CANN's negLogLikelihoodOut),
        # then the reduction's own roundings in the type
        per = torch.nn.functional.ctc_loss(x.detach().double(), torch.tensor(tg), il, list(map(int, tl)),
                                           reduction="none").numpy()
        scale = 1 / np.maximum(tl, 1) / len(tl) if reduction == "mean" else np.ones(len(tl))
        rounding = sum(half_ulp(v, bits) * w for v, w in zip(per, scale)) + len(tl) * half_ulp(float(loss64), bits)
        assert abs(float(loss.detach()) - float(loss64)) <= rounding, (float(loss.detach()), float(loss64))


def test_the_bound_can_fail(rng):
    """The accuracy check rejects the gradient of the rounded logAlpha / negLogLikelihood, which a
    backward that read them as given would compute (PyTorch float64 on the rounded values)."""
    lp, tg, il, tl = draw(rng, 40, 3, 6, [18, 12, 15])
    lp16 = lp.to(torch.bfloat16)
    x64 = lp16.double()
    nll, la = torch.ops.aten._ctc_loss(x64, torch.tensor(tg), il, list(map(int, tl)), 0, False)
    rounded = torch.ops.aten._ctc_loss_backward(torch.ones(3, dtype=torch.float64), x64, torch.tensor(tg), il,
                                                list(map(int, tl)), nll.bfloat16().double(),
                                                la.bfloat16().double(), 0, False)
    _, g64, g32 = torch_grads(lp16, tg, il, tl, "sum", False)
    with pytest.raises(AssertionError, match="max error"):
        assert_as_accurate(rounded.bfloat16().double().numpy(), g64, g32, HALF["bfloat16"][2], "rounded inputs")


def test_half_ulp():
    assert half_ulp(1.0, 10) == 2.0 ** -11 and half_ulp(-3.0, 7) == 2.0 ** -7
    assert np.float16(1 + 2 ** -10) - np.float16(1) == 2 * half_ulp(1.0, 10)
    assert float(ml_dtypes.bfloat16(1 + 2 ** -7)) - 1 == 2 * half_ulp(1.0, 7)
