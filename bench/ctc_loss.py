"""Benchmark of aclnnCtcLoss (forward) and aclnnCtcLossBackward against PyTorch's ctc_loss.

    python bench/ctc_loss.py [--device cpu|cuda|emulated] [--quick]
    python bench/ctc_loss.py --half [--device ...] [--quick]   (ours in fp16 / bf16 against fp32)
    python bench/ctc_loss.py --model [T N C L]                 (no GPU: modelled H100 bytes, fp16 / bf16 / fp32)

--half: our forward and backward in each storage type on the device in use, with the gradient's
largest error against PyTorch float64 on the same (rounded) log-probs beside PyTorch fp32's on them.
--model: both calls profiled on the emulated device (the memory profiler of `python -m
aclnn_gpu.profile`): launches, bytes moved and the modelled H100 time -- a model, not a measurement.

Ours: the two-phase API with preallocated device buffers and repeatable executors, so only
execute + synchronize is timed. PyTorch: aten._ctc_loss / _ctc_loss_backward on the same data
(CUDA tensors on a GPU, CPU tensors otherwise). Each library is timed in its own block (median
after warm-up); the ratio is ours / PyTorch, "per step" is time / T. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench import common  # noqa: E402
from aclnn_gpu.base.dtypes import bfloat16  # noqa: E402

GPU_SIZES = [(1000, 32, 5000, 100), (1500, 32, 29, 300)]
CPU_SIZES = [(200, 8, 29, 40), (500, 16, 29, 100), (300, 16, 200, 60)]
EMU_SIZES = [(40, 2, 8, 8)]
QUICK = {"cuda": GPU_SIZES, "cpu": [(200, 8, 29, 40), (500, 16, 29, 100)], "emulated": EMU_SIZES}


def median_ms(fn, sync, reps, warm=2):
    return common.median_ms(lambda: (fn(), sync()), warmup=warm, reps=reps, budget_s=1e9, pause_s=0.3)


def make_data(T, N, C, L, seed=0):
    import torch
    rng = np.random.default_rng(seed)
    lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C)), dtype=torch.float32), -1).numpy()
    tl = np.maximum(rng.integers(L // 2, L + 1, N), 1)
    tl[0] = L
    il = np.array([int(rng.integers(max(2 * l + 1, T * 3 // 4), T + 1)) for l in tl])
    il[0] = T
    tg = rng.integers(1, C, (N, L)).astype(np.int64)
    return lp, tg, il.astype(np.int64), tl.astype(np.int64)


class Ours:
    def __init__(self, lp, tg, il, tl):
        import aclnn_gpu as acl
        self.acl = acl
        T, N, C = lp.shape
        X = 2 * int(tl.max()) + 1
        self.ptrs = []
        self.out_shape = (T, N, C)
        st, self.stream = acl.aclrtCreateStream()
        mk = lambda a: self.tensor(np.ascontiguousarray(a))  # noqa: E731
        self.lp, self.tg = mk(lp), mk(tg)
        self.nll, self.la = mk(np.zeros(N, lp.dtype)), mk(np.zeros((N, T, X), lp.dtype))
        self.g, self.out = mk(np.ones(N, lp.dtype)), mk(np.zeros((T, N, C), lp.dtype))
        self.out_dtype = lp.dtype
        self.il, self.tl = acl.aclCreateIntArray(il.tolist()), acl.aclCreateIntArray(tl.tolist())
        st, ws, self.fex = acl.aclnnCtcLossGetWorkspaceSize(self.lp, self.tg, self.il, self.tl, 0, False, self.nll,
                                                            self.la)
        assert st == 0, acl.aclGetRecentErrMsg()
        acl.aclSetAclOpExecutorRepeatable(self.fex)
        self.fws, self.fwp = ws, self.malloc(ws) if ws else None
        self.forward()
        self.sync()
        st, ws, self.bex = acl.aclnnCtcLossBackwardGetWorkspaceSize(self.g, self.lp, self.tg, self.il, self.tl,
                                                                    self.nll, self.la, 0, False, self.out)
        assert st == 0, acl.aclGetRecentErrMsg()
        acl.aclSetAclOpExecutorRepeatable(self.bex)
        self.bws, self.bwp = ws, self.malloc(ws) if ws else None

    def malloc(self, n):
        st, p = self.acl.aclrtMalloc(max(n, 1), 0)
        assert st == 0
        self.ptrs.append(p)
        return p

    def tensor(self, a):
        acl = self.acl
        p = self.malloc(a.nbytes)
        acl.aclrtMemcpy(p, a.nbytes, a, a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
        code = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.int64): acl.ACL_INT64,
                np.dtype(np.float16): acl.ACL_FLOAT16, np.dtype(bfloat16): acl.ACL_BF16}[a.dtype]
        t = acl.aclCreateTensor(a.shape, code, None, 0, acl.ACL_FORMAT_ND, a.shape, p)
        self.addr = getattr(self, "addr", {})
        self.addr[id(t)] = p
        return t

    def gradient(self) -> np.ndarray:
        """The backward's output, copied to the host (after a sync)."""
        self.sync()
        host = np.empty(self.out_shape, self.out_dtype)
        acl = self.acl
        acl.aclrtMemcpy(host, host.nbytes, self.addr[id(self.out)], host.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST)
        return host

    def forward(self):
        assert self.acl.aclnnCtcLoss(self.fwp, self.fws, self.fex, self.stream) == 0

    def backward(self):
        assert self.acl.aclnnCtcLossBackward(self.bwp, self.bws, self.bex, self.stream) == 0

    def sync(self):
        assert self.acl.aclrtSynchronizeStream(self.stream) == 0, self.acl.aclGetRecentErrMsg()

    def close(self):
        self.sync()
        for p in self.ptrs:
            self.acl.aclrtFree(p)


