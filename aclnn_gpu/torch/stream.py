"""`aclnn_gpu.torch` on a GPU: the operators run on PyTorch's current stream, in memory from PyTorch's
caching allocator, without waiting.

A call of an `aclnn::` custom operator (`aclnn_gpu/torch/ops.py`) on CUDA tensors, with the `cuda`
device in use, runs `functional`'s body of the operator (its descriptors, output shapes and the two
phases) over a `TorchCall` instead of functional's `Call` (`functional/call.py`):

- its tensors are described where they are (`data_ptr`, shape, strides): no copy, no DLPack. A host
  tensor among CUDA ones (CTC's targets, say) is copied to the GPU on the stream first. Each tensor it
  reads is `record_stream`ed on the call's stream (PyTorch's rule for memory used on a stream other
  than the one it was allocated on; a no-op for memory of that stream), so the caller may drop its
  inputs as soon as the call returns, whichever stream made them (not while capturing: the graph's
  inputs are the caller's static tensors);
- its results and its workspace are `torch.empty` tensors on the tensors' device: they come from
  PyTorch's caching allocator, on the stream that is current, so PyTorch's rules hold for them as for
  its own ops' results (a result used on another stream is `record_stream`ed there, by the caller or
  by autograd; the workspace goes back to the allocator at the end of the call, reusable by later work
  on the same stream only, which runs after this call's kernels);
- the aclrtStream handed to the execute phase is PyTorch's current stream of that device
  (`torch.cuda.current_stream(index)`), wrapped as a CuPy external stream
  (`cupy.cuda.ExternalStream(stream.cuda_stream, index)`): every upload, launch and GEMM is enqueued
  there, ordered with the PyTorch work before and after it;
- nothing waits: the call returns once its work is enqueued. (The caller's host data it reads, CTC's
  lengths, is consumed before it returns.) The one bound, like CUDA's own launch queue: the tables
  are uploaded through a ring of 256 pinned slots (and 8 larger buffers), so a host that runs more
  than that many uploads ahead of the GPU waits for the oldest copy (`device/uploads.py`).

While the stream captures a CUDA graph (`torch.cuda.graph`), the stream carries a `TorchCapture`: the
tables a launch uploads come from pinned buffers of their own (the graph re-reads them at every
replay) and the plans are kept, as long as the graph can be replayed: until the CUDA graph and every
instance of it are destroyed. The rule is CUDA's own, a user object: the first call captured into a
graph creates one (cudaUserObjectCreate) and moves its reference to the graph being captured
(cudaStreamGetCaptureInfo, cudaGraphRetainUserObject); CUDA passes the graph's references to its
instances and runs the destructor once the graph and all its instances are gone and their launches
done (a `torch.cuda.CUDAGraph` destroys its graph after instantiating it; its `reset()`, or its
collection, destroys the instance). A weak reference to the `CUDAGraph` object would not do: a call
cannot see which Python object captures, and a graph may outlive the object (an instance kept by
other code). The destructor is libc's `sem_post` on a semaphore of the graph's (no Python, no lock
and no CUDA call on CUDA's thread, as cudaUserObjectCreate requires); every later call (or
`release_graphs()`) sees it posted and drops what the graph kept. Where no user object can be made
(a driver without them), the capture is kept for the life of the process. Whatever such a call allocates
comes from PyTorch (pinned host tensors, `torch.empty` in the graph's pool), never from CuPy, so it
captures in PyTorch's default "global" mode, where a cudaMalloc or cudaHostAlloc of CuPy's would end
the capture; a host tensor among its inputs is copied from a pinned copy the capture keeps (the graph
replays that copy: the value at capture time). The GEMMs of captured calls share one cuBLAS workspace
per capturing stream and GPU (`torch.empty`, kept for the process: bounded by the streams, not the
captures), as PyTorch's own cuBLAS workspace
is one per stream: graphs captured on one stream must not replay at the same time on two. Warm up
before capturing, as PyTorch asks for its own ops: the first call on a GPU creates the device (streams,
pinned upload ring) and compiles its kernels, which a capture cannot hold. CTC lengths given as CUDA
tensors are read on the host, which no capture allows: give them as host values.

The registry: the tensors' storages are lent to the device's allocation registry for the length of the
call (reference-counted: two concurrent calls may lend the same storage), so phase 2's pointer checks
pass as for the library's own memory; a storage that partly overlaps a live allocation is copied.

`TorchCuda` is the seam between this code and PyTorch / CuPy: the seven things the call asks (is
this a GPU tensor, which GPU, which stream is current, the CuPy stream over it, a new tensor, keep this
tensor for that stream, does it capture). Tests install a stand-in (`set_backend`) that answers them
with CPU tensors and the emulated device's CuPy-shaped streams, so everything above runs in CI; on a
GPU `TorchCuda` answers.
"""
from __future__ import annotations

