"""The cuda device's streams, events and graphs over CuPy (`device/cuda.py` is the device): `CudaStream`,
`CudaEvent` (with `record_external` for an event recorded in a capture), `CudaGraph`, `StreamGate` (a
stream held on the GPU until the host releases it) and `CaptureGate` (a capture's beginning against
the synchronous calls); and whether CuPy sees a GPU at all (`cuda_unavailable_reason`). Layer 8,
devices; the emulated device runs the same code over `emulator/fakecupy.py`.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Any, Iterator

from .base import DeviceEvent, DeviceStream
from .capture_mode import cuda_bindings_runtime, thread_local_capture_mode


def _version(number: int) -> str:
    """CUDA's integer version (12040) as text ("12.4")."""
    return f"{number // 1000}.{number % 1000 // 10}"


def cuda_unavailable_reason() -> str | None:
    """None when CuPy imports and sees at least one GPU, else CuPy's own cause in one line (CuPy
    missing, a driver older than CuPy's CUDA runtime, no device). Never raises."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install raising anything
        return (f"CuPy cannot be imported ({type(e).__name__}: {e}); install a CuPy wheel that matches "
                "the CUDA driver, e.g. pip install 'aclnn_gpu[cuda]'")
    runtime = cupy.cuda.runtime
    try:
        count = runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError: cudaErrorInsufficientDriver, NoDevice ...
        cause = f"CuPy {cupy.__version__}: {e}"
        try:
            driver, built_for = runtime.driverGetVersion(), runtime.runtimeGetVersion()
            shown = f"CUDA {_version(driver)}" if driver else "none (no NVIDIA driver is loaded)"
            cause += f" (driver supports: {shown}; CuPy's CUDA runtime: {_version(built_for)})"
        except Exception:  # noqa: BLE001 - the versions are extra detail only
            pass
        return cause
    if count < 1:
        return f"CuPy {cupy.__version__}: the CUDA driver reports no GPU (cudaGetDeviceCount = 0)"
    return None


def cuda_available() -> bool:
    """True when CuPy imports and sees a GPU; never raises (a silent device check)."""
    return cuda_unavailable_reason() is None


class CudaStream(DeviceStream):
    """A stream of one device (made inside that device's scope)."""

    def __init__(self, cp: Any):
        # A blocking stream (cudaStreamCreate's default): it orders with the legacy default stream,
        # where CuPy puts its current-stream work (cupy.asarray of host data, DLPack hand-overs),
        # where the synchronous aclrtMemcpy / aclrtMemset run and where PyTorch works by default, so
        # an operator never starts before the data it reads has arrived.
        self.cp = cp
        self.cupy = cp.cuda.Stream(non_blocking=False)
        self.before_capture: Any = None   # while it captures: an event recorded just before the capture began
        self.cublas_workspace: Any = None  # while it captures: (capture, address, size) of its GEMMs' workspace

    host_gate: Any = None   # StreamGate, made at the stream's first blocking host callback

    # What a capture on this stream keeps for its graph's replays (an ACL capture: relaxed mode, so
    # CuPy's allocations may run inside it; `torch_stream.TorchStream` allocates through PyTorch instead).
    pinned_for_capture: Any = None    # None: uploads.captured_upload's own pinned buffer

    def capture_workspace(self, cp: Any, nbytes: int) -> int:
        """Device memory for the GEMMs of this stream's capture, kept by its model (`capture.keep`)."""
        memory = cp.cuda.alloc(nbytes)   # in the device's scope (enqueue)
        self.capture.keep.append(memory)
        return int(memory.ptr)

    def synchronize(self) -> None:
        with thread_local_capture_mode(self.cp):   # another thread's global-mode capture stays valid
            self.cupy.synchronize()

    def close(self) -> None:
        """Drain, then release the stream now (not whenever its handle is collected)."""
        stream, self.cupy = self.cupy, None
        if stream is not None:
            stream.synchronize()
            release = getattr(stream, "close", None)  # fakecupy's streams own a worker thread
            if release is not None:
                release()


def record_external(cp: Any, event: Any, stream: Any) -> None:
    """cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal): in a capture, an event-record
    node that records the event at every replay (ACL's aclrtRecordEvent in a model). A plain
    cudaEventRecord there is graph-internal: the event is unusable outside the capture
    (cudaErrorCapturedEvent). CuPy's runtime has no eventRecordWithFlags (cupy_backends/cuda/api/
    runtime.pyx); cuda-bindings has it (cuda_bindings/cuda/bindings/runtime.pyx.in): the handles as
    ints, a `(cudaError_t,)` tuple back, cudaError_t an int enum (cuda-bindings 13: a FastEnum) with `.name`."""
    cudart = cuda_bindings_runtime(cp)
    err, = cudart.cudaEventRecordWithFlags(int(event.ptr), int(stream.ptr), cudart.cudaEventRecordExternal)
    if err != cudart.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaEventRecordWithFlags: {getattr(err, 'name', err)}")


class CudaEvent(DeviceEvent):
    def __init__(self, cp: Any):
        self.cp = cp
        self.cupy = cp.cuda.Event()
        self._recorded = False

    def record(self, stream: DeviceStream) -> None:
        if stream.capture is not None:   # recorded at every replay, and usable after the capture (below)
            record_external(self.cp, self.cupy, stream.cupy)  # type: ignore[attr-defined]
        else:
            self.cupy.record(stream.cupy)  # type: ignore[attr-defined]
        self._recorded = True

    def synchronize(self) -> None:
        with thread_local_capture_mode(self.cp):
            self.cupy.synchronize()

    def recorded(self) -> bool:
        return self._recorded

    def query(self) -> bool:
        with thread_local_capture_mode(self.cp):
            return bool(self.cupy.done)

    def elapsed_ms(self, end: DeviceEvent) -> float:
        return float(self.cp.cuda.get_elapsed_time(self.cupy, end.cupy))  # type: ignore[attr-defined]


def cuda_bindings_driver(cp: Any) -> Any:
    """cuda-bindings' `cuda.bindings.driver` (fakecupy brings a stand-in of the part the device calls)."""
    stand_in = getattr(cp, "cuda_bindings_driver", None)
    if stand_in is not None:
        return stand_in
    from cuda.bindings import driver
    return driver


class StreamGate:
    """A stream held on the GPU until the host releases it, with no host thread waiting: the n-th
    `hold()` queues cuStreamWaitValue32 (a stream memory operation: the stream's later work waits until
    a 32-bit word is cyclically >= n) on a pinned counter, and `release(n)` stores n there. Pinned
    memory is device-accessible at its host address under unified addressing. aclrtLaunchCallback's
    blocking callbacks hold their stream this way (runtime/callbacks.py): a host function that waited would
    hold up other streams' host functions, which CUDA may serialize."""

    def __init__(self, device: Any, stream: CudaStream):   # device: its CudaDevice
        self.device, self.stream = device, stream
        with device.scope, thread_local_capture_mode(device.cp):
            self.memory = device.cp.cuda.alloc_pinned_memory(4)
        self.cell = ctypes.c_uint32.from_address(int(self.memory.ptr))
        self.cell.value = 0
        self.held = 0
        self.lock = threading.Lock()

    def hold(self) -> int:
        """Queue the wait for the next release number and return it; RuntimeError when CUDA refuses."""
        driver = cuda_bindings_driver(self.device.cp)
        with self.lock:
            n = (self.held + 1) & 0xFFFFFFFF
            with self.device.scope:
                err, = driver.cuStreamWaitValue32(driver.CUstream(int(self.stream.cupy.ptr)),
                                                  driver.CUdeviceptr(int(self.memory.ptr)), n,
                                                  driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuStreamWaitValue32: {getattr(err, 'name', err)}")
            self.held = n
            return n

    def release(self, n: int) -> None:
        """Let the stream pass its hold number `n` (and every earlier one)."""
        with self.lock:
            if (n - self.cell.value) & 0xFFFFFFFF < 0x80000000:   # n not behind the counter
                self.cell.value = n


class CudaGraph:
    """A captured CUDA graph and the event recorded after its latest launch (graph_busy)."""

    __slots__ = ("graph", "event")

    def __init__(self, graph: Any, event: Any):
        self.graph = graph
        self.event = event


class CaptureGate:
    """Beginning a capture (`exclusive`) against the synchronous calls (`shared`: any number at once).

    A synchronous call decides between the legacy-stream path and the capture-safe one from the
    device's capture state, then makes its CUDA calls; a capture that began in between would be
    invalidated by them (cudaErrorStreamCaptureImplicit / Unsupported). So a capture begins only while
    no synchronous call is inside the gate, and synchronous calls wait while a capture is beginning
    (or waiting to: a stream of synchronous calls cannot keep a capture from beginning). Beginning
    is short (an event record and cudaStreamBeginCapture); a synchronous call holds the gate for its
    own waits and copy only. A thread inside `shared` may enter it again (nested synchronous paths
    never wait for a capture that waits for them)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0          # synchronous calls inside
        self._exclusive = False   # a capture is beginning
        self.waiting = 0          # captures waiting for the synchronous calls inside to leave
        self._depth = threading.local()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        depth = getattr(self._depth, "n", 0)
        if not depth:
            with self._cond:
                while self._exclusive or self.waiting:
                    self._cond.wait()
                self._shared += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if not depth:
                with self._cond:
                    self._shared -= 1
                    if not self._shared:
                        self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self.waiting += 1
            self._cond.notify_all()   # for whoever watches `waiting` (tests)
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self.waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
