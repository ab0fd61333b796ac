"""Kernels shipped compiled: which of the package's cubins a GPU can load, and the module the cuda
device launches from (a shipped cubin, else NVRTC at first use, said on the `aclnn_gpu` logger).

Owns: the layout of `kernels/cubins/` (written by `kernels/cubins.py`, the build):

    cubins/index.json                       per CUDA major: NVRTC version, targets, and per kernel file
                                            its source hash and {name expression: lowered name}
    cubins/cuda<N>/<stem>.sm_<XY>.cubin.xz     one per kernel file and architecture
    cubins/cuda<N>/<stem>.compute_<XY>.ptx.xz  the newest architecture as PTX (the driver compiles it
                                               for a newer GPU)

The binaries are xz-compressed in the package (about a ninth of their size); the one a GPU loads is
unpacked once into the user's cache (`$ACLNN_GPU_CACHE/cubins`, default ~/.cache/aclnn_gpu; a
temporary folder where that is not writable), where CuPy loads it by path.

the source hash that says whether a shipped binary is the current sources' (`source_hash`), the choice
of a binary for a GPU (`choose`: the driver's CUDA major, then the architecture), the module the cuda
device loads (`load_module`), and the up-front compile of every kernel file for the present GPU
(`warm`, `python -m aclnn_gpu.kernels warm`).

A shipped binary is used only when it is the current sources' (the hash is checked at load, so an
edited `.cu` in a source checkout never runs an old cubin) and the driver's CUDA major is one the
package was built for; otherwise CuPy compiles the source with NVRTC, as it always did, and keeps it
in its own cache (`CUPY_CACHE_DIR`). ACLNN_GPU_SHIPPED_KERNELS=0 turns the shipped binaries off.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import lzma
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable

from . import loader

log = logging.getLogger("aclnn_gpu")

CUBIN_DIR = loader.KERNEL_DIR / "cubins"
INDEX = CUBIN_DIR / "index.json"
REBUILD = "scripts/build_cubins.sh"   # the one-line rebuild (docs/TESTING.md); the lead reruns it at merge
ENV = "ACLNN_GPU_SHIPPED_KERNELS"     # "0": always compile with NVRTC (the GPU check's cold-start baseline)

# The options of the cuda device's RawModule that change the code (loader.nvrtc_options: -std; the -I
# paths are the machine's) plus what CuPy adds (kernels/report.py: CUPY_ADDED_OPTIONS); part of the hash.
CODE_OPTIONS = ("-std=c++17", "-ftz=true", "--device-as-default-execution-space")

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


# ------------------------------------------------------------------------------ the source hash
def includes(file: str) -> list[str]:
    """The project headers `kernels/<file>` includes ("..." includes, transitively), sorted."""
    seen: set[str] = set()
    todo = [file]
    while todo:
        for name in _INCLUDE.findall((loader.KERNEL_DIR / todo.pop()).read_text()):
            if name not in seen and (loader.KERNEL_DIR / name).is_file():
                seen.add(name)
                todo.append(name)
    return sorted(seen)


def source_hash(file: str) -> str:
    """sha256 of what decides a kernel file's binary, machine aside: the file, the project headers it
    includes, its name expressions (the manifest) and the code options."""
    h = hashlib.sha256()
    for name in (file, *includes(file)):
        h.update(f"{name}\0".encode())
        h.update((loader.KERNEL_DIR / name).read_bytes())
        h.update(b"\0")
    h.update("\0".join(loader.name_expressions(file)).encode())
    h.update("\0".join(CODE_OPTIONS).encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _current_hash(file: str) -> str:
    return source_hash(file)


def read_index() -> dict[str, Any]:
    """index.json ({} when the package has no shipped kernels)."""
    try:
        return json.loads(INDEX.read_text())
    except FileNotFoundError:
        return {}


_index_cache: list[dict[str, Any]] = []


def _index() -> dict[str, Any]:
    if not _index_cache:
        _index_cache.append(read_index())
    return _index_cache[0]


def stale_files(index: dict[str, Any] | None = None) -> list[str]:
    """'CUDA N: file (why)' for every kernel file whose shipped binaries are not the current
    sources' (or are missing); [] when every build of the index is current."""
    index = read_index() if index is None else index
    builds = index.get("builds", {})
    out = [] if builds else ["no shipped kernels (kernels/cubins/index.json is missing or empty)"]
    for major, build in sorted(builds.items()):
        for file in loader.kernel_files():
            entry = build["files"].get(file)
            if entry is None:
                out.append(f"CUDA {major}: {file} (not built)")
            elif entry["source"] != source_hash(file):
                out.append(f"CUDA {major}: {file} (its source, headers or name expressions changed)")
            else:
                missing = [t for t in build["targets"] if not (CUBIN_DIR / entry["binaries"].get(t, "-")).is_file()]
                if missing:
                    out.append(f"CUDA {major}: {file} (binaries missing: {', '.join(missing)})")
        for file in sorted(set(build["files"]) - set(loader.kernel_files())):
            out.append(f"CUDA {major}: {file} (no longer a kernel file)")
    return out


