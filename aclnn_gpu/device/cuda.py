"""The `cuda` device, written against CuPy: streams, events, the memory pool, RawModule kernels and
cuBLAS (layer 8, devices). Its streams, events, graphs and gates are `device/cuda_streams.py`, the
KernelContext a plan runs on `device/cuda_context.py`; their names are importable from here. The
emulated device is this same class over `emulator/fakecupy/`, a CuPy-shaped layer that runs on the
CPU, so everything here except the few calls into real CuPy is executed in CI.

What only a GPU can run (and no test here reaches) is the CuPy module itself: `cupy.cuda.alloc`,
`Stream`, `Event`, `runtime.memcpyAsync`/`memsetAsync`, `RawModule` compilation and launch, and
the cuBLAS call in `kernels/gemm.py`. Everything else is shared with the emulated device.

One `CudaDevice` per GPU: every call that makes or uses a CUDA resource (allocations, streams,
events, kernel compiles and launches, the cuBLAS handle CuPy keeps per device) runs inside
`self.scope` (`cupy.cuda.Device(id)`), so a device object never touches another GPU's context
whatever device the calling thread has current; the SM count and the compute capability (what
CuPy compiles the kernels for) are read from that device.

Stream capture maps onto CUDA's: `stream.begin_capture(relaxed)`, `end_capture()` -> `cupy.cuda.Graph`
(kept in a `CudaGraph` with the event of its last launch), `graph.launch(stream)`. CUDA is asked
for RELAXED mode whatever ACL mode the caller chose: the ACL mode rules are the runtime's
(`runtime/capture.py`), and the library itself allocates pinned memory while capturing (below), which
CUDA's stricter modes forbid. A captured copy from or to a caller's host buffer object uses that
buffer at every replay: it is page-locked in place (cudaHostRegister, portable: one process-wide
table, `hostpins.shared_pins`, since a registration is the process's, not a device's) for the
model's lifetime.
A captured copy reads its source when the graph runs, so a table
upload made while capturing must not come from the reused `UploadRing`: it comes from a pinned
buffer the model owns (`uploads.captured_upload`). While a stream of the device captures, the
synchronous paths (free, aclrtMemcpy, aclrtMemset) wait for the other streams one by one (for a
capturing one: the event recorded on it just before its capture began) and copy on a private
non-blocking stream: cudaDeviceSynchronize and the legacy stream would touch the
capturing stream, which CUDA refuses (and which invalidates the capture). Which path a synchronous
call takes is decided inside the device's `CaptureGate`: a capture begins only while no synchronous
call is between its decision and its last CUDA call, so none issues a legacy-stream copy after a
capture began.

cuBLAS (`kernels/gemm.py`) is called through ctypes on CuPy's own libcublas with handles of the
library's own (one per thread: `CudaDevice.cublas`), never through CuPy's cuBLAS wrappers: those (and
`cublas.setStream`) raise NotImplementedError while the stream captures, which CUDA itself allows.
While the stream captures, the GEMMs run on a workspace the model owns (`cublasSetWorkspace`, as
cuBLAS's "CUDA Graphs Support" asks of captured routines). A frozen launch's GEMM is one C call with
arguments converted once (`plans/frozen.Gemm.native`), from the replay program the device keeps per
workspace, stream and handle (`device/cuda_context.CudaKernelContext.run_frozen`); the handle's stream and workspace are
set once per execute, only when they change.

NCCL (`hccl/nccl.py`) creates its communicator and makes every call inside the device's scope:
ncclCommInitRank binds the GPU current on the calling thread.
"""

import threading
import weakref
from typing import Any, Callable, Iterable

import numpy as np

from ..kernels import shipped
from ..plans.frozen import drop_programs, run_plan
from .base import Device, DeviceEvent, DeviceStream
from .capture_mode import cuda_bindings_runtime, thread_local_capture_mode
from .cuda_context import CudaKernelContext
from .cuda_streams import (CaptureGate, CudaEvent, CudaGraph, CudaStream, StreamGate, cuda_available,
                           cuda_bindings_driver, cuda_unavailable_reason, record_external)
from .hostpins import shared_pins
from .registry import Allocation, Registry
from .uploads import MEMCPY_DEFAULT, UploadRing, captured_upload  # noqa: F401  (re-exported)

