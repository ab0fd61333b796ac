"""Scaled masked softmax kernels in the CPU emulator (StandaloneEmuContext) against the NumPy reference.

Outputs are NaN-poisoned (and a guard tail after them must stay untouched); every dtype; row lengths
1, 31, 32, 33, 1000, 5000, 20000 through the GPU plan's own variant choice; every instantiation of the
manifest launched directly; each mask broadcast form; causal generated vs explicit; fully masked rows;
bit-reproducibility across grid sizes. Shapes stay tiny (each emulated CUDA thread is a fiber)."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from aclnn_gpu.kernels import manifest
from aclnn_gpu.emulator.context import StandaloneEmuContext
from aclnn_gpu.ops.scaled_masked_softmax import launch as plan
from aclnn_gpu.reference.scaled_masked_softmax import scaled_masked_softmax, scaled_masked_softmax_backward
from seeding import draw_seed

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
ULP = {np.dtype(np.float32): 2 ** -23, np.dtype(np.float16): 2 ** -10, np.dtype(ml_dtypes.bfloat16): 2 ** -7}
CT = {"float": np.float32, "__half": np.float16, "__nv_bfloat16": ml_dtypes.bfloat16}
LENGTHS = [1, 31, 32, 33, 1000, 5000, 20000]
GUARD = 64


@pytest.fixture(scope="module")
def ctx():
    c = StandaloneEmuContext(sm_count=4)
    c.module(plan.FILE)
    return c


def _seed():
    return draw_seed()


def poisoned(shape, dtype, offset=0):
    """A NaN-filled output with a NaN guard tail; `offset` elements of misalignment at the front."""
    n = int(np.prod(shape))
    buf = np.full(n + GUARD + offset, np.nan, dtype=dtype)
    return buf, buf[offset:offset + n].reshape(shape)


def check_guard(buf, offset, n):
    assert np.isnan(buf[:offset].astype(np.float32)).all() and np.isnan(buf[offset + n:].astype(np.float32)).all()


def make_mask(rng, form, B, N, S1, S2):
    if form == "none":
        return None
    shape = {"full": (B, N), "b1": (B, 1), "1n": (1, N), "11": (1, 1)}[form] + (S1, S2)
    m = rng.random(shape) < 0.4
    m[..., rng.integers(S1), :] = True                 # a fully masked row
    return m


def run_fwd(ctx, x, mask, scale, causal, offset=0):
    B, N, S1, S2 = x.shape
    buf, y = poisoned(x.shape, x.dtype, offset)
    plan.launch_forward(ctx, x_ptr=x.ctypes.data, mask_ptr=0 if mask is None else mask.ctypes.data,
                        y_ptr=y.ctypes.data, workspace_ptr=0, B=B, N=N, S1=S1, S2=S2,
                        Bm=1 if mask is None else mask.shape[0], Nm=1 if mask is None else mask.shape[1],
                        dtype=x.dtype, scale=scale, fix_triu_mask=causal)
    check_guard(buf, offset, x.size)
    return y


def run_bwd(ctx, g, y, mask, scale, causal, offset=0):
    B, N, S1, S2 = g.shape
    buf, out = poisoned(g.shape, g.dtype, offset)
    plan.launch_backward(ctx, grad_ptr=g.ctypes.data, y_ptr=y.ctypes.data,
                         mask_ptr=0 if mask is None else mask.ctypes.data, out_ptr=out.ctypes.data,
                         workspace_ptr=0, B=B, N=N, S1=S1, S2=S2,
                         Bm=1 if mask is None else mask.shape[0], Nm=1 if mask is None else mask.shape[1],
                         dtype=g.dtype, scale=scale, fix_triu_mask=causal)
    check_guard(buf, offset, g.size)
    return out


def close_fwd(got, want, dtype, msg):
    got32, want32 = got.astype(np.float32), want.astype(np.float32)
    assert not np.isnan(got32).any(), msg
    u = ULP[np.dtype(dtype)]
    tol = 2 * u * np.abs(want32) + (1e-6 if np.dtype(dtype) == np.float32 else u * 1e-3) \
        + float(ml_dtypes.finfo(dtype).smallest_subnormal)
    bad = np.abs(got32 - want32) > tol
    assert not bad.any(), f"{msg}: {bad.sum()} bad, max err {np.abs(got32 - want32).max()}"


def close_bwd(got, want, g, y, scale, dtype, msg):
    got32, want32 = got.astype(np.float32), want.astype(np.float32)
    assert not np.isnan(got32).any(), msg
    g32, y32 = g.astype(np.float32), y.astype(np.float32)
    dot = np.abs(g32 * y32).sum(-1, keepdims=True)
    u = ULP[np.dtype(dtype)]
    # rounding of the result plus the cancellation g - dot (dot summed in another order)
    tol = 2 * u * np.abs(want32) + 8 * 2 ** -23 * np.sqrt(g.shape[-1]) * abs(scale) * np.abs(y32) * (np.abs(g32) + dot) \
        + float(ml_dtypes.finfo(dtype).smallest_subnormal)
    bad = np.abs(got32 - want32) > tol
    assert not bad.any(), f"{msg}: {bad.sum()} bad, max err {np.abs(got32 - want32).max()}"


def softmax_like(rng, shape, mask, causal, dtype):
    return scaled_masked_softmax((rng.standard_normal(shape) * 3).astype(np.float32), mask, 1.0, causal).astype(dtype)


# ------------------------------------------------------------------------------ through the plan
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("S2", LENGTHS)
def test_lengths(ctx, dtype, S2):
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, N, S1 = (1, 2, 2) if S2 >= 1000 else (2, 2, 3)
    form = ["full", "b1", "1n", "11", "none"][S2 % 5]
    mask = make_mask(rng, form, B, N, S1, S2)
    scale = 0.125
    for causal in (False, True):
        msg = f"seed={seed} S2={S2} form={form} causal={causal} variant={plan.choose(S2, dtype, B * N * S1, 4, True, 'fwd')[0]}"
        x = (rng.standard_normal((B, N, S1, S2)) * 4).astype(dtype)
        y = run_fwd(ctx, x, mask, scale, causal)
        close_fwd(y, scaled_masked_softmax(x, mask, scale, causal), dtype, msg)
        g = rng.standard_normal((B, N, S1, S2)).astype(dtype)
        out = run_bwd(ctx, g, y, mask, scale, causal)
        close_bwd(out, scaled_masked_softmax_backward(g, y, mask, scale, causal), g, y, scale, dtype, msg)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("form", ["none", "full", "b1", "1n", "11"])
@pytest.mark.parametrize("S2", [40, 2048, 9000, 26000])     # warp / block / staged / unstaged
def test_mask_forms(ctx, dtype, form, S2):
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, N, S1 = (2, 3, 2) if S2 < 1000 else (2, 2, 1)
    mask = make_mask(rng, form, B, N, S1, S2)
    for scale in (1.0, 0.125):
        msg = f"seed={seed} S2={S2} form={form} scale={scale}"
        x = (rng.standard_normal((B, N, S1, S2)) * 4).astype(dtype)
        y = run_fwd(ctx, x, mask, scale, False)
        close_fwd(y, scaled_masked_softmax(x, mask, scale, False), dtype, msg)
        if mask is not None:
            m = np.broadcast_to(mask, x.shape)
            assert np.all(y[m] == 0), msg
        g = rng.standard_normal(x.shape).astype(dtype)
        yy = softmax_like(rng, x.shape, mask, False, dtype)
        out = run_bwd(ctx, g, yy, mask, scale, False)
        close_bwd(out, scaled_masked_softmax_backward(g, yy, mask, scale, False), g, yy, scale, dtype, msg)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("S2", [7, 64, 1500, 8200])
def test_causal_generated_vs_explicit(ctx, dtype, S2):
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, N, S1 = 1, 2, 3
    mask = make_mask(rng, "1n", B, N, S1, S2)
    explicit = np.ascontiguousarray(mask | (np.arange(S2)[None, :] > np.arange(S1)[:, None]))
    x = rng.standard_normal((B, N, S1, S2)).astype(dtype)
    y1 = run_fwd(ctx, x, mask, 0.5, True)
    y2 = run_fwd(ctx, x, explicit, 0.5, False)
    np.testing.assert_array_equal(y1.view(np.uint8), y2.view(np.uint8), err_msg=f"seed={seed}")
    y3 = run_fwd(ctx, x, None, 0.5, True)                 # causal alone, no mask tensor
    close_fwd(y3, scaled_masked_softmax(x, None, 0.5, True), dtype, f"seed={seed}")
    g = rng.standard_normal(x.shape).astype(dtype)
    b1 = run_bwd(ctx, g, y1, mask, 0.5, True)
    b2 = run_bwd(ctx, g, y1, explicit, 0.5, False)
    np.testing.assert_array_equal(b1.view(np.uint8), b2.view(np.uint8), err_msg=f"seed={seed}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("S2", [64, 4096, 16384])
def test_unaligned_pointers_take_scalar_path(ctx, dtype, S2):
    """Misaligned pointers (offset by one element) must fall back to VW = 1 and stay correct."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    shape = (1, 1, 2, S2)
    xb = rng.standard_normal(int(np.prod(shape)) + 1).astype(dtype)
    x = xb[1:].reshape(shape)
    assert x.ctypes.data % 16 != 0
    y = run_fwd(ctx, x, None, 1.0, False, offset=1)
    close_fwd(y, scaled_masked_softmax(x, None, 1.0, False), dtype, f"seed={seed}")
    out = run_bwd(ctx, x, y, None, 1.0, False, offset=1)
    close_bwd(out, scaled_masked_softmax_backward(x, y, None, 1.0, False), x, y, 1.0, dtype, f"seed={seed}")