# ------------------------------------------------------------------------------ the choice
def _arch_number(arch: str) -> int:
    """"sm_90" -> 90, "compute_120" -> 120."""
    return int(arch.rpartition("_")[2])


@dataclass(frozen=True)
class Choice:
    """What `load_module` does for one kernel file on one GPU: load `path` (a shipped cubin or PTX) or,
    when `path` is None, compile with NVRTC; `reason` says why (the log line's words)."""
    file: str
    path: Path | None
    target: str | None = None               # "sm_90", "compute_120"
    names: dict[str, str] = field(default_factory=dict)   # name expression -> lowered name
    reason: str = ""


def choose(file: str, arch: str, driver_major: int, index: dict[str, Any] | None = None) -> Choice:
    """The shipped binary for `file` on a GPU of `arch` ("sm_86") whose driver is CUDA `driver_major`:
    the build of that CUDA major (a cubin of a newer toolkit major needs a newer driver; an older
    major's would run, but the driver's own is what the package was tested with), then the cubin of
    that architecture, else the newest cubin of the same major architecture and a lower minor (CUDA's
    binary compatibility: sm_80 code runs on sm_86), else the PTX when the GPU is at least its
    architecture. Otherwise a Choice without a path, saying why."""
    index = _index() if index is None else index
    if os.environ.get(ENV, "1") == "0":
        return Choice(file, None, reason=f"shipped kernels are off ({ENV}=0)")
    builds = index.get("builds", {})
    if not builds:
        return Choice(file, None, reason="this install has no shipped kernels (kernels/cubins/index.json)")
    build = builds.get(str(driver_major))
    if build is None:
        return Choice(file, None, reason=f"no shipped kernels for CUDA {driver_major} (shipped: CUDA "
                                         f"{', '.join(sorted(builds, key=int))})")
    entry = build["files"].get(file)
    if entry is None or entry["source"] != _current_hash(file):
        return Choice(file, None, reason=f"the shipped CUDA {driver_major} binary is not the current source of "
                                         f"{file} (rebuild: {REBUILD})")
    want = _arch_number(arch)
    cubins = sorted((_arch_number(t), t) for t in build["targets"] if t.startswith("sm_"))
    ptx = sorted((_arch_number(t), t) for t in build["targets"] if t.startswith("compute_"))
    target = next((t for n, t in cubins if n == want), None) or \
        next((t for n, t in reversed(cubins) if n // 10 == want // 10 and n < want), None) or \
        next((t for n, t in reversed(ptx) if n <= want), None)
    if target is None:
        return Choice(file, None, reason=f"no shipped cubin for {arch} with CUDA {driver_major} (shipped: "
                                         f"{', '.join(build['targets'])})")
    return Choice(file, CUBIN_DIR / entry["binaries"][target], target, dict(entry["names"]),
                  reason=f"shipped {target} binary for {arch}, CUDA {driver_major}")


# ------------------------------------------------------------------------------ packing
def pack(binary: bytes) -> bytes:
    """A binary as the package stores it (xz; the build's side)."""
    return lzma.compress(binary, preset=9 | lzma.PRESET_EXTREME)


def _cache_root() -> Path:
    return Path(os.environ.get("ACLNN_GPU_CACHE") or Path.home() / ".cache" / "aclnn_gpu") / "cubins"


_unpack_lock = threading.Lock()


def unpacked(packed: Path) -> Path:
    """The file CuPy loads for a packed binary (`cuda13/x.sm_90.cubin.xz` -> `<cache>/cubins/cuda13/
    x.sm_90.<hash>.cubin`, named by the packed bytes' hash, so a rebuilt package never meets an old
    copy): unpacked on first use, written under a temporary name and renamed (processes may race)."""
    data = packed.read_bytes()
    stem, _, ext = packed.name.removesuffix(".xz").rpartition(".")
    name = f"{stem}.{hashlib.sha256(data).hexdigest()[:16]}.{ext}"
    with _unpack_lock:
        user = os.getuid() if hasattr(os, "getuid") else "user"
        for root in (_cache_root(), Path(tempfile.gettempdir()) / f"aclnn_gpu-cubins-{user}"):
            target = root / packed.parent.name / name
            if target.is_file():
                return target
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                part = target.with_name(f"{target.name}.{os.getpid()}.part")
                part.write_bytes(lzma.decompress(data))
                os.replace(part, target)
                return target
            except OSError:   # a read-only home (a container): the temporary folder
                continue
    raise OSError(f"kernels/shipped.py: no writable folder to unpack {packed.name} in ({_cache_root()}, "
                  f"{tempfile.gettempdir()})")


# ------------------------------------------------------------------------------ loading
class ShippedModule:
    """A shipped cubin loaded by CuPy (`RawModule(path=...)`), looked up by name expression like a
    RawModule compiled with `name_expressions`: CuPy maps expressions to lowered names only for
    modules it compiles, so the build stored the map (nvrtcGetLoweredName) beside the cubin."""

    def __init__(self, raw: Any, names: dict[str, str], choice: Choice):
        self.raw, self.names, self.choice = raw, names, choice

    def get_function(self, expr: str) -> Any:
        return self.raw.get_function(self.names[expr])


def driver_major(cp: Any) -> int:
    """The CUDA major of the driver (cudaDriverGetVersion // 1000; 0 when it cannot be read)."""
    try:
        return int(cp.cuda.runtime.driverGetVersion()) // 1000
    except Exception:  # noqa: BLE001 - no driver: nothing shipped can be chosen, NVRTC reports the error
        return 0


def _compile(cp: Any, file: str) -> Any:
    """CuPy's NVRTC compile of the file, as the cuda device always made it (compiled now, not at the
    first get_function, so that its time is measured)."""
    module = cp.RawModule(code=loader.source(file), options=loader.nvrtc_options(),
                          name_expressions=loader.name_expressions(file))
    module.compile()
    return module


def load_module(cp: Any, file: str, arch: str) -> Any:
    """The module of `kernels/<file>` for the current device (call inside its scope): the shipped
    binary when `choose` finds one and it loads, else CuPy's NVRTC compile, with one INFO line on the
    `aclnn_gpu` logger saying which file, why and how long (a cache hit of CuPy's takes milliseconds;
    a compile seconds)."""
    choice = choose(file, arch, driver_major(cp))
    why = choice.reason
    if choice.path is not None:
        try:
            raw = cp.RawModule(path=str(unpacked(choice.path)))
            raw.get_function(next(iter(choice.names.values())))   # loads the module: a failure shows here
            return ShippedModule(raw, choice.names, choice)
        except Exception as e:  # noqa: BLE001 - e.g. a PTX newer than the driver: NVRTC still works
            why = f"the shipped {choice.target} binary did not load ({type(e).__name__}: {e})"
    t0 = time.perf_counter()
    module = _compile(cp, file)
    log.info("aclnn_gpu: kernels/%s compiled by NVRTC for %s in %.1f s (%s; CuPy caches it in "
             "CUPY_CACHE_DIR; `python -m aclnn_gpu.kernels warm` compiles every file up front)",
             file, arch, time.perf_counter() - t0, why)
    return module


# ------------------------------------------------------------------------------ the up-front compile
def load_all(cp: Any, arch: str, scope: Callable[[], ContextManager[Any]], files: Iterable[str] | None = None,
             jobs: int | None = None, progress: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """{file: module} of every kernel file (or `files`) for the device `scope()` makes current: the
    shipped binaries loaded first, then the rest compiled by NVRTC in parallel threads (NVRTC releases
    the GIL), the longest sources first. `progress(file, module)` is called as each one is done."""
    files = list(loader.kernel_files() if files is None else files)
    major = driver_major(cp)
    shipped = [f for f in files if choose(f, arch, major).path is not None]
    compiled = sorted((f for f in files if f not in shipped),
                      key=lambda f: -(loader.KERNEL_DIR / f).stat().st_size)
    modules: dict[str, Any] = {}
    lock = threading.Lock()

    def one(file: str) -> None:
        with scope():   # CuPy's current device is per thread
            module = load_module(cp, file, arch)
        with lock:
            modules[file] = module
            if progress is not None:
                progress(file, module)

    for file in shipped:
        one(file)
    if compiled:
        workers = max(1, min(len(compiled), jobs or os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aclnn_gpu-nvrtc") as pool:
            for future in [pool.submit(one, f) for f in compiled]:
                future.result()
    return modules


def warm(device_id: int = 0, out: Any = None, jobs: int | None = None, cp: Any = None) -> dict[str, Any]:
    """Make every kernel file ready on GPU `device_id` with CuPy (`cp`: CuPy, or a stand-in of it):
    shipped binaries loaded, the rest compiled by NVRTC into CuPy's cache (CUPY_CACHE_DIR), so a
    container or CI image built with `python -m aclnn_gpu.kernels warm` never compiles at first use.
    A text progress bar goes to `out` (stderr). Returns {file: "shipped sm_90" | "NVRTC"}."""
    if cp is None:
        import cupy
        cp = cupy
    out = sys.stderr if out is None else out
    with cp.cuda.Device(device_id):
        props = cp.cuda.runtime.getDeviceProperties(device_id)
    arch = f"sm_{props['major']}{props['minor']}"
    files = loader.kernel_files()
    done: dict[str, Any] = {}
    t0 = time.perf_counter()

    def progress(file: str, module: Any) -> None:
        done[file] = f"shipped {module.choice.target}" if isinstance(module, ShippedModule) else "NVRTC"
        bar = "#" * len(done) + "." * (len(files) - len(done))
        print(f"[{bar}] {len(done)}/{len(files)} {time.perf_counter() - t0:6.1f} s  {file}: {done[file]}",
              file=out, flush=True)

    print(f"aclnn_gpu kernels for GPU {device_id} ({arch}, CUDA driver {driver_major(cp)}): {len(files)} files",
          file=out, flush=True)
    load_all(cp, arch, lambda: cp.cuda.Device(device_id), files, jobs, progress)
    return done
