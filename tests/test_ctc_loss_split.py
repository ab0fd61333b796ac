"""aclnnCtcLoss / aclnnCtcLossBackward at a shape whose recursions split each sample over several
blocks on the GPU plan (ops/ctc_loss/launch.recursion_split: few samples, many steps), through the
two-phase API: against PyTorch CPU float64 on the cpu and emulated devices (float64: fp32's rounding
over 300 steps is beyond check_case's fixed tolerance; float16: recomputed in fp32, rounded once), and
on the emulated device the same bits as the one-block-per-sample plan for every dtype. The workspace
GetWorkspaceSize reports holds the split's step counts and boundary values."""
from __future__ import annotations

import numpy as np
import pytest

from aclnn_gpu.ops.ctc_loss import launch
from support import Session
from test_ctc_loss import FLOAT_DTYPES, check_case, make_case, run_bwd, run_fwd

T, N, C, L = 300, 2, 6, 63


def test_the_shape_splits():
    """... and the emulated device (fakecupy's SMs) keeps every block of each split launch resident, so
    the plans below take the split path."""
    from aclnn_gpu.device import fakecupy
    from aclnn_gpu.kernels.context import StandaloneEmuContext
    J, cs = launch.recursion_split(T, N, L)
    assert J > 1 and (J - 1) * cs < 2 * L + 1 <= J * cs
    ctx = StandaloneEmuContext(sm_count=fakecupy.SM_COUNT)
    for kernel, units in [("aclg::ctc_alpha_split<double, long long>", N * J),
                          ("aclg::ctc_beta_split<double, long long>", N * J),
                          ("aclg::ctc_recursions_math_split<__half, long long>", 2 * N * J)]:
        assert launch.split_resident(ctx, kernel, units, L), kernel


@pytest.mark.parametrize("dtype", [np.float64, np.float16], ids=["float64", "float16"])
def test_split_recursions_vs_torch(session, rng, dtype):
    lp, tg, il, tl = make_case(rng, T, N, C, L, blank=0, dtype=dtype, short=0.0)
    il[0] = T
    check_case(session, lp, tg, il, tl, 0, False, rng.standard_normal(N), one_d=True, pad=1,
               what=f"T={T} N={N} L={L} il={il} tl={tl}")


@pytest.fixture
def emulated():
    s = Session("emulated")
    yield s
    s.close()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_split_recursions_same_bits_as_one_block_per_sample(emulated, rng, monkeypatch, dtype):
    s = emulated
    lp, tg, il, tl = make_case(rng, T, N, C, L, blank=2, dtype=dtype, short=0.0)
    g = rng.standard_normal(N).astype(dtype)

    def both():
        nll, la = run_fwd(s, lp, tg, il, tl, blank=2)
        return nll, la, run_bwd(s, g, lp, tg, il, tl, nll, la, blank=2)

    split = both()
    monkeypatch.setattr(launch, "SPLIT_MIN_WORK", 1 << 62)
    assert launch.recursion_split(T, N, L) == (1, 0)
    for a, b, what in zip(split, both(), ("nll", "log_alpha", "grad")):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), what
