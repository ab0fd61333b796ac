"""The CuPy-shaped face of the emulator: `EmuModule` (like `cupy.RawModule`) and `EmuKernel` (like
the `cupy.RawKernel` function it returns).

    mod = EmuModule(source, name_expressions=["kl_fwd_contig<float>"], filename="kl_div.cu")
    k = mod.get_function("kl_fwd_contig<float>")
    k((blocks,), (256,), (s, t, out, np.int64(n), np.int32(log_target), np.int32(vec)), shared_mem=0)

Owns: argument packing exactly as CuPy's RawKernel does it, the checks a GPU launch would fail
(argument count and byte sizes are checked against the kernel's C++ parameter types before the
launch), launch errors as Python exceptions, the per-library launch lock, and the hook that records
launches for the ThreadSanitizer replay (record.py).

Arguments: numpy arrays and objects with an integer `.ptr` (CuPy-like memory pointers) are passed
as 8-byte device pointers (host memory stands in for device memory); numpy scalars by value with
their exact byte size; Python bool/int/float/complex become np.bool_/np.int64/np.float64/
np.complex128 like CuPy, so an `int` or `float` parameter needs np.int32/np.float32.

Threads: launches of one library are serialised by a lock (its shared memory and scheduler state
are per library); ctypes releases the GIL while the kernel runs, so other Python threads and
launches of other libraries proceed meanwhile.

Kernels are found by `extern "C" __global__` names and by name expressions; a non-template kernel
with C++ linkage is reachable only when its name is listed as a name expression (as with CuPy).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import build as _build
from .build import CXX  # noqa: F401  (the compiler; device/emulated.py checks that it exists)
from . import profiling as _profiling
from . import record as _record

_DEFAULT_DYNAMIC_SMEM = 48 * 1024
_MAX_ARGS = 256


class EmuError(RuntimeError):
    """Base of the emulator's launch errors."""


class EmuLaunchError(EmuError):
    """The launch failed as it would on a GPU: bad configuration, shared memory over the limit,
    __trap, or a kernel-side error."""


class EmuDeadlockError(EmuLaunchError):
    """Threads wait at a barrier or warp shuffle that the threads it waits for never reach (a GPU
    would hang or fail; the emulator detects it and abandons the block)."""


class EmuArgumentError(TypeError):
    """Kernel arguments do not match the kernel's parameters (count or byte size)."""


class _Library:
    """One loaded shared library, shared by every EmuModule built from the same source/flags."""

    def __init__(self, built: _build.Built, mode: str):
        self.path = built.path
        self.meta = built.meta
        self.profiled = mode == "profile"
        if self.profiled:  # the coverage callbacks resolve to the trace runtime: load it first
            _profiling.runtime()
        try:
            self.lib = ctypes.CDLL(str(built.path))
        except OSError as e:
            if mode == "address" and ("ASan runtime" in str(e) or "libasan" in str(e)):
                raise EmuError(f"{e}\nAn AddressSanitizer build loads only with libasan preloaded: run through "
                               f"`python -m aclnn_gpu.emulator.sanitize ...`") from None
            raise
        self.lock = threading.Lock()
        self.lib.emu_last_error.restype = ctypes.c_char_p
        self.lib.emu_last_error.argtypes = []
        self._register_static_shared()
        if self.profiled:
            _profiling.runtime().register_library(self._load_base(), self.meta.get("sites", []))

    def _load_base(self) -> int:
        """Where the library was loaded: symbol offsets in the file + this = addresses."""
        return ctypes.cast(self.lib.emu_last_error, ctypes.c_void_p).value - self.meta["ref"]

    def _register_static_shared(self):
        shared = self.meta.get("shared", [])
        ref = self.meta.get("ref")
        if not shared or ref is None:
            return
        base = self._load_base()
        n = len(shared)
        ptrs = (ctypes.c_void_p * n)(*[base + off for off, _, _ in shared])
        sizes = (ctypes.c_size_t * n)(*[size for _, size, _ in shared])
        self.lib.emu_set_static_shared(ptrs, sizes, ctypes.c_int(n))

    def last_error(self) -> str:
        return self.lib.emu_last_error().decode(errors="replace")

    def last_stats(self) -> dict:
        out = (ctypes.c_ulonglong * 3)()
        self.lib.emu_last_stats(out)
        return {"block_barriers": out[0], "warp_syncs": out[1], "blocks": out[2]}


