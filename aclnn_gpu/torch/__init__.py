"""The five operators for PyTorch, with PyTorch's signatures: each function calls a `torch.library`
custom operator of the `aclnn` namespace (`aclnn_gpu/torch/ops.py`) whose forward AND backward run this
library's aclnn operators, so models using them train, `torch.compile(fullgraph=True)` traces them,
`torch.export` holds them and CUDA graphs capture them.

The package `aclnn_gpu.torch` is layer 15, "PyTorch" (docs/DESIGN.md, "Import layers"). It owns these
PyTorch-shaped wrappers (this module), the registration of the `aclnn::` custom operators (`ops.py`,
from the families' definitions in `aclnn_gpu/ops/<family>/torch_ops.py`), the machinery that defines
them (`library.py`: definition, Autograd and autocast kernels, the route of a call) and the calls on
PyTorch's streams and caching allocator (`stream.py`).

    import aclnn_gpu.torch as acl_torch
    loss = acl_torch.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0,
                              reduction="mean", zero_infinity=False)
    loss.backward()                     # aclnnCtcLossBackward computes d loss / d log_probs

Importing `aclnn_gpu` never imports torch; importing this module does (the `torch` extra).
Each function takes exactly the parameters (names, order, defaults) of its PyTorch counterpart, so
a model switches by changing one import:

    ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False)                                       # torch.nn.functional
    cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0,                 # torch.nn.functional
                  *, lse_square_scale_for_zloss=0.0)                     # + CANN's z-loss (beyond PyTorch)
    nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean")                                          # torch.nn.functional
    kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False)
    conv_tbc(input, weight, bias, pad=0)                                # torch.conv_tbc
    scaled_masked_softmax(inputs, mask, scale)                          # apex / Megatron fused softmax
    scaled_upper_triang_masked_softmax(inputs, _, scale)                # apex / Megatron, causal

| function | custom operator | forward / backward | gradients for |
| --- | --- | --- | --- |
| ctc_loss | aclnn::ctc_loss | aclnnCtcLoss / aclnnCtcLossBackward | log_probs |
| cross_entropy | aclnn::cross_entropy_loss (, _zloss) | aclnnCrossEntropyLoss / aclnnCrossEntropyLossGrad | input |
| nll_loss | aclnn::nll_loss | PyTorch's nll_loss (no NLL operator) / aclnnCrossEntropyLossGrad | input |
| kl_div | aclnn::kl_div | aclnnKlDiv / aclnnKlDivBackward | input |
| conv_tbc | aclnn::conv_tbc | aclnnConvTbc / aclnnConvTbcBackward | input, weight, bias |
| scaled_masked_softmax | aclnn::scaled_masked_softmax | aclnnScaledMaskedSoftmax / ...Backward | inputs |

Where a call runs, and when it returns:
  * CUDA tensors, with the `cuda` device in use (ACLNN_GPU_DEVICE auto or cuda on a machine with a GPU):
    on PyTorch's current stream of the tensors' GPU (`torch.cuda.current_stream(device)`, as a CuPy
    external stream), with the results and the workspace from PyTorch's caching allocator on that
    stream, returning as soon as the work is enqueued, as PyTorch's own ops do. Every tensor a call
    reads is `record_stream`ed on that stream, so it may be dropped at once. Inside
    `torch.cuda.graph(...)` the calls are captured, in any capture_error_mode (warm up first, as for
    PyTorch's ops): the tables they upload live in pinned buffers from PyTorch's host allocator, kept
    (with the plans) until the CUDA graph and its instances are destroyed (a CUDA user object the
    graph holds); captured GEMMs share one cuBLAS workspace per stream, from PyTorch's
    allocator; a host tensor among the inputs is captured as its value then (CTC lengths: host
    values, not CUDA tensors, in a capture). The host waits only where PyTorch's own op
    would: CTC lengths given as CUDA tensors are read on the host. `aclnn_gpu/torch/stream.py` has
    the details.
  * CPU tensors: through `functional` on the cpu (or emulated) device, zero-copy: the tensors are lent
    to the library for the length of the call and the results come back as torch tensors over the
    library's output buffers. The call returns when its results are computed.
  * CUDA tensors while the library's device is cpu or emulated: staged through host memory, results
    moved back to the tensors' device (synchronous).
The two-phase C-style API keeps its own contract (the caller's streams and workspaces).

torch.compile: the wrappers are plain Python around the custom operators, so Dynamo traces them with
no graph break, with one exception PyTorch shares: CTC lengths given as tensors are read with
`.tolist()` (pass lists of ints to compile the loss in one graph; PyTorch's own F.ctc_loss with
tensor lengths breaks the graph too). Lengths that change between calls make torch.compile
recompile until each length that varies is symbolic (PyTorch's automatic dynamic shapes);
torch.compile(..., dynamic=True) makes one graph for any lengths. conv_tbc's matrix precision is a
constant to the compiler, which guards on PyTorch's float32 matmul precision (a change recompiles).

Errors where PyTorch raises, with the same exception type: a bad reduction string (ValueError), a
class-index target whose batch size is not the input's (ValueError "Expected input batch_size (3) to
match target batch_size (2).", the shapes as passed) or whose other dimensions differ (RuntimeError),
an out-of-range class label of cross_entropy / nll_loss on CPU tensors ("Target 9 is out of bounds.",
IndexError; on the GPU cross_entropy's row becomes NaN instead of PyTorch's device-side assertion,
since checking on the host would wait for the GPU, and nll_loss's forward, PyTorch's own, asserts),
floating-point CTC length tensors ("input_lengths must be integral", RuntimeError). The deprecated
size_average / reduce arguments are mapped to a reduction exactly as PyTorch maps them (with its
deprecation warning). conv_tbc's GPU matrix precision (CANN's cubeMathType) follows PyTorch's own
setting, torch.get_float32_matmul_precision(): "highest" keeps fp32 (KEEP_DTYPE), "high" and
"medium" allow TF32 (ALLOW_FP32_DOWN_PRECISION); ConvTbcFunction.apply takes it explicitly.

Semantics, and where they differ from PyTorch:
  * ctc_loss: reduction "none" | "mean" (each loss divided by its target length, clamped to >= 1,
    then the batch mean, as PyTorch) | "sum", built with torch ops on top of the raw per-sample
    losses. The forward always runs with zeroInfinity=false and keeps that RAW loss for the backward,
    as PyTorch's autograd does (aclnnCtcLossBackward zeroes a sample that cannot align given either
    that +inf or the forward's zeroed 0, ops/ctc_loss/api.py); zero_infinity then zeroes the returned
    loss and the backward gradient. The
    gradient is PyTorch's `_ctc_loss_backward` convention (d loss / d logits when log_probs =
    log_softmax(logits)), so it matches torch.nn.functional.ctc_loss through a log_softmax.
  * cross_entropy: class-index targets, input (N, C), (C,) or (N, C, d1, ...). The operator wants a
    float32 weight, so `weight` is cast to float32 (a float64 input keeps float64 math otherwise).
    No gradient for weight. The keyword-only `lse_square_scale_for_zloss` (beyond PyTorch's
    signature; default 0.0 = PyTorch's loss) adds CANN's z-loss k * logsumexp(x_i)^2 per row not
    ignored, reduced like the loss ("mean": over those rows, unweighted; docs/API.md §7), with its
    gradient.
  * kl_div: reductions "none" | "mean" | "sum" | "batchmean" (batchmean divides by the broadcast
    shape's dim 0, CANN's rule; PyTorch divides by input.size(0): equal unless input broadcasts in
    dim 0). No gradient for target: a target that requires grad is refused.
  * conv_tbc / scaled_masked_softmax: the operators take FLOAT, FLOAT16, BFLOAT16 (CANN's contract,
    kept at the aclnn level); float64 tensors are computed by this layer itself with PyTorch's ops on
    the tensors' device (the same formulas), so gradcheck runs in float64. A conv_tbc input that does
    not reach the last tap with one side's padding (T + pad < K), which aclnnConvTbc refuses as CANN
    does, runs PyTorch's own torch.conv_tbc. The mask is bool (or uint8,
    as apex takes it), true = masked out, or None (nothing masked); a fully masked row gives zeros
    (PyTorch's softmax gives NaN, apex's -10000 fill a uniform row).
  * Class-index targets: int64 or uint8 (PyTorch's two) for cross_entropy / nll_loss; CTC targets of
    any integer type (uint8, int8 and int16 are widened to int64 for the operator).
  * kl_div with reduction "mean" does not repeat PyTorch's warning that "mean" is not the
    mathematical KL divergence; the value is PyTorch's.
  * Zeros where PyTorch gives NaN (docs/API.md §7): cross_entropy "mean" with every target ignored.
    kl_div "mean" / "batchmean" of an empty input is NaN (0 / 0), as PyTorch's, on every device.
    Out-of-range CTC labels are not checked on the
    host (PyTorch does not check them either): the operator's documented device behaviour applies.
  * Forward mode (torch.autograd.forward_ad, torch.func.jvp / jacfwd / hessian): exact tangents for
    cross_entropy, nll_loss, kl_div, conv_tbc and scaled_masked_softmax (and their backward operators,
    so forward-over-reverse works); ctc_loss raises NotImplementedError as PyTorch's does. A tangent
    on kl_div's target or on a class weight raises NotImplementedError (no gradient there either).
  * Double backward (create_graph=True, gradgradcheck, Hessians): every operator but CTC, whose second
    derivative raises, as PyTorch's (_ctc_loss_backward has no derivative); the z-loss has none in
    log_prob either (NotImplementedError).
  * Autocast (cpu and cuda): the losses run in float32 (PyTorch's float32 list: nll_loss, kl_div,
    log_softmax for cross_entropy; ctc_loss on the CPU list), conv_tbc in the autocast dtype (its
    lower-precision list); the fused softmax keeps its input's dtype, as apex's kernel does.
  * torch.jit.script of code calling these functions fails at once, naming the function and why
    (TorchScript compiles no Python, and the operators are Python custom operators); torch.jit.trace,
    torch.compile and torch.export work.
  * The former autograd.Function classes (CtcLossFunction, ..., ScaledMaskedSoftmaxFunction) remain as
    thin classes whose `apply` calls the custom operator, with the same arguments.
Failures raise `aclnn_gpu.AclnnError` (a RuntimeError with `.status`); arguments that are not torch
tensors raise TypeError.
"""
from __future__ import annotations

