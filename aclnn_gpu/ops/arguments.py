"""What the operators' functional bodies (ops/<family>/functional.py) share: `OperatorCall`, the methods a
body calls on the call object it is given, and the conversions of the Python arguments the two-phase API
does not take as they are (reduction names or codes, integers). Each failure is an AclnnError with
ACLNN_ERR_PARAM_INVALID naming the function, the parameter and the rule.

Here, in layer 11 "operators", and not in aclnn_gpu.functional: the bodies live beside their operators
and import nothing from the layer above (docs/DESIGN.md, "Import layers").
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ..base.errors import AclnnError
from ..base.status import aclFormat, aclnnStatus
from ..meta.tensor import aclIntArray, aclTensor

INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID

REDUCTION_CODES = {"none": 0, "mean": 1, "sum": 2, "batchmean": 3}   # the aclnn reduction arguments' codes


class OperatorCall(Protocol):
    """The call a body runs over: aclnn_gpu.functional's `Call` (arrays lent, the two phases on a stream)
    or `Replay` (a cached signature), aclnn_gpu.torch's `TorchCall` (PyTorch's stream). A body describes
    its arguments and outputs through it, runs the two phases once and returns `result`s."""

    name: str

    def tensor(self, array: Any, name: str, fmt: int = aclFormat.ACL_FORMAT_ND) -> aclTensor:
        """The aclTensor of an array argument (None for None)."""

    def output(self, shape: Sequence[int], dtype: Any, fmt: int = aclFormat.ACL_FORMAT_ND) -> tuple[aclTensor, Any]:
        """A fresh output: its aclTensor and the handle `result` turns into the caller's array."""

    def int_array(self, values: Any, name: str) -> aclIntArray:
        """The aclIntArray of an integer-list argument."""

    def run(self, get_workspace_size: Callable[..., Any], execute: Callable[..., int], *args: Any) -> None:
        """The two phases over `args`."""

    def result(self, handle: Any) -> Any:
        """An output as the caller's array kind."""


def is_integer(value: Any) -> bool:
    """A Python or NumPy integer, booleans excluded."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def integer(function: str, name: str, value: Any) -> int:
    """`value` as an int; ACLNN_ERR_PARAM_INVALID for anything but an integer."""
    if not is_integer(value):
        raise AclnnError(INVALID, f"{function}: {name} must be an integer, got {value!r}")
    return int(value)


def reduction(function: str, value: str | int, allowed: Sequence[str]) -> int:
    """A reduction given by name (one of `allowed`) or by code, as its code (REDUCTION_CODES); a code
    is passed through for the API to check."""
    if isinstance(value, str):
        if value not in allowed:
            raise AclnnError(INVALID, f"{function}: reduction {value!r} must be one of {', '.join(allowed)}")
        return REDUCTION_CODES[value]
    if not is_integer(value):
        raise AclnnError(INVALID, f"{function}: reduction must be one of {', '.join(allowed)} or its code, "
                                  f"got {value!r}")
    return int(value)


def reduction_name(function: str, value: str | int | None) -> str | None:
    """A reduction given by name or by code (0, 1, 2), as its name (an API that takes names: a name is
    passed through for the API to check)."""
    if value is None or isinstance(value, str):
        return value
    names = {0: "none", 1: "mean", 2: "sum"}
    if not is_integer(value) or int(value) not in names:
        raise AclnnError(INVALID, f"{function}: reduction {value!r} must be 'none', 'mean', 'sum' or "
                                  "0 (none), 1 (mean), 2 (sum)")
    return names[int(value)]


__all__ = ["REDUCTION_CODES", "OperatorCall", "is_integer", "integer", "reduction", "reduction_name"]
