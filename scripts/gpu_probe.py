#!/usr/bin/env python3
"""The driver-level probe of scripts/gpu_check.sh: each capability the cuda device relies on, tried on
its own, in order of importance, with the result written to OUT/probe.json as soon as it is known (a
run cut short still says what it reached).

    python scripts/gpu_probe.py OUT_DIR [--device cuda|emulated]

Steps (each in its own try; a failure is recorded with its traceback and the next step runs):
environment -> NVRTC compile of every kernel file with this GPU's NVRTC through CuPy (seconds per
file, registers and local memory per kernel: local memory is a spill) -> streams, events, copies,
memset -> pinned and registered host memory -> capture and replay of a kernel and a copy -> cuBLAS
through CuPy's wrapper inside a capture (CuPy refuses it: recorded, not a failure) -> the library's
GEMM inside a capture, replayed -> the library's GEMM in fp32 / TF32 / fp16 / bf16 against NumPy
-> cudaEventRecordWithFlags through cuda-bindings in a capture -> a one-rank NCCL all-reduce ->
one HCCL communicator of the library over it.

On `--device emulated` (the CI rehearsal) the steps that need real CuPy record "skipped" with the
reason; the rest run over the stand-in. Exit status 0 when no step failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class Skip(Exception):
    """A step that does not apply here (the reason is recorded; not a failure)."""


class Probe:
    def __init__(self, out: Path, kind: str):
        self.path = out / "probe.json"
        self.kind = kind
        self.steps: list[dict[str, Any]] = []
        self.started = time.time()

    def step(self, name: str, fn: Callable[[], Any]) -> None:
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"step": name}
        print(f"--- probe: {name}", flush=True)
        try:
            entry["result"] = fn()
            entry["status"] = "ok"
        except Skip as e:
            entry["status"], entry["reason"] = "skipped", str(e)
        except BaseException as e:  # noqa: BLE001 - every failure is data here (KeyboardInterrupt included)
            entry["status"] = "FAILED"
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc(limit=12)
            if isinstance(e, KeyboardInterrupt):
                raise
        finally:
            entry["seconds"] = round(time.perf_counter() - t0, 3)
            self.steps.append(entry)
            self.write()
            print(f"    {entry['status']} ({entry['seconds']} s) {entry.get('error') or entry.get('reason') or ''}",
                  flush=True)

    def write(self) -> None:
        data = {"device": self.kind, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started)),
                "steps": self.steps}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(self.path)

    def failed(self) -> list[str]:
        return [s["step"] for s in self.steps if s["status"] == "FAILED"]


def _rel(actual: np.ndarray, expected: np.ndarray) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if not np.all(np.isfinite(actual)):
        return float("inf")
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-300))


_ADD_ONE = r'''
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", choices=["cuda", "emulated"], default="cuda")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    probe = Probe(a.out, a.device)
    real = a.device == "cuda"
    if real:
        import cupy as cp
    else:
        from aclnn_gpu.emulator import fakecupy as cp   # type: ignore[no-redef]
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))

    def need_gpu() -> None:
        if not real:
            raise Skip("needs real CuPy and a GPU (the emulated device runs this step's kernels on the CPU "
                       "only through the library's own kernel files)")

    # ------------------------------------------------------------------ environment
    def environment() -> dict[str, Any]:
        info: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable,
                                "platform": platform.platform(), "numpy": np.__version__}
        if not real:
            return info
        rt = cp.cuda.runtime
        props = rt.getDeviceProperties(0)
        info.update(cupy=cp.__version__, cuda_runtime=rt.runtimeGetVersion(), cuda_driver=rt.driverGetVersion(),
                    device_count=rt.getDeviceCount(), name=props["name"].decode(),
                    compute_capability=f"{props['major']}.{props['minor']}", sms=props["multiProcessorCount"],
                    memory_GiB=round(props["totalGlobalMem"] / 2**30, 1), l2_MiB=props.get("l2CacheSize", 0) / 2**20)
        for mod, attr in (("cuda.bindings", "__version__"), ("torch", "__version__"), ("ml_dtypes", "__version__")):
            try:
                info[mod] = getattr(__import__(mod, fromlist=["_"]), attr)
            except Exception as e:  # noqa: BLE001
                info[mod] = f"missing ({type(e).__name__}: {e})"
        try:
            from cupy.cuda import nccl
            info["nccl"] = nccl.get_version()
        except Exception as e:  # noqa: BLE001
            info["nccl"] = f"unavailable ({type(e).__name__}: {e})"
        try:
            from cupy_backends.cuda.libs import nvrtc
            info["nvrtc"] = nvrtc.getVersion()
        except Exception as e:  # noqa: BLE001
            info["nvrtc"] = f"unavailable ({type(e).__name__}: {e})"
        from aclnn_gpu.kernels import loader
        info["cuda_include_dirs"] = list(loader.cuda_include_dirs())
        return info

    # ------------------------------------------------------------------ NVRTC: every kernel, this GPU
    def nvrtc_compile() -> dict[str, Any]:
        need_gpu()
        from aclnn_gpu.kernels import loader
        files: dict[str, Any] = {}
        worst_local = 0
        for file in loader.kernel_files():
            t0 = time.perf_counter()
            module = cp.RawModule(code=loader.source(file), options=loader.nvrtc_options(),
                                  name_expressions=loader.name_expressions(file))
            kernels = {}
            for expr in loader.name_expressions(file):
                attrs = module.get_function(expr).attributes
                kernels[expr] = {"regs": attrs["num_regs"], "local_bytes": attrs["local_size_bytes"],
                                 "static_smem": attrs["shared_size_bytes"]}
                worst_local = max(worst_local, attrs["local_size_bytes"])
            files[file] = {"seconds": round(time.perf_counter() - t0, 2), "kernels": len(kernels),
                           "max_regs": max((k["regs"] for k in kernels.values()), default=0),
                           "local_bytes": {e: k["local_bytes"] for e, k in kernels.items() if k["local_bytes"]}}
        # local memory here is a stack frame (a small array indexed at run time: the strided copies' Shape,
        # fp64 CTC's recursion at its register cap); spills are the compile report's rule (ptxas's own
        # count), so this is reported, not failed
        return {"files": files, "max_local_bytes": worst_local}

    # ------------------------------------------------------------------ streams, events, copies, memset
    def streams_copies() -> dict[str, Any]:
        need_gpu()
        rt = cp.cuda.runtime
        n = 64 << 20
        host = rng.integers(0, 255, n, dtype=np.uint8)
        pinned = cp.cuda.alloc_pinned_memory(n)
        pinned_view = np.frombuffer(pinned, np.uint8, n)
        pinned_view[:] = host
        a, b = cp.cuda.alloc(n), cp.cuda.alloc(n)
        s = cp.cuda.Stream(non_blocking=False)
        e0, e1, e2 = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
        e0.record(s)
        rt.memcpyAsync(a.ptr, pinned.ptr, n, rt.memcpyHostToDevice, s.ptr)
        e1.record(s)
        for _ in range(5):
            rt.memcpyAsync(b.ptr, a.ptr, n, rt.memcpyDeviceToDevice, s.ptr)
        e2.record(s)
        back = np.empty(n, np.uint8)
        rt.memcpyAsync(back.ctypes.data, b.ptr, n, rt.memcpyDeviceToHost, s.ptr)
        s.synchronize()
        assert np.array_equal(back, host), "H2D -> D2D -> D2H changed the bytes"
        rt.memsetAsync(b.ptr + 100, 0x5A, 1000, s.ptr)
        rt.memcpyAsync(back.ctypes.data, b.ptr, 2000, rt.memcpyDeviceToHost, s.ptr)
        s.synchronize()
        assert np.all(back[100:1100] == 0x5A) and np.array_equal(back[:100], host[:100]), "memsetAsync"
        h2d = cp.cuda.get_elapsed_time(e0, e1)
        d2d = cp.cuda.get_elapsed_time(e1, e2) / 5
        return {"bytes": n, "h2d_pinned_GBps": round(n / h2d / 1e6, 1),
                "d2d_GBps_read_plus_write": round(2 * n / d2d / 1e6, 1)}

    # ------------------------------------------------------------------ pinned and registered host memory
    def pinned_memory() -> dict[str, Any]:
        need_gpu()
        rt = cp.cuda.runtime
        pinned = cp.cuda.alloc_pinned_memory(1 << 20)
        kind_pinned = int(rt.pointerGetAttributes(pinned.ptr).type)
        buf = np.zeros(1 << 20, np.uint8)
        rt.hostRegister(buf.ctypes.data, buf.nbytes, 0)
        kind_registered = int(rt.pointerGetAttributes(buf.ctypes.data).type)
        try:
            rt.hostRegister(buf.ctypes.data, buf.nbytes, 0)
            twice = "accepted"
        except Exception as e:  # noqa: BLE001 - cudaErrorHostMemoryAlreadyRegistered expected
            twice = f"{type(e).__name__}: {e}"
        rt.hostUnregister(buf.ctypes.data)
        assert kind_pinned == kind_registered == 1, (kind_pinned, kind_registered)
        return {"pointer_type_pinned": kind_pinned, "pointer_type_registered": kind_registered,
                "register_twice": twice}

    # ------------------------------------------------------------------ capture: kernel + copy
    def capture_kernel_copy() -> dict[str, Any]:
        need_gpu()
        rt = cp.cuda.runtime
        kernel = cp.RawKernel(_ADD_ONE, "add_one")
        n = 1 << 16
        x = cp.arange(n, dtype=cp.float32)
        y = cp.zeros(n, dtype=cp.float32)
        s = cp.cuda.Stream(non_blocking=False)
        with s:
            s.begin_capture(rt.streamCaptureModeRelaxed)
            kernel(((n + 255) // 256,), (256,), (x, np.int32(n)))
            rt.memcpyAsync(y.data.ptr, x.data.ptr, n * 4, rt.memcpyDeviceToDevice, s.ptr)
            graph = s.end_capture()
        for _ in range(3):
            graph.launch(s)
        s.synchronize()
        expect = np.arange(n, dtype=np.float32) + 3
        assert np.array_equal(cp.asnumpy(y), expect), "replayed kernel + copy"
        return {"replays": 3}

    # ------------------------------------------------------------------ capture: CuPy's own cuBLAS wrapper
    def capture_cupy_cublas() -> dict[str, Any]:
        need_gpu()
        from cupy.cuda import cublas, device
        handle = device.get_cublas_handle()
        s = cp.cuda.Stream(non_blocking=False)
        a = cp.ones((8, 8), cp.float32)
        one = np.array(1, np.float32)
        zero = np.array(0, np.float32)
        with s:
            s.begin_capture(cp.cuda.runtime.streamCaptureModeRelaxed)
            try:
                cublas.sgemm(handle, 0, 0, 8, 8, 8, one.ctypes.data, a.data.ptr, 8, a.data.ptr, 8, zero.ctypes.data,
                             a.data.ptr, 8)
                outcome = "accepted"
            except Exception as e:  # noqa: BLE001 - CuPy 14 refuses cuBLAS calls while the stream captures
                outcome = f"{type(e).__name__}: {e}"
            finally:
                s.end_capture()
        return {"cupy_cublas_in_capture": outcome}

    # ------------------------------------------------------------------ the library's GEMM
    def library_gemm(dtype: Any, compute: str, capture: bool) -> dict[str, Any]:
        from aclnn_gpu.kernels import gemm
        m, n, k = 96, 80, 64
        np_dt = np.dtype(dtype)
        A = rng.standard_normal((m, k)).astype(np.float32).astype(np_dt)
        B = rng.standard_normal((k, n)).astype(np.float32).astype(np_dt)
        dev_a = cp.asarray(A.view(np.uint16) if np_dt.itemsize == 2 else A)
        dev_b = cp.asarray(B.view(np.uint16) if np_dt.itemsize == 2 else B)
        dev_c = cp.full((m, n), 0xFFFF if np_dt.itemsize == 2 else np.nan,
                        dtype=cp.uint16 if np_dt.itemsize == 2 else cp.float32)
        s = cp.cuda.Stream(non_blocking=False)
        # a captured GEMM runs on a workspace the caller owns (cuBLAS's graph rule; the device gives one per capture)
        ws_bytes = gemm.capture_workspace_bytes(int(cp.cuda.Device().compute_capability) // 10)
        ws = cp.empty(ws_bytes, cp.uint8) if capture else None
        cublas = gemm.CublasGemm(s, (ws.data.ptr, ws_bytes) if ws is not None else None)
        cp.cuda.runtime.deviceSynchronize()

        def call() -> None:
            gemm.rm_gemm(cublas, m, n, k, dev_a.data.ptr, np_dt, k, False, dev_b.data.ptr, np_dt, n, False,
                         dev_c.data.ptr, np_dt, n, compute=compute)
        if capture:
            with s:
                s.begin_capture(cp.cuda.runtime.streamCaptureModeRelaxed)
                try:
                    call()
                finally:
                    graph = s.end_capture()
            graph.launch(s)
        else:
            call()
        s.synchronize()
        C = cp.asnumpy(dev_c)
        C = C.view(np_dt) if np_dt.itemsize == 2 else C
        ref = A.astype(np.float64) @ B.astype(np.float64)
        err = _rel(C, ref)
        limit = {"float32": 1e-6 if compute == gemm.COMPUTE_32F else 2e-3}.get(np_dt.name, 1e-2)
        assert err < limit, f"{np_dt.name} {compute}: relative error {err:.3g} >= {limit}"
        return {"dtype": np_dt.name, "compute": compute, "capture": capture, "relative_error": err}

    def capture_library_gemm() -> dict[str, Any]:
        need_gpu()
        from aclnn_gpu.kernels import gemm
        return library_gemm(np.float32, gemm.COMPUTE_32F, capture=True)

    def cublas_precisions() -> list[dict[str, Any]]:
        need_gpu()
        import ml_dtypes

        from aclnn_gpu.kernels import gemm
        return [library_gemm(dtype, compute, False) for dtype, compute in (
            (np.float32, gemm.COMPUTE_32F), (np.float32, gemm.COMPUTE_32F_FAST_TF32),
            (np.float16, gemm.COMPUTE_32F), (ml_dtypes.bfloat16, gemm.COMPUTE_32F))]

    # ------------------------------------------------------------------ event record with flags
    def event_record_external() -> dict[str, Any]:
        need_gpu()
        from aclnn_gpu.device.cuda import record_external
        kernel = cp.RawKernel(_ADD_ONE, "add_one")
        x = cp.zeros(1024, cp.float32)
        s = cp.cuda.Stream(non_blocking=False)
        ev = cp.cuda.Event(disable_timing=True)
        with s:
            s.begin_capture(cp.cuda.runtime.streamCaptureModeRelaxed)
            kernel((4,), (256,), (x, np.int32(1024)))
            record_external(cp, ev, s)
            graph = s.end_capture()
        graph.launch(s)
        ev.synchronize()
        other = cp.cuda.Stream(non_blocking=True)
        other.wait_event(ev)
        other.synchronize()
        assert float(x[0]) == 1.0
        return {"external_event_after_replay": bool(ev.done)}

    # ------------------------------------------------------------------ NCCL, one rank
    def nccl_one_rank() -> dict[str, Any]:
        need_gpu()
        from aclnn_gpu.hccl import nccl as engine
        from cupy.cuda import nccl
        uid = engine.new_unique_id()
        comm = nccl.NcclCommunicator(1, uid, 0)
        x = cp.arange(1000, dtype=cp.float32)
        y = cp.zeros_like(x)
        s = cp.cuda.Stream(non_blocking=True)
        comm.allReduce(x.data.ptr, y.data.ptr, 1000, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
        s.synchronize()
        comm.destroy()
        assert np.array_equal(cp.asnumpy(y), np.arange(1000, dtype=np.float32))
        return {"unique_id_bytes": len(uid)}

    def hccl_one_rank() -> dict[str, Any]:
        """The library's HCCL communicator on this device (root info, all-reduce, destroy)."""
        os.environ.setdefault("ACLNN_GPU_DEVICE", a.device)
        import aclnn_gpu as acl
        assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
        ret, root = acl.HcclGetRootInfo()
        assert ret == 0, acl.aclGetRecentErrMsg()
        ret, comm = acl.HcclCommInitRootInfo(1, root, 0)
        assert ret == 0, acl.aclGetRecentErrMsg()
        ret, stream = acl.aclrtCreateStream()
        n = 256
        ret, buf = acl.aclrtMalloc(n * 4, 0)
        host = np.arange(n, dtype=np.float32)
        assert acl.aclrtMemcpy(buf, n * 4, host, n * 4, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        ret = acl.HcclAllReduce(buf, buf, n, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM, comm, stream)
        assert ret == 0, acl.aclGetRecentErrMsg()
        assert acl.aclrtSynchronizeStream(stream) == 0
        back = np.empty(n, np.float32)
        assert acl.aclrtMemcpy(back, n * 4, buf, n * 4, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        assert np.array_equal(back, host)
        assert acl.HcclCommDestroy(comm) == 0
        acl.aclrtFree(buf)
        acl.aclrtDestroyStream(stream)
        return {"engine": "nccl" if real else "gloo"}

    if real:
        # a fresh kernel cache: the compile times are NVRTC's, not a cache hit's
        os.environ.setdefault("CUPY_CACHE_DIR", tempfile.mkdtemp(prefix="cupy_cache_"))
    for name, fn in (("environment", environment), ("nvrtc_compile", nvrtc_compile),
                     ("streams_events_copies_memset", streams_copies), ("pinned_memory", pinned_memory),
                     ("capture_kernel_and_copy", capture_kernel_copy),
                     ("capture_cupy_cublas_wrapper", capture_cupy_cublas),
                     ("capture_library_gemm", capture_library_gemm), ("cublas_fp32_tf32_fp16_bf16", cublas_precisions),
                     ("event_record_external_in_capture", event_record_external), ("nccl_one_rank", nccl_one_rank),
                     ("hccl_one_rank", hccl_one_rank)):
        probe.step(name, fn)
    failed = probe.failed()
    print(f"probe: {len(probe.steps) - len(failed)}/{len(probe.steps)} steps ok"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