from typing import Any

import torch

from . import ops as _ops
from . import stream as _stream

__all__ = ["ctc_loss", "cross_entropy", "nll_loss", "kl_div", "conv_tbc", "scaled_masked_softmax",
           "scaled_upper_triang_masked_softmax", "CtcLossFunction", "CrossEntropyFunction", "NllLossFunction",
           "KlDivFunction", "ConvTbcFunction", "ScaledMaskedSoftmaxFunction"]

_aclnn = torch.ops.aclnn


def _tensors(function: str, **tensors: Any) -> None:
    """The wrappers take torch tensors (NumPy and CuPy arrays go to aclnn_gpu.functional)."""
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{function}: {name} must be a torch.Tensor, got {type(value).__name__}")


def _lengths(values: Any, name: str = "lengths") -> list:
    """Lengths as a list of ints (SymInts under torch.compile stay symbolic: no specialisation)."""
    if isinstance(values, torch.Tensor):
        if values.is_floating_point() or values.is_complex():
            raise RuntimeError(f"{name} must be integral")      # PyTorch's ctc_loss message
        return values.reshape(-1).tolist()
    if isinstance(values, (int, torch.SymInt)):
        return [values]
    values = list(values)
    if any(isinstance(v, float) for v in values):
        raise RuntimeError(f"{name} must be integral")
    return [v if isinstance(v, (int, torch.SymInt)) else int(v) for v in values]


