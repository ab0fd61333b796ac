"""The run's seed (tests/seeding.py): random test data derives from ACLNN_GPU_TEST_SEED and the test's
id only, the seed is on the log before a test can kill the process, and one command replays a test.
The end-to-end checks run pytest in a child process on a generated test file (with `-p seeding`)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import seeding

TESTS = Path(__file__).resolve().parent

_CHILD = '''
import os
from hypothesis import given, settings, strategies as st
from seeding import draw_seed

def log(line):
    with open(os.environ["CHILD_LOG"], "a") as f:
        f.write(line + "\\n")

def test_draws():
    log(f"draws {draw_seed()} {draw_seed()}")
    if os.environ.get("CHILD_ABORT"):
        os.abort()

def test_fails():
    assert not os.environ.get("CHILD_FAIL")

@settings(max_examples=8)
@given(st.integers())
def test_hypothesis(x):
    log(f"hypothesis {x}")
'''


def _child(tmp_path: Path, *args: str, seed: str | None = None, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    (tmp_path / "test_child.py").write_text(_CHILD)
    log = tmp_path / "child.log"
    log.unlink(missing_ok=True)
    e = {k: v for k, v in os.environ.items() if k not in (seeding.SEED_ENV, seeding.TRACE_ENV, seeding.RUNNER_ENV, "PYTEST_CURRENT_TEST")}
    e.update(env, CHILD_LOG=str(log), PYTHONPATH=os.pathsep.join([str(TESTS), e.get("PYTHONPATH", "")]))
    if seed is not None:
        e[seeding.SEED_ENV] = seed
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "seeding", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), *args], cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=300)
    return r, (log.read_text().splitlines() if log.exists() else [])


def test_draw_seed_depends_on_run_seed_test_id_and_draw_count(monkeypatch):
    monkeypatch.setenv(seeding.SEED_ENV, "12345")
    seeding._draws.clear()
    a = [seeding.draw_seed("t.py::a"), seeding.draw_seed("t.py::a")]
    b = seeding.draw_seed("t.py::b")
    seeding._draws.clear()   # what pytest_runtest_logstart does when a test starts
    assert [seeding.draw_seed("t.py::a"), seeding.draw_seed("t.py::a")] == a
    monkeypatch.setenv(seeding.SEED_ENV, "12346")
    seeding._draws.clear()
    assert seeding.draw_seed("t.py::a") != a[0]
    assert len({*a, b}) == 3 and all(0 <= s < 2 ** 32 for s in (*a, b))
    seeding._draws.clear()


def test_aborted_run_keeps_seed_and_test_then_replays(tmp_path):
    trace = tmp_path / "started"
    r, first = _child(tmp_path, "test_child.py", CHILD_ABORT="1", ACLNN_GPU_TEST_TRACE=str(trace))
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stdout, r.stderr)
    # The seed was drawn by the child and flushed to its log before the test that aborted it.
    m = re.match(r"aclnn_gpu test seed (\d+): replay a test with ACLNN_GPU_TEST_SEED=\1 python -m pytest "
                 r"'<test id>'\n", r.stdout)
    assert m, r.stdout
    assert trace.read_text().splitlines()[-1] == "test_child.py::test_draws"   # the test that was running
    assert len(first) == 1 and first[0].startswith("draws ")
    replay, again = _child(tmp_path, "test_child.py::test_draws", seed=m.group(1))
    assert replay.returncode == 0, replay.stdout
    assert again == first
    other, different = _child(tmp_path, "test_child.py::test_draws", seed=str((int(m.group(1)) + 1) % 2 ** 32))
    assert different != first


def test_failed_test_reports_its_replay_command_and_hypothesis_follows_the_seed(tmp_path):
    r, lines = _child(tmp_path, "test_child.py", seed="777", CHILD_FAIL="1")
    assert r.returncode == 1, r.stdout
    assert "ACLNN_GPU_TEST_SEED=777 python -m pytest test_child.py::test_fails" in r.stdout
    first = [line for line in lines if line.startswith("hypothesis ")]
    _, lines = _child(tmp_path, "test_child.py::test_hypothesis", seed="777")
    assert [line for line in lines if line.startswith("hypothesis ")] == first and len(first) == 8
    _, lines = _child(tmp_path, "test_child.py::test_hypothesis", seed="778")
    assert [line for line in lines if line.startswith("hypothesis ")] != first
