"""A CuPy stand-in whose launches and copies return at once, for timing the library's own Python.

The `cuda` device's code (`aclnn_gpu/device/cuda.py`) runs over it unchanged: memory is host memory
(`emulator/fakecupy/memory.py`'s allocator), but a kernel launch, an asynchronous copy or memset, an event
record, a stream synchronize, a stream capture and a graph launch do nothing; `null_cublas()` is a
libcublas whose C entry points return at once (bench/null_cublas.c, compiled on first use), under the
library's own GEMM wrapper. What a call then costs is what the library's code costs on a GPU before
CuPy's own few microseconds per launch and cuBLAS's work inside its entry points:
the "cuda code path" tables of `python -m bench` (bench/host_overhead.py, bench/capture.py). Never
a device to compute with.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aclnn_gpu.emulator import fakecupy

SM_COUNT = 132  # an H100's: grids are sized as on the GPU the figures stand for


class Stream:
    _ids = iter(range(1, 1 << 62))

    def __init__(self, non_blocking: bool = False, null: bool = False):
        self.ptr = next(Stream._ids)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def begin_capture(self, mode: int | None = None) -> None:
        return None

    def end_capture(self) -> Graph:
        return Graph()


class Graph:
    """A captured graph whose launch returns at once (CuPy's cudaGraphLaunch is not the library's cost)."""

    def launch(self, stream: Any = None) -> None:
        return None


class Event:
    done = True

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        return None

    def record(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None


class RawKernel:
    max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Any = None) -> None:
        return None


class RawModule:
    def __init__(self, code: str = "", options: Sequence[str] = (), name_expressions: Sequence[str] = ()):
        return None

    def get_function(self, expr: str) -> RawKernel:
        return RawKernel()

    def compile(self, log_stream: Any = None) -> None:   # kernels/shipped.py compiles (and times) up front
        return None


class _Runtime:
    streamCaptureModeGlobal, streamCaptureModeThreadLocal, streamCaptureModeRelaxed = 0, 1, 2

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:
        return {"multiProcessorCount": SM_COUNT, "name": b"instant CuPy stand-in", "totalGlobalMem": 0}

    @staticmethod
    def deviceSynchronize() -> None:
        return None

    getDevice = staticmethod(fakecupy.cuda.runtime.getDevice)   # the device `Device` makes current

    memcpy = memcpyAsync = memset = memsetAsync = streamSynchronize = hostRegister = hostUnregister = \
        staticmethod(lambda *args: None)


_null = Stream()
cuda = SimpleNamespace(alloc=fakecupy.alloc, alloc_pinned_memory=fakecupy.alloc, Stream=Stream, Event=Event,
                       Graph=Graph,
                       get_elapsed_time=lambda start, end: 0.0, get_current_stream=lambda: _null,
                       runtime=_Runtime(), MemoryPointer=fakecupy.MemoryPointer, Device=fakecupy.Device)


# cuda-bindings' runtime (the capture-mode exchange, the external event record): fakecupy's stand-in,
# a thread-local store and a tuple back, about what the C call costs
cuda_bindings_runtime = fakecupy.cuda_bindings_runtime

NULL_CUBLAS_SOURCE = Path(__file__).with_name("null_cublas.c")


def null_cublas() -> Any:
    """The entry points kernels/gemm.py binds (`gemm.bind_functions`) in bench/null_cublas.c, built once
    into the library's compile cache with the emulator's C++ compiler and loaded through ctypes, as the
    real libcublas is."""
    from aclnn_gpu.kernels import gemm
    from aclnn_gpu.emulator import build
    source = NULL_CUBLAS_SOURCE.read_bytes()
    target = build.cache_dir() / f"null_cublas_{hashlib.sha256(source).hexdigest()[:16]}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        subprocess.run([build.CXX, "-x", "c++", "-O2", "-shared", "-fPIC", str(NULL_CUBLAS_SOURCE), "-o", tmp],
                       check=True, capture_output=True)
        os.replace(tmp, target)   # atomic: a concurrent build never loads half a library
    return gemm.bind_functions(ctypes.CDLL(str(target)))
