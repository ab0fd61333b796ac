"""The GPU side of `aclnn_gpu.torch`, for tests that run on the emulated device and on a real GPU alike.

`StandIn` answers `aclnn_gpu.torch.stream`'s seam (the six questions `TorchCuda` asks PyTorch and CuPy
on a GPU) with CPU tensors and the emulated device's CuPy-shaped streams (`emulator/fakecupy/`), so
the code a GPU runs (`TorchCall`, the two phases on PyTorch's stream, the registry lending, the capture
path) runs in CI:

- a "PyTorch stream" is a fakecupy stream (its worker thread is the queue), `cuda_stream` its handle;
  with the late stand-in (ACLNN_GPU_EMU_LATE=1) the default stream is fakecupy's legacy stream
  (handle 0), as PyTorch's is CUDA's legacy stream;
  `stream(s)` makes it current as `torch.cuda.stream(s)` does;
- the "caching allocator" is `empty`: CPU tensors filled with NaN (0xFF bytes for integers), each
  logged with the stream current when it was made, and kept until the stand-in closes (after its
  streams are drained): like the caching allocator, which reuses a freed block only in stream order,
  it never hands memory a queued kernel may still use back to anyone (a workspace is dropped by the
  call that made it before its kernels ran);
- `record_stream(tensor, stream)` keeps the tensor (any CPU tensor: the stand-in's "GPU" memory is the
  host's, freed at once when dropped) until the stand-in closes, and logs it: PyTorch's allocator
  frees a recorded block only after the work queued on the stream by the time of the free has run;
- `capturing` is the fakecupy stream's capture state;
- `pinned` (PyTorch's host allocator) is a copy, logged, kept until the stand-in closes (`pinned_live`
  sees which of them are still referenced at all);
- `host` names tensors the stand-in treats as host tensors among its "GPU" ones (by storage address),
  so the call's copy of a host tensor to the GPU runs too.

`Harness` is what a test drives: the same methods over the stand-in (kind "emulated") and over PyTorch's
CUDA streams and caching allocator (kind "cuda", on a machine with a GPU).
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from aclnn_gpu.torch import stream as torch_stream


class FakeTorchStream:
    """A PyTorch stream of the stand-in: a fakecupy stream and its handle."""

    def __init__(self, cupy_stream: Any):
        self.cupy = cupy_stream
        self.cuda_stream = cupy_stream.ptr

    def __repr__(self) -> str:
        return f"FakeTorchStream({self.cuda_stream})"


@dataclass
class Allocation:
    ptr: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple
    stream: int                          # the handle current when it was allocated


class StandIn:
    device_kind = "emulated"

    def __init__(self) -> None:
        from aclnn_gpu.emulator import fakecupy
        self.fakecupy = fakecupy
        self.streams: list[FakeTorchStream] = []
        # PyTorch's default stream is CUDA's legacy stream (handle 0); the late stand-in has it so
        # (it orders with blocking streams both ways); otherwise a stream of its own, as before
        self.default = FakeTorchStream(fakecupy.streams._legacy_stream(0)) if fakecupy.streams._late is not None else \
            self.new_stream()
        self._current = threading.local()
        self.allocations: list[Allocation] = []
        self.alive: list[torch.Tensor] = []
        self.recorded: list[tuple[int, int]] = []    # (storage address, stream handle) of record_stream
        self.external_calls: list[int] = []
        self.pinned_copies: list[torch.Tensor] = []
        self.pinned_live: "weakref.WeakSet[torch.Tensor]" = weakref.WeakSet()
        self.host: set[int] = set()                 # storage addresses of the "host" tensors

    # ------------------------------------------------------------------ the seam (torch_stream.TorchCuda's)
    def owns(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == "cpu" and tensor.untyped_storage().data_ptr() not in self.host

    def index(self, tensor: torch.Tensor) -> int:
        return 0

    def current_stream(self, index: int) -> FakeTorchStream:
        stack = getattr(self._current, "stack", None)
        return stack[-1] if stack else self.default

    def external(self, cp: Any, stream: FakeTorchStream, index: int) -> Any:
        assert cp is self.fakecupy, "the stand-in serves the emulated device only"
        self.external_calls.append(stream.cuda_stream)
        return stream.cupy

    def empty(self, shape: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        tensor = torch.empty(tuple(shape), dtype=dtype, device=device)
        if tensor.is_floating_point():
            tensor.fill_(float("nan"))
        else:
            tensor.view(torch.uint8).fill_(0xFF) if tensor.numel() else None
        self.allocations.append(Allocation(tensor.data_ptr(), tensor.untyped_storage().nbytes(), dtype, tuple(shape),
                                           self.current_stream(0).cuda_stream))
        self.alive.append(tensor)
        return tensor

    def record_stream(self, tensor: torch.Tensor, stream: FakeTorchStream) -> None:
        self.recorded.append((tensor.untyped_storage().data_ptr(), stream.cuda_stream))
        self.alive.append(tensor)

    def capturing(self, stream: FakeTorchStream, index: int) -> bool:
        return stream.cupy.is_capturing()

    def pinned(self, tensor: torch.Tensor) -> torch.Tensor:
        copy = tensor.clone()
        self.pinned_copies.append(copy)
        self.pinned_live.add(copy)
        return copy

    # ------------------------------------------------------------------ what PyTorch offers besides
    def new_stream(self) -> FakeTorchStream:
        stream = FakeTorchStream(self.fakecupy.Stream(non_blocking=True))
        self.streams.append(stream)
        return stream

    @contextlib.contextmanager
    def stream(self, stream: FakeTorchStream):
        stack = getattr(self._current, "stack", None)
        if stack is None:
            stack = self._current.stack = []
        stack.append(stream)
        try:
            yield stream
        finally:
            stack.pop()

    def close(self) -> None:
        for stream in self.streams:   # (the legacy stream is the device's: never closed)
            stream.cupy.close()
        self.alive = []


class Harness:
    """What the tests drive, over the stand-in ("emulated") or over PyTorch's CUDA ("cuda")."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "emulated":
            self.standin: StandIn | None = StandIn()
            self.previous = torch_stream.set_backend(self.standin)
            self.gpu: Any = self.standin
            self.device = torch.device("cpu")
        else:
            self.standin = None
            self.previous = None
            self.gpu = torch_stream.backend()
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.allocations: list[tuple[int, int, torch.dtype, int]] = []   # the seam's `empty`: ptr, bytes, dtype, stream
        self.recorded: list[tuple[int, int]] = []   # the seam's `record_stream`: storage address, stream handle
        self._spy()

    def _spy(self) -> None:
        """Log what the library asks the seam for (on the instance: the class stays as it is)."""
        gpu, empty, record_stream = self.gpu, self.gpu.empty, self.gpu.record_stream

        def spy_empty(shape: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
            tensor = empty(shape, dtype, device)
            self.allocations.append((tensor.data_ptr(), tensor.untyped_storage().nbytes(), dtype,
                                     self.handle(self.current())))
            return tensor

        def spy_record_stream(tensor: torch.Tensor, stream: Any) -> None:
            self.recorded.append((tensor.untyped_storage().data_ptr(), self.handle(stream)))
            record_stream(tensor, stream)
        gpu.empty, gpu.record_stream = spy_empty, spy_record_stream
        self._restore = lambda: (delattr(gpu, "empty"), delattr(gpu, "record_stream"))

    # ------------------------------------------------------------------ streams
    def current(self) -> Any:
        return self.gpu.current_stream(0) if self.standin is not None else torch.cuda.current_stream()

    def default(self) -> Any:
        return self.standin.default if self.standin is not None else torch.cuda.default_stream()

    def new_stream(self) -> Any:
        return self.standin.new_stream() if self.standin is not None else torch.cuda.Stream()

    def stream(self, stream: Any):
        return self.standin.stream(stream) if self.standin is not None else torch.cuda.stream(stream)

    @staticmethod
    def handle(stream: Any) -> int:
        return int(stream.cuda_stream)

    def synchronize(self, stream: Any) -> None:
        if self.standin is not None:
            stream.cupy.synchronize()
        else:
            stream.synchronize()

    def wait_stream(self, waiter: Any, producer: Any) -> None:
        """`waiter.wait_stream(producer)`: later work on waiter runs after what producer has queued."""
        if self.standin is not None:
            event = self.standin.fakecupy.Event()
            event.record(producer.cupy)
            waiter.cupy.wait_event(event)
        else:
            waiter.wait_stream(producer)

    @contextlib.contextmanager
    def blocked(self, stream: Any):
        """`stream` cannot start its queued work inside the block (the stand-in: a task that waits for the
        block's end; a GPU: a long spin kernel). Yields a function telling whether the stream is still
        held back, i.e. that nothing has waited for it."""
        if self.standin is not None:
            gate = threading.Event()
            stream.cupy.submit(lambda: gate.wait(60))
            try:
                yield lambda: not gate.is_set()
            finally:
                gate.set()
        else:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(2_000_000_000)          # about a second: the test's calls take milliseconds
            yield lambda: not stream.query()

    def close(self) -> None:
        self._restore()
        if self.standin is not None:
            for stream in self.standin.streams:
                stream.cupy.synchronize()
            torch_stream.set_backend(self.previous)
            self.standin.close()
