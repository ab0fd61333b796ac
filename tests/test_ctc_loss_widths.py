"""aclnnCtcLoss's logAlphaOut width: exactly the two widths CANN takes (docs/API.md §7), 2*maxL+1
(Ascend 950) and that rounded up to a multiple of 8 (Atlas A2/A3); every other width is 161002, as in
ops-nn's unit test test_ctc_loss_outLogAlpha_shape_error (T=12, N=4, C=5, S=7, DOUBLE, width 16+1)."""
from __future__ import annotations

import numpy as np
import pytest

import aclnn_gpu as acl
from support import assert_refused

FWD = (acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss)


def cann_widths(max_l: int) -> set[int]:
    return {2 * max_l + 1, (2 * max_l + 1 + 7) // 8 * 8}


def _args(s, T, N, C, S, X, dtype=np.float64):
    rng = np.random.default_rng(S)
    lp = np.log(rng.dirichlet(np.ones(C), (T, N))).astype(dtype)
    tg = rng.integers(1, C, (N, max(S, 1)))
    return dict(logProbs=s.tensor(lp), targets=s.tensor(tg), inputLengths=s.int_array([T] * N),
                targetLengths=s.int_array([S] * N), blank=0, zeroInfinity=False,
                negLogLikelihoodOut=s.poisoned((N,), dtype), logAlphaOut=s.poisoned((N, T, X), dtype))


def test_cann_unit_test_out_log_alpha_shape_error(cpu_session):
    """CANN's case: width (2*7+1 rounded up to 8) + 1 = 17 is refused."""
    message = assert_refused(cpu_session, acl.aclnnCtcLossGetWorkspaceSize, "aclnnCtcLoss",
                             _args(cpu_session, 12, 4, 5, 7, 17), 161002,
                             outputs=("negLogLikelihoodOut", "logAlphaOut"))
    assert "logAlphaOut" in message, message


@pytest.mark.parametrize("max_l", range(0, 10))
def test_exactly_cann_widths(cpu_session, max_l):
    """Every width from 1 to padded+9: accepted iff it is 2*maxL+1 or its multiple-of-8 rounding
    (2*maxL+2 among the refused ones unless it is that rounding)."""
    T = max(2 * max_l + 1, 3)
    for X in range(1, (2 * max_l + 1 + 7) // 8 * 8 + 10):
        args = _args(cpu_session, T, 2, 5, max_l, X)
        if X in cann_widths(max_l):
            status, _, _ = acl.aclnnCtcLossGetWorkspaceSize(*args.values())
            assert status == 0, (X, acl.aclGetRecentErrMsg())
        else:
            assert_refused(cpu_session, acl.aclnnCtcLossGetWorkspaceSize, "aclnnCtcLoss", args, 161002,
                           outputs=("negLogLikelihoodOut", "logAlphaOut"))


@pytest.mark.parametrize("max_l", [3, 5])
def test_both_widths_run(session, max_l):
    """Both accepted widths give the same states; the padding of the wider one is -inf."""
    T, N, C = 2 * max_l + 2, 2, 6
    got = []
    for X in sorted(cann_widths(max_l)):
        args = _args(session, T, N, C, max_l, X, np.float32)
        assert session.run(*FWD, *args.values()) == 0, acl.aclGetRecentErrMsg()
        got.append(session.read(args["logAlphaOut"]))
    narrow, wide = got
    S = 2 * max_l + 1
    assert np.array_equal(wide[:, :, :S], narrow) and (wide[:, :, S:] == -np.inf).all()
