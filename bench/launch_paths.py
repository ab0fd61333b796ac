"""The host cost of each path a frozen launch could take to a kernel launch or a GEMM, over null
libraries: what each path's own Python-side argument handling costs, without a GPU.

`python -m bench.launch_paths [--batches N]` loads, before anything imports CUDA, a null
`libcuda.so.1` (bench/null_cuda.c: the driver entry points cuda-bindings and cuda.core reach, each
returning success at once) and a null `libcublas.so.<major>` (bench/null_cublas.c, the same null
library the host-overhead bench runs the library's GEMM wrapper into), then times, in microseconds per
call (the fastest of `--batches` batches):

* a GEMM as the cuda device's replay program calls it (`CudaKernelContext.run_frozen`: one ctypes call
  on a tuple of C arguments built once, the handle in front), and as it did before (a tuple made per
  call around the converted arguments);
* the same GEMM through nvmath-python's Cython binding (`nvmath.bindings.cublas`), where it is importable
  (it is not a dependency: `pip install --target DIR nvmath-python cuda-core`, then PYTHONPATH=DIR);
* a kernel launch through cuda-bindings' `driver.cuLaunchKernel` with the kernel parameters packed once
  (a void* array, the packing a frozen launch could keep) and with (values, types) packed per call;
  through cuda.core's `launch` where it is importable; and the call the replay program makes today
  (CuPy's `RawKernel.__call__` signature over the instant CuPy stand-in, whose body is a no-op);
* one tiny PyTorch CPU op (`torch.add` of 8 elements), the host overhead tables' reference.

CuPy's own `RawKernel.__call__` cannot run over a null driver (its static CUDA runtime needs the driver's
private export tables): scripts/launch_cost.py measures it beside the other paths on a GPU. Run in its
own process (the null libraries would stand in for a real driver loaded after them).
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

NULL_CUDA_SOURCE = Path(__file__).with_name("null_cuda.c")
CUBLAS_MAJOR = 13   # the soname nvmath-python's binding (built for CUDA 13) looks for


def null_library(source: Path, soname: str, language: str = "c") -> Path:
    """`source` built once into the library's compile cache as a shared library whose SONAME is `soname`
    (dlopen by that name then finds the loaded copy)."""
    from aclnn_gpu.emulator import build
    text = source.read_bytes()
    key = hashlib.sha256(text + soname.encode()).hexdigest()[:16]
    target = build.cache_dir() / f"null_{soname.replace('.', '_')}_{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        subprocess.run([build.CXX, "-x", language, "-O2", "-shared", "-fPIC", f"-Wl,-soname,{soname}", str(source),
                        "-o", tmp, "-ldl"], check=True, capture_output=True)
        os.replace(tmp, target)   # atomic: a concurrent build never loads half a library
    return target


def load_null_libraries() -> Path:
    """The null driver and the null libcublas (under its CUDA soname) loaded globally, so that a later
    dlopen by those names (cuda-bindings, cuda.core, nvmath-python) finds them; the null libcublas's path.
    Call it before anything loads the real ones."""
    from bench import instant_cupy
    ctypes.CDLL(str(null_library(NULL_CUDA_SOURCE, "libcuda.so.1")), mode=os.RTLD_GLOBAL)
    cublas = null_library(instant_cupy.NULL_CUBLAS_SOURCE, f"libcublas.so.{CUBLAS_MAJOR}", "c++")
    ctypes.CDLL(str(cublas), mode=os.RTLD_GLOBAL)
    return cublas


def fastest_us(fn: Callable[[], Any], calls: int = 2000, batches: int = 15) -> float:
    """The fastest batch's microseconds per call (after a warm-up batch): the figure that escapes
    preemption on a loaded machine."""
    for _ in range(calls):
        fn()
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


# the kernel arguments of every launch row: 8, as a typical frozen launch has (pointers, sizes, a scale)
def _kernel_arguments() -> tuple:
    import numpy as np
    return (np.uint64(0x1000), np.uint64(0x2000), np.int64(5), np.int32(1), np.int32(2), np.float32(0.5),
            np.uint64(0x3000), np.uint64(0x4000))


def measure(batches: int) -> list[tuple[str, str]]:
    """(path, microseconds per call or why not) of every row (module docstring)."""
    from bench import instant_cupy
    from aclnn_gpu.kernels import gemm
    rows: list[tuple[str, str]] = []

    def row(name: str, timed: Callable[[], float]) -> None:
        try:
            rows.append((name, f"{timed():.3f}"))
        except Exception as e:  # noqa: BLE001 - a path this machine lacks: say why
            rows.append((name, f"n/a: {type(e).__name__}: {str(e)[:80]}"))

    cublas = load_null_libraries()
    handle = gemm.CublasHandle(gemm.bind_functions(ctypes.CDLL(str(cublas), mode=os.RTLD_GLOBAL)))
    native = gemm.native_arguments(False, (False, True, 8, 8, 8, 1.0, 0x1000, gemm.F32, 8, 64, 0x2000, gemm.F32,
                                           8, 64, 0.0, 0x3000, gemm.F32, 8, 64, 3), {})
    assert native is not None
    strided, c_handle = handle.strided, handle.handle
    program_entry = (c_handle, *native)
    row("GEMM: ctypes, C arguments with the handle built once (the replay program)",
        lambda: fastest_us(lambda: strided(*program_entry), batches=batches))
    row("GEMM: ctypes, a tuple made per call around them (before)",
        lambda: fastest_us(lambda: strided(c_handle, *native), batches=batches))

    def nvmath_gemm() -> float:
        from nvmath.bindings import cublas as nv
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        arguments = (int(handle.made.value), 0, 1, 8, 8, 8, ctypes.addressof(one), 0x1000, 0, 8, 64, 0x2000, 0, 8, 64,
                     ctypes.addressof(zero), 0x3000, 0, 8, 64, 3, gemm.CUBLAS_COMPUTE_32F, gemm.CUBLAS_GEMM_DEFAULT)
        call = nv.gemm_strided_batched_ex
        call(*arguments)   # raises where nvmath cannot reach the null library
        return fastest_us(lambda: call(*arguments), batches=batches)
    row("GEMM: nvmath.bindings.cublas.gemm_strided_batched_ex (Cython, ints)", nvmath_gemm)

    args = _kernel_arguments()

    def prepacked() -> float:
        from cuda.bindings import driver
        values = [ctypes.c_uint64(0x1000), ctypes.c_uint64(0x2000), ctypes.c_int64(5), ctypes.c_int32(1),
                  ctypes.c_int32(2), ctypes.c_float(0.5), ctypes.c_uint64(0x3000), ctypes.c_uint64(0x4000)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        function, stream, address = driver.CUfunction(0x40), driver.CUstream(0x20), ctypes.addressof(params)
        return fastest_us(lambda: driver.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, address, 0),
                          batches=batches)
    row("launch: cuda-bindings cuLaunchKernel, parameters packed once", prepacked)

    def per_call_packing() -> float:
        from cuda.bindings import driver
        p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
        packed = ((0x1000, 0x2000, 5, 1, 2, 0.5, 0x3000, 0x4000), (p, p, i64, i32, i32, f32, p, p))
        function, stream = driver.CUfunction(0x40), driver.CUstream(0x20)
        return fastest_us(lambda: driver.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, packed, 0),
                          batches=batches)
    row("launch: cuda-bindings cuLaunchKernel, (values, types) packed per call", per_call_packing)

    def core() -> float:
        try:
            from cuda.core import Device, LaunchConfig, ObjectCode, launch
        except ImportError:   # cuda.core releases before 1.0
            from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch
        device = Device(0)
        device.set_current()
        stream = device.create_stream()
        kernel = ObjectCode.from_cubin(b"\0" * 64).get_kernel("k")
        config = LaunchConfig(grid=1, block=32)
        return fastest_us(lambda: launch(stream, config, kernel, *args), batches=batches)
    row("launch: cuda.core launch (LaunchConfig built once, NumPy scalar arguments)", core)

    kernel = instant_cupy.RawKernel()
    stand_in_stream = instant_cupy.Stream()
    grid, block = (1, 1, 1), (32, 1, 1)
    row("launch: the replay program's call into the instant CuPy stand-in (a no-op body)",
        lambda: fastest_us(lambda: kernel(grid, block, args, shared_mem=0, stream=stand_in_stream), batches=batches))

    def torch_add() -> float:
        import torch
        a, b = torch.ones(8), torch.ones(8)
        return fastest_us(lambda: torch.add(a, b), batches=batches)
    row("reference: torch.add of 8 elements (CPU)", torch_add)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.launch_paths", description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=15, help="batches of 2000 calls; the fastest is reported")
    batches = ap.parse_args(argv).batches
    # first: every later dlopen("libcuda.so.1") (cuda-bindings, cuda.core, nvmath) finds the null driver
    load_null_libraries()
    from bench import common
    rows = measure(batches)
    print(common.markdown_table(["path (over null libraries)", "us per call"], rows, "lr"))
    print(f"\nfastest of {batches} batches of 2000 calls; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
