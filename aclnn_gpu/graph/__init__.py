"""ACL graphs (acl_mdl.h's model run instances built by stream capture): `api.py` has the
aclmdlRI* functions, `state.py` the capture state and the rules the runtime checks while a stream
captures. The devices record and replay (`device/cpu.py`, `device/cuda.py`, `device/fakecupy.py`)."""
from __future__ import annotations

from .api import (
    aclmdlRI, aclmdlRICaptureBegin, aclmdlRICaptureEnd, aclmdlRICaptureGetInfo, aclmdlRIDestroy, aclmdlRIExecuteAsync,
)

__all__ = ["aclmdlRI", "aclmdlRICaptureBegin", "aclmdlRICaptureEnd", "aclmdlRICaptureGetInfo", "aclmdlRIDestroy",
           "aclmdlRIExecuteAsync"]