def torch_runner(lp, tg, il, tl, device):
    import torch
    dev = torch.device(device)
    lpt, tgt = torch.tensor(lp, device=dev), torch.tensor(tg, device=dev)
    ilt, tlt = torch.tensor(il, device=dev), torch.tensor(tl, device=dev)
    g = torch.ones(lp.shape[1], device=dev)
    state = {}
    if device == "cuda":   # the native CUDA kernel takes the lengths as tensors
        f = lambda: torch.ops.aten._ctc_loss(lpt, tgt, ilt, tlt, 0, False)  # noqa: E731
        b = lambda: torch.ops.aten._ctc_loss_backward(g, lpt, tgt, ilt, tlt, *state["r"], 0, False)  # noqa: E731
        sync = torch.cuda.synchronize
    else:
        il_l, tl_l = il.tolist(), tl.tolist()
        f = lambda: torch.ops.aten._ctc_loss(lpt, tgt, il_l, tl_l, 0, False)  # noqa: E731
        b = lambda: torch.ops.aten._ctc_loss_backward(g, lpt, tgt, il_l, tl_l, *state["r"], 0, False)  # noqa: E731
        sync = lambda: None  # noqa: E731
    state["r"] = f()
    return f, b, sync


HALF_TYPES = ("float32", "float16", "bfloat16")


def _grad_errors(lp16, tg, il, tl, ours_grad):
    """(ours, PyTorch fp32's) largest gradient error against PyTorch float64, all on the same rounded
    log-probs (gradOut 1 per sample: reduction "sum")."""
    import torch
    grads = {}
    for dt in (torch.float64, torch.float32):
        x = torch.tensor(lp16.astype(np.float32), dtype=dt, requires_grad=True)
        torch.nn.functional.ctc_loss(x, torch.tensor(tg), il.tolist(), tl.tolist(), reduction="sum").backward()
        grads[dt] = x.grad.numpy().astype(np.float64)
    ref = grads[torch.float64]
    back = grads[torch.float32].astype(lp16.dtype).astype(np.float64)
    return float(np.abs(ours_grad.astype(np.float64) - ref).max()), float(np.abs(back - ref).max())


