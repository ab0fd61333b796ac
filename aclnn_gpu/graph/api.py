"""acl_mdl.h's capture calls: aclmdlRICaptureBegin / GetInfo / End, aclmdlRIExecuteAsync and
aclmdlRIDestroy (return conventions as every ACL call: a status first, never an exception).

A model (`aclmdlRI`) is made at Begin (GetInfo hands it out while the capture is in progress, as
ACL does) and gets its device graph at End. It keeps what its replays use: the operator plans (an
executor or tensor destroyed after the capture does not matter to the model) and the pinned upload
buffers; the device memory it uses cannot be freed until aclmdlRIDestroy (aclrtFree answers
ACL_ERROR_RT_MEMORY_FREE). Replays go on any stream of the model's device, in stream order.
"""
from __future__ import annotations

import numbers
import threading
from typing import Any

from ..base.errors import c_api, fail, live_handle
from ..runtime import aclrtStream, stream_owner
from ..base.status import aclError, aclmdlRICaptureMode, aclmdlRICaptureStatus
from ..runtime import capture as state

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID
RELAXED = aclmdlRICaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED
_ids = iter(range(1, 1 << 62))


class aclmdlRI:
    """A model run instance built by stream capture (C's aclmdlRI)."""

    __slots__ = ("id", "device", "capture", "graph", "destroyed", "lock", "__weakref__")

    def __init__(self, device: Any):
        self.id = next(_ids)
        self.device = device
        self.capture: state.Capture | None = None   # set at Begin; holds what the replays use
        self.graph: Any = None                       # the device's graph, from End
        self.destroyed = False
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        shown = "destroyed" if self.destroyed else "capturing" if self.graph is None else "ready"
        return f"aclmdlRI({self.id}, {self.device.kind} device {self.device.id}, {shown})"


def _capturing_stream(stream: Any, fn: str) -> Any:
    """The live aclrtStream handle `stream` (None: the default stream, which never captures)."""
    if stream is None:
        return None
    stream_owner(stream, fn)
    return stream


def _model(modelRI: Any, fn: str) -> aclmdlRI:
    """The live, captured model `modelRI` of a device that was not reset; else ACL's code, saying why."""
    live_handle(modelRI, aclmdlRI, fn, "modelRI", PARAM, destroyer="aclmdlRIDestroy, or its capture failed")
    if modelRI.graph is None:
        fail(aclError.ACL_ERROR_RT_MODEL_CAPTURED, f"{fn}: modelRI {modelRI.id} is still being captured; call "
                                                   "aclmdlRICaptureEnd on its stream first")
    if modelRI.device.stale is not None:
        fail(PARAM, f"{fn}: modelRI {modelRI.id} belongs to device {modelRI.device.id}, which {modelRI.device.stale}")
    return modelRI


@c_api()
def aclmdlRICaptureBegin(stream: aclrtStream, mode: int) -> int:
    """Start capturing `stream` (not the default stream) in an aclmdlRICaptureMode: what is queued on it
    is recorded from now on, not run."""
    fn = "aclmdlRICaptureBegin"
    if stream is None:
        fail(aclError.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
             f"{fn}: stream is null (the default stream), which cannot capture: create a stream with aclrtCreateStream")
    handle = _capturing_stream(stream, fn)
    if isinstance(mode, bool) or not isinstance(mode, numbers.Integral) or \
            int(mode) not in aclmdlRICaptureMode._value2member_map_:
        fail(PARAM, f"{fn}: mode {mode!r} must be an aclmdlRICaptureMode (0 GLOBAL, 1 THREAD_LOCAL, 2 RELAXED)")
    device = handle.device
    with state.lock:
        if handle.impl.capture is not None:
            fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED, f"{fn}: {handle.impl.capture.describe()} already; end that "
                                                        "capture (aclmdlRICaptureEnd) before beginning another")
        model = aclmdlRI(device)
        capture = model.capture = state.Capture(handle, device, aclmdlRICaptureMode(int(mode)), model)
        device.begin_capture(handle.impl)
        handle.impl.capture = capture
        state.ACTIVE.append(capture)
    return OK


