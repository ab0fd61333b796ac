"""The one thread pool of the `cpu` device's NumPy implementations.

NumPy releases the GIL inside its loops, so independent pieces of one operator (row blocks, batch
slices) run on every core from plain Python threads. Each piece writes its own disjoint part of the
output and computes it exactly as it would alone, so results never depend on the split or on the
order the pieces finish in. The pool is created on first use and shared by every operator and
stream; a piece must never submit work to the pool itself (that could wait on its own queue).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

import numpy as np

__all__ = ["workers", "run_pieces"]

P = TypeVar("P")
_MAX_WORKERS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()   # two streams may make the first call at once


def workers() -> int:
    """Threads worth using: the cores this process may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, _MAX_WORKERS))


def run_pieces(work: Callable[[P], object], pieces: Iterable[P]) -> None:
    """work(piece) for every piece, on the pool when there are several pieces and cores, inline
    otherwise; the first exception of a piece is raised after all pieces have finished."""
    pieces = list(pieces)
    if len(pieces) < 2 or workers() < 2:
        for piece in pieces:
            work(piece)
        return
    errors_state = np.geterr()   # the caller's floating-point error handling, in every piece
    futures = [_shared_pool().submit(_in_state, errors_state, work, piece) for piece in pieces]
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(workers(), thread_name_prefix="aclnn_gpu-cpu")
        return _pool


def _in_state(errors_state: dict, work: Callable[[P], object], piece: P) -> object:
    with np.errstate(**errors_state):
        return work(piece)
