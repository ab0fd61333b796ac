"""The errors fakecupy raises, in CuPy's shapes: `CUDARuntimeError` (a RuntimeError whose `status` is
the cudaError_t and whose message starts with its name) and `CUDADriverError` (what a RawKernel
launch or a module load raises), and the cudaError_t values with CUDA's descriptions."""
from __future__ import annotations

import enum


class cudaError_t(enum.IntEnum):
    """The cudaError_t values this layer raises (driver_types.h), with CUDA's descriptions below."""

    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorInvalidResourceHandle = 400
    cudaErrorIllegalState = 401
    cudaErrorHostMemoryAlreadyRegistered = 712
    cudaErrorHostMemoryNotRegistered = 713
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901
    cudaErrorStreamCaptureImplicit = 906
    cudaErrorCapturedEvent = 907


_DESCRIPTIONS = {
    cudaError_t.cudaErrorInvalidValue: "invalid argument",
    cudaError_t.cudaErrorInvalidResourceHandle: "invalid resource handle",
    cudaError_t.cudaErrorIllegalState: "the operation cannot be performed in the present state",
    cudaError_t.cudaErrorHostMemoryAlreadyRegistered: "part or all of the requested memory range is already mapped",
    cudaError_t.cudaErrorHostMemoryNotRegistered: "pointer does not correspond to a registered memory region",
    cudaError_t.cudaErrorStreamCaptureUnsupported: "operation not permitted when stream is capturing",
    cudaError_t.cudaErrorStreamCaptureInvalidated: "operation failed due to a previous error during capture",
    cudaError_t.cudaErrorStreamCaptureImplicit: "operation would make the legacy stream depend on a capturing "
                                                "blocking stream",
    cudaError_t.cudaErrorCapturedEvent: "operation not permitted on an event last recorded in a capturing stream",
}


class CUDARuntimeError(RuntimeError):
    """CuPy's cupy_backends.cuda.api.runtime.CUDARuntimeError: `status`, and "name: description"."""

    def __init__(self, status: int, detail: str = ""):
        self.status = int(status)
        code = cudaError_t(status)
        super().__init__(f"{code.name}: {_DESCRIPTIONS[code]}" + (f" ({detail})" if detail else ""))


class CUDADriverError(RuntimeError):
    """CuPy's cupy_backends.cuda.api.driver.CUDADriverError (what a RawKernel launch raises)."""

    def __init__(self, status: int, name: str, description: str):
        self.status = int(status)
        super().__init__(f"{name}: {description}")

