"""Building emulator libraries: one `.cu` source -> one cached shared library (or executable).

Owns: the source rewrite a `.cu` file needs to compile as C++ against `emu.h`, the generated launch
glue (one exported launch entry and one signature entry per kernel), the g++ command lines of each
build mode, the precompiled header, and the cache.

Cache: `$ACLNN_GPU_CACHE/emu` (default `~/.cache/aclnn_gpu/emu`). A library's key hashes the
generated source, the flags, `emu.h` and `include/`, every `*.cuh`/`*.h` beside the kernels (and in
`-I` directories passed as options: `#include`d headers are part of the key without running the
preprocessor), and the compiler's version. Builds take an `flock` on the key, so concurrent processes
and threads build a library once; results are written under a temporary name and `os.replace`d.

Build modes: "default" (fibers, -O1), "address" (`-fsanitize=address,undefined`, selected by
`ACLNN_GPU_EMU_SANITIZE=address`; a separate cache key; loading it needs libasan preloaded, see
`sanitize.py`), and "tsan" (standalone executable with `-DEMU_THREADS -fsanitize=thread`, see `tsan.py`).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL_DIR = HERE.parent
INCLUDE_DIR = HERE / "include"
EMU_H = HERE / "emu.h"
CXX = os.environ.get("ACLNN_GPU_EMU_CXX", "g++")

BASE_FLAGS = ("-std=c++20", "-pthread", "-fPIC", "-fvisibility=hidden",
              "-Wno-unknown-pragmas", "-Wno-attributes")
MODE_FLAGS = {
    # -O1: the best build time / run time trade (O2 costs ~40% more compile time for <10% run time).
    "default": ("-O1",),
    # -g for line numbers in reports; frame pointers for ASan's fast unwinder.
    "address": ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                "-fno-sanitize-recover=undefined"),
    "tsan": ("-O1", "-g", "-DEMU_THREADS", "-fsanitize=thread"),
}

_EXTERN_C_GLOBAL = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*\(')
# `extern __shared__ [__align__(n)] T name[];` (block scope) -> `T* name = emu::dyn_smem<T>();`
_EXTERN_SHARED = re.compile(
    r'extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s*'
    r'(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;')


class EmuBuildError(RuntimeError):
    """g++ rejected a kernel source (the message carries the command and compiler output)."""


def cache_dir() -> Path:
    root = os.environ.get("ACLNN_GPU_CACHE") or str(Path.home() / ".cache" / "aclnn_gpu")
    d = Path(root) / "emu"
    d.mkdir(parents=True, exist_ok=True)
    return d


def sanitize_mode() -> str:
    """The in-process build mode selected by the environment: "default" or "address"."""
    v = os.environ.get("ACLNN_GPU_EMU_SANITIZE", "").strip().lower()
    if v in ("", "0", "none", "off"):
        return "default"
    if v in ("address", "asan", "1"):
        return "address"
    raise ValueError(f"ACLNN_GPU_EMU_SANITIZE={v!r}: expected 'address' (ThreadSanitizer runs as a "
                     f"standalone replay: python -m aclnn_gpu.kernels.emulator.tsan)")


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    return subprocess.run([CXX, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]


def kernel_names(code: str) -> list[str]:
    """`extern "C" __global__` kernels of a source. Templates and C++-named kernels are reached
    through name expressions only (as with cupy.RawModule)."""
    return _EXTERN_C_GLOBAL.findall(code)


def rewrite_source(code: str) -> str:
    return _EXTERN_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = emu::dyn_smem<{m.group(1)}>();", code)


@dataclass(frozen=True)
class Entry:
    """One launchable kernel: `name` is what get_function takes, `expr` the C++ expression of it."""
    name: str
    expr: str
    index: int


def entries_of(code: str, name_expressions) -> list[Entry]:
    names = [(k, k) for k in kernel_names(code)] + [(e, e) for e in name_expressions]
    seen: set[str] = set()
    out: list[Entry] = []
    for name, expr in names:
        if name not in seen:
            seen.add(name)
            out.append(Entry(name, expr, len(out)))
    return out


def generate_source(code: str, entries: list[Entry], filename: str) -> str:
    """The C++ translation unit of a kernel library: the rewritten kernel source (with #line so
    compiler and sanitizer messages point at the .cu file) and the launch glue."""
    glue = ["EMU_LIBRARY_EXPORTS"]
    for e in entries:
        q = e.name.replace("\\", "\\\\").replace('"', '\\"')
        glue.append(
            f'EMU_EXPORT int emu_launch_{e.index}(const unsigned* gb, size_t smem, void** args, const size_t* sizes, '
            f'int n, size_t max_dyn) {{ return emu::launch("{q}", &{e.expr}, dim3(gb[0], gb[1], gb[2]), '
            f'dim3(gb[3], gb[4], gb[5]), smem, args, sizes, n, max_dyn); }}')
        glue.append(f'EMU_EXPORT int emu_sig_{e.index}(size_t* sizes, unsigned char* is_ptr, int cap) '
                    f'{{ return emu::signature(&{e.expr}, sizes, is_ptr, cap); }}')
    table = ", ".join(f"&emu_launch_{e.index}" for e in entries) or "nullptr"
    glue.append("typedef int (*emu_launch_fn)(const unsigned*, size_t, void**, const size_t*, int, size_t);")
    glue.append(f'extern "C" {{ __attribute__((visibility("default"))) emu_launch_fn emu_launch_table[] = {{{table}}}; '
                f'__attribute__((visibility("default"))) int emu_launch_count = {len(entries)}; }}')
    fname = filename.replace("\\", "/").replace('"', "")
    return (f'#line 1 "{fname}"\n' + rewrite_source(code) + '\n#line 1 "<emu glue>"\n' + "\n".join(glue) + "\n")


def _dependency_text(options) -> str:
    """Headers that a kernel source may #include, hashed into the cache key."""
    dirs = [KERNEL_DIR, INCLUDE_DIR] + [Path(o[2:]) for o in options if o.startswith("-I") and len(o) > 2]
    parts = []
    for d in dirs:
        if d.is_dir():
            for p in sorted(d.iterdir()):
                if p.suffix in (".cuh", ".h", ".hpp") and p.is_file():
                    parts.append(f"{p}\0{p.read_text(errors='replace')}")
    return "\0".join(parts)


