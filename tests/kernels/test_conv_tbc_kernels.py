"""ConvTBC GPU plan through StandaloneEmuContext (kernels in the CPU emulator, GEMMs through the
NumPy gemm over host memory) vs the NumPy reference.

Outputs and workspace are NaN-poisoned, a guard region after the workspace must stay untouched,
every dtype and cubeMathType runs, with a tolerance scaled from |x|*|w| style magnitude bounds and
the precision of the mode."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from aclnn_gpu.kernels import gemm as G
from aclnn_gpu.kernels.context import StandaloneEmuContext
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
    """(relative error of the products vs the magnitude bound, of the stored result)."""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        prod = {0: 2e-6, 1: 2 ** -10, 2: 2 ** -10, 3: 2 ** -10}[cmt]
        return prod, 0.0
    if dtype == np.float16:
        return 2e-6, 2 ** -10
    return 2e-6, 2 ** -7


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


def _run_backward(ctx, T, B, Cin, Cout, K, pad, dtype, cmt, seed, min_chunk_rows=plan.MIN_CHUNK_ROWS):
    rng = np.random.default_rng(seed)
    Tout = T + 2 * pad - K + 1
    x = rng.standard_normal((T, B, Cin)).astype(dtype)
    w = rng.standard_normal((K, Cin, Cout)).astype(dtype)
    b = rng.standard_normal(Cout).astype(dtype)
    g = rng.standard_normal((Tout, B, Cout)).astype(dtype)
    gi, gw, gb = _poison(x.shape, dtype), _poison(w.shape, dtype), _poison(b.shape, dtype)
    nbytes = plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, cmt, min_chunk_rows=min_chunk_rows)
    ws = _workspace(nbytes)
    keep = [a.copy() for a in (x, w, b, g)]
    plan.launch_backward(ctx, T=T, B=B, Cin=Cin, Cout=Cout, K=K, pad=pad, dtype=dtype, cube_math_type=cmt,
                         grad=g.ctypes.data, input=x.ctypes.data, weight=w.ctypes.data,
                         grad_input=gi.ctypes.data, grad_weight=gw.ctypes.data, grad_bias=gb.ctypes.data,
                         workspace_ptr=ws.ctypes.data, min_chunk_rows=min_chunk_rows)
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
]


@pytest.mark.parametrize("shape", BWD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_matches_reference(ctx, shape, dtype):
    seed = draw_seed()
    out, ref, bound, _ = _run_backward(ctx, *shape, dtype, 0, seed)
    rp, rs = _eps(dtype, 0)
    msg = f"seed={seed} shape={shape} dtype={dtype.name}"
    for name, o, r, bd in zip(("grad_input", "grad_weight", "grad_bias"), out, ref, bound):
        assert o.dtype == dtype
        _close(name, o, r, bd, rp, rs, msg)


@pytest.mark.parametrize("cmt", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_backward_cube_math_types(ctx, cmt, dtype):
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


def test_backward_bias_two_pass(ctx):
    """Many row chunks: the S > 1 partials + second pass of the gradBias reduction."""
    seed = draw_seed()
    for dtype in DTYPES:
        shape = (9, 3, 2, 35, 3, 1)          # R = 27 rows, 35 columns (2 column tiles)
        assert plan.bias_chunks(27, 35, 4)[0] == 7
        out, ref, bound, nbytes = _run_backward(ctx, *shape, dtype, 0, seed, min_chunk_rows=4)
        assert nbytes >= 7 * 35 * 4
        rp, rs = _eps(dtype, 0)
        _close("grad_bias", out[2], ref[2], bound[2], rp, rs, f"seed={seed} {dtype.name}")
        _close("grad_weight", out[1], ref[1], bound[1], rp, rs, f"seed={seed} {dtype.name}")


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


def test_workspace_formula():
    # batch-major copy of dy + the tap-reversed transposed weights (no padded copies, no fp32
    # gradInput accumulator: the taps add up inside one GEMM's depth) + for fp16/bf16 the fp32 gradWeight
    # sums (the K taps' products in one batched GEMM plus the boundary rows' with beta = 1) + the
    # interior GEMM's three pointer arrays (B*K entries of 8 bytes)
    T, B, Cin, Cout, K, pad = 100, 4, 8, 16, 3, 1
    al = lambda n: -(-n // 256) * 256  # noqa: E731
    ptrs = al(3 * B * K * 8)
    for dtype in DTYPES:
        e = dtype.itemsize
        assert plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, 0) == \
            al(T * B * Cout * e) + al(K * Cin * Cout * e) + (al(K * Cin * Cout * 4) if e < 4 else 0) + ptrs
        assert plan.forward_workspace_bytes(T, B, Cin, Cout, K, pad, dtype, 0) == al(T * B * Cin * e) + ptrs
    # fp32 + USE_FP16: fp16 batch-major copy and weights, fp16 copies of x and dy for gradWeight
    assert plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, np.float32, 2) == \
        al(T * B * Cout * 2) + al(K * Cin * Cout * 2) + al(T * B * Cin * 2) + al(T * B * Cout * 2) + ptrs
    assert plan.forward_workspace_bytes(T, B, Cin, Cout, K, pad, np.float32, 2) == \
        al(T * B * Cin * 2) + al(K * Cin * Cout * 2) + ptrs
    # many rows: the fp32 partial sums of gradBias
    S, _ = plan.bias_chunks(T * B, Cout, 16)
    assert S > 1 and plan.backward_workspace_bytes(T, B, Cin, Cout, K, pad, np.float32, 0, min_chunk_rows=16) == \
        al(T * B * Cout * 4) + al(K * Cin * Cout * 4) + ptrs + al(S * Cout * 4)
    # empty input: the partials only
    assert plan.backward_workspace_bytes(0, B, Cin, Cout, K, 2, np.float32, 0) == 0


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


def test_backward_launch_structure():
    """K=3 pad=1: one pointer-array GEMM for the interior gradInput rows (B*K entries), one strided batch
    for the leftover interior rows, one per boundary row; gradWeight in one K-batched GEMM plus the two
    boundary rows with beta = 1, rounded by tbc_weights (fp16)."""
    from aclnn_gpu.ops.frozen import Gemm, Launch, Upload, freeze

    T, B, C, K, pad = 11, 3, 8, 3, 1          # interior rows 1..9: 9 = 3 residues x 3, no leftover

    def record(C):
        class Plan:
            workspace_size = plan.backward_workspace_bytes(T, B, C, C, K, pad, np.float16)

            def launch_kernels(self, ctx, ws):
                plan.launch_backward(ctx, T=T, B=B, Cin=C, Cout=C, K=K, pad=pad, dtype=np.float16,
                                     cube_math_type=0, grad=1 << 20, input=2 << 20, weight=3 << 20,
                                     grad_input=4 << 20, grad_weight=5 << 20, grad_bias=6 << 20, workspace_ptr=ws)
        return freeze(Plan(), 4).steps

    # C = 7 fp16: 14-byte rows, entries not 16-byte aligned: one strided batch per residue instead
    gemms = [s for s in record(7) if isinstance(s, Gemm)]
    assert not any(s.batched for s in gemms) and len(gemms) == 3 + K + 2
    assert not any(isinstance(s, Upload) for s in record(7))
    steps = record(C)
    kernels = [s.expr.split("<")[0] for s in steps if isinstance(s, Launch)]
    gemms = [s for s in steps if isinstance(s, Gemm)]
    assert kernels == ["tbc_batch_major", "tbc_weights"]
    assert [s.batched for s in gemms] == [False, False, False, True, False, False]
    main = gemms[0].args
    assert main[-2] == K and main[14] == 0.0                  # batch over the taps, beta 0
    assert [g.args[14] for g in gemms[1:3]] == [1.0, 1.0]     # boundary rows add
    uploads = [s for s in steps if isinstance(s, Upload)]
    assert len(uploads) == 1 and uploads[0].data.size == 3 * B * K and len(uploads[0].patches) == 2 * B * K
    assert gemms[3].args[16] == B * K                         # one entry per sample and residue


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
    assert G._round_tf32(np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, np.inf, -np.inf], np.float32)).tolist() == \
        [1.0, 1 + 4 * 2 ** -11, np.inf, -np.inf]


def test_compute_mode_mapping():
    assert G.compute_mode(0, np.float32) == (G.F32, G.COMPUTE_32F)
    assert G.compute_mode(1, np.float32) == (G.F32, G.COMPUTE_32F_FAST_TF32)
    assert G.compute_mode(3, np.float32) == (G.F32, G.COMPUTE_32F_FAST_TF32)
    assert G.compute_mode(2, np.float32) == (G.F16, G.COMPUTE_32F)
    for cmt in range(4):
        assert G.compute_mode(cmt, np.float16) == (G.F16, G.COMPUTE_32F)
        assert G.compute_mode(cmt, BF16) == (BF16, G.COMPUTE_32F)


# ------------------------------------------------------------------------------ tbc_batch_major itself
def _aligned(shape, dtype, offset_bytes=0):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.zeros(n * dtype.itemsize + 512, np.uint8)
    start = (-raw.ctypes.data) % 256 + offset_bytes
    return raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("C,offset", [(40, 0), (40, 1), (13, 0)], ids=["vec", "not16aligned", "scalar"])
def test_batch_major_copy_and_column_sums(ctx, dtype, C, offset):
    """The batch-major copy is exact, the column sums match float64 within fp32 accumulation, several
    row chunks (fp32 partials + second pass) give the same bits on every run (fixed order)."""
    seed = draw_seed()
    rng = np.random.default_rng(seed)
    Tn, B = 37, 3
    src = _aligned((Tn, B, C), dtype, offset * dtype.itemsize)   # offset elements: the scalar path
    src[...] = rng.standard_normal((Tn, B, C)).astype(dtype)
    runs = []
    for _ in range(2):
        dst = _aligned((B, Tn, C), dtype)
        dst[...] = np.nan
        sums = _aligned((C,), dtype)
        sums[...] = np.nan
        part = _aligned((64, C), np.float32)
        plan._batch_major(ctx, dtype, dtype, src.ctypes.data, dst.ctypes.data, Tn, B, C, sums=sums.ctypes.data,
                          part=part.ctypes.data, min_chunk_rows=8)
        np.testing.assert_array_equal(dst, src.transpose(1, 0, 2), err_msg=f"seed={seed}")
        ref = src.astype(np.float64).sum(axis=(0, 1))
        bound = np.abs(src.astype(np.float64)).sum(axis=(0, 1))
        _close("sums", sums, ref, bound, 2e-6, _eps(dtype, 0)[1], f"seed={seed}")
        runs.append(sums.copy())
    assert plan.bias_chunks(Tn * B, C, 8)[0] > 1
    np.testing.assert_array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8))


@pytest.mark.skipif(not shutil.which("clang++") or not (shutil.which("llvm-symbolizer") or
                    shutil.which("llvm-symbolizer-14")) or bool(os.environ.get("ACLNN_GPU_EMU_SANITIZE")),
                    reason="the profiler needs clang++ and llvm-symbolizer, and a profiling (unsanitized) build")
def test_backward_copy_ends_on_the_head_of_dy(tmp_path):
    """tbc_batch_major runs its row chunks in reverse block order, so gradWeight's GEMM, which reads dy
    first from its head, finds the head in the L2 model: with an L2 of half the copy's traffic, at least
    a third of dy is not fetched again (about half here; a forward-order copy leaves dy's tail, which
    that read order evicts before reaching it: under a tenth)."""
    T, B, C = 256, 8, 64                       # 2048 rows of dy: 4 row chunks of 512 (bias_chunks)
    Tout = T + 2 - 3 + 1
    dy_bytes = Tout * B * C * 2
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "aclnn_gpu.profile", "ConvTbcBackward", "--dtype", "fp16",
           "--l2-mib", str(dy_bytes / 2**20), "--json", str(out),
           *(f"-D{k}={v}" for k, v in dict(T=T, B=B, Cin=C, Cout=C, K=3, pad=1).items())]
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(cmd, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    launches = json.loads(out.read_text())[0]["launches"]
    assert launches[0]["kernel"].startswith("tbc_batch_major") and launches[0]["grid"][1] == 4
    gemm = next(x for x in launches if x["kernel"].startswith("cuBLAS"))
    assert gemm["kernel"].endswith(" x3")                  # gradWeight's K taps, the first GEMM after the copy
    assert gemm["dram_bytes"] - gemm["l2_dram_bytes"] >= dy_bytes // 3, gemm
