"""Test helpers: a device session that moves NumPy arrays in and out through the public API,
NaN-poisoned outputs, strided views, and the float64 tolerances per dtype."""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu.runtime import release_devices
from aclnn_gpu.demo.samples import DeviceArrays
from seeding import draw_seed

# ACLNN_GPU_TEST_DEVICES (comma list, default "cpu,emulated"): the device kinds the tests run on;
# scripts/gpu_check.sh sets "cuda" on a machine with a GPU.
DEVICE_KINDS = tuple(k.strip() for k in os.environ.get("ACLNN_GPU_TEST_DEVICES", "cpu,emulated").split(",") if k.strip())

# (rtol, atol) of a result stored in each dtype, against a float64 reference
TOLERANCE = {
    np.dtype(np.float64): (1e-10, 1e-12),
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.float16): (4e-3, 1e-3),
    dtypes.bfloat16: (2e-2, 1e-2),
}


def require_gpus(kind: str, count: int, why: str) -> None:
    """Skip on the cuda kind when fewer GPUs than `count` are visible, saying why the test needs them
    (the cpu and emulated kinds mirror any number of devices in one process: ACLNN_GPU_DEVICE_COUNT)."""
    if kind != "cuda":
        return
    import cupy
    import pytest
    have = int(cupy.cuda.runtime.getDeviceCount())
    if have < count:
        pytest.skip(f"{why}: needs {count} GPUs, this machine has {have}")


def use_device(kind: str) -> None:
    """Switch the process to a device kind (the library reads ACLNN_GPU_DEVICE at device creation)."""
    os.environ["ACLNN_GPU_DEVICE"] = kind
    release_devices()
    assert acl.aclrtSetDevice(0) == 0, acl.aclGetRecentErrMsg()
    assert acl.current_device_kind() == kind


class Session(DeviceArrays):
    """Device memory for one test on one device kind: every allocation is freed at close()."""

    def __init__(self, kind: str):
        use_device(kind)
        self.kind = kind
        super().__init__()

    def poisoned(self, shape: Sequence[int], dtype: Any, **kwargs: Any) -> Any:
        """An output tensor filled with NaN, so an element the operator fails to write shows."""
        return self.empty(shape, dtype, **kwargs)


# On a GPU, expf/logf differ from the CPU's libm by up to 2 ulp and NVRTC fuses multiply-adds: results
# that the cpu and emulated devices reproduce to the last bit get this factor on their tolerance.
GPU_TOLERANCE_SCALE = 8.0 if "cuda" in DEVICE_KINDS else 1.0


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: Any, scale: float = 1.0, what: str = "") -> None:
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    scale *= GPU_TOLERANCE_SCALE
    actual64 = np.asarray(actual, np.float64)
    expected64 = np.asarray(expected, np.float64)
    assert actual64.shape == expected64.shape, (actual64.shape, expected64.shape)
    np.testing.assert_allclose(actual64, expected64, rtol=rtol * scale, atol=atol * scale, err_msg=what)


def rng_with_seed(request: Any) -> np.random.Generator:
    """A generator seeded from the run's seed and the test's id (seeding.draw_seed: the same data when
    the test is replayed with ACLNN_GPU_TEST_SEED); the seed is attached to the test report."""
    seed = draw_seed(request.node.nodeid)
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def assert_refused(session: Session, get_workspace_size: Any, op: str, args: dict[str, Any], expected: int,
                   outputs: Sequence[str] = ("out",)) -> str:
    """Phase 1 with `args` must return (expected, None, None), leave a one-line message that starts
    with the operator's name, and leave every output's bytes untouched. Returns the message."""
    outs = [args.get(name) for name in outputs]
    before = [session.raw(o) if isinstance(o, acl.aclTensor) and o.data and o.numel and not o.destroyed else None
              for o in outs]
    status, workspace_size, executor = get_workspace_size(*args.values())
    message = acl.aclGetRecentErrMsg()
    assert (status, workspace_size, executor) == (expected, None, None), message
    assert message.startswith(f"{op}: ") and len(message) > len(op) + 8 and "\n" not in message, message
    for out, raw in zip(outs, before):
        if raw is not None:
            assert session.raw(out) == raw, "a refused call changed an output"
    return message


def near_end(ptr: int, nbytes: int) -> int:
    """The address `nbytes` before the end of the allocation holding `ptr`, whose size is CANN's
    (aclrtMalloc(n): ALIGN_UP(n, 32) + 32 usable bytes): a range longer than `nbytes` from there runs
    past the allocation, as a range longer than n from its start did before that rule."""
    alloc = acl.runtime.find_allocation(ptr, 1)
    assert alloc is not None
    return alloc.base + alloc.size - nbytes
