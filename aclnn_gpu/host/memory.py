"""Host memory as the host-side devices use it: aligned buffers (the cpu device's allocations and the
emulator's device memory), the host's physical memory, and the number of virtual devices the cpu and
emulated kinds offer."""
from __future__ import annotations

import os

import numpy as np

ALIGN = 64  # bytes; CANN guarantees 32, vector kernels want 16


def aligned_buffer(size: int, align: int = ALIGN) -> tuple[int, np.ndarray]:
    """A zero-initialised-free host buffer of `size` bytes whose first byte is `align`-aligned."""
    raw = np.empty(size + align, np.uint8)
    start = (-raw.ctypes.data) % align
    buf = raw[start:start + size]
    return buf.ctypes.data, buf


def virtual_device_count() -> int:
    """The cpu and emulated kinds' number of devices: ACLNN_GPU_DEVICE_COUNT (default 1).
    ValueError for anything but an integer >= 1."""
    text = os.environ.get("ACLNN_GPU_DEVICE_COUNT", "").strip() or "1"
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"ACLNN_GPU_DEVICE_COUNT={text!r} must be an integer >= 1")
    return count


def host_memory_info() -> tuple[int, int]:
    """(available, total) bytes of the host's physical memory."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
