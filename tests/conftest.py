"""Shared fixtures: a device session per test (cpu and emulated), a random generator seeded from the
run's seed and the test's id (tests/seeding.py: the seed is printed before the first test, a failed
test's report carries the command that replays it)."""
from __future__ import annotations

import os

import pytest

# The run's seed and the replay command (tests/seeding.py): its hooks, re-exported as this conftest's
# (`pytest_plugins = ["seeding"]` would warn: support imports seeding before pytest could rewrite it).
from seeding import (pytest_configure, pytest_runtest_logstart, pytest_runtest_makereport,  # noqa: F401
                     pytest_sessionstart)
from support import DEVICE_KINDS, Session, rng_with_seed


@pytest.fixture(params=DEVICE_KINDS)
def session(request):
    s = Session(request.param)
    yield s
    s.close()


@pytest.fixture
def cpu_session():
    s = Session("cpu")
    yield s
    s.close()


@pytest.fixture
def rng(request):
    return rng_with_seed(request)


def pytest_report_header(config):
    return f"aclnn_gpu devices under test: cpu, emulated (ACLNN_GPU_DEVICE={os.environ.get('ACLNN_GPU_DEVICE', 'auto')})"
