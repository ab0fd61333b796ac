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
                     addmm_ (per tap), gradBias = gradOutput summed over (T, B)
    ScaledMaskedSoftmax  bench's composition: x.mul(scale), masked_fill_(mask, -1e4), softmax
                     (SoftMax.cu: rows of <= 1024 elements, one read and one write). apex's fused
                     scaled_masked_softmax_cuda (apex/contrib/csrc/.../scaled_masked_softmax.h) would be
                     one launch of 2*M*e + mask bytes: listed as APEX below.
    ScaledMaskedSoftmaxBackward  _softmax_backward_data (g, y read, gradInput written), mul_(scale),
                     masked_fill_(mask, 0); apex fused: one launch of 3*M*e + mask bytes.
"""
from __future__ import annotations

from typing import Callable

Launch = tuple[str, Callable[[dict, int], float], Callable[[dict, int], float]]
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


def _addmm(rows: int, k: int, n: int, e: int) -> float:
    """bytes of an addmm_ (beta = 1): A (rows x k) and B (k x n) read once, C read and written."""
    return (rows * k + k * n + 2 * rows * n) * e


def _conv_forward(d: dict) -> list[Launch]:
    B, Cin, Cout = d["B"], d["Cin"], d["Cout"]
    out = [("bias expand copy", lambda d, e: _t_out(d) * B * Cout * e, NO_FLOPS)]
    for k, rows in enumerate(_tap_rows(d)):
        out.append((f"addmm_ tap {k}", lambda d, e, r=rows: _addmm(r * B, Cin, Cout, e),
                    lambda d, e, r=rows: 2.0 * r * B * Cin * Cout))
    return out


def _conv_backward(d: dict) -> list[Launch]:
    B, Cin, Cout = d["B"], d["Cin"], d["Cout"]
    out = [("gradInput zeros", lambda d, e: d["T"] * B * Cin * e, NO_FLOPS)]
    for k, rows in enumerate(_tap_rows(d)):
        out.append((f"addmm_ gradInput tap {k}", lambda d, e, r=rows: _addmm(r * B, Cout, Cin, e),
                    lambda d, e, r=rows: 2.0 * r * B * Cin * Cout))
    out.append(("gradWeight zeros", lambda d, e: d["K"] * Cin * Cout * e, NO_FLOPS))
    for k, rows in enumerate(_tap_rows(d)):
        out.append((f"addmm_ gradWeight tap {k}", lambda d, e, r=rows: _addmm(Cin, r * B, Cout, e),
                    lambda d, e, r=rows: 2.0 * r * B * Cin * Cout))
    out.append(("gradBias sum over (T, B)", lambda d, e: (_t_out(d) * B + 1) * Cout * e, NO_FLOPS))
    return out


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
    """The launch count, DRAM bytes, FLOPs and modelled H100 seconds of PyTorch's sequence: "seconds"
    bytes-only (the roofline), "latency_seconds" latency-aware (a recursion kernel, LossCTC.cu's alpha
    and beta, costs the larger of its bytes and its steps' critical path: aclnn_gpu/profile/latency.py,
    the same function that prices ours)."""
    from aclnn_gpu.profile import HBM_BYTES_PER_S, LAUNCH_S, PEAK_FLOPS, latency
    seq = launches(op, d, table)
    roof = [max(b(d, e) / HBM_BYTES_PER_S, f(d, e) / PEAK_FLOPS.get(dtype, 67e12)) for _, b, f in seq]
    recs = [latency.recursion(n, d, 8 if dtype == "float64" else 4) for n, _, _ in seq]
    return {"launches": len(seq), "bytes": sum(b(d, e) for _, b, _ in seq),
            "flops": sum(f(d, e) for _, _, f in seq), "seconds": sum(roof) + len(seq) * LAUNCH_S,
            "latency_seconds": sum(max(r, x.seconds if x else 0.0) for r, x in zip(roof, recs)) + len(seq) * LAUNCH_S,
            "names": [n for n, _, _ in seq]}
