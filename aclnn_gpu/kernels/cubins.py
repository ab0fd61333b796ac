"""The build of the shipped kernels: every kernel file compiled by NVRTC, as the cuda device's CuPy
compiles it, to a cubin per architecture and to PTX for the newest, with the lowered name of every
name expression, into `kernels/cubins/` (layout: kernels/shipped.py), xz-compressed (cubins shrink
about ninefold: the package stays small). No GPU needed.

    scripts/build_cubins.sh                                   # both CUDA majors (the one-line rebuild)
    python -m aclnn_gpu.kernels build-cubins                  # the major of cuda-python's NVRTC
    python -m aclnn_gpu.kernels build-cubins --nvrtc .../libnvrtc.so.12 --cuda-include .../include

One run writes one CUDA major (that of the NVRTC it runs: `kernels/nvrtc.py`) and replaces that
major's binaries and index entry; the other majors' stay. The binaries are committed (the package's
data: an editable install finds them where the wheel does), so they are rebuilt whenever a kernel
file, a project header or a name expression changes: tests/kernels/test_shipped.py fails until then.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import loader, shipped
from .nvrtc import bindings, version

ARCHS = (80, 86, 89, 90, 100, 120)   # cubins: Ampere (A100, A10/RTX 30), Ada, Hopper, Blackwell DC, Blackwell
PTX_ARCH = 120                       # the newest as PTX too: the driver compiles it for later GPUs


def _check(result: tuple, what: str) -> Any:
    if int(result[0]) != 0:
        raise RuntimeError(f"kernels/cubins.py: {what} failed: {result[0].name}")
    return result[1] if len(result) > 1 else None


def supported_archs() -> set[int]:
    """The architectures this NVRTC compiles for (nvrtcGetSupportedArchs)."""
    return set(_check(bindings().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def options(target: str, include_dirs: list[str]) -> list[str]:
    """The cuda device's RawModule options (loader.nvrtc_options) with CuPy's own (-ftz=true,
    --device-as-default-execution-space: shipped.CODE_OPTIONS) and the target (-arch=sm_90 gives a
    cubin, -arch=compute_120 PTX)."""
    return [*shipped.CODE_OPTIONS, f"-I{loader.KERNEL_DIR}", *(f"-I{d}" for d in include_dirs), f"-arch={target}"]


def compile_file(file: str, target: str, include_dirs: list[str]) -> tuple[bytes, dict[str, str]]:
    """(the cubin or PTX, {name expression: lowered name}) of `kernels/<file>` for `target`."""
    nvrtc = bindings()
    exprs = loader.name_expressions(file)
    prog = _check(nvrtc.nvrtcCreateProgram(loader.source(file).encode(), file.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        for e in exprs:
            _check(nvrtc.nvrtcAddNameExpression(prog, e.encode()), f"nvrtcAddNameExpression({e})")
        opts = [o.encode() for o in options(target, include_dirs)]
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if int(status) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            buf = b" " * max(size, 2)
            nvrtc.nvrtcGetProgramLog(prog, buf)
            raise RuntimeError(f"kernels/cubins.py: {file} for {target}: {status.name}\n"
                               f"{buf.rstrip(b' ').rstrip(bytes(1)).decode(errors='replace')}")
        kind = "CUBIN" if target.startswith("sm_") else "PTX"
        size = _check(getattr(nvrtc, f"nvrtcGet{kind}Size")(prog), f"nvrtcGet{kind}Size")
        binary = b" " * size
        _check(getattr(nvrtc, f"nvrtcGet{kind}")(prog, binary), f"nvrtcGet{kind}")
        names = {e: _check(nvrtc.nvrtcGetLoweredName(prog, e.encode()), "nvrtcGetLoweredName").decode()
                 for e in exprs}
        # PTX without nvrtcGetPTX's terminating NUL: a text file for cuModuleLoad, as CuPy keeps it
        return (binary.rstrip(bytes(1)) if kind == "PTX" else binary), names
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def build(include_dirs: list[str], jobs: int | None = None, out=None, everything: bool = False) -> dict[str, Any]:
    """Compile the kernel files for every target this NVRTC supports; write `cubins/cuda<major>/` and
    the major's entry of index.json. A file whose shipped binaries are current (same source hash, NVRTC
    version and targets, every binary present) is kept as it is unless `everything`: a rebuild after
    one kernel changed compiles that file only. Returns the entry."""
    out = sys.stderr if out is None else out
    nvrtc_version = version()
    major = nvrtc_version.split(".")[0]
    supported = supported_archs()
    targets = [f"sm_{a}" for a in ARCHS if a in supported]
    if PTX_ARCH in supported:
        targets.append(f"compute_{PTX_ARCH}")
    folder = shipped.CUBIN_DIR / f"cuda{major}"
    old = shipped.read_index().get("builds", {}).get(major, {})
    kept = {} if everything or old.get("nvrtc") != nvrtc_version or old.get("targets") != targets else \
        {f: e for f, e in old["files"].items() if f in loader.kernel_files() and e["source"] == shipped.source_hash(f)
         and all((shipped.CUBIN_DIR / e["binaries"].get(t, "-")).is_file() for t in targets)}
    files = sorted((f for f in loader.kernel_files() if f not in kept),
                   key=lambda f: -(loader.KERNEL_DIR / f).stat().st_size)
    work = [(f, t) for f in files for t in targets]
    print(f"build-cubins: NVRTC {nvrtc_version}, {', '.join(targets)}: compiling {', '.join(files) or 'nothing'}"
          f"{f'; current, kept: {chr(44).join(sorted(kept))}' if kept else ''}; headers {include_dirs}",
          file=out, flush=True)
    t0 = time.perf_counter()

    def one(item: tuple[str, str]) -> tuple[str, str, bytes, dict[str, str]]:
        binary, names = compile_file(item[0], item[1], include_dirs)
        print(f"  {time.perf_counter() - t0:6.1f} s  {item[0]} {item[1]}: {len(binary)} bytes", file=out, flush=True)
        return item[0], item[1], binary, names

    with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
        results = list(pool.map(one, work))

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    entry: dict[str, Any] = {"nvrtc": nvrtc_version, "targets": targets, "files": dict(kept)}
    for e in kept.values():
        for relative in e["binaries"].values():
            shutil.copy2(shipped.CUBIN_DIR / relative, tmp / Path(relative).name)
    for file, target, binary, names in results:
        stem = Path(file).stem
        name = f"{stem}.{target}.{'cubin' if target.startswith('sm_') else 'ptx'}.xz"
        (tmp / name).write_bytes(shipped.pack(binary))
        e = entry["files"].setdefault(file, {"source": shipped.source_hash(file), "names": names, "binaries": {}})
        if e["names"] != names:
            raise RuntimeError(f"kernels/cubins.py: {file}: the lowered names differ between targets")
        e["binaries"][target] = f"{folder.name}/{name}"
    entry["files"] = dict(sorted(entry["files"].items()))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    index = shipped.read_index() or {"rebuild": shipped.REBUILD, "builds": {}}
    index["builds"][major] = entry
    index["builds"] = dict(sorted(index["builds"].items(), key=lambda kv: int(kv[0])))
    shipped.INDEX.write_text(json.dumps(index, indent=1) + "\n")
    size = sum(p.stat().st_size for p in folder.iterdir())
    print(f"build-cubins: CUDA {major}: {len(results)} binaries compiled, {len(kept)} files kept; "
          f"{size / 2**20:.2f} MiB in {folder} ({time.perf_counter() - t0:.0f} s)", file=out, flush=True)
    return entry
