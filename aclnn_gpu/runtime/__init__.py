"""The ACL runtime (acl.h, acl_base.h, acl_rt.h and aclnn_base.h's init): layer 9, "runtime", of
docs/DESIGN.md's import layers, over the devices (`aclnn_gpu.device`).

Thin by design: every function validates its arguments (handles, sizes, pointer ranges against the
live allocations) and delegates to the device in use. Nothing here raises for a user error: each
entry point is C-style (`errors.c_api`), turning `OpError` into the returned code plus a recent-error
message. The modules, by concern:

- `devices.py`: aclInit / aclFinalize, aclnnInit / aclnnFinalize, the current device, peer access,
  contexts, the system parameters, the version / SoC / run-mode queries, op timeouts, the last error.
- `streams.py`: streams and events, and their synchronisation.
- `memory.py`: allocations, copies (also 2D), fills, cache maintenance, memory info, pointer attributes.
- `callbacks.py`: host callbacks in stream order (aclrtLaunchCallback and its reports).
- `capture.py`: the state of the captures in progress and the rules the runtime checks against it
  (the `aclmdlRI*` calls themselves are `graph/`'s).
- `acl_base.py`: acl_base.h's pure helpers (half-precision conversions, element sizes).
- `handles.py`: the stream and event handles and the checks the modules share on them; `calls.py`:
  CANN's timeout argument and the status forwarding of the wrapper spellings.

Memory, streams, events and executors belong to the device current when they were made. The kind
(`ACLNN_GPU_DEVICE`) and the number of virtual devices (`ACLNN_GPU_DEVICE_COUNT`) are read when the
first device is made (`device/current.py`). Code built on the runtime uses `device_of(id)`,
`current_device()`, `get_device()` and `resolve_stream`, re-exported here with every entry point.
"""
from __future__ import annotations

from ..device.current import (
    current_device, current_device_kind, device_of, find_allocation, get_device, release_devices, using_device,
)
from .acl_base import aclDataTypeSize, aclFloat16ToFloat, aclFloatToFloat16
from .callbacks import aclrtLaunchCallback, aclrtProcessReport, aclrtSubscribeReport, aclrtUnSubscribeReport
from .devices import (
    aclFinalize, aclInit, aclnnFinalize, aclnnInit, acl_state, aclrtContext, aclrtCreateContext,
    aclrtCtxGetSysParamOpt, aclrtCtxSetSysParamOpt, aclrtDestroyContext, aclrtDeviceCanAccessPeer,
    aclrtDeviceDisablePeerAccess, aclrtDeviceEnablePeerAccess, aclrtDeviceGetBareTgid, aclrtGetCurrentContext,
    aclrtGetDevice, aclrtGetDeviceCount, aclrtGetLastError, aclrtGetRunMode, aclrtGetSocName, aclrtGetSysParamOpt,
    aclrtGetVersion, aclrtPeekAtLastError, aclrtQueryDeviceStatus, aclrtResetDevice, aclrtResetDeviceForce,
    aclrtSetCurrentContext, aclrtSetDevice, aclrtSetOpExecuteTimeOut, aclrtSetOpExecuteTimeOutWithMs,
    aclrtSetOpWaitTimeout, aclrtSetSysParamOpt, aclrtSynchronizeDevice, aclrtSynchronizeDeviceWithTimeout,
)
from .handles import aclrtEvent, aclrtStream, resolve_stream, stream_owner
from .memory import (
    aclrtFree, aclrtFreeHost, aclrtGetMemInfo, aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached, aclrtMallocHost,
    aclrtMemcpy, aclrtMemcpy2d, aclrtMemcpy2dAsync, aclrtMemcpyAsync, aclrtMemFlush, aclrtMemInvalidate, aclrtMemset,
    aclrtMemsetAsync, aclrtPointerGetAttributes,
)
from .streams import (
    aclrtCreateEvent, aclrtCreateEventWithFlag, aclrtCreateStream, aclrtCreateStreamWithConfig, aclrtDestroyEvent,
    aclrtDestroyStream, aclrtDestroyStreamForce, aclrtEventElapsedTime, aclrtQueryEvent, aclrtQueryEventStatus,
    aclrtQueryEventWaitStatus, aclrtRecordEvent, aclrtResetEvent, aclrtSetStreamFailureMode, aclrtStreamGetId,
    aclrtStreamQuery, aclrtStreamWaitEvent, aclrtSynchronizeEvent, aclrtSynchronizeEventWithTimeout,
    aclrtSynchronizeStream, aclrtSynchronizeStreamWithTimeout,
)

__all__ = [
    "aclDataTypeSize", "aclFinalize", "aclFloat16ToFloat", "aclFloatToFloat16", "aclInit", "acl_state",
    "aclnnFinalize", "aclnnInit", "aclrtContext", "aclrtCreateContext", "aclrtCreateEvent", "aclrtCreateEventWithFlag",
    "aclrtCreateStream", "aclrtCreateStreamWithConfig", "aclrtCtxGetSysParamOpt", "aclrtCtxSetSysParamOpt",
    "aclrtDestroyContext", "aclrtDestroyEvent", "aclrtDestroyStream", "aclrtDestroyStreamForce",
    "aclrtDeviceCanAccessPeer", "aclrtDeviceDisablePeerAccess", "aclrtDeviceEnablePeerAccess",
    "aclrtDeviceGetBareTgid", "aclrtEvent", "aclrtEventElapsedTime", "aclrtFree", "aclrtFreeHost",
    "aclrtGetCurrentContext", "aclrtGetDevice", "aclrtGetDeviceCount", "aclrtGetLastError", "aclrtGetMemInfo",
    "aclrtGetRunMode", "aclrtGetSocName", "aclrtGetSysParamOpt", "aclrtGetVersion", "aclrtLaunchCallback",
    "aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMallocHost", "aclrtMemFlush",
    "aclrtMemInvalidate", "aclrtMemcpy", "aclrtMemcpy2d", "aclrtMemcpy2dAsync", "aclrtMemcpyAsync", "aclrtMemset",
    "aclrtMemsetAsync", "aclrtPeekAtLastError", "aclrtPointerGetAttributes", "aclrtProcessReport",
    "aclrtQueryDeviceStatus",
    "aclrtQueryEvent", "aclrtQueryEventStatus", "aclrtQueryEventWaitStatus", "aclrtRecordEvent", "aclrtResetDevice",
    "aclrtResetDeviceForce", "aclrtResetEvent", "aclrtSetCurrentContext", "aclrtSetDevice",
    "aclrtSetOpExecuteTimeOut", "aclrtSetOpExecuteTimeOutWithMs", "aclrtSetOpWaitTimeout", "aclrtSetStreamFailureMode",
    "aclrtSetSysParamOpt", "aclrtStream", "aclrtStreamGetId", "aclrtStreamQuery", "aclrtStreamWaitEvent",
    "aclrtSubscribeReport", "aclrtSynchronizeDevice", "aclrtSynchronizeDeviceWithTimeout", "aclrtSynchronizeEvent",
    "aclrtSynchronizeEventWithTimeout", "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout",
    "aclrtUnSubscribeReport", "current_device", "current_device_kind", "device_of", "find_allocation", "get_device",
    "release_devices", "resolve_stream", "stream_owner", "using_device",
]
