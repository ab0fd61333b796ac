"""aclnn_gpu.reference.parallel: run_pieces (pool, inline last piece, errors) and kept scratch."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from aclnn_gpu.reference import parallel


@pytest.mark.parametrize("here_last", [False, True])
def test_run_pieces_runs_every_piece_once(here_last):
    seen: dict[int, str] = {}
    lock = threading.Lock()

    def work(i):
        with lock:
            assert i not in seen
            seen[i] = threading.current_thread().name

    parallel.run_pieces(work, range(5), here_last=here_last)
    assert sorted(seen) == list(range(5))
    caller = threading.current_thread().name
    if here_last and parallel.workers() >= 2:
        assert seen[4] == caller                      # the last piece ran here
        assert all(seen[i] != caller for i in range(4))
    elif parallel.workers() >= 2:
        assert caller not in seen.values()


@pytest.mark.parametrize("here_last", [False, True])
def test_run_pieces_raises_the_first_error_after_every_piece(here_last):
    done = []

    def work(i):
        done.append(i)
        if i in (1, 3):
            raise ValueError(f"piece {i}")

    with pytest.raises(ValueError, match="piece 1"):
        parallel.run_pieces(work, range(4), here_last=here_last)
    assert sorted(done) == [0, 1, 2, 3]


def test_run_pieces_keeps_the_callers_error_state_in_every_piece():
    states = []
    with np.errstate(over="raise", invalid="ignore"):
        parallel.run_pieces(lambda i: states.append(np.geterr()), range(3), here_last=True)
    assert all(s["over"] == "raise" and s["invalid"] == "ignore" for s in states)
