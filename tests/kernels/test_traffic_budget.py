"""The GPU memory-traffic budget: the profiler's checks catch an uncoalesced kernel (fixture), and every
operator kernel stays within its family's ops/<family>/traffic_budget.json (the profile command in a subprocess: the
profiling build must be selected before the device builds its kernels). Needs clang++ and
llvm-symbolizer (CI installs Debian's clang and llvm)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aclnn_gpu.emulator import EmuModule, profiling
from aclnn_gpu.profile.budget import check_launch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(not shutil.which("clang++") or not (shutil.which("llvm-symbolizer") or
                       shutil.which("llvm-symbolizer-14")),
                       reason="the profiler needs clang++ and llvm-symbolizer (apt-get install clang llvm)"),
    # the AddressSanitizer rerun of the kernel tests (scripts/ci_kernels.sh) has nothing to add here
    pytest.mark.skipif(bool(os.environ.get("ACLNN_GPU_EMU_SANITIZE")), reason="profiling build, not sanitized"),
]


def _aligned(n: int) -> np.ndarray:
    raw = np.zeros(n * 4 + 256, np.uint8)
    start = (-raw.ctypes.data) % 256
    return raw[start:start + n * 4].view(np.float32)


@pytest.fixture(scope="module")
def fixture_profiles(fixtures_dir):
    mod = EmuModule.from_file(fixtures_dir / "uncoalesced.cu", mode="profile")
    n = 1 << 14
    out = {}
    for name in ("copy_coalesced", "copy_uncoalesced"):
        x, y = _aligned(n), _aligned(n)
        x[:] = np.arange(n)
        with profiling.collect() as launches:
            mod.get_function(name)((n // 256,), (256,), (x, y, np.int32(n)))
        assert (y == x).all()
        out[name] = launches[0]
    return out, 2 * n * 4


RULE = {"max_dram_ratio": 1.05, "min_main_efficiency": 0.9}


def test_coalesced_fixture_within_budget(fixture_profiles):
    profiles, min_bytes = fixture_profiles
    p = profiles["copy_coalesced"]
    assert p.dram_bytes == min_bytes
    assert {(s.site.kind, s.requests, s.sectors) for s in p.global_sites()} == {("load", 512, 2048), ("store", 512, 2048)}
    assert check_launch(p, RULE, min_bytes) == []


def test_uncoalesced_fixture_fails_budget(fixture_profiles):
    profiles, min_bytes = fixture_profiles
    p = profiles["copy_uncoalesced"]
    assert p.dram_bytes == min_bytes          # same bytes in the end (cold cache, every sector once) ...
    for s in p.global_sites():                # ... but 32 sectors per 4-byte warp request
        assert s.sectors == 32 * s.requests and s.sector_efficiency == pytest.approx(0.125)
    bad = check_launch(p, RULE, min_bytes)
    assert len(bad) == 2 and all("sector efficiency 12.5% < 90%" in b for b in bad)


def _profile(fixtures_dir, name, grid, block, args):
    mod = EmuModule.from_file(fixtures_dir / "uncoalesced.cu", mode="profile")
    with profiling.collect() as launches:
        mod.get_function(name)(grid, block, args)
    return launches


def test_vector_width_recovered(fixtures_dir):
    n = 1 << 12
    x, y = _aligned(n), _aligned(n)
    x[:] = np.arange(n)
    (p,) = _profile(fixtures_dir, "copy_vec4", (n // 4 // 128,), (128,), (x, y, np.int32(n // 4)))
    assert (y == x).all()
    sites = p.global_sites()
    assert {(s.site.kind, s.width) for s in sites} == {("load", 16), ("store", 16)}
    assert all(s.requests == n // 4 // 32 and s.sectors == 16 * s.requests == s.ideal_sectors for s in sites)


def test_shared_bank_conflicts(fixtures_dir):
    x, y = _aligned(1024), _aligned(1024)
    x[:] = np.arange(1024)
    (plain,) = _profile(fixtures_dir, "transpose_tile", (1,), (1024,), (x, y, np.int32(0)))
    assert (y.reshape(32, 32) == x.reshape(32, 32).T).all()
    (padded,) = _profile(fixtures_dir, "transpose_tile", (1,), (1024,), (x, y, np.int32(1)))
    # the column write of the unpadded tile: 32 lanes, one bank, 32 wavefronts per request
    writes = [s for s in plain.shared_sites() if s.site.kind == "store"]
    assert len(writes) == 1 and writes[0].requests == 32 and writes[0].wavefronts == 32 * 32
    assert writes[0].bank_conflicts == 31 * 32
    assert all(s.bank_conflicts == 0 for s in padded.shared_sites())
    assert all(s.bank_conflicts == 0 for s in plain.shared_sites() if s.site.kind == "load")


def test_l2_model_spans_launches(fixtures_dir):
    n = 1 << 14
    x, y = _aligned(n), _aligned(n)
    mod = EmuModule.from_file(fixtures_dir / "uncoalesced.cu", mode="profile")
    with profiling.collect() as launches:
        for _ in range(2):
            mod.get_function("copy_coalesced")((n // 256,), (256,), (x, y, np.int32(n)))
    first, second = launches
    assert first.dram_bytes == second.dram_bytes == 2 * n * 4    # cold: each launch on its own
    assert first.l2_dram_bytes == 2 * n * 4 and second.l2_dram_bytes == 0   # 128 KiB stay in the L2


def test_block_sampling_scales_counts(fixtures_dir):
    n = 1 << 14
    x, y = _aligned(n), _aligned(n)
    mod = EmuModule.from_file(fixtures_dir / "uncoalesced.cu", mode="profile")
    with profiling.collect(sample_every=4) as launches:
        mod.get_function("copy_coalesced")((n // 256,), (256,), (x, y, np.int32(n)))
    (p,) = launches
    assert (p.blocks, p.blocks_traced) == (64, 16) and p.sample_scale == 4
    assert p.dram_bytes == 2 * n * 4                       # scaled back to the whole grid
    assert all(s.requests == 16 * 8 for s in p.global_sites())   # what was traced: 16 blocks x 8 warps


def test_profile_help_lists_every_operator():
    from aclnn_gpu.profile.operators import OPERATORS
    r = subprocess.run([sys.executable, "-m", "aclnn_gpu.profile", "--help"], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert len(OPERATORS) == 10 and all(name in r.stdout for name in OPERATORS)
    assert "--check-budget" in r.stdout and "not a" in r.stdout and "measurement" in r.stdout


def test_profile_covers_every_kernel():
    """The profile command reaches every kernel of kernels/manifest.py (defaults plus layout variants)."""
    r = subprocess.run([sys.executable, "-m", "aclnn_gpu.profile", "--coverage"], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "never launched" not in r.stdout and "kernel coverage:" in r.stdout


def test_operator_kernels_within_budget(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "aclnn_gpu.profile", "--check-budget"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "traffic budget: 16 case(s), OK" in r.stdout


def test_budget_failure_exits_nonzero(tmp_path):
    budget = tmp_path / "tight.json"
    budget.write_text('{"cases": [{"op": "CtcLossBackward", "kernels": {"aclg::ctc_beta": {"max_dram_bytes": 1000}}}]}')
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "aclnn_gpu.profile", "--check-budget", str(budget)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "BUDGET EXCEEDED CtcLossBackward: aclg::ctc_beta" in r.stderr
