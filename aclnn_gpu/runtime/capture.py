"""The state of the captures in progress, and the rules the runtime checks against it.

A `Capture` lives on the capturing stream (`DeviceStream.capture`, None otherwise: the one
attribute the hot paths read) from aclmdlRICaptureBegin to aclmdlRICaptureEnd. It knows its mode
and thread, the model handle it will become, the plans and allocations the recorded work uses
(the model keeps them: an allocation a live model uses cannot be freed), the pinned upload
buffers of the cuda device (`keep`), the caller's host buffers its copies use (`pinned`), and why
it was invalidated, if it was.

The rules (docs/DESIGN.md "Capturing a stream" has the table and the sources):
- `refuse_unsafe`: CANN's capture modes (acl_mdl.h, rtStreamBeginCapture's tests): a GLOBAL
  capture forbids the "unsafe" calls (synchronous aclrtMemcpy / aclrtMemset, aclrtMalloc*,
  aclrtFree*) to every thread, a THREAD_LOCAL capture to its own thread, RELAXED to none. Refused
  with ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT; like CANN (not CUDA) the capture stays valid.
- `refuse_stream_sync` / `refuse_device_sync` / the event checks: a call that would wait for a
  capturing stream, or for an event recorded in a capture still in progress, is refused, and the
  capture is invalidated as CUDA does (aclmdlRICaptureEnd then fails, with no model).
"""
from __future__ import annotations

import os
import threading
from typing import Any

from ..device.current import find_allocation
from ..base.errors import fail
from ..base.status import aclError, aclmdlRICaptureMode

GLOBAL = aclmdlRICaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
THREAD_LOCAL = aclmdlRICaptureMode.ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL

lock = threading.RLock()          # guards ACTIVE and every capture's begin / end / invalidate
ACTIVE: list["Capture"] = []      # captures in progress, process-wide (the mode rules are process-wide)


def _after_fork_in_child() -> None:
    """A fork() child captures nothing: the parent's captures (and a lock a parent thread may hold) stay
    behind, so the parent's GLOBAL capture does not forbid the child's allocations."""
    global lock
    lock = threading.RLock()
    ACTIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Capture:
    """One capture in progress on one stream (see the module docstring)."""

    __slots__ = ("handle", "device", "mode", "thread", "model", "invalidated", "plans", "allocations", "keep",
                 "pinned", "on_release")

    def __init__(self, handle: Any, device: Any, mode: aclmdlRICaptureMode, model: Any):
        self.handle = handle                  # the aclrtStream
        self.device = device
        self.mode = mode
        self.thread = threading.current_thread()
        self.model = model                    # the aclmdlRI it becomes
        self.invalidated: str | None = None
        self.plans: list[Any] = []            # operator plans the graph runs (kept alive by the model)
        self.allocations: set[Any] = set()    # registry Allocations the recorded work uses
        self.keep: list[Any] = []             # pinned upload buffers (cuda device)
        self.pinned: dict[Any, Any] = {}      # (address, nbytes) -> caller's host buffer a captured copy uses (cuda)
        self.on_release: list[Any] = []       # what the device undoes when the model goes (hostUnregister)

    # ------------------------------------------------------------------ what the recorded work uses
    def hold(self, ptr: int, nbytes: int) -> None:
        """The allocation holding [ptr, ptr + nbytes) stays allocated while the model lives."""
        alloc = find_allocation(int(ptr), max(int(nbytes), 1))
        if alloc is not None and alloc not in self.allocations:
            if alloc.models is None:
                alloc.models = set()
            alloc.models.add(self.model)
            self.allocations.add(alloc)

    def hold_plan(self, plan: Any, workspace: int) -> None:
        """An operator plan queued on the capturing stream: the model keeps it and its memory."""
        self.plans.append(plan)
        for tensor in plan.tensors.values():
            if tensor is not None and tensor.numel and tensor.data:
                lo, nbytes = tensor.byte_span()
                self.hold(tensor.data + lo, nbytes)
        if plan.workspace_size and workspace:
            self.hold(workspace, plan.workspace_size)

    def release(self) -> None:
        """The model is gone (destroyed, or its capture failed): its memory may be freed again."""
        for alloc in self.allocations:
            if alloc.models is not None:
                alloc.models.discard(self.model)
        self.allocations = set()
        for undo in self.on_release:
            undo()
        self.plans, self.keep, self.pinned, self.on_release = [], [], {}, []

    # ------------------------------------------------------------------ invalidation
    def invalidate(self, why: str) -> None:
        """CUDA's rule: after an illegal call the capture only fails; later work on the stream too."""
        with lock:
            if self.invalidated is None:
                self.invalidated = why
                work = _host_capture(self.handle.impl)
                if work is not None:   # cpu and emulated: the recorder refuses further work
                    work.invalidated = why

    def describe(self) -> str:
        return f"stream {self.handle!r} captures in mode {aclmdlRICaptureMode(self.mode).name} (begun by thread " \
               f"{self.thread.name})"


