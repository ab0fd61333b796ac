"""aclnnScaledMaskedSoftmaxBackward / aclnnScaledMaskedSoftmax through the two-phase API on the cpu
and emulated devices against PyTorch CPU in float64 (autograd for the forward's gradient), plus the
bad-input table, phase-2 checks and the functional layer. Shapes and values are drawn fresh; the
seed is printed and attached to failing reports."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import aclnn_gpu as acl
import aclnn_gpu.functional as F
from aclnn_gpu.base import dtypes
from support import assert_refused, near_end

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16
DTYPES = [F32, F16, BF16]
RTOL = {F32: 1e-5, F16: 2 ** -10, BF16: 2 ** -7}
MASK_FORMS = ["none", "full", "b1", "1n", "11"]
BWD = (acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, acl.aclnnScaledMaskedSoftmaxBackward)
FWD = (acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax)


# ------------------------------------------------------------------------------------ references
def triu(S1, S2):
    return np.arange(S2)[None, :] > np.arange(S1)[:, None]


def effective(mask, shape, causal):
    m = np.zeros((1, 1) + tuple(shape[-2:]), bool) if mask is None else mask
    m = m | triu(*shape[-2:]) if causal else m
    return torch.from_numpy(np.broadcast_to(m, shape).copy())


def torch_forward(x, mask, scale, causal, grad=None):
    """y = masked softmax(scale * x) in float64 (fully masked rows 0); with `grad`, also d/dx by autograd."""
    m = effective(mask, x.shape, causal)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    y = torch.softmax((xt * scale).masked_fill(m, -float("inf")), dim=-1)
    y = torch.where(m.all(dim=-1, keepdim=True), torch.zeros_like(y), y)
    if grad is None:
        return y.detach().numpy()
    y.backward(torch.tensor(grad.astype(np.float64)))
    return y.detach().numpy(), xt.grad.masked_fill(m, 0.0).numpy()


def torch_backward(g, y, mask, scale, causal):
    """PyTorch's softmax backward on the given (rounded) y in float64, times scale, 0 where masked."""
    m = effective(mask, g.shape, causal)
    out = torch._softmax_backward_data(torch.tensor(g.astype(np.float64)), torch.tensor(y.astype(np.float64)),
                                       -1, torch.float64) * scale
    return out.masked_fill(m, 0.0).numpy()


def cancel_bound(g, y, scale):
    """scale * |y| * (|g| + sum |g y|): what fp32 rounding of the terms of y * (g - dot) scales with."""
    g64, y64 = np.abs(g.astype(np.float64)), np.abs(y.astype(np.float64))
    return abs(scale) * y64 * (g64 + (g64 * y64).sum(-1, keepdims=True)) * 0.1


def check(got, expected, dtype, what="", factor=2.0, bound=0.0):
    """Within a few roundings of the output dtype, relative to the element and to the row's scale
    (`bound`: the size of the terms that cancel, for the backward's y * (g - dot)), or within the
    dtype's subnormal spacing (the rounding of a result below the normal range is absolute: up to
    3e-8 in float16)."""
    got64 = np.asarray(got, np.float64)
    assert got64.shape == expected.shape, (got64.shape, expected.shape)
    assert not np.isnan(got64).any(), f"NaN in the output (unwritten element?) {what}"
    rtol = RTOL[np.dtype(dtype)] * factor
    row = np.abs(expected).max(axis=-1, keepdims=True) if expected.size else 0
    spacing = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    np.testing.assert_array_less(np.abs(got64 - expected), rtol * (np.abs(expected) + row + bound) + spacing,
                                 err_msg=what)


def make_mask(rng, form, B, N, S1, S2, fully_masked=True):
    if form == "none":
        return None
    shape = {"full": (B, N), "b1": (B, 1), "1n": (1, N), "11": (1, 1)}[form] + (S1, S2)
    m = rng.random(shape) < rng.uniform(0.1, 0.6)
    if fully_masked and rng.integers(0, 2):
        m[..., rng.integers(S1), :] = True
    return m


