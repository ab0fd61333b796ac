"""aclnn_gpu.torch by PyTorch's rules, against PyTorch's own operators on the same inputs: forward-mode AD
(torch.func.jvp / jacfwd / hessian, torch.autograd.forward_ad) in float64, double backward (gradgradcheck
in float64, Hessian-vector products against PyTorch's in float32 through the operators), autocast's
dtypes and values, one answer per call on every device kind (the edge cases on cpu and emulated compared
exactly), float64 conv_tbc and softmax, mask=None, the target dtypes PyTorch takes, PyTorch's exception
types, vmap, jit.trace, jit.script's refusal and calls from several threads. Each test runs on every
device kind under test (cpu and emulated in CI; cuda, with CUDA tensors, in the GPU check)."""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as fwAD  # noqa: E402
import torch.nn.functional as TF  # noqa: E402

from support import DEVICE_KINDS, use_device  # noqa: E402

import aclnn_gpu.torch as AT  # noqa: E402

D = torch.float64


@pytest.fixture(params=DEVICE_KINDS)
def dev(request):
    """The device kind in use, and the torch device of the tensors handed to the wrappers."""
    use_device(request.param)
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("the cuda kind needs PyTorch with CUDA")
        return "cuda"
    return "cpu"


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(36)


def randn(gen, *shape, device="cpu", dtype=D):
    return torch.randn(*shape, dtype=dtype, generator=gen).to(device)


def close(actual, expected, rtol=1e-10, atol=1e-12):
    torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=rtol, atol=atol)


def jvp(f, primals, tangents):
    return torch.func.jvp(f, primals, tangents)[1]


# ---------------------------------------------------------------------------- reference functions
def reference_softmax(x, mask, scale, causal=False):
    """softmax(scale * x) with masked positions excluded: PyTorch's masked_fill + softmax."""
    masked = torch.zeros(x.shape, dtype=torch.bool, device=x.device) if mask is None else mask.expand(x.shape)
    if causal:
        masked = masked | torch.ones(x.shape[-2:], dtype=torch.bool, device=x.device).triu(1)
    return torch.softmax((x * scale).masked_fill(masked, -torch.inf), -1)


def reference_conv_tbc(x, w, b, pad):
    """torch.conv_tbc as conv1d (PyTorch's conv_tbc has no forward-mode rule; conv1d has)."""
    return TF.conv1d(x.permute(1, 2, 0), w.permute(2, 1, 0), b, padding=pad).permute(2, 0, 1)


def ce_case(gen, dev, spatial=False):
    shape = (5, 4, 3) if spatial else (6, 4)
    x = randn(gen, *shape, device=dev)
    t = torch.randint(0, 4, (5, 3) if spatial else (6,), generator=gen)
    t.view(-1)[2] = -100
    return x, t.to(dev)


# ---------------------------------------------------------------------------- 1. forward mode
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted,label_smoothing,spatial", [(False, 0.0, False), (True, 0.1, False),
                                                              (True, 0.0, True)])
def test_cross_entropy_forward_mode_is_pytorch(reduction, weighted, label_smoothing, spatial, dev, gen):
    x, t = ce_case(gen, dev, spatial)
    w = randn(gen, 4, device=dev).abs().float().double() if weighted else None   # the operator takes fp32 weights
    tangent = randn(gen, *x.shape, device=dev)

    def ours(a):
        return AT.cross_entropy(a, t, weight=w, reduction=reduction, label_smoothing=label_smoothing)

    def theirs(a):
        return TF.cross_entropy(a, t, weight=w, reduction=reduction, label_smoothing=label_smoothing)
    expected = jvp(theirs, (x,), (tangent,))
    assert expected.abs().sum() > 0                                  # not a case a zero tangent passes
    close(jvp(ours, (x,), (tangent,)), expected)
    with fwAD.dual_level():
        close(fwAD.unpack_dual(ours(fwAD.make_dual(x, tangent))).tangent, expected)