import contextlib
import ctypes
import inspect
import threading
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..base import dtypes
from ..device.capture_mode import capture_mode
from ..device.cuda import CudaStream, cuda_bindings_runtime
from ..base.errors import AclnnError, OpError, aclGetRecentErrMsg, check_status
from ..runtime import aclrtStream, device_of, get_device, using_device
from ..base.status import aclError, aclFormat, aclnnStatus
from ..meta.tensor import aclCreateIntArray, aclCreateTensor, aclIntArray, aclTensor

INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID

_TO_NUMPY = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
             torch.bfloat16: dtypes.bfloat16, torch.float64: np.dtype(np.float64),
             torch.int8: np.dtype(np.int8), torch.int16: np.dtype(np.int16), torch.int32: np.dtype(np.int32),
             torch.int64: np.dtype(np.int64), torch.uint8: np.dtype(np.uint8), torch.bool: np.dtype(np.bool_)}
_TO_TORCH = {v: k for k, v in _TO_NUMPY.items()}


class TorchCuda:
    """The seam on a GPU: PyTorch's CUDA tensors, streams and caching allocator, CuPy's external stream."""

    device_kind = "cuda"   # the library device kind this backend runs on

    def __init__(self) -> None:
        self._streams: dict[tuple[int, int], Any] = {}

    def owns(self, tensor: torch.Tensor) -> bool:
        """Whether the call runs on the GPU for this tensor (the first tensor argument)."""
        return tensor.is_cuda

    def index(self, tensor: torch.Tensor) -> int:
        index = tensor.device.index
        return torch.cuda.current_device() if index is None else int(index)

    def current_stream(self, index: int) -> Any:
        return torch.cuda.current_stream(index)

    def external(self, cp: Any, stream: Any, index: int) -> Any:
        """The CuPy stream over PyTorch's stream (one per handle: it holds only the handle and the GPU,
        and PyTorch pools its streams for the life of the process)."""
        key = (int(stream.cuda_stream), index)
        found = self._streams.get(key)
        if found is None:
            with warnings.catch_warnings():   # CuPy 14 deprecates the class for Stream.from_external,
                warnings.simplefilter("ignore", DeprecationWarning)   # which does not take the GPU id
                found = self._streams[key] = cp.cuda.ExternalStream(key[0], index)
        return found

    def empty(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A new tensor from PyTorch's caching allocator, on the current stream of `device`."""
        return torch.empty(tuple(shape), dtype=dtype, device=device)

    def pinned(self, tensor: torch.Tensor) -> torch.Tensor:
        """A page-locked copy of host `tensor` (always a copy: `pin_memory()` of a pinned tensor is the
        tensor) from PyTorch's host allocator, the thread in relaxed capture mode around it, as
        PyTorch's device allocator puts itself around cudaMalloc: a cudaHostAlloc (or an event query
        of the host allocator) inside a capture in global mode would end it, and PyTorch's host
        allocator switches the mode itself only in recent releases."""
        with _relaxed_capture_mode():
            copy = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, pin_memory=True)
        return copy.copy_(tensor)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """PyTorch's allocator reuses `tensor`'s memory only after the work queued on `stream` by the time
        the tensor is freed has run (a no-op for memory allocated on `stream`)."""
        tensor.record_stream(stream)

    def capturing(self, stream: Any, index: int) -> bool:
        """Whether `stream` (current on GPU `index`) is capturing a CUDA graph."""
        if index == torch.cuda.current_device():
            return torch.cuda.is_current_stream_capturing()
        with torch.cuda.device(index):
            return torch.cuda.is_current_stream_capturing()


def _relaxed_capture_mode() -> contextlib.AbstractContextManager[None]:
    """The calling thread in cudaStreamCaptureModeRelaxed for the block, then back to its mode (the real
    cuda-bindings runtime: this is PyTorch's CUDA)."""
    from cuda.bindings import runtime as cudart
    return capture_mode(cudart, "cudaStreamCaptureModeRelaxed")


