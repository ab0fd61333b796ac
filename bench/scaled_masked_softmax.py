"""Scaled masked softmax backward benchmark: aclnnScaledMaskedSoftmaxBackward (two-phase API,
preallocated buffers, repeatable executor; timed = execute + synchronize) against PyTorch's softmax
backward plus masking (`torch._softmax_backward_data(g, y) * scale`, then `masked_fill_(mask, 0)`)
on the same device.

    python bench/scaled_masked_softmax.py [--device cpu|cuda|emulated] [--quick]

GPU (cuda): (8, 32, 2048, 2048) bf16 with a (8, 1, 2048, 2048) mask (and fp16 / fp32 unless
--quick); bandwidth against the minimum bytes 3*M*elem + mask bytes, and its fraction of a device
copy bandwidth measured in the same run (a large device-to-device copy: 2 bytes moved per byte).
CPU / emulated: sizes that take roughly 5-200 ms in PyTorch on the CPU, median time after warm-up,
each library timed in its own block; ratio = ours / PyTorch (lower is better). Markdown table.
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
from bench.common import gpu_event_ms, medians_ms, torch_dtype  # noqa: E402

CODES = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16, dtypes.bfloat16: acl.ACL_BF16,
         np.dtype(np.bool_): acl.ACL_BOOL}


class Ours:
    """A repeatable aclnnScaledMaskedSoftmaxBackward executor over preallocated device buffers."""

    def __init__(self, g, y, mask, scale):
        status, self.stream = acl.aclrtCreateStream()
        assert status == 0
        self.ptrs = []
        tg, ty, tm = (self._tensor(a) for a in (g, y, mask))
        self.out = self._tensor(np.empty_like(g))
        status, self.ws, self.ex = acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize(tg, ty, tm, scale, False,
                                                                                        self.out)
        assert status == 0, acl.aclGetRecentErrMsg()
        assert acl.aclSetAclOpExecutorRepeatable(self.ex) == 0
        self.work = self._malloc(self.ws) if self.ws else None

    def _malloc(self, n):
        status, p = acl.aclrtMalloc(max(n, 1), 0)
        assert status == 0, acl.aclGetRecentErrMsg()
        self.ptrs.append(p)
        return p

    def _tensor(self, a):
        a = np.ascontiguousarray(a)
        p = self._malloc(a.nbytes)
        assert acl.aclrtMemcpy(p, a.nbytes, a, a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return acl.aclCreateTensor(a.shape, CODES[a.dtype], None, 0, acl.ACL_FORMAT_ND, a.shape, p)

    def __call__(self):
        assert acl.aclnnScaledMaskedSoftmaxBackward(self.work, self.ws, self.ex, self.stream) == 0
        assert acl.aclrtSynchronizeStream(self.stream) == 0

    def close(self):
        acl.aclDestroyAclOpExecutor(self.ex)
        for p in self.ptrs:
            acl.aclrtFree(p)
        acl.aclrtDestroyStream(self.stream)


def torch_backward(torch, g, y, mask, scale, device):
    tdt = torch_dtype(torch, g.dtype)
    tg, ty = (torch.from_numpy(a.astype(np.float32)).to(device=device, dtype=tdt) for a in (g, y))
    tm = torch.from_numpy(mask).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run():
        o = torch._softmax_backward_data(tg, ty, -1, tdt)
        o.mul_(scale)
        o.masked_fill_(tm, 0)
        sync()
    return run


def data(rng, shape, dt):
    B, N, S1, S2 = shape
    x = rng.standard_normal(shape, dtype=np.float32)
    x -= x.max(-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(-1, keepdims=True)
    g = rng.standard_normal(shape, dtype=np.float32)
    mask = rng.random((B, 1, S1, S2), dtype=np.float32) < 0.25
    return g.astype(dt), x.astype(dt), mask


def bench_cpu(kind, quick):
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    if kind == "emulated":
        sizes = [(1, 2, 4, 64), (1, 1, 2, 2048)]
        dts = [np.dtype(np.float32)]
    elif quick:
        sizes = [(4, 8, 128, 256), (2, 4, 256, 1024)]
        dts = [np.dtype(np.float32), dtypes.bfloat16]
    else:
        sizes = [(4, 8, 128, 256), (4, 8, 256, 256), (2, 4, 512, 1024), (1, 2, 128, 20000), (8, 16, 256, 256)]
        dts = [np.dtype(np.float32), dtypes.bfloat16, np.dtype(np.float16)]
    rows = []
    for dt in dts:
        for shape in sizes:
            g, y, mask = data(rng, shape, dt)
            ours = Ours(g, y, mask, 0.125)
            t_ours, t_torch = medians_ms(ours, torch_backward(torch, g, y, mask, 0.125, "cpu"))
            ours.close()
            rows.append((shape, dt.name, t_ours, t_torch))
    print(f"\nScaledMaskedSoftmaxBackward, device `{acl.current_device_kind()}` vs PyTorch CPU "
          f"({torch.get_num_threads()} threads), mask (B, 1, S1, S2), scale 0.125, median ms\n")
    print("| (B, N, S1, S2) | dtype | ours ms | torch ms | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for shape, dt, a, t in rows:
        print(f"| {shape} | {dt} | {a:.2f} | {t:.2f} | {a / t:.2f} |")


def bench_cuda(quick):
    import cupy as cp
    import torch

    gpu_ms = gpu_event_ms

    reps = 5 if quick else 20
    n = 1 << 30
    src = cp.empty(n, cp.uint8)
    dst = cp.empty(n, cp.uint8)
    copy_ms = gpu_ms(lambda: dst.__setitem__(slice(None), src), reps)   # noqa: F821 - runs before the `del`
    copy_gbs = 2 * n / copy_ms / 1e6
    del src, dst
    shape = (8, 32, 2048, 2048)
    B, N, S1, S2 = shape
    M = B * N * S1 * S2
    rows = []
    for dt in ([dtypes.bfloat16] if quick else [dtypes.bfloat16, np.dtype(np.float16), np.dtype(np.float32)]):
        rng = np.random.default_rng(0)
        g, y, mask = data(rng, shape, dt)
        minimum = 3 * M * np.dtype(dt).itemsize + mask.nbytes
        ours = Ours(g, y, mask, 0.125)
        t_ours = gpu_ms(ours, reps)
        ours.close()
        t_torch = gpu_ms(torch_backward(torch, g, y, mask, 0.125, "cuda"), reps)
        torch.cuda.empty_cache()
        gbs = minimum / t_ours / 1e6
        rows.append((np.dtype(dt).name, t_ours, t_torch, gbs, minimum / t_torch / 1e6, gbs / copy_gbs))
        del g, y, mask
    print(f"\nScaledMaskedSoftmaxBackward on {acl.current_device_kind()}, {shape} with a (8, 1, 2048, 2048) mask, "
          f"median of {reps}; device copy bandwidth {copy_gbs:.0f} GB/s\n")
    print("| dtype | ours ms | torch ms | ratio | ours GB/s | torch GB/s | ours / copy bw |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dt, a, t, gb, tgb, frac in rows:
        print(f"| {dt} | {a:.2f} | {t:.2f} | {a / t:.2f} | {gb:.0f} | {tgb:.0f} | {frac:.0%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda", "emulated"), default=None,
                    help="device kind (default: cuda when CuPy sees a GPU, else cpu)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs (CI)")
    args = ap.parse_args()
    if args.device:
        os.environ["ACLNN_GPU_DEVICE"] = args.device
    assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
    kind = acl.current_device_kind()
    if kind == "cuda":
        bench_cuda(args.quick)
    else:
        bench_cpu(kind, args.quick)


if __name__ == "__main__":
    main()
