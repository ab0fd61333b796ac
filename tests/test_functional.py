"""aclnn_gpu.functional with arguments of the wrong kind: every failure is an AclnnError naming the
function (161001 for a missing array, 161002 for a value of the wrong kind), never another exception."""
from __future__ import annotations

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu import functional as F
from support import use_device

f32 = np.float32
NUL, INVALID = acl.ACLNN_ERR_PARAM_NULLPTR, acl.ACLNN_ERR_PARAM_INVALID


def _x(*shape):
    return np.random.default_rng(0).random(shape).astype(f32)


def _ctc(**change):
    args = dict(log_probs=np.log(np.full((4, 1, 3), 1 / 3, f32)), targets=np.array([[1]]), input_lengths=[4],
                target_lengths=[1])
    args.update(change)
    return lambda: F.ctc_loss(**args)


CASES = [
    ("kl_div: self None", lambda: F.kl_div(None, _x(3)), NUL, "self is null"),
    ("kl_div: target None, none", lambda: F.kl_div(_x(3), None, "none"), NUL, "target is null"),
    ("kl_div: reduction None", lambda: F.kl_div(_x(3), _x(3), None), INVALID, "kl_div"),
    ("kl_div: reduction 1.5", lambda: F.kl_div(_x(3), _x(3), 1.5), INVALID, "kl_div"),
    ("kl_div: reduction 'avg'", lambda: F.kl_div(_x(3), _x(3), "avg"), INVALID, "kl_div"),
    ("kl_div: shapes do not broadcast, none", lambda: F.kl_div(_x(3, 4), _x(5), "none"), INVALID, "broadcast"),
    ("kl_div_backward: self None", lambda: F.kl_div_backward(_x(), None, _x(3)), NUL, "self is null"),
    ("conv_tbc: pad None", lambda: F.conv_tbc(_x(4, 1, 2), _x(3, 2, 2), _x(2), None), INVALID, "pad"),
    ("conv_tbc: pad 'x'", lambda: F.conv_tbc(_x(4, 1, 2), _x(3, 2, 2), _x(2), "x"), INVALID, "pad"),
    ("conv_tbc_backward: pad 1.0", lambda: F.conv_tbc_backward(_x(4, 1, 2), _x(4, 1, 2), _x(3, 2, 2), _x(2), 1.0),
     INVALID, "pad"),
    ("conv_tbc: cube_math_type True", lambda: F.conv_tbc(_x(4, 1, 2), _x(3, 2, 2), _x(2), 1, True), INVALID,
     "cube_math_type"),
    ("cross_entropy_loss: reduction object", lambda: F.cross_entropy_loss(_x(2, 3), np.array([0, 1]),
                                                                           reduction=object()), INVALID,
     "reduction"),
    ("cross_entropy_loss_grad: reduction 7", lambda: F.cross_entropy_loss_grad(_x(), _x(2, 3), np.array([0, 1]),
                                                                               reduction=7), INVALID, "reduction"),
    ("ctc_loss: input_lengths 'x'", _ctc(input_lengths="x"), INVALID, "input_lengths"),
    ("ctc_loss: target_lengths [1.5]", _ctc(target_lengths=[1.5]), INVALID, "target_lengths"),
    ("ctc_loss: log_probs None", _ctc(log_probs=None), NUL, "logProbs is null"),
    ("ctc_loss: ragged input_lengths", _ctc(input_lengths=[[4], [4, 1]]), INVALID, "input_lengths"),
    ("scaled_masked_softmax: x None", lambda: F.scaled_masked_softmax(None, np.zeros((1, 1, 2, 2), bool)), NUL,
     "x is null"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_wrong_kinds_raise_aclnn_error(case):
    use_device("cpu")
    _, call, status, word = case
    with pytest.raises(acl.AclnnError) as refused:
        call()
    assert refused.value.status == status, refused.value
    assert word in str(refused.value), refused.value


def test_kl_div_zero_d_target():
    """A 0-D target broadcast over self (the cpu path once failed on it after a successful phase 1)."""
    use_device("cpu")
    import torch
    x, t = _x(3, 4), np.array(0.25, f32)
    expected = torch.nn.functional.kl_div(torch.tensor(x), torch.tensor(t).expand(3, 4), reduction="sum")
    np.testing.assert_allclose(F.kl_div(x, t, "sum"), expected.numpy(), rtol=1e-6)


def test_calls_that_do_not_fit_the_signature_raise_type_error():
    """A wrong call is Python's TypeError, as for any function, not a library error."""
    with pytest.raises(TypeError):
        F.kl_div(_x(3))
    with pytest.raises(TypeError):
        F.kl_div(_x(3), _x(3), bogus=1)
