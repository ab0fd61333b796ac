"""ConvTBC GPU plan through StandaloneEmuContext (kernels in the CPU emulator, GEMMs through the
NumPy gemm over host memory) vs the NumPy reference.

Outputs and workspace are NaN-poisoned, a guard region after the workspace must stay untouched,
every dtype and cubeMathType runs, with a tolerance scaled from |x|*|w| style magnitude bounds and
the precision of the mode."""
from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

from aclnn_gpu.kernels import gemm as G
from aclnn_gpu.kernels import gemm_host
from aclnn_gpu.emulator.context import StandaloneEmuContext
from aclnn_gpu.ops.conv_tbc import launch as plan
from aclnn_gpu.reference.conv_tbc import conv_tbc, conv_tbc_backward
from seeding import draw_seed

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
GUARD = 512


@pytest.fixture(scope="module")
def ctx():
    return StandaloneEmuContext(sm_count=4)


def _eps(dtype, cmt):
    """(relative error of the products vs the magnitude bound, of the stored result). 16-bit outputs
    summed over taps round once per tap (ATen's sequence): up to K = 7 roundings of partial sums, each
    bounded by the magnitude bound."""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        prod = {0: 2e-6, 1: 2 ** -10, 2: 2 ** -10, 3: 2 ** -10}[cmt]
        return prod, 0.0
    if dtype == np.float16:
        return 7 * 2 ** -11, 2 ** -10
    return 7 * 2 ** -8, 2 ** -7


def _poison(shape, dtype):
    return np.full(shape, np.nan, dtype=dtype)


def _workspace(nbytes):
    buf = np.full(nbytes + GUARD, 0xFF, dtype=np.uint8)      # 0xFFFF... is NaN in every float type
    return buf


def _check_guard(buf, nbytes):
    assert (buf[nbytes:] == 0xFF).all(), "workspace overrun"


def _close(name, got, ref, bound, rel_prod, rel_store, msg):
    got = got.astype(np.float64)
    assert np.isfinite(got).all(), f"{name}: non-finite values (unwritten?) {msg}"
    tol = rel_prod * bound + rel_store * np.abs(ref) + 1e-6
    err = np.abs(got - ref)
    bad = err > tol
    assert not bad.any(), (f"{name}: {bad.sum()} / {bad.size} beyond tolerance, max err {err.max():.3g} "
                           f"(tol there {tol.flat[np.argmax(err - tol)]:.3g}) {msg}")


SPLIT_EVERYWHERE = dict(SPLIT_MIN_FLOP=0, SPLIT_MIN_ROWS=1, SUM_SPLIT_BYTES=0, SUM_MIN_ROWS=1)


@pytest.fixture(params=[False, True], ids=["plain", "split"])
def split(request, monkeypatch):
    """plain: the plan's own choices at these small shapes (one GEMM per tap, one gradBias pass);
    split: every gradWeight split into depth chunks and every gradBias into row chunks (tbc_reduce)."""
    if request.param:
        for name, value in SPLIT_EVERYWHERE.items():
            monkeypatch.setattr(plan, name, value)
    return request.param


def _run_backward(ctx, T, B, Cin, Cout, K, pad, dtype, cmt, seed):
    rng = np.random.default_rng(seed)
    Tout = T + 2 * pad - K + 1
    x = rng.standard_normal((T, B, Cin)).astype(dtype)
    w = rng.standard_normal((K, Cin, Cout)).astype(dtype)
    b = rng.standard_normal(Cout).astype(dtype)
    g = rng.standard_normal((Tout, B, Cout)).astype(dtype)
    gi, gw, gb = _poison(x.shape, dtype), _poison(w.shape, dtype), _poison(b.shape, dtype)
    nbytes = plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cmt)
    ws = _workspace(nbytes)
    keep = [a.copy() for a in (x, w, b, g)]
    plan.launch_backward(ctx, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, dtype=dtype, cube_math_type=cmt,
                         grad=g.ctypes.data, input=x.ctypes.data, weight=w.ctypes.data,
                         grad_input=gi.ctypes.data, grad_weight=gw.ctypes.data, grad_bias=gb.ctypes.data,
                         workspace_ptr=ws.ctypes.data)
    _check_guard(ws, nbytes)
    for a, k in zip((x, w, b, g), keep):
        np.testing.assert_array_equal(a, k, err_msg="an input was modified")
    f = lambda a: a.astype(np.float64)  # noqa: E731
    ref = conv_tbc_backward(f(g), f(x), f(w), f(b), pad)
    bound = conv_tbc_backward(np.abs(f(g)), np.abs(f(x)), np.abs(f(w)), np.abs(f(b)), pad)
    return (gi, gw, gb), ref, bound, nbytes


