"""fakecupy's stand-ins for cuda-bindings (`cuda.bindings.runtime` and `.driver`), which CuPy's runtime
does not bind: `cuda_bindings_runtime` (cudaEventRecordWithFlags, cudaThreadExchangeStreamCaptureMode,
cudaStreamGetCaptureInfo and CUDA's user objects) and `cuda_bindings_driver` (cuStreamWaitValue32),
with cuda-bindings' signatures: handles as ints, a tuple whose first item is the error code back.
"""
from __future__ import annotations

import ctypes
import enum
import threading
import time
import weakref
from types import SimpleNamespace
from typing import Any

from ...host.stream import CapturedWork
from .errors import CUDARuntimeError, cudaError_t
from .runtime import _Runtime
from .streams import _events, _stream

class _UserObject:
    """A CUDA user object (cudaUserObjectCreate): a destructor (a C function's address) and its
    argument, called once when the last reference goes."""

    __slots__ = ("handle", "ptr", "destroy", "refs", "lock")

    def __init__(self, handle: int, ptr: int, destroy: int, refs: int):
        self.handle, self.ptr, self.destroy, self.refs, self.lock = handle, ptr, destroy, refs, threading.Lock()

    def release(self, count: int) -> None:
        with self.lock:
            self.refs -= count
            last = self.refs == 0
        if last:   # CUDA calls it on an internal thread, later; here at once (the caller polls either way)
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.destroy)(self.ptr)


_user_objects: dict[int, _UserObject] = {}          # handle -> user object with references left
_graph_handles: "weakref.WeakValueDictionary[int, CapturedWork]" = weakref.WeakValueDictionary()
_graph_ids: "weakref.WeakKeyDictionary[CapturedWork, int]" = weakref.WeakKeyDictionary()
_graph_users: dict[int, list[tuple[_UserObject, int]]] = {}   # graph handle -> (user object, references)
_handle_ids = iter(range(1, 1 << 62))
_user_lock = threading.Lock()


def _graph_handle(work: CapturedWork) -> int:
    """The cudaGraph_t (and capture id) of a stream's captured work: one per capture, unique in the
    process. The graph is the work: it lives while the capture, a `Graph` (CUDA's graph and its
    instance in one) or a replay in flight holds it, and its user-object references go with it."""
    with _user_lock:
        handle = _graph_ids.get(work)
        if handle is None:
            handle = _graph_ids[work] = next(_handle_ids)
            _graph_handles[handle] = work
            _graph_users[handle] = []
            weakref.finalize(work, _graph_destroyed, handle)
        return handle


def _graph_destroyed(handle: int) -> None:
    with _user_lock:
        held = _graph_users.pop(handle, [])
    for user, count in held:
        _release_user(user, count)


def _release_user(user: _UserObject, count: int) -> None:
    user.release(count)
    if user.refs <= 0:
        with _user_lock:
            _user_objects.pop(user.handle, None)


class _CaptureStatus(enum.IntEnum):
    """cuda-bindings' cudaStreamCaptureStatus."""

    cudaStreamCaptureStatusNone = 0
    cudaStreamCaptureStatusActive = 1
    cudaStreamCaptureStatusInvalidated = 2


class _UserObjectFlags(enum.IntEnum):
    cudaUserObjectNoDestructorSync = 1


class _UserObjectRetainFlags(enum.IntEnum):
    cudaGraphUserObjectMove = 1


