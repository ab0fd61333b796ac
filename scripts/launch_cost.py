"""Host cost of one kernel launch and one GEMM through each path the cuda device could take, on a GPU:
`python scripts/launch_cost.py [--calls N]` prints microseconds per call (median of batches, the work
queued only, a synchronize between batches) beside a tiny PyTorch CUDA op when PyTorch sees the GPU.

Paths: CuPy's `RawKernel.__call__` with a frozen launch's argument tuple (what `device/cuda.py` calls
today: CuPy packs every argument per call); cuda-bindings' `cuLaunchKernel` with the kernel parameters
packed once (a void* array of the argument values, the packing a frozen launch could keep) and packed
per call;
cuda.core's `launch` (its own compiled kernel, same source and arguments) where it is installed; and
the library's cuBLAS GEMM (`kernels/gemm.CublasHandle` on arguments converted once, one ctypes call,
and as the replay program calls it) beside CuPy's Cython wrapper of the same entry point on the same
handle and nvmath-python's Cython binding where it is importable. `python -m bench.launch_paths` measures
the same paths' Python-side cost without a GPU, over null libraries. Each path in its own try:
one that this machine's versions lack prints its error instead. Not part of the test suite."""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOURCE = r'''
extern "C" __global__ void touch(const float* a, float* b, long long n, int c, int d, float e,
                                 const float* f, float* g) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && n < 0) { b[0] = a[0] + c + d + e + f[0]; g[0] = 0.f; }
}
'''