BWD_SHAPES = [
    # T, B, Cin, Cout, K, pad
    (5, 2, 3, 4, 3, 1),      # "same" padding
    (6, 2, 4, 3, 4, 0),      # pad 0 (padded grad copy, q+ = 3)
    (3, 2, 2, 3, 2, 4),      # pad larger than K (grad used in place)
    (4, 1, 2, 3, 1, 0),      # K = 1, B = 1, no copies at all for fp32
    (1, 2, 3, 2, 2, 1),      # T = 1
    (3, 1, 2, 5, 7, 2),      # Tout = 1, Cin != Cout
    (2, 3, 8, 16, 5, 2),     # T < K: no tap covers every row, taps with fewer rows than chunks
    (40, 30, 2, 3, 2, 1),    # 1230 rows of dy: chunk remainders
]


@pytest.mark.parametrize("shape", BWD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_matches_reference(ctx, split, shape, dtype):
    seed = draw_seed()
    out, ref, bound, _ = _run_backward(ctx, *shape, dtype, 0, seed)
    rp, rs = _eps(dtype, 0)
    msg = f"seed={seed} shape={shape} dtype={dtype.name}"
    for name, o, r, bd in zip(("grad_input", "grad_weight", "grad_bias"), out, ref, bound):
        assert o.dtype == dtype
        _close(name, o, r, bd, rp, rs, msg)


@pytest.mark.parametrize("cmt", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_cube_math_types(ctx, split, cmt, dtype):
    seed = draw_seed()
    shape = (5, 2, 3, 4, 3, 1)
    out, ref, bound, nbytes = _run_backward(ctx, *shape, dtype, cmt, seed)
    rp, rs = _eps(dtype, cmt)
    msg = f"seed={seed} cmt={cmt} dtype={dtype.name}"
    for name, o, r, bd in zip(("grad_input", "grad_weight", "grad_bias"), out, ref, bound):
        _close(name, o, r, bd, rp, rs, msg)
    if dtype == np.float32 and cmt in (1, 2, 3):
        # reduced precision really happens (the mode is honoured, not silently fp32)
        assert np.abs(out[1].astype(np.float64) - ref[1]).max() > 1e-6, msg


def test_backward_split_is_deterministic_and_chunked(ctx, monkeypatch):
    """The split plan really splits (partials of S chunks, gradBias in several row chunks), adds the
    remainder rows, and gives the same bits on every run (fixed-order reduction, no atomics)."""
    for name, value in SPLIT_EVERYWHERE.items():
        monkeypatch.setattr(plan, name, value)
    seed = draw_seed()
    shape = (9, 3, 2, 35, 3, 1)          # 27 rows of dy, 35 columns (2 column tiles of 32)
    p = plan._backward_plan(*shape, np.float32, 0)
    assert p.S > 1 and p.Sb > 1 and any(t.n * 3 % p.S for t in p.taps), p   # chunks and remainders
    for dtype in DTYPES:
        first, ref, bound, nbytes = _run_backward(ctx, *shape, dtype, 0, seed)
        again, *_ = _run_backward(ctx, *shape, dtype, 0, seed)
        rp, rs = _eps(dtype, 0)
        for name, o, r, bd, o2 in zip(("grad_input", "grad_weight", "grad_bias"), first, ref, bound, again):
            _close(name, o, r, bd, rp, rs, f"seed={seed} {dtype.name}")
            np.testing.assert_array_equal(o.view(np.uint8), o2.view(np.uint8), err_msg=f"{name} not deterministic")


@pytest.mark.parametrize("which", ["T0", "Cin0", "K0"])
def test_backward_empty_input(ctx, which):
    seed = draw_seed()
    T, B, Cin, Cout, K, pad = 3, 2, 3, 4, 2, 1
    T, Cin, K = (0 if which == "T0" else T), (0 if which == "Cin0" else Cin), (0 if which == "K0" else K)
    out, ref, bound, _ = _run_backward(ctx, T, B, Cin, Cout, K, pad, np.dtype(np.float32), 0, seed)
    gi, gw, gb = out
    assert not np.isnan(gi).any() and not gi.any() and not np.isnan(gw).any() and not gw.any()
    _close("grad_bias", gb, ref[2], bound[2], 2e-6, 0, f"seed={seed}")


@pytest.mark.parametrize("shape", [(5, 2, 3, 4, 3, 1), (3, 2, 2, 3, 2, 4), (4, 1, 2, 3, 1, 0)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype,cmt", [(np.dtype(np.float32), 0), (np.dtype(np.float32), 1),
                                       (np.dtype(np.float32), 2), (np.dtype(np.float16), 0), (BF16, 3)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_forward_matches_reference(ctx, shape, dtype, cmt):
    seed = draw_seed()
    rng = np.random.default_rng(seed)
    T, B, Cin, Cout, K, pad = shape
    Tout = T + 2 * pad - K + 1
    x = rng.standard_normal((T, B, Cin)).astype(dtype)
    w = rng.standard_normal((K, Cin, Cout)).astype(dtype)
    b = rng.standard_normal(Cout).astype(dtype)
    y = _poison((Tout, B, Cout), dtype)
    nbytes = plan.forward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cmt)
    ws = _workspace(nbytes)
    plan.launch_forward(ctx, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, dtype=dtype, cube_math_type=cmt,
                        input=x.ctypes.data, weight=w.ctypes.data, bias=b.ctypes.data, out=y.ctypes.data,
                        workspace_ptr=ws.ctypes.data)
    _check_guard(ws, nbytes)
    f = lambda a: a.astype(np.float64)  # noqa: E731
    ref = conv_tbc(f(x), f(w), f(b), pad)
    bound = conv_tbc(np.abs(f(x)), np.abs(f(w)), np.abs(f(b)), pad)
    rp, rs = _eps(dtype, cmt)
    _close("y", y, ref, bound, rp, rs, f"seed={seed} shape={shape} {dtype.name} cmt={cmt}")


def test_forward_empty_is_bias(ctx):
    b = np.arange(1, 4, dtype=np.float32)
    y = _poison((4, 2, 3), np.float32)      # T=0, K=1, pad=2 -> Tout = 4
    plan.launch_forward(ctx, T=0, B=2, Cin=5, Cout=3, K=1, pad=2, dtype=np.float32, cube_math_type=0,
                        input=0, weight=0, bias=b.ctypes.data, out=y.ctypes.data, workspace_ptr=0)
    np.testing.assert_array_equal(y, np.broadcast_to(b, y.shape))


def test_workspace_formula(monkeypatch):
    # no copies of x or dy, no accumulator: nothing at small sizes in any dtype; USE_FP16 the fp16 copies
    # of the operands; a split gradWeight its fp32 partials (S, K, Cin, Cout); a chunked gradBias its
    # fp32 chunk sums (Sb, Cout)
    T, B, Cin, Cout, K, pad = 100, 4, 8, 16, 3, 1
    Tout = T + 2 * pad - K + 1
    al = lambda n: -(-n // 256) * 256  # noqa: E731
    for dtype in DTYPES:
        assert plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, 0) == 0
        assert plan.forward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, 0) == 0
    assert plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, np.float32, 2) == \
        al(T * B * Cin * 2) + al(Tout * B * Cout * 2) + al(K * Cin * Cout * 2)
    assert plan.forward_workspace_bytes(T, B, Cin, Cout, K, pad, np.float32, 2) == \
        al(T * B * Cin * 2) + al(K * Cin * Cout * 2)
    for name, value in SPLIT_EVERYWHERE.items():
        monkeypatch.setattr(plan, name, value)
    p = plan._backward_plan(T, B, Cin, Cout, K, pad, np.float32, 0)
    assert p.S > 1 and p.Sb > 1
    assert plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, np.float32, 0) == \
        al(p.S * K * Cin * Cout * 4) + al(p.Sb * Cout * 4)
    # empty input: the gradBias chunk sums only
    Sb, _ = plan.bias_chunks(2 * B, Cout, 4)      # (SUM_MIN_ROWS is 1 here)
    assert Sb > 1 and plan.backward_workspace_bytes(0, B, Cin, Cout, K, 2, np.float32, 0) == al(Sb * Cout * 4)


