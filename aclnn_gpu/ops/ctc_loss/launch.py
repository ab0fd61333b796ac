"""GPU plan of CTC loss (forward `aclnnCtcLoss`, backward `aclnnCtcLossBackward`) over a
KernelContext. Inputs and outputs are contiguous device buffers (the glue copies strided views).

    forward_workspace_bytes(N, max_l, math_size, T=T) / backward_workspace_bytes(T, N, max_l, math_size) -> int
    launch_backward(ctx, *, grad_out_ptr, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr,
                    log_alpha_ptr, out_ptr, workspace_ptr, T, N, C, X, dtype, target_dtype,
                    targets_2d_stride, targets_numel, input_lengths, target_lengths, blank,
                    zero_infinity)
    launch_forward(ctx, *, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr, log_alpha_ptr,
                   workspace_ptr, T, N, C, dtype, target_dtype, targets_2d_stride, targets_numel,
                   input_lengths, target_lengths, blank, zero_infinity, X=None)
        # writes log_alpha (N, T, X), X >= 2*maxL+1 (None: 2*maxL+1); columns past 2*maxL: -inf

dtype: "float32" | "float64" | "float16" | "bfloat16" (numpy dtype names accepted);
target_dtype: int32 | int64 (the glue casts BOOL/FLOAT/FLOAT16 targets to int64 first).
targets_2d_stride: S for 2-D padded targets (N, S), 0 for 1-D concatenated targets.
math_size: 8 for float64, else 4 (the kernels compute in float32 for the 16-bit types).

Workspace (`Layout`), each range on a 256-byte boundary, W = occ_width(maxL) (2*maxL+1 rounded up
to 32 bytes):
    tiling    8 * 3 * N           int64 [input_length, target_length, target_offset] per sample
    sync      4 * (2 + units)     split recursions only (recursion_split: J > 1): int32 [ticket, abort
                                  word, step count per unit], units = N * J (2 * N * J for the 16-bit
                                  backward), zeroed in the same upload as the tiling table
    tables    4 * (2N + 3N*maxL)  backward: per-sample status, blank's first occurrence, labels and
                                  their occurrence chains (kernels: ctc::Tables)
    occ       T * N * W * math    backward: occupancy exp(alpha + beta - lp + nll) of every state
    slots     min(N, LONG_SLOTS) * long_slot_bytes   long-target path only (alpha/beta of two steps)
    nll       4 * N               backward of float16 / bfloat16 only: the fp32 losses of its own alpha
    alpha     T * N * W * 4       the same, register path only: its fp32 alpha (occ then holds beta)
    xchg      units * T * 2 * math   their boundary values: two states per (unit, step), at most
                                  SPLIT_XCHG_MAX per recursion where the launcher chooses the split

Launches. Backward of float16 / bfloat16 storage (`HALF`): its own alpha recursion in fp32 beside
the beta recursion (register path: one launch of `ctc_recursions_math`, alpha and the losses into
the alpha and nll ranges in one half of the grid, beta into the occ range in the other; `ctc_grad`
forms the occupancies from both; long path: `ctc_alpha_math_long` into the occ range, then
`ctc_beta_math_long` over it): the given log_alpha is not read, and the given nll only decides
zero_infinity, so nothing rounded to 16 bits enters the gradient. Other types: the beta recursion
(one block per sample, grid-stride over samples: it writes the occupancies and the tables) then
`ctc_grad<T>` (one block per row (t, b), grid-stride: the row's exp(lp) * g with 16-byte vectors
when C is a multiple of 16/sizeof(T) and both pointers are 16-byte aligned, then its blank and label
columns merged from the occupancy row; a grid of one full wave at its occupancy, kernels/occupancy.py);
forward: the alpha recursion. Register path
(`ctc_alpha`, `ctc_beta`): threads = min(512, roundup32(2*maxL+1)) and per = ceil((2*maxL+1) /
threads) <= 8 (fp64 math: 5) states per thread, dynamic shared memory = shared_bytes(maxL, math
size), i.e. 2*maxL+1 <= 4096 states for fp32 math (maxL <= 2047), <= 2560 for fp64 (maxL <= 1279).
Each is instantiated for P (the bound on per, a template argument): P = 1 (2*maxL+1 <= 512) loads
its log-probs (and alpha) RING[1] = 8 steps ahead into a register ring, P = K_PER one step ahead.
Beyond, the long path (`ctc_alpha_long`, `ctc_beta_long`, 512 threads, states strided over the
block in chunks of LONG_CHUNK whose loads are issued together, recursion state in the workspace
slots): any maxL, bit-identical results. Few samples where the register path would run
(recursion_split: fewer than SPLIT_TARGET_BLOCKS samples and T * N * (2*maxL+1) >= SPLIT_MIN_WORK):
the split path (`ctc_alpha_split`, `ctc_beta_split`, `ctc_recursions_math_split`), one 32-thread
block per (sample, chunk of cs <= 32 states), N * J blocks, each running the unit of the ticket it
takes when it starts and waiting on the step counts of the unit before it, which a block that started
earlier holds (kernels: "split recursions"): no residency is assumed. A wait longer than
SPLIT_TIMEOUT_NS marks the samples failed (NaN loss, NaN gradient) instead of trapping. Taken where
split_resident says every block is resident at once (a performance choice: blocks that wait on a
block not yet running only idle); bit-identical to the register path.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...base import dtypes
from ...kernels import manifest
from ...kernels.context import KernelFile, ptr
from ...kernels.occupancy import blocks_per_sm, context_arch, wave_grid

FILE = "ctc_loss.cu"
REGISTERS = Path(__file__).with_name("registers.json")   # its kernels' register counts (kernels/occupancy.py)
K_PER = {4: 8, 8: 5}   # max states per thread by math size (kernels: PerOf<M>)
RING = {1: 8}          # prefetch distance (steps) of the register recursions by P, else 1 (kernels: RingOf<P>)
K_MAX_WARPS = 16
MAX_THREADS = 512      # recursion blocks (kernels: __launch_bounds__(512), ctc::kLongThreads)
SMEM_LIMIT = 48 * 1024
GRAD_BLOCK = 256       # most threads of a ctc_grad block (kernels: __launch_bounds__(256))
LONG_SLOTS = 256       # most blocks (and workspace slots) of the long-target recursions
LONG_CHUNK = 4         # states a long-path thread loads together before computing them (kernels: kLongChunk)
ALIGN = 256
# the split recursions (recursion_split; kernels: the section "split recursions")
SPLIT_THREADS = 32         # one warp per (sample, chunk) block, one state per lane (kernels: kSplitThreads)
SPLIT_TARGET_BLOCKS = 256  # split when there are fewer samples; aim at about this many blocks
SPLIT_MIN_STATES = 8       # states of a chunk, at least
SPLIT_MIN_WORK = 1 << 16   # T * N * (2*maxL+1) below this: not split (the register path's one block per sample)
SPLIT_BATCH = 32           # boundary steps a split block reads per wait (kernels: kSplitBatch)
SPLIT_PUBLISH = 4          # steps per published count (kernels: kSplitPublish)
SYNC_WORDS = 2             # int32 ticket and abort word before the counts (kernels: kSyncWords)
SPLIT_TIMEOUT_NS = 5_000_000_000   # longest wait for a neighbour's count before the launch aborts
SPLIT_XCHG_MAX = 4 << 20   # boundary-value bytes of one recursion beyond which the launcher does not split

_CTYPE = dtypes.cuda_types("float32", "float64", "float16", "bfloat16")
_ITYPE = dtypes.cuda_types("int32", "int64")
_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
# Storage types whose backward recomputes alpha and the loss in fp32 (ctc_*_math) instead of reading
# the log_alpha and negLogLikelihood it is given, rounded to 16 bits (docs/API.md §7).
HALF = ("float16", "bfloat16")
_HALF_CTYPES = [t for n, t in _CTYPE.items() if n in HALF]


def all_name_expressions() -> list[str]:
    """Every instantiation the launchers below can launch (registered with kernels/manifest.py)."""
    return ([f"aclg::ctc_grad<{t}>" for t in _CTYPE.values()]
            + [f"aclg::ctc_{k}<{t}, {i}, {p}>" for k in ("beta", "alpha") for n, t in _CTYPE.items()
               for i in _ITYPE.values() for p in (1, K_PER[math_size_of(n)])]
            + [f"aclg::ctc_{k}<{t}, {i}>" for k in ("alpha_long", "beta_long")
               for t in _CTYPE.values() for i in _ITYPE.values()]
            + [f"aclg::ctc_recursions_math<{t}, {i}, {p}>" for t in _HALF_CTYPES for i in _ITYPE.values()
               for p in (1, K_PER[4])]
            + [f"aclg::ctc_{k}_math_long<{t}, {i}>" for k in ("alpha", "beta") for t in _HALF_CTYPES
               for i in _ITYPE.values()]
            + [f"aclg::ctc_{k}_split<{t}, {i}>" for k in ("alpha", "beta") for t in _CTYPE.values()
               for i in _ITYPE.values()]
            + [f"aclg::ctc_recursions_math_split<{t}, {i}>" for t in _HALF_CTYPES for i in _ITYPE.values()]
            + ["aclg::ctc_cast_targets"])


def _dname(dtype) -> str:
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in _CTYPE and name not in _ITYPE:
        raise ValueError(f"unsupported dtype {dtype}")
    return name


def math_size_of(dtype) -> int:
    return 8 if _dname(dtype) == "float64" else 4


def _round(n: int) -> int:
    return -(-int(n) // ALIGN) * ALIGN


def shared_bytes(max_l: int, math_size: int) -> int:
    """Dynamic shared memory of ctc_alpha / ctc_beta (kernels: ctc::Smem)."""
    return (2 * (K_MAX_WARPS + 1) * 3 + 2) * math_size + 4 * (max_l + 4)


class Geometry(NamedTuple):
    threads: int
    per: int      # states per thread (register path)
    P: int        # the instantiation's compile-time bound on per: 1 or K_PER (register path)
    smem: int     # dynamic shared bytes (register path)
    long: bool    # the long-target path (ctc_*_long): recursion state in workspace slots


def recursion_geometry(max_l: int, math_size: int, long_path: bool | None = None) -> Geometry:
    """Block geometry of the alpha / beta recursions: the register path while its states fit
    (per <= K_PER, shared memory < 48 KiB), else the long path. long_path forces a path (tests)."""
    S = 2 * max_l + 1
    threads = min(MAX_THREADS, (S + 31) // 32 * 32)
    per = -(-S // threads)
    smem = shared_bytes(max_l, math_size)
    if long_path is None:
        long_path = per > K_PER[math_size] or smem > SMEM_LIMIT
    if long_path:
        return Geometry(MAX_THREADS, 0, 0, 0, True)
    return Geometry(threads, per, 1 if per == 1 else K_PER[math_size], smem, False)


def prefetch_distance(geo: Geometry) -> int:
    """Steps ahead the recursion's loads are issued (kernels: RingOf<P>; the long path: none)."""
    return 0 if geo.long else RING.get(geo.P, 1)


