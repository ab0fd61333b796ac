"""The runtime's stream and event handles (C's aclrtStream, aclrtEvent) and the checks every module
of the runtime makes on them: a live handle of the right kind, of a device still in use, and on the
device the work runs on; plus a stream's synchronisation with the failure of its queued work
reported as a status. Shared by `streams.py`, `memory.py`, `devices.py` and `callbacks.py`, and
re-exported by the package (`resolve_stream`, `stream_owner`) for the layers above.
"""
from __future__ import annotations

from typing import Any

from ..base.errors import OpError, fail, live_handle
from ..base.status import aclError
from ..device.base import Device, DeviceEvent, DeviceStream
from ..device.current import get_device

PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID


class aclrtStream:
    """A stream handle (C's aclrtStream)."""

    __slots__ = ("impl", "device", "destroyed", "__weakref__")

    def __init__(self, impl: DeviceStream, device: Device):
        self.impl = impl
        self.device = device
        self.destroyed = False

    def __repr__(self) -> str:
        return f"aclrtStream({self.device.kind}{', destroyed' if self.destroyed else ''})"


class aclrtEvent:
    """An event handle (C's aclrtEvent)."""

    __slots__ = ("impl", "device", "destroyed", "capture", "__weakref__")

    def __init__(self, impl: DeviceEvent, device: Device):
        self.impl = impl
        self.device = device
        self.destroyed = False
        self.capture = None   # the capture its latest record was made in (runtime/capture.py), else None


def stream_owner(stream: Any, fn: str, status: int = PARAM) -> Device:
    """The live device of a stream handle (not None), or OpError."""
    if stream.__class__ is not aclrtStream or stream.destroyed:   # (every execute passes here: one test first)
        live_handle(stream, aclrtStream, fn, "stream", status, destroyer="aclrtDestroyStream")   # raises, or a subclass
    if stream.device.stale is not None:
        fail(status, f"{fn}: stream belongs to device {stream.device.id}, which {stream.device.stale}")
    return stream.device


def resolve_stream(stream: Any, fn: str, status: int = PARAM, device: Device | None = None) -> DeviceStream:
    """The device stream for a handle that enqueues work on `device` (default: the calling thread's
    current device); None is that device's default stream. A stream of another device is refused."""
    if device is None:
        device = get_device()
    if stream is None:
        return device.default_stream
    owner = stream_owner(stream, fn, status)
    if owner is not device:
        fail(status, f"{fn}: stream belongs to device {owner.id}, but this work runs on device {device.id} "
                     "(use a stream created while that device was current)")
    return stream.impl


def event_impl(event: Any, fn: str, what: str = "event") -> DeviceEvent:
    """The device event of a live event handle of a device still in use, or OpError."""
    live_handle(event, aclrtEvent, fn, what, PARAM, destroyer="aclrtDestroyEvent")
    if event.device.stale is not None:
        fail(PARAM, f"{fn}: {what} belongs to device {event.device.id}, which {event.device.stale}")
    return event.impl


def sync_stream(impl: DeviceStream, fn: str) -> None:
    """Wait for everything queued on `impl`; a failure of that work becomes OpError naming `fn`."""
    try:
        impl.synchronize()
    except OpError as e:
        fail(e.status, f"{fn}: queued work failed: {e.message}")
    except Exception as e:  # noqa: BLE001 - a failure of queued work is reported, never raised
        fail(aclError.ACL_ERROR_RT_INTERNAL_ERROR, f"{fn}: queued work failed: {type(e).__name__}: {e}")
