"""aclDataType <-> NumPy dtype, element sizes, and the CUDA C name of each storage type."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .status import aclDataType as D

bfloat16 = np.dtype(ml_dtypes.bfloat16)

_NUMPY: dict[int, np.dtype] = {
    D.ACL_FLOAT: np.dtype(np.float32),
    D.ACL_FLOAT16: np.dtype(np.float16),
    D.ACL_BF16: bfloat16,
    D.ACL_DOUBLE: np.dtype(np.float64),
    D.ACL_INT8: np.dtype(np.int8),
    D.ACL_INT16: np.dtype(np.int16),
    D.ACL_INT32: np.dtype(np.int32),
    D.ACL_INT64: np.dtype(np.int64),
    D.ACL_UINT8: np.dtype(np.uint8),
    D.ACL_UINT16: np.dtype(np.uint16),
    D.ACL_UINT32: np.dtype(np.uint32),
    D.ACL_UINT64: np.dtype(np.uint64),
    D.ACL_BOOL: np.dtype(np.bool_),
    D.ACL_COMPLEX64: np.dtype(np.complex64),
    D.ACL_COMPLEX128: np.dtype(np.complex128),
}
_ACL = {dtype: code for code, dtype in _NUMPY.items()}

CUDA_TYPE: dict[int, str] = {
    D.ACL_FLOAT: "float", D.ACL_FLOAT16: "__half", D.ACL_BF16: "__nv_bfloat16", D.ACL_DOUBLE: "double",
    D.ACL_INT32: "int", D.ACL_INT64: "long long", D.ACL_BOOL: "bool", D.ACL_UINT8: "unsigned char",
}

FLOATS = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE)

# the same C names keyed by NumPy dtype name ("float32", "bfloat16", "int64" ...), for the launchers
# that take NumPy dtypes: each restricts it to the types its kernels are instantiated for
CUDA_TYPE_BY_NAME = {_NUMPY[code].name: c_name for code, c_name in CUDA_TYPE.items()}


def cuda_types(*names: str) -> dict[str, str]:
    """{NumPy dtype name: CUDA C name} for `names`, in that order (a launcher's supported types)."""
    return {n: CUDA_TYPE_BY_NAME[n] for n in names}


def supported_name(dtype: object, allowed: dict[str, str], refusal: str) -> str:
    """The NumPy name of `dtype` (a dtype or its name) when `allowed` has it, else ValueError
    `"<refusal> <name>"` (a launcher's guard; the operator's checks refused such types already)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name  # type: ignore[call-overload]
    if name not in allowed:
        raise ValueError(f"{refusal} {name}")
    return name


def is_known(code: int) -> bool:
    return code in D._value2member_map_


def to_numpy(code: int) -> np.dtype:
    """The NumPy dtype of an aclDataType (KeyError for types with no NumPy storage)."""
    return _NUMPY[code]


def has_numpy(code: int) -> bool:
    return code in _NUMPY


def from_numpy(dtype: np.dtype) -> D:
    return D(_ACL[np.dtype(dtype)])


def itemsize(code: int) -> int:
    return _NUMPY[code].itemsize


def name(code: int) -> str:
    try:
        return D(code).name.removeprefix("ACL_")
    except ValueError:
        return f"dtype {code}"


def math_dtype(code: int) -> np.dtype:
    """The dtype arithmetic runs in: float64 for DOUBLE, float32 for the other float types."""
    return np.dtype(np.float64) if code == D.ACL_DOUBLE else np.dtype(np.float32)