_backend: Any = TorchCuda()


def backend() -> Any:
    return _backend


def set_backend(new: Any) -> Any:
    """Install another seam (the tests' stand-in); returns the previous one."""
    global _backend
    previous, _backend = _backend, new
    return previous


def runs_on_stream(tensor: torch.Tensor) -> bool:
    """Whether a call whose first tensor is `tensor` runs here (on PyTorch's stream) rather than through
    `functional`: a GPU tensor while the library's device is of the backend's kind."""
    gpu = _backend
    return gpu.owns(tensor) and get_device().kind == gpu.device_kind


def capturing_for(tensor: torch.Tensor) -> bool:
    """Whether a call on `tensor` runs on PyTorch's stream and that stream captures a CUDA graph."""
    if not runs_on_stream(tensor):
        return False
    gpu = _backend
    index = gpu.index(tensor)
    return bool(gpu.capturing(gpu.current_stream(index), index))


# ---------------------------------------------------------------------------- lending to the registry
_lent_lock = threading.Lock()
_lent: dict[tuple[int, int], int] = {}   # (id(registry), base) -> number of calls lending it


def _lend(registry: Any, base: int, size: int, owner: Any) -> tuple[Any, int] | None:
    """Lend [base, base + size) to `registry` for one call. Returns the key to give back, None when the
    range lies inside a live allocation already (nothing to give back); ValueError when it partly
    overlaps one."""
    key = (id(registry), base)
    with _lent_lock:
        count = _lent.get(key)
        if count is not None:   # lent by a call still running (the same storage: the same range)
            _lent[key] = count + 1
            return registry, base
        if registry.borrow(base, size, owner) is None:
            return None
        _lent[key] = 1
        return registry, base


def _give_back(registry: Any, base: int) -> None:
    key = (id(registry), base)
    with _lent_lock:
        count = _lent.pop(key) - 1
        if count:
            _lent[key] = count
        else:
            registry.remove(base)


# ---------------------------------------------------------------------------- graph capture
class TorchCapture:
    """What a call enqueued while PyTorch's stream captures keeps for the graph's replays: its plans and
    its pinned upload buffers (the attributes `device/cuda.py` and `executor/` read on
    `DeviceStream.capture`). Never invalidated here: PyTorch and CUDA own the capture."""

    invalidated = None

    def __init__(self) -> None:
        self.plans: list[Any] = []
        self.keep: list[Any] = []

    def hold_plan(self, plan: Any, workspace: int) -> None:
        self.plans.append(plan)

    def describe(self) -> str:
        return "a PyTorch stream captures a CUDA graph"


class _GraphHold:
    """What the calls captured into one CUDA graph keep (their TorchCaptures), until the graph goes:
    `semaphore` is a POSIX semaphore (malloc'ed, so it outlives the interpreter) that the destructor of
    a CUDA user object the graph holds posts (libc's sem_post itself is the destructor: it runs on
    CUDA's internal thread, takes no lock and calls no CUDA or Python)."""

    __slots__ = ("captures", "semaphore")

    def __init__(self, semaphore: int):
        self.captures: list[TorchCapture] = []
        self.semaphore = semaphore


_holds: dict[int, _GraphHold] = {}       # capture id (cudaStreamGetCaptureInfo) -> what its graph keeps
_kept_for_good: list[TorchCapture] = []  # captures no user object could follow: kept for the process
_holds_lock = threading.Lock()
_SEM_BYTES = 64                           # >= sizeof(sem_t) (32 on glibc's 64-bit targets)
# Semaphores are never freed: POSIX does not promise that sem_post has stopped touching a semaphore
# once its new value can be seen (glibc's reads the waiter count after the increment), so freeing one
# the poll that saw it posted could hand memory still being read to malloc. A released hold's
# semaphore is retired, and reused (sem_init again) only from the poll after the one that retired it;
# so the semaphores ever allocated are at most the most graphs held at once plus those retired by
# one poll, _SEM_BYTES each, for the life of the process.
_retired_semaphores: list[int] = []      # posted and seen at the last poll: reusable from the next one
_free_semaphores: list[int] = []         # reusable now
# Eager calls poll the holds (one sem_getvalue each) only every _POLL_CALLS calls or _POLL_SECONDS,
# whichever comes first, so that a call costs O(1), not O(live graphs); release_graphs() polls at once.
_POLL_CALLS = 64
_POLL_SECONDS = 1e-3
_calls_since_poll = 0
_last_poll = 0.0
_libc: Any = None
_sem_post = 0                             # the address of libc's sem_post: the user objects' destructor


