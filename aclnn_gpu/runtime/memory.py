"""Memory (acl_rt.h): device and host allocations (aclrtMalloc and its variants, aclrtFree*),
copies (aclrtMemcpy, its async and 2D forms), fills (aclrtMemset*), cache maintenance, memory
information and pointer attributes.

Every address is checked against the live allocations (`Device.registry`) before anything is
touched. Memory belongs to the device current when it was allocated; another device's memory is
used only where peer access is enabled, except that `aclrtMemcpy` copies between any two devices
and any device's memory may be freed from any thread.

Capture (`graph/`): the synchronous calls a capture's mode forbids are refused behind one check of
`capture.ACTIVE`; an async copy or fill on a capturing stream keeps the memory it uses alive for
the model (`Capture.hold`).
"""
from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

from ..base.errors import c_api, fail
from ..base.status import aclError, aclrtMemcpyKind
from ..device.base import Device
from ..device.current import find_allocation, get_device, locate
from . import capture
from .calls import forward_status
from .handles import aclrtStream, resolve_stream

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID
MAX_ALLOCATION = (1 << 63) - 1   # PTRDIFF_MAX: no allocation of one address space is larger


def _size(value: Any, fn: str, what: str, allow_zero: bool = False) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        fail(PARAM, f"{fn}: {what} {value!r} must be a {'non-negative' if allow_zero else 'positive'} integer")
    return int(value)


# ---------------------------------------------------------------------------- allocations
def _allocate(fn: str, size: int, on_device: bool) -> int:
    device = get_device()
    if capture.ACTIVE:
        capture.refuse_unsafe(fn)
    if size > MAX_ALLOCATION:   # before NumPy's / CuPy's size conversions (ValueError, OverflowError)
        fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: {size} bytes exceed the largest allocation an address "
                                                      f"space holds ({MAX_ALLOCATION} bytes)")
    try:
        return device.malloc(size) if on_device else device.malloc_host(size)
    except (MemoryError, ValueError, OverflowError):   # NumPy: "array is too big" for what no memory holds
        fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: out of memory allocating {size} bytes")
    except Exception as e:  # CuPy's OutOfMemoryError is not a MemoryError
        if "OutOfMemory" in type(e).__name__:
            fail(aclError.ACL_ERROR_RT_MEMORY_ALLOCATION, f"{fn}: out of memory allocating {size} bytes")
        raise


