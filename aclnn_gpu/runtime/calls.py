"""What the runtime's C-style entry points share beyond the handles: CANN's timeout argument, and a
wrapped call's status passed on under the calling function's name (the `...Force`, `...WithTimeout`
and alias spellings of `devices.py`, `streams.py` and `memory.py` call the plain function and
forward its status).
"""
from __future__ import annotations

import numbers
from typing import Any

from ..base.errors import aclGetRecentErrMsg, fail
from ..base.status import aclError

OK = aclError.ACL_SUCCESS
PARAM = aclError.ACL_ERROR_RT_PARAM_INVALID


def timeout_ms(value: Any, fn: str) -> int:
    """CANN's timeout in ms: -1 waits for ever; a positive value is accepted and waited for ever too
    (the devices here have no bounded wait), 0 and values below -1 are refused."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) == 0 or int(value) < -1:
        fail(PARAM, f"{fn}: timeout {value!r} must be -1 (no limit) or a positive number of milliseconds")
    return int(value)


def forward_status(fn: str, status: int) -> int:
    """A wrapped call's status, its message renamed to `fn` (the caller's C name)."""
    if status != OK:
        message = aclGetRecentErrMsg()
        fail(status, f"{fn}{message[message.index(':'):]}" if ":" in message else f"{fn}: {message}")
    return OK