# the device's parts, importable from here as before
__all__ = ["CaptureGate", "CudaDevice", "CudaEvent", "CudaGraph", "CudaKernelContext", "CudaStream", "StreamGate",
           "captured_upload", "cuda_available", "cuda_bindings_driver", "cuda_bindings_runtime",
           "cuda_unavailable_reason", "record_external"]


def _retire(device_ref: Any, cupy_stream: Any) -> None:
    """A stream whose handle went (weakref.finalize of its CudaStream): an event recorded on it now
    joins the device's list of work to wait for (for a stream closed first, one that completes at once)."""
    device = device_ref()
    if device is None:
        return
    try:
        with device.scope:
            event = device.cp.cuda.Event(disable_timing=True)
            event.record(cupy_stream)
        device._retired.append(event)
    except Exception:  # noqa: BLE001 - a stream destroyed or a device reset meanwhile: nothing left to wait for
        pass


class CudaDevice(Device):
    capturing = 0   # streams of this device capturing now (read inside `gate`; see CaptureGate)
    _side_stream: Any = None
    native_gemm = True   # GEMMs are cuBLAS calls (`cublas`); False: the device's own `gemm` (emulated)
    _cublas_pool: Any = None   # kernels/gemm.HandlePool, made at the first GEMM

    def __init__(self, cp: Any, kind: str = "cuda", device_id: int = 0):
        self.cp = cp
        self.kind = kind
        self.id = device_id
        self.registry = Registry(device_id)
        self._streams: "weakref.WeakSet[CudaStream]" = weakref.WeakSet()
        self._modules: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}
        self._module_lock = threading.Lock()
        self.gate = CaptureGate()
        self.host_pins = shared_pins(cp.cuda.runtime)   # caller buffers page-locked for captures (process-wide)
        self.properties = cp.cuda.runtime.getDeviceProperties(device_id)
        self.sm_count = int(self.properties["multiProcessorCount"])
        self.arch = f"sm_{self.properties.get('major', 0)}{self.properties.get('minor', 0)}"
        self._retired: list[Any] = []   # events recorded on streams whose handle was dropped (`_drain`)
        with self.scope, thread_local_capture_mode(cp):   # the ring's pinned memory: cudaHostAlloc
            self.default_stream = self.create_stream()
            self.uploads = UploadRing(cp)
            self._private_stream()   # made with the device (aclrtMalloc uses it), not at a first call

    @property
    def scope(self) -> Any:
        """`with device.scope:` makes this GPU CuPy's (and CUDA's) current device for the block. A
        fresh `cupy.cuda.Device` each time: one object keeps its enter/exit stack on itself in some
        CuPy versions, so sharing one between threads could restore the wrong device."""
        return self.cp.cuda.Device(self.id)

    # ------------------------------------------------------------------ memory
    def _add(self, memory: Any, size: int, on_device: bool) -> int:
        self.registry.add(Allocation(int(memory.ptr), size, on_device, memory))
        return int(memory.ptr)

    def malloc(self, size: int) -> int:
        # the private stream's pool arena (see zero_fresh); CuPy's pool may cudaMalloc: an unsafe call
        with self.scope, self._private_stream(), thread_local_capture_mode(self.cp):
            return self._add(self.cp.cuda.alloc(size), size, True)

    def malloc_host(self, size: int) -> int:
        with self.scope, thread_local_capture_mode(self.cp):
            return self._add(self.cp.cuda.alloc_pinned_memory(size), size, False)

    page_size = 2 << 20   # CUDA's large-page granularity of device allocations

    def mem_info(self) -> tuple[int, int]:
        with self.scope:
            free, total = self.cp.cuda.runtime.memGetInfo()
        return int(free), int(total)

    def zero_fresh(self, ptr: int, count: int) -> None:
        """A memset on the device's private non-blocking stream, waited for (that stream only).

        `malloc` allocates in that stream's arena of CuPy's pool (cupy/cuda/memory.pyx: a chunk is
        reused only by allocations made while the same stream is current), so the chunk's earlier users
        are earlier aclrtMalloc callers, whose aclrtFree waited for the device: the zeros land after
        them, and the memory is complete and usable on any stream when the pointer is returned. It waits
        for nothing else (no legacy stream: no implicit wait for the blocking streams, whose queued work
        may be waiting for the caller, and nothing a capture refuses); malloc is not the hot path. The
        wait is made in thread-local capture mode (device/capture_mode.py)."""
        with self.scope, thread_local_capture_mode(self.cp):
            side = self._private_stream()
            self.cp.cuda.runtime.memsetAsync(ptr, 0, count, side.ptr)
            side.synchronize()

    def _private_stream(self) -> Any:
        """The device's private non-blocking stream: the synchronous paths' while a stream captures, and
        the arena `malloc` allocates in (made in the device's scope)."""
        if self._side_stream is None:
            with self.scope:
                self._side_stream = self.cp.cuda.Stream(non_blocking=True)
        return self._side_stream

    def free(self, ptr: int) -> None:
        self.synchronize_quietly()   # cudaFree semantics: no queued work still uses it
        self.registry.remove(ptr)

    def synchronize_quietly(self) -> None:
        """Wait for every stream of this device (a copy from another device waits for it too); while
        a stream captures, for every stream but the capturing ones (see the module docstring)."""
        with self.gate.shared(), self.scope:
            self._drain()

    def _drain(self) -> None:
        """synchronize_quietly's waits, inside the gate (no ACL capture begins meanwhile; one may end):
        each stream the library made on the device, one by one (a capturing one: the event recorded
        just before its capture began), and the streams whose handle was dropped (an event recorded
        when it went). Never cudaDeviceSynchronize: CUDA refuses it while any stream of the device
        captures, a PyTorch capture on another thread included (and the refusal invalidates that
        capture), and the library cannot see those; so work other libraries queued on streams of their
        own is not waited for (the synchronous copy itself, cudaMemcpy on the legacy stream, still runs
        after the legacy stream's earlier work). Made in thread-local capture mode
        (device/capture_mode.py).

        Each stream is waited for through an event recorded on it, not cudaStreamSynchronize: a failure
        of a stream's queued work (the emulated device's HCCL transfers run as such work) belongs to that
        stream's own aclrtSynchronizeStream, and another thread's synchronous copy must not take it."""
        with thread_local_capture_mode(self.cp):
            reached = None
            for stream in self.live_streams():
                before = getattr(stream, "before_capture", None)   # read once: an end clears it
                cupy_stream = stream.cupy   # type: ignore[attr-defined]  # read once: a close clears it
                if before is not None:   # the work queued on it before the capture began may still use the memory
                    before.synchronize()
                elif cupy_stream is not None:   # (a stream closed meanwhile was drained by its close)
                    reached = reached or self.cp.cuda.Event(disable_timing=True)   # this call's own: drains overlap
                    reached.record(cupy_stream)
                    reached.synchronize()
            retired, self._retired = self._retired, []
            for event in retired:
                event.synchronize()

    def _synchronous(self, legacy: Callable[[], None], issue: Callable[[int], None]) -> None:
        """A synchronous copy or memset (see the module docstring), decided and made inside the gate:
        with no capture, `legacy()` after cudaDeviceSynchronize; while a stream captures, after the
        device's other work, `issue(stream_ptr)` on a private non-blocking stream, waited for."""
        with self.gate.shared(), self.scope:
            self._drain()
            if not self.capturing:
                with thread_local_capture_mode(self.cp):   # cudaMemcpy / cudaMemset are unsafe calls
                    legacy()
                return
            side = self._private_stream()
            issue(side.ptr)
            with thread_local_capture_mode(self.cp):
                side.synchronize()

    def _copy(self, dst: int, src: int, count: int, stream: DeviceStream | None) -> None:
        runtime = self.cp.cuda.runtime
        if stream is None:   # cudaMemcpyDefault with unified addressing also copies between GPUs
            self._synchronous(lambda: runtime.memcpy(dst, src, count, MEMCPY_DEFAULT),
                              lambda side: runtime.memcpyAsync(dst, src, count, MEMCPY_DEFAULT, side))
            return
        with self.scope:
            runtime.memcpyAsync(dst, src, count, MEMCPY_DEFAULT, stream.cupy.ptr)  # type: ignore[attr-defined]

    def copy(self, dst: int, src: int, count: int, stream: DeviceStream | None) -> None:
        self._copy(dst, src, count, stream)

    def copy_from_host(self, dst: int, host: memoryview, stream: DeviceStream | None) -> None:
        staged = np.frombuffer(host, np.uint8)
        if stream is not None and stream.capture is not None:
            self._copy(dst, self._pin_for_capture(stream.capture, staged, "src"), staged.nbytes, stream)
            return
        self._copy(dst, staged.ctypes.data, staged.nbytes, stream)
        if stream is not None:  # the caller may reuse its (pageable) buffer as soon as we return
            stream.synchronize()

    def copy_to_host(self, host: memoryview, src: int, stream: DeviceStream | None) -> None:
        target = np.frombuffer(host, np.uint8)
        if stream is not None and stream.capture is not None:
            self._copy(self._pin_for_capture(stream.capture, target, "dst"), src, target.nbytes, stream)
            return
        self._copy(target.ctypes.data, src, target.nbytes, stream)
        if stream is not None:
            stream.synchronize()

    def _pin_for_capture(self, capture: Any, array: np.ndarray, what: str) -> int:
        """The address of a caller's host buffer (aclrtMemcpyAsync's `what`, src or dst) that a captured
        copy reads or writes at every replay: page-locked in place through the device's table
        (`hostpins.HostPins`) until the model is released; the model keeps the buffer alive."""
        from ..base.errors import fail
        from ..base.status import aclError
        address = int(array.ctypes.data)
        key = (address, array.nbytes)
        if key not in capture.pinned and array.nbytes:
            try:
                with self.scope:
                    starts = self.host_pins.acquire(address, array.nbytes)
            except Exception as e:  # noqa: BLE001 - CUDA's refusal, reported with ACL's code
                fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                     f"aclrtMemcpyAsync: {what} is a host buffer object that a captured copy uses at every replay, and "
                     f"it could not be page-locked for the graph ({e}); use aclrtMallocHost memory for it")
            capture.pinned[key] = array

            def unregister() -> None:
                with self.scope:
                    self.host_pins.release(starts)
            capture.on_release.append(unregister)
        return address

    def memset(self, ptr: int, value: int, count: int, stream: DeviceStream | None) -> None:
        runtime = self.cp.cuda.runtime
        if stream is None:
            self._synchronous(lambda: runtime.memset(ptr, value & 0xFF, count),
                              lambda side: runtime.memsetAsync(ptr, value & 0xFF, count, side))
            return
        with self.scope:
            runtime.memsetAsync(ptr, value & 0xFF, count, stream.cupy.ptr)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ streams and events
    def create_stream(self) -> CudaStream:
        with self.scope:
            stream = CudaStream(self.cp)
        self._streams.add(stream)
        # a handle dropped without aclrtDestroyStream: its queued work still runs (cudaStreamDestroy
        # returns at once), and the device's waits (`_drain`) wait for it through an event recorded then
        weakref.finalize(stream, _retire, weakref.ref(self), stream.cupy)
        return stream

    def live_streams(self) -> list[DeviceStream]:
        return [s for s in list(self._streams) if s.cupy is not None]

    def create_event(self) -> CudaEvent:
        with self.scope:
            return CudaEvent(self.cp)

    def stream_wait_event(self, stream: DeviceStream, event: DeviceEvent) -> None:
        if stream.capture is not None:
            # the runtime lets a capturing stream wait only for an event recorded in its own capture,
            # on this very stream: already ordered, and an externally recorded event is no capture
            # dependency (the replay must not wait for an older record of it)
            return
        if event.recorded():   # the event may belong to another device: CUDA allows that wait
            with self.scope:
                stream.cupy.wait_event(event.cupy)  # type: ignore[attr-defined]

    def follow_current_stream(self, stream: DeviceStream) -> None:
        """`stream`'s next work after everything queued so far on CuPy's current stream of this GPU: an
        event recorded there, waited for by `stream` (cudaStreamWaitEvent: no host wait). CuPy's current
        stream is the stream of an enclosing `with cupy.cuda.Stream():`, else the per-thread default
        stream under CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1, else the legacy stream
        (cupy/cuda/stream.pyx: get_current_stream); functional's copies, conversions and DLPack
        hand-overs (where PyTorch orders its own stream before CuPy's) run there, and a caller's producer
        may still be running on it. Only the legacy stream orders with the library's blocking streams by
        itself; the other two do not, so the event is always recorded."""
        with self.scope:
            current = self.cp.cuda.get_current_stream()
            if int(current.ptr) == int(stream.cupy.ptr):  # type: ignore[attr-defined]
                return
            event = self.cp.cuda.Event(disable_timing=True)
            event.record(current)
            stream.cupy.wait_event(event)  # type: ignore[attr-defined]

    def current_stream_is_legacy(self) -> bool:
        """Whether CuPy's current stream of this GPU is the legacy default stream (handle 0)."""
        with self.scope:
            return int(self.cp.cuda.get_current_stream().ptr) == 0

    def lead_current_stream(self, stream: DeviceStream) -> None:
        """CuPy's current stream of this GPU after everything queued so far on `stream` (the other way
        round from `follow_current_stream`): what the caller queues next on its stream reads the results."""
        with self.scope:
            current = self.cp.cuda.get_current_stream()
            if int(current.ptr) == int(stream.cupy.ptr):  # type: ignore[attr-defined]
                return
            event = self.cp.cuda.Event(disable_timing=True)
            event.record(stream.cupy)  # type: ignore[attr-defined]
            current.wait_event(event)

    def stream_gate(self, stream: DeviceStream) -> StreamGate | None:
        """The stream's StreamGate (made at first use); None once CUDA has refused a stream memory
        operation on this device (the caller then waits in a host function, as before)."""
        if self._no_stream_waits:
            return None
        assert isinstance(stream, CudaStream)
        gate = stream.host_gate
        if gate is None:
            gate = stream.host_gate = StreamGate(self, stream)
        return gate

    _no_stream_waits = False   # set when cuStreamWaitValue32 was refused

    # ------------------------------------------------------------------ peer access
    def can_access_peer(self, peer: int) -> bool:
        return bool(self.cp.cuda.runtime.deviceCanAccessPeer(self.id, peer))

    def enable_peer_access(self, peer: int) -> None:
        with self.scope:
            self.cp.cuda.runtime.deviceEnablePeerAccess(peer)

    def disable_peer_access(self, peer: int) -> None:
        with self.scope:
            self.cp.cuda.runtime.deviceDisablePeerAccess(peer)

    # ------------------------------------------------------------------ kernels
    def kernel(self, file: str, expr: str) -> Any:
        key = (file, expr)
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._module_lock:
                module = self._modules.get(file)
                if module is None:   # the shipped cubin for this GPU, else compiled by NVRTC (logged)
                    module = shipped.load_module(self.cp, file, self.arch)
                    self._modules[file] = module
                kernel = self._kernels[key] = module.get_function(expr)
        return kernel

    def load_modules(self, files: Iterable[str]) -> None:
        """The modules of `files` not loaded yet, together: the shipped binaries, the rest compiled by
        NVRTC in parallel threads (kernels/shipped.load_all), so a first call that needs several kernel
        files waits for the longest compile, not for their sum. One file goes through `kernel` as usual."""
        with self._module_lock:
            missing = [f for f in dict.fromkeys(files) if f not in self._modules]
            if len(missing) > 1:
                self._modules.update(shipped.load_all(self.cp, self.arch, lambda: self.scope, missing))

    def gemm(self, stream: CudaStream, *args: Any, **kwargs: Any) -> None:
        """cublasGemmStridedBatchedEx on `stream` (inside the device's scope); kernels/gemm.py."""
        from ..kernels import gemm
        arguments = gemm.native_arguments(False, args, kwargs)   # checked; None: an empty product, no handle made
        if arguments is not None:
            handle = self.cublas(stream)
            if handle.ints:
                arguments = gemm.native_arguments(False, args, kwargs, True)
            handle.gemm(False, arguments)

    def gemm_batched(self, stream: CudaStream, *args: Any, **kwargs: Any) -> None:
        """cublasGemmBatchedEx on `stream` (inside the device's scope); kernels/gemm.py."""
        from ..kernels import gemm
        arguments = gemm.native_arguments(True, args, kwargs)   # checked; None: an empty product, no handle made
        if arguments is not None:
            handle = self.cublas(stream)
            if handle.ints:
                arguments = gemm.native_arguments(True, args, kwargs, True)
            handle.gemm(True, arguments)

    def cublas(self, stream: CudaStream) -> Any:
        """The calling thread's cuBLAS handle of this device (kernels/gemm.HandlePool; called inside the
        device's scope), set to `stream` and to the workspace its GEMMs need now: the capture's while it
        captures, else cuBLAS's own pool."""
        pool = self._cublas_pool
        if pool is None:
            from ..kernels import gemm
            with self._module_lock:
                if self._cublas_pool is None:
                    self._cublas_pool = gemm.HandlePool()
            pool = self._cublas_pool
        handle = pool.for_thread()
        if stream.capture is None:   # cuBLAS's own workspace pool; nothing to do when the handle is so already
            ptr = stream.cupy.ptr
            if handle.stream_ptr != ptr or handle.workspace is not None:
                handle.use(int(ptr), None)
        else:
            handle.use(int(stream.cupy.ptr), self._cublas_workspace(stream))
        return handle

    def _cublas_workspace(self, stream: CudaStream) -> tuple[int, int] | None:
        """None outside a capture (cuBLAS's own workspace pool); while `stream` captures, (address, size)
        of device memory the model keeps, one per capture: the GEMMs of one capture run in the
        stream's order, but two models may replay at once on two streams."""
        capture = stream.capture
        if capture is None:
            return None
        if stream.cublas_workspace is None or stream.cublas_workspace[0] is not capture:
            from ..kernels import gemm
            size = gemm.capture_workspace_bytes(int(self.properties.get("major", 0)))
            stream.cublas_workspace = (capture, stream.capture_workspace(self.cp, size), size)
        return stream.cublas_workspace[1], stream.cublas_workspace[2]

    def enqueue(self, stream: DeviceStream, plan: Any, workspace: int) -> None:
        if stream.capture is not None:   # the model keeps the plan and its memory (runtime/capture.py)
            stream.capture.hold_plan(plan, workspace)
        context = stream.kernel_context   # one per stream: it holds only the device and the stream
        if context is None:
            context = stream.kernel_context = CudaKernelContext(self, stream)  # type: ignore[arg-type]
        if self.cp.cuda.runtime.getDevice() == self.id:   # current already: no device switch
            run_plan(plan, context, workspace)
            return
        with self.scope:   # launches, module loads and the cuBLAS handle of this GPU
            run_plan(plan, context, workspace)

    # ------------------------------------------------------------------ stream capture
    def begin_capture(self, stream: DeviceStream) -> None:
        """Inside the gate (no synchronous call is between its decision and its CUDA calls: see
        CaptureGate), counted as capturing before CUDA begins; the event recorded first is what
        synchronous calls wait for on this stream while it captures (the work queued before it)."""
        assert isinstance(stream, CudaStream)
        with self.gate.exclusive():
            self.capturing += 1
            try:
                with self.scope:
                    before = self.cp.cuda.Event(disable_timing=True)
                    before.record(stream.cupy)
                    stream.before_capture = before
                    stream.cupy.begin_capture(self.cp.cuda.runtime.streamCaptureModeRelaxed)
            except BaseException:
                stream.before_capture = None
                self.capturing -= 1
                raise

    def end_capture(self, stream: DeviceStream) -> CudaGraph:
        """Counted as capturing until CUDA has ended the capture (even when ending fails)."""
        assert isinstance(stream, CudaStream)
        try:
            with self.scope:
                return CudaGraph(stream.cupy.end_capture(), self.cp.cuda.Event(disable_timing=True))
        finally:
            stream.before_capture = None
            stream.cublas_workspace = None   # the model keeps the memory (capture.keep)
            self.capturing -= 1

    def launch_graph(self, graph: CudaGraph, stream: DeviceStream) -> None:
        with self.scope:
            graph.graph.launch(stream.cupy)  # type: ignore[attr-defined]
            graph.event.record(stream.cupy)  # type: ignore[attr-defined]

    def graph_busy(self, graph: CudaGraph) -> bool:
        with thread_local_capture_mode(self.cp):   # cudaEventQuery
            return not graph.event.done

    def describe(self) -> str:
        name = self.properties.get("name", b"")
        return (f"{self.kind} device {self.id} ({name.decode() if isinstance(name, bytes) else name}, "
                f"{self.sm_count} SMs, {self.arch})")

    def close(self) -> None:
        """aclrtResetDevice: the captures still in progress are ended first (their graphs dropped;
        CUDA refuses cudaDeviceSynchronize while a stream captures), then the device is drained
        (cudaDeviceSynchronize: every stream, those whose handle was dropped included) and its
        streams are released, before the runtime frees the device's memory."""
        for stream in self.live_streams():
            if getattr(stream, "before_capture", None) is not None:
                try:
                    self.end_capture(stream)
                except Exception:  # noqa: BLE001 - an invalidated capture: nothing to keep either way
                    pass
        with self.gate.shared(), self.scope:
            self._drain()
            for stream in self.live_streams():
                stream.close()
            side, self._side_stream = self._side_stream, None
            if side is not None:   # the private stream (fakecupy's owns a worker thread)
                side.synchronize()
                release = getattr(side, "close", None)
                if release is not None:
                    release()
            pool = self._cublas_pool
            if pool is not None:   # after the drain: no queued GEMM uses them any more
                pool.close()
            drop_programs(self)   # the cached frozen launches' replay programs on this device
