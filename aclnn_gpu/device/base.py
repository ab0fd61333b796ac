"""The interface every device implements: memory, streams, events and running an operator plan.

The runtime layer (`aclnn_gpu.runtime`) validates every argument (pointers against the registry,
handles, sizes) before it calls a device, so a device method may assume its inputs are sound.
Three implementations: `cpu` (NumPy on host buffers, streams are worker threads), `cuda` (CuPy)
and `emulated` (the cuda device's code over a CuPy-shaped layer that runs the kernels on the CPU).
"""
from __future__ import annotations

import abc
import os
import time
from typing import Any

import numpy as np

from ..host.memory import host_memory_info
from .registry import Registry


STOP_TIMEOUT_ENV = "ACLNN_GPU_STOP_TIMEOUT_S"
STOP_TIMEOUT_S = 5.0   # default: how long a reset / aclFinalize waits on a blocking host callback


def stop_timeout_s() -> float:
    """How long aclrtResetDevice and aclFinalize let a blocking host callback keep a stream from
    draining before they stop it: ACLNN_GPU_STOP_TIMEOUT_S (seconds, default 5; a bad value: 5)."""
    try:
        value = float(os.environ.get(STOP_TIMEOUT_ENV, "") or STOP_TIMEOUT_S)
    except ValueError:
        return STOP_TIMEOUT_S
    return value if value >= 0 else STOP_TIMEOUT_S


class DeviceStream(abc.ABC):
    """A device's in-order queue. `capture` is the runtime's capture state (`aclnn_gpu/runtime/capture.py`)
    while the stream captures, else None: the one attribute the hot paths read."""

    capture: Any = None
    kernel_context: Any = None   # a kernel device's context for this stream, made at its first enqueue

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for queued work; raise the first failure of queued work (once)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Drain and release."""


class DeviceEvent(abc.ABC):
    @abc.abstractmethod
    def record(self, stream: DeviceStream) -> None: ...

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def recorded(self) -> bool: ...

    @abc.abstractmethod
    def query(self) -> bool:
        """True when the last recording has completed (or none was made)."""

    @abc.abstractmethod
    def elapsed_ms(self, end: "DeviceEvent") -> float: ...


class Device(abc.ABC):
    """One device (one GPU, or one virtual device of the cpu / emulated kinds). It owns the memory,
    streams and events made through it; `id` is its ACL device id. `stale` is set (to why) when the
    device can no longer be used: reset by aclrtResetDevice, or inherited from the parent across fork()."""

    kind: str = "abstract"
    id: int = 0
    stale: str | None = None
    stopping_since: float | None = None   # time.monotonic() when a reset / aclFinalize began draining
    callbacks_stopped = 0                 # blocking host callbacks that draining stopped waiting for
    registry: Registry
    default_stream: DeviceStream

    # ------------------------------------------------------------------ memory
    @abc.abstractmethod
    def malloc(self, size: int) -> int: ...

    @abc.abstractmethod
    def malloc_host(self, size: int) -> int: ...

    # the page size aclrtPointerGetAttributes reports for device memory: the host's (cpu), CUDA's 2 MiB (cuda)
    page_size = os.sysconf("SC_PAGE_SIZE")

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the device's memory: here the host's physical memory."""
        return host_memory_info()

    @abc.abstractmethod
    def zero_fresh(self, ptr: int, count: int) -> None:
        """Zero [ptr, ptr + count) of an allocation malloc has just made, complete on return: the memory
        is then usable on any stream (aclrtMalloc's padding)."""

    @abc.abstractmethod
    def free(self, ptr: int) -> None:
        """Release an allocation made by malloc or malloc_host (after the device is idle)."""

    @abc.abstractmethod
    def copy(self, dst: int, src: int, count: int, stream: DeviceStream | None) -> None:
        """Copy between two registered ranges (device or host); stream None = synchronous."""

    @abc.abstractmethod
    def copy_from_host(self, dst: int, host: memoryview, stream: DeviceStream | None) -> None:
        """Copy the bytes of a host buffer object into a registered range."""

    @abc.abstractmethod
    def copy_to_host(self, host: memoryview, src: int, stream: DeviceStream | None) -> None:
        """Copy a registered range into a writable host buffer object."""

    @abc.abstractmethod
    def memset(self, ptr: int, value: int, count: int, stream: DeviceStream | None) -> None: ...

    # ------------------------------------------------------------------ streams and events
    @abc.abstractmethod
    def create_stream(self) -> DeviceStream: ...

    @abc.abstractmethod
    def create_event(self) -> DeviceEvent: ...

    @abc.abstractmethod
    def stream_wait_event(self, stream: DeviceStream, event: DeviceEvent) -> None: ...

    def synchronize(self) -> None:
        """Wait for every stream of the device."""
        for stream in self.live_streams():
            stream.synchronize()

    @abc.abstractmethod
    def live_streams(self) -> list[DeviceStream]: ...

    @abc.abstractmethod
    def synchronize_quietly(self) -> None:
        """Wait for every stream without consuming their pending errors."""

    # ------------------------------------------------------------------ peer access
    @abc.abstractmethod
    def can_access_peer(self, peer: int) -> bool: ...

    @abc.abstractmethod
    def enable_peer_access(self, peer: int) -> None: ...

    @abc.abstractmethod
    def disable_peer_access(self, peer: int) -> None: ...

    # ------------------------------------------------------------------ operators
    @abc.abstractmethod
    def enqueue(self, stream: DeviceStream, plan: Any, workspace: int) -> None:
        """Queue an operator plan (see `aclnn_gpu.plans.plan`) on `stream`."""

    # ------------------------------------------------------------------ stream capture (ACL graphs)
    @abc.abstractmethod
    def begin_capture(self, stream: DeviceStream) -> None:
        """From now on, work put on `stream` is recorded instead of run (the runtime set stream.capture)."""

    @abc.abstractmethod
    def end_capture(self, stream: DeviceStream) -> Any:
        """Stop recording; the device's graph of what was recorded."""

    @abc.abstractmethod
    def launch_graph(self, graph: Any, stream: DeviceStream) -> None:
        """Queue one replay of `graph` on `stream` (any stream of this device)."""

    @abc.abstractmethod
    def graph_busy(self, graph: Any) -> bool:
        """True while a replay of `graph` is queued or running."""

    def drain_overdue(self) -> bool:
        """True when a reset / aclFinalize has been draining this device's streams for longer than
        `stop_timeout_s()`: a blocking host callback stops waiting then (and is counted), so that no
        reset hangs on a callback nobody processes."""
        since = self.stopping_since
        return since is not None and time.monotonic() - since > stop_timeout_s()

    def host_view(self, ptr: int, nbytes: int) -> np.ndarray:  # pragma: no cover - host devices only
        raise NotImplementedError(f"{self.kind} memory has no host view")

    def describe(self) -> str:
        return self.kind

    def close(self) -> None:  # noqa: B027 - optional hook: a device may hold nothing to release
        """Release everything (aclFinalize / aclrtResetDevice)."""