_libraries: dict[Path, _Library] = {}
_libraries_lock = threading.Lock()


def _reinit_locks_in_child() -> None:
    """A fork() child: a launch running in another thread of the parent at fork time left its library's
    lock held, and that thread does not exist here to release it."""
    global _libraries_lock
    _libraries_lock = threading.Lock()
    for lib in _libraries.values():
        lib.lock = threading.Lock()
    _profiling.LAUNCH_LOCK = threading.RLock()   # the profiler's and the recorder's process-wide locks
    _record._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_locks_in_child)


def _load(built: _build.Built, mode: str) -> _Library:
    with _libraries_lock:
        lib = _libraries.get(built.path)
        if lib is None:
            lib = _libraries[built.path] = _Library(built, mode)
        return lib


def _as_scalar(a: Any) -> np.generic | None:
    if isinstance(a, np.generic):
        return a
    if isinstance(a, bool):
        return np.bool_(a)
    if isinstance(a, int):
        return np.int64(a)
    if isinstance(a, float):
        return np.float64(a)
    if isinstance(a, complex):
        return np.complex128(a)
    return None


class EmuKernel:
    """A launchable kernel: `kernel(grid, block, args, shared_mem=0)`."""

    def __init__(self, module: "EmuModule", name: str, index: int):
        self.module = module
        self.name = name
        self.index = index
        lib = module._library.lib
        self._fn = getattr(lib, f"emu_launch_{index}")
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_size_t), ctypes.c_int, ctypes.c_size_t]
        sig = getattr(lib, f"emu_sig_{index}")
        sizes = (ctypes.c_size_t * _MAX_ARGS)()
        is_ptr = (ctypes.c_ubyte * _MAX_ARGS)()
        n = sig(sizes, is_ptr, _MAX_ARGS)
        self.param_sizes = tuple(sizes[i] for i in range(n))
        self.param_is_pointer = tuple(bool(is_ptr[i]) for i in range(n))
        # cudaFuncAttributeMaxDynamicSharedMemorySize, under CuPy's attribute name.
        self.max_dynamic_shared_size_bytes = _DEFAULT_DYNAMIC_SMEM
        self.last_stats: dict | None = None

    def _pack(self, args: Sequence[Any]):
        """-> (holders kept alive, pointer per arg, size per arg, description per arg for the recorder)."""
        if len(args) != len(self.param_sizes):
            raise EmuArgumentError(f"kernel {self.name!r} takes {len(self.param_sizes)} arguments, got {len(args)}")
        holders, ptrs, sizes, desc = [], [], [], []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                holder: Any = ctypes.c_void_p(a.ctypes.data)
                kind: tuple[str, Any] = ("array", a)
            elif not isinstance(a, np.generic) and isinstance(getattr(a, "ptr", None), int):
                holder = ctypes.c_void_p(a.ptr)
                kind = ("pointer", a.ptr)
            else:
                s = _as_scalar(a)
                if s is None:
                    raise EmuArgumentError(f"kernel {self.name!r} argument {i}: unsupported type {type(a).__name__}")
                raw = s.tobytes()
                holder = ctypes.create_string_buffer(raw, len(raw))
                kind = ("scalar", s)
            size = ctypes.sizeof(holder)
            if size != self.param_sizes[i]:
                given = type(kind[1]).__name__ if kind[0] == "scalar" else "pointer"
                raise EmuArgumentError(
                    f"kernel {self.name!r} argument {i}: the kernel parameter is {self.param_sizes[i]} bytes, "
                    f"got {size} bytes ({given}); pass a numpy scalar of the parameter's exact type "
                    f"(np.int32 for int, np.int64 for long long, np.float32 for float)")
            holders.append(holder)
            ptrs.append(ctypes.addressof(holder))
            sizes.append(size)
            desc.append(kind)
        return holders, ptrs, sizes, desc

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None):
        grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
        block = tuple(int(b) for b in (block if isinstance(block, (tuple, list)) else (block,)))
        if not 1 <= len(grid) <= 3 or not 1 <= len(block) <= 3:
            raise EmuLaunchError(f"kernel {self.name!r}: grid and block take 1 to 3 dimensions")
        grid += (1,) * (3 - len(grid))
        block += (1,) * (3 - len(block))
        if any(v < 0 or v > 0xFFFFFFFF for v in grid + block):
            raise EmuLaunchError(f"kernel {self.name!r}: invalid grid {grid} / block {block}")
        shared_mem = int(shared_mem)
        if shared_mem < 0:
            raise EmuLaunchError(f"kernel {self.name!r}: negative shared memory size")
        holders, ptrs, sizes, desc = self._pack(tuple(args))
        n = len(ptrs)
        gb = (ctypes.c_uint * 6)(*grid, *block)
        argv = (ctypes.c_void_p * max(n, 1))(*ptrs)
        sz = (ctypes.c_size_t * max(n, 1))(*sizes)
        recording = _record.active_recorder() if self.module.record else None
        if recording and not recording.wants(self, grid, block, shared_mem):
            recording = None
        snapshot = recording.snapshot(self, desc) if recording else None
        lib = self.module._library
        with lib.lock, (_profiling.LAUNCH_LOCK if lib.profiled else contextlib.nullcontext()):
            if lib.profiled:
                _profiling.runtime().set_allocations(_profiling.launch_allocations(desc, self.param_is_pointer))
            rc = self._fn(gb, shared_mem, argv, sz, n, int(self.max_dynamic_shared_size_bytes))
            err = lib.last_error() if rc else ""
            self.last_stats = lib.last_stats()
            if lib.profiled and not rc:
                _profiling.record_launch(_profiling.runtime().result(self.name, self.module.filename, grid, block))
        del holders
        if rc == 5:
            raise EmuDeadlockError(err)
        if rc:
            raise EmuLaunchError(err or f"launch of {self.name!r} failed (code {rc})")
        if recording:
            recording.commit(self, grid, block, shared_mem, snapshot, self.last_stats)