def _not_scriptable(function: Any) -> Any:
    """torch.jit.script of code calling the wrapper fails here, saying why (TorchScript asks a function's
    __prepare_scriptable__ before compiling it): TorchScript compiles no Python, and the operators run
    Python (their kernels call the library); its ignored functions would not keep PyTorch's defaults."""
    def refuse() -> Any:
        raise RuntimeError(
            f"aclnn_gpu.torch.{function.__name__} cannot be compiled by torch.jit.script: its aclnn:: operators "
            "are Python custom operators, which TorchScript does not compile. Use torch.compile or torch.export "
            "(or torch.jit.trace, which records the operators)")
    function.__prepare_scriptable__ = refuse
    return function


_REDUCTIONS = ("none", "mean", "sum")


def _reduction(reduction: str, size_average: Any = None, reduce: Any = None, allowed: tuple = _REDUCTIONS) -> str:
    """PyTorch's rule: the deprecated size_average / reduce, when either is given, decide the reduction
    (torch.nn._reduction.legacy_get_string, with its warning); an unknown string is a ValueError."""
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction as legacy
        return legacy.legacy_get_string(size_average, reduce)
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


# ---------------------------------------------------------------------------- CTC loss
def _ctc_per_sample(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list, target_lengths: list,
                    blank: int, zero_infinity: bool) -> torch.Tensor:
    nll, _ = _aclnn.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if zero_infinity:
        return torch.where(torch.isinf(nll), torch.zeros((), dtype=nll.dtype, device=nll.device), nll)
    return nll


