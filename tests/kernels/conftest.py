"""Kernel tests: every test under tests/kernels is marked `kernels` (CI runs the `kernels` tests a
second time with the AddressSanitizer emulator build); `sanitizer` marks the slow tests that build
sanitized kernels themselves. The session cache directory of the emulator is left as configured
(ACLNN_GPU_CACHE) so repeated runs reuse builds."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "kernels: runs CUDA kernels (on the emulated device in CI)")
    config.addinivalue_line("markers", "sanitizer: builds the emulator with a sanitizer (slow)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.kernels)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return HERE / "fixtures"