def test_split_rules_at_the_bench_shapes():
    """The choices that fill a 132-SM GPU: gradWeight split while a tap's 128x128 tiles are few (the
    bench shape: 1 tile a tap -> SPLIT_TARGET chunks), not once they fill it; gradBias chunked into
    enough (tile, chunk) blocks; partial bytes bounded."""
    p = plan._backward_plan(2530, 16, 128, 128, 3, 1, np.float32, 0)
    assert p.S == plan.SPLIT_TARGET and p.Sb * 1 >= 132
    big = plan._backward_plan(2530, 16, 1024, 1024, 5, 2, np.float32, 0)
    assert big.S * 64 >= 132 and big.S == 3
    assert plan._backward_plan(2530, 16, 2048, 2048, 3, 1, np.float32, 0).S == 1     # 256 tiles a tap
    assert plan._backward_plan(8, 2, 16, 16, 3, 1, np.float32, 0).S == 1            # too small to split
    assert plan.bias_chunks(100, 16, 4) == (1, 100)                                  # a small dy: one pass


# ------------------------------------------------------------------------------ the NumPy GEMM itself
@pytest.mark.parametrize("transa", [False, True])
@pytest.mark.parametrize("transb", [False, True])
def test_numpy_gemm_column_major_semantics(transa, transb):
    seed = draw_seed()
    rng = np.random.default_rng(seed)
    m, n, k, batch = 3, 4, 5, 2
    lda, ldb, ldc = (k if transa else m) + 1, (n if transb else k) + 2, m + 1
    sa, sb, sc = lda * (m if transa else k) + 3, ldb * (k if transb else n), ldc * n + 1
    A = rng.standard_normal(sa * batch).astype(np.float32)
    Bm = rng.standard_normal(sb * batch).astype(np.float32)
    C = rng.standard_normal(sc * batch).astype(np.float32)
    C0 = C.copy()
    G.gemm_numpy(transa, transb, m, n, k, 2.0, A.ctypes.data, np.float32, lda, sa, Bm.ctypes.data, np.float32,
                 ldb, sb, 0.5, C.ctypes.data, np.float32, ldc, sc, batch, G.COMPUTE_32F)
    for i in range(batch):
        def mat(buf, off, rows, cols, ld):
            return np.array([[buf[off + c * ld + r] for c in range(cols)] for r in range(rows)], np.float64)
        a = mat(A, i * sa, *((k, m) if transa else (m, k)), lda)
        bb = mat(Bm, i * sb, *((n, k) if transb else (k, n)), ldb)
        a = a.T if transa else a
        bb = bb.T if transb else bb
        c0 = mat(C0, i * sc, m, n, ldc)
        np.testing.assert_allclose(mat(C, i * sc, m, n, ldc), 2 * a @ bb + 0.5 * c0, rtol=1e-5, atol=1e-5,
                                   err_msg=f"seed={seed}")
    # padding between columns / batches untouched
    mask = np.ones_like(C, bool)
    for i in range(batch):
        for c in range(n):
            mask[i * sc + c * ldc: i * sc + c * ldc + m] = False
    np.testing.assert_array_equal(C[mask], C0[mask])


