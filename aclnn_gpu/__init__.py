"""aclnn_gpu: Huawei CANN aclnn operators on NVIDIA GPUs (CuPy) and on any CPU (NumPy), behind the
two-phase API Ascend code already calls.

Everything of the public contract is importable from here: the ACL runtime (`aclrt*`), the meta API
(`aclCreateTensor`, executors, `aclGetRecentErrMsg`), the operators (`aclnn*`), every enum as an
IntEnum and as module constants, HCCL's collectives (`Hccl*`), ACL graph capture (`aclmdlRI*`),
`AclnnError`, `current_device_kind()`, and `functional`.
"""
from __future__ import annotations

from .base import status as _status
from .base.errors import AclnnError, aclGetRecentErrMsg
from .hccl import *  # noqa: F401,F403 - HCCL's collectives, HcclComm and the HCCL enums
from .graph.api import (
    aclmdlRI, aclmdlRICaptureBegin, aclmdlRICaptureEnd, aclmdlRICaptureGetInfo, aclmdlRIDestroy, aclmdlRIExecuteAsync,
)
from .executor import (
    aclDestroyAclOpExecutor, aclOpExecutor, aclSetAclOpExecutorRepeatable, aclSetInputTensorAddr,
    aclSetOutputTensorAddr,
)
from .meta.lists import (
    aclBoolArray, aclCreateBoolArray, aclCreateFloatArray, aclCreateScalarList, aclCreateTensorList,
    aclDestroyBoolArray, aclDestroyFloatArray, aclDestroyScalarList, aclDestroyTensorList, aclFloatArray,
    aclGetBoolArraySize,
    aclGetFloatArraySize, aclGetIntArraySize, aclGetScalarListSize, aclGetTensorListSize, aclScalarList, aclTensorList,
)
from .ops.registry import *  # noqa: F401,F403 - the aclnn* operator functions
from .ops.registry import __all__ as _ops_all
from .runtime import (
    aclDataTypeSize, aclFinalize, aclFloat16ToFloat, aclFloatToFloat16, aclInit, aclnnFinalize, aclnnInit,
    aclrtContext, aclrtCreateContext, aclrtCreateEvent, aclrtCreateEventWithFlag, aclrtCreateStream,
    aclrtCreateStreamWithConfig, aclrtCtxGetSysParamOpt, aclrtCtxSetSysParamOpt, aclrtDestroyContext,
    aclrtDestroyEvent, aclrtDestroyStream, aclrtDestroyStreamForce, aclrtDeviceCanAccessPeer,
    aclrtDeviceDisablePeerAccess, aclrtDeviceEnablePeerAccess, aclrtDeviceGetBareTgid, aclrtEvent,
    aclrtEventElapsedTime, aclrtFree, aclrtFreeHost, aclrtGetCurrentContext, aclrtGetDevice, aclrtGetDeviceCount,
    aclrtGetLastError, aclrtGetMemInfo, aclrtGetRunMode, aclrtGetSocName, aclrtGetSysParamOpt, aclrtGetVersion,
    aclrtLaunchCallback, aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached, aclrtMallocHost, aclrtMemcpy,
    aclrtMemcpy2d, aclrtMemcpy2dAsync, aclrtMemcpyAsync, aclrtMemFlush, aclrtMemInvalidate, aclrtMemset,
    aclrtMemsetAsync, aclrtPeekAtLastError, aclrtPointerGetAttributes, aclrtProcessReport, aclrtQueryDeviceStatus,
    aclrtQueryEvent, aclrtQueryEventStatus, aclrtQueryEventWaitStatus, aclrtRecordEvent, aclrtResetDevice,
    aclrtResetDeviceForce, aclrtResetEvent, aclrtSetCurrentContext, aclrtSetDevice, aclrtSetOpExecuteTimeOut,
    aclrtSetOpExecuteTimeOutWithMs, aclrtSetOpWaitTimeout, aclrtSetStreamFailureMode, aclrtSetSysParamOpt,
    aclrtStream, aclrtStreamGetId, aclrtStreamQuery, aclrtStreamWaitEvent, aclrtSubscribeReport,
    aclrtSynchronizeDevice, aclrtSynchronizeDeviceWithTimeout, aclrtSynchronizeEvent,
    aclrtSynchronizeEventWithTimeout, aclrtSynchronizeStream, aclrtSynchronizeStreamWithTimeout,
    aclrtUnSubscribeReport, current_device_kind,
)
from .base.status import *  # noqa: F401,F403 - enums and their members as constants
from .meta.tensor import (
    aclCreateIntArray, aclCreateScalar, aclCreateTensor, aclDestroyIntArray, aclDestroyScalar, aclDestroyTensor,
    aclGetDataType, aclGetFormat, aclGetRawTensorAddr, aclGetStorageShape, aclGetViewOffset, aclGetViewShape,
    aclGetViewStrides, aclIntArray, aclScalar, aclSetRawTensorAddr, aclTensor,
)

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "functional":  # imported lazily: it pulls in DLPack helpers
        import importlib
        return importlib.import_module(".functional", __name__)
    raise AttributeError(f"module 'aclnn_gpu' has no attribute {name!r}")
