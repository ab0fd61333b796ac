"""NumPy reference of scaled masked softmax (forward and backward) against PyTorch CPU in float64.

Shapes and values are drawn fresh each run from the run's seed (tests/seeding.py: a failed test's
report carries the ACLNN_GPU_TEST_SEED command that replays it); assertion messages carry the test's seed."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from aclnn_gpu.reference.scaled_masked_softmax import scaled_masked_softmax, scaled_masked_softmax_backward
from seeding import draw_seed

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
RTOL = {np.dtype(np.float32): 2e-6, np.dtype(np.float16): 2 ** -10, np.dtype(ml_dtypes.bfloat16): 2 ** -7}
MASK_FORMS = ["none", "full", "b1", "1n", "11"]


def _seed() -> int:
    return draw_seed()


def make_mask(rng, form, B, N, S1, S2, fully_masked=True):
    if form == "none":
        return None
    shape = {"full": (B, N), "b1": (B, 1), "1n": (1, N), "11": (1, 1)}[form] + (S1, S2)
    m = rng.random(shape) < rng.uniform(0.1, 0.6)
    if fully_masked:
        m[..., rng.integers(S1), :] = True           # a fully masked row in every mask slice
    return m


def triu(S1, S2):
    return np.arange(S2)[None, :] > np.arange(S1)[:, None]


def effective_mask(mask, S1, S2, causal):
    m = np.zeros((1, 1, S1, S2), bool) if mask is None else mask
    return m | triu(S1, S2) if causal else m


def torch_forward(x, mask, scale, causal):
    m = torch.from_numpy(np.broadcast_to(effective_mask(mask, *x.shape[-2:], causal), x.shape).copy())
    t = torch.from_numpy(x.astype(np.float64)) * scale
    y = torch.softmax(t.masked_fill(m, -float("inf")), dim=-1)
    return torch.where(m.all(dim=-1, keepdim=True), torch.zeros_like(y), y).numpy()


def torch_backward(g, y, mask, scale, causal):
    m = torch.from_numpy(np.broadcast_to(effective_mask(mask, *g.shape[-2:], causal), g.shape).copy())
    gt = torch.from_numpy(g.astype(np.float64))
    yt = torch.from_numpy(y.astype(np.float64))
    out = torch._softmax_backward_data(gt, yt, -1, torch.float64) * scale
    return out.masked_fill(m, 0.0).numpy()


def random_shape(rng, max_s2=80):
    return (int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(1, max_s2)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("form", MASK_FORMS)
@pytest.mark.parametrize("scale", [1.0, 0.125])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_vs_torch(dtype, form, scale, causal):
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, N, S1, S2 = random_shape(rng)
    x = (rng.standard_normal((B, N, S1, S2)) * 4).astype(dtype)
    mask = make_mask(rng, form, B, N, S1, S2)
    y = scaled_masked_softmax(x, mask, scale, causal)
    assert y.dtype == np.dtype(dtype) and y.shape == x.shape
    want = torch_forward(x, mask, scale, causal)
    r = RTOL[np.dtype(dtype)]
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=4 * r, atol=4 * r * 1e-3 + 1e-7,
                               err_msg=f"seed={seed} shape={(B, N, S1, S2)}")
    m = np.broadcast_to(effective_mask(mask, S1, S2, causal), x.shape)
    assert np.all(y[m] == 0), f"seed={seed}"                  # exact zeros where masked
    assert not np.isnan(y.astype(np.float32)).any(), f"seed={seed}"
    assert x.dtype == np.dtype(dtype)                          # input untouched (dtype kept)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("form", MASK_FORMS)
@pytest.mark.parametrize("scale", [1.0, 0.125])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_vs_torch(dtype, form, scale, causal):
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, N, S1, S2 = random_shape(rng)
    mask = make_mask(rng, form, B, N, S1, S2)
    x = rng.standard_normal((B, N, S1, S2)) * 3
    y = torch_forward(x, mask, scale, causal).astype(dtype)    # a realistic y (zeros where masked)
    g = rng.standard_normal((B, N, S1, S2)).astype(dtype)
    g_copy, y_copy = g.copy(), y.copy()
    out = scaled_masked_softmax_backward(g, y, mask, scale, causal)
    assert out.dtype == np.dtype(dtype) and out.shape == g.shape
    want = torch_backward(g, y, mask, scale, causal)
    r = RTOL[np.dtype(dtype)]
    g64, y64 = g.astype(np.float64), y.astype(np.float64)
    dot = np.abs(np.sum(g64 * y64, axis=-1, keepdims=True))
    atol = 4 * r * scale * np.max(np.abs(y64) * (np.abs(g64) + dot)) + 1e-7
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=4 * r, atol=atol,
                               err_msg=f"seed={seed} shape={(B, N, S1, S2)}")
    m = np.broadcast_to(effective_mask(mask, S1, S2, causal), g.shape)
    assert np.all(out[m] == 0), f"seed={seed}"
    np.testing.assert_array_equal(g, g_copy)
    np.testing.assert_array_equal(y, y_copy)


def test_backward_row_sum_includes_masked_positions():
    """The dot runs over the whole row: a masked position with y != 0 still changes the others."""
    g = np.array([[[[1.0, 2.0, 3.0]]]], np.float32)
    y = np.array([[[[0.2, 0.3, 0.5]]]], np.float32)
    mask = np.array([[[[False, False, True]]]])
    out = scaled_masked_softmax_backward(g, y, mask, 1.0, False)
    dot = 0.2 * 1 + 0.3 * 2 + 0.5 * 3
    np.testing.assert_allclose(out[0, 0, 0], [0.2 * (1 - dot), 0.3 * (2 - dot), 0.0], rtol=1e-6)


@pytest.mark.parametrize("form", MASK_FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_causal_generated_equals_explicit(form, dtype):
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, N, S1, S2 = random_shape(rng)
    mask = make_mask(rng, form, B, N, S1, S2)
    explicit = effective_mask(mask, S1, S2, True)
    x = rng.standard_normal((B, N, S1, S2)).astype(dtype)
    g = rng.standard_normal((B, N, S1, S2)).astype(dtype)
    y1 = scaled_masked_softmax(x, mask, 0.125, True)
    y2 = scaled_masked_softmax(x, explicit, 0.125, False)
    np.testing.assert_array_equal(y1, y2, err_msg=f"seed={seed}")
    b1 = scaled_masked_softmax_backward(g, y1, mask, 0.125, True)
    b2 = scaled_masked_softmax_backward(g, y1, explicit, 0.125, False)
    np.testing.assert_array_equal(b1, b2, err_msg=f"seed={seed}")


def test_fully_masked_rows_forward_zero():
    x = np.random.default_rng(_seed()).standard_normal((2, 2, 3, 5)).astype(np.float32)
    mask = np.ones((1, 1, 3, 5), bool)
    y = scaled_masked_softmax(x, mask, 1.0, False)
    assert np.all(y == 0) and not np.signbit(y).any()
    # causal with S2 == 1 never masks j = 0; row 0 of causal alone is never fully masked
    y = scaled_masked_softmax(x[..., :1], None, 1.0, True)
    np.testing.assert_array_equal(y, np.ones_like(y))


def test_empty_shapes():
    for shape in [(0, 2, 3, 4), (2, 2, 3, 0), (1, 0, 0, 5)]:
        x = np.zeros(shape, np.float16)
        assert scaled_masked_softmax(x, None, 1.0, True).shape == shape
        assert scaled_masked_softmax_backward(x, x, None, 1.0, True).shape == shape


def test_long_rows():
    seed = _seed()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 2, 2, 20000)).astype(np.float32) * 5
    mask = rng.random((1, 1, 2, 20000)) < 0.5
    y = scaled_masked_softmax(x, mask, 0.125, True)
    np.testing.assert_allclose(y, torch_forward(x, mask, 0.125, True), rtol=1e-5, atol=1e-9,
                               err_msg=f"seed={seed}")
    g = rng.standard_normal(x.shape).astype(np.float32)
    out = scaled_masked_softmax_backward(g, y, mask, 0.125, True)
    np.testing.assert_allclose(out, torch_backward(g, y, mask, 0.125, True), rtol=1e-4, atol=1e-8,
                               err_msg=f"seed={seed}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", ["none", "b1", "11"])
@pytest.mark.parametrize("extreme", [None, "large", "small", "nan"])
def test_unshifted_forward_matches_the_shifted_form_and_torch(monkeypatch, dtype, form, extreme):
    """The forward's unshifted form (exp / sum exp) against its max-shifted form (forced for every
    chunk) and PyTorch float64, in chunks of several rows: fully masked rows (zeros), and one row per
    case that sends its chunk back to the shifted form (a scaled logit above exp's overflow, a row all
    below -104 where every exp underflows, a NaN)."""
    import aclnn_gpu.reference.scaled_masked_softmax as smx
    seed = _seed()
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(smx, "CHUNK_ELEMS", 4 * 64)          # several chunks of 4 rows
    B, N, S1, S2, scale = 2, 3, 8, 64, 0.7
    x = (rng.standard_normal((B, N, S1, S2)) * 4).astype(np.float32)
    if extreme == "large":
        x[1, 2, 5, 7] = 300.0                                 # 210 after scaling: exp overflows
    elif extreme == "small":
        x[0, 1, 3] -= 400.0                                   # every exp underflows to 0
        scale = 1.0                                           # (no float32 rounding of scale * -400)
    elif extreme == "nan":
        x[1, 0, 2, 9] = np.nan
    x = x.astype(dtype)
    mask = make_mask(rng, form, B, N, S1, S2)
    y = smx.scaled_masked_softmax(x, mask, scale).astype(np.float64)
    monkeypatch.setattr(smx, "_SUM_MIN", np.float32(np.inf))   # every chunk in the shifted form
    y_shifted = smx.scaled_masked_softmax(x, mask, scale).astype(np.float64)
    want = torch_forward(x.astype(np.float64), mask, scale, False)
    rtol = RTOL[np.dtype(dtype)]
    for got in (y, y_shifted):
        assert np.array_equal(np.isnan(got), np.isnan(want)), f"seed={seed}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-3, err_msg=f"seed={seed}")
    if mask is not None:
        full = np.broadcast_to(mask.all(axis=-1, keepdims=True), y.shape)
        assert np.all(y[full] == 0), f"seed={seed}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_rows_do_not_depend_on_their_chunk(monkeypatch, dtype):
    """A row's result is the same bits whatever the chunking and whatever the other rows of its
    chunk hold (a row sent to the shifted form does not take its neighbours along)."""
    import aclnn_gpu.reference.scaled_masked_softmax as smx
    rng = np.random.default_rng(_seed())
    x = (rng.standard_normal((2, 3, 8, 64)) * 4).astype(dtype)
    mask = make_mask(rng, "b1", 2, 3, 8, 64)
    y = smx.scaled_masked_softmax(x, mask, 0.7)
    x2 = x.copy()
    x2[1, 2, 5, 7] = 300.0                                    # overflows: that row goes shifted
    x2[0, 1, 3] = np.nan
    y2 = smx.scaled_masked_softmax(x2, mask, 0.7)
    keep = np.ones(x.shape[:3], bool)
    keep[1, 2, 5] = keep[0, 1, 3] = False
    assert y2[keep].tobytes() == y[keep].tobytes()
    monkeypatch.setattr(smx, "CHUNK_ELEMS", 3 * 64)           # chunks of three rows
    assert smx.scaled_masked_softmax(x, mask, 0.7).tobytes() == y.tobytes()