def test_jacfwd_and_hessian_of_cross_entropy_are_pytorch(dev, gen):
    """The row of zeros jacfwd gave; forward over reverse (torch.func.hessian) too."""
    x, t = randn(gen, 5, device=dev), torch.tensor(2, device=dev)
    close(torch.func.jacfwd(lambda a: AT.cross_entropy(a, t))(x), torch.func.jacfwd(lambda a: TF.cross_entropy(a, t))(x))
    x, t = ce_case(gen, dev)
    close(torch.func.hessian(lambda a: AT.cross_entropy(a, t, label_smoothing=0.2))(x),
          torch.func.hessian(lambda a: TF.cross_entropy(a, t, label_smoothing=0.2))(x))


def test_forward_over_reverse_and_reverse_over_forward_are_pytorch(dev, gen):
    """torch.func.hessian (jacfwd of jacrev) and jacrev of jacfwd: the tangents of the backward operators,
    and the reverse mode through the forward-mode rules, against PyTorch's own Hessians."""
    x, t = randn(gen, 3, 4, device=dev), torch.tensor([1, 0, 3], device=dev)
    kl_target = torch.rand(3, 4, dtype=D, generator=gen).to(dev)
    w, b = randn(gen, 2, 4, 3, device=dev), randn(gen, 3, device=dev)
    pairs = [
        (lambda a: AT.cross_entropy(a, t, label_smoothing=0.1), lambda a: TF.cross_entropy(a, t, label_smoothing=0.1)),
        (lambda a: AT.nll_loss(a.log_softmax(-1), t), lambda a: TF.nll_loss(a.log_softmax(-1), t)),
        (lambda a: (AT.kl_div(a, kl_target, reduction="none") ** 2).sum(),
         lambda a: (TF.kl_div(a, kl_target, reduction="none") ** 2).sum()),
        (lambda a: (AT.scaled_masked_softmax(a.reshape(1, 1, 3, 4), None, 0.5) ** 3).sum(),
         lambda a: (torch.softmax(a.reshape(1, 1, 3, 4) * 0.5, -1) ** 3).sum()),
        (lambda a: (AT.conv_tbc(a.reshape(3, 1, 4), w, b, 1) ** 2).sum(),
         lambda a: (reference_conv_tbc(a.reshape(3, 1, 4), w, b, 1) ** 2).sum()),
    ]
    for ours, theirs in pairs:
        expected = torch.func.hessian(theirs)(x)
        assert expected.abs().sum() > 0
        close(torch.func.hessian(ours)(x), expected)
        close(torch.func.jacrev(torch.func.jacfwd(ours))(x), expected)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_nll_loss_and_zloss_forward_mode(reduction, dev, gen):
    x, t = ce_case(gen, dev)
    lp = x.log_softmax(-1)
    tangent = randn(gen, *x.shape, device=dev)
    close(jvp(lambda a: AT.nll_loss(a, t, reduction=reduction), (lp,), (tangent,)),
          jvp(lambda a: TF.nll_loss(a, t, reduction=reduction), (lp,), (tangent,)))
    # z-loss: loss + k * lse^2 per row not ignored ("mean": over those rows, docs/API.md §7)
    k, kept = 0.05, (t != -100).to(D)

    def zloss(a):
        base = TF.cross_entropy(a, t, reduction=reduction)
        extra = k * torch.logsumexp(a, -1) ** 2 * kept
        return base + (extra if reduction == "none" else extra.sum() / kept.sum())
    close(jvp(lambda a: AT.cross_entropy(a, t, reduction=reduction, lse_square_scale_for_zloss=k), (x,), (tangent,)),
          jvp(zloss, (x,), (tangent,)))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_forward_mode_is_pytorch(reduction, log_target, dev, gen):
    x = randn(gen, 3, 1, 5, device=dev).log_softmax(-1)               # broadcast against the target
    target = torch.rand(3, 2, 5, dtype=D, generator=gen).to(dev)
    if log_target:
        target = target.log()
    tangent = randn(gen, *x.shape, device=dev)
    expected = jvp(lambda a: TF.kl_div(a, target, reduction=reduction, log_target=log_target), (x,), (tangent,))
    assert expected.abs().sum() > 0
    close(jvp(lambda a: AT.kl_div(a, target, reduction=reduction, log_target=log_target), (x,), (tangent,)),
          expected)


def test_kl_div_target_tangent_is_refused_not_zero(dev, gen):
    x, target = randn(gen, 3, 4, device=dev), torch.rand(3, 4, dtype=D, generator=gen).to(dev)
    with pytest.raises(NotImplementedError, match="no forward-mode derivative for target"):
        jvp(lambda b: AT.kl_div(x, b, reduction="sum"), (target,), (torch.ones_like(target),))