def cann_size(size: int, padded: bool = True) -> int:
    """The bytes CANN makes usable for a device allocation of `size` (acl_rt.h): aclrtMalloc's "real
    alloc size is aligned to 32 bytes and padded with 32 bytes", ALIGN_UP(size, 32) + 32 (`padded`);
    aclrtMallocAlign32's "aligned to 32 bytes with no padding", ALIGN_UP(size, 32). CANN's own samples
    rely on it (aclnnCrossEntropyLossGrad's copies an 8-byte host vector into a 16-byte int64 target)."""
    return -(-size // 32) * 32 + (32 if padded else 0)


def _device_malloc(fn: str, size: Any, policy: Any, padded: bool) -> tuple[int, int]:
    """aclrtMalloc / aclrtMallocAlign32: the allocation holds, and the pointer checks accept, CANN's
    usable size; its first byte is 64-byte aligned (the devices allocate on 64 bytes or more). The
    bytes between the caller's size and that size are zeroed: CANN's aclnnCrossEntropyLossGrad sample
    copies 8 bytes into aclrtMalloc(8) and reads 16 as int64 {0, 0}."""
    size = _size(size, fn, "size")
    if not isinstance(policy, numbers.Integral) or (int(policy) & 0xFF) > 7:
        fail(PARAM, f"{fn}: policy {policy!r} is not an aclrtMemMallocPolicy")
    usable = cann_size(size, padded)
    ptr = _allocate(fn, usable, True)
    device = get_device()
    if usable > size:   # the bytes past the caller's size read as 0, as CANN's samples expect of them,
        device.zero_fresh(ptr + size, usable - size)   # on whichever stream the caller then uses it
    alloc = device.registry.get(ptr)
    if alloc is not None:
        alloc.origin = f"{fn}({size}): ALIGN_UP({size}, 32){' + 32' if padded else ''} = {usable} usable bytes"
    return OK, ptr


@c_api(n_out=1)
def aclrtMalloc(size: int, policy: int = 0) -> tuple[int, int]:
    return _device_malloc("aclrtMalloc", size, policy, True)


@c_api(n_out=1)
def aclrtMallocAlign32(size: int, policy: int = 0) -> tuple[int, int]:
    return _device_malloc("aclrtMallocAlign32", size, policy, False)


@c_api(n_out=1)
def aclrtMallocCached(size: int, policy: int = 0) -> tuple[int, int]:
    """aclrtMalloc's memory (the devices here keep no separate cached heap)."""
    status, ptr = aclrtMalloc(size, policy)
    forward_status("aclrtMallocCached", status)
    return OK, ptr


@c_api(n_out=1)
def aclrtMallocHost(size: int) -> tuple[int, int]:
    return OK, _allocate("aclrtMallocHost", _size(size, "aclrtMallocHost", "size"), False)


def _free(ptr: Any, fn: str, on_device: bool) -> int:
    device, alloc = locate(ptr, 1)   # any device's memory may be freed from any thread
    if alloc is not None and alloc.base != ptr:
        alloc = None
    if device is None or alloc is None or alloc.on_device != on_device:
        shown = hex(ptr) if isinstance(ptr, int) else repr(ptr)
        fail(PARAM, f"{fn}: {shown} is not the start of a live {'device' if on_device else 'host'} allocation "
                    "(freed, foreign or an interior pointer)")
    if capture.ACTIVE:
        capture.refuse_unsafe(fn)
    if alloc.models:
        fail(aclError.ACL_ERROR_RT_MEMORY_FREE,
             f"{fn}: {hex(ptr)} is used by {len(alloc.models)} captured model(s) (aclmdlRI) still alive; a replay "
             "would touch freed memory: call aclmdlRIDestroy on them first")
    device.free(ptr)
    return OK


@c_api()
def aclrtFree(devPtr: int) -> int:
    return _free(devPtr, "aclrtFree", True)


@c_api()
def aclrtFreeHost(hostPtr: int) -> int:
    return _free(hostPtr, "aclrtFreeHost", False)


# ---------------------------------------------------------------------------- copies and fills
def _host_buffer(obj: Any, fn: str, what: str, count: int, writable: bool) -> memoryview:
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "V" or type(obj).__module__ == "numpy" and \
            getattr(obj, "dtype", None) is not None and obj.dtype.name == "bfloat16":
        obj = obj.view(np.uint8) if obj.flags.c_contiguous else obj  # no PEP 3118 format for bfloat16
    try:
        view = memoryview(obj)
    except (TypeError, ValueError):
        fail(PARAM, f"{fn}: {what} must be an address (int) or a buffer object, got {type(obj).__name__}")
    if not view.c_contiguous:
        fail(PARAM, f"{fn}: {what} buffer must be C-contiguous")
    if writable and view.readonly:
        fail(PARAM, f"{fn}: {what} buffer is read-only")
    view = view.cast("B")
    if view.nbytes < count:
        fail(PARAM, f"{fn}: {what} buffer holds {view.nbytes} bytes, fewer than count={count}")
    return view[:count]


def _memcpy(fn: str, dst: Any, destMax: Any, src: Any, count: Any, kind: Any, stream: Any) -> int:
    destMax = _size(destMax, fn, "destMax", allow_zero=True)
    count = _size(count, fn, "count", allow_zero=True)
    if count > destMax:
        fail(PARAM, f"{fn}: count={count} exceeds destMax={destMax}")
    if not isinstance(kind, numbers.Integral) or isinstance(kind, bool) or not 0 <= int(kind) <= 7:
        fail(PARAM, f"{fn}: kind {kind!r} must be an aclrtMemcpyKind in 0..7")
    kind = aclrtMemcpyKind(int(kind))
    device = get_device()
    impl = None if stream is False else resolve_stream(stream, fn, device=device)
    recording = None   # the capture the copy is recorded into
    if impl is None:
        if capture.ACTIVE:
            capture.refuse_unsafe(fn)
    elif impl.capture is not None:
        recording = impl.capture
        capture.refuse_invalidated(fn, recording)
    if dst is None or src is None:
        fail(PARAM, f"{fn}: {'dst' if dst is None else 'src'} is null")
    if count == 0:
        return OK
    # HOST_TO_BUF_TO_DEVICE (5) is HOST_TO_DEVICE through a staging buffer; INNER (6, one device) and
    # INTER (7, two devices) DEVICE_TO_DEVICE are DEVICE_TO_DEVICE; DEFAULT (4) takes what it is given
    want_dst_device = {0: False, 1: True, 2: False, 3: True, 5: True, 6: True, 7: True}.get(int(kind))
    want_src_device = {0: False, 1: False, 2: True, 3: True, 5: False, 6: True, 7: True}.get(int(kind))
    others: list[Device] = []   # other devices whose memory a synchronous copy touches

    def side(obj: Any, what: str, want_device: bool | None, writable: bool) -> Any:
        if isinstance(obj, numbers.Integral) and not isinstance(obj, bool):
            owner, alloc = locate(int(obj), count)   # a copy may cross devices (cudaMemcpyDefault does)
            if alloc is None:
                alloc = device.registry.check(int(obj), count, f"{fn}: {what}")   # fails, saying why
            if owner is not None and owner is not device:
                others.append(owner)
            if want_device is not None and alloc.on_device != want_device:
                fail(PARAM, f"{fn}: {what} {hex(obj)} is {'device' if alloc.on_device else 'host'} memory but "
                            f"kind {kind.name} needs {'device' if want_device else 'host'} memory")
            if recording is not None:
                recording.hold(int(obj), count)
            return int(obj)
        if want_device:
            fail(PARAM, f"{fn}: {what} must be a device address for kind {kind.name}")
        return _host_buffer(obj, fn, what, count, writable)

    d = side(dst, "dst", want_dst_device, True)
    s = side(src, "src", want_src_device, False)
    if int(kind) == aclrtMemcpyKind.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE and others:
        fail(PARAM, f"{fn}: kind ACL_MEMCPY_INNER_DEVICE_TO_DEVICE copies within one device, but dst or src is "
                    "another device's memory (use ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)")
    if impl is None:
        for other in others:   # synchronous: after the work queued on the other device too
            other.synchronize_quietly()
    if isinstance(d, int) and isinstance(s, int):
        device.copy(d, s, count, impl)
    elif isinstance(d, int):
        device.copy_from_host(d, s, impl)
    elif isinstance(s, int):
        device.copy_to_host(d, s, impl)
    elif recording is not None:   # no device work to record: it would run now and never at a replay
        fail(aclError.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
             f"{fn}: dst and src are both host buffer objects while the stream captures; such a copy is not "
             "recorded into the model (copy between aclrtMallocHost addresses, or make it outside the capture)")
    else:
        d[:] = s
    return OK


@c_api()
def aclrtMemcpy(dst: Any, destMax: int, src: Any, count: int, kind: int) -> int:
    return _memcpy("aclrtMemcpy", dst, destMax, src, count, kind, False)


@c_api()
def aclrtMemcpyAsync(dst: Any, destMax: int, src: Any, count: int, kind: int, stream: aclrtStream | None) -> int:
    return _memcpy("aclrtMemcpyAsync", dst, destMax, src, count, kind, stream)


def _span(pitch: int, width: int, height: int) -> int:
    return pitch * (height - 1) + width if height else 0


def _memcpy2d(fn: str, dst: Any, dpitch: Any, src: Any, spitch: Any, width: Any, height: Any, kind: Any,
              stream: Any) -> int:
    """`height` rows of `width` bytes, row i from src + i * spitch to dst + i * dpitch, each row an
    aclrtMemcpy(Async) of `kind` (its checks and its ordering); both whole ranges are checked first,
    so a refused copy copies nothing."""
    dpitch, spitch = _size(dpitch, fn, "dpitch"), _size(spitch, fn, "spitch")
    width, height = _size(width, fn, "width", allow_zero=True), _size(height, fn, "height", allow_zero=True)
    if width > dpitch or width > spitch:
        fail(PARAM, f"{fn}: width {width} exceeds {'dpitch' if width > dpitch else 'spitch'} "
                    f"{dpitch if width > dpitch else spitch}")
    if dst is None or src is None:
        fail(PARAM, f"{fn}: {'dst' if dst is None else 'src'} is nullptr")
    rows = []
    for what, side, pitch in (("dst", dst, dpitch), ("src", src, spitch)):
        span = _span(pitch, width, height)
        if isinstance(side, numbers.Integral) and not isinstance(side, bool):
            if span and find_allocation(int(side), span) is None:
                get_device().registry.check(int(side), span, f"{fn}: {what}")   # fails, saying why
            rows.append([int(side) + i * pitch for i in range(height)])
        else:
            try:
                view = memoryview(side).cast("B")
            except (TypeError, ValueError):
                fail(PARAM, f"{fn}: {what} must be an address or a buffer object, got {type(side).__name__}")
            if view.nbytes < span:
                fail(PARAM, f"{fn}: {what} buffer holds {view.nbytes} bytes, fewer than the {span} its pitch, "
                            "width and height reach")
            rows.append([view[i * pitch:i * pitch + width] for i in range(height)])
    for d, s in zip(*rows):
        status = _memcpy(fn, d, width, s, width, kind, stream)
        if status != OK:
            return status
    return OK


@c_api()
def aclrtMemcpy2d(dst: Any, dpitch: int, src: Any, spitch: int, width: int, height: int, kind: int) -> int:
    return _memcpy2d("aclrtMemcpy2d", dst, dpitch, src, spitch, width, height, kind, False)


@c_api()
def aclrtMemcpy2dAsync(dst: Any, dpitch: int, src: Any, spitch: int, width: int, height: int, kind: int,
                       stream: aclrtStream | None) -> int:
    return _memcpy2d("aclrtMemcpy2dAsync", dst, dpitch, src, spitch, width, height, kind, stream)


def _memset(fn: str, devPtr: Any, maxCount: Any, value: Any, count: Any, stream: Any) -> int:
    maxCount = _size(maxCount, fn, "maxCount", allow_zero=True)
    count = _size(count, fn, "count", allow_zero=True)
    if count > maxCount:
        fail(PARAM, f"{fn}: count={count} exceeds maxCount={maxCount}")
    if not isinstance(value, numbers.Integral):
        fail(PARAM, f"{fn}: value {value!r} must be an integer")
    device = get_device()
    impl = None if stream is False else resolve_stream(stream, fn, device=device)
    if impl is None:
        if capture.ACTIVE:
            capture.refuse_unsafe(fn)
    elif impl.capture is not None:
        capture.refuse_invalidated(fn, impl.capture)
    if count == 0:
        return OK
    owner, alloc = locate(devPtr, count)
    if alloc is None:
        device.registry.check(devPtr, count, f"{fn}: devPtr")   # fails, saying why
    if impl is not None and impl.capture is not None:
        impl.capture.hold(devPtr, count)
    if impl is None and owner is not None:
        device = owner   # synchronous: the owning device fills its own memory
    device.memset(int(devPtr), int(value), count, impl)
    return OK


@c_api()
def aclrtMemset(devPtr: int, maxCount: int, value: int, count: int) -> int:
    return _memset("aclrtMemset", devPtr, maxCount, value, count, False)


@c_api()
def aclrtMemsetAsync(devPtr: int, maxCount: int, value: int, count: int, stream: aclrtStream | None) -> int:
    return _memset("aclrtMemsetAsync", devPtr, maxCount, value, count, stream)


# ---------------------------------------------------------------------------- cache maintenance and queries
def _flush(fn: str, devPtr: Any, size: Any) -> int:
    """Cache maintenance of a device range: the range is checked; nothing else to do, device and
    host see one coherent memory here."""
    count = _size(size, fn, "size")
    if devPtr is None:
        fail(PARAM, f"{fn}: devPtr is nullptr")
    if find_allocation(devPtr, count) is None:
        get_device().registry.check(devPtr, count, f"{fn}: devPtr")   # fails, saying why
    return OK


@c_api()
def aclrtMemFlush(devPtr: int, size: int) -> int:
    return _flush("aclrtMemFlush", devPtr, size)


@c_api()
def aclrtMemInvalidate(devPtr: int, size: int) -> int:
    return _flush("aclrtMemInvalidate", devPtr, size)


@c_api(n_out=2)
def aclrtGetMemInfo(attr: int) -> tuple[int, int, int]:
    """(free, total) bytes of the current device (`Device.mem_info`): cudaMemGetInfo on cuda and
    emulated (whose CuPy stand-in answers the host's physical memory, its device memory), the host's on
    cpu. Every aclrtMemAttr names the one memory a device has here."""
    fn = "aclrtGetMemInfo"
    if not isinstance(attr, numbers.Integral) or isinstance(attr, bool) or not 0 <= int(attr) <= 11:
        fail(PARAM, f"{fn}: attr {attr!r} is not an aclrtMemAttr (0..11)")
    free, total = get_device().mem_info()
    return OK, int(free), int(total)


@c_api(n_out=3)
def aclrtPointerGetAttributes(ptr: Any) -> tuple[int, int, int, int]:
    """(ret, location type, location id, page size) of an address: ACL_MEM_LOCATION_TYPE_DEVICE (1)
    and the owning device for aclrtMalloc memory, HOST (0) for aclrtMallocHost memory and any other
    host address (id 0); the page size the allocation is mapped with (the host's page, 2 MiB for a
    GPU's memory)."""
    if ptr is None:
        fail(PARAM, "aclrtPointerGetAttributes: ptr is nullptr")
    if not isinstance(ptr, numbers.Integral) or isinstance(ptr, bool) or ptr < 0:
        fail(PARAM, f"aclrtPointerGetAttributes: ptr {ptr!r} must be an address")
    device, alloc = locate(int(ptr), 1)
    page = os.sysconf("SC_PAGE_SIZE")
    if device is None or alloc is None or not alloc.on_device:
        return OK, 0, 0, page
    return OK, 1, device.id, device.page_size
