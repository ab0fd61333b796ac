"""The caller's arrays as the functional layer sees them: which kind each is (NumPy, CuPy, PyTorch), the
GPU it lives on, its host or CuPy view for the device (zero-copy where the memory already lives there),
results handed back as the caller's kind, and integer lists read from sequences or integer arrays.

Part of layer 14, "functional" (docs/DESIGN.md, "Import layers"): it imports only lower layers.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..base import dtypes
from ..base.errors import AclnnError
from ..base.status import aclnnStatus
from ..ops.arguments import is_integer

INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID


def array_kind(array: Any) -> str:
    """"torch", "cupy" or "numpy" (anything else is read as NumPy reads it), by the top-level module."""
    module = type(array).__module__.split(".")[0]
    if module == "torch":
        return "torch"
    if module == "cupy":
        return "cupy"
    return "numpy"


def gpu_of(array: Any) -> int | None:
    """The GPU an array lives on (a CUDA torch tensor, a CuPy array), None for anything else."""
    kind = array_kind(array)
    device = getattr(array, "device", None) if kind != "numpy" else None   # (torch dtypes have none)
    if device is None:
        return None
    if kind == "torch":
        if device.type != "cuda":
            return None
        if device.index is None:
            import torch
            return int(torch.cuda.current_device())
        return int(device.index)
    return int(device.id)


def arrays_gpu(function: str, values: Sequence[Any]) -> int | None:
    """The one GPU the array arguments live on, None when all are host arrays; arrays on two GPUs
    are refused (PyTorch's rule: "Expected all tensors to be on the same device")."""
    found = None
    for value in values:
        gpu = gpu_of(value)
        if gpu is None:
            continue
        if found is not None and gpu != found:
            raise AclnnError(INVALID, f"{function}: expected all arrays on the same device, but found at least "
                                      f"two devices, cuda:{found} and cuda:{gpu}")
        found = gpu
    return found


def int_list(function: str, name: str, values: Any) -> list[int]:
    """A sequence or integer array of lengths as ints (ACLNN_ERR_PARAM_INVALID for anything that is
    not integers)."""
    try:
        array = np.asarray(to_numpy(values) if not isinstance(values, (list, tuple)) else values)
    except ValueError:   # ragged nesting
        raise AclnnError(INVALID, f"{function}: {name} must be a flat sequence of integers, got {values!r}") from None
    if array.size and array.dtype.kind not in "iu":
        if array.dtype.kind != "O" or not all(is_integer(v) for v in array.reshape(-1)):
            raise AclnnError(INVALID, f"{function}: {name} must be integers, got {values!r}")
    return [int(v) for v in array.reshape(-1)]


def to_numpy(array: Any) -> np.ndarray:
    """A host view of any array (zero-copy for NumPy and CPU PyTorch tensors)."""
    kind = array_kind(array)
    if kind == "torch":
        import torch
        tensor = array.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        if tensor.dtype == torch.bfloat16:  # NumPy's DLPack knows no bfloat16
            return np.from_dlpack(tensor.view(torch.int16)).view(dtypes.bfloat16)
        try:
            return tensor.numpy()   # the same zero-copy view as DLPack's, at a third of its cost
        except (RuntimeError, TypeError):
            return np.from_dlpack(tensor)   # (what DLPack says about a tensor NumPy cannot view)
    if kind == "cupy":
        return array.get()
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__dlpack__"):
        return np.from_dlpack(array)
    return np.asarray(array)


def to_cupy(array: Any) -> tuple[Any, np.dtype]:
    """A CuPy view of any array for the cuda device (zero-copy for CuPy arrays and CUDA tensors;
    host arrays are copied to the GPU), and the element dtype it stands for (bfloat16 travels as
    uint16: CuPy has no bfloat16)."""
    import cupy
    kind = array_kind(array)
    if kind == "torch":
        import torch
        tensor = array.detach()
        if tensor.device.type == "cuda":
            if tensor.dtype == torch.bfloat16:
                return cupy.from_dlpack(tensor.view(torch.int16)).view(cupy.uint16), dtypes.bfloat16
            converted = cupy.from_dlpack(tensor)
            return converted, np.dtype(converted.dtype)
    if kind == "cupy":
        return array, np.dtype(array.dtype)
    if hasattr(array, "__cuda_array_interface__"):
        converted = cupy.asarray(array)
        return converted, np.dtype(converted.dtype)
    host = to_numpy(array)
    if host.dtype == dtypes.bfloat16:
        return cupy.asarray(np.ascontiguousarray(host).view(np.uint16)), dtypes.bfloat16
    return cupy.asarray(host), host.dtype


def from_numpy(array: np.ndarray, kind: str) -> Any:
    """A host result as the caller's array kind."""
    if kind == "torch":
        import torch
        array = np.ascontiguousarray(array).reshape(array.shape)  # ascontiguousarray makes 0-D arrays 1-D
        if array.dtype == dtypes.bfloat16:
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)
    if kind == "cupy":
        import cupy
        return cupy.asarray(array)
    return array


class GpuOutput:
    """An output allocated on the GPU (cuda device): a CuPy array and the dtype it stands for."""

    def __init__(self, array: Any, dtype: np.dtype):
        self.array, self.dtype, self.shape = array, dtype, tuple(array.shape)

    def as_kind(self, kind: str, on_host: bool = False) -> Any:
        """The output as the caller's array kind; `on_host` (every array argument was a host array): a
        host array, as PyTorch puts an op's result where its inputs are."""
        if on_host and kind != "cupy":
            host = self.array.get()
            return from_numpy(host.view(self.dtype) if self.dtype == dtypes.bfloat16 else host, kind)
        if kind == "torch":
            import torch
            tensor = torch.from_dlpack(self.array)  # stays on the GPU, no copy
            return tensor.view(torch.bfloat16) if self.dtype == dtypes.bfloat16 else tensor
        if kind == "cupy":
            return self.array
        host = self.array.get()
        return host.view(self.dtype) if self.dtype == dtypes.bfloat16 else host


def host_operand(array: Any) -> np.ndarray:
    """The host array a host-memory device is given for an argument: its own memory (zero-copy),
    or a contiguous copy when its strides are negative or not whole elements."""
    host = to_numpy(array)
    if not host.flags.c_contiguous and any(s < 0 or s % host.itemsize for s in host.strides):
        host = np.ascontiguousarray(host)
    return host


__all__ = ["array_kind", "gpu_of", "arrays_gpu", "int_list", "to_numpy", "to_cupy", "from_numpy",
           "GpuOutput", "host_operand"]