@pytest.mark.parametrize("mask_kind", ["mask", "causal", "none"])
def test_softmax_forward_mode_is_pytorch(mask_kind, dev, gen):
    x = randn(gen, 2, 3, 4, 6, device=dev)
    mask = (torch.rand(2, 1, 4, 6, generator=gen) < 0.3).to(dev) if mask_kind == "mask" else None
    if mask is not None:
        mask[..., 0] = False                                          # no fully masked row: PyTorch's NaN
    tangent = randn(gen, *x.shape, device=dev)
    causal = mask_kind == "causal"

    def ours(a):
        if causal:
            return AT.scaled_upper_triang_masked_softmax(a, None, 0.7)
        return AT.scaled_masked_softmax(a, mask, 0.7)
    close(ours(x), reference_softmax(x, mask, 0.7, causal))
    close(jvp(ours, (x,), (tangent,)), jvp(lambda a: reference_softmax(a, mask, 0.7, causal), (x,), (tangent,)))


@pytest.mark.parametrize("which", [(0,), (1,), (2,), (0, 1, 2)], ids=["input", "weight", "bias", "all"])
def test_conv_tbc_forward_mode_is_the_convolution(which, dev, gen):
    primals = (randn(gen, 7, 2, 3, device=dev), randn(gen, 3, 3, 4, device=dev), randn(gen, 4, device=dev))
    tangents = tuple(randn(gen, *p.shape, device=dev) if i in which else torch.zeros_like(p)
                     for i, p in enumerate(primals))
    close(jvp(lambda *a: AT.conv_tbc(*a, 1), primals, tangents),
          jvp(lambda *a: reference_conv_tbc(*a, 1), primals, tangents))


def test_ctc_forward_mode_raises_as_pytorch(dev, gen):
    lp = randn(gen, 6, 2, 5, device=dev).log_softmax(-1)
    tg = torch.tensor([[1, 2], [3, 1]], device=dev)
    for f in (TF.ctc_loss, AT.ctc_loss):
        with pytest.raises(NotImplementedError, match="Trying to use forward AD with .*ctc_loss"):
            jvp(lambda a: f(a, tg, [6, 6], [2, 2]), (lp,), (torch.ones_like(lp),))


# ---------------------------------------------------------------------------- 2. double backward
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted,label_smoothing", [(False, 0.0), (True, 0.1)])
def test_cross_entropy_gradgradcheck(reduction, weighted, label_smoothing, dev, gen):
    x, t = ce_case(gen, dev)
    w = randn(gen, 4, device=dev).abs().float().double() if weighted else None   # the operator takes fp32 weights
    torch.autograd.gradgradcheck(
        lambda a: AT.cross_entropy(a, t, weight=w, reduction=reduction, label_smoothing=label_smoothing),
        (x.requires_grad_(),))


def test_conv_tbc_and_softmax_and_kl_div_gradgradcheck(dev, gen):
    conv = tuple(randn(gen, *s, device=dev).requires_grad_() for s in ((6, 2, 3), (3, 3, 4), (4,)))
    torch.autograd.gradgradcheck(lambda *a: AT.conv_tbc(*a, 1), conv)
    x = randn(gen, 2, 2, 4, 6, device=dev).requires_grad_()
    mask = (torch.rand(2, 1, 4, 6, generator=gen) < 0.3).to(dev)
    torch.autograd.gradgradcheck(lambda a: AT.scaled_masked_softmax(a, mask, 0.5), (x,))
    torch.autograd.gradgradcheck(lambda a: AT.scaled_upper_triang_masked_softmax(a, None, 0.5), (x,))
    kl_target = torch.rand(3, 2, 5, dtype=D, generator=gen).to(dev)
    for reduction in ("none", "batchmean"):
        torch.autograd.gradgradcheck(lambda a: AT.kl_div(a, kl_target, reduction=reduction),
                                     (randn(gen, 3, 1, 5, device=dev).requires_grad_(),))


