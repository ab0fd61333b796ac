"""The C ABI: CANN's headers (`acl/acl.h`, `aclnn/acl_meta.h`, `aclnnop/aclnn_*.h`, `hccl/hccl.h`) and
libraries (`libascendcl.so`, with `libnnopbase.so`, `libopapi.so`, ... as links to it), so a C or C++
Ascend program compiles unchanged and runs on the device `ACLNN_GPU_DEVICE` selects.

Layer 16 of docs/DESIGN.md, "Import layers" (C ABI): above everything it exports, below the demo.

    g++ sample.cpp $(python -m aclnn_gpu.capi --cflags --libs)

Modules: `table` (the exported functions, read from the headers), `build` (cffi embedding mode ->
the cached library and its CANN-style prefix), `install` (that prefix copied into a CANN toolkit's
layout with its `set_env.sh`: `python -m aclnn_gpu.capi install --prefix DIR`), `bridge` (runs in the
embedded interpreter: the Python side of each C function, out-parameters), `handles` (the handle
table), `adapters` (arrays and the caller's host memory), `custom` (the irregular signatures),
`rules` (the C callers' runtime rule and C's wording of messages). `prefix()` builds on first use and
returns the cached prefix.
"""
from __future__ import annotations

from pathlib import Path

from .build import CapiBuildError, cflags, libs
from .build import build as _build

__all__ = ["CapiBuildError", "cflags", "libs", "prefix"]


def prefix(verbose: bool = False) -> Path:
    """The CANN-style prefix (`include/`, `lib64/`), built if the cache has none."""
    return _build(verbose)
