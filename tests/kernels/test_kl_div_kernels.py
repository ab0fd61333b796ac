"""KL divergence kernels (kernels/kl_div.cu) through their GPU plan (ops/kl_div/launch.py), run in the
CPU emulator (StandaloneEmuContext, sm_count 4 -> grids of at most 16 blocks of 256), against an
independent float64 NumPy reference written here, and PyTorch where handy.

Device memory is host memory here: tensors are NumPy views whose addresses are the "device
pointers"; outputs are poisoned with NaN, and every byte of an output's backing buffer outside the
view must still be NaN afterwards (nothing written out of bounds)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from aclnn_gpu.emulator.context import StandaloneEmuContext
from aclnn_gpu.kernels.occupancy import blocks_per_sm
from aclnn_gpu.ops.kl_div import launch as plan

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
CODE = {F32: 0, F16: 1, F64: 11, BF16: 27}
# relative tolerance of one value stored in the dtype (a couple of ulps)
STORE_RTOL = {F16: 1e-3, BF16: 8e-3, F32: 2e-6, F64: 1e-14}
ALL = [F32, F16, BF16, F64]


class RecordingCtx(StandaloneEmuContext):
    def __init__(self, sm_count=4):
        super().__init__(sm_count)
        self.launched = []

    def launch(self, file, expr, grid, block, args, shared_mem=0):
        # grids stay within one full wave at the kernel's occupancy (kernels/occupancy.py)
        assert grid[0] <= self.sm_count * blocks_per_sm(self.arch, file, expr, block[0]) and block[0] == plan.BLOCK
        self.launched.append(expr.split("<")[0])
        super().launch(file, expr, grid, block, args, shared_mem)


@pytest.fixture(scope="module")
def ctx():
    return RecordingCtx(4)


class Buf:
    """A tensor view over a bigger, 64-byte aligned backing buffer (so layouts are controlled)."""

    def __init__(self, base: np.ndarray, view: np.ndarray):
        self.base, self.view = base, view

    @property
    def desc(self):
        it = self.view.dtype.itemsize
        return (self.view.ctypes.data, self.view.shape, tuple(s // it for s in self.view.strides),
                CODE[self.view.dtype])


def aligned(n: int, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    raw = np.empty(n * dtype.itemsize + 128, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n * dtype.itemsize].view(dtype)


def make(shape, dtype, layout, fill, rng=None):
    """layout: 'c' contiguous (aligned), 'off' contiguous at a +1 element offset (misaligned),
    'str' non-contiguous (every other element of a wider last dim, plus an offset), 'rev'
    (dims permuted: a transposed view)."""
    shape = tuple(shape)
    n = math.prod(shape)
    if layout == "c":
        base = aligned(max(n, 1), dtype)
        view = base[:n].reshape(shape)
    elif layout == "off":
        base = aligned(n + 1, dtype)
        view = base[1:1 + n].reshape(shape)
    elif layout == "str":
        wide = shape[:-1] + (2 * shape[-1] + 1,) if shape else (3,)
        base = aligned(math.prod(wide) + 3, dtype)
        full = base[3:3 + math.prod(wide)].reshape(wide)
        view = full[..., 1::2] if shape else full[1:2].reshape(())
        view = view[..., :shape[-1]] if shape else view
    elif layout == "rev":
        rshape = shape[::-1]
        base = aligned(max(n, 1), dtype)
        view = base[:n].reshape(rshape).transpose(tuple(range(len(shape)))[::-1])
    else:
        raise ValueError(layout)
    assert view.shape == shape
    base[...] = np.nan
    if fill is not None:
        view[...] = np.asarray(fill(shape), dtype=np.float64).astype(dtype)
    return Buf(base, view)


def f64(b: Buf) -> np.ndarray:
    return np.asarray(b.view, dtype=np.float64)


def untouched_outside(b: Buf) -> bool:
    mask = np.ones(b.base.shape, dtype=bool)
    # element indices of the view inside its backing buffer
    it = b.base.dtype.itemsize
    idx = np.indices(b.view.shape).reshape(len(b.view.shape), -1) if b.view.ndim else np.zeros((0, 1), np.int64)
    start = (b.view.ctypes.data - b.base.ctypes.data) // it
    st = np.array([s // it for s in b.view.strides], dtype=np.int64)
    lin = start + (st[:, None] * idx).sum(axis=0) if b.view.ndim else np.array([start])
    mask[lin] = False
    return bool(np.all(np.isnan(np.asarray(b.base[mask], dtype=np.float64))))


# ------------------------------------------------------------------------ references (float64)
def ref_backward(g, t, self_shape, reduction, log_target, coef_f32=True):
    """coef is fp32 as in CANN (1/n in double, cast); with an fp64 operand (extension) fp64."""
    b_shape = np.broadcast_shapes(tuple(self_shape), t.shape)
    gb = np.broadcast_to(g, b_shape)
    tb = np.broadcast_to(t, b_shape)
    e = np.exp(tb) if log_target else tb
    n = math.prod(b_shape)
    if reduction == 1:
        coef = 1.0 / n if n else math.inf
    elif reduction == 3:
        b0 = b_shape[0] if b_shape else 1
        coef = 1.0 / b0 if b0 else math.inf
    else:
        coef = 1.0
    if gb.dtype != np.float64:
        raise AssertionError
    coef = float(np.float32(coef)) if coef_f32 else coef
    with np.errstate(invalid="ignore"):
        r = -(e * gb) * coef
    lead = len(b_shape) - len(self_shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(self_shape)
                                      if s == 1 and b_shape[lead + i] != 1)
    total = r.sum(axis=axes, keepdims=True) if axes else r
    absum = np.abs(r).sum(axis=axes, keepdims=True) if axes else np.abs(r)
    total = total.reshape(total.shape[lead:]).reshape(self_shape)
    absum = absum.reshape(absum.shape[lead:]).reshape(self_shape)
    return total, absum


def ref_forward_elem(s, t, log_target):
    with np.errstate(invalid="ignore", divide="ignore"):
        if log_target:
            return np.exp(t) * (t - s)
        xlogy = np.where(t == 0, 0.0, t * np.log(np.where(t == 0, 1.0, t)))
        xlogy = np.where(np.isnan(t), np.nan, xlogy)
        return xlogy - t * s


def check(got: np.ndarray, ref: np.ndarray, scale: np.ndarray, rtol: float):
    atol = {F16: 6e-8, BF16: 1e-38}.get(np.asarray(got).dtype, 1e-300)   # subnormal spacing
    got = np.asarray(got, dtype=np.float64)
    ok = np.abs(got - ref) <= rtol * (np.abs(ref) + scale) + atol
    ok |= (np.isnan(ref) & np.isnan(got)) | (got == ref)
    assert ok.all(), f"max err {np.nanmax(np.abs(got - ref))}; got {got[~ok][:5]} ref {ref[~ok][:5]}"


def math_rtol(*dtypes):
    return 1e-12 if F64 in dtypes else 2e-5


# ------------------------------------------------------------------------ backward runner
def run_backward(ctx, g: Buf, t: Buf, out: Buf, self_shape, reduction, log_target):
    kw = dict(grad_output=g.desc, target=t.desc, out=out.desc, self_shape=self_shape)
    nbytes = plan.backward_workspace_bytes(**kw, reduction=reduction, log_target=log_target)
    ws = aligned(max(nbytes, 8), np.uint8)
    ws[...] = 0xAB
    ctx.launched.clear()
    plan.launch_backward(ctx, **kw, reduction=reduction, log_target=log_target, workspace_ptr=ws.ctypes.data)
    return list(ctx.launched), nbytes


def check_backward(ctx, g, t, out, self_shape, reduction, log_target):
    launched, nbytes = run_backward(ctx, g, t, out, self_shape, reduction, log_target)
    dts = (g.view.dtype, t.view.dtype, out.view.dtype)
    ref, absum = ref_backward(f64(g), f64(t), self_shape, reduction, log_target, coef_f32=F64 not in dts)
    rtol = STORE_RTOL[out.view.dtype] + math_rtol(*dts) * 4
    check(out.view, ref, absum, rtol)
    assert untouched_outside(out)
    return launched, nbytes


def gfill(rng):
    return lambda shape: rng.uniform(-2, 2, shape)


def tfill(rng, log_target, lo=-0.5):
    """log_target: log-probabilities; else probabilities-like with 10% exact zeros (lo < 0 adds
    negative targets, fine for the backward; the forward gets NaN from log there)."""
    if log_target:
        return lambda shape: rng.uniform(-3, 1, shape)
    return lambda shape: np.where(rng.random(shape) < 0.1, 0.0, rng.uniform(lo, 2, shape))


# ------------------------------------------------------------------------ backward tests
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("log_target", [False, True])
def test_backward_fast_same_shape(ctx, dtype, log_target):
    rng = np.random.default_rng(1 + CODE[dtype] + 100 * log_target)
    shape = (3, 1667) if dtype.itemsize >= 4 else (5, 1229)   # ragged vectors + a scalar tail
    g = make(shape, dtype, "c", gfill(rng))
    t = make(shape, dtype, "c", tfill(rng, log_target))
    out = make(shape, dtype, "c", None)
    launched, nbytes = check_backward(ctx, g, t, out, shape, 0, log_target)
    assert launched == ["kl_bwd_contig"] and nbytes == 0


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("reduction", [1, 2, 3])
def test_backward_fast_scalar_grad_misaligned(ctx, dtype, reduction):
    rng = np.random.default_rng(7 + reduction)
    shape = (7, 3, 33)
    g = make((), dtype, "c", lambda s: np.array(0.75))
    t = make(shape, dtype, "off", tfill(rng, False))        # misaligned: scalar path
    out = make(shape, dtype, "off", None)
    launched, _ = check_backward(ctx, g, t, out, shape, reduction, False)
    assert launched == ["kl_bwd_contig"]


def test_backward_fast_grid_stride(ctx):
    # more elements than the 16 x 256 threads of the capped grid, fp32 scalar path
    rng = np.random.default_rng(3)
    shape = (20011,)
    g = make(shape, F32, "off", gfill(rng))
    t = make(shape, F32, "off", tfill(rng, True))
    out = make(shape, F32, "off", None)
    launched, _ = check_backward(ctx, g, t, out, shape, 1, True)
    assert launched == ["kl_bwd_contig"]


@pytest.mark.parametrize("reduction", [0, 1, 2, 3, 6])
@pytest.mark.parametrize("log_target", [False, True])
def test_backward_target_broadcasts_beyond_self(ctx, reduction, log_target):
    rng = np.random.default_rng(11 + reduction)
    self_shape = (1, 37, 1)
    t_shape = (3, 4, 37, 5)                       # leading extra axes + self's size-1 axes
    g = make(t_shape, F32, "c", gfill(rng))
    t = make(t_shape, F32, "str", tfill(rng, log_target))
    out = make(self_shape, F32, "c", None)
    launched, nbytes = check_backward(ctx, g, t, out, self_shape, reduction, log_target)
    assert launched == ["kl_bwd_strided"] and nbytes == plan.TILING_BYTES


@pytest.mark.parametrize("dtype", [F32, F64])
def test_backward_long_reduction_block_mode(ctx, dtype):
    rng = np.random.default_rng(5)
    self_shape = (3, 1)
    t_shape = (2, 3, 700)                         # 1400 elements summed into each of 3 outputs
    g = make((), dtype, "c", lambda s: np.array(-1.25))
    t = make(t_shape, dtype, "rev", tfill(rng, False))
    out = make(self_shape, dtype, "str", None)
    launched, _ = check_backward(ctx, g, t, out, self_shape, 3, False)
    assert launched == ["kl_bwd_strided_block"]


def test_backward_scalar_self(ctx):
    rng = np.random.default_rng(6)
    g = make((), F16, "c", lambda s: np.array(2.0))
    t = make((9, 65), F16, "c", tfill(rng, True))
    out = make((), F32, "c", None)
    check_backward(ctx, g, t, out, (), 1, True)


@pytest.mark.parametrize("dts", [(F16, F32, F16, F32), (BF16, F16, F32, BF16), (F32, BF16, BF16, F16),
                                 (F64, F32, F16, BF16), (F16, F16, F16, F64)])
def test_backward_mixed_dtypes(ctx, dts):
    gd, _sd, td, od = dts
    rng = np.random.default_rng(21)
    shape = (4, 301)
    g = make(shape, gd, "c", gfill(rng))
    t = make(shape, td, "c", tfill(rng, False))
    out = make(shape, od, "c", None)
    launched, _ = check_backward(ctx, g, t, out, shape, 1, False)
    assert launched == ["kl_bwd_strided"]


@pytest.mark.parametrize("layout", ["str", "rev", "off"])
def test_backward_strided_views_same_shape(ctx, layout):
    rng = np.random.default_rng(31)
    shape = (6, 5, 41)
    g = make((5, 1), BF16, "c", gfill(rng))                 # gradOutput broadcast along two axes
    t = make(shape, BF16, layout, tfill(rng, True))
    out = make(shape, BF16, layout, None)
    check_backward(ctx, g, t, out, shape, 2, True)


def test_backward_empty(ctx):
    g = make((0, 3), F32, "c", None)
    t = make((0, 3), F32, "c", None)
    out = make((0, 3), F32, "c", None)
    launched, nbytes = run_backward(ctx, g, t, out, (0, 3), 1, False)
    assert launched == [] and nbytes == 0


def test_backward_empty_reduced_axis(ctx):
    # self (1, 4) non-empty, target (0, 4): B is empty, out is a sum of nothing -> 0
    g = make((0, 4), F32, "c", None)
    t = make((0, 4), F32, "c", None)
    out = make((1, 4), F32, "c", None)
    run_backward(ctx, g, t, out, (1, 4), 1, False)
    assert np.all(out.view == 0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_backward_matches_torch(ctx):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(41)
    for reduction, name in [(1, "mean"), (2, "sum"), (3, "batchmean"), (0, "none")]:
        for log_target in (False, True):
            shape = (3, 2, 29)
            x = torch.tensor(rng.standard_normal(shape), dtype=torch.float64, requires_grad=True)
            tt = torch.tensor(tfill(rng, log_target)(shape), dtype=torch.float64)
            loss = torch.nn.functional.kl_div(x, tt, reduction=name, log_target=log_target)
            gout = torch.tensor(rng.uniform(-2, 2, loss.shape), dtype=torch.float64)
            loss.backward(gout)
            g = make(loss.shape, F64, "c", lambda s: gout.numpy())
            t = make(shape, F64, "c", lambda s: tt.numpy())
            out = make(shape, F64, "c", None)
            run_backward(ctx, g, t, out, shape, reduction, log_target)
            np.testing.assert_allclose(out.view, x.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_backward_deterministic(ctx):
    rng = np.random.default_rng(51)
    g = make((), F32, "c", lambda s: np.array(1.0))
    t = make((2, 3000), F32, "c", tfill(rng, False))
    outs = []
    for _ in range(2):
        out = make((1, 1), F32, "c", None)
        run_backward(ctx, g, t, out, (1, 1), 2, False)
        outs.append(out.view.copy())
    assert outs[0].tobytes() == outs[1].tobytes()


# ------------------------------------------------------------------------ forward
def run_forward(ctx, s: Buf, t: Buf, out: Buf, reduction, log_target):
    kw = dict(self=s.desc, target=t.desc, out=out.desc, reduction=reduction, log_target=log_target)
    nbytes = plan.forward_workspace_bytes(**kw)
    ws = aligned(max(nbytes, 8), np.uint8)
    ws[...] = 0xAB
    ctx.launched.clear()
    plan.launch_forward(ctx, **kw, workspace_ptr=ws.ctypes.data)
    return list(ctx.launched), nbytes


def check_forward(ctx, s, t, out, reduction, log_target):
    launched, nbytes = run_forward(ctx, s, t, out, reduction, log_target)
    e = ref_forward_elem(*np.broadcast_arrays(f64(s), f64(t)), log_target)
    dts = (s.view.dtype, t.view.dtype, out.view.dtype)
    if reduction in (1, 2, 3):
        n = e.size
        div = {2: 1.0, 1: float(n), 3: float(e.shape[0] if e.ndim else 1)}[reduction]
        with np.errstate(invalid="ignore", divide="ignore"):
            ref = np.asarray(e.sum() / div)
            scale = np.asarray(np.abs(e).sum() / div)
    else:
        ref, scale = e, np.abs(e)
    rtol = STORE_RTOL[out.view.dtype] + math_rtol(*dts) * 4
    check(out.view, ref, scale, rtol)
    assert untouched_outside(out)
    if not np.isnan(e).any():
        assert not np.isnan(np.asarray(out.view, dtype=np.float64)).any()
    return launched, nbytes


def sfill(rng):
    return lambda shape: rng.uniform(-3, 0.5, shape)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("log_target", [False, True])
def test_forward_none_fast(ctx, dtype, log_target):
    rng = np.random.default_rng(61 + CODE[dtype])
    shape = (2, 2053)
    s = make(shape, dtype, "c", sfill(rng))
    t = make(shape, dtype, "c", tfill(rng, log_target, 0.0))
    out = make(shape, dtype, "c", None)
    launched, nbytes = check_forward(ctx, s, t, out, 0, log_target)
    assert launched == ["kl_fwd_contig"] and nbytes == 0


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("reduction", [1, 2, 3])
def test_forward_reduce_fast(ctx, dtype, reduction):
    rng = np.random.default_rng(71 + reduction + CODE[dtype])
    shape = (13, 777)
    s = make(shape, dtype, "c", sfill(rng))
    t = make(shape, dtype, "c", tfill(rng, reduction == 2, 0.0))
    out = make((), dtype, "c", None)
    launched, nbytes = check_forward(ctx, s, t, out, reduction, reduction == 2)
    assert launched == ["kl_fwd_partial_contig", "kl_fwd_final"]
    assert nbytes == plan.TILING_BYTES + plan.MAX_PARTIALS * (8 if dtype == F64 else 4)


@pytest.mark.parametrize("reduction", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("log_target", [False, True])
def test_forward_broadcast_strided(ctx, reduction, log_target):
    rng = np.random.default_rng(81 + reduction)
    s = make((4, 1, 37), F16, "str", sfill(rng))
    t = make((3, 1, 9, 1), F32, "rev", tfill(rng, log_target, 0.0))
    b = (3, 4, 9, 37)
    out = make(b if reduction not in (1, 2, 3) else (), BF16 if reduction else F32, "str" if reduction in (0, 5) else "c", None)
    launched, _ = check_forward(ctx, s, t, out, reduction, log_target)
    assert launched[0] in ("kl_fwd_strided", "kl_fwd_partial_strided")


def test_forward_reduce_grid_stride_misaligned(ctx):
    rng = np.random.default_rng(91)
    s = make((9001,), F32, "off", sfill(rng))
    t = make((9001,), F32, "off", tfill(rng, False, 0.0))
    out = make((), F64, "c", None)                # fp64 out with fp32 inputs: fp64 general path
    launched, _ = check_forward(ctx, s, t, out, 1, False)
    assert launched == ["kl_fwd_partial_strided", "kl_fwd_final"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_forward_special_values(ctx):
    s = make((6,), F32, "c", lambda sh: np.array([1.0, -np.inf, 2.0, 0.5, np.nan, 1.0]))
    t = make((6,), F32, "c", lambda sh: np.array([0.0, 0.5, -1.0, np.nan, 1.0, 2.0]))
    out = make((6,), F32, "c", None)
    check_forward(ctx, s, t, out, 0, False)
    assert out.view[0] == 0 and np.isnan(out.view[2]) and np.isnan(out.view[3])


@pytest.mark.parametrize("reduction", [0, 1, 2, 3])
def test_forward_empty(ctx, reduction):
    s = make((0, 5), F32, "c", None)
    t = make((0, 5), F32, "c", None)
    out = make((0, 5) if reduction == 0 else (), F32, "c", None)
    launched, _ = run_forward(ctx, s, t, out, reduction, False)
    if reduction == 0:
        assert launched == []
    else:
        assert launched == ["kl_fwd_final"]
        v = float(out.view)
        assert (v == 0.0) if reduction == 2 else math.isnan(v)   # 0/0 for mean and batchmean (B[0] = 0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_forward_matches_torch(ctx):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(101)
    shape = (4, 3, 50)
    for name, code in [("none", 0), ("mean", 1), ("sum", 2), ("batchmean", 3)]:
        for log_target in (False, True):
            x = rng.standard_normal(shape)
            tt = tfill(rng, log_target, 0.0)(shape)
            want = torch.nn.functional.kl_div(torch.tensor(x), torch.tensor(tt), reduction=name,
                                              log_target=log_target).numpy()
            s = make(shape, F64, "c", lambda sh: x)
            t = make(shape, F64, "c", lambda sh: tt)
            out = make(want.shape, F64, "c", None)
            run_forward(ctx, s, t, out, code, log_target)
            np.testing.assert_allclose(out.view, want, rtol=1e-12, atol=1e-13)


# ------------------------------------------------------------------------ rank 8
@pytest.mark.parametrize("log_target", [False, True])
def test_rank8_general_paths(ctx, log_target):
    rng = np.random.default_rng(111)
    self_shape = (2, 1, 3, 1, 2, 1, 3, 2)
    t_shape = (2, 2, 3, 2, 2, 3, 3, 2)
    g = make(t_shape, F32, "rev", gfill(rng))                # transposed: nothing coalesces
    t = make(t_shape, F16, "rev", tfill(rng, log_target, 0.0))
    out = make(self_shape, F32, "str", None)
    launched, _ = check_backward(ctx, g, t, out, self_shape, 1, log_target)
    assert launched == ["kl_bwd_strided"]
    s = make(self_shape, BF16, "str", sfill(rng))
    for reduction in (0, 3):
        o = make(t_shape if reduction == 0 else (), F32, "rev" if reduction == 0 else "c", None)
        check_forward(ctx, s, t, o, reduction, log_target)
