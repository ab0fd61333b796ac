"""NumPy KL divergence (aclnn_gpu/reference/kl_div.py): the chunked reduced forward against PyTorch in
float64, and its independence from the threads."""
import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aclnn_gpu.reference import kl_div as reference

REDUCTIONS = {reference.MEAN: "mean", reference.SUM: "sum", reference.BATCHMEAN: "batchmean"}


def _inputs(rng, shape, dtype, log_target, zeros=True):
    x = rng.standard_normal(shape)
    t = rng.standard_normal(shape) if log_target else rng.random(shape) + (0 if zeros else 1e-3)
    if not log_target and zeros:
        t.reshape(-1)[::97] = 0                     # xlogy: 0 * log 0 = 0
    return x.astype(dtype), t.astype(dtype)


@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("reduction", list(REDUCTIONS))
@pytest.mark.parametrize("zeros", [True, False])
def test_reduced_forward_spans_chunks(dtype, log_target, reduction, zeros):
    """(zeros=False: targets all positive, the chunks skip xlogy's zero fix)"""
    rng = np.random.default_rng(7)
    shape = (3 * reference._CHUNK // 256 + 5, 256)   # three chunks and a partial one
    x, t = _inputs(rng, shape, dtype, log_target, zeros)
    md = np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
    got = reference.kl_div(x, t, reduction, log_target, md)
    assert got.shape == () and got.dtype == md
    want = F.kl_div(torch.tensor(x.astype(np.float64)), torch.tensor(t.astype(np.float64)),
                    reduction=REDUCTIONS[reduction], log_target=log_target).item()
    np.testing.assert_allclose(float(got), want, rtol=1e-12 if md == np.float64 else 2e-6)


def test_reduced_forward_keeps_the_non_finite_rules():
    """t = inf gives NaN (inf - inf, PyTorch's xlogy(t, t) - t * x); t = 0 with x = inf gives NaN too
    (0 * inf), t = 0 otherwise adds nothing."""
    x = np.zeros((4, 8), np.float32)
    t = np.full((4, 8), 0.5, np.float32)
    t[0, 0] = 0
    x[0, 0] = 1e30
    assert np.isfinite(reference.kl_div(x, t, reference.SUM, False))
    t[1, 1] = np.inf
    assert np.isnan(reference.kl_div(x, t, reference.SUM, False))
    t[1, 1], x[0, 0] = 0.5, np.inf
    assert np.isnan(reference.kl_div(x, t, reference.SUM, False))


def test_threads_do_not_change_a_bit(monkeypatch):
    rng = np.random.default_rng(3)
    x, t = _inputs(rng, (2 * reference._PARALLEL_MIN // 1024 + 3, 1024), np.float32, False)
    parallel_result = reference.kl_div(x, t, reference.BATCHMEAN, False)
    monkeypatch.setattr(reference, "_PARALLEL_MIN", 1 << 62)
    assert reference.kl_div(x, t, reference.BATCHMEAN, False).tobytes() == parallel_result.tobytes()
