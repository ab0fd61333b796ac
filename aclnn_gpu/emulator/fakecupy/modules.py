"""fakecupy's kernels: RawModule (from source, compiled for the CPU by the emulator where CuPy runs
NVRTC, or from a shipped cubin / PTX, checked as the driver loads it against the current device's
compute capability, runtime.py) and RawKernel (a launch queued on the current stream, refused as
CUDA refuses it: another device's stream, too much dynamic shared memory). `module_loads` records
which path each module took (tests read it).
"""
from __future__ import annotations

from typing import Any, Sequence

from . import runtime
from .errors import CUDADriverError
from .streams import Stream, _current_device, get_current_stream

# What each RawModule was made from, in order: ("nvrtc", source) for code compiled (NVRTC on a GPU),
# ("load", path) for a shipped cubin or PTX loaded (tests read which path the cuda device took)
module_loads: list[tuple[str, str]] = []
STATIC_SHARED_LIMIT = 48 * 1024   # dynamic shared memory a launch may use without the function attribute


class RawKernel:
    """A kernel of a RawModule; calling it queues the emulated launch on the current stream."""

    def __init__(self, module: Any, expr: str):
        self.function = module.get_function(expr)
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Stream | None = None) -> None:
        target = stream or get_current_stream()
        if target.ptr and target.device_id != _current_device():   # cuLaunchKernel: another context's stream
            raise CUDADriverError(400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle")
        if shared_mem > max(STATIC_SHARED_LIMIT, self.max_dynamic_shared_size_bytes):
            raise CUDADriverError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument")
        function, packed = self.function, tuple(args)
        target.submit(lambda: function(tuple(grid), tuple(block), packed, shared_mem=shared_mem))


class RawModule:
    """CuPy's RawModule (cupy/_core/raw.pyx): keyword-only, exactly one of `code` (a str, `options` a
    tuple: Cython-typed there) and `path`; `name_expressions` only with `code`.

    `code` is compiled for the CPU (cached by source hash) where CuPy runs NVRTC. `path` is a shipped
    binary (kernels/shipped.py): loaded as the driver would (a missing file: CUDA_ERROR_FILE_NOT_FOUND;
    a cubin of another major architecture or a newer minor, or PTX of a newer architecture than the
    current device: CUDA_ERROR_NO_BINARY_FOR_GPU; neither ELF nor PTX: CUDA_ERROR_INVALID_IMAGE), and
    then stands in for the module compiled from its kernel file's current source, its functions found
    by the lowered names the build stored (index.json)."""

    def __init__(self, *, code: str | None = None, path: str | None = None, options: tuple[str, ...] = (),
                 name_expressions: Sequence[str] | None = None):
        if (code is None) == (path is None):
            raise TypeError("Exactly one of `code` and `path` keyword arguments must be given.")
        if path is not None and name_expressions is not None:
            raise ValueError("need CUDA C++ code for the requested kernels")
        from .. import EmuModule
        self.lowered: dict[str, str] = {}   # lowered name -> name expression (a loaded binary's)
        if path is not None:
            file, self.lowered = _load_binary(path)
            from ...kernels import loader
            code, options, name_expressions = loader.source(file), (), loader.name_expressions(file)
            module_loads.append(("load", str(path)))
        elif not isinstance(code, str) or not isinstance(options, tuple):
            raise TypeError(f"RawModule: code must be a str and options a tuple, got {type(code).__name__} and "
                            f"{type(options).__name__}")
        else:
            module_loads.append(("nvrtc", code))
        self.module = EmuModule(code, options=tuple(o for o in options if o.startswith(("-D", "-U"))),
                                name_expressions=list(name_expressions or ()))

    def compile(self, log_stream: Any = None) -> None:
        """Compiled at construction here (CuPy: at the first get_function, or now)."""

    def get_function(self, name: str) -> RawKernel:
        return RawKernel(self.module, self.lowered.get(name, name))


def _load_binary(path: str) -> tuple[str, dict[str, str]]:
    """(kernel file, {lowered name: name expression}) of a shipped binary as kernels/shipped.py unpacks
    it (`.../cuda13/<stem>.<target>.<hash>.<cubin|ptx>`), checked as cuModuleLoad checks it against the
    current device."""
    from pathlib import Path

    from ...kernels import shipped
    binary = Path(path)
    if not binary.is_file():
        raise CUDADriverError(301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found")
    data = binary.read_bytes()
    stem, target, *_, ext = binary.name.split(".")
    if not (data.startswith(b"\x7fELF") and target.startswith("sm_")) and \
            not (b".version" in data[:4096] and target.startswith("compute_")):
        raise CUDADriverError(200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid")
    major, minor = runtime.COMPUTE_CAPABILITIES.get(_current_device(), runtime.COMPUTE_CAPABILITY)
    number = int(target.rpartition("_")[2])
    runs = number // 10 == major and number % 10 <= minor if target.startswith("sm_") else number <= major * 10 + minor
    if not runs:
        raise CUDADriverError(209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution "
                                   "on the device")
    packed = f"{binary.parent.name}/{stem}.{target}.{ext}.xz"
    for build in shipped.read_index().get("builds", {}).values():
        for file, entry in build["files"].items():
            if packed in entry["binaries"].values():
                return file, {lowered: expr for expr, lowered in entry["names"].items()}
    raise CUDADriverError(200, "CUDA_ERROR_INVALID_IMAGE", f"{packed} is no shipped binary of index.json")