def _hvp(f, inputs, vectors):
    """Hessian-vector product through create_graph=True (a gradient penalty's path)."""
    inputs = [i.detach().clone().requires_grad_() for i in inputs]
    grads = torch.autograd.grad(f(*inputs), inputs, create_graph=True)
    return torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vectors)), inputs, allow_unused=True)


def test_double_backward_through_the_operators_in_float32(dev, gen):
    """float32 runs the aclnn operators (float64 is computed by the torch layer): the second-order
    formulas over the operators against PyTorch's own double backward in float64."""
    f32 = torch.float32
    x, t = ce_case(gen, dev)
    v = randn(gen, *x.shape, device=dev)
    for ours, theirs in zip(_hvp(lambda a: AT.cross_entropy(a, t, label_smoothing=0.1), [x.to(f32)], [v.to(f32)]),
                            _hvp(lambda a: TF.cross_entropy(a, t, label_smoothing=0.1), [x], [v])):
        close(ours.double(), theirs, rtol=1e-4, atol=1e-5)
    conv = [randn(gen, *s, device=dev) for s in ((6, 2, 3), (3, 3, 4), (4,))]
    vecs = [randn(gen, *c.shape, device=dev) for c in conv]
    for ours, theirs in zip(_hvp(lambda *a: (AT.conv_tbc(*a, 1) ** 2).sum(), [c.to(f32) for c in conv],
                                 [u.to(f32) for u in vecs]),
                            _hvp(lambda *a: (torch.conv_tbc(*a, 1) ** 2).sum(), conv, vecs)):
        if theirs is None:
            assert ours is None or not ours.any()
        else:
            close(ours.double(), theirs, rtol=1e-4, atol=1e-4)
    s = randn(gen, 2, 2, 4, 6, device=dev)
    mask = (torch.rand(2, 1, 4, 6, generator=gen) < 0.3).to(dev)
    mask[..., 0] = False
    v = randn(gen, *s.shape, device=dev)
    weights = randn(gen, *s.shape, device=dev)
    (ours,) = _hvp(lambda a: (AT.scaled_masked_softmax(a, mask, 0.5) * weights.to(f32)).pow(2).sum(),
                   [s.to(f32)], [v.to(f32)])
    (theirs,) = _hvp(lambda a: (reference_softmax(a, mask, 0.5) * weights).pow(2).sum(), [s], [v])
    close(ours.double(), theirs, rtol=1e-4, atol=1e-5)


def test_ctc_double_backward_is_refused_as_pytorch(dev, gen):
    tg = torch.tensor([[1, 2], [3, 1]])
    for f, device in ((TF.ctc_loss, "cpu"), (AT.ctc_loss, dev)):
        lp = randn(gen, 6, 2, 5, device=device).log_softmax(-1).requires_grad_()
        (g,) = torch.autograd.grad(f(lp, tg.to(device), [6, 6], [2, 2]), [lp], create_graph=True)
        with pytest.raises(RuntimeError, match="derivative for .*ctc_loss_backward is not implemented"):
            torch.autograd.grad(g.pow(2).sum(), [lp])


def test_zloss_second_derivative_is_refused(dev, gen):
    x, t = ce_case(gen, dev)
    x.requires_grad_()
    (g,) = torch.autograd.grad(AT.cross_entropy(x, t, lse_square_scale_for_zloss=0.05), [x], create_graph=True)
    with pytest.raises(NotImplementedError, match="z-loss"):
        torch.autograd.grad(g.pow(2).sum(), [x])


