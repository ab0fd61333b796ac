"""NumPy ConvTBC reference vs PyTorch CPU autograd (torch.conv_tbc) in float64.

Shapes are drawn fresh on every run; the seed is in the test id's message on failure."""
from __future__ import annotations

import secrets

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aclnn_gpu.reference.conv_tbc import conv_tbc, conv_tbc_backward, out_len  # noqa: E402


def _torch_ref(x, w, b, g, pad):
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True)
    y = torch.conv_tbc(xt, wt, bt, pad)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def _check(T, B, Cin, Cout, K, pad, seed):
    rng = np.random.default_rng(seed)
    msg = f"seed={seed} T={T} B={B} Cin={Cin} Cout={Cout} K={K} pad={pad}"
    Tout = out_len(T, K, pad)
    assert Tout >= 1, msg
    x = rng.standard_normal((T, B, Cin))
    w = rng.standard_normal((K, Cin, Cout))
    b = rng.standard_normal(Cout)
    g = rng.standard_normal((Tout, B, Cout))
    y = conv_tbc(x, w, b, pad)
    gi, gw, gb = conv_tbc_backward(g, x, w, b, pad)
    ry, rgi, rgw, rgb = _torch_ref(x, w, b, g, pad)
    for name, a, r in (("y", y, ry), ("grad_input", gi, rgi), ("grad_weight", gw, rgw), ("grad_bias", gb, rgb)):
        assert a.dtype == np.float64 and a.shape == r.shape, f"{name} {a.dtype} {a.shape} vs {r.shape}: {msg}"
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12, err_msg=f"{name}: {msg}")


def _rand_case(kind, rng):
    T = int(rng.integers(1, 12))
    B = int(rng.integers(1, 4))
    Cin = int(rng.integers(1, 7))
    Cout = int(rng.integers(1, 7))
    K = int(rng.integers(1, 5))
    if kind == "pad0":
        pad, K = 0, min(K, T)
    elif kind == "pad_pos":
        pad = int(rng.integers(1, K + 1))
    elif kind == "pad_gt_K":
        pad = K + int(rng.integers(1, 4))
    elif kind == "K1":
        K, pad = 1, int(rng.integers(0, 3))
    elif kind == "T1":
        T = 1
        pad = int(rng.integers((K - 1 + 1) // 2, K + 2))
    elif kind == "B1":
        B, pad = 1, int(rng.integers(0, K + 1))
    elif kind == "Tout1":
        pad = int(rng.integers(0, 3))
        K = T + 2 * pad           # Tout = 1
    elif kind == "cin_ne_cout":
        Cin, Cout = 3, 5 + int(rng.integers(0, 3))
        pad = int(rng.integers(0, K + 1))
    else:
        raise AssertionError(kind)
    if out_len(T, K, pad) < 1:
        pad = K
    return T, B, Cin, Cout, K, pad


@pytest.mark.parametrize("kind", ["pad0", "pad_pos", "pad_gt_K", "K1", "T1", "B1", "Tout1", "cin_ne_cout"])
@pytest.mark.parametrize("rep", range(3))
def test_matches_torch(kind, rep):
    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    _check(*_rand_case(kind, rng), seed=seed)


@pytest.mark.parametrize("shape", [(5, 2, 3, 4, 3, 2), (4, 1, 2, 3, 1, 0), (3, 2, 2, 2, 5, 4), (1, 1, 1, 1, 2, 1),
                                   (7, 3, 4, 2, 7, 0)])
def test_fixed_shapes(shape):
    _check(*shape, seed=secrets.randbits(32))


@pytest.mark.parametrize("which", ["T0", "Cin0", "K0"])
def test_empty_input_or_weight(which):
    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    T, B, Cin, Cout, K, pad = 4, 2, 3, 5, 2, 1
    if which == "T0":
        T = 0
    elif which == "Cin0":
        Cin = 0
    else:
        K = 0
    Tout = out_len(T, K, pad)
    x = rng.standard_normal((T, B, Cin)).astype(np.float32)
    w = rng.standard_normal((K, Cin, Cout)).astype(np.float32)
    b = rng.standard_normal(Cout).astype(np.float32)
    g = rng.standard_normal((Tout, B, Cout)).astype(np.float32)
    gi, gw, gb = conv_tbc_backward(g, x, w, b, pad)
    assert gi.shape == x.shape and gw.shape == w.shape and gb.shape == b.shape
    assert not gi.any() and not gw.any()
    np.testing.assert_allclose(gb, g.sum(axis=(0, 1), dtype=np.float64), rtol=1e-5, atol=1e-5,
                               err_msg=f"seed={seed}")     # sum of grad, not B*Tout (docs/API.md §7)
    y = conv_tbc(x, w, b, pad)
    assert y.shape == (Tout, B, Cout)
    np.testing.assert_array_equal(y, np.broadcast_to(b, y.shape))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_low_precision_dtypes(dtype):
    """fp16/bf16/fp32 storage: fp32 math, results in the operands' dtypes, close to fp64 truth."""
    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    T, B, Cin, Cout, K, pad = 9, 3, 8, 6, 3, 1
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((T, B, Cin), (K, Cin, Cout), (Cout,)))
    g = rng.standard_normal((out_len(T, K, pad), B, Cout)).astype(dtype)
    y = conv_tbc(x, w, b, pad)
    gi, gw, gb = conv_tbc_backward(g, x, w, b, pad)
    f = lambda a: a.astype(np.float64)  # noqa: E731
    ry, rgi, rgw, rgb = _torch_ref(f(x), f(w), f(b), f(g), pad)
    eps = {np.dtype(np.float32): 1e-6, np.dtype(np.float16): 1e-3,
           np.dtype(ml_dtypes.bfloat16): 8e-3}[np.dtype(dtype)]
    for name, a, r in (("y", y, ry), ("gi", gi, rgi), ("gw", gw, rgw), ("gb", gb, rgb)):
        assert a.dtype == np.dtype(dtype), name
        scale = np.abs(r).max() + 1
        np.testing.assert_allclose(f(a), r, rtol=0, atol=4 * eps * scale, err_msg=f"{name} seed={seed}")


def test_does_not_modify_inputs_and_accepts_views():
    seed = secrets.randbits(32)
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((6, 4, 5))
    x = base[:, ::2, 1:4]                    # strided view (T=6, B=2, Cin=3)
    w = rng.standard_normal((3, 3, 4))
    b = rng.standard_normal(4)
    g = rng.standard_normal((6, 2, 4))
    keep = base.copy()
    gi, gw, gb = conv_tbc_backward(g, x, w, b, 1)
    np.testing.assert_array_equal(base, keep)
    _, rgi, rgw, rgb = _torch_ref(np.ascontiguousarray(x), w, b, g, 1)
    np.testing.assert_allclose(gi, rgi, rtol=1e-12, atol=1e-12, err_msg=f"seed={seed}")
    np.testing.assert_allclose(gw, rgw, rtol=1e-12, atol=1e-12, err_msg=f"seed={seed}")
