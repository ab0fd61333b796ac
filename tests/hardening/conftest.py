"""Hardening suite (docs/HARDENING.md): shared figures and helpers.

Every test here reports its figures through the `figures` fixture; they are printed in the terminal
summary (`-s` or not) under "aclnn_gpu hardening figures", so a CI log always shows them.
"""
from __future__ import annotations

import os
import sys

import pytest

_FIGURES: list[str] = []


def pytest_configure(config):
    config.addinivalue_line("markers", "kernels: runs CUDA kernels (on the emulated device in CI)")


@pytest.fixture
def figures():
    """figures(line): record one line for the terminal summary (and echo it to stdout)."""

    def add(line: str) -> None:
        _FIGURES.append(line)
        print(line)
        sys.stdout.flush()

    return add


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _FIGURES:
        terminalreporter.section("aclnn_gpu hardening figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="module", autouse=True)
def _restore_device():
    """The device is process-wide: give back the kind the process had before each file."""
    from aclnn_gpu.runtime import aclrtResetDevice
    before = os.environ.get("ACLNN_GPU_DEVICE")
    yield
    if before is None:
        os.environ.pop("ACLNN_GPU_DEVICE", None)
    else:
        os.environ["ACLNN_GPU_DEVICE"] = before
    aclrtResetDevice(0)


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
