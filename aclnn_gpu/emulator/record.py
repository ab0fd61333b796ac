"""Recording emulated launches, so that ThreadSanitizer can replay them in a standalone executable
(TSan cannot run inside Python; see tsan.py).

With `ACLNN_GPU_EMU_RECORD=<dir>` (or inside `record_to(dir)`), every successful launch is written
to `<dir>`: the kernel source (once, by hash), the name, grid, block, dynamic shared memory, the
argument bytes, and for every pointer argument the memory it points into (contents as they were just
before the launch) so that the replay can relocate the pointer into a copy of that memory.

Which memory a pointer points into: numpy array arguments are their own memory; other pointers
(np.uint64 addresses, objects with `.ptr`) go to the resolver installed with
`set_memory_resolver(fn)`, `fn(address) -> (base, nbytes) | None` (the emulated device installs one
over its allocation registry), then, when the process runs with AddressSanitizer preloaded (the CI
recording run is the ASan run), to ASan's allocator: `__asan_locate_address` knows the heap block of
any address, which covers NumPy buffers passed by address. A launch with a non-null pointer nobody can
resolve is recorded as
not replayable (the replay skips and counts it) rather than replayed with a wild pointer.

Under AddressSanitizer the recorder reads only memory ASan holds addressable (`_unaddressable`): ASan's
allocator describes freed blocks too, and a launch may carry a pointer it never dereferences (a
dangling one, behind a bound of 0). Copying such memory was an ASan report of the recorder's own (a
heap-use-after-free in ctypes.string_at) that aborted the sanitizer run; such a launch is now
recorded as not replayable, and a kernel that does read the memory is still reported, by the kernel.

Layout of <dir>: sources/<hash>.json, launches-<pid>.jsonl, blobs-<pid>.bin (region bytes).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

Resolver = Callable[[int], Optional[tuple[int, int]]]

_resolver: Resolver | None = None
_override: list = []            # stack of record_to() targets (None = recording off)
_recorders: dict[Path, "Recorder"] = {}
_lock = threading.Lock()
# Per-process cap on recorded memory; launches beyond it are recorded as not replayable.
_MAX_BYTES = int(float(os.environ.get("ACLNN_GPU_EMU_RECORD_MAX_MB", "512")) * 2**20)
# ACLNN_GPU_EMU_RECORD_FILTER=sync: keep only launches that used a block barrier or dynamic shared
# memory (what the TSan replay looks at). ACLNN_GPU_EMU_RECORD_PER_KERNEL=n: keep at most n launches
# of each kernel, one per launch geometry (the first n distinct geometries).
_FILTER = os.environ.get("ACLNN_GPU_EMU_RECORD_FILTER", "")
_PER_KERNEL = int(os.environ.get("ACLNN_GPU_EMU_RECORD_PER_KERNEL", "0") or 0)


def byte_bounds(a: np.ndarray) -> tuple[int, int]:
    """[low, high) byte addresses an array's elements occupy (any strides, including negative)."""
    lo = hi = a.ctypes.data
    if a.size == 0:
        return lo, lo
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + a.itemsize


_asan: Any = None   # None: not looked up yet; False: ASan absent; else (locate, region_is_poisoned)


def _asan_functions() -> Any:
    global _asan
    if _asan is None:
        try:
            lib = ctypes.CDLL(None)
            locate, poisoned = lib.__asan_locate_address, lib.__asan_region_is_poisoned
        except AttributeError:
            _asan = False
        else:
            locate.restype = ctypes.c_char_p
            locate.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                               ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
            poisoned.restype = ctypes.c_void_p
            poisoned.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _asan = (locate, poisoned)
    return _asan


def _unaddressable(lo: int, hi: int) -> bool:
    """Under ASan: whether any byte of [lo, hi) is poisoned (freed, a redzone); False without ASan."""
    asan = _asan_functions()
    return bool(asan) and hi > lo and bool(asan[1](lo, hi - lo))


def asan_heap_resolver(address: int) -> tuple[int, int] | None:
    """The allocated heap block holding `address`, from ASan's allocator (None without ASan, off-heap,
    or when the block is freed: ASan describes those too)."""
    asan = _asan_functions()
    if not asan:
        return None
    name = ctypes.create_string_buffer(64)
    base, size = ctypes.c_void_p(), ctypes.c_size_t()
    kind = asan[0](address, name, 64, ctypes.byref(base), ctypes.byref(size))
    if kind != b"heap" or not base.value or not (base.value <= address < base.value + size.value):
        return None
    if _unaddressable(base.value, base.value + size.value):
        return None
    return base.value, size.value


def allocation_of(addr: int, arrays=()) -> tuple[int, int] | None:
    """[lo, hi) of the memory a pointer argument points into: one of `arrays` ([lo, hi) of the
    launch's numpy array arguments), else the installed resolver's allocation, else ASan's heap block."""
    found = None
    for lo, hi in arrays:
        if lo <= addr < hi:
            found = (lo, hi)
    if found is None and _resolver is not None:
        r = _resolver(addr)
        if r is not None:
            found = (int(r[0]), int(r[0]) + int(r[1]))
    if found is None:
        r = asan_heap_resolver(addr)
        if r is not None:
            found = (r[0], r[0] + r[1])
    return found


def set_memory_resolver(fn: Resolver | None) -> None:
    """Install `fn(address) -> (base, nbytes) | None`, used to find the allocation a pointer
    argument points into. Pass None to remove it."""
    global _resolver
    _resolver = fn


