"""ConvTBC backward benchmark: aclnnConvTbcBackward (two-phase API, preallocated buffers, repeatable
executor; timed = execute + synchronize) against PyTorch's conv_tbc backward
(`torch.ops.aten.conv_tbc_backward`) on the same device.

    python bench/conv_tbc.py [--device cpu|cuda|emulated] [--quick]
    python bench/conv_tbc.py --model [T B C K pad]     (no GPU: modelled H100 bytes and time)
    python bench/conv_tbc.py --device cuda --launches [T B C K pad]   (each launch of one call, timed)

(The GPU check runs `launches` through bench/gpu_speed.py, beside torch.conv_tbc and cuDNN.)

GPU (cuda): T=1024, B=64, C=512, K=3, pad=1 in fp32 with each cubeMathType and in bf16; achieved
TFLOP/s (backward = 2 products of 2*K*T*B*Cin*Cout flops each: gradInput and gradWeight) against
the matrix throughput of a large cuBLAS GEMM timed in the same run (fp32, TF32 and bf16).
CPU / emulated: sizes that take roughly 5-200 ms in PyTorch on the CPU, median time after warm-up,
ratio = ours / PyTorch (lower is better). Prints a Markdown table.
--model: our backward's launches as the emulator's memory profiler measures them (python -m
aclnn_gpu.profile; GEMMs modelled from their shapes and addresses) beside PyTorch's launch sequence of
the same shape (bench/torch_launches.py, read from aten/src/ATen/native/ConvolutionTBC.cpp), both with
the same roofline and L2 model (an estimate, not a measurement; defaults: T=1024 B=32 C=1024 K=3
pad=1 fp16).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aclnn_gpu as acl  # noqa: E402
from aclnn_gpu.base import dtypes  # noqa: E402
from bench.common import gpu_event_ms, medians_ms  # noqa: E402

CUBE = {0: "KEEP_DTYPE", 1: "ALLOW_FP32_DOWN", 2: "USE_FP16", 3: "USE_HF32"}


def flops(T, B, Cin, Cout, K, pad) -> float:
    Tout = T + 2 * pad - K + 1
    return 2.0 * K * Cin * Cout * (Tout * B + T * B)   # gradWeight + gradInput products


class Ours:
    """A repeatable aclnnConvTbcBackward executor over preallocated device buffers."""

    def __init__(self, g, x, w, b, pad, cube):
        status, self.stream = acl.aclrtCreateStream()
        assert status == 0
        self.ptrs = []
        ts = [self._tensor(a) for a in (g, x, w, b)]
        outs = [self._tensor(np.empty_like(a)) for a in (x, w, b)]
        status, self.ws, self.ex = acl.aclnnConvTbcBackwardGetWorkspaceSize(*ts, pad, cube, *outs)
        assert status == 0, acl.aclGetRecentErrMsg()
        assert acl.aclSetAclOpExecutorRepeatable(self.ex) == 0
        self.work = self._malloc(self.ws) if self.ws else None
        self.outs = outs

    def _malloc(self, n):
        status, p = acl.aclrtMalloc(max(n, 1), 0)
        assert status == 0, acl.aclGetRecentErrMsg()
        self.ptrs.append(p)
        return p

    def _tensor(self, a):
        a = np.ascontiguousarray(a)
        p = self._malloc(a.nbytes)
        assert acl.aclrtMemcpy(p, a.nbytes, a, a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        code = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16,
                dtypes.bfloat16: acl.ACL_BF16}[a.dtype]
        return acl.aclCreateTensor(a.shape, code, None, 0, acl.ACL_FORMAT_ND, a.shape, p)

    def __call__(self):
        assert acl.aclnnConvTbcBackward(self.work, self.ws, self.ex, self.stream) == 0
        assert acl.aclrtSynchronizeStream(self.stream) == 0

    def close(self):
        acl.aclDestroyAclOpExecutor(self.ex)
        for p in self.ptrs:
            acl.aclrtFree(p)
        acl.aclrtDestroyStream(self.stream)


def torch_backward(torch, g, x, w, b, pad, device):
    def to(a):
        t = torch.from_numpy(np.ascontiguousarray(a.astype(np.float32)))
        return t.to(device=device, dtype=torch.bfloat16 if a.dtype == dtypes.bfloat16 else
                    torch.float16 if a.dtype == np.float16 else torch.float32)
    tg, tx, tw, tb = map(to, (g, x, w, b))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run():
        torch.ops.aten.conv_tbc_backward(tg, tx, tw, tb, pad)
        sync()
    return run


def data(rng, T, B, Cin, Cout, K, pad, dtype):
    Tout = T + 2 * pad - K + 1
    mk = lambda *s: rng.standard_normal(s, dtype=np.float32).astype(dtype)  # noqa: E731
    return mk(Tout, B, Cout), mk(T, B, Cin), mk(K, Cin, Cout), mk(Cout)


def bench_cpu(kind, quick):
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    if kind == "emulated":
        sizes = [(16, 4, 16, 16, 3, 1), (32, 4, 32, 32, 3, 1)]
        dts = [np.dtype(np.float32)]
    elif quick:
        sizes = [(128, 16, 128, 128, 3, 1), (256, 32, 256, 256, 3, 1), (512, 8, 128, 256, 5, 2)]
        dts = [np.dtype(np.float32)]
    else:
        sizes = [(128, 16, 128, 128, 3, 1), (256, 32, 256, 256, 3, 1), (512, 8, 128, 256, 5, 2),
                 (256, 16, 512, 512, 3, 0), (1024, 16, 256, 256, 3, 1), (256, 64, 256, 256, 7, 3),
                 (512, 32, 512, 512, 3, 1)]
        dts = [np.dtype(np.float32), dtypes.bfloat16]
    rows = []
    for dt in dts:
        for shape in sizes:
            T, B, Cin, Cout, K, pad = shape
            g, x, w, b = data(rng, *shape, dt)
            ours = Ours(g, x, w, b, pad, 0)
            t_ours, t_torch = medians_ms(ours, torch_backward(torch, g, x, w, b, pad, "cpu"), pause_s=0.5)
            ours.close()
            rows.append((f"T={T} B={B} Cin={Cin} Cout={Cout} K={K} pad={pad}", dt.name, t_ours, t_torch,
                         flops(*shape) / t_ours / 1e6))
    print(f"\nConvTBC backward, device `{acl.current_device_kind()}` vs PyTorch CPU "
          f"({torch.get_num_threads()} threads), median ms\n")
    print("| shape | dtype | ours ms | torch ms | ratio | ours GFLOP/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, dt, a, t, gf in rows:
        print(f"| {name} | {dt} | {a:.2f} | {t:.2f} | {a / t:.2f} | {gf:.1f} |")


def bench_cuda(quick):
    import torch

    gpu_ms = gpu_event_ms

    reps = 5 if quick else 20
    # measured matrix throughput: a big square cuBLAS GEMM per precision
    n = 8192
    peak = {}
    for label, dt, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                            ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device="cuda", dtype=dt)
        bm = torch.randn(n, n, device="cuda", dtype=dt)
        ms = gpu_ms(lambda: torch.mm(a, bm), reps)   # noqa: F821 - runs before the `del` below
        peak[label] = 2 * n ** 3 / ms / 1e9
        del a, bm
    torch.backends.cuda.matmul.allow_tf32 = False

    shape = (1024, 64, 512, 512, 3, 1)
    rng = np.random.default_rng(0)
    fl = flops(*shape)
    rows = []
    cases = [(np.dtype(np.float32), c) for c in range(4)] + [(dtypes.bfloat16, 0)]
    for dt, cube in cases:
        g, x, w, b = data(rng, *shape, dt)
        ours = Ours(g, x, w, b, shape[5], cube)
        t_ours = gpu_ms(ours, reps)
        ours.close()
        torch.backends.cuda.matmul.allow_tf32 = cube in (1, 3)
        t_torch = gpu_ms(torch_backward(torch, g, x, w, b, shape[5], "cuda"), reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        ref = {0: "fp32", 1: "tf32", 3: "tf32", 2: "fp16"}[cube] if dt == np.float32 else "bf16"
        rows.append((dt.name, f"{cube} {CUBE[cube]}", t_ours, t_torch, fl / t_ours / 1e9, fl / t_torch / 1e9,
                     ref, peak[ref]))
    T, B, C, K, pad = 1024, 64, 512, 3, 1
    print(f"\nConvTBC backward on {acl.current_device_kind()}, T={T} B={B} C={C} K={K} pad={pad} "
          f"({fl / 1e9:.1f} GFLOP), median of {reps}\n")
    print("| dtype | cubeMathType | ours ms | torch ms | ratio | ours TFLOP/s | torch TFLOP/s | "
          "GEMM peak (measured) | ours % of peak |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dt, cube, a, t, fa, ft, ref, pk in rows:
        print(f"| {dt} | {cube} | {a:.3f} | {t:.3f} | {a / t:.2f} | {fa:.1f} | {ft:.1f} | {ref} {pk:.1f} | "
              f"{100 * fa / pk:.0f}% |")


def launches(kind: str, T: int, B: int, C: int, K: int, pad: int, dtype: str, cube: int) -> list[dict]:
    """Each launch and GEMM of one ConvTbc forward and one backward call, timed on the device with events
    recorded around it on the plan's stream (cuda: CUDA events; emulated: the stand-in's). The call runs
    once untimed first (compiles, caches), then once with every launch wrapped. Prints a table; returns
    its rows. What it answers: which launch of the call takes the time (a per-launch breakdown that
    the bench's whole-call figure cannot give)."""
    from aclnn_gpu.device import cuda as cuda_device
    dt = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": dtypes.bfloat16}[dtype]
    rng = np.random.default_rng(0)
    g, x, w, b = data(rng, T, B, C, C, K, pad, dt)
    rows: list[dict] = []
    recording = {"on": False, "direction": ""}
    ctx_type = cuda_device.CudaKernelContext

    def timed(name: str, original):
        def wrapper(self, *args, **kwargs):
            if not recording["on"]:
                return original(self, *args, **kwargs)
            cp = self.device.cp
            with self.device.scope:
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(self.stream.cupy)
                result = original(self, *args, **kwargs)
                end.record(self.stream.cupy)
            what = args[1] if name == "launch" else "m={2} n={3} k={4} batch={b}".format(
                *args, b=args[19] if name == "gemm_strided_batched" else args[16])
            rows.append({"direction": recording["direction"], "call": name, "what": str(what),
                         "grid": list(args[2]) if name == "launch" else None, "events": (start, end, cp)})
            return result
        return wrapper
    saved = {n: getattr(ctx_type, n) for n in ("launch", "gemm_strided_batched", "gemm_batched", "run_frozen")}
    for n, f in saved.items():
        # a frozen launch's steps go through the (timed) methods one by one, not the device's own loop
        setattr(ctx_type, n, timed(n, f) if n != "run_frozen" else lambda self, frozen, ws: frozen.run_steps(self, ws))
    try:
        for direction in ("forward", "backward"):
            if direction == "backward":
                op = Ours(g, x, w, b, pad, cube)
            else:
                op = _Forward(x, w, b, pad, cube)
            op()                       # untimed: compiles and first-call costs
            recording.update(on=True, direction=direction)
            op()
            recording["on"] = False
            op.close()
    finally:
        for n, f in saved.items():
            setattr(ctx_type, n, f)
    for r in rows:
        start, end, cp = r.pop("events")
        end.synchronize()
        r["ms"] = float(cp.cuda.get_elapsed_time(start, end))
    print(f"\nConvTbc T={T} B={B} C={C} K={K} pad={pad} {dtype} cubeMathType={cube} on `{kind}`: one call's "
          "launches, each timed by events around it on the plan's stream (ms)\n")
    print("| direction | call | kernel / GEMM | grid | ms |")
    print("| --- | --- | --- | --- | ---: |")
    for r in rows:
        print(f"| {r['direction']} | {r['call']} | {r['what']} | {r['grid'] or ''} | {r['ms']:.4f} |")
    for direction in ("forward", "backward"):
        total = sum(r["ms"] for r in rows if r["direction"] == direction)
        print(f"\n{direction}: {sum(r['direction'] == direction for r in rows)} launches, {total:.4f} ms in them")
    return rows


class _Forward(Ours):
    """A repeatable aclnnConvTbc (forward) executor over preallocated device buffers."""

    def __init__(self, x, w, b, pad, cube):   # not super().__init__: that builds the backward's tensors
        status, self.stream = acl.aclrtCreateStream()
        assert status == 0
        self.ptrs = []
        ts = [self._tensor(a) for a in (x, w, b)]
        T, B, _ = x.shape
        K, _, Cout = w.shape
        out = self._tensor(np.empty((T + 2 * pad - K + 1, B, Cout), x.dtype))
        status, self.ws, self.ex = acl.aclnnConvTbcGetWorkspaceSize(*ts, pad, out, cube)
        assert status == 0, acl.aclGetRecentErrMsg()
        assert acl.aclSetAclOpExecutorRepeatable(self.ex) == 0
        self.work = self._malloc(self.ws) if self.ws else None
        self.outs = [out]

    def __call__(self):
        assert acl.aclnnConvTbc(self.work, self.ws, self.ex, self.stream) == 0
        assert acl.aclrtSynchronizeStream(self.stream) == 0


def model(T, B, C, K, pad) -> None:
    """Our backward (profiled on the emulated device) beside PyTorch's launch sequence, fp16, both in the
    profiler's model: bytes cold (each launch from an empty cache) and through the L2 model."""
    os.environ["ACLNN_GPU_DEVICE"] = "emulated"
    os.environ["ACLNN_GPU_EMU_PROFILE"] = "1"
    from aclnn_gpu.profile import profile_call
    from bench import torch_launches
    p = profile_call("ConvTbcBackward", {"T": T, "B": B, "Cin": C, "Cout": C, "K": K, "pad": pad}, "fp16")
    t = torch_launches.model("ConvTbcBackward", p.dims, 2, "float16")
    print(f"ConvTbcBackward T={T} B={B} C={C} K={K} pad={pad} fp16 (modelled H100: 3.35 TB/s, 989 TFLOP/s, "
          "3 us per launch, 50 MiB L2 model; not a measurement)\n")
    print("| | launches | DRAM bytes cold (x operands) | L2 model (x operands) | modelled time |")
    print("| --- | ---: | ---: | ---: | ---: |")
    rows = (("ours (profiler)", len(p.launches), p.dram_bytes, p.l2_dram_bytes, p.model_seconds),
            ("PyTorch launch sequence (estimate)", t["launches"], t["cold_bytes"], t["bytes"], t["seconds"]))
    for name, n, cold, l2, seconds in rows:
        print(f"| {name} | {n} | {cold / 1e6:.1f} MB ({cold / p.min_bytes:.2f}) | {l2 / 1e6:.1f} MB "
              f"({l2 / p.min_bytes:.2f}) | {seconds * 1e6:.1f} us |")
    print(f"\nPyTorch / ours modelled time: {t['seconds'] / p.model_seconds:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda", "emulated"), default="cpu", help="device kind")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs (CI)")
    ap.add_argument("--model", nargs="*", type=int, metavar="T B C K pad",
                    help="modelled H100 bytes and time of ours and PyTorch's launch sequence (no GPU)")
    ap.add_argument("--launches", nargs="*", type=int, metavar="T B C K pad",
                    help="time each launch and GEMM of one forward and one backward call on the device "
                         "(events around each; default shape: bench's mid size 2530 16 128 3 1)")
    ap.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp32", help="--launches' dtype")
    ap.add_argument("--cube", type=int, default=0, help="--launches' cubeMathType")
    args = ap.parse_args()
    if args.launches is not None:
        os.environ["ACLNN_GPU_DEVICE"] = args.device
        assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
        launches(args.device, *(args.launches or [2530, 16, 128, 3, 1]), args.dtype, args.cube)
        return
    if args.model is not None:
        model(*(args.model or [1024, 32, 1024, 3, 1]))
        return
    os.environ["ACLNN_GPU_DEVICE"] = args.device
    assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
    if args.device == "cuda":
        bench_cuda(args.quick)
    else:
        bench_cpu(args.device, args.quick)


if __name__ == "__main__":
    main()