def _as_tensor(values: list, like: torch.Tensor) -> torch.Tensor:
    """Host ints as a tensor like `like`: eager, one copy that waits for nothing on a GPU (non_blocking
    from pageable memory returns once the bytes are staged); under torch.compile, from the (symbolic)
    ints themselves, so new lengths do not recompile; while `like`'s stream captures a CUDA graph, made
    on the GPU too (a copy from pageable memory cannot be captured: PyTorch refuses it)."""
    if torch.compiler.is_compiling() or _stream.capturing_for(like):
        return torch.stack([torch.full((), v, dtype=like.dtype, device=like.device) for v in values])
    return torch.as_tensor(values, dtype=like.dtype).to(like.device, non_blocking=True)


@_not_scriptable
def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any,
             blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> torch.Tensor:
    """torch.nn.functional.ctc_loss through aclnnCtcLoss / aclnnCtcLossBackward. log_probs (T, N, C)
    (or (T, C) unbatched), targets (N, S) padded or 1-D concatenated, lengths as tensors or sequences."""
    _tensors("ctc_loss", log_probs=log_probs, targets=targets)
    reduction = _reduction(reduction)
    input_lengths, target_lengths = _lengths(input_lengths, "input_lengths"), _lengths(target_lengths, "target_lengths")
    if targets.dtype in (torch.uint8, torch.int8, torch.int16):   # PyTorch takes any integer type
        targets = targets.long()
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
    loss = _ctc_per_sample(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if reduction == "mean":
        return (loss / _as_tensor(target_lengths, loss).clamp(min=1)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss[0] if unbatched else loss


# ---------------------------------------------------------------------------- cross-entropy
def _check_class_shapes(input: torch.Tensor, target: torch.Tensor) -> None:
    """PyTorch's checks (and exception types) of a class-index target against the input, quoting the
    shapes as passed (the operator would see them flattened)."""
    if input.dim() < 2:
        return
    batch = target.shape[0] if target.dim() else 0
    if batch != input.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size ({batch}).")
    if input.dim() == 2 and target.dim() != 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    expected = [input.shape[0], *input.shape[2:]]
    if input.dim() > 2 and list(target.shape) != expected:
        raise RuntimeError(f"Expected target size {expected}, got {list(target.shape)}")


def _class_inputs(function: str, input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, tuple | None]:
    """cross_entropy / nll_loss arguments as the operator takes them: (N, C) input, (N,) target, float32
    weight, and the shape of a "none" result ((), (N,), (N, d1, ...)) when it is not (N,)."""
    _tensors(function, input=input, target=target)
    if target.is_floating_point():
        raise NotImplementedError(f"{function}: class-probability targets are not supported (class indices only)")
    _check_class_shapes(input, target)
    if target.dtype == torch.uint8:                   # PyTorch takes Long or Byte class indices
        target = target.long()
    if weight is not None:
        if weight.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError(f"{function}: no gradient for weight (aclnnCrossEntropyLossGrad gives "
                                      "the input's only); pass weight.detach()")
        weight = weight.detach().to(torch.float32)   # the operator's weight dtype
    shape: tuple | None = None
    if input.dim() == 1:                              # unbatched: (C,), target ()
        input, target, shape = input.unsqueeze(0), target.reshape(1), ()
    elif input.dim() > 2:                             # (N, C, d1, ...) -> (N*d1*..., C)
        shape = (input.shape[0],) + tuple(input.shape[2:])
        input = input.movedim(1, -1).reshape(-1, input.shape[1])
        target = target.reshape(-1)
    return input, target, weight, shape


@_not_scriptable
def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0, *,
                  lse_square_scale_for_zloss: float = 0.0) -> torch.Tensor:
    """torch.nn.functional.cross_entropy (class-index targets) through aclnnCrossEntropyLoss /
    aclnnCrossEntropyLossGrad. input (N, C), (C,) or (N, C, d1, ...); target of input's shape minus C.
    lse_square_scale_for_zloss (keyword-only, beyond PyTorch's signature): CANN's z-loss scale k in
    [0, 1); k != 0 adds k * logsumexp(row)^2 for every row not ignored, reduced like the loss."""
    reduction = _reduction(reduction, size_average, reduce)
    input, target, weight, shape = _class_inputs("cross_entropy", input, target, weight)
    if lse_square_scale_for_zloss:
        loss = _aclnn.cross_entropy_loss_zloss(input, target, weight, reduction, ignore_index, label_smoothing,
                                               float(lse_square_scale_for_zloss))[0]
    else:
        loss, _ = _aclnn.cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)
    return loss.reshape(shape) if reduction == "none" and shape is not None else loss


