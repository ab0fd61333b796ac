"""The `cuda` device, written against CuPy: streams, events, the memory pool, RawModule kernels and
cuBLAS. The emulated device is this same class over `device/fakecupy.py`, a CuPy-shaped layer that
runs on the CPU, so everything here except the few calls into real CuPy is executed in CI.

What only a GPU can run (and no test here reaches) is the CuPy module itself: `cupy.cuda.alloc`,
`Stream`, `Event`, `runtime.memcpyAsync`/`memsetAsync`, `RawModule` compilation and launch, and
the cuBLAS call in `kernels/gemm.py`. Everything else is shared with the emulated device.

One `CudaDevice` per GPU: every call that makes or uses a CUDA resource (allocations, streams,
events, kernel compiles and launches, the cuBLAS handle CuPy keeps per device) runs inside
`self.scope` (`cupy.cuda.Device(id)`), so a device object never touches another GPU's context
whatever device the calling thread has current; the SM count and the compute capability (what
CuPy compiles the kernels for) are read from that device.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import numpy as np

from ..kernels import loader
from .base import Device, DeviceEvent, DeviceStream
from .registry import Allocation, Registry
from .uploads import MEMCPY_DEFAULT, UploadRing



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
        self.cupy = cp.cuda.Stream(non_blocking=False)

    def synchronize(self) -> None:
        self.cupy.synchronize()

    def close(self) -> None:
        """Drain, then release the stream now (not whenever its handle is collected)."""
        stream, self.cupy = self.cupy, None
        if stream is not None:
            stream.synchronize()
            release = getattr(stream, "close", None)  # fakecupy's streams own a worker thread
            if release is not None:
                release()


class CudaEvent(DeviceEvent):
    def __init__(self, cp: Any):
        self.cp = cp
        self.cupy = cp.cuda.Event()
        self._recorded = False

    def record(self, stream: DeviceStream) -> None:
        self.cupy.record(stream.cupy)  # type: ignore[attr-defined]
        self._recorded = True

    def synchronize(self) -> None:
        self.cupy.synchronize()

    def recorded(self) -> bool:
        return self._recorded

    def query(self) -> bool:
        return bool(self.cupy.done)

    def elapsed_ms(self, end: DeviceEvent) -> float:
        return float(self.cp.cuda.get_elapsed_time(self.cupy, end.cupy))  # type: ignore[attr-defined]


class CudaKernelContext:
    """The KernelContext of a plan running on one stream of a CudaDevice."""

    def __init__(self, device: "CudaDevice", stream: CudaStream):
        self.device = device
        self.stream = stream
        self.sm_count = device.sm_count   # of the device that runs the plan (not device 0's)
        self.arch = device.arch           # its occupancy limits size grids (kernels/occupancy.py)

    def upload(self, dst: int, host: np.ndarray) -> None:
        self.device.uploads.upload(dst, host, self.stream.cupy)

    def launch(self, file: str, expr: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               shared_mem: int = 0) -> None:
        kernel = self.device.kernel(file, expr)
        if shared_mem > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = shared_mem
        with self.stream.cupy:
            kernel(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)

    def gemm_strided_batched(self, *args: Any, **kwargs: Any) -> None:
        self.device.gemm(self.stream.cupy, *args, **kwargs)


class CudaDevice(Device):
    def __init__(self, cp: Any, kind: str = "cuda", device_id: int = 0):
        self.cp = cp
        self.kind = kind
        self.id = device_id
        self.registry = Registry(device_id)
        self._streams: "weakref.WeakSet[CudaStream]" = weakref.WeakSet()
        self._modules: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}
        self._module_lock = threading.Lock()
        self.properties = cp.cuda.runtime.getDeviceProperties(device_id)
        self.sm_count = int(self.properties["multiProcessorCount"])
        self.arch = f"sm_{self.properties.get('major', 0)}{self.properties.get('minor', 0)}"
        with self.scope:
            self.default_stream = self.create_stream()
            self.uploads = UploadRing(cp)

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
        with self.scope:
            return self._add(self.cp.cuda.alloc(size), size, True)

    def malloc_host(self, size: int) -> int:
        with self.scope:
            return self._add(self.cp.cuda.alloc_pinned_memory(size), size, False)

    def free(self, ptr: int) -> None:
        with self.scope:
            self.cp.cuda.runtime.deviceSynchronize()  # cudaFree semantics: no queued work still uses it
        self.registry.remove(ptr)

    def synchronize_quietly(self) -> None:
        """Wait for every stream of this device (a copy from another device waits for it too)."""
        with self.scope:
            self.cp.cuda.runtime.deviceSynchronize()

    def _copy(self, dst: int, src: int, count: int, stream: DeviceStream | None) -> None:
        runtime = self.cp.cuda.runtime
        with self.scope:   # cudaMemcpyDefault with unified addressing also copies between GPUs
            if stream is None:
                runtime.deviceSynchronize()
                runtime.memcpy(dst, src, count, MEMCPY_DEFAULT)
            else:
                runtime.memcpyAsync(dst, src, count, MEMCPY_DEFAULT, stream.cupy.ptr)  # type: ignore[attr-defined]

    def copy(self, dst: int, src: int, count: int, stream: DeviceStream | None) -> None:
        self._copy(dst, src, count, stream)

    def copy_from_host(self, dst: int, host: memoryview, stream: DeviceStream | None) -> None:
        staged = np.frombuffer(host, np.uint8)
        self._copy(dst, staged.ctypes.data, staged.nbytes, stream)
        if stream is not None:  # the caller may reuse its (pageable) buffer as soon as we return
            stream.synchronize()

    def copy_to_host(self, host: memoryview, src: int, stream: DeviceStream | None) -> None:
        target = np.frombuffer(host, np.uint8)
        self._copy(target.ctypes.data, src, target.nbytes, stream)
        if stream is not None:
            stream.synchronize()

    def memset(self, ptr: int, value: int, count: int, stream: DeviceStream | None) -> None:
        runtime = self.cp.cuda.runtime
        with self.scope:
            if stream is None:
                runtime.deviceSynchronize()
                runtime.memset(ptr, value & 0xFF, count)
            else:
                runtime.memsetAsync(ptr, value & 0xFF, count, stream.cupy.ptr)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ streams and events
    def create_stream(self) -> CudaStream:
        with self.scope:
            stream = CudaStream(self.cp)
        self._streams.add(stream)
        return stream

    def live_streams(self) -> list[DeviceStream]:
        return [s for s in list(self._streams) if s.cupy is not None]

    def create_event(self) -> CudaEvent:
        with self.scope:
            return CudaEvent(self.cp)

    def stream_wait_event(self, stream: DeviceStream, event: DeviceEvent) -> None:
        if event.recorded():   # the event may belong to another device: CUDA allows that wait
            with self.scope:
                stream.cupy.wait_event(event.cupy)  # type: ignore[attr-defined]

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
                if module is None:   # compiled (lazily) for this device's architecture
                    module = self.cp.RawModule(code=loader.source(file), options=loader.nvrtc_options(),
                                               name_expressions=loader.name_expressions(file))
                    self._modules[file] = module
                kernel = self._kernels[key] = module.get_function(expr)
        return kernel

    def gemm(self, stream: Any, *args: Any, **kwargs: Any) -> None:
        """cublasGemmStridedBatchedEx on `stream` (a cupy Stream); kernels/gemm.CublasGemm."""
        from ..kernels import gemm
        gemm.CublasGemm(stream)(*args, **kwargs)

    def enqueue(self, stream: DeviceStream, plan: Any, workspace: int) -> None:
        with self.scope:   # launches, module loads and the cuBLAS handle of this GPU
            plan.run_kernels(CudaKernelContext(self, stream), workspace)  # type: ignore[arg-type]

    def describe(self) -> str:
        name = self.properties.get("name", b"")
        return (f"{self.kind} device {self.id} ({name.decode() if isinstance(name, bytes) else name}, "
                f"{self.sm_count} SMs, {self.arch})")

    def close(self) -> None:
        with self.scope:
            self.cp.cuda.runtime.deviceSynchronize()
