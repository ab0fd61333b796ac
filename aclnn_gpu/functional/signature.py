"""A functional call's signature, the key of the call cache (functional/cache.py): the operator's body,
each array argument's layout, each scalar's type and value, and the integer lists that shape the plan
by value (CTC's lengths).

Part of layer 14, "functional" (docs/DESIGN.md, "Import layers").
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .arrays import host_operand

UNKEYED = object()     # key_of: an argument that cannot be part of a signature
KEYWORDS = object()    # signature: the keyword arguments' parts follow


def key_of(value: Any, by_value: bool, prepared: dict[int, np.ndarray]) -> Any:
    """One argument's part of a call signature: an array's layout (its host view, kept in `prepared`
    for the call), a scalar's type and value (floats by their bits: -0.0 and NaN are their own),
    an integer list's values; UNKEYED for anything else (the call is not cached)."""
    if value is None:
        return None
    kind = type(value)
    if kind is bool or kind is int or kind is str:
        return kind, value
    if kind is float:
        return kind, value.hex()
    if by_value:
        if (kind is list or kind is tuple) and all(type(v) is int for v in value):
            return "values", tuple(value)
        return UNKEYED
    # torch.Tensor exactly: subclasses (nn.Parameter lives in torch.nn.parameter) take the uncached path
    if kind is np.ndarray or (kind.__module__ == "torch" and kind.__name__ == "Tensor"):
        host = prepared[id(value)] = host_operand(value)
        return host.shape, host.strides, host.dtype
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return kind, float(value).hex() if value.dtype.kind == "f" else int(value)
    return UNKEYED


def signature(body: Callable[..., Any], args: tuple, kwargs: dict, by_value: frozenset, values: tuple[str, ...],
              prepared: dict[int, np.ndarray]) -> tuple | None:
    """The call's signature for the call cache (None: not cacheable): the body, each positional
    argument's part, then (after a marker) each keyword argument's name and part. `by_value`: the
    positions, `values`: the names of the parameters keyed by value."""
    parts: list[Any] = [body]
    try:
        for i, value in enumerate(args):
            part = key_of(value, i in by_value, prepared)
            if part is UNKEYED:
                return None
            parts.append(part)
        if kwargs:
            parts.append(KEYWORDS)
            for name, value in kwargs.items():
                part = key_of(value, name in values, prepared)
                if part is UNKEYED:
                    return None
                parts.append((name, part))
    except Exception:   # noqa: BLE001 - an argument the uncached path will report
        return None
    return tuple(parts)


__all__ = ["UNKEYED", "KEYWORDS", "key_of", "signature"]
