"""One seed per test run, and a replay command that survives a crash (a pytest plugin: tests/conftest.py
re-exports its hooks; a run of test files outside tests/ loads it with `-p seeding`, tests/ on PYTHONPATH).

The run's seed is ACLNN_GPU_TEST_SEED, else drawn once and put into the environment, so that child
processes of the run (the sanitizer run's pytest, test subprocesses) use the same one. Every random
input derives from that seed and the test's id (`draw_seed`), never from the order tests ran in, and
every Hypothesis test without a @seed of its own runs with the run's seed (`--hypothesis-seed`) and no
example database. So one command replays one test's data exactly:

    ACLNN_GPU_TEST_SEED=<seed> python -m pytest '<test id>'

Why the seed is printed before the first test and not with the results: a test that aborts the process
(a sanitizer report, a crash in a kernel library) takes pytest's end-of-run output with it. The seed
line is flushed to the terminal at session start, a failed test's report carries its replay command,
and with ACLNN_GPU_TEST_TRACE=<file> the id of every test is appended to that file (one write() each,
so the kernel has it before the test runs) and the last line names the test that was running when the
process died (`python -m aclnn_gpu.emulator.sanitize` sets it and prints the replay command).
"""
from __future__ import annotations

import hashlib
import os
import shlex

import pytest

SEED_ENV = "ACLNN_GPU_TEST_SEED"
TRACE_ENV = "ACLNN_GPU_TEST_TRACE"
RUNNER_ENV = "ACLNN_GPU_TEST_RUNNER"

_draws: dict[str, int] = {}   # seeds drawn so far by the running test (reset when a test starts)
_trace_fd: int | None = None


def run_seed() -> int:
    """The run's seed (ACLNN_GPU_TEST_SEED, else drawn now and exported to child processes)."""
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        value = str(int.from_bytes(os.urandom(4), "little"))
        os.environ[SEED_ENV] = value
    # int() raises on a mistyped value: a replay must never quietly run with some other seed.
    return int(value)


def current_test() -> str:
    """The id of the running test (pytest's PYTEST_CURRENT_TEST without its ' (call)' phase)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def draw_seed(test_id: str | None = None) -> int:
    """A 32-bit seed for the running test: the run's seed hashed with the test's id and the number of
    seeds this test drew before, so a test that draws several gets distinct ones, the same on replay."""
    test_id = current_test() if test_id is None else test_id
    n = _draws.get(test_id, 0)
    _draws[test_id] = n + 1
    digest = hashlib.sha256(f"{run_seed()}\0{test_id}\0{n}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def replay_command(test_id: str) -> str:
    """The shell command that replays one test: ACLNN_GPU_TEST_RUNNER is the command the run was made
    with when that matters (the sanitizer run sets it: its failures need the sanitizer build)."""
    runner = os.environ.get(RUNNER_ENV) or "python -m pytest"
    return f"{SEED_ENV}={run_seed()} {runner} {shlex.quote(test_id)}"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    seed = run_seed()
    # Before Hypothesis' own pytest_configure (tryfirst), which turns --hypothesis-seed into its global
    # seed; an explicit --hypothesis-seed or --hypothesis-profile on the command line still wins.
    if hasattr(config.option, "hypothesis_seed") and config.option.hypothesis_seed is None:
        config.option.hypothesis_seed = str(seed)
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    # No example database: a run must depend on its seed only, not on what an earlier run left in
    # .hypothesis/ (a replay elsewhere, in CI, has no such directory). derandomize=False: with CI set in
    # the environment Hypothesis loads its "ci" profile (derandomize=True), which would ignore the seed;
    # no deadline and no too-slow check, so a loaded machine cannot change what runs (the ci profile's).
    settings.register_profile("aclnn_gpu", database=None, derandomize=False, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("aclnn_gpu")


def pytest_sessionstart(session):
    # Written with -q too (pytest's header is not), as the run's first line. Flushed: stdout into a pipe
    # is block-buffered, and a process that aborts loses what is still in the buffer.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"aclnn_gpu test seed {run_seed()}: replay a test with {replay_command('<test id>')}")
        reporter.flush()


def pytest_runtest_logstart(nodeid, location):
    global _trace_fd
    _draws.clear()
    path = os.environ.get(TRACE_ENV)
    if path:
        if _trace_fd is None:
            _trace_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_trace_fd, (nodeid + "\n").encode())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("replay", replay_command(item.nodeid)))

