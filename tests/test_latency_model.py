"""profile/latency.py: the step-latency model of recursion kernels that prices both our CTC kernels
(CallProfile.latency_model_seconds) and PyTorch's (bench/torch_launches.py), and the data it reads
(the prefetch distance of kernels/ctc_loss.cu, LossCTC.cu's per-step structure)."""
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from aclnn_gpu.ops.ctc_loss import launch
from aclnn_gpu.profile import HBM_BYTES_PER_S, LAUNCH_S, CallProfile, latency
from aclnn_gpu.profile.latency import (BARRIER_CYCLES, CLOCK_HZ, DRAM_CYCLES, L2_CYCLES, LSE3_CHAIN, Load,
                                       Recursion)
from bench import torch_launches

HEADLINE = {"T": 1000, "N": 32, "C": 5000, "L": 100}


def test_a_load_in_its_own_step_is_exposed_and_a_prefetched_one_hides_ahead_steps_of_work():
    work = BARRIER_CYCLES + 100.0
    now = Recursion(10, (Load("x", "dram"), Load("y", "l2")), alu=100.0)
    assert now.step_cycles() == work + DRAM_CYCLES                 # the two overlap: the slower one counts
    assert now.seconds == pytest.approx(10 * (work + DRAM_CYCLES) / CLOCK_HZ)
    one = Recursion(10, (Load("x", "dram", 1),), alu=100.0)
    assert one.step_cycles() == DRAM_CYCLES                       # one step ahead cannot cover 600 cycles
    two = Recursion(10, (Load("x", "dram", 2),), alu=100.0)
    assert two.step_cycles() == DRAM_CYCLES / 2
    eight = Recursion(10, (Load("x", "dram", 8),), alu=100.0)
    assert eight.step_cycles() == work                             # covered: the chain decides


def test_serial_states_repeat_the_exposed_load_and_issue_bounds_wide_blocks():
    r = Recursion(1, (Load("x", "l2"),), barriers=0, alu=50.0, serial=3)
    assert r.step_cycles() == 3 * (50.0 + L2_CYCLES)
    wide = Recursion(1, (), barriers=0, alu=10.0, warps=32, instructions=60)
    assert wide.step_cycles() == 8 * 60                            # 32 warps over 4 schedulers


def test_kernel_seconds_is_the_larger_of_bytes_and_steps():
    rec = Recursion(1000, (Load("x", "dram"),))
    assert latency.kernel_seconds(1e6, rec, HBM_BYTES_PER_S, LAUNCH_S) == pytest.approx(rec.seconds + LAUNCH_S)
    assert latency.kernel_seconds(1e12, rec, HBM_BYTES_PER_S, LAUNCH_S) == pytest.approx(1e12 / HBM_BYTES_PER_S
                                                                                          + LAUNCH_S)
    assert latency.kernel_seconds(1e6, None, HBM_BYTES_PER_S, LAUNCH_S) == pytest.approx(1e6 / HBM_BYTES_PER_S
                                                                                         + LAUNCH_S)


def test_ring_distance_is_the_kernels_own():
    """launch.RING (which the model reads) says what ctc_loss.cu's RingOf<P> instantiates."""
    src = (Path(launch.__file__).parents[2] / "kernels" / "ctc_loss.cu").read_text()
    m = re.search(r"struct RingOf \{ static constexpr int value = P == 1 \? (\d+) : (\d+); \}", src)
    assert m, "RingOf<P> changed shape: update launch.RING and this test"
    assert launch.RING == {1: int(m.group(1))} and int(m.group(2)) == 1
    geo = launch.recursion_geometry(100, 4)
    assert (geo.per, geo.P, launch.prefetch_distance(geo)) == (1, 1, 8)
    big = launch.recursion_geometry(1000, 4)
    assert big.P == 8 and launch.prefetch_distance(big) == 1
    assert launch.prefetch_distance(launch.recursion_geometry(3000, 4)) == 0     # long path
    chunk = re.search(r"constexpr int kLongChunk = (\d+);", src)
    assert chunk and int(chunk.group(1)) == launch.LONG_CHUNK