def test_deterministic_across_grids():
    seed = _seed()
    rng = np.random.default_rng(seed)
    for S2 in (100, 3000, 12000):
        x = rng.standard_normal((1, 3, 2, S2)).astype(np.float32)
        g = rng.standard_normal(x.shape).astype(np.float32)
        res = []
        for sm in (1, 4):
            c = StandaloneEmuContext(sm_count=sm)
            y = run_fwd(c, x, None, 0.3, True)
            res.append((y, run_bwd(c, g, y, None, 0.3, True)))
        np.testing.assert_array_equal(res[0][0], res[1][0])
        np.testing.assert_array_equal(res[0][1], res[1][1])


# ------------------------------------------------------------------------------ every instantiation
_EXPR = re.compile(r"smsm_(fwd|bwd)_(rows|long)<([\w]+), (\d+)(?:, (\d+))?, (true|false)>")


@pytest.mark.parametrize("expr", manifest.KERNELS[plan.FILE])
def test_every_instantiation(ctx, expr):
    """Launch each instantiation directly at (nearly) its full register capacity, 2 blocks, with a
    broadcast mask and causal masking, against the reference."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    direction, kind, ct, vw, chunks, flag = _EXPR.fullmatch(expr).groups()
    dtype, vw = CT[ct], int(vw)
    if kind == "rows":
        gs = 32 if flag == "false" else 64
        threads = 64
        S2 = gs * int(chunks) * vw - vw              # the last chunk slot of one lane stays empty
    else:
        threads = 64
        S2 = 3 * threads * vw + vw                   # several strides plus a partial one
    S2 = max(S2, vw)
    smem = plan.stage_bytes(S2, dtype, direction) if (kind == "long" and flag == "true") else 0
    B, N, S1 = 2, 2, 2
    rows = B * N * S1
    mask = make_mask(rng, "b1", B, N, S1, S2)
    mrow_b, mrow_n = N * S1 * 0 + 1 * S1, 0            # mask (B, 1, S1, S2): b stride Nm*S1 = S1
    tail = (np.int64(rows), np.int64(S1), np.int64(S2), np.int64(N), np.int64(mrow_b), np.int64(mrow_n),
            np.float32(0.125), np.int32(1))
    grid = (2,)
    msg = f"seed={seed} {expr} S2={S2}"
    if direction == "fwd":
        x = (rng.standard_normal((B, N, S1, S2)) * 4).astype(dtype)
        buf, y = poisoned(x.shape, dtype)
        ctx.launch(plan.FILE, expr, grid, (threads,), (x, mask, y) + tail, shared_mem=smem)
        check_guard(buf, 0, x.size)
        close_fwd(y, scaled_masked_softmax(x, mask, 0.125, True), dtype, msg)
    else:
        g = rng.standard_normal((B, N, S1, S2)).astype(dtype)
        yy = softmax_like(rng, g.shape, mask, True, dtype)
        buf, out = poisoned(g.shape, dtype)
        ctx.launch(plan.FILE, expr, grid, (threads,), (g, yy, mask, out) + tail, shared_mem=smem)
        check_guard(buf, 0, g.size)
        close_bwd(out, scaled_masked_softmax_backward(g, yy, mask, 0.125, True), g, yy, 0.125, dtype, msg)


def test_plan_thresholds():
    f = np.float32
    assert plan.choose(1024, f, 10, 4, True, "bwd")[0] == "smsm_bwd_rows<float, 4, 8, false>"
    assert plan.choose(1025, f, 10, 4, True, "bwd")[0] == "smsm_bwd_rows<float, 1, 4, true>"
    assert plan.choose(8192, np.float16, 10, 4, True, "fwd")[0] == "smsm_fwd_rows<__half, 8, 2, true>"
    assert plan.choose(8193, f, 10, 4, True, "fwd")[0] == "smsm_fwd_long<float, 1, true>"
    assert plan.choose(8196, f, 10, 4, True, "fwd")[:4] == ("smsm_fwd_long<float, 4, true>", 10, 512, 4 * 8196)
    assert plan.choose(12289, f, 10, 4, True, "fwd")[0] == "smsm_fwd_long<float, 1, false>"
    assert plan.choose(8196, f, 10, 4, True, "bwd")[0] == "smsm_bwd_long<float, 4, false>"
    assert plan.choose(12224, np.float16, 10, 4, True, "bwd")[0] == "smsm_bwd_long<__half, 8, true>"
    # 12288 fp16 rows would stage 48 KiB, with the kernel's static scratch past the 48 KiB a block
    # gets without the opt-in attribute (the launch fails on a GPU): not staged
    assert plan.choose(12288, np.float16, 10, 4, True, "bwd")[0] == "smsm_bwd_long<__half, 8, false>"
    assert plan.choose(24576, np.float16, 10, 4, True, "fwd")[0] == "smsm_fwd_long<__half, 8, false>"
    assert plan.choose(12296, np.float16, 10, 4, True, "bwd")[0] == "smsm_bwd_long<__half, 8, false>"
    assert plan.choose(20000, ml_dtypes.bfloat16, 10, 4, True, "fwd")[0] == "smsm_fwd_long<__nv_bfloat16, 8, true>"
    assert plan.choose(64, f, 10, 4, False, "fwd")[0] == "smsm_fwd_rows<float, 1, 4, false>"
    assert plan.workspace_bytes(2, 2, 2, 2, f) == 0
    for S2 in list(range(1, 9000, 97)) + list(range(9000, 30000, 1999)):
        for dt in DTYPES:
            expr, grid, block, smem = plan.choose(S2, dt, 7, 4, True, "bwd")
            assert expr in manifest.KERNELS[plan.FILE] and 1 <= grid and 32 <= block <= 512 and block % 32 == 0
            assert smem + plan.LONG_STATIC_SMEM <= 48 * 1024 and smem <= plan.STAGE_MAX_BYTES
