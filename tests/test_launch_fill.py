"""Every launch fills the GPU: each operator's launch list at every shape of the bench ladder
(bench/run.py's positions, bench/families.py's shapes, fp32), recorded for the modelled H200's 132 SMs
(ops/frozen.freeze: no GPU needed), breaks no rule of `aclnn_gpu.profile.parallel.fill_problems`: a
kernel that moves 1 MiB or more runs on at least as many blocks as the GPU has SMs, and a GEMM of
1 GFLOP or more has at least as many 128x128 output tiles (times batch and split) as SMs. A kernel's
bytes are those of the buffers its pointer arguments address (parallel.py), an upper bound.

The plans are built on the emulated device over device memory that is never written (the launch list
depends on shapes, dtypes, addresses and host arguments only), so the ladder's largest shapes
(hundreds of MB) cost no data. Also here: the model's arithmetic (tiles, fill, waves) on its own."""
from __future__ import annotations

import pytest

from aclnn_gpu.profile import parallel
from support import use_device

def _cases():
    from bench import gpu_model
    from bench.families import FAMILIES
    for fam in FAMILIES:
        for e in gpu_model.LADDER:
            p = fam.params(e)
            for direction in ("forward", "backward"):
                yield pytest.param(fam.name, e, direction, id=f"{fam.name}-{direction}-{'x'.join(map(str, p))}")


@pytest.fixture(scope="module")
def emulated():
    use_device("emulated")


@pytest.mark.parametrize("family, e, direction", list(_cases()))
def test_every_launch_fills_the_gpu(emulated, family, e, direction):
    from bench import gpu_model
    from bench.families import FAMILIES
    fam = next(f for f in FAMILIES if f.name == family)
    p = fam.params(e)
    (_, _, _, plan), = gpu_model.ladder_plans([fam], ladder=[e], directions=[direction])
    steps = parallel.plan_steps(plan)
    assert steps, f"{family} {direction} {p}: no launch recorded"
    bad = parallel.fill_problems(steps)
    name = fam.forward if direction == "forward" else fam.backward
    assert not bad, f"{name} at {fam.shapes(p)} (fp32, {parallel.SM_COUNT} SMs):\n  " + "\n  ".join(bad)


# ------------------------------------------------------------------------------ the model itself
def test_gemm_fill_counts_waves_of_output_tiles():
    assert parallel.gemm_tiles(128, 128, 3) == 3
    assert parallel.gemm_tiles(129, 128, 1) == 2
    assert parallel.gemm_fill(3) == pytest.approx(3 / 132)
    assert parallel.gemm_fill(132) == 1.0
    assert parallel.gemm_fill(133) == pytest.approx(133 / 264)          # a second, nearly empty wave
    # 3 tiles of 4 GFLOP fp32: the FLOPs at 3/132 of the peak, not the dense rate
    s = parallel.gemm_seconds(128, 128, 40448, 3, "fp32", 0)
    assert s == pytest.approx(2 * 128 * 128 * 40448 * 3 / (67e12 * 3 / 132) + parallel.LAUNCH_S)


def test_kernel_fill_is_the_grids_share_of_sms_and_warps():
    # one block of 8 warps: 1/132 of the SMs, half the warps an SM needs to stream
    assert parallel.kernel_fill(1, 256, 8) == pytest.approx(1 / 132 * 8 / 16)
    assert parallel.kernel_fill(132 * 8, 256, 8) == 1.0                  # one full wave
    assert parallel.kernel_fill(132 * 8 + 1, 256, 8) == pytest.approx((132 * 8 + 1) / (2 * 132 * 8))
    nbytes = 41e6
    assert parallel.kernel_seconds(nbytes, 1, 256, 8) == pytest.approx(nbytes / (4e12 / 264) + 3e-6)


def test_blocks_per_sm_falls_back_to_thread_limits_for_unlisted_kernels():
    assert parallel.blocks_per_sm("kl_div.cu", "kl_fwd_contig<float>", 256) == 8      # 32 registers: threads
    assert parallel.blocks_per_sm("x.cu", "not_in_the_table", 1024) == 2
    assert parallel.blocks_per_sm("x.cu", "not_in_the_table", 32) == 32                # the block limit


def test_fill_problems_name_the_kernel_grid_and_bytes():
    big = parallel.Step("kernel", "tbc_batch_major<float, float, float>", (1, 1, 1), 256, 41 << 20, 0.0, 1, 1e-3)
    small = parallel.Step("kernel", "k", (1,), 256, (1 << 20) - 1, 0.0, 1, 1e-6)
    gemm = parallel.Step("gemm", "gemm 128x128x40448 x3 fp32", (3,), 0, 0, 3.98e9, 3, 1e-3)
    bad = parallel.fill_problems([big, small, gemm])
    assert len(bad) == 2
    assert "tbc_batch_major" in bad[0] and "(1, 1, 1)" in bad[0] and "41.0 MiB" in bad[0]
    assert "3 output tiles" in bad[1] and "3.98 GFLOP" in bad[1]


def test_conv_tbc_model_table_prices_no_launch_below_its_full_gpu_figure(emulated):
    """bench.gpu_model --conv-tbc: every row's parallel model is at least the roofline of the same launch
    list (fill <= 1), and the table names the model as one."""
    from bench import gpu_model
    rows = gpu_model.conv_tbc_model(shapes=[(40, 4, 16, 3, 1)], dtypes=("fp32", "bf16"))
    assert [(r["dtype"], r["direction"]) for r in rows] == [("fp32", "forward"), ("fp32", "backward"),
                                                           ("bf16", "forward"), ("bf16", "backward")]
    for r in rows:
        assert r["launches"] > 0 and r["seconds"] >= r["full_seconds"] > 0
    text = gpu_model.render_conv_tbc(rows)
    assert "MODEL" in text and text.count("| (40, 4, 16), K=3, pad=1 |") == 4
