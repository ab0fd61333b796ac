"""aclnn_gpu.torch: every autograd wrapper against PyTorch's own operator on the cpu device, forward
values and gradients, in float64 (where the operator takes DOUBLE) and float32; torch.autograd.gradcheck
on the float64 ones; zero-copy lending; importing aclnn_gpu does not import torch."""
from __future__ import annotations

import contextlib

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from support import use_device  # noqa: E402

import aclnn_gpu.torch as AT  # noqa: E402

# (rtol, atol) of our result against PyTorch's own in the same dtype
TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (2e-5, 2e-6)}


@pytest.fixture(autouse=True)
def cpu_device():
    use_device("cpu")


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def close(actual, expected, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol * scale, atol=atol * scale)


def grads(loss_fn, inputs, grad_out=None):
    inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = loss_fn(*inputs)
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(out.dtype) \
        if grad_out is None else grad_out
    return out.detach(), torch.autograd.grad(out, inputs, g)


# ---------------------------------------------------------------------------- CTC loss
def ctc_case(dtype, gen, padded=True, infeasible=False):
    T, N, C, S = 30, 4, 7, 8
    logits = torch.randn(T, N, C, dtype=dtype, generator=gen)
    tl = torch.tensor([8, 3, 5, 0])
    il = torch.tensor([30, 22, 25, 9])
    if infeasible:
        tl[1], il[1] = 8, 6                      # target longer than the input: infinite loss
    targets = torch.randint(1, C, (N, S), generator=gen)
    if not padded:
        targets = torch.cat([targets[n, :tl[n]] for n in range(N)])
    return logits, targets, il, tl


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("padded", [True, False])
def test_ctc_loss_matches_torch(dtype, reduction, padded, gen):
    logits, targets, il, tl = ctc_case(dtype, gen, padded)
    ours = grads(lambda z: AT.ctc_loss(z.log_softmax(-1), targets, il, tl, 0, reduction), [logits])
    theirs = grads(lambda z: TF.ctc_loss(z.log_softmax(-1), targets, il, tl, 0, reduction), [logits])
    close(ours[0], theirs[0], dtype, 10)
    close(ours[1][0], theirs[1][0], dtype, 10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_infinite_sample(dtype, zero_infinity, gen):
    """An infeasible sample: the wrapper keeps the raw (inf) loss for the backward, so with zero_infinity
    the loss AND the gradient of that sample are zero, as in PyTorch."""
    logits, targets, il, tl = ctc_case(dtype, gen, infeasible=True)
    ours = grads(lambda z: AT.ctc_loss(z.log_softmax(-1), targets, il, tl, 0, "none", zero_infinity), [logits])
    theirs = grads(lambda z: TF.ctc_loss(z.log_softmax(-1), targets, il, tl, 0, "none", zero_infinity), [logits])
    close(ours[0], theirs[0], dtype, 10)
    if zero_infinity:
        assert ours[0][1] == 0 and (ours[1][0][:, 1] == 0).all()
        close(ours[1][0], theirs[1][0], dtype, 10)
    else:
        assert ours[0][1] == float("inf")
        finite = [0, 2, 3]                       # torch's gradient of the infinite sample is NaN / inf
        close(ours[1][0][:, finite], theirs[1][0][:, finite], dtype, 10)


def test_ctc_loss_gradcheck(gen):
    logits, targets, il, tl = ctc_case(torch.float64, gen)
    logits = logits[:10, :2, :4].clone().requires_grad_(True)
    targets, il, tl = targets[:2, :3].clamp(max=3), torch.tensor([10, 8]), torch.tensor([3, 2])
    assert torch.autograd.gradcheck(lambda z: AT.ctc_loss(z.log_softmax(-1), targets, il, tl, reduction="sum"),
                                    (logits,))


def test_ctc_loss_unbatched_and_lists(gen):
    logits, targets, il, tl = ctc_case(torch.float64, gen)
    lp = logits[:, 0].log_softmax(-1)
    ours = AT.ctc_loss(lp, targets[0, :8], 30, 8, reduction="none")
    theirs = TF.ctc_loss(lp, targets[0, :8], torch.tensor(30), torch.tensor(8), reduction="none")
    close(ours, theirs, torch.float64)
    lp = logits.log_softmax(-1)
    close(AT.ctc_loss(lp, targets, il.tolist(), tl.tolist()), TF.ctc_loss(lp, targets, il, tl), torch.float64)


# ---------------------------------------------------------------------------- cross-entropy
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_matches_torch(dtype, reduction, weighted, label_smoothing, gen):
    N, C = 16, 11
    x = torch.randn(N, C, dtype=dtype, generator=gen) * 3
    t = torch.randint(0, C, (N,), generator=gen)
    t[3] = t[9] = -100
    # the operator takes a float32 weight: use values float32 represents exactly
    w = torch.rand(C, generator=gen).to(torch.float32).to(dtype) if weighted else None
    ours = grads(lambda z: AT.cross_entropy(z, t, w, reduction=reduction, label_smoothing=label_smoothing), [x])
    theirs = grads(lambda z: TF.cross_entropy(z, t, w, reduction=reduction, label_smoothing=label_smoothing), [x])
    close(ours[0], theirs[0], dtype, 5)
    close(ours[1][0], theirs[1][0], dtype, 5)


def test_cross_entropy_shapes(gen):
    x = torch.randn(3, 5, 4, 2, dtype=torch.float64, generator=gen)
    t = torch.randint(0, 5, (3, 4, 2), generator=gen)
    for reduction in ("none", "mean"):
        ours = grads(lambda z: AT.cross_entropy(z, t, reduction=reduction), [x])
        theirs = grads(lambda z: TF.cross_entropy(z, t, reduction=reduction), [x])
        assert ours[0].shape == theirs[0].shape
        close(ours[0], theirs[0], torch.float64)
        close(ours[1][0], theirs[1][0], torch.float64)
    x1, t1 = x[0, :, 0, 0], t[0, 0, 0]
    close(AT.cross_entropy(x1, t1), TF.cross_entropy(x1, t1), torch.float64)


def test_cross_entropy_gradcheck(gen):
    x = torch.randn(5, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    t = torch.tensor([0, 3, -100, 1, 2])
    w = torch.tensor([0.5, 1.0, 2.0, 0.25], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda z: AT.cross_entropy(z, t, w, label_smoothing=0.1), (x,))


# ---------------------------------------------------------------------------- KL divergence
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(dtype, reduction, log_target, gen):
    x = torch.randn(6, 9, dtype=dtype, generator=gen).log_softmax(-1)
    t = torch.randn(6, 9, dtype=dtype, generator=gen).softmax(-1)
    t = t.log() if log_target else t
    ours = grads(lambda z: AT.kl_div(z, t, reduction=reduction, log_target=log_target), [x])
    with pytest.warns(UserWarning) if reduction == "mean" else _no_warning():
        theirs = grads(lambda z: TF.kl_div(z, t, reduction=reduction, log_target=log_target), [x])
    close(ours[0], theirs[0], dtype, 5)
    close(ours[1][0], theirs[1][0], dtype, 5)


def test_kl_div_broadcast_and_gradcheck(gen):
    x = torch.randn(4, 1, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    t = torch.rand(4, 3, 5, dtype=torch.float64, generator=gen)
    ours = grads(lambda z: AT.kl_div(z, t, reduction="sum"), [x])
    theirs = grads(lambda z: TF.kl_div(z, t, reduction="sum"), [x])
    close(ours[0], theirs[0], torch.float64)
    close(ours[1][0], theirs[1][0], torch.float64)
    assert torch.autograd.gradcheck(lambda z: AT.kl_div(z, t, reduction="batchmean"), (x,))


def test_kl_div_refuses_target_grad(gen):
    t = torch.rand(2, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="target"):
        AT.kl_div(torch.randn(2, 3, dtype=torch.float64), t)


# ---------------------------------------------------------------------------- ConvTBC
@pytest.mark.parametrize("pad", [0, 1, 2])
def test_conv_tbc_matches_torch(pad, gen):
    x = torch.randn(17, 3, 6, generator=gen)
    w = torch.randn(3, 6, 5, generator=gen) * 0.3
    b = torch.randn(5, generator=gen)
    ours = grads(lambda *a: AT.conv_tbc(*a, pad=pad), [x, w, b])
    theirs = grads(lambda *a: torch.conv_tbc(*a, pad), [x, w, b])
    close(ours[0], theirs[0], torch.float32, 5)
    for a, e in zip(ours[1], theirs[1]):
        close(a, e, torch.float32, 5)
    # and against PyTorch in float64 (the operator computes in fp32)
    exact = grads(lambda *a: torch.conv_tbc(*a, pad), [x.double(), w.double(), b.double()])
    close(ours[0].double(), exact[0], torch.float32, 5)


def test_conv_tbc_partial_grads_and_float64(gen):
    """A gradient for the input only; float64 (which aclnnConvTbc refuses) computed by the torch layer."""
    x = torch.randn(8, 2, 3, generator=gen, requires_grad=True)
    w, b = torch.randn(2, 3, 4, generator=gen), torch.randn(4, generator=gen)
    (gx,) = torch.autograd.grad(AT.conv_tbc(x, w, b).sum(), [x])
    close(gx, torch.autograd.grad(torch.conv_tbc(x, w, b, 0).sum(), [x])[0], torch.float32)
    args = [x.double(), w.double(), b.double()]
    ours, theirs = grads(lambda *a: AT.conv_tbc(*a, 1), args), grads(lambda *a: torch.conv_tbc(*a, 1), args)
    close(ours[0], theirs[0], torch.float64)
    for mine, exact in zip(ours[1], theirs[1]):
        close(mine, exact, torch.float64)


# ---------------------------------------------------------------------------- scaled masked softmax
def torch_smsm(x, mask, scale, causal):
    s1, s2 = x.shape[-2:]
    full = torch.zeros(x.shape, dtype=torch.bool) if mask is None else mask.expand(x.shape)
    if causal:
        full = full | torch.ones(s1, s2, dtype=torch.bool).triu(1)
    y = (x.double() * scale).masked_fill(full, float("-inf")).softmax(-1)
    return torch.nan_to_num(y, nan=0.0).to(x.dtype)     # fully masked rows: zeros, like the operator


def smsm(z, mask, scale, causal):
    """The apex-shaped wrappers, and the operator's mask + causal combination (which apex has no call
    for) through the Function itself."""
    if not causal:
        return AT.scaled_masked_softmax(z, mask, scale)
    if mask is None:
        return AT.scaled_upper_triang_masked_softmax(z, None, scale)
    return AT.ScaledMaskedSoftmaxFunction.apply(z, mask, scale, True, None)


@pytest.mark.parametrize("mask_shape,causal", [((2, 3, 8, 16), False), ((2, 1, 8, 16), False),
                                               ((1, 1, 8, 16), True), (None, True)])
def test_scaled_masked_softmax_matches_torch(mask_shape, causal, gen):
    x = torch.randn(2, 3, 8, 16, generator=gen)
    mask = None if mask_shape is None else torch.rand(mask_shape, generator=gen) < 0.3
    if mask is not None:
        mask[..., 2, :] = True                         # one fully masked row
    ours = grads(lambda z: smsm(z, mask, 0.7, causal), [x])
    theirs = grads(lambda z: torch_smsm(z, mask, 0.7, causal), [x.double()])
    close(ours[0].double(), theirs[0], torch.float32, 5)
    close(ours[1][0].double(), theirs[1][0], torch.float32, 5)


# ---------------------------------------------------------------------------- plumbing
def test_results_are_torch_tensors_on_the_input_device(gen):
    x = torch.randn(4, 5, generator=gen, requires_grad=True)
    loss = AT.cross_entropy(x, torch.tensor([0, 1, 2, 3]))
    assert isinstance(loss, torch.Tensor) and loss.shape == () and loss.device == x.device
    loss.backward()
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype


@pytest.mark.parametrize("cached", [False, True])
def test_cpu_tensors_are_lent_without_copies(gen, monkeypatch, cached):
    """On the cpu device the operator reads the torch tensor's own memory: functional's copy path is
    never taken for contiguous or strided torch CPU tensors, whether a call describes them (the
    uncached path) or runs a cached plan on them (call_cache: a signature's second call)."""
    from aclnn_gpu.functional import cache as call_cache
    from aclnn_gpu.functional.call import Call
    read = []
    original = Call._describe if not cached else call_cache.bytes_of
    if cached:
        monkeypatch.setattr(call_cache, "bytes_of", lambda a: read.append(a.ctypes.data) or original(a))
    else:
        monkeypatch.setattr(Call, "_describe",
                            lambda self, address, *rest: read.append(address) or original(self, address, *rest))
    x = torch.randn(6, 2, 4, generator=gen, requires_grad=True)
    w = torch.randn(3, 4, 5, generator=gen, requires_grad=True)
    b = torch.randn(5, generator=gen, requires_grad=True)
    lp = torch.randn(10, 4, generator=gen).log_softmax(-1)[:, ::2]     # a strided view
    t = torch.rand(10, 2, generator=gen)

    def calls():
        AT.conv_tbc(x, w, b, 1).sum().backward()
        AT.kl_div(lp.requires_grad_(), t, reduction="sum").backward()

    with call_cache.disabled() if not cached else contextlib.nullcontext():
        calls()
        hits = call_cache.cache.hits
        calls()
    assert call_cache.cache.hits > hits or not cached
    for tensor in (x, w, b, lp):
        assert tensor.data_ptr() in read, "a torch CPU tensor was copied instead of lent"


def test_importing_aclnn_gpu_does_not_import_torch():
    code = "import sys, aclnn_gpu, aclnn_gpu.functional; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------- autograd edges
def _wrapper_cases(gen):
    x = torch.randn(3, 4, dtype=torch.float64, generator=gen)
    kl_target = torch.rand(3, 4, dtype=torch.float64, generator=gen)
    logits, targets, il, tl = ctc_case(torch.float64, gen)
    return [
        ("ctc_loss", lambda z: AT.ctc_loss(z.log_softmax(-1), targets, il, tl), logits),
        ("cross_entropy", lambda z: AT.cross_entropy(z, torch.tensor([0, 1, 3])), x),
        ("kl_div", lambda z: AT.kl_div(z, kl_target, reduction="sum"), x),
        ("conv_tbc", lambda z: AT.conv_tbc(z.float().reshape(3, 1, 4), torch.ones(2, 4, 2), torch.zeros(2)).sum(),
         x),
        ("scaled_masked_softmax", lambda z: (AT.scaled_upper_triang_masked_softmax(z.float().reshape(1, 3, 4), None, 1.0)
                                             ** 2).sum(), x),
    ]


def test_create_graph_changes_no_value_and_ctc_refuses_double_backward(gen):
    """create_graph=True gives the same first derivative; a second derivative exists for every operator but
    CTC (tests/test_torch_rules.py checks them against PyTorch), whose double backward raises as
    PyTorch's (_ctc_loss_backward has no derivative) instead of dropping terms."""
    for name, loss_fn, x in _wrapper_cases(gen):
        z = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss_fn(z), [z], create_graph=True)
        (plain,) = torch.autograd.grad(loss_fn(z), [z])         # create_graph changes no value
        assert torch.equal(g.detach(), plain), name
        if name != "ctc_loss":
            continue
        with pytest.raises(RuntimeError, match="derivative for aclnn::ctc_loss_backward is not implemented"):
            torch.autograd.grad((g ** 2).sum(), [z])          # what a Hessian or gradient penalty does
        with pytest.raises(RuntimeError, match="derivative for aclnn::ctc_loss_backward is not implemented"):
            torch.autograd.functional.hessian(loss_fn, x)


@pytest.mark.parametrize("shape,pad", [((2, 1, 3), 0), ((5, 0, 3), 1)], ids=["Tout=0", "B=0"])
def test_conv_tbc_empty_output_backward(shape, pad, gen):
    """An empty output (the operator refuses an empty output gradient) gives zero gradients, as PyTorch."""
    x = torch.randn(shape, generator=gen, requires_grad=True)
    w = torch.randn(3, 3, 4, generator=gen, requires_grad=True)
    b = torch.randn(4, generator=gen, requires_grad=True)
    AT.conv_tbc(x, w, b, pad).sum().backward()
    for t in (x, w, b):
        assert t.grad is not None and t.grad.shape == t.shape and not t.grad.any()


def test_conv_tbc_shapes_cann_refuses_give_pytorchs_answer(gen):
    """T + pad < K with Tout >= 1: aclnnConvTbc refuses it (CANN's forward rule), torch.conv_tbc computes
    it; the torch layer gives PyTorch's values and gradients."""
    x = torch.randn(1, 2, 3, generator=gen, dtype=torch.float32)
    w = torch.randn(3, 3, 4, generator=gen)
    b = torch.randn(4, generator=gen)
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    y, ey = AT.conv_tbc(*ours, 1), torch.conv_tbc(*ref, 1)
    assert y.shape == ey.shape == (1, 2, 4)
    torch.testing.assert_close(y, ey)
    g = torch.randn(y.shape, generator=gen)
    y.backward(g)
    ey.backward(g)
    for a, e in zip(ours, ref):
        torch.testing.assert_close(a.grad, e.grad)


def test_non_tensor_arguments_raise_type_error():
    import numpy as np
    with pytest.raises(TypeError, match="conv_tbc: bias must be a torch.Tensor"):
        AT.conv_tbc(torch.ones(4, 1, 2), torch.ones(3, 2, 2), None)
    with pytest.raises(TypeError, match="kl_div: input must be a torch.Tensor"):
        AT.kl_div(np.ones(3), torch.ones(3))


def test_inputs_not_kept_alive_and_in_place_changes_allowed(gen):
    """cross_entropy and scaled_masked_softmax keep what their backward reads (log_prob, y), not
    their input: the input may be freed or changed in place after the forward, as with PyTorch's."""
    import weakref
    x = torch.randn(4, 5, generator=gen, requires_grad=True)
    logits = x * 2
    loss = AT.cross_entropy(logits, torch.tensor([0, 1, 2, 3]))
    logits.add_(1)                                    # no "modified by an inplace operation"
    loss.backward()
    s = torch.randn(1, 1, 3, 4, generator=gen, requires_grad=True)
    scores = s * 1.0
    alive = weakref.ref(scores)
    y = AT.scaled_upper_triang_masked_softmax(scores, None, 1.0)
    del scores
    assert alive() is None
    y.sum().backward()


# ---------------------------------------------------------------------------- PyTorch's signatures
def _pytorch_counterparts():
    import torch.nn.functional as TF
    return {"ctc_loss": TF.ctc_loss, "cross_entropy": TF.cross_entropy, "nll_loss": TF.nll_loss,
            "kl_div": TF.kl_div}


@pytest.mark.parametrize("name", ["ctc_loss", "cross_entropy", "nll_loss", "kl_div"])
def test_signature_is_pytorch_own(name):
    """Same parameter names, order, kinds and defaults as torch.nn.functional: a model switches by
    changing one import."""
    import inspect
    ours, theirs = inspect.signature(getattr(AT, name)), inspect.signature(_pytorch_counterparts()[name])
    mine = [(p.name, p.kind, p.default) for p in ours.parameters.values()]
    if name == "cross_entropy":   # + one keyword-only parameter beyond PyTorch's (CANN's z-loss, docs/API.md §6)
        assert mine.pop() == ("lse_square_scale_for_zloss", inspect.Parameter.KEYWORD_ONLY, 0.0)
    assert mine == [(p.name, p.kind, p.default) for p in theirs.parameters.values()]


def test_conv_tbc_and_softmax_signatures():
    """torch.conv_tbc(input, weight, bias, pad=0) (a builtin: no inspect.signature, so its documented
    schema) and apex's scaled_masked_softmax(inputs, mask, scale) /
    scaled_upper_triang_masked_softmax(inputs, _, scale)."""
    import inspect

    def shape(f):
        return [(p.name, p.default) for p in inspect.signature(f).parameters.values()]
    assert "conv_tbc(Tensor self, Tensor weight, Tensor bias, int pad=0)" in str(torch.ops.aten.conv_tbc.default._schema)
    assert shape(AT.conv_tbc) == [("input", inspect.Parameter.empty), ("weight", inspect.Parameter.empty),
                                  ("bias", inspect.Parameter.empty), ("pad", 0)]
    x, w, b = torch.randn(6, 2, 3), torch.randn(3, 3, 4), torch.randn(4)
    close(AT.conv_tbc(input=x, weight=w, bias=b, pad=1), torch.conv_tbc(input=x, weight=w, bias=b, pad=1),
          torch.float32)
    empty = inspect.Parameter.empty
    assert shape(AT.scaled_masked_softmax) == [("inputs", empty), ("mask", empty), ("scale", empty)]
    assert shape(AT.scaled_upper_triang_masked_softmax) == [("inputs", empty), ("_", empty), ("scale", empty)]


def test_keyword_calls_of_pytorch_code_run_unchanged(gen):
    """Calls written for torch.nn.functional, keywords included, give PyTorch's values."""
    x = torch.randn(5, 4, dtype=torch.float64, generator=gen)
    t = torch.tensor([0, 3, 1, -100, 2])
    w = torch.rand(4, generator=gen).double()          # float32 values: the operator's weight is float32
    for f in ("cross_entropy", "nll_loss"):
        inp = x if f == "cross_entropy" else x.log_softmax(-1)
        kwargs = dict(weight=w, ignore_index=-100, reduction="sum")
        close(getattr(AT, f)(inp, t, **kwargs), getattr(TF, f)(inp, t, **kwargs), torch.float64)
    p = torch.rand(5, 4, dtype=torch.float64, generator=gen)
    close(AT.kl_div(x.log_softmax(-1), p, reduction="batchmean", log_target=False),
          TF.kl_div(x.log_softmax(-1), p, reduction="batchmean", log_target=False), torch.float64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_matches_torch_on_any_input(dtype, reduction, gen):
    """nll_loss's gradient is NLL's own (-weight at the target), also for input that is not normalised
    log-probabilities, and for (N, C, d) input."""
    x = torch.randn(3, 5, 2, dtype=dtype, generator=gen)
    t = torch.tensor([[0, 4], [-100, 2], [1, 1]])
    w = torch.rand(5, dtype=torch.float32, generator=gen)
    ours = grads(lambda z: AT.nll_loss(z, t, w, reduction=reduction), [x])
    theirs = grads(lambda z: TF.nll_loss(z, t, w.to(dtype), reduction=reduction), [x])
    close(ours[0], theirs[0], dtype)
    close(ours[1][0], theirs[1][0], dtype)


def test_pytorch_errors_are_raised_as_pytorch_raises_them():
    x = torch.randn(3, 5)
    for f in (AT.cross_entropy, AT.nll_loss):
        with pytest.raises(IndexError, match="Target 9 is out of bounds"):
            f(x, torch.tensor([0, 9, 1]))
        with pytest.raises(IndexError, match="Target -3 is out of bounds"):
            f(x, torch.tensor([0, -3, 1]))
        f(x, torch.tensor([0, -3, 1]), ignore_index=-3)                  # ignored: no error
        with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
            f(x, torch.tensor([0, 1, 1]), reduction="bad")
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        AT.kl_div(x.log_softmax(-1), x.softmax(-1), reduction="bad")
    lp = torch.randn(10, 2, 5).log_softmax(-1)
    tg = torch.tensor([[1, 2], [1, 2]])
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        AT.ctc_loss(lp, tg, torch.tensor([10.0, 10.0]), torch.tensor([2, 2]))
    with pytest.raises(RuntimeError, match="target_lengths must be integral"):
        AT.ctc_loss(lp, tg, torch.tensor([10, 10]), torch.tensor([2.0, 2.0]))
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        AT.ctc_loss(lp, tg, [10, 10], [2, 2], reduction="bad")


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize("size_average,reduce", [(None, False), (True, None), (False, True), (True, True)])
def test_deprecated_size_average_and_reduce_as_pytorch(size_average, reduce, gen):
    x = torch.randn(4, 3, dtype=torch.float64, generator=gen)
    t = torch.tensor([0, 2, 1, 1])
    for f in ("cross_entropy", "nll_loss"):
        close(getattr(AT, f)(x, t, size_average=size_average, reduce=reduce),
              getattr(TF, f)(x, t, size_average=size_average, reduce=reduce), torch.float64)
    p = torch.rand(4, 3, dtype=torch.float64, generator=gen)
    close(AT.kl_div(x, p, size_average, reduce), TF.kl_div(x, p, size_average, reduce), torch.float64)


def test_conv_tbc_precision_follows_pytorch_setting(monkeypatch):
    """The cubeMathType the operator is given is PyTorch's float32 matmul precision, mapped."""
    import aclnn_gpu.functional as F
    seen = []
    real = F.conv_tbc
    monkeypatch.setattr(F, "conv_tbc", lambda *a: seen.append(a[-1]) or real(*a))
    before = torch.get_float32_matmul_precision()
    try:
        for precision in ("highest", "high", "medium"):
            torch.set_float32_matmul_precision(precision)
            AT.conv_tbc(torch.ones(4, 1, 2), torch.ones(3, 2, 2), torch.ones(2))
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == [0, 1, 1]
