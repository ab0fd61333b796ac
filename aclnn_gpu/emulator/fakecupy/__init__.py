"""A CuPy-shaped layer over host memory and the CPU emulator: just the names `device/cuda.py`
uses (`cuda.Device`, `cuda.alloc`, `cuda.alloc_pinned_memory`, `cuda.Stream`, `cuda.Event`,
`cuda.get_elapsed_time`, `cuda.runtime.*`, `RawModule` from source or from a shipped cubin), so that
the emulated device is the cuda device's own code.

Device memory is host memory; each stream is a `HostStream` worker; a kernel launch compiles the
`.cu` source for the CPU (cached by source hash) and queues its execution on the current stream.
Several GPUs are mirrored as CuPy has them: `cuda.Device(i)` is a context manager that makes `i`
the calling thread's current device (a per-thread stack, as CuPy's), streams belong to the device
current when they were made, `runtime.deviceSynchronize()` drains only the current device's
streams, and `runtime.getDeviceCount()` is `ACLNN_GPU_DEVICE_COUNT` (default 1). `SM_COUNTS` gives
a virtual device its own SM count (tests give devices different ones to see which one a plan reads).
Stream capture as CuPy has it: `Stream.begin_capture(mode)`, `end_capture()` -> `Graph`,
`Graph.launch(stream)`; what a capturing stream is given (launches, copies, memsets, event records
and waits) is recorded by its worker (`host.stream.CapturedWork`), and a launch replays the list as
one task on the target stream's worker.

As strict as CUDA and CuPy where the cuda device's code could go wrong on a GPU (a suite green over
this layer must not fail on the driver's rules there). Refusals raise `CUDARuntimeError` (CuPy's
shape: a RuntimeError whose `status` is the cudaError_t and whose message starts with its name) and,
where CUDA invalidates the capture, invalidate it (its `end_capture` then raises
cudaErrorStreamCaptureInvalidated). CUDA Programming Guide, "Prohibited and Unhandled Operations" of
stream capture, and "Stream and Event Behavior" of multi-device programming:
- cudaDeviceSynchronize while a stream of the device captures, and a synchronize of a capturing stream:
  cudaErrorStreamCaptureUnsupported, the capture invalidated;
- the legacy stream (ptr 0: the synchronous memcpy / memset, async work given stream 0) while a
  blocking stream of the device captures: cudaErrorStreamCaptureImplicit, the capture invalidated;
- `begin_capture` on the legacy stream: CuPy's RuntimeError (cupy/cuda/stream.pyx, begin_capture);
- `with stream:` / `stream.use()` under another current device: CuPy's RuntimeError
  (check_stream_device_match in cupy/cuda/stream.pyx); a kernel launched on a stream of another
  device: CUDA_ERROR_INVALID_HANDLE; an event recorded on a stream of another device:
  cudaErrorInvalidResourceHandle; a launch with more than 48 KiB of dynamic shared memory without
  `max_dynamic_shared_size_bytes`: CUDA_ERROR_INVALID_VALUE;
- cudaHostRegister without cudaHostRegisterPortable page-locks the range for the registering
  device's context only (cudaHostRegister's documentation), which `pointerGetAttributes` reflects;
- capture modes (cudaThreadExchangeStreamCaptureMode): a potentially unsafe call from a thread whose
  mode forbids it during a global or thread-local capture fails with cudaErrorStreamCaptureUnsupported
  and invalidates that capture (`_unsafe`).
With ACLNN_GPU_EMU_LATE=1 (the late stand-in: late.py, and emulator/fakepool.py) it is also as late
as a GPU may be: streams start late, pinned sources are read when the copy runs, freed memory comes
back poisoned in CuPy's pool order, and the legacy stream orders with blocking streams.
CuPy's runtime has no cudaEventRecordWithFlags: `cuda_bindings_runtime` stands in for
`cuda.bindings.runtime` instead, with its signature (handles as ints, a `(cudaError_t,)` tuple back).

This package is the face CuPy has (`cuda`, the classes and functions the device imports); the code
is in its modules: `errors` (CUDARuntimeError, CUDADriverError, cudaError_t), `streams` (the current
device and stream, streams, events, graphs, the capture rules, the late stand-in's state), `late`
(the late stand-in's settings), `memory` (device and pinned memory, host page locks), `runtime`
(cupy.cuda.runtime, cupy.cuda.Device, the virtual devices' properties), `bindings` (cuda-bindings'
runtime and driver calls CuPy lacks), `modules` (RawModule, RawKernel). A test that changes a
setting changes it in the module that owns it (`runtime.DRIVER_VERSION`, `streams.set_late`,
`memory._pools`).
"""
from __future__ import annotations

from types import SimpleNamespace

from . import memory, runtime, streams
from .bindings import cuda_bindings_driver, cuda_bindings_runtime
from .errors import CUDADriverError, CUDARuntimeError, cudaError_t
from .late import LateRules, late_from_environment
from .memory import DEVICE_ALIGN, HOST_REGISTER_PORTABLE, MemoryPointer, alloc, alloc_pinned_memory
from .modules import STATIC_SHARED_LIMIT, RawKernel, RawModule, module_loads
from .runtime import (COMPUTE_CAPABILITIES, COMPUTE_CAPABILITY, DRIVER_VERSION, SM_COUNT, SM_COUNTS, Device,
                      _Runtime)
from .streams import Event, Graph, Stream, device_workers, get_current_stream, get_elapsed_time, set_late

cuda = SimpleNamespace(Device=Device, alloc=alloc, alloc_pinned_memory=alloc_pinned_memory, Stream=Stream, Event=Event,
                       Graph=Graph, get_elapsed_time=get_elapsed_time, get_current_stream=get_current_stream,
                       runtime=_Runtime(), MemoryPointer=MemoryPointer)

__all__ = ["COMPUTE_CAPABILITIES", "COMPUTE_CAPABILITY", "CUDADriverError", "CUDARuntimeError", "DEVICE_ALIGN",
           "DRIVER_VERSION", "Device", "Event", "Graph", "HOST_REGISTER_PORTABLE", "LateRules", "MemoryPointer",
           "RawKernel", "RawModule", "SM_COUNT", "SM_COUNTS", "STATIC_SHARED_LIMIT", "Stream", "alloc",
           "alloc_pinned_memory", "cuda", "cuda_bindings_driver", "cuda_bindings_runtime", "cudaError_t",
           "device_workers", "get_current_stream", "get_elapsed_time", "late_from_environment", "memory",
           "module_loads", "runtime", "set_late", "streams"]