def _host_capture(impl: Any) -> Any:
    """The HostStream CapturedWork behind a device stream (cpu: impl.worker; emulated: impl.cupy.worker)."""
    worker = getattr(impl, "worker", None)
    if worker is None:
        worker = getattr(getattr(impl, "cupy", None), "worker", None)
    return getattr(worker, "capture", None)


# ---------------------------------------------------------------------------- the rules
def live_captures() -> list[Capture]:
    """ACTIVE without the captures of devices reset since (aclrtResetDevice ends them: their streams
    are gone), which are dropped from it."""
    captures = list(ACTIVE)
    if any(capture.device.stale is not None for capture in captures):
        with lock:
            ACTIVE[:] = [capture for capture in ACTIVE if capture.device.stale is None]
        captures = list(ACTIVE)
    return captures


def refuse_unsafe(fn: str) -> None:
    """A synchronous copy or memset, or an allocation or free, while a capture's mode forbids it to
    this thread (see the module docstring). Called only when ACTIVE is not empty."""
    me = threading.current_thread()
    for capture in live_captures():
        if capture.mode == GLOBAL or (capture.mode == THREAD_LOCAL and capture.thread is me):
            fail(aclError.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
                 f"{fn}: not allowed while {capture.describe()}: that mode forbids synchronous copies and "
                 "memsets, allocations and frees to " + ("every thread" if capture.mode == GLOBAL else "its thread")
                 + " (end the capture first, or capture with ACL_MODEL_RI_CAPTURE_MODE_RELAXED)")


def refuse_stream_sync(fn: str, impl: Any) -> None:
    """Waiting for a capturing stream: refused, and the capture is invalidated."""
    capture = impl.capture
    if capture is not None:
        capture.invalidate(f"{fn} of the capturing stream")
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED,
             f"{fn}: {capture.describe()}; its work is recorded, not run, so it cannot be waited for (the capture "
             "is now invalidated: aclmdlRICaptureEnd will fail)")


def refuse_device_sync(fn: str, device: Any) -> None:
    """Waiting for every stream of a device one of whose streams captures: refused, capture invalidated."""
    for capture in live_captures():
        if capture.device is device:
            refuse_stream_sync(fn, capture.handle.impl)


def refuse_captured_event(fn: str, event: Any) -> None:
    """Querying or waiting on the host for an event recorded in a capture still in progress."""
    capture = event.capture
    if capture is not None and capture in ACTIVE:
        capture.invalidate(f"{fn} of an event recorded in the capture")
        fail(aclError.ACL_ERROR_RT_EVENT_CAPTURED,
             f"{fn}: event was recorded while {capture.describe()}; it completes only when the model runs (the "
             "capture is now invalidated: aclmdlRICaptureEnd will fail)")


def refuse_wait(fn: str, impl: Any, event: Any) -> None:
    """aclrtStreamWaitEvent across a capture's boundary: a capturing stream may wait only for an event
    recorded in its own capture (ACL_ERROR_RT_CAPTURE_DEPENDENCY); a stream outside the capture may
    not wait for an event of a capture in progress (ACL_ERROR_STREAM_CAPTURE_CONFLICT: one stream per
    capture here, no fork/join of other streams into it). Either invalidates the capture."""
    capture, recorded_in = impl.capture, event.capture
    if recorded_in is not None and recorded_in not in ACTIVE:
        recorded_in = None
    if capture is not None and recorded_in is not capture:
        capture.invalidate(f"{fn} for an event recorded outside the capture")
        fail(aclError.ACL_ERROR_RT_CAPTURE_DEPENDENCY,
             f"{fn}: {capture.describe()}, and event was not recorded in that capture: a captured wait needs its "
             "record in the same capture (the capture is now invalidated)")
    if capture is None and recorded_in is not None:
        recorded_in.invalidate(f"{fn} of another stream for an event recorded in the capture")
        fail(aclError.ACL_ERROR_STREAM_CAPTURE_CONFLICT,
             f"{fn}: event was recorded while {recorded_in.describe()}, and stream is not part of that capture "
             "(only one stream per capture is supported; the capture is now invalidated)")


def refuse_invalidated(fn: str, capture: Any) -> None:
    """Work queued on a stream whose capture was invalidated (CUDA: cudaErrorStreamCaptureInvalidated)."""
    if capture.invalidated is not None:
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
             f"{fn}: the stream's capture was invalidated ({capture.invalidated}); end it with aclmdlRICaptureEnd")