@c_api(n_out=2)
def aclmdlRICaptureGetInfo(stream: aclrtStream) -> tuple[int, int, aclmdlRI | None]:
    """(ret, aclmdlRICaptureStatus of `stream`, the model being captured or None)."""
    handle = _capturing_stream(stream, "aclmdlRICaptureGetInfo")
    capture = None if handle is None else handle.impl.capture
    if capture is None:
        return OK, aclmdlRICaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_NONE, None
    if capture.invalidated is not None:
        return OK, aclmdlRICaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED, capture.model
    return OK, aclmdlRICaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE, capture.model


@c_api(n_out=1)
def aclmdlRICaptureEnd(stream: aclrtStream) -> tuple[int, aclmdlRI]:
    """Stop capturing `stream`: (ret, the model), or ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED and None
    when a refused call invalidated the capture."""
    fn = "aclmdlRICaptureEnd"
    handle = _capturing_stream(stream, fn)
    with state.lock:
        capture = None if handle is None else handle.impl.capture
        if capture is None:
            fail(aclError.ACL_ERROR_RT_STREAM_NOT_CAPTURED, f"{fn}: stream is not capturing (no aclmdlRICaptureBegin "
                                                            "on it, or it was already ended)")
        if capture.mode != RELAXED and capture.thread is not threading.current_thread():
            fail(aclError.ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
                 f"{fn}: {capture.describe()}, and this is thread {threading.current_thread().name}: outside "
                 "ACL_MODEL_RI_CAPTURE_MODE_RELAXED the capture must end in the thread that began it")
        state.ACTIVE.remove(capture)
        handle.impl.capture = None
        model = capture.model
        try:
            graph = capture.device.end_capture(handle.impl)
        except Exception as e:  # noqa: BLE001 - CUDA invalidated the capture itself (e.g. legacy-stream work)
            capture.invalidate(f"the device ended the capture with {type(e).__name__}: {e}")
            graph = None
        if capture.invalidated is not None:
            capture.release()
            model.destroyed = True
            fail(aclError.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                 f"{fn}: the capture was invalidated ({capture.invalidated}); no model was made")
        model.graph = graph
    return OK, model


@c_api()
def aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> int:
    """Queue one replay of the model on `stream` (any stream of its device; None: its default stream)."""
    fn = "aclmdlRIExecuteAsync"
    model = _model(modelRI, fn)
    if stream is None:
        impl = model.device.default_stream
    else:
        if stream_owner(stream, fn) is not model.device:
            fail(aclError.ACL_ERROR_RT_STREAM_CONTEXT,
                 f"{fn}: stream belongs to device {stream.device.id}, but modelRI {model.id} was captured on device "
                 f"{model.device.id}: replay it on a stream of that device")
        impl = stream.impl
        if impl.capture is not None:
            fail(aclError.ACL_ERROR_RT_STREAM_CAPTURED,
                 f"{fn}: {impl.capture.describe()}: a model cannot be replayed into another capture here")
    with model.lock:   # not destroyed between the check and the launch
        if model.destroyed:
            fail(PARAM, f"{fn}: modelRI was destroyed (aclmdlRIDestroy)")
        model.device.launch_graph(model.graph, impl)
    return OK


@c_api()
def aclmdlRIDestroy(modelRI: aclmdlRI) -> int:
    """Release the model (refused while a replay is queued): the memory it used may be freed again."""
    fn = "aclmdlRIDestroy"
    if isinstance(modelRI, aclmdlRI) and not modelRI.destroyed and modelRI.graph is not None:
        model = modelRI   # a model of a reset device may still be destroyed
    else:
        model = _model(modelRI, fn)   # fails, saying why
    with model.lock:
        if model.destroyed:
            fail(PARAM, f"{fn}: modelRI {model.id} was already destroyed")
        if model.device.stale is None and model.device.graph_busy(model.graph):
            fail(aclError.ACL_ERROR_RT_MODEL_RUNNING,
                 f"{fn}: modelRI {model.id} still has replays queued or running; synchronize the stream they were "
                 "queued on (aclrtSynchronizeStream), then destroy it")
        model.destroyed = True
        assert model.capture is not None
        model.capture.release()
        model.graph = None
    return OK
