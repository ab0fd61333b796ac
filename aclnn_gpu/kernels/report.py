"""The kernel compile report: every kernel compiled with NVRTC (no GPU needed) for each target
architecture, with ptxas's resource usage per kernel; CI fails on any spill, warning or error.

    python -m aclnn_gpu.kernels.report                       # every file of manifest.KERNELS
    python -m aclnn_gpu.kernels.report --json report.json    # also machine-readable
    python -m aclnn_gpu.kernels.report path/x.cu:'k<float>;k<double>' --arch 90   # explicit files

Owns: the NVRTC options of the project's kernels as CuPy really compiles them (-std=c++17, the kernels
directory and the CUDA headers of the nvidia-cuda-runtime wheel on the include path, plus CuPy's own
-ftz=true and --device-as-default-execution-space; -Xptxas=-v for the log), the parsing of ptxas's
resource lines, and the pass/fail rule. Uses cuda-python's `cuda.bindings.nvrtc`; never touches a
driver. Files without name expressions are compiled too (only their `extern "C"` kernels appear in
the table), so a syntax error anywhere fails the report.

Exit status: 0 when every compile succeeded with no warning and no kernel spills; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import manifest

KERNEL_DIR = Path(__file__).resolve().parent
ARCHS = ("80", "90")

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_WARNING = re.compile(r"\bwarning\b", re.IGNORECASE)


@dataclass
class KernelUsage:
    file: str
    kernel: str          # name expression when known, else the (mangled) entry name
    arch: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    static_smem: int = 0
    barriers: int = 0


@dataclass
class FileResult:
    file: str
    arch: str
    seconds: float
    kernels: list[KernelUsage] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


def parse_ptxas(log: str, file: str, lowered: dict[str, str]) -> list[KernelUsage]:
    rows: list[KernelUsage] = []
    cur = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            cur = KernelUsage(file, lowered.get(m.group(1), m.group(1)), m.group(2).replace("sm_", ""))
            rows.append(cur)
        elif cur is not None and (m := _STACK.search(line)):
            cur.stack_frame, cur.spill_stores, cur.spill_loads = map(int, m.groups())
        elif cur is not None and (m := _USED.search(line)):
            cur.registers = int(m.group(1))
            if b := _BARRIERS.search(line):
                cur.barriers = int(b.group(1))
            if s := _SMEM.search(line):
                cur.static_smem = int(s.group(1))
    return rows


def log_warnings(log: str) -> list[str]:
    """Compiler warnings in an NVRTC log (ptxas's `info` lines are not warnings)."""
    return [ln.strip() for ln in log.splitlines()
            if _WARNING.search(ln) and "info    :" not in ln and not ln.lstrip().startswith("Remark")]


def cuda_include_dirs() -> list[str]:
    """Directories holding cuda_fp16.h & co: the nvidia-cuda-runtime wheel (cu13 or older layouts),
    then CUDA_PATH/CUDA_HOME, CuPy's idea of the CUDA path, /usr/local/cuda."""
    found: list[str] = []

    def add(d: str | Path) -> None:
        d = str(d)
        if os.path.isfile(os.path.join(d, "cuda_fp16.h")) and d not in found:
            found.append(d)

    for d in filter(None, os.environ.get("ACLNN_GPU_CUDA_INCLUDE", "").split(os.pathsep)):
        add(d)   # first: the headers of the CUDA major whose NVRTC ACLNN_GPU_NVRTC names
    try:
        import nvidia  # namespace package of the NVIDIA wheels
        for root in getattr(nvidia, "__path__", []):
            for sub in sorted(Path(root).iterdir()):
                add(sub / "include")
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            add(Path(os.environ[env]) / "include")
    if not found:
        try:
            import cupy
            p = cupy.cuda.get_cuda_path()
            if p:
                add(Path(p) / "include")
        except Exception:
            pass
    add("/usr/local/cuda/include")
    return found


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what}: {err!r}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


# What CuPy 14 adds to a RawModule's options when it compiles with NVRTC (cupy/cuda/compiler.py:
# _compile_with_cache_cuda appends -ftz=true; _compile_using_nvrtc appends -arch=sm_XX and
# --device-as-default-execution-space). -ftz=true changes the code (flush-to-zero fp32 instructions,
# hence registers), so the report compiles exactly like the loaded module; -Xptxas=-v only adds the log.
CUPY_ADDED_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")


def nvrtc_options(arch: str, includes) -> list[str]:
    """The options of the cuda device's RawModule (the project's -std/-I) plus CuPy's own, the
    architecture, and -Xptxas=-v for ptxas's resource lines."""
    return ["-std=c++17", f"-I{KERNEL_DIR}", *(f"-I{d}" for d in includes), *CUPY_ADDED_OPTIONS,
            f"-arch=sm_{arch}", "-Xptxas=-v"]


