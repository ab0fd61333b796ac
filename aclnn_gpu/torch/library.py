"""The machinery that makes the operator families' PyTorch definitions (`ops/<family>/torch_ops.py`,
`TorchOperator` records) into `torch.library` custom operators of the namespace `aclnn`: the definition
(schema, an implementation for every backend, a fake implementation for FakeTensor / meta tracing), an
Autograd kernel with reverse- AND forward-mode rules, autocast kernels, and the way an implementation
reaches the library (`run`: on PyTorch's stream for a GPU tensor, `aclnn_gpu/torch/stream.py`, else
through `functional`). `aclnn_gpu/torch/ops.py` registers every family with `register`.

(The operators are defined with `torch.library.Library`, not `torch.library.custom_op`, whose autograd
kernel has no forward-mode rule: PyTorch then propagates zero tangents silently.)
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
import torch.autograd.forward_ad as forward_ad
from torch._functorch.utils import enable_single_level_autograd_function
from torch._library.utils import fill_defaults

from .. import functional as _F
from ..ops.torch_rules import AUTOCAST_FLOAT32, AUTOCAST_LOWER_PRECISION, TorchOperator
from . import stream as _stream

NAMESPACE = "aclnn"
LIB = torch.library.Library(NAMESPACE, "FRAGMENT")


def on(result: Any, like: torch.Tensor) -> torch.Tensor:
    """A functional result as a torch tensor on `like`'s device (no copy when already there)."""
    if not isinstance(result, torch.Tensor):
        result = torch.from_dlpack(result)
    return result if result.device == like.device else result.to(like.device)


def run(function: Callable[..., Any], like: torch.Tensor, *args: Any) -> Any:
    """`function` (a functional operator) on PyTorch's stream for a GPU `like`, else through functional."""
    if _stream.runs_on_stream(like):
        return _stream.call(function, like, *args)
    results = function(*args)
    if isinstance(results, tuple):
        return tuple(on(r, like) for r in results)
    return on(results, like)


def define(name: str, schema: str, impl: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    """The operator `aclnn::name`: `impl` for every backend (CompositeExplicitAutograd, as custom_op
    registers it), `fake` for FakeTensor / meta tracing; returns its OpOverload. Its Autograd kernel comes
    from `autograd` (every operator here gets one)."""
    LIB.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
    LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=LIB)
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def _has_tangent(args: tuple) -> bool:
    """Whether a tensor argument carries a forward-mode tangent of torch.autograd.forward_ad (torch.func's
    transforms are seen by the kernel itself). Tangents exist only inside a dual_level: outside one,
    nothing is unpacked (that costs microseconds per tensor, a call's whole host budget on a GPU)."""
    if forward_ad._current_level < 0:
        return False
    return any(isinstance(a, torch.Tensor) and torch._VF._unpack_dual(a, 0)[1] is not None for a in args)


def autograd(op: Any, setup: Callable[..., None], backward: Callable[..., Any], jvp: Callable[..., Any]) -> None:
    """The operator's Autograd kernel: an autograd.Function with PyTorch's three rules, each given here:
    `setup(ctx, inputs, output)` saves what the rules read (with ctx.save_for_backward AND
    ctx.save_for_forward of the same tensors, so ctx.saved_tensors is the same in both), `backward(ctx,
    *grads)` (reverse mode, written with operators that have autograd kernels themselves, so it can be
    differentiated again) and `jvp(ctx, *tangents)` (forward mode: torch.autograd.forward_ad,
    torch.func.jvp / jacfwd / hessian). torch.library.custom_op's own kernel has no forward-mode rule,
    and PyTorch then gives zero tangents without a word: hence this kernel, modelled on custom_op's.

    The Function runs at the dispatcher level (below any torch.func transform, as custom_op's does):
    applied as a single-level Function, its forward redispatches below autograd with forward grad on
    and the caller's grad mode (autograd turns both off around a Function's forward), so that the
    transforms of lower levels still work inside it: the jvp under jacfwd(jacrev(f)) sees its tangents,
    the reverse mode under jacrev(jacfwd(f)) records. It is applied whenever a rule may be needed (an
    input requires grad, carries a tangent, or a torch.func transform is active). torch.compile sees only
    the operator (Dynamo does not look inside), and AOTAutograd traces this kernel as it traces
    custom_op's."""

    class Function(torch.autograd.Function):
        # apply(keyset, grad_mode, *args): grad_mode is the caller's, which autograd turns off around
        # forward and jvp; restored there, the transforms of lower levels (the reverse mode under
        # jacrev(jacfwd(f))) still record what runs inside them
        @staticmethod
        def forward(keyset: Any, grad_mode: bool, *args: Any) -> Any:
            with torch._C._AutoDispatchBelowAutograd(), forward_ad._set_fwd_grad_enabled(True), \
                    torch.set_grad_enabled(grad_mode):
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            ctx.grad_mode = inputs[1]
            setup(ctx, inputs[2:], output)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            needs = ctx.needs_input_grad
            if all(g is None for g in grads):           # (grads are not materialised: torch_rules.save)
                return (None,) * len(needs)
            try:
                ctx.needs_input_grad = needs[2:]
                result = backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = needs
            return (None, None, *result) if isinstance(result, tuple) else (None, None, result)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            with torch.set_grad_enabled(ctx.grad_mode):
                return jvp(ctx, *tangents[2:])

    Function.__name__ = Function.__qualname__ = f"{op._opname}_function"
    apply = super(torch.autograd.Function, Function).apply   # the C++ apply: one level, no functorch lifting

    schema = op._schema
    defaults = any(a.has_default_value() for a in schema.arguments)

    def kernel(keyset: Any, *args: Any) -> Any:
        if defaults and len(args) < len(schema.arguments):   # the rules see every argument (as custom_op's)
            args = tuple(fill_defaults(schema, args, {})[0])
        if ((torch.is_grad_enabled() and torch._C._any_requires_grad(*args))
                or torch._C._are_functorch_transforms_active() or _has_tangent(args)):
            with enable_single_level_autograd_function():
                return apply(keyset, torch.is_grad_enabled(), *args)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    LIB.impl(op._opname, kernel, "Autograd", with_keyset=True)


