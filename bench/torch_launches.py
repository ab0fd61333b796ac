"""PyTorch CUDA's launch sequence for each of the ten operators, read from its source: an ESTIMATE,
not a measurement (no GPU ran it). Data for `python -m bench.gpu_model`, which prices these launches
with the profiler's roofline model (aclnn_gpu/profile: bytes at 3.35 TB/s + 3 us per launch; GEMMs
the larger of bytes and FLOPs at the dense peak) beside the emulator's figures for our kernels, and
with its latency-aware model: LossCTC.cu's alpha and beta kernels, T dependent steps each, cost the
larger of their bytes and their steps' critical path (aclnn_gpu/profile/latency.py describes them by
name, as it describes ours).

Each launch is (what it is, DRAM bytes, FLOPs) as functions of the profiler's dimensions `d`
(aclnn_gpu/profile/operators.py names them) and the element size `e`. Bytes count each tensor a
kernel streams once per pass it makes over it (a read-modify-write counts twice), as the kernel's
code reads it; gathers and scattered writes are counted at their useful bytes (a lower bound: their
32-byte sectors are only partly used). Small launches (index set-up, scalar divides) are listed with
the bytes of their few elements. The PyTorch counterparts are the ones bench/run.py times on the CPU:

    KlDiv            F.kl_div(x, t, reduction="batchmean")         aten/src/ATen/native/Loss.cpp (kl_div:
                     xlogy(t, t) - t * x, then sum and / N: composite, one TensorIterator kernel each)
    KlDivBackward    autograd of the above: SubBackward (neg), MulBackward (grad * t), DivBackward
    CrossEntropyLoss F.cross_entropy: log_softmax (aten/src/ATen/native/cuda/SoftMax.cu,
                     cunn_SoftMaxForward: rows too long for shared memory read the input 3 times: max,
                     sum of exp, write) + nll_loss_forward_reduce_cuda_kernel_2d (Loss.cu / NLLLoss.cu)
    CrossEntropyLossGrad  autograd: nll_loss_backward (zeros of (N, C) + a scatter of N values), then
                     log_softmax_backward (cunn_SoftMaxBackward: a sum pass over gradOutput, then
                     gradOutput and output read again and gradInput written)
    CtcLoss          aten._ctc_loss (aten/src/ATen/native/cuda/LossCTC.cu): target offsets (cumsum or
                     arange), max target length, ctc_loss_log_alpha_gpu_kernel (alpha in HBM)
    CtcLossBackward  aten._ctc_loss_backward, LossCTC.cu, the is_large branch (taken when
                     2*T + 2.4*N + 0.2*C > 450, e.g. at T=1000): full_like(-inf), the beta kernel (beta in
                     HBM), exp_out(grad, log_probs), the blank column by at::logsumexp over strided
                     alpha + beta (amax, abs/eq/masked_fill, sub, exp, sum, log, add) and four small
                     elementwise ops, grad *= grad_out, ctc_loss_backward_collect_nonblank_gpu_kernel
                     (atomicAdd into grad)
    ConvTbc          aten.conv_tbc (aten/src/ATen/native/ConvolutionTBC.cpp): output = bias expanded
                     (a copy), then K addmm_ (cuBLAS GEMMs, beta = 1: output read and written)
    ConvTbcBackward  conv_tbc_backward (same file): gradInput zeros + K addmm_, gradWeight zeros + K
                     addmm_ (per tap), gradBias zeros, gradOutput.sum(0), .sum(0), copy_ (2K + 6)
                     ConvTbc's launches carry their footprints: `model` prices them through the
                     profiler's L2 model (warm across the launches), as it prices our GEMMs
    ScaledMaskedSoftmax  bench's composition: x.mul(scale), masked_fill_(mask, -1e4), softmax
                     (SoftMax.cu: rows of <= 1024 elements, one read and one write). apex's fused
                     scaled_masked_softmax_cuda (apex/contrib/csrc/.../scaled_masked_softmax.h) would be
                     one launch of 2*M*e + mask bytes: listed as APEX below.
    ScaledMaskedSoftmaxBackward  _softmax_backward_data (g, y read, gradInput written), mul_(scale),
                     masked_fill_(mask, 0); apex fused: one launch of 3*M*e + mask bytes.
"""
from __future__ import annotations

from typing import Callable

Launch = tuple  # (name, bytes(d, e), flops(d, e)[, footprint(d, e) -> list[Touch]])
NO_FLOPS: Callable[[dict, int], float] = lambda d, e: 0.0  # noqa: E731


def _m(d: dict) -> int:
    return d["N"] * d["C"]


def _smsm(d: dict) -> int:
    return d["B"] * d["H"] * d["S1"] * d["S2"]


