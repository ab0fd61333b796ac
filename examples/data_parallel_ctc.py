#!/usr/bin/env python3
"""Data-parallel training with HCCL collectives: R rank processes each train the CTC + ConvTbc model
of train_ctc.py on 1/R of every batch (forward and backward through aclnn_gpu.torch: aclnnConvTbc,
aclnnCtcLoss and their backwards), all-reduce the gradients with HcclAllReduce, and take the same
SGD step; at the end their parameters must equal those of one process trained on the full batches
(within fp32 tolerance).

By default the ranks are `spawn`ed processes of this one host (never fork a process that holds a
device); the parent makes the root info (HcclGetRootInfo: it hosts the bootstrap store on the
loopback address) and hands it to them, as an MPI launcher would.

With --rank, this process is that one rank, wherever it runs (one command per rank, on any host):
it meets the others through a root info file (--root-info: rank 0 writes it with the store on
HCCL_IF_IP, the others read it from a shared path) or CANN's rank table (--rank-table). At the end
rank 0 gathers every rank's parameters (HcclAllGather), checks they are equal, and compares them
with one process trained on the full batches. docs/HCCL.md runs it over two network namespaces.

    python examples/data_parallel_ctc.py [--ranks R] [--steps S]
    HCCL_IF_IP=<this host> python examples/data_parallel_ctc.py --ranks R --rank r --root-info PATH
    python examples/data_parallel_ctc.py --ranks R --rank r --rank-table rank_table.json
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_ctc.py: the model, beside this file
import train_ctc  # noqa: E402
from side_by_side import acl_torch  # noqa: E402

import aclnn_gpu as acl  # noqa: E402

LR = 0.1
SEED = 0
RANK_TIMEOUT_S = 120   # the parent gives up on a rank after this long (the ranks' own waits are HCCL_EXEC_TIMEOUT)


def check(ret: int, what: str) -> None:
    if ret != 0:
        raise RuntimeError(f"{what} failed: {int(ret)}: {acl.aclGetRecentErrMsg()}")


class GradientAllReduce:
    """Sums a list of gradients over the ranks: one flat device buffer, one HcclAllReduce."""

    def __init__(self, comm, numel: int):
        self.comm, self.numel = comm, numel
        ret, self.stream = acl.aclrtCreateStream()
        check(ret, "aclrtCreateStream")
        ret, self.buffer = acl.aclrtMalloc(numel * 4, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        check(ret, "aclrtMalloc")

    def __call__(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        flat = torch.cat([g.reshape(-1) for g in grads]).contiguous().numpy()
        nbytes = flat.nbytes
        check(acl.aclrtMemcpy(self.buffer, nbytes, flat, nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy")
        check(acl.HcclAllReduce(self.buffer, self.buffer, self.numel, acl.HCCL_DATA_TYPE_FP32, acl.HCCL_REDUCE_SUM,
                                self.comm, self.stream), "HcclAllReduce")
        check(acl.aclrtSynchronizeStream(self.stream), "aclrtSynchronizeStream")
        check(acl.aclrtMemcpy(flat, nbytes, self.buffer, nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy")
        summed = torch.from_numpy(flat)
        return list(summed.split([g.numel() for g in grads]))

    def close(self) -> None:
        acl.aclrtFree(self.buffer)
        acl.aclrtDestroyStream(self.stream)


def train(steps: int, rank: int = 0, world: int = 1, comm=None) -> dict[str, np.ndarray]:
    """SGD on the CTC model; rank `rank` of `world` takes its slice of every batch (world 1: all)."""
    rng = np.random.default_rng(SEED)
    prototypes = rng.standard_normal((train_ctc.C, train_ctc.F)).astype(np.float32) * 1.5
    params = {k: v.clone().requires_grad_(True) for k, v in train_ctc.init_params(SEED).items()}
    share = slice(rank * train_ctc.N // world, (rank + 1) * train_ctc.N // world)
    reduce = GradientAllReduce(comm, sum(p.numel() for p in params.values())) if comm is not None else None

    def ctc_loss(lp, t, il, tl):
        return acl_torch.ctc_loss(lp, t, il, tl, blank=0, reduction="mean")

    for _ in range(steps):
        x, targets, il, tl = train_ctc.make_batch(rng, prototypes)   # every rank draws the same batch
        loss = train_ctc.loss_fn(params, (x[:, share], targets[share], il[share], tl[share]),
                                 acl_torch.conv_tbc, ctc_loss)
        grads = torch.autograd.grad(loss, list(params.values()))
        if reduce is not None:   # the mean over the full batch: the mean of the ranks' means
            grads = [g / world for g in reduce(grads)]
        with torch.no_grad():
            for p, g in zip(params.values(), grads):
                p -= LR * g.reshape(p.shape)
    if reduce is not None:
        reduce.close()
    return {k: v.detach().numpy().copy() for k, v in params.items()}


def rank_main(rank: int, world: int, root_info: bytes, steps: int, results) -> None:
    """One rank process: join the communicator, train on its share, report its parameters."""
    try:
        check(acl.aclInit(None), "aclInit")
        check(acl.aclrtSetDevice(0), "aclrtSetDevice")
        ret, comm = acl.HcclCommInitRootInfo(world, root_info, rank)
        check(ret, "HcclCommInitRootInfo")
        params = train(steps, rank, world, comm)
        check(acl.HcclCommDestroy(comm), "HcclCommDestroy")
        results.put((rank, params, None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails clearly
        results.put((rank, None, f"{type(e).__name__}: {e}"))


def run_ranks(world: int, steps: int) -> list[dict[str, np.ndarray]]:
    """Spawn `world` rank processes; their final parameters, in rank order (bounded in time)."""
    ret, root_info = acl.HcclGetRootInfo()
    check(ret, "HcclGetRootInfo")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, world, root_info, steps, results), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = {}
        for _ in range(world):
            rank, params, error = results.get(timeout=RANK_TIMEOUT_S)
            if error is not None:
                raise RuntimeError(f"rank {rank}: {error}")
            got[rank] = params
        return [got[r] for r in range(world)]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def meet(rank: int, world: int, root_info_path: str | None, rank_table: str | None):
    """This rank's communicator: from CANN's rank table, or from a root info file (rank 0 writes it,
    the others wait for it, within HCCL_CONNECT_TIMEOUT)."""
    if rank_table is not None:
        ret, comm = acl.HcclCommInitClusterInfo(rank_table, rank)
        check(ret, "HcclCommInitClusterInfo")
        return comm
    path = Path(root_info_path)
    if rank == 0:
        ret, root_info = acl.HcclGetRootInfo()
        check(ret, "HcclGetRootInfo")
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(root_info)
        os.replace(partial, path)   # the others never read half a file
    deadline = time.monotonic() + float(os.environ.get("HCCL_CONNECT_TIMEOUT") or 120)
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank}: no root info at {path} within HCCL_CONNECT_TIMEOUT")
        time.sleep(0.05)
    ret, comm = acl.HcclCommInitRootInfo(world, path.read_bytes(), rank)
    check(ret, "HcclCommInitRootInfo")
    return comm


def one_rank(rank: int, world: int, steps: int, rtol: float, root_info_path: str | None,
             rank_table: str | None) -> int:
    """This process as rank `rank`: train on its share; rank 0 checks every rank's parameters."""
    check(acl.aclrtSetDevice(0), "aclrtSetDevice")
    comm = meet(rank, world, root_info_path, rank_table)
    params = train(steps, rank, world, comm)
    flat = np.concatenate([params[k].reshape(-1) for k in sorted(params)]).astype(np.float32)
    ret, stream = acl.aclrtCreateStream()
    check(ret, "aclrtCreateStream")
    buffers = []
    for nbytes in (flat.nbytes, flat.nbytes * world):
        ret, ptr = acl.aclrtMalloc(nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        check(ret, "aclrtMalloc")
        buffers.append(ptr)
    mine, everyone = buffers
    check(acl.aclrtMemcpy(mine, flat.nbytes, flat, flat.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy")
    check(acl.HcclAllGather(mine, everyone, flat.size, acl.HCCL_DATA_TYPE_FP32, comm, stream), "HcclAllGather")
    check(acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
    gathered = np.empty(flat.size * world, np.float32)
    check(acl.aclrtMemcpy(gathered, gathered.nbytes, everyone, gathered.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST),
          "aclrtMemcpy")
    check(acl.HcclCommDestroy(comm), "HcclCommDestroy")
    for ptr in buffers:
        acl.aclrtFree(ptr)
    acl.aclrtDestroyStream(stream)
    if rank != 0:
        print(f"rank {rank} of {world}: trained {steps} steps on {train_ctc.N // world} samples per batch")
        return 0
    spread = float(np.max(np.abs(gathered.reshape(world, -1) - flat)))
    single = train(steps)
    error = max_difference(params, single)
    print(f"{world} ranks x {train_ctc.N // world} samples, {steps} SGD steps on the {acl.current_device_kind()} "
          f"device, rank 0 of {world}: ranks agree to {spread:.1e}, max relative difference to one process on the "
          f"full batch {error:.2e} (rtol {rtol:g})")
    return 0 if spread == 0 and error <= rtol else 1


def max_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]) / (1e-3 + np.abs(b[k])))) for k in a)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, help="rank processes (must divide the batch of %d)"
                        % train_ctc.N)
    parser.add_argument("--steps", type=int, default=int(os.environ.get("ACLNN_EXAMPLE_STEPS", 5)),
                        help="SGD steps (default 5, or ACLNN_EXAMPLE_STEPS)")
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="relative tolerance of the final parameters against one process on the full batch")
    parser.add_argument("--rank", type=int, default=None,
                        help="run only this rank in this process (one command per rank, on any host)")
    parser.add_argument("--root-info", default=None,
                        help="with --rank: the root info file rank 0 writes and the other ranks read")
    parser.add_argument("--rank-table", default=None, help="with --rank: CANN's rank-table file instead")
    args = parser.parse_args(argv)
    if args.ranks < 1 or train_ctc.N % args.ranks:
        parser.error(f"--ranks must divide the batch of {train_ctc.N}")
    if args.rank is not None:
        if not 0 <= args.rank < args.ranks:
            parser.error("--rank must be in [0, --ranks)")
        if (args.root_info is None) == (args.rank_table is None):
            parser.error("--rank needs one of --root-info and --rank-table")
        return one_rank(args.rank, args.ranks, args.steps, args.rtol, args.root_info, args.rank_table)
    ranks = run_ranks(args.ranks, args.steps)
    single = train(args.steps)
    spread = max(max_difference(p, ranks[0]) for p in ranks)
    error = max_difference(ranks[0], single)
    print(f"{args.ranks} ranks x {train_ctc.N // args.ranks} samples, {args.steps} SGD steps on the "
          f"{acl.current_device_kind()} device: ranks agree to {spread:.1e}, "
          f"max relative difference to one process on the full batch {error:.2e} (rtol {args.rtol:g})")
    return 0 if spread == 0 and error <= args.rtol else 1


if __name__ == "__main__":
    sys.exit(main())
