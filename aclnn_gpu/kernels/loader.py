"""Where kernel sources live and how NVRTC is told to compile them (shared by the cuda device, the
emulated device and the compile report)."""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from . import manifest

KERNEL_DIR = Path(__file__).resolve().parent


def kernel_files() -> list[str]:
    return list(manifest.KERNELS)


def source(file: str) -> str:
    """The kernel file's text, ending with a comment that carries the hash of the project's headers:
    CuPy's on-disk kernel cache keys on the source text and the options, not on what the source
    #includes, so an edited common.cuh must change the text to be compiled again."""
    headers = hashlib.sha256(b"".join(h.read_bytes() for h in sorted(KERNEL_DIR.glob("*.cuh"))))
    return f"{(KERNEL_DIR / file).read_text()}\n// project headers: sha256 {headers.hexdigest()[:16]}\n"


def name_expressions(file: str) -> list[str]:
    return list(manifest.KERNELS[file])


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> tuple[str, ...]:
    """Folders holding cuda_fp16.h / cuda_bf16.h: the nvidia-cuda-runtime wheel first, then the CUDA
    toolkit CuPy knows about, then CUDA_PATH."""
    found: list[str] = []
    try:
        import nvidia  # the namespace package of the nvidia-* wheels
        for root in getattr(nvidia, "__path__", []):
            for candidate in (Path(root) / "cu13" / "include", Path(root) / "cuda_runtime" / "include"):
                if (candidate / "cuda_fp16.h").is_file():
                    found.append(str(candidate))
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            found.append(os.path.join(os.environ[env], "include"))
    try:
        import cupy
        path = cupy.cuda.get_cuda_path()
        if path:
            found.append(os.path.join(path, "include"))
    except Exception:  # noqa: BLE001 - CuPy is optional here
        pass
    unique = []
    for d in found:
        if os.path.isfile(os.path.join(d, "cuda_fp16.h")) and d not in unique:
            unique.append(d)
    return tuple(unique)


def nvrtc_options() -> tuple[str, ...]:
    """Options every kernel file is compiled with (architecture flags are added by the caller)."""
    return ("-std=c++17", f"-I{KERNEL_DIR}", *(f"-I{d}" for d in cuda_include_dirs()))