class _CudaBindingsRuntime:
    """The part of cuda-bindings' `cuda.bindings.runtime` the cuda device calls, with its signature:
    handles as ints, every call returning a tuple whose first item is a cudaError_t. User objects as
    CUDA has them (CUDA Programming Guide, "CUDA User Objects"): cudaStreamGetCaptureInfo gives the
    graph a capture records into, cudaGraphRetainUserObject gives it references, and the destructor
    runs once the graph and every instance of it (here one object, `CapturedWork`) are gone."""

    cudaError_t = cudaError_t
    cudaEventRecordDefault, cudaEventRecordExternal = 0, 1
    cudaStreamCaptureStatus = _CaptureStatus
    cudaUserObjectFlags = _UserObjectFlags
    cudaUserObjectRetainFlags = _UserObjectRetainFlags
    cudaHostFn_t = int   # cuda-bindings wraps a C function's address in cudaHostFn_t(address)

    @staticmethod
    def cudaStreamGetCaptureInfo(stream: int) -> tuple[Any, ...]:
        """(err, status, capture id, graph, dependencies, edge data, number of dependencies)."""
        try:
            work = _stream(int(stream)).worker.capture
        except CUDARuntimeError as e:
            return (cudaError_t(e.status), _CaptureStatus(0), 0, None, None, None, 0)
        if work is None:
            return (cudaError_t.cudaSuccess, _CaptureStatus(0), 0, None, None, None, 0)
        handle = _graph_handle(work)
        status = _CaptureStatus(2 if work.invalidated is not None else 1)
        return (cudaError_t.cudaSuccess, status, handle, handle, None, None, 0)

    @staticmethod
    def cudaUserObjectCreate(ptr: int, destroy: int, initialRefcount: int, flags: int) -> tuple[Any, Any]:
        if flags != 1 or initialRefcount < 1 or not int(destroy):   # NoDestructorSync is required
            return (cudaError_t.cudaErrorInvalidValue, None)
        handle = next(_handle_ids)
        with _user_lock:
            _user_objects[handle] = _UserObject(handle, int(ptr), int(destroy), int(initialRefcount))
        return (cudaError_t.cudaSuccess, handle)

    @staticmethod
    def cudaGraphRetainUserObject(graph: int, obj: int, count: int, flags: int) -> tuple[Any]:
        """Move (flags 1) or add `count` references of the user object to the graph."""
        with _user_lock:
            user, held = _user_objects.get(int(obj or 0)), _graph_users.get(int(graph or 0))
            if user is None or held is None or count < 1:
                return (cudaError_t.cudaErrorInvalidValue,)
            with user.lock:
                if not flags & 1:
                    user.refs += count
            held.append((user, count))
        return (cudaError_t.cudaSuccess,)

    @staticmethod
    def cudaUserObjectRelease(obj: int, count: int) -> tuple[Any]:
        user = _user_objects.get(int(obj or 0))
        if user is None or count < 1:
            return (cudaError_t.cudaErrorInvalidValue,)
        _release_user(user, count)
        return (cudaError_t.cudaSuccess,)

    cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed = 0, 1, 2
    # cuda-bindings' enum (cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal), as the device reads it
    cudaStreamCaptureMode = SimpleNamespace(cudaStreamCaptureModeGlobal=0, cudaStreamCaptureModeThreadLocal=1,
                                            cudaStreamCaptureModeRelaxed=2)

    @staticmethod
    def cudaThreadExchangeStreamCaptureMode(mode: int) -> tuple[Any, int]:
        """(cudaSuccess, the calling thread's previous capture interaction mode); CuPy's runtime has no
        binding of it (see `_Runtime.threadExchangeStreamCaptureMode`, which this is)."""
        return cudaError_t.cudaSuccess, _Runtime.threadExchangeStreamCaptureMode(int(mode))

    @staticmethod
    def cudaEventRecordWithFlags(event: int, stream: int, flags: int) -> tuple[Any]:
        """EXTERNAL in a capture records the event at every replay (each replay points it at its own mark)."""
        target, handle = _stream(int(stream)), _events.get(int(event))
        if handle is None:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        try:
            worker = handle._recordable_on(target)
        except CUDARuntimeError as e:
            return (cudaError_t(e.status),)
        external = bool(flags & 1) and worker.capture is not None
        handle.captured = worker.capture is not None and not external
        handle.mark = worker.record(handle if external else None)
        return (cudaError_t.cudaSuccess,)


cuda_bindings_runtime = _CudaBindingsRuntime()


class _CudaBindingsDriver:
    """The part of cuda-bindings' `cuda.bindings.driver` the cuda device calls, with its signature:
    cuStreamWaitValue32 (a stream memory operation), a `(CUresult,)` tuple back."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0, CUDA_ERROR_NOT_SUPPORTED=801)
    CUstreamWaitValue_flags = SimpleNamespace(CU_STREAM_WAIT_VALUE_GEQ=0)
    CUstream = CUdeviceptr = int

    @staticmethod
    def cuStreamWaitValue32(stream: int, addr: int, value: int, flags: int) -> tuple[int]:
        """The stream's later work waits until the 32-bit word at `addr` (host memory here, as pinned
        memory is on a GPU with unified addressing) is cyclically >= `value` (flags: GEQ only)."""
        if int(flags) != 0:
            return (_CudaBindingsDriver.CUresult.CUDA_ERROR_NOT_SUPPORTED,)
        cell, target = ctypes.c_uint32.from_address(int(addr)), int(value) & 0xFFFFFFFF

        def wait() -> None:
            while (cell.value - target) & 0xFFFFFFFF >= 0x80000000:   # (int32_t)(*addr - value) < 0
                time.sleep(0.0005)
        _stream(int(stream)).submit(wait)
        return (_CudaBindingsDriver.CUresult.CUDA_SUCCESS,)


cuda_bindings_driver = _CudaBindingsDriver()
