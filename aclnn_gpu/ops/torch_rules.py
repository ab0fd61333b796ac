"""What the operator families' PyTorch code shares: for their custom operators
(`ops/<family>/torch_ops.py`), the record of one `aclnn::` custom operator (`TorchOperator`: schema,
implementation, fake implementation, autograd rules, autocast policy) and the small pure-torch helpers
their autograd formulas use; for their PyTorch-shaped public functions (`ops/<family>/torch_functions.py`,
published as `aclnn_gpu.torch.<name>`), the argument rules several of them apply (torch tensors only,
integer lengths, PyTorch's reduction strings with the deprecated size_average / reduce, the refusal of
torch.jit.script) and the one question about PyTorch's stream they ask (`capturing_for`).

Layer 11 (operators), but it imports torch: only the families' `torch_ops.py` and `torch_functions.py`
modules import it, and only `aclnn_gpu.torch` imports those (`import aclnn_gpu` never imports torch). The
records are data: the PyTorch layer (`aclnn_gpu/torch/library.py`) defines, registers and runs them, and
hands each implementation the functional call it makes (`functional.<TorchOperator.functional>`), and
hands this module its stream question (`set_capture_check`, from `aclnn_gpu/torch/stream.py`), so this
layer never imports the layers above it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import torch

# autocast policies (PyTorch's lists): cast the floating-point inputs to float32, or to the autocast dtype
AUTOCAST_FLOAT32 = "float32"
AUTOCAST_LOWER_PRECISION = "autocast dtype"


class TorchOperator(NamedTuple):
    """One custom operator `aclnn::<name>`, as data.

    impl(run, *args): the computation, for every backend; `run(like, *args)` calls the functional operator
        named by `functional` (on PyTorch's stream for a GPU `like`, else through functional, results on
        `like`'s device) and `run.on_stream(like)` says which of the two it will be (None when
        `functional` is None).
    fake(*args): the outputs' shapes and dtypes, for FakeTensor / meta tracing.
    setup(ctx, inputs, output), backward(ctx, *grads), jvp(ctx, *tangents): the Autograd kernel's three
        rules (aclnn_gpu/torch/library.py, `autograd`); the formulas call other operators as
        `torch.ops.aclnn.<name>.default`, looked up when they run.
    autocast: AUTOCAST_FLOAT32, AUTOCAST_LOWER_PRECISION, or None (no autocast rule).
    """

    name: str
    schema: str
    impl: Callable[..., Any]
    fake: Callable[..., Any]
    setup: Callable[..., None]
    backward: Callable[..., Any]
    jvp: Callable[..., Any]
    functional: str | None = None
    autocast: str | None = None


def save(ctx: Any, *tensors: Any) -> None:
    """What the rules read, saved for both modes (ctx.saved_tensors is then the same in backward and jvp)."""
    ctx.set_materialize_grads(False)    # None, not zeros, for what has no gradient / tangent (jvp alike)
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)


def dense(grad: torch.Tensor) -> torch.Tensor:
    """`grad` as a dense tensor: autograd often hands an expanded (stride-0) gradient; a dense one keeps the
    GPU path free of staging."""
    return grad if grad.is_contiguous() else grad.contiguous()


def no_tangent(function: str, **tangents: Any) -> None:
    """Forward mode through an argument the operator gives no derivative for: refused, never a zero."""
    for name, tangent in tangents.items():
        if tangent is not None:
            raise NotImplementedError(f"{function}: no forward-mode derivative for {name} (its reverse-mode "
                                      "gradient is not given either)")


def add(*terms: Any) -> Any:
    """The sum of the terms that are not None (None when all are)."""
    present = [t for t in terms if t is not None]
    return functools.reduce(torch.add, present) if present else None


# ---------------------------------------------------------------------------- the public functions' rules
def tensors(function: str, **arguments: Any) -> None:
    """The public functions take torch tensors (NumPy and CuPy arrays go to aclnn_gpu.functional)."""
    for name, value in arguments.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{function}: {name} must be a torch.Tensor, got {type(value).__name__}")


def lengths(values: Any, name: str = "lengths") -> list:
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


def not_scriptable(function: Any) -> Any:
    """torch.jit.script of code calling the function fails here, saying why (TorchScript asks a function's
    __prepare_scriptable__ before compiling it): TorchScript compiles no Python, and the operators run
    Python (their kernels call the library); its ignored functions would not keep PyTorch's defaults."""
    def refuse() -> Any:
        raise RuntimeError(
            f"aclnn_gpu.torch.{function.__name__} cannot be compiled by torch.jit.script: its aclnn:: operators "
            "are Python custom operators, which TorchScript does not compile. Use torch.compile or torch.export "
            "(or torch.jit.trace, which records the operators)")
    function.__prepare_scriptable__ = refuse
    return function


REDUCTIONS = ("none", "mean", "sum")


def reduction(value: str, size_average: Any = None, reduce: Any = None, allowed: Sequence[str] = REDUCTIONS) -> str:
    """PyTorch's rule: the deprecated size_average / reduce, when either is given, decide the reduction
    (torch.nn._reduction.legacy_get_string, with its warning); an unknown string is a ValueError."""
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction as legacy
        return legacy.legacy_get_string(size_average, reduce)
    if value not in allowed:
        raise ValueError(f"{value} is not a valid value for reduction")
    return value


def _never_capturing(tensor: torch.Tensor) -> bool:
    return False


_capture_check: Callable[[torch.Tensor], bool] = _never_capturing


def set_capture_check(check: Callable[[torch.Tensor], bool]) -> None:
    """The PyTorch layer hands its answer to `capturing_for` (aclnn_gpu/torch/stream.py, capturing_for)
    when it registers the operators: this layer may not import it."""
    global _capture_check
    _capture_check = check


def capturing_for(tensor: torch.Tensor) -> bool:
    """Whether a call on `tensor` runs on PyTorch's stream and that stream captures a CUDA graph."""
    return _capture_check(tensor)


__all__ = ["AUTOCAST_FLOAT32", "AUTOCAST_LOWER_PRECISION", "TorchOperator", "save", "dense", "no_tangent", "add",
           "tensors", "lengths", "not_scriptable", "REDUCTIONS", "reduction", "set_capture_check", "capturing_for"]
