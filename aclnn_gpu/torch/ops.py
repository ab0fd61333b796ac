"""The operators as PyTorch custom operators, registered on import: `torch.library` definitions in the
namespace `aclnn`, with fake (meta) implementations that give the exact output shapes and dtypes, an
Autograd kernel with reverse- AND forward-mode rules, and autocast rules, so `torch.compile(fullgraph=True)`
traces through them, `torch.export` holds them and `torch.library.opcheck` passes for each.
`aclnn_gpu.torch`'s PyTorch-shaped functions (`aclnn_gpu/ops/<family>/torch_functions.py`) call
these; they can also be called directly as `torch.ops.aclnn.<name>`. Each family's definitions are data
in `aclnn_gpu/ops/<family>/torch_ops.py` (the families `aclnn_gpu/ops/registry.py` lists in TORCH); this
module walks that list and registers them with `aclnn_gpu/torch/library.py` (the machinery), so a new
family adds nothing here.

Each family's module documents its operators (schemas, autograd and forward-mode rules, float64 paths,
autocast policy, class-target checks). What they share: each forward's autograd formula calls its backward
operator; the backward operators have autograd rules of their own (explicit second-order formulas, written
with the operators and PyTorch's ops), so double backward, gradgradcheck and Hessians work, except for CTC
(as PyTorch's). Internal state (CTC's log_alpha, the z-loss lse) is not differentiable.

Where each call runs: on CUDA tensors with the `cuda` device in use, on PyTorch's current stream, with
results and workspace from PyTorch's caching allocator, returning without waiting
(`aclnn_gpu/torch/stream.py`); otherwise through `functional`, which lends CPU tensors to the cpu and
emulated devices zero-copy and waits for its stream (results are moved to the input's device when
they come back elsewhere).
"""
from __future__ import annotations

from typing import Any

from ..ops import registry, torch_rules
from . import stream as _stream
from .library import NAMESPACE, register


def _register_families() -> dict[str, Any]:
    """{name: OpOverload} of every operator of the families the registry lists, each family registered
    in turn."""
    operators: dict[str, Any] = {}
    for definitions in registry.family_modules(registry.TORCH, "torch_ops"):
        operators.update(register(definitions.OPERATORS))
    return operators


OPERATORS = _register_families()
# The families' public functions (ops/<family>/torch_functions.py) ask whether a call captures a CUDA
# graph on PyTorch's stream; their layer may not import this one, so it is handed the answer
torch_rules.set_capture_check(_stream.capturing_for)


def __getattr__(name: str) -> Any:
    """An operator's OpOverload by its name (`ops.kl_div`, as torch.ops.aclnn.kl_div.default)."""
    try:
        return OPERATORS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = ["NAMESPACE", "OPERATORS"]
