"""The pythonic layer, layer 14 "functional" (docs/DESIGN.md, "Import layers"): arrays in, arrays out,
exceptions instead of status codes.

Each function runs the very executors of the two-phase API: it describes the caller's arrays as
aclTensors (zero-copy: the arrays' own memory is lent to the library for the length of the call
when it already lives where the device computes), runs GetWorkspaceSize and the execute call on a
stream, waits, and returns arrays of the caller's kind (NumPy, CuPy, or PyTorch via DLPack).
Failures raise `AclnnError` carrying the status and the message, whatever went wrong: a status from
the two phases, a device that cannot run here, an argument of the wrong kind
(ACLNN_ERR_PARAM_INVALID), or (a bug of the library) an internal error. No `aclInit` is needed.

Which device: on the cuda device a call runs on the GPU its arrays live on (a `cuda:3` tensor or a
CuPy array of device 3: device 3), and arrays on two different GPUs are refused, as PyTorch refuses
them; host arrays alone run on the calling thread's current device (`aclrtSetDevice`), which is
also the rule on the cpu and emulated devices.

The package owns the machinery; each operator's body lives beside its operator, in
`aclnn_gpu/ops/<family>/functional.py`, and the families are listed in `aclnn_gpu/ops/registry.py`
(FUNCTIONAL). The modules: `arrays` (array kinds, conversions, GPU ownership, integer lists),
`signature` (the call cache's keys), `call` (one call through the two phases), `replay` (a call of a
cached signature), `cache` (the call cache), `dispatch` (the public functions and how a call runs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .dispatch import entry_point
from ..base.errors import AclnnError
from ..ops.registry import FUNCTIONAL, family_modules


def _public_functions() -> dict[str, Callable[..., Any]]:
    """name -> the public function of each operator body the families in ops/registry.py FUNCTIONAL
    offer (their functional.py's OPERATORS, with BY_VALUE's parameters keyed by value)."""
    functions: dict[str, Callable[..., Any]] = {}
    for module in family_modules(FUNCTIONAL, "functional"):
        for body in module.OPERATORS:
            functions[body.__name__] = entry_point(body, module.BY_VALUE.get(body.__name__, ()))
    return functions


_OPERATORS = _public_functions()
globals().update(_OPERATORS)   # kl_div, kl_div_backward, ...: real attributes of this module


if TYPE_CHECKING:   # the operators are attributes made from the registry, which a type checker cannot list
    def __getattr__(name: str) -> Callable[..., Any]: ...


__all__ = ["AclnnError"]
__all__.extend(_OPERATORS)   # their names
