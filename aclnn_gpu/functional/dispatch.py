"""The functional entry points: `entry_point` makes the public function of an operator's body
(aclnn_gpu/ops/<family>/functional.py), and `dispatch` runs one call of it: on the cpu device through
the call cache (functional/cache.py) when its signature allows, else uncached through the two phases
(functional/call.py); on the cuda device on the GPU its arrays live on.

Part of layer 14, "functional" (docs/DESIGN.md, "Import layers").
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import cache as call_cache
from .arrays import arrays_gpu
from .call import Call
from .replay import Replay, Retry
from .signature import signature
from ..base.errors import AclnnError, OpError
from ..base.status import aclError
from ..device.capture_mode import thread_local_capture_mode
from ..runtime import aclrtStream, device_of, get_device, using_device


def entry_point(body: Callable[..., Any], values: Sequence[str] = ()) -> Callable[..., Any]:
    """A functional entry point from its body `body(call, *args)`, which describes its arrays through
    `call` (a `Call`, or a `Replay` of a cached signature) and returns the results. The public
    function takes the body's parameters and a keyword-only `stream`, and is a function of this
    package (`__module__`), with the body's name and docstring. `values`: the parameters whose
    values (integer lists) shape the plan, as the lengths of CTC do (call_cache keys them by value).

    Every failure of a functional call surfaces as AclnnError naming the function: a user error
    found inside the library (a device that cannot run here) keeps its status; anything else
    escaping is a library bug, reported as an internal error rather than a bare exception. A call
    that does not fit the signature is Python's TypeError, as for any function."""
    name, values = body.__name__, tuple(values)
    body_signature = inspect.signature(body)
    params = list(body_signature.parameters.values())[1:]
    stream = inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY, default=None,
                               annotation="aclrtStream | None")
    public = body_signature.replace(parameters=[*params, stream])
    by_value = frozenset(i for i, p in enumerate(params) if p.name in values)

    def fits(args: tuple, kwargs: dict) -> None:
        try:
            public.bind(*args, **kwargs)
        except TypeError as e:   # raised here, not from inside the library's handling
            raise TypeError(str(e)) from None

    @functools.wraps(body)   # its name, docstring and __wrapped__ (aclnn_gpu.torch runs the body itself)
    def function(*args: Any, **kwargs: Any) -> Any:
        try:
            return dispatch(body, name, args, kwargs, by_value, values)
        except AclnnError:
            fits(args, kwargs)
            raise
        except OpError as e:
            fits(args, kwargs)
            raise AclnnError(e.status, f"{name}: {e.message}") from None
        except Exception as e:
            fits(args, kwargs)
            raise AclnnError(aclError.ACL_ERROR_INTERNAL_ERROR,
                             f"{name}: internal error: {type(e).__name__}: {e}") from e
    function.__signature__ = public  # type: ignore[attr-defined]
    function.__module__ = __package__   # a function of aclnn_gpu.functional (Sphinx documents it there)
    return function


