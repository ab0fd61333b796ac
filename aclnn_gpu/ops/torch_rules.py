"""What the operator families' PyTorch definitions (`ops/<family>/torch_ops.py`) share: the record of one
`aclnn::` custom operator (`TorchOperator`: schema, implementation, fake implementation, autograd rules,
autocast policy) and the small pure-torch helpers their autograd formulas use.

Layer 11 (operators), but it imports torch: only the families' `torch_ops.py` modules import it, and only
`aclnn_gpu.torch` imports those (`import aclnn_gpu` never imports torch). The records are data: the
PyTorch layer (`aclnn_gpu/torch/library.py`) defines, registers and runs them, and hands each
implementation the functional call it makes (`functional.<TorchOperator.functional>`), so this layer never
imports the layers above it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

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


__all__ = ["AUTOCAST_FLOAT32", "AUTOCAST_LOWER_PRECISION", "TorchOperator", "save", "dense", "no_tangent", "add"]