def _mask(d: dict) -> int:
    return d["MB"] * d["MH"] * d["S1"] * d["S2"]           # bool, 1 byte


def _states(d: dict) -> int:
    return d["T"] * d["N"] * (2 * d["L"] + 1)


def _t_out(d: dict) -> int:
    return d["T"] + 2 * d["pad"] - d["K"] + 1


def _tap_rows(d: dict) -> list[int]:
    """Output rows each tap k of ConvTbc touches (the input rows inside the padding)."""
    return [max(0, min(_t_out(d), d["T"] + d["pad"] - k) - max(0, d["pad"] - k)) for k in range(d["K"])]


# ConvTbc's launches also give their footprints, [(tensor, first byte, end byte, is_store)] in touch order
# (A, B, C read, C written for a GEMM), so that `model` can run them through the profiler's L2 model as
# it runs our GEMMs (aclnn_gpu/profile): every tensor is time-major and contiguous, a tap's rows one range.
Touch = tuple[str, int, int, bool]
Span = tuple[str, int, int]             # (tensor, first element, end element)


def _rows(name: str, first_row: int, rows: int, row_elems: int) -> Span:
    return (name, first_row * row_elems, (first_row + rows) * row_elems)


def _footprint_launch(name: str, touches: Callable[[dict, int], list[Touch]],
                      flops: Callable[[dict, int], float] = NO_FLOPS) -> tuple:
    """A launch whose cold bytes are its footprint's (each range once) and which carries the footprint."""
    return (name, lambda d, e: float(sum(hi - lo for _, lo, hi, _ in touches(d, e))), flops, touches)


def _pass(name: str, reads: list[Span], writes: list[Span]) -> tuple:
    """An elementwise or reduction kernel: its reads, then its writes, each range once."""
    return _footprint_launch(name, lambda d, e: [(n, lo * e, hi * e, False) for n, lo, hi in reads] +
                             [(n, lo * e, hi * e, True) for n, lo, hi in writes])


def _addmm(name: str, a: Span, b: Span, c: Span, flops: float) -> tuple:
    """An addmm_ (beta = 1): A and B read, C read and written."""
    return _footprint_launch(name, lambda d, e: [(n, lo * e, hi * e, st) for (n, lo, hi), st
                                                 in ((a, False), (b, False), (c, False), (c, True))],
                             lambda d, e: flops)


def _taps(d: dict) -> list[tuple[int, int, int, int]]:
    """(k, rows, first input row, first output row) of the taps with rows (ConvolutionTBC.cpp's t,
    iShift, oShift)."""
    return [(k, rows, max(0, k - d["pad"]), max(0, d["pad"] - k)) for k, rows in enumerate(_tap_rows(d)) if rows > 0]


def _conv_forward(d: dict) -> list[Launch]:
    B, Cin, Cout = d["B"], d["Cin"], d["Cout"]
    out = [_pass("bias expand copy", [("bias", 0, Cout)], [_rows("y", 0, _t_out(d), B * Cout)])]
    for k, rows, i0, o0 in _taps(d):
        out.append(_addmm(f"addmm_ tap {k}", _rows("x", i0, rows, B * Cin), _rows("w", k, 1, Cin * Cout),
                          _rows("y", o0, rows, B * Cout), 2.0 * rows * B * Cin * Cout))
    return out


def _conv_backward(d: dict) -> list[Launch]:
    B, Cin, Cout, K, T = d["B"], d["Cin"], d["Cout"], d["K"], d["T"]
    out = [_pass("gradInput zeros", [], [_rows("dx", 0, T, B * Cin)])]
    for k, rows, i0, o0 in _taps(d):
        out.append(_addmm(f"addmm_ gradInput tap {k}", _rows("dy", o0, rows, B * Cout), _rows("w", k, 1, Cin * Cout),
                          _rows("dx", i0, rows, B * Cin), 2.0 * rows * B * Cin * Cout))
    out.append(_pass("gradWeight zeros", [], [_rows("dw", 0, K, Cin * Cout)]))
    for k, rows, i0, o0 in _taps(d):
        out.append(_addmm(f"addmm_ gradWeight tap {k}", _rows("x", i0, rows, B * Cin),
                          _rows("dy", o0, rows, B * Cout), _rows("dw", k, 1, Cin * Cout), 2.0 * rows * B * Cin * Cout))
    # dBias = zeros_like(bias); tmp = dOutput.sum(0); dBias.copy_(tmp.sum(0))
    out += [_pass("gradBias zeros", [], [("db", 0, Cout)]),
            _pass("dOutput.sum(0)", [_rows("dy", 0, _t_out(d), B * Cout)], [("tmp", 0, B * Cout)]),
            _pass("tmp.sum(0)", [("tmp", 0, B * Cout)], [("tmp2", 0, Cout)]),
            _pass("dBias.copy_", [("tmp2", 0, Cout)], [("db", 0, Cout)])]
    return out


