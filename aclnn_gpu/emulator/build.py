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
`sanitize.py`), "tsan" (standalone executable with `-DEMU_THREADS -fsanitize=thread`, see `tsan.py`),
and "profile" (selected by `ACLNN_GPU_EMU_PROFILE=1`: clang++ with
`-fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores -DEMU_PROFILE`, every load and store
calls the memory-trace runtime `profile_rt.cpp`, built once without the flag; the build's metadata
carries the table of access sites, see `access_sites`; profiling.py aggregates).

Tools: the compiler, nm, objdump and llvm-symbolizer run in `tool_env()`, the environment without the
sanitizer runtimes a sanitized test process preloads (sanitize.py): they are not what is checked, and
under a preloaded ASan runtime they compile ~1.8x slower and write reports of their own where the
kernels' go.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL_DIR = HERE.parent / "kernels"
INCLUDE_DIR = HERE / "include"
EMU_H = HERE / "emu.h"
CXX = os.environ.get("ACLNN_GPU_EMU_CXX", "g++")
# The profiling build needs clang's -fsanitize-coverage=trace-loads,trace-stores (Debian: clang >= 14).
PROFILE_CXX = os.environ.get("ACLNN_GPU_EMU_PROFILE_CXX", "clang++")
PROFILE_RUNTIME = HERE / "profile_rt.cpp"

BASE_FLAGS = ("-std=c++20", "-pthread", "-fPIC", "-fvisibility=hidden",
              "-Wno-unknown-pragmas", "-Wno-attributes")
MODE_FLAGS = {
    # -O1: the best build time / run time trade (O2 costs ~40% more compile time for <10% run time).
    "default": ("-O1",),
    # -g for line numbers in reports; frame pointers for ASan's fast unwinder.
    "address": ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                "-fno-sanitize-recover=undefined"),
    "tsan": ("-O1", "-g", "-DEMU_THREADS", "-fsanitize=thread"),
    # Line tables (with inline frames) name the access sites; trace-loads needs trace-pc-guard beside it.
    # (The coverage flags are added in the second step of the build, see _build_profiled.)
    "profile": ("-O1", "-gline-tables-only", "-DEMU_PROFILE"),
}
COVERAGE_FLAGS = ("-fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores",)

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


def compiler_of(mode: str) -> str:
    return PROFILE_CXX if mode == "profile" else CXX


def profiling_enabled() -> bool:
    return os.environ.get("ACLNN_GPU_EMU_PROFILE", "").strip().lower() not in ("", "0", "off", "none")


def sanitize_mode() -> str:
    """The in-process build mode selected by the environment: "default", "address" or "profile"."""
    if profiling_enabled():
        if os.environ.get("ACLNN_GPU_EMU_SANITIZE", "").strip().lower() not in ("", "0", "none", "off"):
            raise ValueError("ACLNN_GPU_EMU_PROFILE and ACLNN_GPU_EMU_SANITIZE cannot be combined")
        return "profile"
    v = os.environ.get("ACLNN_GPU_EMU_SANITIZE", "").strip().lower()
    if v in ("", "0", "none", "off"):
        return "default"
    if v in ("address", "asan", "1"):
        return "address"
    raise ValueError(f"ACLNN_GPU_EMU_SANITIZE={v!r}: expected 'address' (ThreadSanitizer runs as a "
                     f"standalone replay: python -m aclnn_gpu.emulator.tsan)")


# A sanitizer runtime in LD_PRELOAD (GCC's libasan.so.8, clang's libclang_rt.asan-x86_64.so, ...).
_SANITIZER_RUNTIME = re.compile(r"lib(?:clang_rt\.)?(?:a|ub|t|l|m|hwa)san\b[^/]*$")
_SANITIZER_OPTIONS = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS", "MSAN_OPTIONS")


def tool_env(base: dict | None = None) -> dict:
    """`base` (default: this process's environment) without sanitizer runtimes in LD_PRELOAD and
    without their options: the environment of the compiler and binutils this module runs."""
    env = dict(os.environ if base is None else base)
    preload = [p for p in re.split(r"[:\s]+", env.pop("LD_PRELOAD", "")) if p and not _SANITIZER_RUNTIME.search(p)]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    for name in _SANITIZER_OPTIONS:
        env.pop(name, None)
    return env


@functools.lru_cache(maxsize=None)
def compiler_version(cxx: str = CXX) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True,
                          env=tool_env()).stdout.splitlines()[0]


def kernel_names(code: str) -> list[str]:
    """`extern "C" __global__` kernels of a source. Templates and C++-named kernels are reached
    through name expressions only (as with cupy.RawModule)."""
    return _EXTERN_C_GLOBAL.findall(code)