def autocast(op: Any, dtype: torch.dtype | None) -> None:
    """PyTorch's autocast policy for the operator, on cpu and cuda: its floating-point tensors (float32,
    float16, bfloat16 on the autocast device) cast to `dtype` (None: the autocast dtype), then the
    operator with autocast off, as PyTorch's own autocast kernels run."""
    for device_type, key in (("cpu", "AutocastCPU"), ("cuda", "AutocastCUDA")):
        excluded = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

        def kernel(keyset: Any, *args: Any, _device: str = device_type, _excluded: Any = excluded) -> Any:
            to = dtype if dtype is not None else torch.get_autocast_dtype(_device)
            cast = [a.to(to) if isinstance(a, torch.Tensor) and a.device.type == _device and a.is_floating_point()
                    and a.dtype != torch.float64 and a.dtype != to else a for a in args]
            with torch._C._ExcludeDispatchKeyGuard(_excluded):
                return op(*cast)

        LIB.impl(op._opname, kernel, key, with_keyset=True)


class FunctionalCall:
    """What an implementation is handed as `run`: `run(like, *args)` calls `functional.<name>` (looked up
    at each call) on PyTorch's stream for a GPU `like`, else through functional (`run` below);
    `run.on_stream(like)` says whether it will be the former."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, like: torch.Tensor, *args: Any) -> Any:
        return run(getattr(_F, self.name), like, *args)

    @staticmethod
    def on_stream(like: torch.Tensor) -> bool:
        return _stream.runs_on_stream(like)


def _implementation(operator: TorchOperator) -> Callable[..., Any]:
    """The operator's implementation with its functional call bound (the dispatcher leaves out trailing
    arguments equal to their defaults: the implementation's own defaults fill them)."""
    call = None if operator.functional is None else FunctionalCall(operator.functional)
    impl = operator.impl

    def implementation(*args: Any, **kwargs: Any) -> Any:
        return impl(call, *args, **kwargs)

    implementation.__name__ = implementation.__qualname__ = operator.name
    return implementation


_AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {AUTOCAST_FLOAT32: torch.float32, AUTOCAST_LOWER_PRECISION: None}


def register(operators: Iterable[TorchOperator]) -> dict[str, Any]:
    """Defines each operator of a family, then gives each its Autograd kernel and its autocast rule;
    returns {name: OpOverload}. A family's operators are all defined before any rule is given, since
    the rules of one call the others (looked up when they run)."""
    operators = tuple(operators)
    defined = {o.name: define(o.name, o.schema, _implementation(o), o.fake) for o in operators}
    for o in operators:
        autograd(defined[o.name], o.setup, o.backward, o.jvp)
        if o.autocast is not None:
            autocast(defined[o.name], _AUTOCAST_DTYPES[o.autocast])
    return defined


__all__ = ["NAMESPACE", "LIB", "FunctionalCall", "on", "run", "define", "autograd", "autocast", "register"]