@contextlib.contextmanager
def record_to(path):
    """Record launches made inside the block to `path` (None: record nothing), overriding
    ACLNN_GPU_EMU_RECORD for this process while the block runs."""
    _override.append(None if path is None else Path(path))
    try:
        yield
    finally:
        _override.pop()


def active_recorder() -> "Recorder | None":
    if _override:
        target = _override[-1]
    else:
        env = os.environ.get("ACLNN_GPU_EMU_RECORD")
        target = Path(env) if env else None
    if target is None:
        return None
    with _lock:
        r = _recorders.get(target)
        if r is None:
            r = _recorders[target] = Recorder(target)
        return r


class Recorder:
    def __init__(self, root: Path):
        self.root = root
        (root / "sources").mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._sources: set[str] = set()
        self._bytes = 0
        self._kept: dict[tuple, set] = {}

    def _source_key(self, module) -> str:
        key = hashlib.sha256(json.dumps([module.code, list(module.options), module.name_expressions,
                                         module.filename]).encode()).hexdigest()[:20]
        if key not in self._sources:
            p = self.root / "sources" / f"{key}.json"
            if not p.exists():
                tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"code": module.code, "options": list(module.options),
                                           "name_expressions": module.name_expressions,
                                           "filename": module.filename}))
                os.replace(tmp, p)
            self._sources.add(key)
        return key

    def wants(self, kernel, grid, block, smem) -> bool:
        """Cheap pre-launch check of the per-kernel cap (the snapshot copies memory)."""
        if not _PER_KERNEL:
            return True
        with self._lock:
            geos = self._kept.get((id(kernel.module._library), kernel.name), set())
            return len(geos) < _PER_KERNEL and (tuple(grid), tuple(block), smem) not in geos

    def snapshot(self, kernel, desc) -> dict:
        """Capture the argument bytes and the memory behind pointer arguments before the launch."""
        arrays = []
        for kind, obj in desc:
            if kind == "array":
                lo, hi = byte_bounds(obj)
                arrays.append((lo, hi))
        regions: list[list[int]] = []   # [lo, hi]

        def region_of(lo: int, hi: int) -> int:
            for j, r in enumerate(regions):
                if lo < r[1] and r[0] < hi or lo == r[0]:
                    r[0], r[1] = min(r[0], lo), max(r[1], hi)
                    return j
            regions.append([lo, hi])
            return len(regions) - 1

        args: list[tuple] = []
        why = None
        for i, (kind, obj) in enumerate(desc):
            if kind == "array":
                lo, hi = byte_bounds(obj)
                args.append(("ptr", obj.ctypes.data, region_of(lo, max(hi, lo + 1))))
                continue
            if kind == "scalar" and not kernel.param_is_pointer[i]:
                args.append(("value", obj.tobytes().hex()))
                continue
            addr = int(obj)
            if addr == 0:
                args.append(("value", (0).to_bytes(8, "little").hex()))
                continue
            found = allocation_of(addr, arrays)
            if found is None:
                if kernel.param_is_pointer[i]:
                    why = "a pointer argument into memory no resolver knows"
                args.append(("value", np.uint64(addr).tobytes().hex()))
                continue
            args.append(("ptr", addr, region_of(*found)))
        # Resolve argument region indices after merging (merging may have widened regions).
        total = sum(hi - lo for lo, hi in regions)
        if why is None and any(_unaddressable(lo, hi) for lo, hi in regions):
            why = "a pointer argument into memory AddressSanitizer holds unaddressable (freed, a redzone)"
        with self._lock:
            if why is None and self._bytes + total > _MAX_BYTES:
                why = "record size cap reached (ACLNN_GPU_EMU_RECORD_MAX_MB)"
            data = None
            if why is None:
                self._bytes += total
                data = [ctypes.string_at(lo, hi - lo) for lo, hi in regions]
        return {"args": args, "regions": regions, "data": data, "why": why}

    def commit(self, kernel, grid, block, smem, snap, stats) -> None:
        module = kernel.module
        pid = os.getpid()
        if _FILTER == "sync" and not (stats.get("block_barriers") or smem):
            return
        with self._lock:
            if _PER_KERNEL:
                geos = self._kept.setdefault((id(module._library), kernel.name), set())
                geo = (tuple(grid), tuple(block), smem)
                if len(geos) >= _PER_KERNEL or geo in geos:
                    return
                geos.add(geo)
            src = self._source_key(module)
            rec = {"source": src, "name": kernel.name, "grid": list(grid), "block": list(block), "smem": smem,
                   "max_dyn": int(kernel.max_dynamic_shared_size_bytes), "stats": stats,
                   "replayable": snap["why"] is None, "why": snap["why"], "args": [], "regions": []}
            if snap["why"] is None:
                blob = self.root / f"blobs-{pid}.bin"
                with open(blob, "ab") as f:
                    for (lo, hi), data in zip(snap["regions"], snap["data"]):
                        rec["regions"].append({"blob": blob.name, "offset": f.tell(), "size": hi - lo})
                        f.write(data)
            for a in snap["args"]:
                if a[0] == "value":
                    rec["args"].append({"value": a[1]})
                else:
                    _, addr, j = a
                    rec["args"].append({"region": j, "offset": addr - snap["regions"][j][0]})
            with open(self.root / f"launches-{pid}.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
