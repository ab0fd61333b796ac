"""Error plumbing: the recent-error message, the internal `OpError`, the public `AclnnError`, and
`c_api`, the one decorator that turns a Python function into a C-style entry point.

Inside the library a user error is raised as `OpError(status, message)` at the point of
detection; `c_api` catches it at the API boundary, records the message for
`aclGetRecentErrMsg()` and returns the status (plus `None` for each out-parameter), so nothing in
the C-like layer ever raises for a user error. An unexpected exception is a library bug: it is
reported the same way with an internal-error code instead of escaping.
"""
from __future__ import annotations

import functools
import inspect
import threading
from typing import Any, Callable, NoReturn, TypeVar

from .status import aclError, aclnnStatus

_recent = threading.local()


def set_recent_error(message: str, status: int | None = None) -> None:
    """Record a failure's message (and, when given, its code: aclrtGetLastError's) for this thread."""
    _recent.message = message
    if status is not None:
        _recent.status = int(status)


def recent_status(clear: bool) -> int:
    """The code of this thread's last failure (0 when none, or since it was cleared); `clear` resets it."""
    status = getattr(_recent, "status", 0)
    if clear:
        _recent.status = 0
    return status


def aclGetRecentErrMsg() -> str:
    """The last error message recorded on this thread (empty string when there is none)."""
    return getattr(_recent, "message", "")


class OpError(Exception):
    """A user error detected inside the library: a status code and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def __reduce__(self) -> tuple:
        # pickled with both arguments: an exception's default pickling replays only `args` (the message),
        # and a multiprocessing pool whose worker raised one would lose its result thread unpickling it
        return type(self), (self.status, self.message)


class CallerNamed(OpError):
    """An error raised below the entry point, where its name is not known: `c_api` puts the entry
    point's name in front of the message."""


class NoDevice(CallerNamed):
    """The device kind asked for cannot run here. Raised wherever the device is first needed; the
    entry point that needed it puts its own name in front of the message."""


class DeviceUnavailable(Exception):
    """The device kind asked for cannot run on this machine (raised by the device factories; the
    runtime turns it into `NoDevice`)."""


class AclnnError(RuntimeError):
    """Raised by `aclnn_gpu.functional` instead of returning a status code."""

    def __init__(self, status: int, message: str):
        super().__init__(f"[{int(status)}] {message}")
        self.status = status
        self.message = message

    def __reduce__(self) -> tuple:
        # see OpError.__reduce__: a pool worker's AclnnError reaches the parent intact (the GPU check found
        # a multiprocessing.Pool hanging on one raised in a forked child of a CUDA process)
        return type(self), (self.status, self.message)


def fail(status: int, message: str) -> NoReturn:
    raise OpError(status, message)


def live_handle(obj: Any, kind: type | tuple[type, ...], fn: str, what: str, status: int,
                null_status: int | None = None, destroyer: str = "") -> Any:
    """`obj` when it is a live handle of `kind` (an object with a false `destroyed`), else OpError:
    nullptr (None) gets `null_status` (default `status`), any other kind of object or a forged
    handle (the C ABI's UnknownHandle) and a destroyed handle get `status`, each with a message that
    names `fn`, the parameter `what` and what is wrong. The one check every destroy and every use of
    a handle makes; a destroy that accepts nullptr as a no-op tests for None before calling it."""
    if obj is None:
        fail(status if null_status is None else null_status, f"{fn}: {what} is nullptr")
    if not isinstance(obj, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        fail(status, f"{fn}: {what} is not an {names}: it is {type(obj).__name__}")
    if getattr(obj, "destroyed", False):
        fail(status, f"{fn}: {what} was already destroyed{f' ({destroyer})' if destroyer else ''}")
    return obj


F = TypeVar("F", bound=Callable[..., Any])


def c_api(n_out: int = 0, internal: int = aclError.ACL_ERROR_INTERNAL_ERROR,
          null_result: bool = False) -> Callable[[F], F]:
    """Make `fn` a C-style entry point.

    `n_out`: how many out-parameters follow the status in the returned tuple (0: just the status).
    `null_result`: the function returns an object or None (C's NULL), never a status.
    On `OpError` the message is recorded and (status, None, ...) is returned.
    """

    def wrap(fn: F) -> F:
        name = fn.__name__
        # a wrong arity or keyword is a parameter error of the function's own status family
        # (aclnn* and the aclnn_base helpers: ACLNN_ERR_PARAM_INVALID; the ACL runtime: ACL_ERROR_INVALID_PARAM)
        bad_call = (aclnnStatus.ACLNN_ERR_PARAM_INVALID if isinstance(internal, aclnnStatus)
                    else aclError.ACL_ERROR_INVALID_PARAM)

        def on_error(status: int, message: str) -> Any:
            set_recent_error(message, status)
            if null_result:
                return None
            return status if n_out == 0 else (status, *([None] * n_out))

        @functools.wraps(fn)
        def entry(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except CallerNamed as e:
                return on_error(e.status, f"{name}: {e.message}")
            except OpError as e:
                return on_error(e.status, e.message)
            except TypeError as e:  # the caller's wrong arity or keyword, or else a library bug
                message = wrong_call(fn, name, args, kwargs)
                if message is not None:
                    return on_error(bad_call, message)
                return on_error(internal, f"{name}: internal error: {type(e).__name__}: {e}")
            except Exception as e:  # a library bug: report it, never let it escape the C layer
                return on_error(internal, f"{name}: internal error: {type(e).__name__}: {e}")

        entry.bad_call_status = bad_call  # type: ignore[attr-defined]
        return entry  # type: ignore[return-value]

    return wrap


def wrong_call(fn: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> str | None:
    """The message for a call whose arguments do not fit `fn`'s C parameters, or None when they do
    (then a TypeError came from inside: a library bug). Only runs after a TypeError, so the success
    path pays nothing for it."""
    signature = inspect.signature(fn)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        expected = ", ".join(p.name for p in signature.parameters.values())
        return f"{name}: wrong arguments ({e}); expected {name}({expected})"
    return None


def check_status(status: int) -> None:
    """Raise AclnnError for a non-zero status (the `functional` layer's one conversion)."""
    if status != 0:
        raise AclnnError(status, aclGetRecentErrMsg())


INNER = aclnnStatus.ACLNN_ERR_INNER
