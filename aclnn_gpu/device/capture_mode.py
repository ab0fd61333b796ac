"""The calling thread's CUDA stream-capture interaction mode around the library's potentially unsafe
calls (`thread_local_capture_mode`), and the cuda-bindings runtime it is set through.

CUDA forbids "potentially unsafe" API calls (cudaMalloc, cudaHostAlloc, cudaEventQuery,
cudaEventSynchronize, cudaStreamSynchronize, the synchronous cudaMemcpy / cudaMemset, ...) to every
thread while any thread captures a stream in global mode -- PyTorch's `torch.cuda.graph` default --
and such a call invalidates that capture (CUDA Runtime API, cudaThreadExchangeStreamCaptureMode). The
library makes such calls from whatever thread calls it (an upload ring slot waited for, a large
upload's staging buffer queried or allocated, the waits of a free, a synchronous copy), so each is
made with the calling thread in thread-local mode for its duration: captures on other threads are
ignored, while a capture the calling thread itself began outside relaxed mode still forbids them.
This is the mode PyTorch's NCCL watchdog thread switches to for its event queries (pytorch/pytorch
pull requests "Set watchdog runtime capture mode to thread local" and "Set event queries to happen
under thread-local mode"), for the same reason: the waits are on work queued before the capture,
which the capture does not contain. It is set push-pop, as the documentation advises.

Thread-local mode does not make a device-wide wait legal: cudaDeviceSynchronize while any stream of
the device captures is refused in every mode (CUDA Programming Guide, stream capture, "Prohibited and
Unhandled Operations"), so the cuda device never calls it (device/cuda.py, `_drain`).

CuPy's runtime module has no cudaThreadExchangeStreamCaptureMode; cuda-bindings has it (a
`(cudaError_t, previous mode)` tuple back). fakecupy brings a stand-in with the same signature.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


def cuda_bindings_runtime(cp: Any) -> Any:
    """cuda-bindings' `cuda.bindings.runtime` (fakecupy brings a stand-in of it with the same signatures)."""
    stand_in = getattr(cp, "cuda_bindings_runtime", None)
    if stand_in is not None:
        return stand_in
    from cuda.bindings import runtime as cudart
    return cudart


@contextlib.contextmanager
def capture_mode(cudart: Any, mode: str) -> Iterator[None]:
    """The calling thread in capture interaction mode `mode` (a cudaStreamCaptureMode member name) of the
    runtime `cudart` for the block, then back to its mode (push-pop, as CUDA's docs advise)."""
    err, previous = cudart.cudaThreadExchangeStreamCaptureMode(getattr(cudart.cudaStreamCaptureMode, mode))
    if err != cudart.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaThreadExchangeStreamCaptureMode: {getattr(err, 'name', err)}")
    try:
        yield
    finally:
        cudart.cudaThreadExchangeStreamCaptureMode(previous)


def thread_local_capture_mode(cp: Any) -> contextlib.AbstractContextManager[None]:
    """The calling thread in cudaStreamCaptureModeThreadLocal for the block, then back to its mode."""
    return capture_mode(cuda_bindings_runtime(cp), "cudaStreamCaptureModeThreadLocal")
