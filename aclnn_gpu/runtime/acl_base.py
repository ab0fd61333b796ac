"""acl_base.h's helpers that need no device: the IEEE half-precision conversions and the element
size of an aclDataType. Pure functions (they return their answer, no status)."""
from __future__ import annotations

import numbers

import numpy as np

from ..base import dtypes
from ..base.status import aclDataType


def aclFloat16ToFloat(value: int) -> float:
    """The float an IEEE half's bits (an unsigned 16-bit integer) stand for."""
    return float(np.array([int(value) & 0xFFFF], np.uint16).view(np.float16)[0])


def aclFloatToFloat16(value: float) -> int:
    """The bits of the IEEE half nearest `value` (ties to even), as an unsigned 16-bit integer."""
    with np.errstate(over="ignore"):
        return int(np.array([value], np.float32).astype(np.float16).view(np.uint16)[0])


def aclDataTypeSize(dataType: int) -> int:
    """Bytes per element of `dataType`; 0 for one with no whole-byte size (ACL_DT_UNDEFINED,
    ACL_STRING, the sub-byte types) or a value that is no aclDataType, as CANN answers."""
    if not isinstance(dataType, numbers.Integral) or not dtypes.is_known(int(dataType)):
        return 0
    if int(dataType) in (aclDataType.ACL_DT_UNDEFINED, aclDataType.ACL_STRING):
        return 0
    try:
        return int(dtypes.itemsize(int(dataType)))
    except (KeyError, ValueError, TypeError):
        return 0