@_not_scriptable
def nll_loss(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
             reduction: str = "mean") -> torch.Tensor:
    """torch.nn.functional.nll_loss on log-probabilities: input (N, C), (C,) or (N, C, d1, ...), target
    class indices. The gradient is aclnnCrossEntropyLossGrad's (aclnn::nll_loss)."""
    reduction = _reduction(reduction, size_average, reduce)
    input, target, weight, shape = _class_inputs("nll_loss", input, target, weight)
    loss = _aclnn.nll_loss(input, target, weight, reduction, ignore_index)
    return loss.reshape(shape) if reduction == "none" and shape is not None else loss


# ---------------------------------------------------------------------------- KL divergence
@_not_scriptable
def kl_div(input: torch.Tensor, target: torch.Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> torch.Tensor:
    """torch.nn.functional.kl_div through aclnnKlDiv / aclnnKlDivBackward: input holds log-probabilities,
    target probabilities (log-probabilities with log_target). Gradient for input only."""
    _tensors("kl_div", input=input, target=target)
    reduction = _reduction(reduction, size_average, reduce, _REDUCTIONS + ("batchmean",))
    if target.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("kl_div: no gradient for target (aclnnKlDivBackward gives the input's only); "
                                  "pass target.detach()")
    return _aclnn.kl_div(input, target, reduction, log_target)


# ---------------------------------------------------------------------------- ConvTBC
@torch.compiler.assume_constant_result
def _cube_math_type() -> int:
    """CANN's cubeMathType from PyTorch's float32 matmul precision: "highest" -> 0 (KEEP_DTYPE, true
    fp32), "high" / "medium" -> 1 (ALLOW_FP32_DOWN_PRECISION, TF32 on a GPU). A constant to
    torch.compile, which guards on the precision (a change recompiles)."""
    return 0 if torch.get_float32_matmul_precision() == "highest" else 1


@_not_scriptable
def conv_tbc(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """torch.conv_tbc through aclnnConvTbc / aclnnConvTbcBackward: input (T, B, Cin), weight
    (K, Cin, Cout), bias (Cout,) -> (T + 2*pad - K + 1, B, Cout). The GPU matrix precision follows
    torch.get_float32_matmul_precision() (the cpu device computes in fp32 whatever it says)."""
    _tensors("conv_tbc", input=input, weight=weight, bias=bias)
    return _aclnn.conv_tbc(input, weight, bias, pad, _cube_math_type())


# ---------------------------------------------------------------------------- scaled masked softmax
def _softmax(function: str, inputs: torch.Tensor, mask: torch.Tensor | None, scale: float,
             fix_triu_mask: bool) -> torch.Tensor:
    _tensors(function, inputs=inputs)
    if mask is not None:
        _tensors(function, mask=mask)
        mask = mask.detach()
        if mask.dtype != torch.bool:
            mask = mask.to(torch.bool)
    return _aclnn.scaled_masked_softmax(inputs, mask, scale, fix_triu_mask)


@_not_scriptable
def scaled_masked_softmax(inputs: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """apex's / Megatron's scaled_masked_softmax(inputs, mask, scale): softmax(scale * inputs) over the
    last axis with masked positions (mask true / 1) excluded, through aclnnScaledMaskedSoftmax /
    aclnnScaledMaskedSoftmaxBackward. inputs (B, N, S1, S2); mask bool or uint8 (Bm, Nm, S1, S2) with
    Bm in {B, 1}, Nm in {N, 1}, or None (no mask)."""
    return _softmax("scaled_masked_softmax", inputs, mask, scale, False)


@_not_scriptable
def scaled_upper_triang_masked_softmax(inputs: torch.Tensor, _: Any, scale: float) -> torch.Tensor:
    """apex's / Megatron's scaled_upper_triang_masked_softmax(inputs, _, scale): the causal softmax
    (entry j of row i masked when j > i) of inputs (attn_batches, S1, S2) or (B, N, S1, S2); the second
    argument is ignored, as apex ignores it. Through aclnnScaledMaskedSoftmax with fixTriuMask=true."""
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 3:
        return _softmax("scaled_upper_triang_masked_softmax", inputs.unsqueeze(0), None, scale, True).squeeze(0)
    return _softmax("scaled_upper_triang_masked_softmax", inputs, None, scale, True)


# ---------------------------------------------------------------------------- the former autograd.Functions
class CtcLossFunction:
    """`apply(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)`: the per-sample
    loss (T, N, C) -> (N,), zero_infinity applied (aclnn::ctc_loss). Kept for code written against the
    autograd.Function this module had before its operators were torch.library custom operators."""

    @staticmethod
    def apply(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any, blank: int,
              zero_infinity: bool) -> torch.Tensor:
        return _ctc_per_sample(log_probs, targets, _lengths(input_lengths), _lengths(target_lengths), blank,
                               zero_infinity)


class CrossEntropyFunction:
    """`apply(input, target, weight, reduction, ignore_index, label_smoothing, link=None)` over (N, C)
    logits (aclnn::cross_entropy_loss); `link` is ignored (kept for old callers)."""

    @staticmethod
    def apply(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: str,
              ignore_index: int, label_smoothing: float, link: Any = None) -> torch.Tensor:
        return _aclnn.cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)[0]


class NllLossFunction:
    """`apply(input, target, weight, reduction, ignore_index, link=None)` over (N, C) log-probabilities
    (aclnn::nll_loss); `link` is ignored."""

    @staticmethod
    def apply(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: str,
              ignore_index: int, link: Any = None) -> torch.Tensor:
        return _aclnn.nll_loss(input, target, weight, reduction, ignore_index)


class KlDivFunction:
    """`apply(input, target, reduction, log_target)` (aclnn::kl_div)."""

    @staticmethod
    def apply(input: torch.Tensor, target: torch.Tensor, reduction: str, log_target: bool) -> torch.Tensor:
        return _aclnn.kl_div(input, target, reduction, log_target)


class ConvTbcFunction:
    """`apply(input, weight, bias, pad, cube_math_type)`: conv_tbc with CANN's cubeMathType given
    explicitly (aclnn::conv_tbc)."""

    @staticmethod
    def apply(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, pad: int,
              cube_math_type: int) -> torch.Tensor:
        return _aclnn.conv_tbc(input, weight, bias, pad, cube_math_type)


class ScaledMaskedSoftmaxFunction:
    """`apply(x, mask, scale, fix_triu_mask, link=None)`: the operator's mask and causal mask together,
    which apex has no call for (aclnn::scaled_masked_softmax); `link` is ignored."""

    @staticmethod
    def apply(x: torch.Tensor, mask: torch.Tensor | None, scale: float, fix_triu_mask: bool,
              link: Any = None) -> torch.Tensor:
        return _aclnn.scaled_masked_softmax(x, mask, scale, fix_triu_mask)


_ = _ops   # the import registers the aclnn:: operators