def occ_width(max_l: int, math_size: int) -> int:
    """Row stride (states) of the occupancy buffer: 2*maxL+1 rounded up to 32 bytes, every row on a
    sector (a kernel argument)."""
    per_sector = 32 // math_size
    return -(-(2 * max_l + 1) // per_sector) * per_sector


def long_slot_bytes(max_l: int, math_size: int) -> int:
    """One block's workspace slot on the long path (kernels: ctc::LongSlot)."""
    return _round(2 * (2 * max_l + 1) * math_size + 4 * max_l)


def recursion_split(T: int, N: int, max_l: int, long_path: bool | None = None,
                    split: int | None = None, math_size: int = 4) -> tuple[int, int]:
    """(J, cs): the recursions of few samples split each sample's S = 2*maxL+1 states into J chunks of
    cs states (2 <= cs <= SPLIT_THREADS), one block per (sample, chunk), so that N * J blocks reach
    about SPLIT_TARGET_BLOCKS; (1, 0): one block per sample. A function of the shape only (it sizes the
    workspace); the launcher still takes the register path where the N * J blocks (twice that for the
    16-bit backward) cannot all be resident (split_resident). Only where the register path would run
    (the long path keeps its own), and only where the boundary values of one recursion (N * J * T * 2
    * math_size bytes) stay within SPLIT_XCHG_MAX. split: force cs (tests; no bound), 0: never split."""
    S = 2 * max_l + 1
    if split is not None:
        if not split or long_path:
            return 1, 0
        cs = max(2, min(SPLIT_THREADS, int(split)))
        return max(1, -(-S // cs)), cs
    if (long_path is not None or N >= SPLIT_TARGET_BLOCKS or T * N * S < SPLIT_MIN_WORK
            or recursion_geometry(max_l, math_size).long):
        return 1, 0
    J = max(min(-(-S // SPLIT_MIN_STATES), -(-SPLIT_TARGET_BLOCKS // N)), -(-S // SPLIT_THREADS))
    cs = max(2, -(-S // J))
    J = -(-S // cs)
    return (J, cs) if J >= 2 and N * J * T * 2 * math_size <= SPLIT_XCHG_MAX else (1, 0)


class Layout(NamedTuple):
    """Byte offsets of the workspace ranges (module docstring); size is the total."""
    sync: int     # the split recursions' ticket, abort word and step counts (right after the tiling table)
    tables: int
    occ: int
    slots: int
    nll: int      # the fp32 losses of the backward's own alpha recursion (16-bit storage; else size)
    alpha: int    # its fp32 alpha beside beta (16-bit storage, register path; else size)
    xchg: int     # their boundary values ([unit][T][2] in math precision; else size)
    size: int


def layout(T: int, N: int, max_l: int, math_size: int, backward: bool, long_path: bool | None = None,
           recompute: bool = False, split: int | None = None) -> Layout:
    if N == 0:
        return Layout(0, 0, 0, 0, 0, 0, 0, 0)
    recompute = backward and recompute
    J, _ = recursion_split(T, N, max_l, long_path, split, math_size)
    units = N * J * (2 if recompute else 1) if J > 1 else 0
    sync = _round(8 * 3 * N)
    tables = sync + (_round(4 * (SYNC_WORDS + units)) if units else 0)
    occ_bytes = _round(T * N * occ_width(max_l, math_size) * math_size) if backward else 0
    occ = tables + (_round(4 * (2 * N + 3 * N * max_l)) if backward else 0)
    slots = occ + occ_bytes
    nll = slots
    long = recursion_geometry(max_l, math_size, long_path).long
    if long:
        nll += min(N, LONG_SLOTS) * long_slot_bytes(max_l, math_size)
    alpha = nll + (_round(N * math_size) if recompute else 0)
    xchg = alpha + (occ_bytes if recompute and not long else 0)
    size = xchg + _round(units * T * 2 * math_size)
    return Layout(sync, tables, occ, slots, nll, alpha, xchg, size)


def forward_workspace_bytes(N: int, max_l: int = 0, math_size: int = 4, long_path: bool | None = None,
                            T: int = 0, split: int | None = None) -> int:
    """T: the time steps (the split recursions keep a boundary value per step; 0: never split)."""
    return layout(T, N, max_l, math_size, False, long_path, split=split).size


def backward_workspace_bytes(T: int, N: int, max_l: int = 0, math_size: int = 4,
                             long_path: bool | None = None, recompute: bool = False, split: int | None = None) -> int:
    """recompute: 16-bit storage (`HALF`), whose backward keeps its own fp32 losses in the workspace."""
    return layout(T, N, max_l, math_size, True, long_path, recompute, split).size


def tiling(input_lengths, target_lengths, targets_2d_stride: int) -> np.ndarray:
    il = np.asarray(input_lengths, dtype=np.int64).reshape(-1)
    tl = np.asarray(target_lengths, dtype=np.int64).reshape(-1)
    if targets_2d_stride:
        off = np.arange(il.shape[0], dtype=np.int64) * targets_2d_stride
    else:
        off = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64) if tl.size else tl
    return np.ascontiguousarray(np.stack([il, tl, off], axis=1).reshape(-1))


def _max_l(target_lengths) -> int:
    tl = np.asarray(target_lengths, dtype=np.int64)
    return int(tl.max()) if tl.size else 0


def split_sync(units: int) -> np.ndarray:
    """The split recursions' sync words at the start of a launch: ticket 0, abort word 0, every count 0."""
    return np.zeros(SYNC_WORDS + units, np.int32)


def _upload_tables(ctx, workspace_ptr: int, lay: Layout, input_lengths, target_lengths, targets_2d_stride,
                   units: int) -> None:
    """One upload: the tiling table and, for a split launch (units > 0), the sync words after it."""
    tab = tiling(input_lengths, target_lengths, targets_2d_stride)
    if units:
        buf = np.zeros(lay.sync + 4 * (SYNC_WORDS + units), np.uint8)
        buf[:tab.nbytes] = tab.view(np.uint8)
        buf[lay.sync:] = split_sync(units).view(np.uint8)
        tab = buf
    ctx.upload(workspace_ptr, tab)


def split_shared_bytes(max_l: int) -> int:
    """Dynamic shared memory of the split recursions: the sample's labels (kernels: int lab[max_l])."""
    return 4 * max(1, max_l)


def split_resident(ctx, kernel: str, units: int, max_l: int) -> bool:
    """Whether `units` blocks of the split recursion `kernel` ("aclg::ctc_alpha_split<T, I>") can all
    be resident at once on ctx's device (kernels/occupancy.py): a block only waits for the one before
    it, and never for one that is not running."""
    per_sm = blocks_per_sm(context_arch(ctx), FILE, kernel, SPLIT_THREADS, split_shared_bytes(max_l))
    return units <= int(ctx.sm_count) * per_sm


def _split_of(ctx, kernel: str, geo: Geometry, T: int, N: int, max_l: int, long_path, split, recursions: int,
              math_size: int) -> tuple[int, int]:
    """(J, cs) of the launch, (1, 0) for the one-block-per-sample paths (recursion_split, register path
    only, and only where every block is resident: a performance choice, the kernels need no residency)."""
    J, cs = recursion_split(T, N, max_l, long_path, split, math_size)
    if J < 2 or geo.long or not split_resident(ctx, kernel, recursions * N * J, max_l):
        return 1, 0
    return J, cs


def _recursion(ctx, kernel: str, geo: Geometry, N: int, args: tuple, tail: tuple, slots_ptr: int, max_l: int,
               msize: int, split: tuple[int, int] = (1, 0), split_ptrs: tuple[int, int] = (0, 0)) -> None:
    """Launches the alpha or beta recursion `kernel` ("aclg::ctc_beta<T, I>") on the split, the
    register or the long path; `tail` ends every argument list (zero_inf), then the path's own (the
    split (J, cs), its sync / xchg pointers and the timeout, per, or the slots)."""
    J, cs = split
    if J > 1:
        ctx.launch(FILE, kernel.replace("<", "_split<", 1), (N * J,), (SPLIT_THREADS,),
                   args + tail + (np.int64(J), np.int64(cs), ptr(split_ptrs[0]), ptr(split_ptrs[1]),
                                  np.int64(SPLIT_TIMEOUT_NS)),
                   shared_mem=split_shared_bytes(max_l))
    elif geo.long:
        ctx.launch(FILE, kernel.replace("<", "_long<", 1), (min(N, LONG_SLOTS),), (geo.threads,),
                   args + tail + (ptr(slots_ptr), np.int64(long_slot_bytes(max_l, msize))))
    else:
        ctx.launch(FILE, f"{kernel[:-1]}, {geo.P}>", (max(1, min(N, 32 * ctx.sm_count)),), (geo.threads,),
                   args + tail + (np.int32(geo.per),), shared_mem=geo.smem)


def _recursions_of_half(ctx, geo: Geometry, lay: Layout, ct: str, it: str, *, log_probs_ptr, targets_ptr,
                        neg_log_likelihood_ptr, workspace_ptr, T, N, C, W, blank, max_l, targets_numel,
                        targets_2d_stride, zero_infinity, split: tuple[int, int] = (1, 0)) -> None:
    """The backward's two recursions for 16-bit storage; the given log_alpha is not read. Split
    (split = (J, cs), J > 1): one launch of ctc_recursions_math_split, alpha's N * J blocks then
    beta's, into the same ranges as the register path's. Register
    path: one launch of ctc_recursions_math, alpha (fp32, into the alpha range, the fp32 losses into
    the nll range) in the first half of the grid beside beta (into the occ range) in the second.
    Long path: ctc_alpha_math_long (alpha into the occ range) then ctc_beta_math_long, which
    overwrites it with the occupancies."""
    i64 = np.int64
    tiling, occ, nll = ptr(workspace_ptr), ptr(workspace_ptr + lay.occ), ptr(workspace_ptr + lay.nll)
    tables, zero_inf = ptr(workspace_ptr + lay.tables), np.int32(bool(zero_infinity))
    J, cs = split
    if J > 1:
        ctx.launch(FILE, f"aclg::ctc_recursions_math_split<{ct}, {it}>", (2 * N * J,), (SPLIT_THREADS,),
                   (ptr(log_probs_ptr), ptr(neg_log_likelihood_ptr), ptr(targets_ptr), tiling, tables, nll,
                    ptr(workspace_ptr + lay.alpha), occ, W, i64(T), i64(N), i64(C), i64(blank), i64(max_l),
                    i64(targets_numel), i64(targets_2d_stride), zero_inf, i64(J), i64(cs),
                    ptr(workspace_ptr + lay.sync), ptr(workspace_ptr + lay.xchg), i64(SPLIT_TIMEOUT_NS)),
                   shared_mem=split_shared_bytes(max_l))
        return
    if not geo.long:
        blocks = max(1, min(N, 32 * ctx.sm_count))
        ctx.launch(FILE, f"aclg::ctc_recursions_math<{ct}, {it}, {geo.P}>", (2 * blocks,), (geo.threads,),
                   (ptr(log_probs_ptr), ptr(neg_log_likelihood_ptr), ptr(targets_ptr), tiling, tables, nll,
                    ptr(workspace_ptr + lay.alpha), occ, W, i64(T), i64(N), i64(C), i64(blank), i64(max_l),
                    i64(targets_numel), i64(targets_2d_stride), zero_inf, np.int32(geo.per)), shared_mem=geo.smem)
        return
    slots = workspace_ptr + lay.slots
    _recursion(ctx, f"aclg::ctc_alpha_math<{ct}, {it}>", geo, N,
               (ptr(log_probs_ptr), ptr(targets_ptr), nll, occ, tiling, i64(T), i64(N), i64(C), W, i64(blank),
                i64(max_l), i64(targets_numel), i64(targets_2d_stride)), (), slots, max_l, 4)
    _recursion(ctx, f"aclg::ctc_beta_math<{ct}, {it}>", geo, N,
               (ptr(log_probs_ptr), ptr(neg_log_likelihood_ptr), nll, ptr(targets_ptr), tiling, tables, occ, W,
                i64(T), i64(N), i64(C), i64(blank), i64(max_l), i64(targets_numel), i64(targets_2d_stride)),
               (zero_inf,), slots, max_l, 4)


def launch_backward(ctx, *, grad_out_ptr, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr, log_alpha_ptr,
                    out_ptr, workspace_ptr, T, N, C, X, dtype, target_dtype, targets_2d_stride, targets_numel,
                    input_lengths, target_lengths, blank, zero_infinity, long_path=None, split=None):
    dt, it = _dname(dtype), _dname(target_dtype)
    if N == 0 or T == 0 or C == 0:
        return
    max_l = _max_l(target_lengths)
    msize = math_size_of(dt)
    recompute = dt in HALF
    geo = recursion_geometry(max_l, msize, long_path)
    lay = layout(T, N, max_l, msize, True, long_path, recompute, split)
    ct, i64 = _CTYPE[dt], np.int64
    kernel = (f"aclg::ctc_recursions_math_split<{ct}, {_ITYPE[it]}>" if recompute
              else f"aclg::ctc_beta_split<{ct}, {_ITYPE[it]}>")
    parts = _split_of(ctx, kernel, geo, T, N, max_l, long_path, split, 2 if recompute else 1, msize)
    units = (2 if recompute else 1) * N * parts[0] if parts[0] > 1 else 0
    _upload_tables(ctx, workspace_ptr, lay, input_lengths, target_lengths, targets_2d_stride, units)
    tables, occ, W = ptr(workspace_ptr + lay.tables), ptr(workspace_ptr + lay.occ), i64(occ_width(max_l, msize))
    if recompute:
        _recursions_of_half(ctx, geo, lay, ct, _ITYPE[it], log_probs_ptr=log_probs_ptr, targets_ptr=targets_ptr,
                            neg_log_likelihood_ptr=neg_log_likelihood_ptr, workspace_ptr=workspace_ptr, T=T, N=N,
                            C=C, W=W, blank=blank, max_l=max_l, targets_numel=targets_numel,
                            targets_2d_stride=targets_2d_stride, zero_infinity=zero_infinity, split=parts)
    else:
        _recursion(ctx, f"aclg::ctc_beta<{ct}, {_ITYPE[it]}>", geo, N,
                   (ptr(log_probs_ptr), ptr(neg_log_likelihood_ptr), ptr(log_alpha_ptr), ptr(targets_ptr),
                    ptr(workspace_ptr), tables, occ, W, i64(T), i64(N), i64(C), i64(X), i64(blank), i64(max_l),
                    i64(targets_numel), i64(targets_2d_stride)), (np.int32(bool(zero_infinity)),),
                   workspace_ptr + lay.slots, max_l, msize, parts,
                   (workspace_ptr + lay.sync, workspace_ptr + lay.xchg))
    V = 16 // _SIZE[dt]
    vec = C % V == 0 and log_probs_ptr % 16 == 0 and out_ptr % 16 == 0
    lanes = -(-C // V) if vec else C
    threads = min(GRAD_BLOCK, max(32, -(-lanes // 32) * 32))
    grad = f"aclg::ctc_grad<{ct}>"
    ctx.launch(FILE, grad, (wave_grid(ctx, FILE, grad, T * N, threads),), (threads,),
               (ptr(log_probs_ptr), ptr(grad_out_ptr), ptr(neg_log_likelihood_ptr),
                ptr(workspace_ptr + lay.nll if recompute else 0),
                ptr(workspace_ptr + lay.alpha if recompute and not geo.long else 0), ptr(out_ptr),
                ptr(workspace_ptr), tables, occ, W, i64(T), i64(N), i64(C), i64(blank), i64(max_l),
                np.int32(bool(zero_infinity)), np.int32(vec)))


def launch_forward(ctx, *, log_probs_ptr, targets_ptr, neg_log_likelihood_ptr, log_alpha_ptr, workspace_ptr,
                   T, N, C, dtype, target_dtype, targets_2d_stride, targets_numel, input_lengths, target_lengths,
                   blank, zero_infinity, X=None, long_path=None, split=None):
    dt, it = _dname(dtype), _dname(target_dtype)
    if N == 0 or T == 0:
        return
    max_l = _max_l(target_lengths)
    X = 2 * max_l + 1 if X is None else int(X)   # columns 2*maxL+1 .. X-1 (CANN's 8-aligned padding): -inf
    msize = math_size_of(dt)
    geo = recursion_geometry(max_l, msize, long_path)
    lay = layout(T, N, max_l, msize, False, long_path, split=split)
    i64 = np.int64
    parts = _split_of(ctx, f"aclg::ctc_alpha_split<{_CTYPE[dt]}, {_ITYPE[it]}>", geo, T, N, max_l, long_path, split, 1,
                      msize)
    _upload_tables(ctx, workspace_ptr, lay, input_lengths, target_lengths, targets_2d_stride,
                   N * parts[0] if parts[0] > 1 else 0)
    _recursion(ctx, f"aclg::ctc_alpha<{_CTYPE[dt]}, {_ITYPE[it]}>", geo, N,
               (ptr(log_probs_ptr), ptr(targets_ptr), ptr(neg_log_likelihood_ptr), ptr(log_alpha_ptr),
                ptr(workspace_ptr), i64(T), i64(N), i64(C), i64(X), i64(blank), i64(max_l), i64(targets_numel),
                i64(targets_2d_stride)), (np.int32(bool(zero_infinity)),), workspace_ptr + lay.slots, max_l, msize,
               parts, (workspace_ptr + lay.sync, workspace_ptr + lay.xchg))


# registered last: the name list is built from the tables above
manifest.register(KernelFile(FILE, tuple(all_name_expressions())), registers=REGISTERS)