def _kernel_file_of(code: str) -> str:
    """The project kernel file a source was read from (messages and profiles name it), else kernel.cu."""
    for path in sorted(_build.KERNEL_DIR.glob("*.cu")):
        if code.startswith(path.read_text()):
            return str(path)
    return "kernel.cu"


class EmuModule:
    """Like cupy.RawModule: compiles `code` for the CPU emulator (cached) and hands out kernels.

    `options`: the CUDA build's options; -D/-U/-I carry over, the rest (arch etc.) is ignored.
    `filename`: the .cu file's name or path, for messages (and #line in the generated source).
    The build mode follows ACLNN_GPU_EMU_SANITIZE at construction ("address": ASan+UBSan build).
    """

    def __init__(self, code: str, options=(), name_expressions=(), filename: str = "kernel.cu", *,
                 mode: str | None = None, record: bool = True):
        self.code = code
        self.options = tuple(str(o) for o in options)
        self.name_expressions = list(name_expressions)
        self.filename = str(filename) if filename != "kernel.cu" else _kernel_file_of(code)
        self.mode = mode or _build.sanitize_mode()
        self.record = record
        built = _build.build(code, self.name_expressions, self.options, self.filename, self.mode)
        self.compile_seconds = built.seconds
        self.library_path = built.path
        self._library = _load(built, self.mode)
        self._entries = {name: index for name, _, index in built.meta["entries"]}
        self._kernels: dict[str, EmuKernel] = {}
        self._kernels_lock = threading.Lock()

    @classmethod
    def from_file(cls, path, name_expressions=(), options=(), **kw) -> "EmuModule":
        path = Path(path)
        return cls(path.read_text(), options=options, name_expressions=name_expressions, filename=str(path), **kw)

    @property
    def kernel_names(self) -> list[str]:
        return list(self._entries)

    def get_function(self, name: str) -> EmuKernel:
        with self._kernels_lock:
            k = self._kernels.get(name)
            if k is None:
                if name not in self._entries:
                    raise KeyError(f"{self.filename}: no kernel {name!r}; known: {sorted(self._entries)} "
                                   f"(kernels are found by extern \"C\" __global__ names and name expressions)")
                k = self._kernels[name] = EmuKernel(self, name, self._entries[name])
            return k