def l2_model_bytes(seq: list, d: dict, e: int, l2_mib: float = 50) -> list[int] | None:
    """Per launch, the DRAM bytes of the profiler's L2 model (LRU over 32-byte sectors, warm across the
    launches) for a sequence whose launches all give footprints; None when one does not, or when the
    profiler's runtime (clang++, emulator/profiling.py) is unavailable. Each tensor lives at
    its own 256-aligned base, as cudaMalloc places them."""
    if not seq or any(len(launch) < 4 for launch in seq):
        return None
    try:
        from aclnn_gpu.emulator import profiling
        rt = profiling.runtime()
    except Exception:   # no compiler for the runtime: the cold bytes stand
        return None
    bases: dict[str, int] = {}
    moved = []
    with profiling.LAUNCH_LOCK:
        rt.configure(1, int(l2_mib * 2**20))     # an empty L2, as a profiled call starts
        for launch in seq:
            total = 0
            for name, lo, hi, store in launch[3](d, e):
                if hi <= lo:
                    continue
                base = bases.setdefault(name, (len(bases) + 1) << 40)
                misses, dirtied = rt.l2_touch([(base + lo) // 32], [(base + hi - 1) // 32 + 1], store)
                total += 32 * (misses + dirtied)
            moved.append(total)
    return moved


def _ctc_backward() -> list[Launch]:
    tnc = lambda d: d["T"] * d["N"] * d["C"]                                    # noqa: E731
    half = lambda d: d["T"] * d["N"] * (d["L"] + 1)                             # noqa: E731 - blank states
    tn = lambda d: d["T"] * d["N"]                                              # noqa: E731
    return [
        ("target offsets (arange / cumsum)", lambda d, e: 16 * d["N"], NO_FLOPS),
        ("grad = full_like(log_probs, -inf)", lambda d, e: tnc(d) * e, NO_FLOPS),
        ("ctc_loss_backward_log_beta_gpu_kernel", lambda d, e: 2 * _states(d) * e, NO_FLOPS),  # lp gathered, beta
        ("exp_out(grad, log_probs)", lambda d, e: 2 * tnc(d) * e, NO_FLOPS),
        ("alpha + beta (even states, strided)", lambda d, e: 3 * half(d) * e, NO_FLOPS),
        ("logsumexp: amax", lambda d, e: half(d) * e + tn(d) * e, NO_FLOPS),
        ("logsumexp: abs / eq / masked_fill of the max", lambda d, e: 4 * tn(d) * e, NO_FLOPS),
        ("logsumexp: sub", lambda d, e: 2 * half(d) * e, NO_FLOPS),
        ("logsumexp: exp_", lambda d, e: 2 * half(d) * e, NO_FLOPS),
        ("logsumexp: sum", lambda d, e: half(d) * e + tn(d) * e, NO_FLOPS),
        ("logsumexp: log_, add_", lambda d, e: 4 * tn(d) * e, NO_FLOPS),
        ("add_(nll), sub_(lp blank), exp_", lambda d, e: 6 * tn(d) * e, NO_FLOPS),
        ("grad_blank -= ...", lambda d, e: 3 * tn(d) * e, NO_FLOPS),
        ("grad *= grad_out", lambda d, e: 2 * tnc(d) * e, NO_FLOPS),
        ("ctc_loss_backward_collect_nonblank_gpu_kernel (atomics)",
         lambda d, e: (2 * _states(d) + 3 * d["T"] * d["N"] * d["L"]) * e, NO_FLOPS),
    ]


def _kl_backward() -> list[Launch]:
    return [("DivBackward (scalar)", lambda d, e: 2 * e, NO_FLOPS),
            ("SubBackward: neg of the expanded gradient", lambda d, e: _m(d) * e, NO_FLOPS),
            ("MulBackward: grad * target", lambda d, e: 3 * _m(d) * e, NO_FLOPS)]


SEQUENCES: dict[str, list[Launch]] = {
    "KlDiv": [("xlogy(t, t)", lambda d, e: 2 * _m(d) * e, NO_FLOPS),
              ("t * x", lambda d, e: 3 * _m(d) * e, NO_FLOPS),
              ("sub", lambda d, e: 3 * _m(d) * e, NO_FLOPS),
              ("sum", lambda d, e: _m(d) * e, NO_FLOPS),
              ("/ N (batchmean)", lambda d, e: 2 * e, NO_FLOPS)],
    "KlDivBackward": _kl_backward(),
    "CrossEntropyLoss": [("cunn_SoftMaxForward (log): max, sum exp, write", lambda d, e: 4 * _m(d) * e, NO_FLOPS),
                         ("nll_loss_forward_reduce_cuda_kernel_2d", lambda d, e: d["N"] * (8 + e), NO_FLOPS)],
    "CrossEntropyLossGrad": [("nll_loss_backward: zeros (N, C)", lambda d, e: _m(d) * e, NO_FLOPS),
                             ("nll_loss_backward_reduce_cuda_kernel_2d (scatter)",
                              lambda d, e: d["N"] * (8 + e), NO_FLOPS),
                             ("cunn_SoftMaxBackward (log): sum pass, then g, y read and written",
                              lambda d, e: 4 * _m(d) * e, NO_FLOPS)],
    "CtcLoss": [("target offsets (arange / cumsum)", lambda d, e: 16 * d["N"], NO_FLOPS),
                ("max(target_lengths) (+ host sync)", lambda d, e: 8 * d["N"], NO_FLOPS),
                ("ctc_loss_log_alpha_gpu_kernel", lambda d, e: 2 * _states(d) * e, NO_FLOPS)],
    "CtcLossBackward": _ctc_backward(),
    "ConvTbc": _conv_forward,                          # type: ignore[dict-item]  (built from d)
    "ConvTbcBackward": _conv_backward,                 # type: ignore[dict-item]
    "ScaledMaskedSoftmax": [("x.mul(scale)", lambda d, e: 2 * _smsm(d) * e, NO_FLOPS),
                            ("masked_fill_(mask, -1e4)", lambda d, e: 2 * _smsm(d) * e + _mask(d), NO_FLOPS),
                            ("softmax (cunn_SoftMaxForward)", lambda d, e: 2 * _smsm(d) * e, NO_FLOPS)],
    "ScaledMaskedSoftmaxBackward": [("_softmax_backward_data", lambda d, e: 3 * _smsm(d) * e, NO_FLOPS),
                                    ("mul_(scale)", lambda d, e: 2 * _smsm(d) * e, NO_FLOPS),
                                    ("masked_fill_(mask, 0)", lambda d, e: 2 * _smsm(d) * e + _mask(d), NO_FLOPS)],
}

# apex's fused kernels (one launch each), the alternative a user of the softmax would compare with
APEX: dict[str, list[Launch]] = {
    "ScaledMaskedSoftmax": [("apex scaled_masked_softmax_warp_forward", lambda d, e: 2 * _smsm(d) * e + _mask(d),
                             NO_FLOPS)],
    "ScaledMaskedSoftmaxBackward": [("apex scaled_masked_softmax_warp_backward",
                                     lambda d, e: 3 * _smsm(d) * e + _mask(d), NO_FLOPS)],
}


def launches(op: str, d: dict, table: dict | None = None) -> list[Launch]:
    seq = (SEQUENCES if table is None else table)[op]
    return seq(d) if callable(seq) else seq


def model(op: str, d: dict, e: int, dtype: str, table: dict | None = None) -> dict:
    """The launch count, DRAM bytes, FLOPs and modelled H100 seconds of PyTorch's sequence. Bytes are the
    L2 model's where the launches give footprints (ConvTbc: `l2_model_bytes`, as our GEMMs are priced),
    else each launch's cold bytes; "cold_bytes" is always the latter. "seconds" is bytes-only (the
    roofline), "latency_seconds" latency-aware (a recursion kernel, LossCTC.cu's alpha and beta, costs
    the larger of its bytes and its steps' critical path: aclnn_gpu/profile/latency.py, the same
    function that prices ours)."""
    from aclnn_gpu.profile import HBM_BYTES_PER_S, LAUNCH_S, PEAK_FLOPS, latency
    seq = launches(op, d, table)
    cold = [launch[1](d, e) for launch in seq]
    moved = l2_model_bytes(seq, d, e) or cold
    flops = [launch[2](d, e) for launch in seq]
    roof = [max(b / HBM_BYTES_PER_S, f / PEAK_FLOPS.get(dtype, 67e12)) for b, f in zip(moved, flops)]
    recs = [latency.recursion(launch[0], d, 8 if dtype == "float64" else 4) for launch in seq]
    return {"launches": len(seq), "bytes": sum(moved), "cold_bytes": sum(cold), "flops": sum(flops),
            "seconds": sum(roof) + len(seq) * LAUNCH_S,
            "latency_seconds": sum(max(r, x.seconds if x else 0.0) for r, x in zip(roof, recs)) + len(seq) * LAUNCH_S,
            "names": [launch[0] for launch in seq]}
