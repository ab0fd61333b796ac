"""aclnnCtcLoss / aclnnCtcLossBackward at a shape whose recursions split each sample over several
blocks on the GPU plan (ops/ctc_loss/launch.recursion_split: few samples, many steps), through the
two-phase API: against PyTorch CPU float64 on the cpu and emulated devices (float64: fp32's rounding
over 300 steps is beyond check_case's fixed tolerance; float16: recomputed in fp32, rounded once), and
on the emulated device the same bits as the one-block-per-sample plan for every dtype (the emulator runs
the blocks one after another: that checks the arithmetic, not the concurrency). The workspace
GetWorkspaceSize reports holds the split's sync words and boundary values. On a GPU (ACLNN_GPU_TEST_DEVICES
naming cuda; scripts/gpu_check.sh), a stress test repeats forced splits against the register path."""
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
    from aclnn_gpu.emulator import fakecupy
    from aclnn_gpu.emulator.context import StandaloneEmuContext
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


# ------------------------------------------------------------------------------ on a GPU
# Chunks of 32, 22 and 2 states of 2L+1 = 63: J = 2, 3 and 32 blocks per sample.
STRESS_T, STRESS_N, STRESS_L, STRESS_CHUNKS, STRESS_REPEATS = 2000, 4, 31, (32, 22, 2), 50
BUSY_KERNEL = r'''extern "C" __global__ void busy(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}'''


@pytest.fixture
def cuda_session():
    from support import DEVICE_KINDS
    if "cuda" not in DEVICE_KINDS:
        pytest.skip("a GPU test: ACLNN_GPU_TEST_DEVICES does not name cuda")
    s = Session("cuda")
    yield s
    s.close()


def _occupy_the_gpu():
    """Starts a kernel on a stream of its own whose blocks hold every SM for about 0.1 s (0.2 G cycles), so
    that the split launch queued after it gets its blocks dispatched a few at a time, in any order."""
    import cupy
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.RawKernel(BUSY_KERNEL, "busy")((8 * sms,), (1024,), (np.int64(200_000_000),), stream=stream)
    return stream


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_split_recursions_stress_on_cuda(cuda_session, rng, monkeypatch, dtype):
    """The split recursions forced to J = 2, 3 and 32 chunks per sample at T = 2000 give, on every one of
    50 repeats, the bits of the one-block-per-sample path (loss, log_alpha, gradient); the last repeat of
    each after a kernel that holds every SM was started on another stream: the blocks' tickets, not their
    residency or dispatch order, keep the waits finite (a failed wait would show as NaN)."""
    s = cuda_session
    lp, tg, il, tl = make_case(rng, STRESS_T, STRESS_N, 8, STRESS_L, blank=0, dtype=dtype, short=0.0)
    tl[:] = STRESS_L
    g = rng.standard_normal(STRESS_N).astype(dtype)

    def both():
        nll, la = run_fwd(s, lp, tg, il, tl)
        return [np.asarray(a).tobytes() for a in (nll, la, run_bwd(s, g, lp, tg, il, tl, nll, la))]

    real_split, real_split_of = launch.recursion_split, launch._split_of
    chunk, taken = [0], []
    monkeypatch.setattr(launch, "recursion_split",
                        lambda T, N, max_l, long_path=None, split=None, math_size=4:
                        real_split(T, N, max_l, long_path, chunk[0], math_size))
    monkeypatch.setattr(launch, "_split_of", lambda *a: taken.append(real_split_of(*a)) or taken[-1])
    want = both()
    assert taken == [(1, 0)] * 2 and np.isfinite(np.frombuffer(want[0], dtype)).all()
    for cs in STRESS_CHUNKS:
        chunk[0] = cs
        J = -(-(2 * STRESS_L + 1) // cs)
        for k in range(STRESS_REPEATS):
            taken.clear()
            busy = _occupy_the_gpu() if k == STRESS_REPEATS - 1 else None
            got = both()
            if busy is not None:
                busy.synchronize()
            assert taken == [(J, cs)] * 2, f"cs {cs}: the launcher did not split ({taken})"
            for a, b, what in zip(got, want, ("nll", "log_alpha", "grad")):
                assert a == b, f"cs {cs} (J {J}) repeat {k}: {what} differs from the one-block-per-sample path"