_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\(")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _closing_paren(code: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at `open_at` (-1 if unbalanced)."""
    depth = 0
    for i in range(open_at, len(code)):
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _top_level_first_arg(args: str) -> str:
    depth = 0
    for i, c in enumerate(args):
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        elif c == "," and depth == 0:
            return args[:i]
    return args


def rewrite_launch_bounds(code: str) -> str:
    """`__global__ void __launch_bounds__(N[, M]) k(...) {` gets `emu::launch_bounds((N));` right after
    its `{` (same line, so #line numbers stay right): a launch with more threads per block than N fails
    as on a GPU. N may name template parameters: the check is evaluated in the kernel's scope."""
    out, pos = [], 0
    scan = _COMMENT.sub(lambda c: re.sub(r"[^\n]", " ", c.group(0)), code)  # same offsets, no comments
    for m in _LAUNCH_BOUNDS.finditer(scan):
        if m.start() < pos or "__global__" not in scan[max(0, m.start() - 200):m.start()]:
            continue
        close = _closing_paren(scan, m.end() - 1)
        if close < 0:
            break
        bound = _top_level_first_arg(code[m.end():close]).strip()
        params = scan.find("(", close + 1)
        params_end = _closing_paren(scan, params) if params >= 0 else -1
        if params_end < 0:
            break
        brace, semi = scan.find("{", params_end), scan.find(";", params_end)
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration without a body
        out.append(code[pos:brace + 1])
        out.append(f" emu::launch_bounds(({bound}));")
        pos = brace + 1
    out.append(code[pos:])
    return "".join(out)


def rewrite_source(code: str) -> str:
    code = rewrite_launch_bounds(code)
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
    r = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
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
    out = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True, text=True, check=True,
                         env=tool_env()).stdout
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
    cxx = compiler_of(mode)
    flags = (*BASE_FLAGS, *MODE_FLAGS[mode], *passthru)
    extra = [Path(p) for p in extra_sources]
    key = _key(mode, src, *flags, EMU_H.read_text(), _dependency_text(passthru), compiler_version(cxx),
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
        elif mode == "profile":  # clang: no g++ PCH; coverage callbacks resolve to profile_rt at load
            include = [str(EMU_H)]
            link = ["-shared"]
        else:
            include = [str(precompiled_header(flags))]
            link = ["-shared"]
        tmp_out = _tmp_name(out)
        cmd = [cxx, *flags, *link, "-include", *include, "-I", str(INCLUDE_DIR), "-I", str(KERNEL_DIR),
               "-x", "c++", str(cpp), *(["-x", "c++", *map(str, extra)] if extra else []), "-o", str(tmp_out)]
        if mode == "profile":
            _build_profiled(cmd, tmp_out, filename)
        else:
            _run(cmd, f"emulator build of {filename}")
        meta = static_shared_symbols(tmp_out)
        meta["entries"] = [[e.name, e.expr, e.index] for e in entries]
        meta["filename"] = filename
        if mode == "profile":
            meta["sites"] = access_sites(tmp_out)
        tmp_meta = _tmp_name(meta_path)
        tmp_meta.write_text(json.dumps(meta))
        os.replace(tmp_out, out)
        os.replace(tmp_meta, meta_path)
        return Built(out, meta, time.perf_counter() - t0)


# ------------------------------------------------------------------------------ profiling build
_CALL_COV = re.compile(r"call\s+\S+\s+<__sanitizer_cov_(load|store)(\d+)(?:@plt)?>")
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")


def _symbolizer() -> str:
    for name in ("llvm-symbolizer", "llvm-symbolizer-14", "llvm-symbolizer-15", "llvm-symbolizer-16"):
        if shutil.which(name):
            return name
    raise EmuBuildError("the profiling build needs llvm-symbolizer (Debian: apt-get install -y llvm)")


# Aggregate copies (a 16-byte struct assigned through a pointer) stay llvm.memcpy/memset intrinsics that
# the backend expands inline, out of the coverage pass's sight: the IR gets a call to the runtime's
# emu_prof_memcpy/emu_prof_memset before each, with the intrinsic's source location.
_MEM_INTRINSIC = re.compile(
    r"^(\s*)(?:tail |notail )?call void @llvm\.(memcpy|memmove|memset)\.[\w.]+\((.*)\)([^()]*)$")
_DBG = re.compile(r"!dbg !\d+")


def _split_top(args: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in args:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur).strip())
    return out