def softmax_inputs(rng, shape, mask, dtype, causal=False):
    """g and a genuine softmax y (rows sum to 1, 0 where masked) in `dtype`."""
    x = rng.standard_normal(shape) * 2
    y = torch_forward(x, mask, 1.0, causal).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    return g, y


def random_shape(rng, max_s2=70):
    return (int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, max_s2)))


def run_backward(s, g, y, mask, scale, causal, out_dtype=None, strided=(False, False, False, False)):
    out = s.poisoned(g.shape, out_dtype or g.dtype, strided=strided[3])
    mt = None if mask is None else s.tensor(mask, strided=strided[2], offset=5)
    status = s.run(*BWD, s.tensor(g, strided=strided[0], offset=1), s.tensor(y, strided=strided[1]), mt, scale,
                   causal, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(out)


def run_forward(s, x, mask, scale, causal, strided=(False, False, False)):
    out = s.poisoned(x.shape, x.dtype, strided=strided[2])
    mt = None if mask is None else s.tensor(mask, strided=strided[1], offset=3)
    status = s.run(*FWD, s.tensor(x, strided=strided[0], offset=2), mt, scale, causal, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(out)


# ------------------------------------------------------------------------------------ backward
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_backward_random(session, rng, dtype, scale):
    for form in MASK_FORMS:
        shape = random_shape(rng)
        causal = form == "none" or bool(rng.integers(0, 4) == 0)
        mask = make_mask(rng, form, *shape)
        g, y = softmax_inputs(rng, shape, mask, dtype, causal)
        strided = tuple(bool(v) for v in rng.integers(0, 2, 4))
        got = run_backward(session, g, y, mask, scale, causal, strided=strided)
        check(got, torch_backward(g, y, mask, scale, causal), dtype, f"{shape} {form} {causal} {strided}", bound=cancel_bound(g, y, scale))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("S2", [1, 31, 32, 33, 1000, 5000, 20000])
def test_backward_lengths(session, rng, dtype, S2):
    shape = (1, 2, 2, S2)
    mask = make_mask(rng, "1n", *shape, fully_masked=False)
    g, y = softmax_inputs(rng, shape, mask, dtype)
    scale = float(rng.choice([1.0, 0.125]))
    check(run_backward(session, g, y, mask, scale, False), torch_backward(g, y, mask, scale, False), dtype, f"{S2}", bound=cancel_bound(g, y, scale))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_unaligned_and_arbitrary_y(session, rng, dtype):
    """y need not be a softmax (the formula is applied as is); odd offsets take the scalar path."""
    shape = (2, 1, 3, 40)
    mask = make_mask(rng, "b1", *shape)
    g = rng.standard_normal(shape).astype(dtype)
    y = rng.standard_normal(shape).astype(dtype)
    got = run_backward(session, g, y, mask, 0.5, False)
    expected = torch_backward(g, y, mask, 0.5, False)
    tol = RTOL[dtype] * 4 * (np.abs(expected) + np.abs(y.astype(np.float64)) * np.abs(g.astype(np.float64) * y).sum(
        -1, keepdims=True))
    np.testing.assert_array_less(np.abs(got.astype(np.float64) - expected), tol + 1e-30)


# ------------------------------------------------------------------------------------ forward
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_forward_random(session, rng, dtype, scale):
    for form in MASK_FORMS:
        shape = random_shape(rng)
        causal = form == "none" or bool(rng.integers(0, 4) == 0)
        mask = make_mask(rng, form, *shape)
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        strided = tuple(bool(v) for v in rng.integers(0, 2, 3))
        got = run_forward(session, x, mask, scale, causal, strided)
        check(got, torch_forward(x, mask, scale, causal), dtype, f"{shape} {form} {causal} {strided}")


@pytest.mark.parametrize("S2", [1, 31, 32, 33, 1000, 5000, 20000])
def test_forward_lengths(session, rng, S2):
    shape = (2, 1, 2, S2)
    mask = make_mask(rng, "b1", *shape, fully_masked=False)
    for dtype in (F32, BF16):
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        check(run_forward(session, x, mask, 0.125, False), torch_forward(x, mask, 0.125, False), dtype, f"{S2}")


def test_forward_then_backward_autograd(session, rng):
    """Our forward, then our backward on its output, against PyTorch autograd d/dx (float32)."""
    shape = (2, 3, 4, 37)
    mask = make_mask(rng, "1n", *shape)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    y = run_forward(session, x, mask, 0.125, True)
    y64, dx = torch_forward(x, mask, 0.125, True, grad=g)
    check(y, y64, F32)
    check(run_backward(session, g, y, mask, 0.125, True), dx, F32, factor=8)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_fully_masked_rows(session, rng, dtype):
    shape = (2, 2, 3, 33)
    mask = np.zeros((2, 1, 3, 33), bool)
    mask[:, :, 1] = True                     # row 1 of every slice fully masked
    mask[1, :, 2, ::2] = True
    x = rng.standard_normal(shape).astype(dtype)
    y = run_forward(session, x, mask, 1.0, False)
    assert (y[:, :, 1] == 0).all() and not np.isnan(y.astype(np.float64)).any()
    check(y, torch_forward(x, mask, 1.0, False), dtype)
    g = rng.standard_normal(shape).astype(dtype)
    yr = rng.random(shape).astype(dtype)     # even a non-zero y gives exact zeros where masked
    out = run_backward(session, g, yr, mask, 0.125, False)
    assert (out[:, :, 1] == 0).all() and (out[1, :, 2, ::2] == 0).all()


# ------------------------------------------------------------------------------------ fixTriuMask
@pytest.mark.parametrize("dims", [(5, 5), (4, 9), (9, 4), (3, 1000)])
def test_fix_triu_mask_vs_explicit(session, rng, dims):
    S1, S2 = dims
    shape = (2, 2, S1, S2)
    causal = np.broadcast_to(triu(S1, S2), (1, 1, S1, S2)).copy()
    x = rng.standard_normal(shape).astype(np.float32)
    g, y = softmax_inputs(rng, shape, causal, F32)
    # mask None + fixTriuMask == explicit causal mask
    assert np.array_equal(run_forward(session, x, None, 0.5, True), run_forward(session, x, causal, 0.5, False))
    assert np.array_equal(run_backward(session, g, y, None, 0.5, True),
                          run_backward(session, g, y, causal, 0.5, False))
    # a mask + fixTriuMask == mask | causal
    mask = make_mask(rng, "b1", *shape)
    both = mask | causal
    assert np.array_equal(run_forward(session, x, mask, 0.5, True), run_forward(session, x, both, 0.5, False))
    assert np.array_equal(run_backward(session, g, y, mask, 0.5, True), run_backward(session, g, y, both, 0.5, False))
    check(run_backward(session, g, y, mask, 0.5, True), torch_backward(g, y, mask, 0.5, True), F32, bound=cancel_bound(g, y, 0.5))


# ------------------------------------------------------------------------------------ strided views
def _expanded_mask(s, mask, B, N):
    """A (B, N, S1, S2) view of a (1, 1, S1, S2) mask with stride-0 leading dims."""
    t = s.tensor(mask)
    S1, S2 = mask.shape[-2:]
    v = acl.aclCreateTensor((B, N, S1, S2), acl.ACL_BOOL, (0, 0, S2, 1), 0, acl.ACL_FORMAT_ND, (S1 * S2,), t.data)
    s.tensors.append(v)
    return v


@pytest.mark.parametrize("dtype", [F16, BF16], ids=lambda d: d.name)
def test_strided_everything(session, rng, dtype):
    shape = (2, 3, 4, 24)
    mask = make_mask(rng, "full", *shape)
    g, y = softmax_inputs(rng, shape, mask, dtype)
    got = run_backward(session, g, y, mask, 0.125, False, strided=(True, True, True, True))
    check(got, torch_backward(g, y, mask, 0.125, False), dtype, bound=cancel_bound(g, y, 0.125))
    x = rng.standard_normal(shape).astype(dtype)
    check(run_forward(session, x, mask, 0.125, False, (True, True, True)), torch_forward(x, mask, 0.125, False), dtype)


def test_expanded_mask_view(session, rng):
    """A stride-0 expanded mask is read in place as a broadcast mask (no staging needed)."""
    s = session
    shape = (2, 3, 4, 16)
    m = make_mask(rng, "11", *shape)
    g, y = softmax_inputs(rng, shape, m, F32)
    out = s.poisoned(shape, F32)
    status, ws, ex = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(
        s.tensor(g), s.tensor(y), _expanded_mask(s, m, 2, 3), 0.125, False, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert ws == 0
    assert acl.aclnnScaledMaskedSoftmaxBackward(None, 0, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    check(s.read(out), torch_backward(g, y, m, 0.125, False), F32, bound=cancel_bound(g, y, 0.125))


def test_empty(session):
    s = session
    for shape in [(0, 2, 3, 4), (2, 2, 3, 0), (2, 0, 0, 4)]:
        e = np.zeros(shape, np.float16)
        m = np.zeros((1, 1) + shape[2:], bool)
        status, ws, ex = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(s.tensor(e), s.tensor(e), s.tensor(m),
                                                                              1.0, False, s.tensor(e))
        assert (status, ws) == (0, 0), acl.aclGetRecentErrMsg()
        assert acl.aclnnScaledMaskedSoftmaxBackward(None, 0, ex, s.stream) == 0
        status, ws, ex = acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize(s.tensor(e), None, 1.0, True, s.tensor(e))
        assert (status, ws) == (0, 0), acl.aclGetRecentErrMsg()
        assert acl.aclnnScaledMaskedSoftmax(None, 0, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0


# ------------------------------------------------------------------------------------ bad inputs
SHAPE = (2, 3, 4, 5)


def _bad_cases():
    """(name, builder returning GetWorkspaceSize kwargs, expected status). `s` is the session."""

    def ok(s, **change):
        args = dict(gradOutput=s.tensor(np.ones(SHAPE, F32)), y=s.tensor(np.ones(SHAPE, F32)),
                    mask=s.tensor(np.zeros((2, 1, 4, 5), bool)), scale=0.5, fixTriuMask=False,
                    out=s.poisoned(SHAPE, F32))
        args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
        return args

    def t(shape, dtype=F32, **kw):
        return lambda s: s.tensor(np.zeros(shape, dtype), **kw)

    I, N = 161002, 161001
    return [
        ("null gradOutput", lambda s: ok(s, gradOutput=None), N),
        ("null y", lambda s: ok(s, y=None), N),
        ("null mask", lambda s: ok(s, mask=None), N),
        ("null out", lambda s: ok(s, out=None), N),
        ("null out and fixTriuMask", lambda s: ok(s, out=None, mask=None, fixTriuMask=True), N),
        ("int32 gradOutput", lambda s: ok(s, gradOutput=t(SHAPE, np.int32)), I),
        ("float64 y", lambda s: ok(s, y=t(SHAPE, np.float64)), I),
        ("int32 out", lambda s: ok(s, out=t(SHAPE, np.int32)), I),
        ("float32 mask", lambda s: ok(s, mask=t((2, 1, 4, 5), F32)), I),
        ("uint8 mask", lambda s: ok(s, mask=t((2, 1, 4, 5), np.uint8)), I),
        ("FRACTAL_NZ gradOutput", lambda s: ok(s, gradOutput=t(SHAPE, fmt=acl.ACL_FORMAT_FRACTAL_NZ)), I),
        ("rank 3 gradOutput", lambda s: ok(s, gradOutput=t((3, 4, 5))), I),
        ("rank 5 gradOutput", lambda s: ok(s, gradOutput=t((1,) + SHAPE)), I),
        ("y shape", lambda s: ok(s, y=t((2, 3, 4, 6))), I),
        ("y broadcast shape", lambda s: ok(s, y=t((1, 3, 4, 5))), I),
        ("out shape", lambda s: ok(s, out=t((2, 3, 5, 4))), I),
        ("mask rank 3", lambda s: ok(s, mask=t((1, 4, 5), bool)), I),
        ("mask S1", lambda s: ok(s, mask=t((2, 1, 3, 5), bool)), I),
        ("mask S2", lambda s: ok(s, mask=t((2, 1, 4, 1), bool)), I),
        ("mask Bm", lambda s: ok(s, mask=t((3, 1, 4, 5), bool)), I),
        ("mask Nm", lambda s: ok(s, mask=t((1, 2, 4, 5), bool)), I),
        ("fixTriuMask not bool", lambda s: ok(s, fixTriuMask="yes"), I),
        ("scale not a number", lambda s: ok(s, scale="0.5"), I),
        ("scale None", lambda s: ok(s, scale=None), I),
        ("y dtype != gradOutput dtype", lambda s: ok(s, y=t(SHAPE, F16)), I),
        ("out dtype != gradOutput dtype", lambda s: ok(s, out=t(SHAPE, BF16)), I),
        ("gradOutput not a tensor", lambda s: ok(s, gradOutput=np.ones(SHAPE, F32)), I),
        ("destroyed y", lambda s: ok(s, y=lambda s: _destroyed(s.tensor(np.ones(SHAPE, F32)))), I),
        ("foreign pointer", lambda s: ok(s, gradOutput=lambda s: acl.aclCreateTensor(
            SHAPE, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, SHAPE, _FOREIGN.ctypes.data)), I),
        ("freed pointer", lambda s: ok(s, y=lambda s: _freed(s)), I),
        ("too-short range", lambda s: ok(s, y=lambda s: acl.aclCreateTensor(
            SHAPE, acl.ACL_FLOAT, None, 2, acl.ACL_FORMAT_ND, SHAPE, near_end(s.malloc(120 * 4), 120 * 4))), I),
        ("too-short mask", lambda s: ok(s, mask=lambda s: acl.aclCreateTensor(
            (2, 1, 4, 5), acl.ACL_BOOL, None, 0, acl.ACL_FORMAT_ND, (2, 1, 4, 5), near_end(s.malloc(39), 39))), I),
        ("null data", lambda s: ok(s, mask=lambda s: acl.aclCreateTensor(
            (2, 1, 4, 5), acl.ACL_BOOL, None, 0, acl.ACL_FORMAT_ND, (2, 1, 4, 5), None)), N),
        ("out overlaps itself", lambda s: ok(s, out=lambda s: acl.aclCreateTensor(
            SHAPE, acl.ACL_FLOAT, (0, 20, 5, 1), 0, acl.ACL_FORMAT_ND, (60,), s.malloc(240))), I),
        ("out aliases y", lambda s: _alias(ok(s), "y"), I),
        ("out aliases gradOutput", lambda s: _alias(ok(s), "gradOutput"), I),
        ("host memory as data", lambda s: ok(s, y=lambda s: acl.aclCreateTensor(
            SHAPE, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, SHAPE, acl.aclrtMallocHost(480)[1])), I),
    ]


_FOREIGN = np.ones(120, np.float32)


def _destroyed(tensor):
    acl.aclDestroyTensor(tensor)
    return tensor


def _freed(s):
    status, p = acl.aclrtMalloc(480, 0)
    t = acl.aclCreateTensor(SHAPE, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, SHAPE, p)
    acl.aclrtFree(p)
    return t


def _alias(args, name):
    args["out"] = acl.aclCreateTensor(SHAPE, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, SHAPE, args[name].data)
    return args


BAD = _bad_cases()


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(cpu_session, case):
    name, build, expected = case
    assert_refused(cpu_session, acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, "aclnnScaledMaskedSoftmaxBackward", build(cpu_session), expected)


def test_bad_input_table_is_large():
    assert len(BAD) >= 25


def test_messages_name_parameter_and_rule(cpu_session):
    s = cpu_session
    cases = {
        "mask": (s.tensor(np.ones(SHAPE, F32)), s.tensor(np.ones(SHAPE, F32)), s.tensor(np.zeros((3, 1, 4, 5), bool)),
                 1.0, False, s.poisoned(SHAPE, F32)),
        "out dtype BF16 must equal gradOutput dtype FLOAT": (
            s.tensor(np.ones(SHAPE, F32)), s.tensor(np.ones(SHAPE, F32)), None, 1.0, True, s.poisoned(SHAPE, BF16)),
    }
    for needle, args in cases.items():
        status, _, _ = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(*args)
        assert status == 161002 and needle in acl.aclGetRecentErrMsg(), acl.aclGetRecentErrMsg()


def test_validation_order(cpu_session):
    """Nulls before dtypes before shapes before fixTriuMask/scale before the dtype-equality rules."""
    s = cpu_session
    bad_dtype = s.tensor(np.ones(SHAPE, np.int32))
    bad_shape = s.tensor(np.ones((2, 3, 4), F32))
    f16 = s.tensor(np.ones(SHAPE, F16))
    good = s.tensor(np.ones(SHAPE, F32))
    mask = s.tensor(np.zeros(SHAPE, bool))
    get = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize
    assert get(bad_dtype, None, mask, 1.0, False, good)[0] == 161001
    assert get(bad_shape, good, mask, 1.0, False, bad_dtype)[0] == 161002
    assert "dtype" in acl.aclGetRecentErrMsg() and "out" in acl.aclGetRecentErrMsg()
    assert get(good, bad_shape, mask, "x", False, f16)[0] == 161002
    assert "y shape" in acl.aclGetRecentErrMsg()
    assert get(good, f16, mask, "x", False, good)[0] == 161002
    assert "scale" in acl.aclGetRecentErrMsg()
    assert get(good, f16, mask, 1.0, False, good)[0] == 161002
    assert "y dtype FLOAT16 must equal gradOutput dtype FLOAT" in acl.aclGetRecentErrMsg()
    # fixTriuMask=True makes a null mask legal
    assert get(good, good, None, 1.0, True, s.poisoned(SHAPE, F32))[0] == 0


def test_forward_bad_inputs(cpu_session):
    s = cpu_session
    x = s.tensor(np.ones(SHAPE, F16))
    m = s.tensor(np.zeros((1, 3, 4, 5), bool))
    y = s.poisoned(SHAPE, F16)
    before = s.raw(y)
    get = acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize
    cases = [
        ((None, m, 1.0, False, y), 161001),
        ((x, None, 1.0, False, y), 161001),
        ((x, m, 1.0, False, None), 161001),
        ((s.tensor(np.ones(SHAPE, np.int64)), m, 1.0, False, y), 161002),
        ((x, s.tensor(np.zeros((1, 3, 4, 5), np.int32)), 1.0, False, y), 161002),
        ((x, m, 1.0, False, s.tensor(np.ones(SHAPE, F32))), 161002),
        ((x, m, 1.0, False, s.tensor(np.ones((2, 3, 4, 6), F16))), 161002),
        ((x, s.tensor(np.zeros((1, 2, 4, 5), bool)), 1.0, False, y), 161002),
        ((s.tensor(np.ones(SHAPE[1:], F16)), m, 1.0, False, y), 161002),
        ((x, m, 1.0, 2.5, y), 161002),
        ((x, m, 1.0, False, _alias({"x": x}, "x")["out"]), 161002),
    ]
    for args, code in cases:
        status, ws, ex = get(*args)
        msg = acl.aclGetRecentErrMsg()
        assert (status, ws, ex) == (code, None, None), msg
        assert msg.startswith("aclnnScaledMaskedSoftmax: "), msg
    assert s.raw(y) == before


# ------------------------------------------------------------------------------------ phase 2
def test_phase_two_checks(session, rng):
    s = session
    shape = (2, 2, 3, 16)
    mask = make_mask(rng, "b1", *shape)
    g, y = softmax_inputs(rng, shape, mask, BF16)
    out = s.poisoned(shape, BF16, strided=True)   # staged on the GPU path: a workspace
    before = s.raw(out)
    status, ws, ex = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(
        s.tensor(g, strided=True), s.tensor(y), s.tensor(mask, strided=True), 0.125, False, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    if s.kind == "cpu":
        assert ws == 0
        assert acl.aclnnScaledMaskedSoftmaxBackward(None, 0, ex, s.stream) == 0
    else:
        assert ws > 0
        assert acl.aclnnScaledMaskedSoftmaxBackward(None, ws, ex, s.stream) == 161001      # workspace null
        work = s.malloc(ws)
        assert acl.aclnnScaledMaskedSoftmaxBackward(work, ws - 1, ex, s.stream) == 161002  # too short
        assert "smaller than" in acl.aclGetRecentErrMsg()
        assert acl.aclnnScaledMaskedSoftmaxBackward(work + 256, ws, ex, s.stream) == 161002  # past the allocation
        assert acl.aclnnScaledMaskedSoftmaxBackward(work, ws, None, s.stream) == 161001
        assert acl.aclnnScaledMaskedSoftmax(work, ws, ex, s.stream) == 161002                # another op's
        assert acl.aclnnScaledMaskedSoftmaxBackward(work, ws, ex, "stream") == 161002
        assert s.raw(out) == before
        assert acl.aclnnScaledMaskedSoftmaxBackward(work, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    check(s.read(out), torch_backward(g, y, mask, 0.125, False), BF16, bound=cancel_bound(g, y, 0.125))
    assert acl.aclnnScaledMaskedSoftmaxBackward(None, ws, ex, s.stream) != 0                  # spent


def test_repeatable_executor(session, rng):
    s = session
    shape = (1, 2, 3, 40)
    x = rng.standard_normal(shape).astype(F16)
    xt = s.tensor(x, strided=True)
    y = s.poisoned(shape, F16)
    status, ws, ex = acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize(xt, None, 0.125, True, y)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    work = s.malloc(ws) if ws else None
    for _ in range(3):
        assert acl.aclnnScaledMaskedSoftmax(work, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    check(s.read(y), torch_forward(x, None, 0.125, True), F16)
    assert acl.aclDestroyAclOpExecutor(ex) == 0
    assert acl.aclnnScaledMaskedSoftmax(work, ws, ex, s.stream) == 161002


# ------------------------------------------------------------------------------------ functional
def test_functional_numpy(session, rng):
    shape = (2, 3, 4, 33)
    mask = make_mask(rng, "1n", *shape)
    x = rng.standard_normal(shape).astype(F32)
    y = F.scaled_masked_softmax(x, mask, 0.125)
    assert isinstance(y, np.ndarray) and y.dtype == F32
    check(y, torch_forward(x, mask, 0.125, False), F32)
    g = rng.standard_normal(shape).astype(F32)
    grad = F.scaled_masked_softmax_backward(g, y, mask, scale=0.125)
    check(grad, torch_backward(g, y, mask, 0.125, False), F32, bound=cancel_bound(g, y, 0.125))
    # strided NumPy views and fix_triu_mask with no mask
    xs = np.repeat(x, 2, axis=-1)[..., ::2]
    check(F.scaled_masked_softmax(xs, None, 1.0, fix_triu_mask=True), torch_forward(x, None, 1.0, True), F32)
    with pytest.raises(acl.AclnnError) as err:
        F.scaled_masked_softmax_backward(g, y.astype(F16), mask)
    assert err.value.status == 161002
    with pytest.raises(acl.AclnnError) as err:
        F.scaled_masked_softmax(x, None)
    assert err.value.status == 161001


def test_functional_torch(session, rng):
    shape = (2, 2, 3, 40)
    mask = make_mask(rng, "b1", *shape)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    tx, tg = (torch.tensor(a).to(torch.bfloat16) for a in (x, g))
    tm = torch.from_numpy(mask)
    y = F.scaled_masked_softmax(tx, tm, 0.125, True)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    check(y.float().numpy(), torch_forward(tx.float().numpy(), mask, 0.125, True), BF16)
    grad = F.scaled_masked_softmax_backward(tg, y, tm, 0.125, True)
    assert isinstance(grad, torch.Tensor) and grad.dtype == torch.bfloat16
    check(grad.float().numpy(), torch_backward(tg.float().numpy(), y.float().numpy(), mask, 0.125, True), BF16, bound=cancel_bound(tg.float().numpy(), y.float().numpy(), 0.125))
