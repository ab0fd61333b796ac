"""Shared fixtures: a device session per test (cpu and emulated), a fresh random generator whose
seed is printed (and shown on failure)."""
from __future__ import annotations

import os

import pytest

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