def instrument_mem_intrinsics(ir: str) -> str:
    out = []
    for line in ir.splitlines():
        m = _MEM_INTRINSIC.match(line)
        if m:
            indent, what, args, tail = m.groups()
            parts = _split_top(args)
            dbg = _DBG.search(tail)
            loc = f", {dbg.group(0)}" if dbg else ""
            val = [p.split()[-1] if p.split() and p.split()[-1].startswith("%") else None for p in parts]
            size = parts[2] if len(parts) > 2 else ""
            if what in ("memcpy", "memmove") and val[0] and val[1] and size.startswith("i64 "):
                out.append(f"{indent}call void @emu_prof_memcpy(i8* {val[0]}, i8* {val[1]}, {size}){loc}")
            elif what == "memset" and val[0] and size.startswith("i64 "):
                out.append(f"{indent}call void @emu_prof_memset(i8* {val[0]}, {size}){loc}")
        out.append(line)
    out.append("declare void @emu_prof_memcpy(i8*, i8*, i64)")
    out.append("declare void @emu_prof_memset(i8*, i64)")
    return "\n".join(out) + "\n"


def _build_profiled(cmd: list, out: Path, filename: str) -> None:
    """clang++ -> LLVM IR (optimised, not instrumented); memcpy/memset calls added; IR -> instrumented
    shared library (no further optimisation, so the traced accesses are those of the -O1 code)."""
    ir, ir2 = _tmp_name(out.with_suffix(".ll")), _tmp_name(out.with_suffix(".i.ll"))
    try:
        i = cmd.index("-o")
        first = [c for c in cmd[:i] if c != "-shared"] + ["-S", "-emit-llvm", "-o", str(ir)]
        _run(first, f"profiling build of {filename} (IR)")
        ir2.write_text(instrument_mem_intrinsics(ir.read_text()))
        _run([cmd[0], "-O0", "-fPIC", "-shared", *COVERAGE_FLAGS, "-x", "ir", str(ir2), "-o", str(out)],
             f"profiling build of {filename} (instrumented)")
    finally:
        for f in (ir, ir2):
            f.unlink(missing_ok=True)


_CALL_MEM = re.compile(r"call\s+\S+\s+<emu_prof_(memcpy|memset)(?:@plt)?>")


def access_sites(binary: Path) -> list[list]:
    """Every instrumented load/store call of a profiling build: [return-address offset, "load"|"store",
    bytes, [file:line:column frames, innermost first]] (objdump finds the calls, llvm-symbolizer their
    source lines with the inline chain)."""
    dis = _run(["objdump", "-d", "--no-show-raw-insn", str(binary)], "objdump").stdout
    calls: list[tuple[int, str, int, int]] = []
    pending: tuple[str, int, int] | None = None
    for line in dis.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        if pending is not None:
            calls.append((int(m.group(1), 16), *pending))
            pending = None
        if c := _CALL_COV.search(m.group(2)):
            pending = (c.group(1), int(c.group(2)), int(m.group(1), 16))
        elif c := _CALL_MEM.search(m.group(2)):  # a copy reads at the return address, writes at +1
            pending = ("copy" if c.group(1) == "memcpy" else "store", 0, int(m.group(1), 16))
    if not calls:
        return []
    query = "".join(f"0x{call_at:x}\n" for _, _, _, call_at in calls)
    r = subprocess.run([_symbolizer(), f"--obj={binary}", "--functions=none", "--inlining", "--relative-address"],
                       input=query, capture_output=True, text=True, check=True, env=tool_env())
    chunks = r.stdout.split("\n\n")
    out = []
    for (ret, kind, size, _), chunk in zip(calls, chunks):
        frames = [f.strip() for f in chunk.strip().splitlines() if f.strip()]
        if kind == "copy":
            out.append([ret, "load", size, frames])
            out.append([ret + 1, "store", size, frames])
        else:
            out.append([ret, kind, size, frames])
    return out


def profile_runtime() -> Path:
    """profile_rt.cpp built once (cached) as a shared library, without coverage instrumentation."""
    text = PROFILE_RUNTIME.read_text()
    flags = ("-std=c++17", "-O2", "-fPIC", "-shared")
    d = cache_dir()
    out = d / f"emuprof_{_key(text, *flags, compiler_version(PROFILE_CXX))}.so"
    if out.exists():
        return out
    with _locked(d / f"{out.name}.lock"):
        if not out.exists():
            tmp = _tmp_name(out)
            _run([PROFILE_CXX, *flags, str(PROFILE_RUNTIME), "-o", str(tmp)], "profile runtime build")
            os.replace(tmp, out)
    return out
