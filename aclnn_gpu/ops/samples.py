"""What every family's `samples.py` is built from: the records of a demo case (`DemoCase`) and of a
profiler case (`ProfileCase`), the callables a profiler case is handed (`Drivers`), and the input
helpers the profiler cases share (aligned copies, transposed layouts, log-softmax).

Layer 11 of docs/DESIGN.md, "Import layers" (ops): the demo (aclnn_gpu.demo) and the profiler
(aclnn_gpu.profile) sit above and iterate ops/registry.py's SAMPLES; a family's samples.py imports its
own api.py and the reference, never `functional`, the demo or the profiler -- those reach it through
`Drivers`. No family's `__init__` imports its samples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import ml_dtypes
import numpy as np

# The profiler's element types by their short names (its --dtype choices).
DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
          "fp64": np.dtype(np.float64)}


@dataclass
class DemoCase:
    """One row of the demo's table: how to read the results back and the float64 reference."""
    name: str
    shapes: str
    dtype: np.dtype
    run: Callable[[Any], list[np.ndarray]]          # device arrays session -> results (as float64)
    reference: Callable[[], list[np.ndarray]]        # float64 reference results
    tolerance: float


# A demo entry: the case, the two phases (GetWorkspaceSize, execute) and the builder of their arguments
# from a session of device arrays (aclnn_gpu.demo.samples.DeviceArrays).
DemoEntry = tuple[DemoCase, Callable, Callable, Callable]


@dataclass(frozen=True)
class Drivers:
    """What a profiler case runs its call through, handed in by the profiler (layers above ops):
    `functional` is the aclnn_gpu.functional module, `device_arrays` the demo's DeviceArrays class."""
    functional: Any
    device_arrays: Callable[[], Any]


@dataclass(frozen=True)
class ProfileCase:
    """An operator as the profiler drives it (aclnn_gpu.profile.operators)."""
    name: str                    # the aclnn name
    dims: dict[str, int]         # default (small) shape
    dtype: str
    doc: str                     # what the dimensions mean
    setup: Callable              # (dims, dtype, rng, drivers) -> call() (prepare work done inside setup)
    min_bytes: Callable          # (dims, itemsize) -> int
    memory_bound: bool = True


# A coverage case: (operator, dims) or (operator, dims, element type when it is not the operator's).
CoverageCase = tuple[str, dict] | tuple[str, dict, str]


def f64(a: Any) -> np.ndarray:
    return np.asarray(a, np.float64)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def aligned(a: np.ndarray, align: int = 256) -> np.ndarray:
    """A copy of `a` whose data start `align`-byte aligned, like cudaMalloc's (the functional API lends
    the caller's arrays to the emulated device; NumPy's own 16-byte alignment would make every warp's
    16-byte request straddle one more 32-byte sector than on a GPU)."""
    a = np.asarray(a)
    raw = np.empty(a.nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def rand(rng: np.random.Generator, shape: tuple, dtype: Any) -> np.ndarray:
    return aligned(rng.standard_normal(shape, dtype=np.float32).astype(dtype))


def layout(a: np.ndarray, strided: int) -> np.ndarray:
    """`a` itself, or (strided) the same values as a transposed view of a contiguous aligned array."""
    if not strided:
        return aligned(a)
    return aligned(np.ascontiguousarray(np.swapaxes(a, -1, -2))).swapaxes(-1, -2)