def compile_nvrtc(src: str, name: str, arch: str, exprs: list[str], includes: list[str]
                  ) -> tuple[str, dict, str | None]:
    """-> (log, {lowered name: name expression}, error message or None)."""
    from .nvrtc import bindings
    nvrtc = bindings()
    prog = _check(nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        for e in exprs:
            _check(nvrtc.nvrtcAddNameExpression(prog, e.encode()), f"nvrtcAddNameExpression({e})")
        opts = nvrtc_options(arch, includes)
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\0 ").decode(errors="replace")
        if int(res[0]) != 0:
            return log, {}, f"{res[0].name}\n{log}"
        lowered = {}
        for e in exprs:
            lowered[_check(nvrtc.nvrtcGetLoweredName(prog, e.encode()), "nvrtcGetLoweredName").decode()] = e
        return log, lowered, None
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def manifest_specs() -> list[tuple[Path, list[str]]]:
    return [(KERNEL_DIR / f, list(exprs)) for f, exprs in manifest.KERNELS.items()]


def parse_spec(spec: str) -> tuple[Path, list[str]]:
    """FILE[:expr;expr...]"""
    path, _, ex = spec.partition(":")
    return Path(path), [e.strip() for e in ex.split(";") if e.strip()]


def _compile_one(path: Path, exprs: list[str], arch: str, includes: list[str]) -> FileResult:
    t = time.perf_counter()
    if not path.is_file():
        return FileResult(path.name, arch, 0.0, error=f"{path}: no such file")
    log, lowered, err = compile_nvrtc(path.read_text(), path.name, arch, exprs, includes)
    r = FileResult(path.name, arch, time.perf_counter() - t, error=err)
    if not err:
        r.kernels = parse_ptxas(log, path.name, lowered)
        r.warnings = log_warnings(log)
    return r


def run(specs, archs=ARCHS, jobs: int | None = None) -> list[FileResult]:
    """Compile every (file, arch); NVRTC releases the GIL, so threads compile in parallel."""
    from concurrent.futures import ThreadPoolExecutor
    includes = cuda_include_dirs()
    work = [(path, exprs, arch) for path, exprs in specs for arch in archs]
    jobs = jobs or min(len(work), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda w: _compile_one(w[0], w[1], w[2], includes), work))


def failures(results: list[FileResult]) -> list[str]:
    out = []
    for r in results:
        if r.error:
            out.append(f"{r.file} sm_{r.arch}: compile error: {r.error.strip()}")
        for w in r.warnings:
            out.append(f"{r.file} sm_{r.arch}: warning: {w}")
        for k in r.kernels:
            if k.spill_stores or k.spill_loads:
                out.append(f"{r.file} sm_{r.arch}: {k.kernel} spills ({k.spill_stores} bytes stored, "
                           f"{k.spill_loads} bytes loaded)")
    return out


def print_table(results: list[FileResult], out=None) -> None:
    out = out or sys.stdout
    hdr = (f"{'file:kernel':60s} {'arch':>4s} {'regs':>4s} {'spillST':>7s} {'spillLD':>7s} {'stack':>5s} "
           f"{'smem':>6s} {'bars':>4s}")
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in results:
        if r.error:
            print(f"{r.file:60.60s} {r.arch:>4s}  ERROR", file=out)
            continue
        print(f"# {r.file} sm_{r.arch}: {r.seconds:.2f} s", file=out)
        if not r.kernels:
            print(f"{r.file + ' (no kernel instantiated)':60.60s} {r.arch:>4s}", file=out)
        for k in r.kernels:
            flag = "  SPILL" if k.spill_stores or k.spill_loads else ""
            print(f"{r.file + ':' + k.kernel:60.60s} {k.arch:>4s} {k.registers:4d} {k.spill_stores:7d} "
                  f"{k.spill_loads:7d} {k.stack_frame:5d} {k.static_smem:6d} {k.barriers:4d}{flag}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aclnn_gpu.kernels.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="FILE[:expr;expr...] (default: every file of kernels/manifest.py)")
    ap.add_argument("--arch", action="append", help="target architecture, e.g. 90 (repeatable; default 80 and 90)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: CPU count)")
    ap.add_argument("--nvrtc", metavar="LIB", help="compile with this libnvrtc.so.N (e.g. CUDA 12's, from the "
                    "nvidia-cuda-nvrtc-cu12 wheel) instead of cuda-python's; same as ACLNN_GPU_NVRTC=LIB")
    ap.add_argument("--cuda-include", metavar="DIR", help="CUDA headers (cuda_fp16.h) of that NVRTC's major, "
                    "searched first; same as ACLNN_GPU_CUDA_INCLUDE=DIR")
    a = ap.parse_args(argv)
    from .nvrtc import version
    if a.nvrtc:
        os.environ["ACLNN_GPU_NVRTC"] = a.nvrtc
    if a.cuda_include:
        os.environ["ACLNN_GPU_CUDA_INCLUDE"] = a.cuda_include
    t0 = time.perf_counter()
    specs = [parse_spec(s) for s in a.files] if a.files else manifest_specs()
    archs = tuple(x.replace("sm_", "") for x in a.arch) if a.arch else ARCHS
    results = run(specs, archs, a.jobs)
    print_table(results)
    bad = failures(results)
    if not a.files:   # the shipped binaries (kernels/shipped.py) must be these sources'
        from .shipped import REBUILD, stale_files
        bad += [f"shipped kernels: {line} (rebuild: {REBUILD})" for line in stale_files()]
    total = time.perf_counter() - t0
    if a.json:
        Path(a.json).write_text(json.dumps({"ok": not bad, "failures": bad, "seconds": total, "nvrtc": version(),
                                            "results": [asdict(r) for r in results]}, indent=1))
    for b in bad:
        print(f"FAIL {b}", file=sys.stderr)
    print(f"{len(specs)} files x {len(archs)} archs compiled by NVRTC {version()} in {total:.2f} s: "
          f"{'OK' if not bad else f'{len(bad)} failure(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