def _semaphores() -> Any:
    """libc's malloc / sem_init / sem_post / sem_getvalue / sem_destroy / free, or None where absent."""
    global _libc, _sem_post
    if _libc is None:
        try:
            libc = ctypes.CDLL(None)
            libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
            libc.free.argtypes = [ctypes.c_void_p]
            libc.sem_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint]
            libc.sem_getvalue.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            libc.sem_destroy.argtypes = [ctypes.c_void_p]
            _sem_post = ctypes.cast(libc.sem_post, ctypes.c_void_p).value or 0
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


def _hold_for_graph(capture: TorchCapture, cp: Any, stream_handle: int) -> None:
    """Keep `capture` until the CUDA graph its stream captures into is destroyed with every instance
    of it: one user object per graph (cudaUserObjectCreate, its reference moved to the graph by
    cudaGraphRetainUserObject), whose destructor posts the hold's semaphore; `release_graphs` then
    drops it. Where that cannot be set up (no libc semaphores, a driver without user objects), the
    capture is kept for the life of the process."""
    libc = _semaphores()
    cudart = cuda_bindings_runtime(cp)
    ok = cudart.cudaError_t.cudaSuccess
    active = int(cudart.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive)
    info = cudart.cudaStreamGetCaptureInfo(stream_handle) if libc is not None else None
    with _holds_lock:
        if info is None or info[0] != ok or int(info[1]) != active:
            _kept_for_good.append(capture)
            return
        capture_id, graph = int(info[2]), info[3]
        hold = _holds.get(capture_id)
        if hold is None:
            semaphore = _free_semaphores.pop() if _free_semaphores else libc.malloc(_SEM_BYTES)
            if not semaphore or libc.sem_init(semaphore, 0, 0) != 0:
                if semaphore:
                    _free_semaphores.append(semaphore)
                _kept_for_good.append(capture)
                return
            err, user = cudart.cudaUserObjectCreate(semaphore, cudart.cudaHostFn_t(_sem_post), 1,
                                                    int(cudart.cudaUserObjectFlags.cudaUserObjectNoDestructorSync))
            if err != ok:   # no user object: nothing will post it
                libc.sem_destroy(semaphore)
                _free_semaphores.append(semaphore)
                _kept_for_good.append(capture)
                return
            move = int(cudart.cudaUserObjectRetainFlags.cudaGraphUserObjectMove)
            err, = cudart.cudaGraphRetainUserObject(graph, user, 1, move)
            if err != ok:   # our reference is still ours: releasing it runs the destructor (posts) now
                cudart.cudaUserObjectRelease(user, 1)
                _kept_for_good.append(capture)   # (the semaphore stays allocated: never polled)
                return
            hold = _holds[capture_id] = _GraphHold(semaphore)
        hold.captures.append(capture)


def release_graphs() -> int:
    """Drop what the graphs destroyed since the last look kept (their plans and pinned buffers, back to
    PyTorch's host allocator); returns the number of graphs whose captures are still held. Calls on
    PyTorch's stream poll too, at most every _POLL_CALLS calls or _POLL_SECONDS (_poll_graphs); call it
    after destroying graphs to release their memory at once."""
    global _calls_since_poll, _last_poll
    if not _holds and not _retired_semaphores:
        return 0
    libc = _semaphores()
    value = ctypes.c_int(0)
    released: list[_GraphHold] = []
    with _holds_lock:
        _calls_since_poll, _last_poll = 0, time.monotonic()
        # retired one poll ago: sem_post has had a whole poll interval to return
        for semaphore in _retired_semaphores:
            libc.sem_destroy(semaphore)
        _free_semaphores.extend(_retired_semaphores)
        _retired_semaphores.clear()
        for capture_id, hold in list(_holds.items()):
            libc.sem_getvalue(hold.semaphore, ctypes.byref(value))
            if value.value > 0:   # posted: the graph and its instances are gone
                released.append(_holds.pop(capture_id))
        # never freed, reused from the next poll on (see _retired_semaphores)
        _retired_semaphores.extend(hold.semaphore for hold in released)
        left = len(_holds)
    for hold in released:
        hold.captures.clear()
    return left


