"""The argument checks operators share, each failing with CANN's code and a one-line message that
names the function, the parameter and the rule (`aclnnKlDivBackward: self dtype INT32 must be one
of FLOAT, FLOAT16, BFLOAT16, DOUBLE`).

`Checks(op)` is created once per GetWorkspaceSize call; operators call its methods in CANN's
validation order, so the first broken rule is the one reported.
"""
from __future__ import annotations

import numbers
from typing import Any, Iterable, NoReturn, Sequence

from ..base import dtypes
from ..base.errors import fail
from ..base.status import aclFormat, aclnnStatus
from ..meta.tensor import aclIntArray, aclTensor
from .plan import check_no_alias, check_no_self_overlap, check_tensor_memory

NULLPTR = aclnnStatus.ACLNN_ERR_PARAM_NULLPTR
INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID
TILING = aclnnStatus.ACLNN_ERR_INNER_TILING_ERROR


def _names(codes: Iterable[int]) -> str:
    return ", ".join(dtypes.name(c) for c in codes)


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes, or None when they do not broadcast."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


class Checks:
    def __init__(self, op: str, device: Any = None):
        self.op = op
        self.device = device

    def fail(self, status: int, message: str) -> NoReturn:
        fail(status, f"{self.op}: {message}")

    # ------------------------------------------------------------------ presence
    def not_null(self, /, **tensors: Any) -> None:
        for name, value in tensors.items():
            if value is None:
                self.fail(NULLPTR, f"{name} is null")

    def tensor(self, name: str, value: Any, status: int = INVALID) -> aclTensor:
        if not isinstance(value, aclTensor):
            self.fail(status, f"{name} must be an aclTensor, got {type(value).__name__}")
        if value._destroyed:   # (slots read directly in these checks: every GetWorkspaceSize runs them)
            self.fail(status, f"{name} was destroyed")
        return value

    def int_array(self, name: str, value: Any) -> tuple[int, ...]:
        if value is None:
            self.fail(NULLPTR, f"{name} is null")
        if not isinstance(value, aclIntArray):
            self.fail(INVALID, f"{name} must be an aclIntArray, got {type(value).__name__}")
        if value.destroyed:
            self.fail(INVALID, f"{name} was destroyed")
        return value.values

    # ------------------------------------------------------------------ dtypes and formats
    def dtype_in(self, name: str, tensor: aclTensor, allowed: Sequence[int], status: int = INVALID) -> None:
        if tensor._dtype not in allowed:
            self.fail(status, f"{name} dtype {dtypes.name(tensor.dtype)} must be one of {_names(allowed)}")

    def same_dtype(self, name: str, tensor: aclTensor, ref_name: str, ref: aclTensor,
                   status: int = INVALID) -> None:
        if tensor._dtype != ref._dtype:
            self.fail(status, f"{name} dtype {dtypes.name(tensor.dtype)} must equal {ref_name} dtype "
                              f"{dtypes.name(ref.dtype)}")

    def format_in(self, name: str, tensor: aclTensor, allowed: Sequence[int]) -> None:
        if tensor._format not in allowed:
            shown = ", ".join(aclFormat(f).name for f in allowed)
            fmt = aclFormat(tensor.format).name if tensor.format in aclFormat._value2member_map_ else tensor.format
            self.fail(INVALID, f"{name} format {fmt} must be one of {shown}")

    # ------------------------------------------------------------------ shapes
    def rank(self, name: str, tensor: aclTensor, ranks: int | Sequence[int], status: int = INVALID) -> None:
        allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
        if tensor.rank not in allowed:
            want = " or ".join(f"{r}-D" for r in allowed)
            self.fail(status, f"{name} must be {want}, got shape {list(tensor.shape)}")

    def max_rank(self, name: str, tensor: aclTensor, limit: int = 8, status: int = INVALID) -> None:
        if tensor.rank > limit:
            self.fail(status, f"{name} rank {tensor.rank} exceeds {limit}")

    def shape_eq(self, name: str, tensor: aclTensor, shape: Sequence[int], what: str,
                 status: int = INVALID) -> None:
        if tuple(tensor._shape) != tuple(shape):
            self.fail(status, f"{name} shape {list(tensor.shape)} must equal {what} {list(shape)}")

    # ------------------------------------------------------------------ scalars
    def integer(self, name: str, value: Any) -> int:
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            self.fail(INVALID, f"{name} must be an integer, got {value!r}")
        return int(value)

    def boolean(self, name: str, value: Any) -> bool:
        if not isinstance(value, (bool, numbers.Integral)):
            self.fail(INVALID, f"{name} must be a bool, got {value!r}")
        return bool(value)

    def real(self, name: str, value: Any) -> float:
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            self.fail(INVALID, f"{name} must be a real number, got {value!r}")
        return float(value)

    # ------------------------------------------------------------------ memory
    def memory(self, /, **tensors: aclTensor | None) -> None:
        for name, tensor in tensors.items():
            if tensor is not None:
                check_tensor_memory(self.op, name, tensor, self.device)

    def output(self, name: str, out: aclTensor, /, **inputs: aclTensor | None) -> None:
        """An output may neither overlap itself nor share memory with an input."""
        check_no_self_overlap(self.op, name, out)
        check_no_alias(self.op, name, out, list(inputs.items()))
