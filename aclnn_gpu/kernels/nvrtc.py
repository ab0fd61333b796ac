"""Which NVRTC the compile report and the cubin build (kernels/cubins.py) use: cuda-python's
`cuda.bindings.nvrtc` (the NVRTC of the installed CUDA major, 13 with the `cuda13` extra), or any
`libnvrtc.so.N` named by the environment variable ACLNN_GPU_NVRTC, loaded with ctypes, so the kernels
are compiled against CUDA 12's NVRTC (the `nvidia-cuda-nvrtc-cu12` wheel) from the same interpreter.

Owns: the ctypes binding of the NVRTC entry points the report and the cubin build call, shaped like
`cuda.bindings.nvrtc` (each call returns a tuple whose first item is the status, with `.name`), so
their compile code is the same whichever library runs it. Never touches a driver or a GPU.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

ENV = "ACLNN_GPU_NVRTC"


class Status(int):
    """An nvrtcResult: an int (0 = NVRTC_SUCCESS) that knows NVRTC's name for itself."""
    name: str

    def __new__(cls, value: int, name: str) -> Status:
        obj = super().__new__(cls, value)
        obj.name = name
        return obj


class CtypesNvrtc:
    """The subset of `cuda.bindings.nvrtc` that report.py uses, over one libnvrtc shared library."""

    def __init__(self, path: str):
        self.path = path
        # NVRTC dlopens its builtins library by soname; CUDA 13's wheel has no $ORIGIN runpath to find
        # it beside libnvrtc, so it is loaded first (a loaded soname satisfies the later dlopen)
        for builtins in sorted(Path(path).parent.glob("libnvrtc-builtins.so.*")):
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(path)
        p, cp = ctypes.c_void_p, ctypes.c_char_p
        lib.nvrtcGetErrorString.restype = cp
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        for fn, args in (("nvrtcVersion", [ctypes.POINTER(ctypes.c_int)] * 2),
                         ("nvrtcCreateProgram", [ctypes.POINTER(p), cp, cp, ctypes.c_int, p, p]),
                         ("nvrtcAddNameExpression", [p, cp]),
                         ("nvrtcCompileProgram", [p, ctypes.c_int, ctypes.POINTER(cp)]),
                         ("nvrtcGetProgramLogSize", [p, ctypes.POINTER(ctypes.c_size_t)]),
                         ("nvrtcGetProgramLog", [p, cp]),
                         ("nvrtcGetLoweredName", [p, cp, ctypes.POINTER(cp)]),
                         ("nvrtcDestroyProgram", [ctypes.POINTER(p)]),
                         ("nvrtcGetCUBINSize", [p, ctypes.POINTER(ctypes.c_size_t)]),
                         ("nvrtcGetCUBIN", [p, cp]),
                         ("nvrtcGetPTXSize", [p, ctypes.POINTER(ctypes.c_size_t)]),
                         ("nvrtcGetPTX", [p, cp]),
                         ("nvrtcGetNumSupportedArchs", [ctypes.POINTER(ctypes.c_int)]),
                         ("nvrtcGetSupportedArchs", [ctypes.POINTER(ctypes.c_int)])):
            getattr(lib, fn).restype = ctypes.c_int
            getattr(lib, fn).argtypes = args
        self._lib = lib

    def _status(self, code: int) -> Status:
        return Status(code, (self._lib.nvrtcGetErrorString(code) or b"NVRTC_ERROR").decode())

    def nvrtcVersion(self) -> tuple[Status, int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        return self._status(self._lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))), major.value, minor.value

    def nvrtcCreateProgram(self, src: bytes, name: bytes, num_headers: int, headers: list, include_names: list
                           ) -> tuple[Status, Any]:
        if num_headers or headers or include_names:
            raise NotImplementedError("in-memory headers are not used by the compile report")
        prog = ctypes.c_void_p()
        return self._status(self._lib.nvrtcCreateProgram(ctypes.byref(prog), src, name, 0, None, None)), prog

    def nvrtcAddNameExpression(self, prog: Any, expr: bytes) -> tuple[Status]:
        return (self._status(self._lib.nvrtcAddNameExpression(prog, expr)),)

    def nvrtcCompileProgram(self, prog: Any, count: int, options: list[bytes]) -> tuple[Status]:
        array = (ctypes.c_char_p * max(count, 1))(*options[:count])
        return (self._status(self._lib.nvrtcCompileProgram(prog, count, array)),)

    def nvrtcGetProgramLogSize(self, prog: Any) -> tuple[Status, int]:
        size = ctypes.c_size_t()
        return self._status(self._lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))), size.value

    def nvrtcGetProgramLog(self, prog: Any, buf: bytes) -> tuple[Status]:
        # like cuda.bindings, the log lands in the caller's buffer of nvrtcGetProgramLogSize bytes (a
        # 1-byte buffer holds only the NUL of an empty log, and may be Python's shared b" ": left alone)
        out = ctypes.create_string_buffer(len(buf))
        status = self._status(self._lib.nvrtcGetProgramLog(prog, out))
        if len(buf) > 1:
            ctypes.memmove(ctypes.c_char_p(buf), out, len(buf))
        return (status,)

    def nvrtcGetLoweredName(self, prog: Any, expr: bytes) -> tuple[Status, bytes]:
        lowered = ctypes.c_char_p()
        status = self._status(self._lib.nvrtcGetLoweredName(prog, expr, ctypes.byref(lowered)))
        return status, (lowered.value or b"")

    def _size(self, fn: str, prog: Any) -> tuple[Status, int]:
        size = ctypes.c_size_t()
        return self._status(getattr(self._lib, fn)(prog, ctypes.byref(size))), size.value

    def _fill(self, fn: str, prog: Any, buf: bytes) -> tuple[Status]:
        # like nvrtcGetProgramLog: into the caller's buffer of the size the *Size call gave
        out = ctypes.create_string_buffer(len(buf))
        status = self._status(getattr(self._lib, fn)(prog, out))
        ctypes.memmove(ctypes.c_char_p(buf), out, len(buf))
        return (status,)

    def nvrtcGetCUBINSize(self, prog: Any) -> tuple[Status, int]:
        return self._size("nvrtcGetCUBINSize", prog)

    def nvrtcGetCUBIN(self, prog: Any, buf: bytes) -> tuple[Status]:
        return self._fill("nvrtcGetCUBIN", prog, buf)

    def nvrtcGetPTXSize(self, prog: Any) -> tuple[Status, int]:
        return self._size("nvrtcGetPTXSize", prog)

    def nvrtcGetPTX(self, prog: Any, buf: bytes) -> tuple[Status]:
        return self._fill("nvrtcGetPTX", prog, buf)

    def nvrtcGetSupportedArchs(self) -> tuple[Status, list[int]]:
        count = ctypes.c_int()
        status = self._status(self._lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)))
        if int(status) != 0:
            return status, []
        archs = (ctypes.c_int * max(count.value, 1))()
        return self._status(self._lib.nvrtcGetSupportedArchs(archs)), list(archs[:count.value])

    def nvrtcDestroyProgram(self, prog: Any) -> tuple[Status]:
        return (self._status(self._lib.nvrtcDestroyProgram(ctypes.byref(prog))),)


_loaded: dict[str, CtypesNvrtc] = {}


def bindings() -> Any:
    """The NVRTC module for this process: the library named by ACLNN_GPU_NVRTC when set, else
    cuda-python's `cuda.bindings.nvrtc`."""
    path = os.environ.get(ENV)
    if not path:
        from cuda.bindings import nvrtc
        return nvrtc
    if path not in _loaded:
        _loaded[path] = CtypesNvrtc(path)
    return _loaded[path]


def version() -> str:
    """'MAJOR.MINOR' of the NVRTC that bindings() gives."""
    status, major, minor = bindings().nvrtcVersion()
    if int(status) != 0:
        raise RuntimeError(f"nvrtcVersion: {status!r}")
    return f"{major}.{minor}"
