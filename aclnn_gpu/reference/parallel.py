"""The one thread pool of the `cpu` device's NumPy implementations.

NumPy releases the GIL inside its loops, so independent pieces of one operator (row blocks, batch
slices) run on every core from plain Python threads. Each piece writes its own disjoint part of the
output and computes it exactly as it would alone, so results never depend on the split or on the
order the pieces finish in. The pool is created on first use and shared by every operator and
stream. Pieces run inline instead where the pool cannot serve them: a piece that itself asks for
pieces (it would wait on its own queue), a forked child (the pool's threads stay in the parent), an
interpreter that is shutting down.
"""
from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import Future
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

__all__ = ["workers", "run_pieces", "ranges", "kept"]

P = TypeVar("P")
_MAX_WORKERS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()   # two streams may make the first call at once
_in_piece = threading.local()
_kept = threading.local()
# Scratch buffers up to this size are kept by their thread between calls (larger ones are rare and
# their work dwarfs the page faults of a fresh buffer).
_KEEP_BYTES = 4 << 20


def workers() -> int:
    """Threads worth using: the cores this process may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, _MAX_WORKERS))


def ranges(n: int, pieces: int, multiple: int = 1) -> list[tuple[int, int]]:
    """[0, n) cut into at most `pieces` consecutive ranges whose lengths are multiples of
    `multiple` (the last one excepted)."""
    step = -(-n // max(pieces, 1))
    step = max(multiple, -(-step // multiple) * multiple)
    return [(start, min(n, start + step)) for start in range(0, n, step)]


def kept(name: str, shape: tuple, dtype) -> np.ndarray:
    """A scratch array of `shape`, kept by the calling thread for its next call under the same name:
    fresh buffers of a few hundred KiB come from mmap (the pool's threads allocate from their own
    arenas) and page-fault on every call. Contents are undefined; arrays over _KEEP_BYTES are fresh."""
    dtype = np.dtype(dtype)
    count = 1
    for n in shape:
        count *= int(n)
    if count * dtype.itemsize > _KEEP_BYTES:
        return np.empty(shape, dtype)
    buffers = getattr(_kept, "buffers", None)
    if buffers is None:
        buffers = _kept.buffers = {}
    buf = buffers.get((name, dtype))
    if buf is None or buf.size < count:
        buf = buffers[(name, dtype)] = np.empty(count, dtype)
    return buf[:count].reshape(shape)


def run_pieces(work: Callable[[P], object], pieces: Iterable[P], *, here_last: bool = False) -> None:
    """work(piece) for every piece, on the pool when there are several pieces and cores, inline
    otherwise; the first exception of a piece is raised after all pieces have finished.
    `here_last`: the last piece runs in the calling thread, which would otherwise only wait (one
    thread hand-off fewer: about 10-15 us a call on this 2-core machine)."""
    pieces = list(pieces)
    pool = _shared_pool() if len(pieces) >= 2 and workers() >= 2 else None
    errors_state = np.geterr()   # the caller's floating-point error handling, in every piece
    futures: list[Future] = []
    errors: list[BaseException] = []
    for i, piece in enumerate(pieces):
        if pool is not None and not (here_last and i == len(pieces) - 1):
            try:
                futures.append(pool.submit(_in_state, errors_state, work, piece))
                continue
            except RuntimeError:   # the interpreter is shutting down: this piece and the rest run here
                pool = None
        try:
            work(piece)
        except Exception as error:   # noqa: BLE001 - raised below, once the submitted pieces are done
            errors.append(error)
    errors[:0] = [error for error in (f.exception() for f in futures) if error is not None]
    if errors:
        raise errors[0]


def _shared_pool() -> ThreadPoolExecutor | None:
    global _pool
    if getattr(_in_piece, "active", False) or sys.is_finalizing():
        return None
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(workers(), thread_name_prefix="aclnn_gpu-cpu")
        return _pool


def _forget_pool() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()   # the parent's threads (and lock state) are not ours


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _in_state(errors_state: Any, work: Callable[[P], object], piece: P) -> object:
    _in_piece.active = True
    try:
        with np.errstate(**errors_state):
            return work(piece)
    finally:
        _in_piece.active = False
