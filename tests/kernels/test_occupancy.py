"""Grids sized from occupancy (aclnn_gpu/kernels/occupancy.py): the blocks-per-SM
arithmetic, the checked-in register table against a fresh compile report, and on the emulated device
that the grids phase 1 records are one full wave at the table's occupancy, not a fixed cap."""
from __future__ import annotations

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.kernels import occupancy
from aclnn_gpu.kernels.occupancy import LIMITS, REGISTERS, blocks_per_sm
from aclnn_gpu.plans.frozen import Launch
from aclnn_gpu.runtime import get_device
from support import Session


def test_blocks_per_sm_is_the_minimum_over_the_limits(monkeypatch):
    table = {("f.cu", "r32"): {"90": (32, 0)}, ("f.cu", "r48"): {"90": (48, 0)},
             ("f.cu", "smem"): {"90": (16, 40 * 1024)}, ("f.cu", "r255"): {"90": (255, 0)}}
    monkeypatch.setattr(occupancy, "REGISTERS", table)
    assert blocks_per_sm("sm_90", "f.cu", "r32", 256) == 8       # threads: 2048 / 256
    assert blocks_per_sm("sm_90", "f.cu", "r32", 32) == 32       # the blocks-per-SM limit
    assert blocks_per_sm("sm_90", "f.cu", "r48", 256) == 5       # registers: 65536 / (48*32) = 42 warps
    assert blocks_per_sm("sm_90", "f.cu", "smem", 128) == 5      # shared: 228 KiB / (40 + 1) KiB
    assert blocks_per_sm("sm_90", "f.cu", "smem", 128, dynamic_shared=8 * 1024) == 4
    assert blocks_per_sm("sm_90", "f.cu", "r255", 1024) == 1     # never below one
    assert blocks_per_sm("sm_100", "f.cu", "r48", 256) == 5      # a newer arch uses the nearest below


def test_table_covers_the_architectures_of_the_report():
    from aclnn_gpu.kernels import report
    assert set(LIMITS) == set(report.ARCHS)
    assert all(set(by_arch) == set(LIMITS) for by_arch in REGISTERS.values())


def test_table_agrees_with_a_fresh_compile_report():
    pytest.importorskip("cuda.bindings.nvrtc")
    fresh = occupancy.measure(list(REGISTERS))
    stale = {key: (REGISTERS[key], fresh.get(key)) for key in REGISTERS if fresh.get(key) != REGISTERS[key]}
    assert not stale, ("the register tables (ops/<op>/registers.json, kernels/registers.json) differ from the "
                       "compile report (table, fresh; python -m aclnn_gpu.kernels.occupancy --write rewrites them): "
                       f"{stale}")


@pytest.fixture
def session():
    s = Session("emulated")
    yield s
    s.close()


def _launches(executor) -> list[Launch]:
    return [step for step in executor.plan.frozen.steps if isinstance(step, Launch)]


def _wave(session_device, launch: Launch) -> int:
    return session_device.sm_count * blocks_per_sm(session_device.arch, launch.file, launch.expr, launch.block[0],
                                                   launch.shared_mem)


def test_recorded_grids_are_one_wave_at_the_tables_occupancy(session):
    device = get_device()
    rng = np.random.default_rng(0)
    # KL backward, contiguous fp32: far more work than one wave -> exactly one wave (was 4 blocks/SM)
    n = 4 * 256 * 4 * device.sm_count * 32
    g, x, t = (session.tensor(rng.standard_normal(n).astype(np.float32)) for _ in range(3))
    out = session.tensor(np.zeros(n, np.float32))
    status, _, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(g, x, t, 0, False, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    (launch,) = _launches(ex)
    assert launch.expr == "kl_bwd_contig<float>" and launch.grid == (_wave(device, launch),)
    assert launch.grid[0] > device.sm_count * 4
    # the strided copies of staged operands (CE with a strided logProb) and CE's kernels
    N, C = 64, 4096
    lp = session.tensor(rng.standard_normal((N, C)).astype(np.float32), strided=True)
    target = session.tensor(rng.integers(0, C, N).astype(np.int64))
    grad_loss = session.tensor(np.ones(N, np.float32))
    grad = session.tensor(np.zeros((N, C), np.float32))
    status, _, ex2 = acl.aclnnCrossEntropyLossGradGetWorkspaceSize(grad_loss, lp, target, None, None, None, "none",
                                                                  -100, 0.0, 0.0, grad)
    assert status == 0, acl.aclGetRecentErrMsg()
    launches = _launches(ex2)
    gather = next(step for step in launches if step.expr.startswith("strided_gather"))
    assert gather.grid == (_wave(device, gather),)
    for step in launches:
        assert step.grid[0] <= _wave(device, step), step
    for executor in (ex, ex2):
        acl.aclDestroyAclOpExecutor(executor)