def test_numpy_pointer_array_gemm():
    """gemm_batched_numpy: entry i multiplies the matrices its pointers name (any addresses: overlapping A
    entries, one B shared by all), C entries written at their own pointers with alpha/beta."""
    rng = np.random.default_rng(draw_seed())
    m, n, k, batch = 3, 2, 4, 5
    A = rng.standard_normal(64).astype(np.float32)
    Bm = rng.standard_normal(k * n).astype(np.float32)
    C = rng.standard_normal(batch * 16).astype(np.float32)
    C0 = C.copy()
    a_off = rng.integers(0, 64 - m * k, batch)                 # column-major m x k, lda = m: overlapping
    c_off = rng.permutation(batch) * 16                          # disjoint outputs, any order
    it = 4
    table = np.array([A.ctypes.data + it * int(o) for o in a_off] + [Bm.ctypes.data] * batch +
                     [C.ctypes.data + it * int(o) for o in c_off], dtype=np.uint64)
    p = table.ctypes.data
    G.gemm_batched_numpy(False, False, m, n, k, 2.0, p, np.float32, m, p + 8 * batch, np.float32, k, 0.5,
                         p + 16 * batch, np.float32, m, batch, G.COMPUTE_32F)
    b = Bm.reshape(n, k).T.astype(np.float64)
    for i in range(batch):
        a = A[a_off[i]:a_off[i] + m * k].reshape(k, m).T.astype(np.float64)
        got = C[c_off[i]:c_off[i] + m * n].reshape(n, m).T
        want = 2 * a @ b + 0.5 * C0[c_off[i]:c_off[i] + m * n].reshape(n, m).T
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    untouched = np.ones(C.size, bool)
    for o in c_off:
        untouched[o:o + m * n] = False
    np.testing.assert_array_equal(C[untouched], C0[untouched])


