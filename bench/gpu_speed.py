"""The speed questions, answered first when a GPU is lent (scripts/gpu_check.sh runs this before
anything else): where this library stands against PyTorch CUDA, in one process, one JSON file.

    python -m bench.gpu_speed --device cuda --json speed.json [--summary summary.txt] [--sections ...]

Sections, in this order (each in its own try; the JSON is rewritten after every row, so a run cut
short by the check's deadline keeps what it measured):
  convtbc_launches  one ConvTbc forward and backward call, each launch and GEMM timed by CUDA events
                    around it (bench/conv_tbc.py --launches), at the bench mid shape, fp32 and fp16
  convtbc           ConvTbc forward and backward against torch.conv_tbc and against cuDNN
                    (torch.nn.functional.conv1d on the same data, permuted to (B, C, T) and the weight
                    to (Cout, Cin, K) once, BEFORE timing: the permutes are not in its time) at four
                    shapes (the bench mid shape (2530, 16, 128) / (3, 128, 128) pad 1; C = 64; C = 1024
                    with K = 5; T = 50, B = 256), fp32 (TF32 off on both sides: cubeMathType 0 is true
                    fp32), fp16 and bf16. Backward: torch.ops.aten.conv_tbc_backward; cuDNN: autograd
                    of conv1d's output for input, weight and bias. Times: median of CUDA events, the L2
                    flushed before each run.
  host              host time per execute (a repeatable executor) and per GetWorkspaceSize + execute
                    (a single-use executor each call) of all ten operators on tiny tensors, against a
                    tiny PyTorch CUDA op (torch.add of two 8-element tensors) in the same process:
                    perf_counter medians over batches of calls, the stream synchronized between
                    batches (untimed)
  membound          KlDiv, CrossEntropy and ScaledMaskedSoftmax forward and backward at the bench
                    mid shape and at a size of >= 256 MB of minimum traffic, as a fraction of the copy
                    ceiling: a device-to-device copy of half the operator's minimum bytes (it reads
                    and writes them: the same bytes moved) timed the same way
  splits            CrossEntropyLoss forward and CtcLoss forward and backward at the ladder shapes where
                    their rows (samples) are split over several blocks to fill the GPU, with the split
                    and with it turned off (one block per row or sample, the plan before the split),
                    against PyTorch: whether filling the GPU pays there (the GPU models disagree)
On the emulated device (the GPU check's rehearsal) the same code runs at tiny shapes against PyTorch on
the CPU, with wall-clock times: it proves the script, not a speed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

SECTIONS = ("convtbc_launches", "convtbc", "host", "membound", "splits")
MID = (2530, 16, 128, 3, 1)                                   # T, B, C, K, pad: bench's mid shape on a GPU
CONV_SHAPES = {"cuda": [MID, (2530, 16, 64, 3, 1), (1024, 16, 1024, 5, 2), (50, 256, 128, 3, 1)],
               "emulated": [(12, 2, 8, 3, 1)]}
DTYPES = ("fp32", "fp16", "bf16")
# large sizes of the memory-bound families: >= 256 MB of minimum traffic in fp32
LARGE = {"KlDiv": (32768, 1024), "CrossEntropy": (4096, 8192), "ScaledMaskedSoftmax": (1, 512, 128, 512)}


class Report:
    """speed.json, rewritten after every row, and the short text lines of the summary."""

    def __init__(self, path: str | None, kind: str):
        self.path = Path(path) if path else None
        self.data: dict[str, Any] = {"device": kind, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     "summary": []}

    def add(self, section: str, row: dict) -> None:
        self.data.setdefault(section, []).append(row)
        self.write()

    def line(self, text: str) -> None:
        print(text, flush=True)
        self.data["summary"].append(text)
        self.write()

    def write(self) -> None:
        if self.path:
            self.path.write_text(json.dumps(self.data, indent=1, default=str))


# ------------------------------------------------------------------------------ timing
def timer(kind: str) -> Callable[[Callable[[], Any], int], float]:
    """ms of fn: CUDA events (bench.common.gpu_event_ms, L2 flushed) on cuda; wall clock elsewhere."""
    if kind == "cuda":
        return lambda fn, reps: common.gpu_event_ms(fn, reps, warmup=2)

    def wall(fn, reps):
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    return wall


def host_us(fn: Callable[[], Any], sync: Callable[[], Any], calls: int = 200, batches: int = 7) -> float:
    """Median per-call host microseconds of `fn` over batches (sync between batches, untimed)."""
    from bench.host_overhead import batch_us
    return statistics.median(batch_us(fn, calls, batches, after=sync))


# ------------------------------------------------------------------------------ ConvTbc
def _np_dtype(name: str):
    from aclnn_gpu.base import dtypes
    return {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": dtypes.bfloat16}[name]


def convtbc_launches(kind: str, rep: Report) -> None:
    from bench import conv_tbc
    shape = MID if kind == "cuda" else CONV_SHAPES["emulated"][0]
    for dtype in ("fp32", "fp16") if kind == "cuda" else ("fp32",):
        rows = conv_tbc.launches(kind, *shape, dtype, 0)
        for r in rows:
            rep.add("convtbc_launches", {"shape": list(shape), "dtype": dtype, **r})
        for direction in ("forward", "backward"):
            mine = [r for r in rows if r["direction"] == direction]
            top = max(mine, key=lambda r: r["ms"]) if mine else None
            rep.line(f"speed: ConvTbc {direction} {shape} {dtype}: {len(mine)} launches, "
                     f"{sum(r['ms'] for r in mine):.3f} ms in them"
                     + (f"; slowest {top['what']} grid {top['grid']} {top['ms']:.3f} ms" if top else ""))


def convtbc(kind: str, rep: Report, reps: int) -> None:
    import torch
    torch.backends.cudnn.allow_tf32 = False        # cubeMathType 0: true fp32 on every side
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng(0)
    for shape in CONV_SHAPES[kind]:
        for dtype in DTYPES:
            _conv_case(kind, rep, reps, shape, dtype, rng)


def _conv_case(kind: str, rep: Report, reps: int, shape: tuple, dtype: str, rng) -> None:
    """One shape and dtype: forward and backward of ours, torch.conv_tbc and cuDNN (its tensors are
    freed when this returns)."""
    import torch
    import torch.nn.functional as F

    from bench import conv_tbc
    dev = "cuda" if kind == "cuda" else "cpu"
    ms = timer(kind)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    T, B, C, K, pad = shape
    g, x, w, b = conv_tbc.data(rng, T, B, C, C, K, pad, _np_dtype(dtype))
    tg, tx, tw, tb = (common.to_torch(torch, a, dev) for a in (g, x, w, b))
    # cuDNN's layout, made once outside the timed region
    xc = tx.permute(1, 2, 0).contiguous().requires_grad_(True)
    wc = tw.permute(2, 1, 0).contiguous().requires_grad_(True)
    bc = tb.clone().requires_grad_(True)
    gc = tg.permute(1, 2, 0).contiguous()
    yc = F.conv1d(xc, wc, bc, padding=pad)

    def cudnn_fwd():
        with torch.no_grad():
            F.conv1d(xc, wc, bc, padding=pad)
        sync()

    def cudnn_bwd():
        torch.autograd.grad(yc, (xc, wc, bc), gc, retain_graph=True)
        sync()

    def tbc_fwd():
        torch.conv_tbc(tx, tw, tb, pad)
        sync()

    def tbc_bwd():
        torch.ops.aten.conv_tbc_backward(tg, tx, tw, tb, pad)
        sync()
    flops_fwd = 2.0 * K * C * C * (T + 2 * pad - K + 1) * B
    for direction, theirs, cudnn in (("forward", tbc_fwd, cudnn_fwd), ("backward", tbc_bwd, cudnn_bwd)):
        ours = conv_tbc._Forward(x, w, b, pad, 0) if direction == "forward" else conv_tbc.Ours(g, x, w, b, pad, 0)
        try:
            t_ours = ms(ours, reps)
        finally:
            ours.close()
        t_tbc, t_cudnn = ms(theirs, reps), ms(cudnn, reps)
        fl = flops_fwd * (1 if direction == "forward" else 2)
        rep.add("convtbc", {"shape": list(shape), "dtype": dtype, "direction": direction, "ours_ms": t_ours,
                            "conv_tbc_ms": t_tbc, "cudnn_conv1d_ms": t_cudnn, "ours_over_conv_tbc": t_ours / t_tbc,
                            "ours_over_cudnn": t_ours / t_cudnn, "ours_TFLOPs": fl / t_ours / 1e9,
                            "cudnn_permute_excluded": True})
        rep.line(f"speed: ConvTbc {direction} T={T} B={B} C={C} K={K} pad={pad} {dtype}: ours {t_ours:.3f} ms, "
                 f"torch.conv_tbc {t_tbc:.3f} ms ({t_ours / t_tbc:.2f}x), cuDNN conv1d {t_cudnn:.3f} ms "
                 f"({t_ours / t_cudnn:.2f}x)")


# ------------------------------------------------------------------------------ host time
class _CallBuffers(common.Buffers):
    """Buffers whose `op` keeps what a call needs: a repeatable executor (execute alone) and the
    GetWorkspaceSize arguments (a single-use executor per call)."""

    def op(self, get_ws, execute, *args):
        op = super().op(get_ws, execute, *args)
        op.get_ws, op.args = get_ws, args
        return op


def host(kind: str, rep: Report) -> None:
    import torch

    import aclnn_gpu as acl
    from bench.families import FAMILIES
    dev = "cuda" if kind == "cuda" else "cpu"
    sync_t = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    a, b2, c = (torch.ones(8, device=dev) for _ in range(3))
    n = {"calls": 200, "batches": 7} if kind == "cuda" else {"calls": 20, "batches": 3}
    torch_us = host_us(lambda: torch.add(a, b2, out=c), sync_t, **n)
    rep.add("host", {"operator": "torch.add (8 elements)", "execute_us": torch_us, "pair_us": torch_us})
    rng = np.random.default_rng(0)
    ratios = []
    for fam in FAMILIES:
        p = fam.tiny()
        d = fam.data(p, np.dtype(np.float32), rng)
        for direction in ("forward", "backward"):
            name = fam.forward if direction == "forward" else fam.backward
            bufs = _CallBuffers()
            try:
                op = fam.ours(bufs, d, direction, p)
                work = bufs.malloc(max(op.ws, 1) * 2)
                stream = bufs.stream

                def sync():
                    acl.aclrtSynchronizeStream(stream)

                def pair():
                    status, ws, ex = op.get_ws(*op.args)
                    assert status == 0 and ws <= max(op.ws, 1) * 2, acl.aclGetRecentErrMsg()
                    assert op.execute(work if ws else None, ws, ex, stream) == 0, acl.aclGetRecentErrMsg()
                execute_us = host_us(op.enqueue, sync, **n)
                pair_us = host_us(pair, sync, **n)
            finally:
                bufs.close()
            ratios.append((name, execute_us / torch_us, pair_us / torch_us))
            rep.add("host", {"operator": name, "shapes": fam.shapes(p), "execute_us": execute_us, "pair_us": pair_us,
                             "execute_over_torch": execute_us / torch_us, "pair_over_torch": pair_us / torch_us})
    med_e = statistics.median(r[1] for r in ratios)
    med_p = statistics.median(r[2] for r in ratios)
    worst = max(ratios, key=lambda r: r[1])
    rep.line(f"speed: host time vs torch.add ({torch_us:.1f} us) on {dev}: execute median {med_e:.1f}x "
             f"(slowest {worst[0]} {worst[1]:.1f}x), GetWorkspaceSize + execute median {med_p:.1f}x "
             f"(slowest {max(r[2] for r in ratios):.1f}x)")


# ------------------------------------------------------------------------------ memory-bound families
# ladder positions (bench/cpu_gap.LADDER) whose shapes split: CE forward N = 19 and 60, CTC N = 16 and 50
SPLIT_LADDER = (0.5, 0.75, 1.0, 1.25, 1.5)


def splits(kind: str, rep: Report, reps: int) -> None:
    import torch

    from aclnn_gpu.ops.cross_entropy import launch as ce_launch
    from aclnn_gpu.ops.ctc_loss import launch as ctc_launch
    from bench.families import FAMILIES
    dev = "cuda" if kind == "cuda" else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    ms = timer(kind)
    rng = np.random.default_rng(0)
    cases = [(fam, direction) for fam in FAMILIES for direction in ("forward", "backward")
             if (fam.name, direction) in (("CrossEntropy", "forward"), ("CtcLoss", "forward"), ("CtcLoss", "backward"))]
    for fam, direction in cases:
        seen = set()
        for e in SPLIT_LADDER:
            p = fam.params(e) if kind == "cuda" else fam.emulated(e)
            if p in seen:
                continue
            seen.add(p)
            d = fam.data(p, np.dtype(np.float32), rng)
            times = {}
            for label, target in (("split", None), ("one block per row", 0)):
                saved = (ce_launch.SPLIT_TARGET_BLOCKS, ctc_launch.SPLIT_TARGET_BLOCKS)
                if target is not None:   # no row count is below 0: the plan before the split
                    ce_launch.SPLIT_TARGET_BLOCKS = ctc_launch.SPLIT_TARGET_BLOCKS = target
                bufs = common.Buffers()   # new buffers: a new executor, planned under this setting
                try:
                    times[label] = ms(fam.ours(bufs, d, direction, p), reps)
                finally:
                    bufs.close()
                    ce_launch.SPLIT_TARGET_BLOCKS, ctc_launch.SPLIT_TARGET_BLOCKS = saved
            times["torch"] = ms(_synced(fam.torch(torch, d, direction, p, dev), sync), reps)
            name = fam.forward if direction == "forward" else fam.backward
            rep.add("splits", {"operator": name, "shapes": fam.shapes(p), "ms": times})
            rep.line(f"speed: {name} {fam.shapes(p)}: split {times['split']:.3f} ms, one block per row "
                     f"{times['one block per row']:.3f} ms, PyTorch {times['torch']:.3f} ms")


def membound(kind: str, rep: Report, reps: int) -> None:
    from bench.families import FAMILIES
    rng = np.random.default_rng(0)
    for fam in FAMILIES:
        if fam.name not in LARGE:
            continue
        sizes = ([("mid", fam.params(1.0)), ("large", LARGE[fam.name])] if kind == "cuda"
                 else [("mid", fam.emulated(0.5)), ("large", fam.emulated(1.0))])
        for label, p in sizes:
            d = fam.data(p, np.dtype(np.float32), rng)
            for direction in ("forward", "backward"):
                _membound_case(kind, rep, reps, fam, label, p, d, direction)


def _membound_case(kind: str, rep: Report, reps: int, fam, label: str, p: tuple, d: dict, direction: str) -> None:
    import torch
    dev = "cuda" if kind == "cuda" else "cpu"
    ms = timer(kind)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    name = fam.forward if direction == "forward" else fam.backward
    nbytes = float(fam.work(p, direction, np.dtype(np.float32)))
    src = torch.empty(max(1, int(nbytes // 2)), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)
        sync()
    bufs = common.Buffers()
    try:
        t_ours = ms(fam.ours(bufs, d, direction, p), reps)
        t_torch = ms(_synced(fam.torch(torch, d, direction, p, dev), sync), reps)
        t_copy = ms(copy, reps)
    finally:
        bufs.close()
    rep.add("membound", {"operator": name, "size": label, "shapes": fam.shapes(p), "min_bytes": nbytes,
                         "ours_ms": t_ours, "torch_ms": t_torch, "copy_ms": t_copy,
                         "ours_of_copy_ceiling": t_copy / t_ours, "torch_of_copy_ceiling": t_copy / t_torch,
                         "ours_GBps": nbytes / t_ours / 1e6})
    rep.line(f"speed: {name} {label} {fam.shapes(p)} ({nbytes / 1e6:.0f} MB): ours {t_ours:.3f} ms = "
             f"{100 * t_copy / t_ours:.0f}% of the copy ceiling ({t_copy:.3f} ms); PyTorch "
             f"{100 * t_copy / t_torch:.0f}%")


def _synced(fn, sync):
    def run():
        fn()
        sync()
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "emulated"), default="cuda")
    ap.add_argument("--json", metavar="PATH", help="write the rows here (rewritten after each)")
    ap.add_argument("--summary", metavar="PATH", help="append the short lines to this file at the end")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    ap.add_argument("--reps", type=int, default=0, help="timed runs per figure (default 7 on cuda, 2 elsewhere)")
    args = ap.parse_args(argv)
    kind = common.setup_device(args.device)
    reps = args.reps or (7 if kind == "cuda" else 2)
    rep = Report(args.json, kind)
    failed = []
    try:
        for section in [s for s in args.sections.split(",") if s]:
            t0 = time.perf_counter()
            try:
                if section == "convtbc_launches":
                    convtbc_launches(kind, rep)
                elif section == "convtbc":
                    convtbc(kind, rep, reps)
                elif section == "host":
                    host(kind, rep)
                elif section == "splits":
                    splits(kind, rep, reps)
                elif section == "membound":
                    membound(kind, rep, reps)
                else:
                    raise SystemExit(f"unknown section {section!r} (of {SECTIONS})")
            except Exception as e:   # one section's failure leaves the others their time
                traceback.print_exc()
                failed.append(section)
                rep.line(f"speed: section {section} FAILED: {type(e).__name__}: {e}")
            rep.data.setdefault("seconds", {})[section] = time.perf_counter() - t0
            rep.write()
    finally:
        if args.summary:
            with open(args.summary, "a") as f:
                f.writelines(line + "\n" for line in rep.data["summary"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
