"""The Python side of the emulator's memory profiler (build mode "profile", `ACLNN_GPU_EMU_PROFILE=1`).

Owns: loading the trace runtime (`profile_rt.cpp`, built by build.profile_runtime) once per process
with RTLD_GLOBAL before any profiled kernel library; the global table of access sites (one id per
load/store and inline chain of file:line:column frames, from the build's metadata) and its
registration per loaded library; the device allocations of each launch (the allocations its pointer
arguments point into: numpy arrays' own bytes, else record.allocation_of); one lock that serialises
profiled launches (the runtime's state is process-wide); and the collection of per-launch results.

    with profiling.collect(l2_bytes=50 << 20) as launches:   # one operator call
        ...                                                  # launches on the emulated device
    for launch in launches: print(launch.kernel, launch.dram_bytes, launch.sites)

Memory accesses made through pointers stored in device memory (not kernel arguments) fall outside the
launch's allocations unless they point into one of them, and are not counted.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import build as _build
from . import record as _record

_STAT_FIELDS = ("requests", "sectors", "ideal_sectors", "bytes", "lane_accesses", "width", "wavefronts",
                "ideal_wavefronts", "store", "shared", "lanes")
_EMU_DIR = str(Path(__file__).resolve().parent)

LAUNCH_LOCK = threading.RLock()   # profiled launches run one at a time (process-wide trace state)


@dataclass
class Site:
    """One access site: its load/store kind and its inline chain of file:line:column frames."""
    id: int
    kind: str
    frames: tuple[str, ...]

    @property
    def label(self) -> str:
        """file:line of the innermost frame in kernel source (not emu.h, not the C++ library), with the
        kernel-source frame it was inlined into when that is another line."""
        src = [f for f in self.frames
               if not f.startswith(_EMU_DIR) and "/include/c++/" not in f and "<emu glue>" not in f]
        if not src:
            return _short(self.frames[0]) if self.frames else "?"
        inner = _short(src[0])
        outer = _short(src[-1])
        return inner if inner == outer else f"{inner} (in {outer})"


def _short(frame: str) -> str:
    path, _, rest = frame.partition(":")
    line = rest.split(":")[0]
    return f"{os.path.basename(path)}:{line}"


@dataclass
class SiteStats:
    site: Site
    requests: int
    sectors: int
    ideal_sectors: int
    bytes: int
    lane_accesses: int
    width: int
    wavefronts: int
    ideal_wavefronts: int
    store: bool
    shared: bool

    @property
    def sector_efficiency(self) -> float:
        """Distinct bytes the requests asked for / bytes of the 32-byte sectors they touched."""
        return self.bytes / (32 * self.sectors) if self.sectors else 1.0

    @property
    def bank_conflicts(self) -> int:
        """Extra shared-memory wavefronts beyond the ideal (0: conflict free)."""
        return self.wavefronts - self.ideal_wavefronts


@dataclass
class LaunchProfile:
    kernel: str
    file: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    sectors_read: int
    sectors_written: int
    l2_read_misses: int
    l2_dirtied: int
    blocks: int
    blocks_traced: int
    unknown_site_accesses: int
    sites: list[SiteStats] = field(default_factory=list)

    @property
    def sample_scale(self) -> float:
        return self.blocks / self.blocks_traced if self.blocks_traced else 1.0

    @property
    def dram_bytes(self) -> int:
        """Cold-cache DRAM traffic: every distinct 32-byte sector read once and written back once."""
        return round(32 * (self.sectors_read + self.sectors_written) * self.sample_scale)

    @property
    def l2_dram_bytes(self) -> int:
        """DRAM traffic of the L2 model (LRU over sectors, warm across the launches of a collection)."""
        return round(32 * (self.l2_read_misses + self.l2_dirtied) * self.sample_scale)

    def global_sites(self) -> list[SiteStats]:
        return [s for s in self.sites if not s.shared]

    def shared_sites(self) -> list[SiteStats]:
        return [s for s in self.sites if s.shared]


class _Runtime:
    def __init__(self) -> None:
        path = _build.profile_runtime()
        self.lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        self.lib.emu_prof_set_global.argtypes = [u64p, u64p, ctypes.c_int]
        self.lib.emu_prof_add_sites.argtypes = [u64p, u32p, ctypes.c_int]
        self.lib.emu_prof_configure.argtypes = [ctypes.c_uint, ctypes.c_uint64]
        self.lib.emu_prof_result_sites.argtypes = [u64p, ctypes.c_int]
        self.lib.emu_prof_result_sites.restype = ctypes.c_int
        self.lib.emu_prof_result_launch.argtypes = [u64p]
        self.lib.emu_prof_l2_touch.argtypes = [u64p, u64p, ctypes.c_int, ctypes.c_int, u64p]
        self.sites: list[Site] = []
        self.site_ids: dict[tuple, int] = {}
        self.configure(1, 50 << 20)

    def configure(self, sample_every: int, l2_bytes: int) -> None:
        self.lib.emu_prof_configure(int(sample_every), int(l2_bytes))

    def register_library(self, base: int, table: list) -> None:
        pcs, ids = [], []
        for offset, kind, _size, frames in table:
            key = (kind, tuple(frames))
            sid = self.site_ids.get(key)
            if sid is None:
                sid = self.site_ids[key] = len(self.sites)
                self.sites.append(Site(sid, kind, tuple(frames)))
            pcs.append(base + offset)
            ids.append(sid)
        n = len(pcs)
        if n:
            self.lib.emu_prof_add_sites((ctypes.c_uint64 * n)(*pcs), (ctypes.c_uint32 * n)(*ids), n)

    def l2_touch(self, lo, hi, store: bool) -> tuple[int, int]:
        """Touch the L2 model over sectors [lo[i], hi[i]) (uint64 arrays); (read misses, sectors dirtied)."""
        lo = np.ascontiguousarray(lo, dtype=np.uint64)
        hi = np.ascontiguousarray(hi, dtype=np.uint64)
        out = (ctypes.c_uint64 * 2)()
        u64p = ctypes.POINTER(ctypes.c_uint64)
        self.lib.emu_prof_l2_touch(lo.ctypes.data_as(u64p), hi.ctypes.data_as(u64p), len(lo), int(store), out)
        return int(out[0]), int(out[1])

    def set_allocations(self, ranges: list[tuple[int, int]]) -> None:
        n = len(ranges)
        lo = (ctypes.c_uint64 * max(n, 1))(*[a for a, _ in ranges])
        size = (ctypes.c_uint64 * max(n, 1))(*[b - a for a, b in ranges])
        self.lib.emu_prof_set_global(lo, size, n)

    def result(self, kernel: str, file: str, grid, block) -> LaunchProfile:
        head = (ctypes.c_uint64 * 8)()
        self.lib.emu_prof_result_launch(head)
        n = self.lib.emu_prof_result_sites(None, 0)
        width = len(_STAT_FIELDS) + 1
        rows = (ctypes.c_uint64 * max(n * width, 1))()
        self.lib.emu_prof_result_sites(rows, n)
        sites = []
        for i in range(n):
            r = rows[i * width:(i + 1) * width]
            sid = r[0]
            site = self.sites[sid] if sid < len(self.sites) else Site(sid, "?", ("<unknown site>",))
            v = dict(zip(_STAT_FIELDS, r[1:]))
            sites.append(SiteStats(site, v["requests"], v["sectors"], v["ideal_sectors"], v["bytes"],
                                   v["lane_accesses"], v["width"], v["wavefronts"], v["ideal_wavefronts"],
                                   bool(v["store"]), bool(v["shared"])))
        sites.sort(key=lambda s: (s.shared, s.site.label, s.site.kind))
        return LaunchProfile(kernel, file, tuple(grid), tuple(block), head[0], head[1], head[2], head[3],
                             head[4], head[5], head[7], sites)


_runtime: _Runtime | None = None
_collectors: list[list[LaunchProfile]] = []


def runtime() -> _Runtime:
    """The trace runtime, loaded on first use (must precede loading any profiled kernel library)."""
    global _runtime
    with LAUNCH_LOCK:
        if _runtime is None:
            _runtime = _Runtime()
        return _runtime


def launch_allocations(desc, param_is_pointer) -> list[tuple[int, int]]:
    """Disjoint [lo, hi) device allocations the pointer arguments of a launch point into."""
    arrays = [_record.byte_bounds(obj) for kind, obj in desc if kind == "array"]
    found = list(arrays)
    for i, (kind, obj) in enumerate(desc):
        if kind == "array" or (kind == "scalar" and not param_is_pointer[i]):
            continue
        r = _record.allocation_of(int(obj), arrays)
        if r is not None:
            found.append(r)
    merged: list[list[int]] = []
    for lo, hi in sorted(set(found)):
        if hi <= lo:
            continue
        if merged and lo < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(a, b) for a, b in merged]


def l2_touch(lo, hi, store: bool) -> tuple[int, int]:
    """Accesses of a modelled (not emulated) launch through the same L2 model as the kernels'
    (sectors [lo[i], hi[i]) of the GPU address space, see `gpu_sector_shift`): (read misses, dirtied)."""
    with LAUNCH_LOCK:
        return runtime().l2_touch(lo, hi, store)


def gpu_sector_shift(addr: int) -> int:
    """Bytes to add to a host address of an emulated allocation to get the address the L2 model uses
    for it (the runtime moves each allocation to a 256-byte aligned base, as cudaMalloc aligns)."""
    found = _record.allocation_of(int(addr))
    if found is None:
        return 0
    lo = found[0]
    return ((lo + 255) & ~255) - lo


def record_launch(profile: LaunchProfile) -> None:
    for c in _collectors:
        c.append(profile)


@contextlib.contextmanager
def collect(l2_bytes: int = 50 << 20, sample_every: int = 1):
    """Collect the profiles of the launches made inside the block; the L2 model starts cold (empty)."""
    rt = runtime()
    launches: list[LaunchProfile] = []
    with LAUNCH_LOCK:
        rt.configure(sample_every, l2_bytes)
        _collectors.append(launches)
    try:
        yield launches
    finally:
        with LAUNCH_LOCK:
            _collectors.remove(launches)