def test_the_kernels_each_side_launches_are_described():
    torch_alpha = latency.recursion("ctc_loss_log_alpha_gpu_kernel", HEADLINE)
    torch_beta = latency.recursion("ctc_loss_backward_log_beta_gpu_kernel", HEADLINE)
    # LossCTC.cu: the previous step from global memory after the barrier, the log-prob loaded in the step
    assert {(x.level, x.ahead) for x in torch_alpha.loads} == {("l2", 0), ("dram", 0)}
    assert torch_alpha.step_cycles() == torch_beta.step_cycles() == BARRIER_CYCLES + LSE3_CHAIN + DRAM_CYCLES
    assert torch_alpha.warps == 32                   # 256 threads per sample, 4 samples per block
    ours = latency.recursion("aclg::ctc_beta<float, long long, 1>", HEADLINE)
    assert {(x.level, x.ahead) for x in ours.loads} == {("dram", 8)}
    assert ours.step_cycles() < torch_beta.step_cycles() / 2
    long_path = latency.recursion("aclg::ctc_alpha_long<float, long long>", dict(HEADLINE, L=3000))
    per = -(-6001 // launch.MAX_THREADS)                          # 12 states per thread
    assert long_path.serial == -(-per // launch.LONG_CHUNK) == 3      # in chunks of 4
    assert latency.recursion("aclg::ctc_grad<float>", HEADLINE) is None
    assert latency.recursion("exp_out(grad, log_probs)", HEADLINE) is None


def test_both_sides_are_priced_by_the_same_function():
    """PyTorch's latency-aware figure adds exactly its recursions' excess over their bytes; ours (a
    CallProfile of fake launches) does the same through the kernel names."""
    m = torch_launches.model("CtcLossBackward", HEADLINE, 4, "float32")
    beta = next(b for n, b, _ in torch_launches.launches("CtcLossBackward", HEADLINE)
                if n.startswith("ctc_loss_backward_log_beta_gpu_kernel"))
    roof = beta(HEADLINE, 4) / HBM_BYTES_PER_S
    rec = latency.recursion("ctc_loss_backward_log_beta_gpu_kernel", HEADLINE).seconds
    assert rec > roof
    assert m["latency_seconds"] == pytest.approx(m["seconds"] - roof + rec)
    launches = [SimpleNamespace(kernel="aclg::ctc_beta<float, long long, 1>", l2_dram_bytes=1e6),
                SimpleNamespace(kernel="aclg::ctc_grad<float>", l2_dram_bytes=8e7)]
    p = CallProfile("CtcLossBackward", dict(HEADLINE, N=2), "fp32", 0, launches)
    ours_rec = latency.recursion(launches[0].kernel, p.dims).seconds
    assert p.model_seconds == pytest.approx(8.1e7 / HBM_BYTES_PER_S + 2 * LAUNCH_S)
    assert p.latency_model_seconds == pytest.approx(ours_rec + 8e7 / HBM_BYTES_PER_S + 2 * LAUNCH_S)


def test_sensitivity_restores_the_constant():
    r = latency.recursion("ctc_loss_log_alpha_gpu_kernel", HEADLINE)
    out = latency.sensitivity(lambda: r.seconds, (400.0, 1000.0))
    assert out[400.0] < out[1000.0]
    assert latency.DRAM_CYCLES == DRAM_CYCLES and latency.LEVELS["dram"] == DRAM_CYCLES


def test_gpu_model_table_shows_both_models_for_ctc():
    from bench import gpu_model
    case = next(c for c in gpu_model.CASES if c[0] == "CtcLossBackward")
    d = dict(case[1], fptargets=0)
    theirs = torch_launches.model(case[0], d, 4, "float32")
    row = {"op": case[0], "dims": case[1], "dtype": case[2], "launches": 2, "l2_dram_bytes": 8.6e7, "min_bytes": 8.2e7,
           "seconds": 31.8e-6, "latency_seconds": 194.2e-6, "torch": theirs, "apex": None}
    line = next(x for x in gpu_model.render([row], None).splitlines() if x.startswith("| aclnnCtcLossBackward"))
    assert "31.8 us / 194.2 us" in line
    assert f"{theirs['seconds'] * 1e6:.1f} us / {theirs['latency_seconds'] * 1e6:.1f} us" in line
    assert theirs["latency_seconds"] > theirs["seconds"]
    assert f"{31.8e-6 / theirs['seconds']:.2f}x / {194.2e-6 / theirs['latency_seconds']:.2f}x" in line