def _record(T, B, Cin, Cout, K, pad, dtype, backward=True):
    from aclnn_gpu.plans.frozen import freeze

    class Plan:
        workspace_size = (plan.backward_workspace_bytes if backward else plan.forward_workspace_bytes)(
            T, B, Cin, Cout, K, pad, dtype)

        def launch_kernels(self, ctx, ws):
            if backward:
                plan.launch_backward(ctx, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, dtype=dtype, cube_math_type=0,
                                     grad=1 << 40, input=2 << 40, weight=3 << 40, grad_input=4 << 40,
                                     grad_weight=5 << 40, grad_bias=6 << 40, workspace_ptr=ws)
            else:
                plan.launch_forward(ctx, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, dtype=dtype, cube_math_type=0,
                                    input=2 << 40, weight=3 << 40, bias=6 << 40, out=4 << 40, workspace_ptr=ws)
    return freeze(Plan(), 132).steps


def test_launch_lists_at_the_bench_shape():
    """ATen's launch count or fewer, no copy of x or dy: the forward is a bias fill and one GEMM per tap
    (M = the tap's n*B rows); the backward one column-sum pass, K split gradWeight GEMMs (a strided batch
    of S chunks each), one reduce, and K gradInput GEMMs, the covering tap first with beta = 0."""
    from aclnn_gpu.plans.frozen import Gemm, Launch, Upload

    T, B, C, K, pad = 2530, 16, 128, 3, 1
    f32 = np.dtype(np.float32)
    fwd = _record(T, B, C, C, K, pad, f32, backward=False)
    assert [s.expr.split("<")[0] for s in fwd if isinstance(s, Launch)] == ["tbc_copy"]
    gemms = [s.args for s in fwd if isinstance(s, Gemm)]
    assert len(fwd) == 1 + K and [g[14] for g in gemms] == [1.0] * K
    assert sorted(g[3] for g in gemms) == [(T - 1) * B, (T - 1) * B, T * B]      # rows per tap (cuBLAS n)
    bwd = _record(T, B, C, C, K, pad, f32)
    assert not any(isinstance(s, Upload) or getattr(s, "batched", False) for s in bwd)
    kinds = [s.expr.split("<")[0] if isinstance(s, Launch) else ("split" if s.args[19] > 1 else "gemm") for s in bwd]
    assert kinds == ["tbc_col_sums", "split", "split", "split", "tbc_reduce", "gemm", "gemm", "gemm"], kinds
    assert all(s.args[19] == plan.SPLIT_TARGET for s in bwd[1:4])
    assert [s.args[14] for s in bwd[5:]] == [0.0, 1.0, 1.0]
    assert bwd[5].args[3] == T * B                                              # the centre tap: every row
    # fp16: the same lists (each GEMM rounds its fp32 sums into the fp16 output, as ATen's addmm_ do)
    f16 = np.dtype(np.float16)
    assert len(_record(T, B, C, C, K, pad, f16)) == len(bwd)
    assert len(_record(T, B, C, C, K, pad, f16, backward=False)) == len(fwd)


