"""Fuzzing: hypothesis strategies over shapes, strides / offsets, dtypes and parameters of
the ten entry points. Every case runs on the cpu AND the emulated device with the same inputs, and
both results are compared with a float64 reference (PyTorch CPU float64 where it has the operator,
else the NumPy reference in float64). Outputs are NaN-poisoned views (strided and/or offset when the
strategy says so): every element of the view must be written, and no byte of the storage around it
(the gaps of a strided view, the leading offset) may change.

Budget: ACLNN_GPU_FUZZ_EXAMPLES=N examples per operator (default 40; the whole file < 90 s on a
loaded 2-core machine). Each test's Hypothesis seed derives from the run's seed and the test's id
(tests/seeding.py), so `ACLNN_GPU_TEST_SEED=<run seed> python -m pytest '<test id>'` replays it: the run's
seed is printed before the first test (a crash that kills the process cannot hide it), a failed test's
report carries that command, and hypothesis prints the falsifying example. Emulated shapes stay tiny
on purpose.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu.reference import ctc_loss as ctc_ref
from aclnn_gpu.reference import cross_entropy as ce_ref
from aclnn_gpu.reference import scaled_masked_softmax as sms_ref
from seeding import current_test, draw_seed, replay_command, run_seed
from support import TOLERANCE, Session

pytestmark = pytest.mark.kernels

EXAMPLES = int(os.environ.get("ACLNN_GPU_FUZZ_EXAMPLES", "40"))
KINDS = ("cpu", "emulated")
F16, F32, F64, BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), dtypes.bfloat16
CASES: dict[str, int] = {}


def fuzz(name: str, strategy, figures, examples: int = EXAMPLES):
    """Run `body(case)` over `strategy` with the file's budget and the test's seed; report the count."""

    def wrap(body):
        CASES[name] = 0
        test_seed = draw_seed()

        @seed(test_seed)
        @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.filter_too_much])
        @given(strategy)
        def run(case):
            CASES[name] += 1
            body(case)

        try:
            run()
        finally:
            figures(f"fuzz {name}: {CASES[name]} cases x {len(KINDS)} devices (seed {test_seed}; "
                    f"replay: {replay_command(current_test())})")
        return run

    return wrap


# ------------------------------------------------------------------------------ strategies
place = st.tuples(st.booleans(), st.integers(0, 3))          # (strided, offset) of one tensor
float_dtype = st.sampled_from([F32, F16, BF16, F64])


# ------------------------------------------------------------------------------ device plumbing
class Run:
    """One device session of one case: inputs and NaN-poisoned outputs at the drawn places."""

    def __init__(self, s: Session):
        self.s, self.outs = s, []

    def t(self, array, where=(False, 0)):
        return self.s.tensor(np.asarray(array), strided=where[0], offset=where[1])

    def expanded(self, array, shape):
        """A view of `array` (dims of size 1) broadcast to `shape` with stride-0 dims."""
        base = self.s.tensor(np.ascontiguousarray(array))
        strides = [0 if a == 1 and n != 1 else s for a, n, s in zip(array.shape, shape, base.strides)]
        t = acl.aclCreateTensor(list(shape), int(base.dtype), strides, 0, int(acl.ACL_FORMAT_ND),
                                list(array.shape), base.data)
        assert t is not None, acl.aclGetRecentErrMsg()
        self.s.tensors.append(t)
        return t

    def out(self, shape, dtype, where=(False, 0)):
        t = self.s.empty(tuple(shape), dtype, strided=where[0], offset=where[1])
        self.outs.append((t, self.s.raw(t)))
        return t

    def call(self, gws, exe, *args):
        status = self.s.run(gws, exe, *args)
        assert status == 0, f"{self.s.kind}: status {status}: {acl.aclGetRecentErrMsg()}"
        for t, before in self.outs:  # nothing written outside the output views
            after = self.s.raw(t)
            covered = np.zeros(len(before) // t.itemsize, bool)
            if t.numel:
                idx = t.offset + sum(np.arange(n)[(slice(None),) + (None,) * (t.rank - 1 - d)] * s
                                     for d, (n, s) in enumerate(zip(t.shape, t.strides)))
                covered[np.asarray(idx).reshape(-1)] = True
            b = np.frombuffer(before, np.uint8).reshape(-1, t.itemsize)[~covered]
            a = np.frombuffer(after, np.uint8).reshape(-1, t.itemsize)[~covered]
            assert np.array_equal(a, b), f"{self.s.kind}: an operator wrote outside its output view"
        return [self.s.read(t) for t, _ in self.outs]


def on_devices(fn):
    """fn(Run) -> list of host arrays, on every device kind of this file."""
    results = {}
    for kind in KINDS:
        s = Session(kind)
        try:
            results[kind] = fn(Run(s))
        finally:
            s.close()
    return results


def check(results, expected, dtype, what, scale=1.0):
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    for kind, outs in results.items():
        for i, (got, want) in enumerate(zip(outs, expected)):
            got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
            assert got64.shape == want64.shape, (kind, what, i, got64.shape, want64.shape)
            np.testing.assert_allclose(got64, want64, rtol=rtol * scale, atol=atol * scale,
                                       err_msg=f"{what} output {i} on {kind}")


def rnd(seed_, shape, dtype, scale=1.0):
    return (np.random.default_rng(seed_).standard_normal(shape) * scale).astype(dtype)


def f64(a):
    return np.asarray(a, np.float64)


# ------------------------------------------------------------------------------ KL divergence
@st.composite
def kl_case(draw):
    rank = draw(st.integers(1, 4))
    base = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    form = draw(st.sampled_from(["same", "target-wider", "self-wider"]))
    if form == "same":
        self_shape, target_shape = list(base), list(base)
    elif form == "target-wider":
        self_shape = list(base)
        self_shape[draw(st.integers(0, rank - 1))] = 1
        target_shape = ([draw(st.integers(2, 3))] if draw(st.booleans()) else []) + list(base)
    else:
        target_shape = list(base)
        target_shape[draw(st.integers(0, rank - 1))] = 1
        target_shape = target_shape[draw(st.integers(0, rank - 1)):]
        self_shape = list(base)
    return dict(self_shape=self_shape, target_shape=target_shape, dtype=draw(float_dtype),
                reduction=draw(st.integers(0, 3)), log_target=draw(st.booleans()),
                places=draw(st.lists(place, min_size=4, max_size=4)), seed=draw(st.integers(0, 2 ** 32 - 1)),
                grad_ones=draw(st.lists(st.booleans(), min_size=5, max_size=5)))


def kl_inputs(c):
    dt = c["dtype"]
    x = rnd(c["seed"], c["self_shape"], dt)
    rng = np.random.default_rng(c["seed"] + 1)
    if c["log_target"]:
        t = (rng.standard_normal(c["target_shape"]) * 0.5).astype(dt)
    else:
        t = rng.random(c["target_shape"])
        t[rng.random(t.shape) < 0.15] = 0.0  # xlogy(0, 0)
        t = t.astype(dt)
    return x, t


def torch_kl(x64, t64, reduction, log_target, g64):
    x = torch.tensor(x64, requires_grad=True)
    xb, tb = torch.broadcast_tensors(x, torch.tensor(t64))
    e = F.kl_div(xb, tb, reduction="none", log_target=log_target)
    loss = [e, e.mean(), e.sum(), e.sum() / (e.shape[0] if e.dim() else 1)][reduction]
    loss.backward(torch.broadcast_to(torch.tensor(g64), loss.shape))
    return loss.detach().numpy(), x.grad.numpy()


def test_fuzz_kl_div(figures):
    @fuzz("aclnnKlDiv", kl_case(), figures)
    def _(c):
        x, t = kl_inputs(c)
        dt, red, lt, p = c["dtype"], c["reduction"], c["log_target"], c["places"]
        bshape = np.broadcast_shapes(x.shape, t.shape)
        want, _g = torch_kl(f64(x), f64(t), red, lt, np.float64(1.0))
        res = on_devices(lambda r: r.call(acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, r.t(x, p[0]),
                                          r.t(t, p[1]), red, lt, r.out(bshape if red == 0 else (), dt, p[2])))
        check(res, [want], dt, f"aclnnKlDiv {c}", scale=1 if red == 0 else 4)


def test_fuzz_kl_div_backward(figures):
    @fuzz("aclnnKlDivBackward", kl_case(), figures)
    def _(c):
        x, t = kl_inputs(c)
        dt, red, lt, p = c["dtype"], c["reduction"], c["log_target"], c["places"]
        bshape = list(np.broadcast_shapes(x.shape, t.shape))
        if red == 0:  # gradOutput broadcasting to B without enlarging it: some dims 1, maybe fewer dims
            gshape = [1 if one else n for n, one in zip(bshape, c["grad_ones"])]
            gshape = gshape[int(c["grad_ones"][-1] and len(gshape) > 1):]
        else:
            gshape = []
        g = rnd(c["seed"] + 2, gshape, dt)
        _l, want = torch_kl(f64(x), f64(t), red, lt, f64(g))
        res = on_devices(lambda r: r.call(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward,
                                          r.t(g, p[3]), r.t(x, p[0]), r.t(t, p[1]), red, lt,
                                          r.out(x.shape, dt, p[2])))
        check(res, [want], dt, f"aclnnKlDivBackward {c}", scale=1 if red == 0 else 2)


# ------------------------------------------------------------------------------ cross-entropy
@st.composite
def ce_case(draw):
    C = draw(st.integers(1, 9))
    return dict(N=draw(st.integers(1, 6)), C=C, dtype=draw(float_dtype),
                target_dtype=draw(st.sampled_from([np.int32, np.int64])),
                weighted=draw(st.booleans()), reduction=draw(st.sampled_from(["none", "mean", "sum"])),
                ignore_index=draw(st.sampled_from([-100, -1, 0, C - 1])),
                label_smoothing=draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]) | st.floats(0.0, 1.0)),
                p_ignore=draw(st.sampled_from([0.0, 0.3, 1.0])),
                places=draw(st.lists(place, min_size=5, max_size=5)), seed=draw(st.integers(0, 2 ** 32 - 1)))


def ce_inputs(c):
    N, C, dt = c["N"], c["C"], c["dtype"]
    rng = np.random.default_rng(c["seed"])
    x = (rng.standard_normal((N, C)) * 2).astype(dt)
    target = rng.integers(0, C, N)
    target[rng.random(N) < c["p_ignore"]] = c["ignore_index"]
    weight = (rng.random(C) + 0.1).astype(np.float32) if c["weighted"] else None
    return x, target.astype(c["target_dtype"]), weight


def test_fuzz_cross_entropy(figures):
    @fuzz("aclnnCrossEntropyLoss", ce_case(), figures)
    def _(c):
        x, target, weight = ce_inputs(c)
        N, C, dt, p = c["N"], c["C"], c["dtype"], c["places"]
        xt = torch.tensor(f64(x))
        want = F.cross_entropy(xt, torch.tensor(target.astype(np.int64)),
                               weight=None if weight is None else torch.tensor(f64(weight)),
                               ignore_index=c["ignore_index"], reduction=c["reduction"],
                               label_smoothing=c["label_smoothing"]).numpy()
        want_lp = torch.log_softmax(xt, 1).numpy()
        counted = target != c["ignore_index"]
        if c["reduction"] == "mean" and (weight[target[counted]] if c["weighted"] else counted).sum() == 0:
            want = np.float64(0.0)  # documented (reference/cross_entropy.py, docs/API.md §7): D == 0 -> 0, torch NaN

        def fn(r):
            loss = r.out((N,) if c["reduction"] == "none" else (), dt, p[3])
            lp = r.out((N, C), dt, p[4])
            return r.call(acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, r.t(x, p[0]),
                          r.t(target, p[1]), None if weight is None else r.t(weight, p[2]), c["reduction"],
                          c["ignore_index"], c["label_smoothing"], 0.0, False, loss, lp, None, None)

        check(on_devices(fn), [want, want_lp], dt, f"aclnnCrossEntropyLoss {c}", scale=4)


def test_fuzz_cross_entropy_grad(figures):
    @fuzz("aclnnCrossEntropyLossGrad", ce_case(), figures)
    def _(c):
        x, target, weight = ce_inputs(c)
        N, C, dt, p = c["N"], c["C"], c["dtype"], c["places"]
        log_prob = torch.log_softmax(torch.tensor(f64(x)), 1).numpy().astype(dt)
        g = rnd(c["seed"] + 1, (N,) if c["reduction"] == "none" else (), dt)
        want = ce_ref.cross_entropy_loss_grad(f64(g), f64(log_prob), target.astype(np.int64),
                                              None if weight is None else f64(weight), c["reduction"],
                                              c["ignore_index"], c["label_smoothing"])
        res = on_devices(lambda r: r.call(
            acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad, r.t(g, p[3]),
            r.t(log_prob, p[0]), r.t(target, p[1]), None if weight is None else r.t(weight, p[2]), None, None,
            c["reduction"], c["ignore_index"], c["label_smoothing"], 0.0, r.out((N, C), dt, p[4])))
        check(res, [want], dt, f"aclnnCrossEntropyLossGrad {c}", scale=2)


# ------------------------------------------------------------------------------ CTC loss
@st.composite
def ctc_case(draw):
    T, N, C = draw(st.integers(1, 8)), draw(st.integers(1, 3)), draw(st.integers(2, 5))
    tl = draw(st.lists(st.integers(0, 4), min_size=N, max_size=N))
    il = [draw(st.integers(0, T)) for _ in range(N)]
    two_d = draw(st.booleans())
    width = max([0, *tl]) + (draw(st.integers(0, 2)) if two_d else 0)
    return dict(T=T, N=N, C=C, tl=tl, il=il, two_d=two_d, width=width, blank=draw(st.integers(0, C - 1)),
                zero_infinity=draw(st.booleans()), dtype=draw(float_dtype),
                target_dtype=draw(st.sampled_from([np.int32, np.int64])),
                places=draw(st.lists(place, min_size=6, max_size=6)), seed=draw(st.integers(0, 2 ** 32 - 1)))


def ctc_inputs(c):
    T, N, C, dt = c["T"], c["N"], c["C"], c["dtype"]
    rng = np.random.default_rng(c["seed"])
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C)) * 2), -1).numpy().astype(dt)
    labels = [k for k in range(C) if k != c["blank"]]
    rows = [rng.choice(labels, size=n) for n in c["tl"]]
    if rng.random() < 0.5:  # repeated labels need a blank between them (longer alignments)
        rows = [np.repeat(r[:1], len(r)) for r in rows]
    if c["two_d"]:
        tg = rng.choice(labels, size=(N, c["width"]))
        for b, r in enumerate(rows):
            tg[b, :len(r)] = r
    else:
        tg = np.concatenate([np.zeros(0, np.int64), *rows])
    return lp, tg.astype(c["target_dtype"])


def valid_alpha(alpha, c):
    """logAlpha where docs/API.md defines it: t < inputLengths[b], s < 2 * targetLengths[b] + 1."""
    a = np.array(alpha, np.float64)
    for b in range(c["N"]):
        a[b, c["il"][b]:, :] = 0
        a[b, :, 2 * c["tl"][b] + 1:] = 0
    return a


def test_fuzz_ctc_loss(figures):
    @fuzz("aclnnCtcLoss", ctc_case(), figures)
    def _(c):
        lp, tg = ctc_inputs(c)
        T, N, dt, p, S = c["T"], c["N"], c["dtype"], c["places"], 2 * max([0, *c["tl"]]) + 1
        nll, alpha = torch.ops.aten._ctc_loss(torch.tensor(f64(lp)), torch.tensor(tg.astype(np.int64)), c["il"],
                                              c["tl"], c["blank"], c["zero_infinity"])
        nll = nll.numpy()
        if c["zero_infinity"]:  # aten._ctc_loss leaves that to F.ctc_loss: impossible alignments -> 0
            nll = np.where(np.isinf(nll), 0.0, nll)
        nll_np, alpha_np = ctc_ref.ctc_loss_forward(f64(lp), tg, c["il"], c["tl"], c["blank"], c["zero_infinity"])
        np.testing.assert_allclose(nll_np, nll, rtol=1e-9, atol=1e-12)  # the two references agree

        def fn(r):
            outs = r.call(acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss, r.t(lp, p[0]), r.t(tg, p[1]),
                          r.s.int_array(c["il"]), r.s.int_array(c["tl"]), c["blank"], c["zero_infinity"],
                          r.out((N,), dt, p[2]), r.out((N, T, S), dt, p[3]))
            return [outs[0], valid_alpha(outs[1], c)]

        check(on_devices(fn), [nll, valid_alpha(alpha_np, c)], dt, f"aclnnCtcLoss {c}", scale=4)


def test_fuzz_ctc_loss_backward(figures):
    @fuzz("aclnnCtcLossBackward", ctc_case(), figures)
    def _(c):
        lp, tg = ctc_inputs(c)
        T, N, C, dt, p = c["T"], c["N"], c["C"], c["dtype"], c["places"]
        nll64, alpha64 = ctc_ref.ctc_loss_forward(f64(lp), tg, c["il"], c["tl"], c["blank"], c["zero_infinity"])
        nll, alpha = nll64.astype(dt), alpha64.astype(dt)
        g = np.abs(rnd(c["seed"] + 1, (N,), dt))
        # 16-bit storage: the backward reads neither the given logAlpha nor the loss for its math (docs/API.md
        # §7: it runs alpha again from logProbs), so the reference takes them unrounded; rounded to 16 bits,
        # a loss near 16 moves by up to 8e-3, and the gradient with it (the loss only decides zeroInfinity,
        # alike for both: a finite loss of T <= 8 steps stays finite)
        given = (nll64, alpha64) if np.dtype(dt).itemsize == 2 else (f64(nll), f64(alpha))
        want = ctc_ref.ctc_loss_backward(f64(g), f64(lp), tg, c["il"], c["tl"], *given, c["blank"],
                                         c["zero_infinity"])
        res = on_devices(lambda r: r.call(
            acl.aclnnCtcLossBackwardGetWorkspaceSize, acl.aclnnCtcLossBackward, r.t(g, p[4]), r.t(lp, p[0]),
            r.t(tg, p[1]), r.s.int_array(c["il"]), r.s.int_array(c["tl"]), r.t(nll, p[2]), r.t(alpha, p[3]),
            c["blank"], c["zero_infinity"], r.out((T, N, C), dt, p[5])))
        check(res, [want], dt, f"aclnnCtcLossBackward {c}", scale=4)


# ------------------------------------------------------------------------------ ConvTbc
@st.composite
def conv_case(draw, min_tout, forward=False):
    K, pad = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    # the forward: a non-empty input reaches the last tap with one side's padding (CANN's T + pad >= K)
    lo = max(1, K - pad) if forward else max(0, K - 2 * pad - 1 + min_tout)
    T = draw(st.integers(lo, max(lo, 6)))
    return dict(T=T, B=draw(st.integers(1, 3)), Cin=draw(st.integers(1, 4)), Cout=draw(st.integers(1, 4)), K=K,
                pad=pad, dtype=draw(st.sampled_from([F32, F16, BF16])), places=draw(st.lists(place, min_size=7, max_size=7)),
                seed=draw(st.integers(0, 2 ** 32 - 1)))


def conv_inputs(c):
    dt = c["dtype"]
    x = rnd(c["seed"], (c["T"], c["B"], c["Cin"]), dt)
    w = rnd(c["seed"] + 1, (c["K"], c["Cin"], c["Cout"]), dt, 0.5)
    b = rnd(c["seed"] + 2, (c["Cout"],), dt)
    return x, w, b


def torch_conv(x, w, b, pad, dy=None):
    xt, wt, bt = (torch.tensor(f64(a), requires_grad=True) for a in (x, w, b))
    y = torch.conv_tbc(xt, wt, bt, pad)
    if dy is None:
        return [y.detach().numpy()]
    y.backward(torch.tensor(f64(dy)))
    return [xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()]


def test_fuzz_conv_tbc(figures):
    @fuzz("aclnnConvTbc", conv_case(0, forward=True), figures)
    def _(c):
        x, w, b = conv_inputs(c)
        dt, p, tout = c["dtype"], c["places"], c["T"] + 2 * c["pad"] - c["K"] + 1
        want = torch_conv(x, w, b, c["pad"])
        res = on_devices(lambda r: r.call(acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, r.t(x, p[0]),
                                          r.t(w, p[1]), r.t(b, p[2]), c["pad"],
                                          r.out((tout, c["B"], c["Cout"]), dt, p[3]), 0))
        check(res, want, dt, f"aclnnConvTbc {c}", scale=2)


def test_fuzz_conv_tbc_backward(figures):
    @fuzz("aclnnConvTbcBackward", conv_case(1), figures)
    def _(c):
        x, w, b = conv_inputs(c)
        dt, p, tout = c["dtype"], c["places"], c["T"] + 2 * c["pad"] - c["K"] + 1
        if c["T"] == 0:
            p = p[:4] + [(False, p[4][1])] + p[5:]  # strided empty gradInput: BUG-8, test_empty_strided_output
        dy = rnd(c["seed"] + 3, (tout, c["B"], c["Cout"]), dt)
        want = torch_conv(x, w, b, c["pad"], dy)
        res = on_devices(lambda r: r.call(
            acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward, r.t(dy, p[3]), r.t(x, p[0]),
            r.t(w, p[1]), r.t(b, p[2]), c["pad"], 0, r.out(x.shape, dt, p[4]), r.out(w.shape, dt, p[5]),
            r.out(b.shape, dt, p[6])))
        check(res, want, dt, f"aclnnConvTbcBackward {c}", scale=4)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_strided_output(kind):
    """T=0, K=1, pad=1: gradInput is empty (0, 2, 1), self is (2, 2, 1); gradInput given as the strided
    view DeviceArrays makes of an empty array (strides [0, 0, 2])."""
    s = Session(kind)
    try:
        x, w, b = np.zeros((0, 2, 1), F32), np.ones((1, 1, 1), F32), np.ones(1, F32)
        dy = np.ones((2, 2, 1), F32)
        gi = s.empty(x.shape, F32, strided=True)
        gw, gb = s.empty(w.shape, F32), s.empty(b.shape, F32)
        status = s.run(acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward, s.tensor(dy),
                       s.tensor(x), s.tensor(w), s.tensor(b), 1, 0, gi, gw, gb)
        assert status == 0, acl.aclGetRecentErrMsg()
        np.testing.assert_allclose(s.read(gb), [4.0])
    finally:
        s.close()


# ------------------------------------------------------------------------------ scaled masked softmax
@st.composite
def sms_case(draw):
    fix = draw(st.booleans())
    return dict(B=draw(st.integers(1, 2)), N=draw(st.integers(1, 3)), S1=draw(st.integers(1, 4)),
                S2=draw(st.integers(1, 9)), dtype=draw(st.sampled_from([F32, F16, BF16])),
                mask_form=draw(st.sampled_from(["full", "1N", "B1", "11", "expanded"] + (["none"] if fix else []))),
                scale=draw(st.sampled_from([1.0, 0.125, -0.5]) | st.floats(-4, 4, allow_nan=False, width=32)),
                fix=fix, p_mask=draw(st.sampled_from([0.0, 0.3, 1.0])),
                places=draw(st.lists(place, min_size=4, max_size=4)), seed=draw(st.integers(0, 2 ** 32 - 1)))


def sms_mask(c, r):
    """(mask tensor or None, the mask as the reference sees it)."""
    B, N, S1, S2, form = c["B"], c["N"], c["S1"], c["S2"], c["mask_form"]
    if form == "none":
        return None, None
    shape = {"full": (B, N), "1N": (1, N), "B1": (B, 1), "11": (1, 1), "expanded": (1, 1)}[form] + (S1, S2)
    m = np.random.default_rng(c["seed"] + 5).random(shape) < c["p_mask"]
    if r is None:
        return None, m
    if form == "expanded":
        return r.expanded(m, (B, N, S1, S2)), m
    return r.t(m, c["places"][3]), m


def test_fuzz_scaled_masked_softmax(figures):
    @fuzz("aclnnScaledMaskedSoftmax", sms_case(), figures)
    def _(c):
        dt, p = c["dtype"], c["places"]
        x = rnd(c["seed"], (c["B"], c["N"], c["S1"], c["S2"]), dt, 2)
        _, m = sms_mask(c, None)
        want = sms_ref.scaled_masked_softmax(f64(x), m, float(np.float32(c["scale"])), c["fix"])

        def fn(r):
            mask, _ = sms_mask(c, r)
            return r.call(acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax, r.t(x, p[0]),
                          mask, c["scale"], c["fix"], r.out(x.shape, dt, p[1]))

        check(on_devices(fn), [want], dt, f"aclnnScaledMaskedSoftmax {c}")


def test_fuzz_scaled_masked_softmax_backward(figures):
    @fuzz("aclnnScaledMaskedSoftmaxBackward", sms_case(), figures)
    def _(c):
        dt, p = c["dtype"], c["places"]
        shape = (c["B"], c["N"], c["S1"], c["S2"])
        _, m = sms_mask(c, None)
        y = sms_ref.scaled_masked_softmax(rnd(c["seed"], shape, F64, 2), m, 1.0, c["fix"]).astype(dt)
        g = rnd(c["seed"] + 1, shape, dt)
        want = sms_ref.scaled_masked_softmax_backward(f64(g), f64(y), m, float(np.float32(c["scale"])), c["fix"])

        def fn(r):
            mask, _ = sms_mask(c, r)
            return r.call(acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, acl.aclnnScaledMaskedSoftmaxBackward,
                          r.t(g, p[0]), r.t(y, p[1]), mask, c["scale"], c["fix"], r.out(shape, dt, p[2]))

        check(on_devices(fn), [want], dt, f"aclnnScaledMaskedSoftmaxBackward {c}", scale=2)


def test_fuzz_totals(figures):
    """The figure line for the whole file (runs last in file order)."""
    figures(f"fuzz total: {sum(CASES.values())} cases over {len(CASES)} entry points, each on cpu and emulated "
            f"vs float64 reference (ACLNN_GPU_FUZZ_EXAMPLES={EXAMPLES}, run seed {run_seed()})")
