"""Cross-entropy benchmark: aclnnCrossEntropyLossGrad (and the forward aclnnCrossEntropyLoss) through the
two-phase API (preallocated buffers, repeatable executor; timed = execute + synchronize) against PyTorch's
F.cross_entropy backward (`torch.autograd.grad(loss, logits)`: nll_loss_backward + log_softmax_backward)
on the same device.

    python bench/cross_entropy.py [--device cpu|cuda|emulated] [--quick]
    python bench/cross_entropy.py --zloss [--device cpu|cuda|emulated] [--quick]   (z-loss on vs off)
    python bench/cross_entropy.py --model [N C]       (no GPU: modelled H100 bytes and time, z-loss on vs off)

GPU (cuda): N=8192 with C=32000 (fp32) and C=128256 (bf16), reduction mean; achieved GB/s against the
minimum bytes 2*N*C*elem (read logProb once, write out once) and the fraction of a device-to-device copy
bandwidth measured in the same run.
CPU / emulated: sizes that take roughly 5-200 ms in PyTorch on the CPU; median time after warm-up, each
library timed in its own block; ratio = ours / PyTorch (lower is better). Prints a Markdown table.
--zloss: our forward and backward with CANN's z-loss (lseSquareScaleForZloss = ZLOSS, lse out / in,
zlossOut) against the same calls without it, on the device in use (cpu / emulated: blocks of each
alternated over several rounds, median of the rounds' medians; cuda: CUDA events, L2 flushed).
--model: both calls profiled on the emulated device (python -m aclnn_gpu.profile's memory model),
z-loss off and on: DRAM bytes and the modelled H100 time (3.35 TB/s + 3 us per launch) -- a model, not
a measurement.
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
from bench.common import Op, gpu_event_ms, median_ms, torch_dtype  # noqa: E402

ACL_CODE = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16,
            dtypes.bfloat16: acl.ACL_BF16, np.dtype(np.int64): acl.ACL_INT64, np.dtype(np.int32): acl.ACL_INT32}


class Buffers:
    """Device buffers and tensors owned by one benchmark case."""

    def __init__(self):
        status, self.stream = acl.aclrtCreateStream()
        assert status == 0
        self.ptrs: list[int] = []
        self.tensors: list = []

    def malloc(self, n):
        status, p = acl.aclrtMalloc(max(n, 1), 0)
        assert status == 0, acl.aclGetRecentErrMsg()
        self.ptrs.append(p)
        return p

    def tensor(self, shape, dtype, host=None):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        p = self.malloc(nbytes)
        if host is not None:
            host = np.ascontiguousarray(host, dtype)
            assert acl.aclrtMemcpy(p, nbytes, host, nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        t = acl.aclCreateTensor(shape, ACL_CODE[dtype], None, 0, acl.ACL_FORMAT_ND, shape, p)
        self.tensors.append(t)
        return t

    def close(self):
        for t in self.tensors:
            acl.aclDestroyTensor(t)
        for p in self.ptrs:
            acl.aclrtFree(p)
        acl.aclrtDestroyStream(self.stream)


ZLOSS = 1e-4   # lseSquareScaleForZloss of the z-loss rows (PaLM's z-loss coefficient)


def grad_op(b, lp_shape, dtype, lp_host=None, t_host=None, lse_host=None, zloss=False):
    """The backward; with `zloss`, lseForZlossOptional (N,) and lseSquareScaleForZloss = ZLOSS."""
    N, C = lp_shape
    g = b.tensor((), dtype, np.ones((), dtype))
    lp = b.tensor((N, C), dtype, lp_host)
    t = b.tensor((N,), np.int64, t_host)
    out = b.tensor((N, C), dtype)
    lse = b.tensor((N,), dtype, lse_host) if zloss else None
    return Op(b, acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad,
              g, lp, t, None, None, lse, "mean", -100, 0.0, ZLOSS if zloss else 0.0, out), lp, t, out


def forward_op(b, x_host, t_host, zloss=False):
    """The forward; with `zloss`, lseSquareScaleForZloss = ZLOSS, returnZloss, zlossOut and lseForZlossOut."""
    N, C = x_host.shape
    dtype = x_host.dtype
    x, t = b.tensor((N, C), dtype, x_host), b.tensor((N,), np.int64, t_host)
    loss, lp = b.tensor((), dtype), b.tensor((N, C), dtype)
    zl, lse = (b.tensor((), dtype), b.tensor((N,), dtype)) if zloss else (None, None)
    return Op(b, acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, x, t, None, "mean", -100,
              0.0, ZLOSS if zloss else 0.0, zloss, loss, lp, zl, lse)


def _lse(x):
    x = x.astype(np.float32)
    m = x.max(axis=1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=1))


def bench_cpu(kind, quick):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    f32, bf16 = np.dtype(np.float32), dtypes.bfloat16
    if kind == "emulated":
        cases = [(16, 64, f32), (8, 1000, f32), (8, 1000, bf16)]
    elif quick:
        cases = [(4096, 1000, f32), (256, 32000, f32), (256, 32000, bf16)]
    else:
        cases = [(4096, 1000, f32), (2048, 4096, f32), (1024, 8192, f32), (256, 32000, f32), (128, 128256, f32),
                 (1024, 8192, bf16), (256, 32000, bf16), (64, 128256, bf16)]
    rows = []
    for N, C, dt in cases:
        x = (rng.standard_normal((N, C), dtype=np.float32) * 2).astype(dt)
        t = rng.integers(0, C, N)
        t[::7] = -100
        xt = torch.from_numpy(x.astype(np.float32)).to(torch_dtype(torch, dt)).requires_grad_(True)
        tt = torch.from_numpy(t)
        loss = F.cross_entropy(xt, tt)
        lp_host = torch.log_softmax(xt.detach().float(), 1).numpy().astype(dt)
        t_torch_b = median_ms(lambda: torch.autograd.grad(loss, xt, retain_graph=True))
        t_torch_f = median_ms(lambda: F.cross_entropy(xt.detach(), tt)) if not quick else None
        b = Buffers()
        op, *_ = grad_op(b, (N, C), dt, lp_host, t)
        t_ours_b = median_ms(op)
        op.close()
        t_ours_f = None
        if not quick:
            fop = forward_op(b, x, t)
            t_ours_f = median_ms(fop)
            fop.close()
        b.close()
        rows.append((f"N={N} C={C}", dt.name, "backward", t_ours_b, t_torch_b))
        if t_ours_f is not None:
            rows.append((f"N={N} C={C}", dt.name, "forward", t_ours_f, t_torch_f))
    print(f"\nCross-entropy on device `{acl.current_device_kind()}` vs PyTorch CPU ({torch.get_num_threads()} "
          f"threads), reduction mean, 1/7 of the rows ignored, median ms\n")
    print("| shape | dtype | pass | ours ms | torch ms | ratio |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name, dt, what, a, t in rows:
        print(f"| {name} | {dt} | {what} | {a:.2f} | {t:.2f} | {a / t:.2f} |")


def bench_cuda(quick):
    import cupy as cp
    import torch
    import torch.nn.functional as F

    gpu_ms = gpu_event_ms

    def device_bytes(ptr, nbytes):
        mem = cp.cuda.UnownedMemory(ptr, nbytes, None)
        return cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))

    def torch_bytes(t):
        return cp.from_dlpack(t.contiguous().reshape(-1).view(torch.uint8))

    reps = 5 if quick else 20
    # measured copy bandwidth (read + write) on a 1 GiB buffer
    n = 1 << 30
    src, dst = cp.empty(n, cp.uint8), cp.empty(n, cp.uint8)
    copy_gbs = 2 * n / gpu_ms(lambda: dst.__setitem__(Ellipsis, src), reps) / 1e6   # noqa: F821 - before `del`
    del src, dst

    N = 8192
    cases = [(32000, np.dtype(np.float32)), (128256, dtypes.bfloat16)]
    rows = []
    for C, dt in cases:
        tdt = torch_dtype(torch, dt)
        x = torch.randn(N, C, device="cuda", dtype=torch.float32).mul_(2).to(tdt).requires_grad_(True)
        tt = torch.randint(0, C, (N,), device="cuda")
        tt[::7] = -100
        lp = torch.log_softmax(x.detach().float(), 1).to(tdt)
        b = Buffers()
        op, lp_t, t_t, _ = grad_op(b, (N, C), dt)
        device_bytes(lp_t.data, lp.numel() * lp.element_size())[...] = torch_bytes(lp)
        device_bytes(t_t.data, N * 8)[...] = torch_bytes(tt)
        t_ours = gpu_ms(op, reps)
        op.close()
        b.close()
        loss = F.cross_entropy(x, tt)

        def torch_bwd():
            torch.autograd.grad(loss, x, retain_graph=True)   # noqa: F821 - runs before the `del` below
        t_torch = gpu_ms(torch_bwd, reps)
        minimum = 2 * N * C * dt.itemsize
        rows.append((f"N={N} C={C}", dt.name, t_ours, t_torch, minimum / t_ours / 1e6, minimum / t_torch / 1e6))
        del x, lp, loss
        torch.cuda.empty_cache()
    print(f"\nCrossEntropyLossGrad on {acl.current_device_kind()} ({torch.cuda.get_device_name()}), reduction mean, "
          f"median of {reps}; GB/s = 2*N*C*elem / time; device copy bandwidth {copy_gbs:.0f} GB/s\n")
    print("| shape | dtype | ours ms | torch ms | ratio | ours GB/s | torch GB/s | ours / copy |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, dt, a, t, ga, gt in rows:
        print(f"| {name} | {dt} | {a:.3f} | {t:.3f} | {a / t:.2f} | {ga:.0f} | {gt:.0f} | {ga / copy_gbs:.2f} |")


def _zloss_cases(kind, quick):
    f32, bf16 = np.dtype(np.float32), dtypes.bfloat16
    if kind == "emulated":
        return [(16, 64, f32), (8, 1000, bf16)]
    if kind == "cuda":
        return [(8192, 32000, f32), (8192, 128256, bf16)] if not quick else [(4096, 32000, f32), (4096, 128256, bf16)]
    if quick:
        return [(256, 32000, f32), (256, 32000, bf16)]
    return [(4096, 1000, f32), (1024, 8192, f32), (256, 32000, f32), (1024, 8192, bf16), (256, 32000, bf16),
            (64, 128256, bf16)]


def bench_zloss(kind, quick):
    """Our forward and backward, z-loss off vs on, on the device in use."""
    rng = np.random.default_rng(0)
    rows = []
    for N, C, dt in _zloss_cases(kind, quick):
        x = (rng.standard_normal((N, C), dtype=np.float32) * 2).astype(dt)
        t = rng.integers(0, C, N)
        t[::7] = -100
        lp_host = (x.astype(np.float32) - _lse(x)[:, None]).astype(dt)
        lse_host = _lse(x).astype(dt)
        b = Buffers()
        ops = {}
        for z in (False, True):
            ops["forward", z] = forward_op(b, x, t, zloss=z)
            ops["backward", z] = grad_op(b, (N, C), dt, lp_host, t, lse_host, zloss=z)[0]
        times = {}
        if kind == "cuda":
            reps = 5 if quick else 20
            for key, op in ops.items():
                times[key] = [gpu_event_ms(op.enqueue, reps)]
        else:
            rounds = 2 if quick or kind == "emulated" else 4
            for _ in range(rounds):   # off and on alternated, each in its own block
                for key, op in ops.items():
                    times.setdefault(key, []).append(median_ms(op, reps=5 if kind == "emulated" else 7))
        for op in ops.values():
            op.close()
        b.close()
        for what in ("forward", "backward"):
            off, on = float(np.median(times[what, False])), float(np.median(times[what, True]))
            rows.append((f"N={N} C={C}", dt.name, what, off, on))
    how = ("CUDA events, L2 flushed, median" if kind == "cuda" else
           "wall clock, off / on blocks alternated, median of the rounds' medians")
    extra = ""
    if kind == "cuda":
        import cupy as cp
        extra = f" ({cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)['name'].decode()})"
    print(f"\nCross-entropy z-loss on vs off, device `{kind}`{extra}, reduction mean, 1/7 of the rows ignored, "
          f"lseSquareScaleForZloss {ZLOSS} (on: returnZloss, zlossOut and lseForZlossOut written; backward reads "
          f"lse); {how}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end\n")
    print("| shape | dtype | pass | off ms | on ms | on / off |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name, dt, what, off, on in rows:
        print(f"| {name} | {dt} | {what} | {off:.3f} | {on:.3f} | {on / off:.3f} |")


def model(N, C):
    """Both calls profiled on the emulated device, z-loss off vs on (bf16): the profiler's memory
    model and the modelled H100 time. Needs the profiling build, selected before the first kernel
    build: run as `python bench/cross_entropy.py --model` (main sets the environment)."""
    from aclnn_gpu.profile import profile_call
    print(f"\nCross-entropy z-loss on vs off, N={N} C={C} bf16, modelled (the emulator's memory profiler; H100 "
          "model: 3.35 TB/s + 3 us per launch, 50 MiB L2 model; not a measurement)\n")
    print("| call | z-loss | launches | DRAM bytes cold | L2 model bytes | minimum bytes | modelled H100 us |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for op in ("CrossEntropyLoss", "CrossEntropyLossGrad"):
        for z in (0, 1):
            p = profile_call(op, {"N": N, "C": C, "zloss": z}, "bf16")
            print(f"| {op} | {'on' if z else 'off'} | {len(p.launches)} | {p.dram_bytes} | {p.l2_dram_bytes} | "
                  f"{p.min_bytes} | {p.model_seconds * 1e6:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "emulated"], default=None,
                    help="device kind (default: cuda when CuPy sees a GPU, else cpu)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and runs (CI)")
    parser.add_argument("--zloss", action="store_true", help="z-loss on vs off, our calls on the device in use")
    parser.add_argument("--model", nargs="*", type=int, metavar="N C",
                        help="modelled H100 bytes and time of both calls, z-loss on vs off (no GPU)")
    args = parser.parse_args()
    if args.model is not None:
        os.environ["ACLNN_GPU_DEVICE"] = "emulated"
        os.environ["ACLNN_GPU_EMU_PROFILE"] = "1"
        model(*(args.model or [16, 32000]))
        return
    if args.device:
        os.environ["ACLNN_GPU_DEVICE"] = args.device
    assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
    kind = acl.current_device_kind()
    if args.zloss:
        bench_zloss(kind, args.quick)
    elif kind == "cuda":
        bench_cuda(args.quick)
    else:
        bench_cpu(kind, args.quick)


if __name__ == "__main__":
    main()