def _key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0\1")
    return h.hexdigest()[:20]


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def _run(cmd, what: str):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise EmuBuildError(f"{what} failed:\n{' '.join(map(str, cmd))}\n{r.stderr}")
    return r


def passthrough_options(options) -> list[str]:
    """-D/-U/-I options of the CUDA build carry over; arch and NVRTC-only options are dropped."""
    out = []
    for o in options:
        o = str(o)
        if o.startswith(("-D", "-U", "-I")):
            out.append(o)
    return out


def precompiled_header(flags: tuple[str, ...]) -> Path:
    """emu.h precompiled once per flag set; returns the header path to -include (g++ picks up the
    .gch beside it when the flags match). Cuts a cold kernel build from ~3 s to ~1 s."""
    text = EMU_H.read_text()
    d = cache_dir() / f"pch_{_key(text, *flags, compiler_version())}"
    hdr, gch = d / "emu.h", d / "emu.h.gch"
    if gch.exists():
        return hdr
    d.mkdir(parents=True, exist_ok=True)
    with _locked(d / ".lock"):
        if not gch.exists():
            tmp = _tmp_name(hdr)
            tmp.write_text(text)
            os.replace(tmp, hdr)
            tmpg = _tmp_name(gch)
            _run([CXX, *flags, "-x", "c++-header", str(hdr), "-o", str(tmpg)], "emu.h precompile")
            os.replace(tmpg, gch)
    return hdr


# Function-local statics of the kernel TU are its __shared__ objects (CUDA forbids any other
# function-local static in device code); those of emu.h itself and of the C++ library are not.
_NOT_SHARED = ("_ZZN3emu", "_ZZNSt", "_ZZSt", "_ZZN9__gnu_cxx", "_ZZNKSt", "_ZZN10__cxxabiv1")


def static_shared_symbols(binary: Path) -> dict:
    """{'ref': offset of emu_last_error, 'shared': [[offset, size, mangled name], ...]}."""
    out = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True, text=True, check=True).stdout
    shared, ref = [], None
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and f[-1] == "emu_last_error":
            ref = int(f[0], 16)
        if len(f) != 4:
            continue
        value, size, kind, name = f
        if name.startswith("_ZZ") and not name.startswith(_NOT_SHARED) and kind in "bBdDuV" and "_ZGV" not in name:
            shared.append([int(value, 16), int(size, 16), name])
    return {"ref": ref, "shared": shared}


@dataclass
class Built:
    path: Path
    meta: dict
    seconds: float      # compile time spent in this call (0.0 on a cache hit)


def build(code: str, name_expressions=(), options=(), filename: str = "kernel.cu", mode: str = "default",
          extra_sources=()) -> Built:
    """Build (or find in the cache) the library (modes default/address) or executable (tsan) of a source."""
    entries = entries_of(code, name_expressions)
    src = generate_source(code, entries, filename)
    passthru = passthrough_options(options)
    exe = mode == "tsan"
    flags = (*BASE_FLAGS, *MODE_FLAGS[mode], *passthru)
    extra = [Path(p) for p in extra_sources]
    key = _key(mode, src, *flags, EMU_H.read_text(), _dependency_text(passthru), compiler_version(),
               *(p.read_text() for p in extra))
    d = cache_dir()
    out = d / (f"emu_{key}" + ("" if exe else ".so"))
    meta_path = d / f"emu_{key}.json"
    if out.exists() and meta_path.exists():
        return Built(out, json.loads(meta_path.read_text()), 0.0)
    with _locked(d / f"emu_{key}.lock"):
        if out.exists() and meta_path.exists():
            return Built(out, json.loads(meta_path.read_text()), 0.0)
        t0 = time.perf_counter()
        cpp = d / f"emu_{key}.cpp"
        tmp_cpp = _tmp_name(cpp)
        tmp_cpp.write_text(src)
        os.replace(tmp_cpp, cpp)
        if exe:  # no PCH: one-off builds, and TSan builds are rare enough
            include = [str(EMU_H)]
            link = []
        else:
            include = [str(precompiled_header(flags))]
            link = ["-shared"]
        tmp_out = _tmp_name(out)
        cmd = [CXX, *flags, *link, "-include", *include, "-I", str(INCLUDE_DIR), "-I", str(KERNEL_DIR),
               "-x", "c++", str(cpp), *(["-x", "c++", *map(str, extra)] if extra else []), "-o", str(tmp_out)]
        _run(cmd, f"emulator build of {filename}")
        meta = static_shared_symbols(tmp_out)
        meta["entries"] = [[e.name, e.expr, e.index] for e in entries]
        meta["filename"] = filename
        tmp_meta = _tmp_name(meta_path)
        tmp_meta.write_text(json.dumps(meta))
        os.replace(tmp_out, out)
        os.replace(tmp_meta, meta_path)
        return Built(out, meta, time.perf_counter() - t0)