def dispatch(body: Callable[..., Any], name: str, args: tuple, kwargs: dict, by_value: frozenset,
             values: tuple[str, ...]) -> Any:
    """Run one functional call: cached on the cpu device when its signature allows (call_cache), else
    uncached; on cuda on the GPU the arrays live on (CuPy's current GPU follows: host arrays are
    copied to that GPU)."""
    stream = kwargs.pop("stream", None)
    device = get_device()
    if device.kind == "cuda":
        gpu = arrays_gpu(name, (*args, *kwargs.values()))
        target: Any = device if gpu is None else device_of(gpu)   # a CudaDevice
        # CuPy's allocations, copies and waits in the call are potentially unsafe calls: made in
        # thread-local capture mode, a global-mode capture on another thread stays valid (device/capture_mode.py)
        with using_device(target), no_legacy_stream_in_capture(target, name), thread_local_capture_mode(target.cp):
            return uncached(body, name, stream, args, kwargs, None)
    impl = inline_stream(device, stream) if device.kind == "cpu" and call_cache.cache.enabled else None
    prepared: dict[int, np.ndarray] = {}
    key = signature(body, args, kwargs, by_value, values, prepared) if impl is not None else None
    if key is None:
        return uncached(body, name, stream, args, kwargs, None, prepared)
    entry = call_cache.cache.take(device, key)
    if entry is not None and entry.plan is None:   # a signature the cache cannot run
        call_cache.cache.give(device, key, entry)
        return uncached(body, name, stream, args, kwargs, None, prepared)
    if entry is not None:
        try:
            result = body(Replay(name, device, impl, entry, prepared), *args, **kwargs)
        except Retry as retry:
            if retry.uncacheable:
                call_cache.cache.give(device, key, call_cache.Entry.uncacheable())
                return uncached(body, name, stream, args, kwargs, None, prepared)
            return uncached(body, name, stream, args, kwargs, (device, key), prepared)   # records it again
        except BaseException:
            call_cache.cache.give(device, key, entry)
            raise
        else:
            call_cache.cache.give(device, key, entry)
            return result
    return uncached(body, name, stream, args, kwargs, (device, key), prepared)


@contextlib.contextmanager
def no_legacy_stream_in_capture(device: Any, name: str) -> Iterator[None]:
    """A call on the cuda device, refused (ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT) when an ACL capture is
    in progress on `device` and CuPy's current stream is the legacy stream: the call's copies,
    conversions, DLPack hand-overs and `.get()` run there, and legacy-stream work while a blocking stream
    captures (the library's streams are blocking) invalidates that capture
    (cudaErrorStreamCaptureImplicit). Inside `with cupy.cuda.Stream():` or with
    CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 the call runs. A call on the legacy stream holds the device's
    capture gate (device/cuda.py, CaptureGate) throughout, so no capture begins between this check and its last
    legacy-stream use (only then: a call on another stream neither needs nor holds it).
    """
    if not device.current_stream_is_legacy():
        yield
        return
    with device.gate.shared():
        if device.capturing:
            raise AclnnError(aclError.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
                             f"{name}: an ACL capture (aclmdlRICaptureBegin) is in progress on device {device.id}, "
                             "and this call would use the legacy default stream (CuPy's current stream), which "
                             "invalidates it; call it inside `with cupy.cuda.Stream(non_blocking=True):`, with "
                             "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1, or after aclmdlRICaptureEnd")
        yield


def uncached(body: Callable[..., Any], name: str, stream: aclrtStream | None, args: tuple, kwargs: dict,
             cache_as: tuple[Any, tuple] | None, prepared: dict[int, np.ndarray] | None = None) -> Any:
    """The call through the two-phase API: descriptors, lending, GetWorkspaceSize, execute on the
    stream, synchronize. With `cache_as` (device, signature) it leaves its phase 1 in the cache.
    `prepared`: the host arrays the signature already made of the arguments (by id), not made again."""
    call = Call(name, stream, record=cache_as is not None, prepared=prepared)
    try:
        result = body(call, *args, **kwargs)
    finally:
        call.close()
    if cache_as is not None:
        call_cache.cache.give(*cache_as, call.entry())
    return result


def inline_stream(device: Any, stream: Any) -> Any:
    """The device stream a cached call may synchronize and then run on the calling thread: the
    default stream, or a live stream of `device`; None (the uncached path, which reports what is
    wrong) for anything else and for a stream that captures."""
    if stream is None:
        impl = device.default_stream
    elif type(stream) is aclrtStream and not stream.destroyed and stream.device is device:
        impl = stream.impl
    else:
        return None
    worker = getattr(impl, "worker", None)
    if worker is None or getattr(worker, "capture", None) is not None:
        return None
    return impl


__all__ = ["entry_point", "dispatch", "no_legacy_stream_in_capture", "uncached", "inline_stream"]
