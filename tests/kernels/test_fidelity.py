"""Emulator fidelity where a GPU would differ: __launch_bounds__ honoured, a full-mask shuffle that an
exited lane should join is an error, kernels run with denormals flushed (CuPy's -ftz=true), while the
host keeps IEEE semantics."""
from __future__ import annotations

import numpy as np
import pytest

from aclnn_gpu.emulator import EmuLaunchError, EmuModule


@pytest.fixture(scope="module")
def mod(fixtures_dir):
    return EmuModule.from_file(fixtures_dir / "fidelity.cu")


def test_launch_bounds_honoured(mod):
    y = np.zeros(256, np.float32)
    mod.get_function("bounded")((1,), (128,), (y,))
    assert (y[:128] == 1).all() and (y[128:] == 0).all()
    with pytest.raises(EmuLaunchError, match=r"129 threads per block exceeds the kernel's __launch_bounds__\(128\)"):
        mod.get_function("bounded")((1,), (129,), (y,))


def test_full_mask_shuffle_after_lane_exit_is_an_error(mod):
    y = np.zeros(32, np.float32)
    mod.get_function("full_shuffle")((1,), (32,), (y,))
    assert (y == sum(range(32))).all()
    with pytest.raises(EmuLaunchError, match="exited|exits"):
        mod.get_function("early_exit_shuffle")((1,), (32,), (np.zeros(32, np.float32),))


def test_kernels_flush_denormals_host_does_not(mod):
    tiny = np.float32(1e-30)
    x = np.full(32, tiny, np.float32)
    y = np.full(32, np.nan, np.float32)
    mod.get_function("scale")((1,), (32,), (x, np.float32(1e-10), y))
    assert (y == 0).all(), "a subnormal fp32 product must be flushed to zero (-ftz=true)"
    sub = np.full(32, np.float32(1e-40), np.float32)   # a subnormal input is read as zero (DAZ)
    mod.get_function("scale")((1,), (32,), (sub, np.float32(1e30), y))
    assert (y == 0).all()
    assert np.float32(1e-30) * np.float32(1e-10) != 0   # the launching thread keeps IEEE subnormals