def per_call_us(fn: Callable[[], Any], sync: Callable[[], Any], calls: int, batches: int = 9) -> float:
    from bench.host_overhead import batch_us
    return statistics.median(batch_us(fn, calls, batches, after=sync))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    calls = ap.parse_args().calls
    import cupy as cp
    stream = cp.cuda.Stream(non_blocking=False)
    buf = cp.zeros(1024, cp.float32)
    ptr = np.uint64(buf.data.ptr)
    kernel = cp.RawKernel(SOURCE, "touch")
    args = (ptr, ptr, np.int64(5), np.int32(1), np.int32(2), np.float32(0.5), ptr, ptr)
    sync = stream.synchronize
    rows: list[tuple[str, str]] = []

    def row(name: str, measure: Callable[[], float]) -> None:
        try:
            rows.append((name, f"{measure():.2f}"))
        except Exception as e:  # noqa: BLE001 - a path this machine's versions lack: say why
            rows.append((name, f"failed: {type(e).__name__}: {e}"))

    row("CuPy RawKernel.__call__ (frozen argument tuple)",
        lambda: per_call_us(lambda: kernel((1, 1, 1), (32, 1, 1), args, shared_mem=0, stream=stream), sync, calls))

    def prepacked() -> float:
        from cuda.bindings import driver
        values = [ctypes.c_uint64(int(ptr)), ctypes.c_uint64(int(ptr)), ctypes.c_int64(5), ctypes.c_int32(1),
                  ctypes.c_int32(2), ctypes.c_float(0.5), ctypes.c_uint64(int(ptr)), ctypes.c_uint64(int(ptr))]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        function = driver.CUfunction(int(kernel.kernel.ptr))
        hstream = driver.CUstream(int(stream.ptr))
        address = ctypes.addressof(params)

        def launch() -> None:
            err, = driver.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, hstream, address, 0)
            if err:
                raise RuntimeError(f"cuLaunchKernel: {err}")
        return per_call_us(launch, sync, calls)
    row("cuda-bindings cuLaunchKernel (parameters packed once)", prepacked)

    def per_call_packing() -> float:
        from cuda.bindings import driver
        p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
        packed = ((int(ptr), int(ptr), 5, 1, 2, 0.5, int(ptr), int(ptr)), (p, p, i64, i32, i32, f32, p, p))
        function = driver.CUfunction(int(kernel.kernel.ptr))
        hstream = driver.CUstream(int(stream.ptr))

        def launch() -> None:
            err, = driver.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, hstream, packed, 0)
            if err:
                raise RuntimeError(f"cuLaunchKernel: {err}")
        return per_call_us(launch, sync, calls)
    row("cuda-bindings cuLaunchKernel ((values, types) packed per call)", per_call_packing)

    def core() -> float:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:   # cuda.core releases before 1.0
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
        dev = Device()
        dev.set_current()
        arch = "".join(str(v) for v in dev.compute_capability)
        code = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{arch}")).compile("cubin")
        core_kernel = code.get_kernel("touch")
        core_stream = dev.create_stream()
        config = LaunchConfig(grid=1, block=32)
        return per_call_us(lambda: launch(core_stream, config, core_kernel, *args), core_stream.sync, calls)
    row("cuda.core launch", core)

    def library_gemm() -> float:
        from aclnn_gpu.kernels import gemm
        m = n = k = 16
        a = cp.ones((m, k), cp.float32)
        handle = gemm.CublasHandle()
        handle.use(int(stream.ptr), None)
        arguments = gemm.native_arguments(False, (False, False, m, n, k, 1.0, a.data.ptr, gemm.F32, m, 0,
                                                  a.data.ptr, gemm.F32, k, 0, 0.0, buf.data.ptr, gemm.F32, m,
                                                  0, 1), {})
        return per_call_us(lambda: handle.gemm(False, arguments), sync, calls)
    row("library cuBLAS GEMM (CublasHandle, arguments converted once)", library_gemm)

    def program_gemm() -> float:   # as the cuda device's replay program calls it (CudaKernelContext.run_frozen)
        from aclnn_gpu.kernels import gemm
        m = n = k = 16
        a = cp.ones((m, k), cp.float32)
        handle = gemm.CublasHandle()
        handle.use(int(stream.ptr), None)
        arguments = gemm.native_arguments(False, (False, False, m, n, k, 1.0, a.data.ptr, gemm.F32, m, 0,
                                                  a.data.ptr, gemm.F32, k, 0, 0.0, buf.data.ptr, gemm.F32, m,
                                                  0, 1), {})
        assert arguments is not None
        entry, call = (handle.handle, *arguments), handle.strided
        return per_call_us(lambda: call(*entry), sync, calls)
    row("library cuBLAS GEMM as the replay program calls it (one tuple, the handle in front)", program_gemm)

    def nvmath_gemm() -> float:
        # nvmath-python's Cython binding (not a dependency: carry a wheel, PYTHONPATH=its folder), on a
        # handle it made itself, so handle and GEMM come from the copy of libcublas it loaded
        from nvmath.bindings import cublas as nv
        from aclnn_gpu.kernels import gemm
        m = n = k = 16
        a = cp.ones((m, k), cp.float32)
        handle = nv.create()
        nv.set_stream(handle, int(stream.ptr))
        scalars = [ctypes.c_float(1.0), ctypes.c_float(0.0)]
        one, zero = (ctypes.addressof(v) for v in scalars)
        entry = (handle, 0, 0, m, n, k, one, a.data.ptr, 0, m, 0, a.data.ptr, 0, k, 0, zero, buf.data.ptr, 0, m, 0, 1,
                 gemm.CUBLAS_COMPUTE_32F, gemm.CUBLAS_GEMM_DEFAULT)
        call = nv.gemm_strided_batched_ex
        try:
            return per_call_us(lambda: call(*entry), sync, calls)
        finally:
            nv.destroy(handle)
    row("nvmath.bindings.cublas.gemm_strided_batched_ex (Cython, its own handle)", nvmath_gemm)

    def cupy_gemm() -> float:
        # the candidate outside a capture: CuPy's Cython wrapper on the library's own handle (it points the
        # handle at CuPy's current stream before each call and refuses a capturing stream, so a capture
        # would keep the ctypes call)
        from cupy.cuda import cublas
        from aclnn_gpu.kernels import gemm
        m = n = k = 16
        a = cp.ones((m, k), cp.float32)
        handle = gemm.CublasHandle()
        scalars = [ctypes.c_float(1.0), ctypes.c_float(0.0)]
        one, zero = (ctypes.addressof(v) for v in scalars)
        address = int(handle.made.value)

        def call() -> None:
            cublas.gemmStridedBatchedEx(address, 0, 0, m, n, k, one, a.data.ptr, 0, m, 0, a.data.ptr, 0, k, 0,
                                        zero, buf.data.ptr, 0, m, 0, 1, gemm.CUBLAS_COMPUTE_32F,
                                        gemm.CUBLAS_GEMM_DEFAULT)
        with stream:
            return per_call_us(call, sync, calls)
    row("CuPy cublas.gemmStridedBatchedEx on the library's handle (in `with stream`)", cupy_gemm)

    try:
        import torch
        if torch.cuda.is_available():
            x = torch.ones(8, device="cuda")
            row("torch.add of 8 elements (CUDA)", lambda: per_call_us(lambda: torch.add(x, x), torch.cuda.synchronize,
                                                                      calls))
    except ImportError:
        pass
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
