"""A functional call of a signature the call cache (functional/cache.py) holds: `Replay` offers the
methods of `Call` (functional/call.py) over the cached entry, running its plan on the caller's arrays on
the calling thread; `Retry` sends a call that cannot finish so back to the uncached path.

Part of layer 14, "functional" (docs/DESIGN.md, "Import layers").
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import cache as call_cache
from .arrays import array_kind, host_operand
from .call import Call, waited
from ..base.status import aclFormat
from ..meta.tensor import aclIntArray, aclTensor


class Retry(Exception):
    """A cached call that cannot finish from its entry: it runs uncached (and, when `uncacheable`,
    its signature is never cached again)."""

    def __init__(self, uncacheable: bool):
        super().__init__()
        self.uncacheable = uncacheable


class Replay:
    """A functional call of a cached signature (call_cache): `Call`'s methods over the entry. The
    arrays are not lent or described; the entry's plan runs on them on the calling thread."""

    __slots__ = ("name", "device", "impl", "entry", "prepared", "views", "kind", "inputs", "outputs", "ints")

    def __init__(self, name: str, device: Any, impl: Any, entry: call_cache.Entry,
                 prepared: dict[int, np.ndarray]):
        self.name, self.device, self.impl, self.entry, self.prepared = name, device, impl, entry, prepared
        self.views: list[np.ndarray | None] = []   # each operand's bytes, in the entry's slot order
        self.kind = "numpy"
        self.inputs = self.outputs = self.ints = 0

    def tensor(self, array: Any, name: str, fmt: int = aclFormat.ACL_FORMAT_ND) -> aclTensor:
        if array is None:
            return None  # type: ignore[return-value]
        if self.kind == "numpy":
            self.kind = array_kind(array)
        i = self.inputs
        self.inputs = i + 1
        host = self.prepared.get(id(array))
        if host is None:   # not an argument as passed (the signature holds those layouts): check it
            host = self.prepared[id(array)] = host_operand(array)
            if (host.shape, host.strides, host.dtype) != self.entry.layouts[i]:
                raise Retry(uncacheable=True)
        if self.device.registry.host_allocations and host.size:
            # an operand in aclrtMallocHost memory: the uncached path refuses it (ACLNN_ERR_PARAM_INVALID, host memory)
            found = self.device.registry.find(host.__array_interface__["data"][0], 1)
            if found is not None and not found.on_device:
                raise Retry(uncacheable=False)
        self.views.append(call_cache.bytes_of(host))
        return self.entry.tensors[i]

    def output(self, shape: Sequence[int], dtype: np.dtype, fmt: int = aclFormat.ACL_FORMAT_ND
               ) -> tuple[aclTensor, Any]:
        i = self.outputs
        self.outputs = i + 1
        tensor, expected_shape, expected_dtype = self.entry.outputs[i]
        handle = np.empty(shape, dtype)
        if handle.shape != expected_shape or handle.dtype != expected_dtype:
            raise Retry(uncacheable=True)
        self.views.append(call_cache.bytes_of(handle))
        return tensor, handle

    def int_array(self, values: Any, name: str) -> aclIntArray:
        i = self.ints
        self.ints = i + 1
        return self.entry.int_arrays[i]   # the signature holds the values

    def run(self, get_workspace_size: Callable[..., Any], execute: Callable[..., int], *args: Any) -> None:
        # as the stream's next task: earlier work on it first, and nothing queued meanwhile (by another
        # thread) starts until the plan has run
        worker = self.impl.worker
        waited(worker.hold, self.name)   # a failure of the stream's queued work is the call's AclnnError
        try:
            call_cache.run(self.entry, self.device, self.views)
        except Exception as e:  # noqa: BLE001 - the uncached path runs it again and reports what it reports
            raise Retry(uncacheable=isinstance(e, call_cache.OutsideSlots)) from e
        finally:
            worker.unhold()

    result = Call.result

__all__ = ["Retry", "Replay"]
