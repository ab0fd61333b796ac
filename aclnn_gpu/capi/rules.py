"""What the C ABI adds to the Python API's answers for C callers: CANN's runtime rule (a function
that needs the runtime, called before aclInit / aclnnInit or after aclFinalize, returns its library's
not-initialised code) and the wording of messages for C (`nullptr`, never Python's `None`; no
`UnknownHandle`). `bridge.py` applies both to every call.
"""
from __future__ import annotations

import re

import aclnn_gpu as acl
from aclnn_gpu import runtime

_UNKNOWN = re.compile(r"\bUnknownHandle(\(0x[0-9a-fA-F]+\))?")
_NONE = re.compile(r"\b(NoneType|None|null)\b")


def c_words(message: str) -> str:
    """A Python API message as a C caller reads it: a handle the table does not know is "a handle that
    was never created (or destroyed long ago)", Python's None is "nullptr"."""
    if "UnknownHandle" in message:
        message = _UNKNOWN.sub("a handle that was never created (or destroyed long ago)", message)
    return _NONE.sub("nullptr", message) if "None" in message or "null" in message else message


# What a C program gets for a call that needs the runtime before aclInit (aclnnInit also opens it for
# aclnn programs) or after aclFinalize: CANN's "not initialised" code of the function's library.
UNINITIALIZED = {"aclError": int(acl.ACL_ERROR_UNINITIALIZE), "aclnnStatus": int(acl.ACLNN_ERR_RUNTIME_ERROR),
                 "HcclResult": 15}   # HCCL_E_RUNTIME
# Functions that need no runtime: descriptors (acl* of acl_meta.h), queries of the platform, the
# initialisation functions themselves and the pure helpers.
NO_INIT = {"aclrtGetDeviceCount", "aclrtGetVersion", "aclrtGetSocName", "aclrtGetRunMode", "aclnnInit", "aclnnFinalize",
           "HcclGetErrorString", "HcclGetCommConfigCapability"}


def needs_init(name: str) -> bool:
    return name.startswith(("aclrt", "aclnn", "aclmdl", "Hccl")) and name not in NO_INIT


def init_refusal(name: str) -> str | None:
    """Why `name` may not run now (the runtime is not initialised), or None."""
    state = runtime.acl_state
    if state.initialized or state.aclnn_initialized:
        return None
    if state.finalized:
        return f"{name}: called after aclFinalize (call aclInit again before using the runtime)"
    return f"{name}: called before aclInit (aclInit, or aclnnInit for a program of aclnn operators, must come first)"
