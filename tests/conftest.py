"""Shared fixtures: a device session per test (cpu and emulated), a random generator seeded from the
run's seed and the test's id (tests/seeding.py: the seed is printed before the first test, a failed
test's report carries the command that replays it)."""
from __future__ import annotations

import os
import random

import pytest

# The run's seed and the replay command (tests/seeding.py): its hooks, re-exported as this conftest's
# (`pytest_plugins = ["seeding"]` would warn: support imports seeding before pytest could rewrite it).
from seeding import pytest_configure, pytest_runtest_logstart, pytest_runtest_makereport  # noqa: F401
from seeding import pytest_sessionstart as seeding_sessionstart
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


def pytest_sessionstart(session):
    """The test seed's line (seeding.py), and with the late stand-in on (ACLNN_GPU_EMU_LATE=1) its seed:
    drawn here when none was given and put in the environment, so every process of the run (the tests'
    subprocesses included) uses it and prints nothing of its own."""
    seeding_sessionstart(session)
    if os.environ.get("ACLNN_GPU_EMU_LATE", "") in ("", "0"):
        return
    if not os.environ.get("ACLNN_GPU_EMU_LATE_SEED"):
        os.environ["ACLNN_GPU_EMU_LATE_SEED"] = str(random.SystemRandom().randrange(1 << 31))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"emulated device: late stand-in on, ACLNN_GPU_EMU_LATE_SEED="
                            f"{os.environ['ACLNN_GPU_EMU_LATE_SEED']} (the same seed replays the same delays; "
                            "thread timing still varies)")
        reporter.flush()