def bench_half(device, sizes, reps):
    """Ours in fp32, fp16 and bf16 storage on the device in use: times and the gradient's error."""
    print(f"CTC in 16-bit storage against fp32, device `{device}`, median of {reps} (ms); gradient error: "
          "largest |ours - PyTorch float64| on the same rounded log-probs, beside PyTorch fp32's cast back\n")
    print("| T | N | C | L | storage | fwd ms | bwd ms | bwd / fp32 bwd | grad error | PyTorch fp32 error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for T, N, C, L in sizes:
        lp, tg, il, tl = make_data(T, N, C, L)
        base = None
        for name in HALF_TYPES:
            lpx = lp.astype(np.dtype(bfloat16) if name == "bfloat16" else np.dtype(name))
            ours = Ours(lpx, tg, il, tl)
            of = median_ms(ours.forward, ours.sync, reps)
            ob = median_ms(ours.backward, ours.sync, reps)
            err, terr = _grad_errors(lpx, tg, il, tl, ours.gradient())
            ours.close()
            base = base or ob
            print(f"| {T} | {N} | {C} | {L} | {name} | {of:.3f} | {ob:.3f} | {ob / base:.2f} | {err:.2e} "
                  f"| {terr:.2e} |")


def model_half(T, N, C, L):
    """Both calls in each storage type, profiled on the emulated device: a MODEL of an H100."""
    from aclnn_gpu.profile import profile_call
    print(f"\nCTC in 16-bit storage against fp32, T={T} N={N} C={C} L={L}, MODELLED (the emulator's memory "
          "profiler, 50 MiB L2 model; H100 model: 3.35 TB/s + 3 us per launch, latency-aware: recursions "
          "priced by their steps' critical path; not a measurement)\n")
    print("| call | storage | launches | DRAM bytes cold | L2-model bytes | minimum bytes "
          "| modelled H100 us, bytes-only / latency-aware |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for op in ("CtcLoss", "CtcLossBackward"):
        for dt in ("fp32", "fp16", "bf16"):
            p = profile_call(op, {"T": T, "N": N, "C": C, "L": L}, dt)
            print(f"| {op} | {dt} | {len(p.launches)} | {p.dram_bytes:,} | {p.l2_dram_bytes:,} | {p.min_bytes:,} | "
                  f"{p.model_seconds * 1e6:.2f} / {p.latency_model_seconds * 1e6:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda", "emulated"], default=None,
                    help="device kind (default: cuda when CuPy sees a GPU, else cpu)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs (CI)")
    ap.add_argument("--half", action="store_true", help="ours in fp16 / bf16 storage against fp32")
    ap.add_argument("--model", nargs="*", type=int, metavar="T N C L",
                    help="modelled H100 bytes and time in fp32 / fp16 / bf16 (no GPU; default 200 2 1000 40)")
    args = ap.parse_args()
    if args.model is not None:
        os.environ["ACLNN_GPU_DEVICE"] = "emulated"
        os.environ["ACLNN_GPU_EMU_PROFILE"] = "1"
        model_half(*(args.model or [200, 2, 1000, 40]))
        return
    device = common.detect_device(args.device)
    os.environ["ACLNN_GPU_DEVICE"] = device
    import aclnn_gpu as acl
    assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
    import torch
    sizes = QUICK[device] if args.quick else {"cuda": GPU_SIZES, "cpu": CPU_SIZES, "emulated": EMU_SIZES}[device]
    reps = (5 if args.quick else 15) if device != "emulated" else 2
    tdev = "cuda" if device == "cuda" else "cpu"
    if args.half:
        bench_half(device, sizes, reps)
        return
    print(f"device: {device} ({acl.current_device_kind()}), torch {torch.__version__} on {tdev} "
          f"({torch.get_num_threads()} threads), fp32, median of {reps}\n")
    print("| T | N | C | L | ours fwd ms | torch fwd ms | fwd ratio | ours bwd ms | torch bwd ms | bwd ratio "
          "| ours fwd+bwd ms | torch fwd+bwd ms | ratio | ours bwd us/step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for T, N, C, L in sizes:
        lp, tg, il, tl = make_data(T, N, C, L)
        ours = Ours(lp, tg, il, tl)
        of = median_ms(ours.forward, ours.sync, reps)
        ob = median_ms(ours.backward, ours.sync, reps)
        ours.close()
        f, b, sync = torch_runner(lp, tg, il, tl, tdev)
        tf = median_ms(f, sync, reps)
        tb = median_ms(b, sync, reps)
        print(f"| {T} | {N} | {C} | {L} | {of:.3f} | {tf:.3f} | {of / tf:.2f} | {ob:.3f} | {tb:.3f} | {ob / tb:.2f} "
              f"| {of + ob:.3f} | {tf + tb:.3f} | {(of + ob) / (tf + tb):.2f} | {ob * 1e3 / T:.2f} |")


if __name__ == "__main__":
    main()
