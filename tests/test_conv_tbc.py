"""aclnnConvTbcBackward / aclnnConvTbc on the cpu and emulated devices (the emulated device runs the
cuda plan: .cu kernels on the CPU, GEMMs in NumPy) against PyTorch CPU autograd in float64, the
bad-input table, phase-2 checks and the functional wrappers."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import aclnn_gpu as acl
import aclnn_gpu.functional as F
from aclnn_gpu.base import dtypes
from support import near_end

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16
DTYPES = [F32, F16, BF16]
ND, NCL = acl.ACL_FORMAT_ND, acl.ACL_FORMAT_NCL
OP = "aclnnConvTbcBackward: "


# ------------------------------------------------------------------------------------ oracle
def torch_conv_tbc(x, w, b, g, pad):
    """(y, gradInput, gradWeight, gradBias) by torch.conv_tbc + autograd in float64, and the same
    computed on |x|, |w|, |g| (an element-wise bound of the terms' magnitudes for tolerances)."""
    def run(x, w, b, g):
        xt, wt, bt = (torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in (x, w, b))
        y = torch.conv_tbc(xt, wt, bt, pad)
        if g is not None:
            y.backward(torch.tensor(np.asarray(g, np.float64)))
            return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()
        return y.detach().numpy(), None, None, None
    exact = run(x, w, b, g)
    mag = run(*(np.abs(np.asarray(a, np.float64)) if a is not None else None for a in (x, w, b, g)))
    return exact, mag


def tolerance(dtype, cube, kind) -> float:
    """Relative error allowed against the magnitude bound of each element."""
    dtype = np.dtype(dtype)
    if dtype == BF16:
        return 1.6e-2
    if dtype == F16:
        return 4e-3
    if kind != "cpu" and cube in (1, 3):       # TF32: 10-bit mantissa operands
        return 2e-3
    if kind != "cpu" and cube == 2:            # fp16 operands, fp32 accumulation
        return 2e-3
    return 1e-5


def check(actual, expected, mag, rtol, what=""):
    actual = np.asarray(actual, np.float64)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values (unwritten output?)"
    err = np.abs(actual - expected)
    bound = rtol * mag + 1e-6
    worst = np.max(err - bound) if err.size else -1
    assert worst <= 0, f"{what}: max excess {worst}, max err {err.max()}"


def random_case(rng, *, T=None, B=None, Cin=None, Cout=None, K=None, pad=None, forward=False):
    """A random (T, B, Cin, Cout, K, pad) with Tout >= 1 (forward: also T + pad >= K, CANN's forward rule)."""
    K = int(rng.integers(1, 5)) if K is None else K
    pad = int(rng.integers(0, 4)) if pad is None else pad
    lo = max(1, K - pad if forward else K - 2 * pad)
    T = int(rng.integers(lo, lo + 6)) if T is None else T
    B = int(rng.integers(1, 4)) if B is None else B
    Cin = int(rng.integers(1, 6)) if Cin is None else Cin
    Cout = int(rng.integers(1, 6)) if Cout is None else Cout
    return T, B, Cin, Cout, K, pad


def arrays(rng, T, B, Cin, Cout, K, pad, dtype):
    Tout = T + 2 * pad - K + 1
    mk = lambda *s: rng.standard_normal(s).astype(np.float32).astype(dtype)  # noqa: E731
    return mk(T, B, Cin), mk(K, Cin, Cout), mk(Cout), mk(Tout, B, Cout)


def run_backward(s, g, x, w, b, pad, cube, *, strided=False, offset=0, fmt=ND, out_dtypes=None):
    out_dtypes = out_dtypes or (x.dtype, w.dtype, b.dtype)
    tg, tx, tw = (s.tensor(a, strided=strided, offset=offset, fmt=fmt) for a in (g, x, w))
    tb = s.tensor(b, strided=strided, offset=offset)
    gi = s.poisoned(x.shape, out_dtypes[0], strided=strided, offset=offset, fmt=fmt)
    gw = s.poisoned(w.shape, out_dtypes[1], strided=strided, offset=offset, fmt=fmt)
    gb = s.poisoned(b.shape, out_dtypes[2], strided=strided, offset=offset)
    status = s.run(acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward,
                   tg, tx, tw, tb, pad, cube, gi, gw, gb)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(gi), s.read(gw), s.read(gb)


def forward_refused(T, K, pad) -> bool:
    """aclnnConvTbc's window rule (CANN's ValueCheckerTbc): a non-empty input must reach the last tap with
    one side's padding, T + pad >= K; the backward checks only Tout >= 0."""
    return T > 0 and T + pad < K


def assert_forward_refused(s, x, w, b, pad):
    Tout = x.shape[0] + 2 * pad - w.shape[0] + 1
    y = s.poisoned((Tout, x.shape[1], w.shape[2]), x.dtype)
    status, *_ = acl.aclnnConvTbcGetWorkspaceSize(s.tensor(x), s.tensor(w), s.tensor(b), pad, y, 0)
    assert status == 161002 and "T + pad - (K - 1) - 1" in acl.aclGetRecentErrMsg(), acl.aclGetRecentErrMsg()


def run_forward(s, x, w, b, pad, cube, *, strided=False, offset=0, fmt=ND, out_dtype=None):
    Tout = x.shape[0] + 2 * pad - w.shape[0] + 1
    tx, tw = (s.tensor(a, strided=strided, offset=offset, fmt=fmt) for a in (x, w))
    tb = s.tensor(b, strided=strided, offset=offset)
    y = s.poisoned((Tout, x.shape[1], w.shape[2]), out_dtype or x.dtype, strided=strided, offset=offset, fmt=fmt)
    status = s.run(acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, tx, tw, tb, pad, y, cube)
    assert status == 0, acl.aclGetRecentErrMsg()
    return s.read(y)


def check_backward(s, rng, shape, dtype, cube, **kw):
    x, w, b, g = arrays(rng, *shape, dtype)
    pad = shape[5]
    (_, egi, egw, egb), (_, mgi, mgw, mgb) = torch_conv_tbc(x, w, b, g, pad)
    gi, gw, gb = run_backward(s, g, x, w, b, pad, cube, **kw)
    rtol = tolerance(dtype, cube, s.kind)
    check(gi, egi, mgi, rtol, f"gradInput {shape}")
    check(gw, egw, mgw, rtol, f"gradWeight {shape}")
    check(gb, egb, mgb, rtol, f"gradBias {shape}")


# ------------------------------------------------------------------------------------ backward
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cube", [0, 1, 2, 3])
def test_backward_random(session, rng, dtype, cube):
    for _ in range(2):
        check_backward(session, rng, random_case(rng), dtype, cube)


SHAPES = {   # T, B, Cin, Cout, K, pad
    "pad0": (6, 2, 3, 4, 3, 0),
    "pad_gt_0": (5, 2, 3, 3, 3, 1),
    "pad_gt_K": (3, 2, 2, 3, 2, 4),
    "K1": (5, 3, 4, 2, 1, 0),
    "K1_pad": (4, 2, 3, 2, 1, 2),
    "T1": (1, 2, 3, 4, 1, 0),
    "T1_pad": (1, 2, 3, 4, 3, 1),
    "B1": (6, 1, 3, 4, 3, 1),
    "Tout1": (4, 2, 3, 2, 4, 0),
    "Tout1_pad": (2, 2, 3, 2, 4, 1),
    "Cin_ne_Cout": (5, 2, 7, 2, 2, 1),
    "K_gt_T": (2, 2, 3, 3, 4, 2),
    "many_rows": (40, 30, 2, 3, 2, 1),          # R = 1230 rows of dy
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_backward_shapes(session, rng, name):
    check_backward(session, rng, SHAPES[name], F32, 0)


GEMM_SHAPES = {   # T, B, Cin, Cout, K, pad: taps of different row ranges, covering taps or none
    "same_c16": (11, 3, 16, 24, 3, 1),       # C multiples of 8: the 16-byte path of tbc_col_sums
    "same_c_odd": (10, 2, 13, 7, 3, 1),      # C not a multiple of 8: the scalar path
    "pad0_k5": (12, 2, 8, 16, 5, 0),         # no padding: no tap covers every input row (zero-fill)
    "pad_ge_K": (6, 2, 16, 8, 3, 3),         # output rows that read padding only (forward: bias)
    "T_lt_K": (2, 3, 8, 16, 5, 2),           # taps without rows
    "B1_k2": (9, 1, 24, 16, 2, 1),
    "wide": (7, 2, 40, 70, 3, 1),            # several column tiles of the sums, odd channel counts
}


@pytest.fixture(params=["plain", "split"])
def plan_mode(request, monkeypatch):
    """plain: the GPU plan's own choices at these small shapes; split: gradWeight split into depth chunks
    and gradBias into row chunks everywhere (the split-k path a large shape takes, tbc_reduce)."""
    if request.param == "split":
        from aclnn_gpu.ops.conv_tbc import launch
        for name, value in dict(SPLIT_MIN_FLOP=0, SPLIT_MIN_ROWS=1, SUM_SPLIT_BYTES=0, SUM_MIN_ROWS=1).items():
            monkeypatch.setattr(launch, name, value)
    return request.param


@pytest.mark.parametrize("name", list(GEMM_SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_and_forward_gemm_shapes(session, rng, plan_mode, name, dtype):
    """Every dtype over shapes that exercise the GPU plan's pieces: per-tap row ranges, the covering
    tap or the zero-filled accumulator, gradWeight whole or in depth chunks with remainder rows."""
    shape = GEMM_SHAPES[name]
    check_backward(session, rng, shape, dtype, 0)
    x, w, b, _ = arrays(rng, *shape, dtype)
    if forward_refused(shape[0], shape[4], shape[5]):
        assert_forward_refused(session, x, w, b, shape[5])
        return
    (ey, *_), (my, *_) = torch_conv_tbc(x, w, b, None, shape[5])
    check(run_forward(session, x, w, b, shape[5], 0), ey, my + np.abs(ey), tolerance(dtype, 0, session.kind),
          f"y {shape}")


def _same_nonfinite(actual, expected, mag, rtol, what):
    """NaN where PyTorch has NaN, the same infinities, the finite values within tolerance."""
    actual = np.asarray(actual, np.float64)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=f"{what}: NaN pattern")
    np.testing.assert_array_equal(np.isposinf(actual), np.isposinf(expected), err_msg=f"{what}: +inf pattern")
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected), err_msg=f"{what}: -inf pattern")
    finite = np.isfinite(expected)
    err = np.abs(actual[finite] - expected[finite])
    assert np.all(err <= rtol * mag[finite] + 1e-6), f"{what}: max err {err.max() if err.size else 0}"


@pytest.mark.parametrize("value", [np.inf, np.nan], ids=["inf", "nan"])
@pytest.mark.parametrize("where", ["weight", "grad"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_nonfinite_like_pytorch(session, rng, plan_mode, value, where, dtype):
    """An inf / NaN in the weight or the output gradient reaches exactly the outputs it reaches in
    PyTorch: taps that would read time padding are skipped, never multiplied by zeros."""
    for shape in ((7, 2, 3, 4, 3, 1), (5, 2, 4, 3, 2, 3), (6, 1, 3, 2, 4, 0)):
        x, w, b, g = arrays(rng, *shape, dtype)
        pad = shape[5]
        if where == "weight":
            w[0, 1, 1] = value              # the first tap: rows at the end only read padding
        else:
            g[0, 0, 1] = value              # the first output row: with pad > 0 it reads padding
        (ey, egi, egw, egb), _ = torch_conv_tbc(x, w, b, g, pad)
        clean = [np.where(np.isfinite(a.astype(np.float64)), a.astype(np.float64), 0) for a in (x, w, b, g)]
        _, (my, mgi, mgw, mgb) = torch_conv_tbc(*clean[:3], clean[3], pad)
        rtol = tolerance(dtype, 0, session.kind)
        gi, gw, gb = run_backward(session, g, x, w, b, pad, 0)
        for what, a, e, m in (("gradInput", gi, egi, mgi), ("gradWeight", gw, egw, mgw), ("gradBias", gb, egb, mgb)):
            _same_nonfinite(a, e, m, rtol, f"{what} {shape} {where}={value}")
        if where == "weight":
            _same_nonfinite(run_forward(session, x, w, b, pad, 0), ey, my + np.abs(b.astype(np.float64)), rtol,
                            f"y {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_strided_ncl(session, rng, dtype):
    """Strided views with a view offset in and out (outputs through scatter), NCL format labels."""
    check_backward(session, rng, random_case(rng), dtype, 0, strided=True, offset=3, fmt=NCL)


def test_backward_mixed_dtypes(session, rng):
    """self fp16, input fp32, weight bf16: promoted to fp32; each output in its own dtype, including
    outputs whose dtype differs from their operand's."""
    s = session
    T, B, Cin, Cout, K, pad = random_case(rng)
    x, w, b, g = arrays(rng, T, B, Cin, Cout, K, pad, F32)
    g, w = g.astype(F16), w.astype(BF16)
    (_, egi, egw, egb), (_, mgi, mgw, mgb) = torch_conv_tbc(x, w, b, g, pad)
    gi, gw, gb = run_backward(s, g, x, w, b, pad, 0, out_dtypes=(F16, F32, BF16))
    assert (gi.dtype, gw.dtype, gb.dtype) == (F16, F32, BF16)
    check(gi, egi, mgi, 4e-3, "gradInput")
    check(gw, egw, mgw, 1e-5, "gradWeight")
    check(gb, egb, mgb, 1.6e-2, "gradBias")
    # strided + mixed together
    gi, gw, gb = run_backward(s, g, x, w, b, pad, 0, out_dtypes=(F32, BF16, F16), strided=True, offset=1)
    check(gi, egi, mgi, 1e-5, "gradInput")
    check(gw, egw, mgw, 1.6e-2, "gradWeight")
    check(gb, egb, mgb, 4e-3, "gradBias")


@pytest.mark.parametrize("which", ["T0", "Cin0", "K0"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
def test_backward_empty_input(session, rng, which, dtype):
    """Empty input or weight with a non-empty self: gradInput = gradWeight = 0 (where non-empty),
    gradBias = sum of self over time and batch (docs/API.md §7, not CANN's B*Tout)."""
    T, B, Cin, Cout, K, pad = {"T0": (0, 2, 3, 4, 1, 1), "Cin0": (4, 2, 0, 3, 2, 1), "K0": (3, 2, 3, 4, 0, 0)}[which]
    x, w, b, g = arrays(rng, T, B, Cin, Cout, K, pad, dtype)
    assert g.size > 0
    gi, gw, gb = run_backward(session, g, x, w, b, pad, 0)
    assert gi.shape == x.shape and gw.shape == w.shape
    assert np.all(gi.astype(np.float64) == 0) and np.all(gw.astype(np.float64) == 0)
    expected = g.astype(np.float64).sum(axis=(0, 1))
    check(gb, expected, np.abs(g.astype(np.float64)).sum(axis=(0, 1)), tolerance(dtype, 0, "cpu"), "gradBias")


def test_repeatable_and_workspace(session, rng):
    s = session
    shape = (5, 2, 3, 4, 3, 1)
    x, w, b, g = arrays(rng, *shape, F32)
    ts = [s.tensor(a) for a in (g, x, w, b)]
    outs = [s.poisoned(a.shape, F32) for a in (x, w, b)]
    status, ws, ex = acl.aclnnConvTbcBackwardGetWorkspaceSize(*ts, 1, 0, *outs)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    workspace = s.malloc(ws) if ws else None
    for _ in range(2):
        assert acl.aclnnConvTbcBackward(workspace, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    (_, egi, egw, egb), (_, mgi, mgw, mgb) = torch_conv_tbc(x, w, b, g, 1)
    check(s.read(outs[0]), egi, mgi, 1e-5, "gradInput")
    check(s.read(outs[2]), egb, mgb, 1e-5, "gradBias")
    assert acl.aclDestroyAclOpExecutor(ex) == 0


# ------------------------------------------------------------------------------------ forward
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cube", [0, 1, 2])
def test_forward_random(session, rng, dtype, cube):
    shape = random_case(rng, forward=True)
    x, w, b, _ = arrays(rng, *shape, dtype)
    (ey, *_), (my, *_) = torch_conv_tbc(x, w, b, None, shape[5])
    check(run_forward(session, x, w, b, shape[5], cube), ey, my + np.abs(ey), tolerance(dtype, cube, session.kind),
          f"y {shape}")


@pytest.mark.parametrize("name", ["pad0", "pad_gt_K", "K1", "T1_pad", "Tout1"])
def test_forward_shapes_strided(session, rng, name):
    shape = SHAPES[name]
    x, w, b, _ = arrays(rng, *shape, F32)
    if forward_refused(shape[0], shape[4], shape[5]):
        assert_forward_refused(session, x, w, b, shape[5])
        return
    (ey, *_), (my, *_) = torch_conv_tbc(x, w, b, None, shape[5])
    check(run_forward(session, x, w, b, shape[5], 0), ey, my, 1e-5, "y")
    check(run_forward(session, x, w, b, shape[5], 0, strided=True, offset=2, fmt=NCL), ey, my, 1e-5, "y strided")
    xm, wm = x.astype(F16), w.astype(BF16)                 # mixed dtypes, fp32 output
    (ey, *_), (my, *_) = torch_conv_tbc(xm, wm, b, None, shape[5])
    check(run_forward(session, xm, wm, b, shape[5], 0, out_dtype=F32), ey, my, 1e-5, "y mixed")


def test_forward_empty_input(session, rng):
    """T == 0 with pad: the output is the bias on every row."""
    b = rng.standard_normal(3).astype(np.float32)
    y = run_forward(session, np.zeros((0, 2, 4), F32), rng.standard_normal((1, 4, 3)).astype(F32), b, 1, 0)
    np.testing.assert_array_equal(y, np.broadcast_to(b, (2, 2, 3)))


# ------------------------------------------------------------------------------------ bad inputs
def _bad_cases():
    f32 = np.float32

    def ok(s, **change):
        # T=5, B=2, Cin=3, Cout=4, K=3, pad=1 -> Tout=5
        args = dict(self=s.tensor(np.ones((5, 2, 4), f32)), input=s.tensor(np.ones((5, 2, 3), f32)),
                    weight=s.tensor(np.ones((3, 3, 4), f32)), bias=s.tensor(np.ones(4, f32)), pad=1,
                    cubeMathType=0, gradInput=s.poisoned((5, 2, 3), f32), gradWeight=s.poisoned((3, 3, 4), f32),
                    gradBias=s.poisoned((4,), f32))
        args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
        return args

    def t(shape, dtype=f32, fmt=ND):
        return lambda s: s.tensor(np.ones(shape, dtype), fmt=fmt)

    N, I = 161001, 161002
    rows = [(f"null {n}", (lambda n: lambda s: ok(s, **{n: None}))(n), N)
            for n in ("self", "input", "weight", "bias", "gradInput", "gradWeight", "gradBias")]
    rows += [
        ("int32 self", lambda s: ok(s, self=t((5, 2, 4), np.int32)), I),
        ("float64 input", lambda s: ok(s, input=t((5, 2, 3), np.float64)), I),
        ("int64 weight", lambda s: ok(s, weight=t((3, 3, 4), np.int64)), I),
        ("bool bias", lambda s: ok(s, bias=t((4,), np.bool_)), I),
        ("float64 gradInput", lambda s: ok(s, gradInput=t((5, 2, 3), np.float64)), I),
        ("int32 gradWeight", lambda s: ok(s, gradWeight=t((3, 3, 4), np.int32)), I),
        ("uint8 gradBias", lambda s: ok(s, gradBias=t((4,), np.uint8)), I),
        ("NCHW self", lambda s: ok(s, self=t((5, 2, 4), fmt=acl.ACL_FORMAT_NCHW)), I),
        ("NHWC weight", lambda s: ok(s, weight=t((3, 3, 4), fmt=acl.ACL_FORMAT_NHWC)), I),
        ("NCL bias", lambda s: ok(s, bias=t((4,), fmt=NCL)), I),
        ("NCL gradBias", lambda s: ok(s, gradBias=t((4,), fmt=NCL)), I),
        ("empty self", lambda s: ok(s, self=t((5, 0, 4)), input=t((5, 0, 3)), gradInput=t((5, 0, 3))), I),
        ("rank 2 self", lambda s: ok(s, self=t((10, 4))), I),
        ("rank 4 input", lambda s: ok(s, input=t((5, 2, 3, 1))), I),
        ("rank 2 weight", lambda s: ok(s, weight=t((3, 12))), I),
        ("rank 2 bias", lambda s: ok(s, bias=t((1, 4))), I),
        ("rank 2 gradBias", lambda s: ok(s, gradBias=t((1, 4))), I),
        ("weight Cin mismatch", lambda s: ok(s, weight=t((3, 2, 4)), gradWeight=t((3, 2, 4))), I),
        ("bias Cout mismatch", lambda s: ok(s, bias=t((5,)), gradBias=t((5,))), I),
        ("negative pad", lambda s: ok(s, pad=-1), I),
        ("pad not an int", lambda s: ok(s, pad=1.5), I),
        ("Tout < 0", lambda s: ok(s, input=t((1, 2, 3)), gradInput=t((1, 2, 3)), weight=t((4, 3, 4)),
                                  gradWeight=t((4, 3, 4)), pad=0), I),
        ("self Tout wrong", lambda s: ok(s, self=t((4, 2, 4))), I),
        ("self B wrong", lambda s: ok(s, self=t((5, 3, 4))), I),
        ("gradInput shape", lambda s: ok(s, gradInput=t((5, 2, 4))), I),
        ("gradWeight shape", lambda s: ok(s, gradWeight=t((3, 4, 3))), I),
        ("gradBias shape", lambda s: ok(s, gradBias=t((3,))), I),
        ("cubeMathType -1", lambda s: ok(s, cubeMathType=-1), I),
        ("cubeMathType 4", lambda s: ok(s, cubeMathType=4), I),
        ("self not a tensor", lambda s: ok(s, self=np.ones((5, 2, 4), f32)), I),
        ("freed input", lambda s: ok(s, input=lambda s: _freed((5, 2, 3))), I),
        ("foreign weight", lambda s: ok(s, weight=lambda s: acl.aclCreateTensor(
            (3, 3, 4), acl.ACL_FLOAT, None, 0, ND, (3, 3, 4), _HOST.ctypes.data)), I),
        ("too-short self", lambda s: ok(s, self=lambda s: acl.aclCreateTensor(
            (5, 2, 4), acl.ACL_FLOAT, None, 2, ND, (5, 2, 4), near_end(s.malloc(160), 160))), I),
        ("null data bias", lambda s: ok(s, bias=lambda s: acl.aclCreateTensor((4,), acl.ACL_FLOAT, None, 0, ND,
                                                                              (4,), None)), N),
        ("gradInput aliases input", lambda s: _alias(ok(s), "gradInput", "input"), I),
        ("gradBias aliases self", lambda s: _alias(ok(s), "gradBias", "self"), I),
        ("gradInput aliases gradWeight", lambda s: _alias(ok(s), "gradInput", "gradWeight"), I),
        ("gradInput overlaps itself", lambda s: ok(s, gradInput=lambda s: acl.aclCreateTensor(
            (5, 2, 3), acl.ACL_FLOAT, (0, 3, 1), 0, ND, (6,), s.malloc(24))), I),
    ]
    return rows


_HOST = np.ones(36, np.float32)


def _freed(shape):
    status, p = acl.aclrtMalloc(int(np.prod(shape)) * 4, 0)
    t = acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, ND, shape, p)
    acl.aclrtFree(p)
    return t


def _alias(args, out, other):
    src = args[other]
    n = int(np.prod(args[out].shape))
    args[out] = acl.aclCreateTensor(args[out].shape, acl.ACL_FLOAT, None, 0, ND, args[out].shape, src.data)
    assert n <= src.numel
    return args


BAD = _bad_cases()


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(cpu_session, case):
    name, build, expected = case
    s = cpu_session
    args = build(s)
    outs = [args[k] for k in ("gradInput", "gradWeight", "gradBias")]
    before = [s.raw(o) if isinstance(o, acl.aclTensor) and o.data and o.numel and not o.destroyed else None
              for o in outs]
    status, ws, executor = acl.aclnnConvTbcBackwardGetWorkspaceSize(*args.values())
    message = acl.aclGetRecentErrMsg()
    assert (status, ws, executor) == (expected, None, None), message
    assert message.startswith(OP) and len(message) > 30, message
    words = name.split()
    param = next((w for w in words if w in args), None)
    if param is not None:
        assert param in message, message
    for o, b in zip(outs, before):
        if b is not None:
            assert s.raw(o) == b


def test_bad_input_table_is_large():
    assert len(BAD) >= 20


def test_validation_order(cpu_session):
    """The first broken rule wins: null before dtype before format before empty before shapes before
    cubeMathType."""
    s = cpu_session
    good = dict(self=s.tensor(np.ones((5, 2, 4), np.float32)), input=s.tensor(np.ones((5, 2, 3), np.float32)),
                weight=s.tensor(np.ones((3, 3, 4), np.float32)), bias=s.tensor(np.ones(4, np.float32)))
    outs = [s.poisoned((5, 2, 3), np.float32), s.poisoned((3, 3, 4), np.float32), s.poisoned((4,), np.float32)]
    r = acl.aclnnConvTbcBackwardGetWorkspaceSize(s.tensor(np.ones((5, 2, 4), np.int32)), good["input"], None,
                                                  good["bias"], 1, 0, *outs)
    assert r[0] == 161001
    r = acl.aclnnConvTbcBackwardGetWorkspaceSize(s.tensor(np.ones((5, 2), np.int32)), good["input"],
                                                  good["weight"], good["bias"], -1, 9, *outs)
    assert r[0] == 161002 and "dtype" in acl.aclGetRecentErrMsg()
    r = acl.aclnnConvTbcBackwardGetWorkspaceSize(good["self"], good["input"], good["weight"], good["bias"], -1, 9,
                                                  *outs)
    assert r[0] == 161002 and "pad" in acl.aclGetRecentErrMsg()
    r = acl.aclnnConvTbcBackwardGetWorkspaceSize(good["self"], good["input"], good["weight"], good["bias"], 1, 9,
                                                  *outs)
    assert r[0] == 161002 and "cubeMathType" in acl.aclGetRecentErrMsg()


def test_forward_bad_inputs(cpu_session):
    s = cpu_session
    x, w, b = (s.tensor(np.ones(sh, np.float32)) for sh in ((5, 2, 3), (3, 3, 4), (4,)))
    y = s.poisoned((5, 2, 4), np.float32)
    before = s.raw(y)
    cases = [((None, w, b, 1, y, 0), 161001), ((x, w, b, 1, None, 0), 161001),
             ((s.tensor(np.ones((5, 2, 3), np.int32)), w, b, 1, y, 0), 161002),
             ((x, w, b, -1, y, 0), 161002), ((x, w, b, 0, y, 0), 161002), ((x, w, b, 1, y, 4), 161002),
             ((x, s.tensor(np.ones((3, 2, 4), np.float32)), b, 1, y, 0), 161002),
             ((x, w, s.tensor(np.ones((4,), np.float32), fmt=NCL), 1, y, 0), 161002),
             ((x, w, b, 1, acl.aclCreateTensor((5, 2, 4), acl.ACL_FLOAT, None, 0, ND, (5, 2, 4), x.data), 0), 161002)]
    for args, code in cases:
        status, ws, ex = acl.aclnnConvTbcGetWorkspaceSize(*args)
        msg = acl.aclGetRecentErrMsg()
        assert (status, ex) == (code, None), msg
        assert msg.startswith("aclnnConvTbc: "), msg
    assert s.raw(y) == before


def test_phase_two_checks(session, rng):
    s = session
    x, w, b, g = arrays(rng, 6, 2, 3, 4, 3, 2, F16)   # pad copies + fp32 accumulator: a workspace
    ts = [s.tensor(g, strided=True), s.tensor(x), s.tensor(w), s.tensor(b)]
    outs = [s.poisoned(x.shape, F16), s.poisoned(w.shape, F16, strided=True), s.poisoned(b.shape, F16)]
    before = [s.raw(o) for o in outs]
    status, ws, ex = acl.aclnnConvTbcBackwardGetWorkspaceSize(*ts, 2, 0, *outs)
    assert status == 0, acl.aclGetRecentErrMsg()
    if s.kind == "cpu":
        assert ws == 0
        return
    assert ws > 0
    assert acl.aclnnConvTbcBackward(None, ws, ex, s.stream) == 161001
    work = s.malloc(ws)
    assert acl.aclnnConvTbcBackward(work, ws - 1, ex, s.stream) == 161002          # workspace too short
    assert acl.aclnnConvTbcBackward(work + 256, ws, ex, s.stream) == 161002        # past the allocation
    assert acl.aclnnConvTbc(work, ws, ex, s.stream) == 161002                       # another operator's
    assert [s.raw(o) for o in outs] == before
    assert acl.aclnnConvTbcBackward(work, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert acl.aclnnConvTbcBackward(work, ws, ex, s.stream) == 161002              # spent


# ------------------------------------------------------------------------------------ functional
def test_functional_numpy(session, rng):
    shape = (5, 2, 3, 4, 3, 1)
    x, w, b, g = arrays(rng, *shape, F32)
    (ey, egi, egw, egb), (my, mgi, mgw, mgb) = torch_conv_tbc(x, w, b, g, 1)
    y = F.conv_tbc(x, w, b, 1)
    assert isinstance(y, np.ndarray) and y.dtype == F32
    check(y, ey, my, 1e-5, "y")
    gi, gw, gb = F.conv_tbc_backward(g, x, w, b, pad=1, cube_math_type=0)
    check(gi, egi, mgi, 1e-5, "gi")
    check(gw, egw, mgw, 1e-5, "gw")
    check(gb, egb, mgb, 1e-5, "gb")
    # strided NumPy views in
    xs = np.ascontiguousarray(np.repeat(x, 2, axis=2))[:, :, ::2]
    check(F.conv_tbc(xs, w, b, 1), ey, my, 1e-5, "y strided")
    with pytest.raises(acl.AclnnError) as err:
        F.conv_tbc_backward(g, x, w, b, pad=1, cube_math_type=5)
    assert err.value.status == 161002


def test_functional_torch(session, rng):
    shape = (4, 2, 3, 2, 2, 1)
    x, w, b, g = arrays(rng, *shape, BF16)
    tx, tw, tb, tg = (torch.tensor(a.astype(np.float32)).to(torch.bfloat16) for a in (x, w, b, g))
    (ey, egi, egw, egb), (my, mgi, mgw, mgb) = torch_conv_tbc(x, w, b, g, 1)
    y = F.conv_tbc(tx, tw, tb, 1)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    check(y.float().numpy(), ey, my + np.abs(ey), 1.6e-2, "y")
    gi, gw, gb = F.conv_tbc_backward(tg, tx, tw, tb, 1)
    assert all(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in (gi, gw, gb))
    check(gi.float().numpy(), egi, mgi, 1.6e-2, "gi")
    check(gw.float().numpy(), egw, mgw, 1.6e-2, "gw")
    check(gb.float().numpy(), egb, mgb, 1.6e-2, "gb")