def _poll_graphs() -> None:
    """release_graphs() from a call on PyTorch's stream while graphs are held: every _POLL_CALLS calls
    or once _POLL_SECONDS have passed since the last poll, whichever comes first (an unlocked counter:
    a lost increment between threads only delays a poll)."""
    global _calls_since_poll
    _calls_since_poll += 1
    if _calls_since_poll >= _POLL_CALLS or time.monotonic() - _last_poll >= _POLL_SECONDS:
        release_graphs()


def held_captures() -> int:
    """The number of calls' captures kept now (those of live graphs, and those kept for good)."""
    with _holds_lock:
        return sum(len(hold.captures) for hold in _holds.values()) + len(_kept_for_good)


_capture_workspaces: dict[tuple[int, int], torch.Tensor] = {}   # (GPU, stream handle) -> cuBLAS workspace
_capture_workspaces_lock = threading.Lock()


class TorchStream(CudaStream):
    """The device stream of one call: PyTorch's stream as CuPy wraps it, never closed or owned by the
    library, with the call's TorchCapture while PyTorch captures on it; what the capture keeps comes
    from PyTorch's allocators (see the module docstring)."""

    def __init__(self, cp_stream: Any, capture: TorchCapture | None, call: "TorchCall"):   # (CudaStream's makes one)
        self.cupy = cp_stream
        self.before_capture = None
        self.cublas_workspace = None
        self.capture = capture
        self.call = call

    def pinned_for_capture(self, nbytes: int) -> tuple[torch.Tensor, int]:
        """A pinned buffer for a captured upload (uploads.captured_upload): PyTorch's host allocator."""
        buffer = self.call.gpu.pinned(torch.empty(nbytes, dtype=torch.uint8))
        return buffer, buffer.data_ptr()

    def capture_workspace(self, cp: Any, nbytes: int) -> int:
        """The cuBLAS workspace of captured GEMMs on this PyTorch stream: one per GPU and stream, from
        PyTorch's allocator (the graph's pool when first made inside a capture), kept for the process."""
        call = self.call
        key = (call.index, int(call.stream.cuda_stream))
        with _capture_workspaces_lock:
            space = _capture_workspaces.get(key)   # never replaced: graphs captured before may use it
            if space is None:                        # (its size depends only on the GPU)
                space = _capture_workspaces[key] = call.gpu.empty((nbytes,), torch.uint8, call.torch_device)
        return space.data_ptr()

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- the call
class TorchCall:
    """One functional operator body run on PyTorch's stream (see the module docstring): the methods
    functional's bodies call on `Call` (`tensor`, `output`, `int_array`, `run`, `result`)."""

    def __init__(self, name: str, device: Any, gpu: Any, like: torch.Tensor, index: int):
        self.name = name
        self.device = device
        self.gpu = gpu
        self.torch_device = like.device
        self.index = index
        self.stream = gpu.current_stream(index)
        if _holds:   # what graphs destroyed since kept goes first (polled at a bounded rate)
            _poll_graphs()
        self.capture = TorchCapture() if gpu.capturing(self.stream, index) else None
        if self.capture is not None:   # kept from the start: a failed call's captured work stays in the graph
            _hold_for_graph(self.capture, device.cp, int(self.stream.cuda_stream))
        self.lent: list[tuple[Any, int]] = []
        self.keep: list[torch.Tensor] = []

    def _lend_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Lend the storage behind `tensor` for the call (the tensor itself, or a copy when the storage
        straddles a live allocation of the library)."""
        if tensor.numel() == 0:
            return tensor
        storage = tensor.untyped_storage()
        base, size = storage.data_ptr(), storage.nbytes()
        try:
            key = _lend(self.device.registry, base, size, tensor)
        except ValueError:
            tensor = tensor.clone()
            storage = tensor.untyped_storage()
            key = _lend(self.device.registry, storage.data_ptr(), storage.nbytes(), tensor)
        if key is not None:
            self.lent.append(key)
        self.keep.append(tensor)
        return tensor

    def _describe(self, tensor: torch.Tensor, fmt: int, name: str) -> aclTensor:
        numpy_dtype = _TO_NUMPY.get(tensor.dtype)
        if numpy_dtype is None:
            raise AclnnError(INVALID, f"{self.name}: {name} has unsupported dtype {tensor.dtype}")
        shape = tuple(tensor.shape)
        described = aclCreateTensor(shape, dtypes.from_numpy(numpy_dtype), tuple(tensor.stride()), 0, fmt, shape,
                                    tensor.data_ptr() if tensor.numel() else None)
        if described is None:
            raise AclnnError(INVALID, f"{self.name}: {name}: {aclGetRecentErrMsg()}")
        return described

    def tensor(self, array: Any, name: str, fmt: int = aclFormat.ACL_FORMAT_ND) -> aclTensor:
        if array is None:
            return None  # type: ignore[return-value]
        if not isinstance(array, torch.Tensor):
            raise AclnnError(INVALID, f"{self.name}: {name} must be a torch.Tensor, got {type(array).__name__}")
        tensor = array.detach()
        if not self.gpu.owns(tensor):   # a host tensor among GPU ones: copied, in stream order
            if self.capture is not None:   # the graph re-reads the source at every replay: pinned, kept
                tensor = self.gpu.pinned(tensor.contiguous())
                self.capture.keep.append(tensor)
            tensor = tensor.to(self.torch_device, non_blocking=True)
        elif tensor.device != self.torch_device:
            raise AclnnError(INVALID, f"{self.name}: expected all tensors to be on the same device, but found at "
                                      f"least two devices, {self.torch_device} and {tensor.device}")
        elif self.capture is None:
            self.gpu.record_stream(tensor, self.stream)
        return self._describe(self._lend_tensor(tensor), fmt, name)

    def output(self, shape: Sequence[int], dtype: np.dtype, fmt: int = aclFormat.ACL_FORMAT_ND
               ) -> tuple[aclTensor, torch.Tensor]:
        """A result: a new tensor from PyTorch's allocator, on the call's stream."""
        result = self.gpu.empty(tuple(int(s) for s in shape), _TO_TORCH[np.dtype(dtype)], self.torch_device)
        return self._describe(self._lend_tensor(result), fmt, "output"), result

    def int_array(self, values: Any, name: str) -> aclIntArray:
        from ..functional.arrays import int_list
        array = aclCreateIntArray(int_list(self.name, name, values))
        if array is None:
            raise AclnnError(INVALID, f"{self.name}: {name}: {aclGetRecentErrMsg()}")
        return array

    def run(self, get_workspace_size: Callable[..., Any], execute: Callable[..., int], *args: Any) -> None:
        """Phase 1, the workspace from PyTorch's allocator, phase 2 on PyTorch's stream; no wait."""
        # new descriptors at every call: never an executor_cache hit, so not offered to it (an entry would
        # keep the plan, and what it names, until the cache's bound evicts it)
        status, workspace_size, executor = getattr(get_workspace_size, "uncached", get_workspace_size)(*args)
        check_status(status)
        workspace = None
        if workspace_size:
            space = self._lend_tensor(self.gpu.empty((workspace_size,), torch.uint8, self.torch_device))
            workspace = space.data_ptr()
        impl = TorchStream(self.gpu.external(self.device.cp, self.stream, self.index), self.capture, self)
        check_status(execute(workspace, workspace_size, executor, aclrtStream(impl, self.device)))

    def result(self, handle: torch.Tensor) -> torch.Tensor:
        return handle

    def close(self) -> None:
        for registry, base in self.lent:
            _give_back(registry, base)
        self.lent = []
        self.keep = []


def call(function: Callable[..., Any], like: torch.Tensor, *args: Any) -> Any:
    """`function` (an `aclnn_gpu.functional` operator) over `args` on PyTorch's current stream of the GPU
    `like` lives on, results from PyTorch's allocator, without waiting. AclnnError as functional's."""
    body = inspect.unwrap(function)
    name = body.__name__
    gpu = _backend
    index = gpu.index(like)
    try:
        device = device_of(index)
        with using_device(device):
            torch_call = TorchCall(name, device, gpu, like, index)
            try:
                return body(torch_call, *args)
            finally:
                torch_call.close()
    except AclnnError:
        raise
    except OpError as e:
        raise AclnnError(e.status, f"{name}: {e.message}") from None
    except Exception as e:
        raise AclnnError(aclError.ACL_ERROR_INTERNAL_ERROR, f"{name}: internal error: {type(e).__name__}: {e}") from e


__all__ = ["TorchCuda", "TorchCall", "TorchCapture", "TorchStream", "backend", "set_backend", "runs_on_stream",
           "capturing_for", "call", "release_graphs", "held_captures"]