def test_numpy_gemm_beta0_ignores_nan_and_tf32_rounds():
    A = np.full(4, 1 + 2 ** -20, np.float32)
    Bm = np.ones(4, np.float32)
    C = np.full(1, np.nan, np.float32)
    G.gemm_numpy(False, False, 1, 1, 4, 1.0, A.ctypes.data, np.float32, 1, 0, Bm.ctypes.data, np.float32, 4, 0,
                 0.0, C.ctypes.data, np.float32, 1, 0, 1, G.COMPUTE_32F_FAST_TF32)
    assert C[0] == 4.0           # mantissa bits beyond TF32's 10 rounded away
    G.gemm_numpy(False, False, 1, 1, 4, 1.0, A.ctypes.data, np.float32, 1, 0, Bm.ctypes.data, np.float32, 4, 0,
                 0.0, C.ctypes.data, np.float32, 1, 0, 1, G.COMPUTE_32F)
    assert C[0] == np.float32(4 * (1 + 2 ** -20))
    assert gemm_host._round_tf32(np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, np.inf, -np.inf], np.float32)).tolist() == \
        [1.0, 1 + 4 * 2 ** -11, np.inf, -np.inf]


def test_compute_mode_mapping():
    assert G.compute_mode(0, np.float32) == (G.F32, G.COMPUTE_32F)
    assert G.compute_mode(1, np.float32) == (G.F32, G.COMPUTE_32F_FAST_TF32)
    assert G.compute_mode(3, np.float32) == (G.F32, G.COMPUTE_32F_FAST_TF32)
    assert G.compute_mode(2, np.float32) == (G.F16, G.COMPUTE_32F)
    for cmt in range(4):
        assert G.compute_mode(cmt, np.float16) == (G.F16, G.COMPUTE_32F)
        assert G.compute_mode(cmt, BF16) == (BF16, G.COMPUTE_32F)


# ------------------------------------------------------------------------------ tbc_col_sums itself
def _aligned(shape, dtype, offset_bytes=0):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.zeros(n * dtype.itemsize + 512, np.uint8)
    start = (-raw.ctypes.data) % 256 + offset_bytes
    return raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("C,offset", [(40, 0), (40, 1), (13, 0)], ids=["vec", "not16aligned", "scalar"])
def test_column_sums_in_chunks(ctx, dtype, C, offset):
    """Each chunk's column sums match float64 within fp32 accumulation, on the 16-byte and the scalar
    path, the same bits on every run (fixed order)."""
    seed = draw_seed()
    rng = np.random.default_rng(seed)
    R, rpc = 111, 8
    S = -(-R // rpc)
    src = _aligned((R, C), dtype, offset * dtype.itemsize)   # offset elements: the scalar path
    src[...] = rng.standard_normal((R, C)).astype(dtype)
    runs = []
    for _ in range(2):
        sums = _aligned((S, C), np.float32)
        sums[...] = np.nan
        plan._col_sums(ctx, dtype, src.ctypes.data, R, C, sums.ctypes.data, np.float32, S, rpc)
        padded = np.zeros((S * rpc, C))
        padded[:R] = src.astype(np.float64)
        ref = padded.reshape(S, rpc, C).sum(axis=1)
        bound = np.abs(padded).reshape(S, rpc, C).sum(axis=1)
        _close("sums", sums, ref, bound, 2e-6, 0.0, f"seed={seed}")
        runs.append(sums.copy())
    np.testing.assert_array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8))
