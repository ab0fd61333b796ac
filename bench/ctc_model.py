"""CTC forward + backward on an H100, MODELLED (no GPU ran it): ours profiled on the emulated device
beside PyTorch CUDA's launch sequence read from LossCTC.cu (bench/torch_launches.py), both priced by
the profiler's bytes-only roofline and by its latency-aware model (aclnn_gpu/profile/latency.py).

    python bench/ctc_model.py [T N C L] [--profile-n 2]

Ours is profiled at N = --profile-n (the emulator is slow) and scaled to N: every kernel's bytes are
linear in N, its recursion's step latency is not (one block per sample, N <= the SM count). Prints
the per-kernel figures, the totals and ratios, their sensitivity to the DRAM latency constant, and
the cluster-split estimate (bench/README.md discusses it).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ours_launches(dims: dict, profile_n: int) -> list[tuple[str, float]]:
    """(kernel, DRAM bytes of the L2 model at dims' N) for forward then backward."""
    os.environ["ACLNN_GPU_DEVICE"] = "emulated"
    os.environ["ACLNN_GPU_EMU_PROFILE"] = "1"
    from aclnn_gpu.profile import profile_call
    scale = dims["N"] / profile_n
    out = []
    for op in ("CtcLoss", "CtcLossBackward"):
        p = profile_call(op, dict(dims, N=profile_n), "fp32")
        out += [(x.kernel, x.l2_dram_bytes * scale) for x in p.launches]
    return out


def price(kernels: list[tuple[str, float]], dims: dict) -> tuple[float, float]:
    """(bytes-only, latency-aware) seconds of launches given as (name, bytes)."""
    from aclnn_gpu.profile import HBM_BYTES_PER_S, LAUNCH_S, latency
    roof = sum(b / HBM_BYTES_PER_S + LAUNCH_S for _, b in kernels)
    lat = sum(latency.kernel_seconds(b, latency.recursion(n, dims), HBM_BYTES_PER_S, LAUNCH_S) for n, b in kernels)
    return roof, lat


def torch_launches_of(dims: dict) -> list[tuple[str, float]]:
    from bench import torch_launches
    return [(n, b(dims, 4)) for op in ("CtcLoss", "CtcLossBackward") for n, b, _ in torch_launches.launches(op, dims)]


def cluster_split(L: int, T: int, k: int, dsmem_cycles: float, cluster_barrier_cycles: float) -> tuple[float, float]:
    """(one block, a k-CTA cluster) seconds of our backward recursion at target length L in the model:
    the cluster's CTAs hold S/k states each (fewer states per thread: less issue per SM), and every
    step adds a DSMEM round trip for the boundary values and a cluster barrier instead of __syncthreads."""
    from aclnn_gpu.ops.ctc_loss import launch
    from aclnn_gpu.profile import latency
    d = {"T": T, "N": 1, "C": 1, "L": L}
    geo = launch.recursion_geometry(L, 4)
    name = "aclg::ctc_beta_long<float, long long>" if geo.long else f"aclg::ctc_beta<float, long long, {geo.P}>"
    one = latency.recursion(name, d)
    per_cta = -(-(2 * L + 1) // k)
    threads = min(launch.MAX_THREADS, -(-per_cta // 32) * 32)
    per = -(-per_cta // threads)
    ahead = launch.RING.get(per, 1)                  # a register kernel: the ring where one state per thread
    split = latency.Recursion(T, (latency.Load("log_probs", "dram", ahead), latency.Load("log_alpha", "dram", ahead)),
                              barriers=0, onchip=2 * latency.L1_CYCLES + dsmem_cycles + cluster_barrier_cycles,
                              alu=latency.LSE3_CHAIN + 40 * (per - 1), warps=math.ceil(threads / 32),
                              instructions=30 + 55 * per)
    return one.seconds, split.seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dims", nargs="*", type=int, help="T N C L (default 1000 32 5000 100)")
    ap.add_argument("--profile-n", type=int, default=2)
    a = ap.parse_args(argv)
    T, N, C, L = a.dims or (1000, 32, 5000, 100)
    dims = {"T": T, "N": N, "C": C, "L": L, "fptargets": 0}
    from aclnn_gpu.profile import HBM_BYTES_PER_S, LAUNCH_S, latency
    ours, theirs = ours_launches(dims, a.profile_n), torch_launches_of(dims)
    print(f"CTC forward + backward, T={T} N={N} C={C} L={L} fp32: H100 MODEL (no GPU ran this)\n")
    print("| side | launch | DRAM bytes | bytes-only (us) | latency-aware (us) | step (cycles) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for side, ks in (("ours", ours), ("PyTorch (est.)", theirs)):
        for n, b in ks:
            rec = latency.recursion(n, dims)
            print(f"| {side} | {n} | {b / 1e6:.1f} MB | {(b / HBM_BYTES_PER_S + LAUNCH_S) * 1e6:.1f} | "
                  f"{latency.kernel_seconds(b, rec, HBM_BYTES_PER_S, LAUNCH_S) * 1e6:.1f} | "
                  f"{rec.step_cycles() if rec else ''} |")
    (o_roof, o_lat), (t_roof, t_lat) = price(ours, dims), price(theirs, dims)
    print(f"\nours: {len(ours)} launches, {sum(b for _, b in ours) / 1e9:.3f} GB, bytes-only {o_roof * 1e6:.0f} us, "
          f"latency-aware {o_lat * 1e6:.0f} us")
    print(f"PyTorch (est.): {len(theirs)} launches, {sum(b for _, b in theirs) / 1e9:.3f} GB, bytes-only "
          f"{t_roof * 1e6:.0f} us, latency-aware {t_lat * 1e6:.0f} us")
    print(f"PyTorch / ours: bytes-only {t_roof / o_roof:.2f}x, latency-aware {t_lat / o_lat:.2f}x")
    sens = {c: (latency.sensitivity(lambda: price(ours, dims)[1], (c,))[c],
                latency.sensitivity(lambda: price(theirs, dims)[1], (c,))[c]) for c in (400.0, 600.0, 1000.0)}
    print("DRAM latency sensitivity (latency-aware): " + "; ".join(
        f"{c:.0f} cycles: ours {o * 1e6:.0f} us, PyTorch {t * 1e6:.0f} us, {t / o:.2f}x" for c, (o, t) in sens.items()))
    print("\ncluster split of the backward recursion (one sample; DSMEM round trip + cluster barrier per step):")
    print("| L | states | one block (us) | 4-CTA cluster, 200+200 cycles (us) "
          "| 4-CTA cluster, exchange and barrier free: a bound (us) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for Ls in (L, 1300, 2047, 5000):
        one, split = cluster_split(Ls, T, 4, 200.0, 200.0)
        _, free = cluster_split(Ls, T, 4, 0.0, 0.0)
        print(f"| {Ls} | {2 * Ls + 1} | {one * 1e6:.0f} | {split * 1e6:.0f} | {free * 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