# ---------------------------------------------------------------------------- 3. autocast
def test_autocast_runs_the_losses_in_float32_and_conv_tbc_in_the_autocast_dtype(dev, gen):
    """PyTorch's lists: cross_entropy, nll_loss, kl_div, ctc_loss in float32, conv_tbc in the autocast
    dtype; values against PyTorch's own ops under the same autocast."""
    low = torch.bfloat16
    x, t = ce_case(gen, dev)
    x = x.float()
    lp = randn(gen, 8, 2, 5, device=dev, dtype=torch.float32).log_softmax(-1)
    tg = torch.tensor([[1, 2], [3, 1]], device=dev)
    conv = [randn(gen, *s, device=dev, dtype=torch.float32) for s in ((6, 2, 3), (3, 3, 4), (4,))]
    s = randn(gen, 1, 2, 3, 4, device=dev, dtype=torch.float32)
    cases = [
        (lambda m: m.cross_entropy(x.to(low), t), lambda: TF.cross_entropy(x.to(low), t)),
        (lambda m: m.nll_loss(x.to(low).log_softmax(-1), t), lambda: TF.nll_loss(x.to(low).log_softmax(-1), t)),
        (lambda m: m.kl_div(x.to(low).log_softmax(-1), x.softmax(-1), reduction="batchmean"),
         lambda: TF.kl_div(x.to(low).log_softmax(-1), x.softmax(-1), reduction="batchmean")),
        # PyTorch's CPU list casts ctc_loss to float32 (its CUDA kernel takes no bfloat16: the cast made here)
        (lambda m: m.ctc_loss(lp.to(low), tg, [8, 8], [2, 2]),
         lambda: TF.ctc_loss(lp.to(low).float(), tg, [8, 8], [2, 2])),
        (lambda m: m.conv_tbc(*conv, 1), lambda: torch.conv_tbc(*conv, 1)),
    ]
    with torch.autocast(dev, dtype=low):
        for ours, theirs in cases:
            got, expected = ours(AT), theirs()
            assert got.dtype == expected.dtype
            close(got.double(), expected.double(), rtol=2e-2, atol=2e-2)
        assert AT.scaled_masked_softmax(s, None, 1.0).dtype == torch.float32    # apex's: its input's dtype
        assert AT.scaled_masked_softmax(s.to(low), None, 1.0).dtype == low
        y = x.to(low).requires_grad_()
        AT.cross_entropy(y, t).backward()
    assert y.grad.dtype == low                                        # the gradient in the input's dtype
    for name in ("ctc_loss", "cross_entropy_loss", "cross_entropy_loss_zloss", "nll_loss", "kl_div", "conv_tbc"):
        for key in ("AutocastCPU", "AutocastCUDA"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aclnn::{name}", key), (name, key)


# ---------------------------------------------------------------------------- 4. one answer per call
def _edge_cases():
    """Edge cases of the torch layer: every target ignored, an empty KL input, a fully masked softmax row,
    an empty conv_tbc output, an infeasible CTC sample with and without zero_infinity, and ordinary
    values of each (float32: the operators themselves)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 5, generator=g)
    lp = torch.randn(6, 2, 4, generator=g).log_softmax(-1)
    s = torch.randn(1, 2, 3, 5, generator=g)
    mask = torch.zeros(1, 1, 3, 5, dtype=torch.bool)
    mask[..., 1, :] = True
    conv = (torch.randn(5, 2, 3, generator=g), torch.randn(3, 3, 4, generator=g), torch.randn(4, generator=g))
    return {
        "ce all ignored": lambda: AT.cross_entropy(x, torch.full((4,), -100)),
        "ce all ignored none": lambda: AT.cross_entropy(x, torch.full((4,), -100), reduction="none"),
        "ce smoothing weight": lambda: AT.cross_entropy(x, torch.tensor([0, 4, 2, 1]), torch.rand(5, generator=g),
                                                        label_smoothing=0.2),
        "ce uint8": lambda: AT.cross_entropy(x, torch.tensor([0, 4, 2, 1], dtype=torch.uint8)),
        "nll": lambda: AT.nll_loss(x.log_softmax(-1), torch.tensor([0, 4, -100, 1])),
        **{f"kl empty {r}": (lambda r=r: AT.kl_div(torch.empty(0, 3), torch.empty(0, 3), reduction=r))
           for r in ("mean", "batchmean", "sum", "none")},
        "kl empty rows batchmean": lambda: AT.kl_div(torch.empty(3, 0), torch.empty(3, 0), reduction="batchmean"),
        "kl zero target": lambda: AT.kl_div(x, torch.zeros(4, 5), reduction="sum"),
        "softmax masked row": lambda: AT.scaled_masked_softmax(s, mask, 0.5),
        "softmax none": lambda: AT.scaled_masked_softmax(s, None, 0.5),
        "softmax -inf row": lambda: AT.scaled_masked_softmax(s.masked_fill(mask, -torch.inf), None, 1.0),
        "conv empty out": lambda: AT.conv_tbc(torch.randn(2, 2, 3, generator=g), conv[1], conv[2]),
        "conv pad": lambda: AT.conv_tbc(*conv, 2),
        "conv float64": lambda: AT.conv_tbc(*(c.double() for c in conv), 1),
        "ctc infeasible": lambda: AT.ctc_loss(lp, torch.tensor([[1, 2, 3], [1, 1, 1]]), [6, 2], [3, 3],
                                              reduction="none"),
        "ctc infeasible zeroed": lambda: AT.ctc_loss(lp, torch.tensor([[1, 2, 3], [1, 1, 1]]), [6, 2], [3, 3],
                                                     zero_infinity=True),
        "ctc uint8": lambda: AT.ctc_loss(lp, torch.tensor([[1, 2], [3, 1]], dtype=torch.uint8), [6, 6], [2, 2]),
        "ctc int16": lambda: AT.ctc_loss(lp, torch.tensor([[1, 2], [3, 1]], dtype=torch.int16), [6, 6], [2, 2]),
    }


# Finite values computed by different code on the two kinds (libm's exp and expf, NumPy's and the GEMM
# kernels' summation orders) may differ in the last float32 bits; which values are 0, NaN or +-inf,
# and everything the rules decide (empty inputs, ignored targets, masked rows, infeasible samples), may not.
ROUNDED = {"softmax masked row", "softmax none", "softmax -inf row", "conv pad", "ctc infeasible",
           "ctc infeasible zeroed", "ctc uint8", "ctc int16"}


@pytest.mark.parametrize("kind", [k for k in DEVICE_KINDS if k != "cpu"])
def test_one_answer_per_call_on_every_device_kind(kind):
    """The same call gives the same result on the cpu device and on `kind` (emulated in CI, cuda in the
    GPU check): exactly, NaN for NaN; for ROUNDED, the same 0 / NaN / inf positions exactly and the
    finite values to float32 rounding."""
    results = {}
    for each in ("cpu", kind):
        use_device(each)
        results[each] = {name: case() for name, case in _edge_cases().items()}
    for name, cpu in results["cpu"].items():
        other = results[kind][name]
        assert cpu.dtype == other.dtype and cpu.shape == other.shape, name
        if name not in ROUNDED:
            torch.testing.assert_close(other, cpu, rtol=0, atol=0, equal_nan=True, msg=name)
            continue
        for special in (torch.isnan, torch.isposinf, torch.isneginf, lambda v: v == 0):
            assert torch.equal(special(cpu), special(other)), name
        finite = torch.isfinite(cpu)
        torch.testing.assert_close(other[finite], cpu[finite], rtol=4e-6, atol=4e-6, msg=name)


def test_edge_cases_against_pytorch(dev):
    """What PyTorch gives for the edge cases where the library follows it (the departures of docs/API.md §7
    aside: "mean" with every target ignored is 0, a fully masked softmax row zeros)."""
    empty = torch.empty(0, 3, device=dev)
    for reduction in ("mean", "batchmean"):
        assert torch.isnan(AT.kl_div(empty, empty, reduction=reduction))
        assert torch.isnan(TF.kl_div(empty, empty, reduction=reduction))
    x = torch.randn(4, 5, device=dev)
    assert AT.cross_entropy(x, torch.full((4,), -100, device=dev)).item() == 0.0
    s = torch.randn(1, 1, 3, 5, device=dev)
    close(AT.scaled_masked_softmax(s, None, 0.5).double(), torch.softmax(s.double() * 0.5, -1), 1e-6, 1e-7)


def test_float64_conv_tbc_and_softmax_are_pytorch(dev, gen):
    args = [randn(gen, *s, device=dev).requires_grad_() for s in ((7, 2, 3), (3, 3, 4), (4,))]
    out = AT.conv_tbc(*args, 1)
    expected = torch.conv_tbc(*args, 1)
    close(out, expected)
    v = torch.randn(out.shape, dtype=D, generator=gen).to(dev)
    for ours, theirs in zip(torch.autograd.grad(out, args, v), torch.autograd.grad(expected, args, v)):
        close(ours, theirs)
    torch.autograd.gradcheck(lambda *a: AT.conv_tbc(*a, 2), args)
    x = randn(gen, 2, 2, 3, 5, device=dev).requires_grad_()
    close(AT.scaled_masked_softmax(x, None, 0.3), torch.softmax(x * 0.3, -1))
    torch.autograd.gradcheck(lambda a: AT.scaled_masked_softmax(a, None, 0.3), (x,))


def test_target_dtypes_pytorch_takes(dev, gen):
    x, t = ce_case(gen, dev)
    t = t.clamp(min=0)
    close(AT.cross_entropy(x, t.to(torch.uint8)), TF.cross_entropy(x, t.to(torch.uint8)))
    close(AT.nll_loss(x, t.to(torch.uint8)), TF.nll_loss(x, t.to(torch.uint8)))
    lp = randn(gen, 8, 2, 5, device=dev).log_softmax(-1)
    tg = torch.tensor([[1, 2, 4], [3, 1, 1]], device=dev)
    for dtype in (torch.uint8, torch.int16, torch.int32):
        close(AT.ctc_loss(lp, tg.to(dtype), [8, 7], [3, 2]), TF.ctc_loss(lp, tg.to(dtype), [8, 7], [3, 2]))


@pytest.mark.parametrize("input_shape,target_shape", [((3, 4), (2,)), ((3, 4, 5), (2, 5)), ((3, 4), ()),
                                                      ((3, 4, 5), (3, 6)), ((3, 4), (3, 2))])
def test_pytorch_exception_types_and_messages(input_shape, target_shape, dev):
    x, t = torch.randn(input_shape).to(dev), torch.zeros(target_shape, dtype=torch.long).to(dev)
    with pytest.raises(Exception) as theirs:
        TF.cross_entropy(x, t)
    with pytest.raises(type(theirs.value)) as ours:
        AT.cross_entropy(x, t)
    assert str(ours.value) == str(theirs.value)


# ---------------------------------------------------------------------------- vmap, jit, threads
def test_vmap_over_the_wrappers(dev, gen):
    x = randn(gen, 3, 6, 4, device=dev)
    t = torch.tensor([0, 3, 1, 2, 2, 1], device=dev)
    close(torch.func.vmap(lambda a: AT.cross_entropy(a, t))(x), torch.func.vmap(lambda a: TF.cross_entropy(a, t))(x))
    s = randn(gen, 3, 1, 2, 4, 6, device=dev)
    close(torch.func.vmap(lambda a: AT.scaled_masked_softmax(a, None, 0.5))(s), torch.softmax(s * 0.5, -1))


class _Model(torch.nn.Module):
    def __init__(self, functions):
        super().__init__()
        self.f = functions
        self.weight = torch.nn.Parameter(torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1)))
        self.bias = torch.nn.Parameter(torch.zeros(5))

    def forward(self, x, t):
        h = self.f.conv_tbc(x, self.weight, self.bias, 1)
        return self.f.cross_entropy(h.reshape(-1, 5), t)


class _Scripted(torch.nn.Module):
    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return AT.cross_entropy(x, t)


def test_jit_trace_records_the_operators(dev, gen):
    x = torch.randn(6, 2, 4, generator=gen).to(dev)
    t = torch.randint(0, 5, (12,), generator=gen).to(dev)
    model = _Model(AT).to(dev)
    traced = torch.jit.trace(model, (x, t))
    assert "aclnn::conv_tbc" in str(traced.graph) and "aclnn::cross_entropy_loss" in str(traced.graph)
    close(traced(x, t), model(x, t), 0, 0)


def test_jit_script_refuses_clearly():
    """At the wrapper, naming it and why (once per process: TorchScript keeps the half-compiled class)."""
    with pytest.raises(RuntimeError, match="aclnn_gpu.torch.cross_entropy cannot be compiled by torch.jit.script"):
        torch.jit.script(_Scripted())


def test_calls_from_several_threads_give_the_serial_answers(dev, gen):
    cases = [ce_case(gen, dev) for _ in range(8)]

    def step(x, t):
        x = x.float().requires_grad_()
        loss = AT.cross_entropy(x, t, label_smoothing=0.1)
        (g,) = torch.autograd.grad(loss, [x])
        return loss.detach(), g
    serial = [step(*c) for c in cases]
    threaded: list = [None] * len(cases)

    def work(i):
        for _ in range(5):
            threaded[i] = step(*cases[i])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for (loss, g), (tl, tg) in zip(serial, threaded):
        assert torch.equal(loss, tl) and torch.equal(g, tg)
