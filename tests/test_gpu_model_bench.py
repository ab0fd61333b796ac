"""bench.gpu_model / bench.torch_launches / bench.cpu_gap: the PyTorch launch estimates add up as their
sources say, the table has one row per operator, and the cpu goal is computed on the fastest runs."""
import math

import pytest

from bench import cpu_gap, gpu_model, torch_launches
from aclnn_gpu.profile import HBM_BYTES_PER_S, LAUNCH_S


def test_kl_forward_sequence_is_five_launches_over_nine_tensor_passes():
    d = {"N": 1000, "C": 1000}
    m = torch_launches.model("KlDiv", d, 4, "float32")
    assert m["launches"] == 5
    assert m["bytes"] == 9 * 1000 * 1000 * 4 + 2 * 4
    assert m["seconds"] == pytest.approx(m["bytes"] / HBM_BYTES_PER_S + 5 * LAUNCH_S)


def test_conv_tbc_backward_is_two_gemms_per_tap_plus_six_launches():
    d = {"T": 64, "B": 2, "Cin": 8, "Cout": 16, "K": 3, "pad": 1}
    m = torch_launches.model("ConvTbcBackward", d, 2, "float16")
    assert m["launches"] == 2 * 3 + 6
    # each tap's GEMMs together do 2 * rows * B * Cin * Cout FLOPs twice (gradInput and gradWeight)
    rows = torch_launches._tap_rows(d)
    assert rows == [63, 64, 63]                     # T_out = 64; the outer taps lose one row to the padding
    assert m["flops"] == sum(2 * 2.0 * r * 2 * 8 * 16 for r in rows)


def test_every_operator_of_the_table_has_a_sequence():
    assert {c[0] for c in gpu_model.CASES} == set(torch_launches.SEQUENCES)
    for op, dims, *_ in gpu_model.CASES:
        assert torch_launches.model(op, dict(dims, fptargets=0), 4, "float32")["seconds"] > 0


def test_render_puts_cpu_figures_beside_each_profiled_operator():
    case = gpu_model.CASES[1]                       # KlDivBackward
    row = {"op": case[0], "dims": case[1], "dtype": case[2], "launches": 1, "l2_dram_bytes": 2e6,
           "min_bytes": 2e6, "seconds": 4e-6, "torch": torch_launches.model(case[0], case[1], 4, "float32"),
           "apex": None}
    cpu = {"load_start": 0.5, "goal": {"geomean": 0.5},
           "rows": [{"family": case[3], "direction": case[4], "shapes": "self/target (4000, 1024), batchmean",
                     "ours_min_ms": 1.0, "ours_ms": 1.2, "torch_min_ms": 2.0, "torch_ms": 2.5}]}
    text = gpu_model.render([row], cpu)
    line = next(x for x in text.splitlines() if x.startswith("| aclnnKlDivBackward"))
    assert "0.50x (0.48x)" in line and "2 MB" in line and "4.0 us" in line


def test_cpu_goal_uses_fastest_runs_and_the_slow_cases_only():
    rows = [{"operator": "a", "shapes": "s1", "mid": True, "ours_min_ms": 1.0, "torch_min_ms": 2.0},
            {"operator": "b", "shapes": "s2", "mid": True, "ours_min_ms": 2.0, "torch_min_ms": 1.0},
            {"operator": "c", "shapes": "s3", "mid": False, "ours_min_ms": 0.5, "torch_min_ms": 0.1}]
    g = cpu_gap.goal(rows)
    assert g["geomean"] == pytest.approx(math.sqrt(0.5 * 2.0)) and g["operators"] == 2
    assert g["max"] == 2.0 and g["max_case"] == "b s2"     # c: PyTorch under 0.2 ms, not counted


def test_conv_tbc_launch_breakdown_times_every_launch_of_both_directions():
    """bench/conv_tbc.py --launches (the per-launch breakdown to run on a GPU) on the emulated device: each
    kernel and GEMM of one forward and one backward call appears once with its own event-timed span, and
    the device's context class is left as it was."""
    from support import use_device

    from aclnn_gpu.device import cuda as cuda_device
    from bench import conv_tbc
    before = {n: getattr(cuda_device.CudaKernelContext, n) for n in ("launch", "gemm_strided_batched", "gemm_batched")}
    use_device("emulated")
    rows = conv_tbc.launches("emulated", 20, 2, 8, 3, 1, "fp32", 0)
    kinds = {(r["direction"], r["call"]) for r in rows}
    assert {("forward", "launch"), ("forward", "gemm_strided_batched"), ("backward", "launch"),
            ("backward", "gemm_strided_batched")} <= kinds, kinds
    assert all(r["ms"] >= 0 for r in rows)
    assert any(r["what"].startswith("tbc_col_sums") for r in rows if r["direction"] == "backward")
    assert {n: getattr(cuda_device.CudaKernelContext, n) for n in before} == before
