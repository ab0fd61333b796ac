"""`CudaKernelContext`: the KernelContext of a plan running on one stream of a CudaDevice
(`device/cuda.py`), and its replay of a frozen launch (`run_frozen`: the host hot path of phase 2).
Layer 8, devices.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

import numpy as np

from ..plans.frozen import Launch, Upload
from .cuda_streams import CudaStream
from .uploads import captured_upload


# The kinds of a replay program's entries (CudaKernelContext._program); compared by identity.
_GEMM, _LAUNCH, _UPLOAD, _HOST_GEMM = "gemm", "launch", "upload", "host gemm"


class CudaKernelContext:
    """The KernelContext of a plan running on one stream of a CudaDevice."""

    def __init__(self, device: Any, stream: CudaStream):   # device: its CudaDevice
        self.device = device
        self.stream = stream
        self.sm_count = device.sm_count   # of the device that runs the plan (not device 0's)
        self.arch = device.arch           # its occupancy limits size grids (kernels/occupancy.py)

    def upload(self, dst: int, host: np.ndarray) -> None:
        self.upload_at(dst, host, None)

    def upload_at(self, dst: int, host: np.ndarray, address: int | None) -> None:
        """`upload`, told the address of `host`'s C-contiguous bytes (a frozen launch's tables: plans/frozen.py)."""
        capture = self.stream.capture
        if capture is None:
            self.device.uploads.upload(dst, host, self.stream.cupy, address)
        else:   # the graph re-reads its source at every replay: a pinned copy the model keeps
            capture.keep.append(captured_upload(self.device.cp, dst, host, self.stream.cupy,
                                                self.stream.pinned_for_capture))

    def run_frozen(self, frozen: Any, workspace: int) -> None:
        """A frozen launch replayed on this device (`plans/frozen.run_plan`): the same steps in the same order
        with the same CuPy and cuBLAS calls as `launch`, `upload_at` and the GEMMs make, without their layers
        (the hot loop of phase 2). The steps are resolved once per (workspace, stream, cuBLAS handle) into a
        replay program (`_program`, kept on the frozen launch: FrozenLaunch.find_program / keep_program, a few
        per launch, so threads or streams taking turns do not rebuild theirs): a kernel launch is the kernel
        object and its argument tuple, a GEMM one C call on an argument tuple with the handle in front
        (`Gemm.native`'s arguments, built once: a tuple made per call costs a fifth of the call). The handle's
        stream and workspace are settled once per execute, before the first step (`CudaDevice.cublas`)."""
        device = self.device
        handle: Any = device.cublas(self.stream) if frozen.gemms and device.native_gemm else None
        key, program = frozen.program
        if key is None or key[0] != workspace or key[1]() is not self or key[2] is not handle:
            # another thread's or stream's, kept (a weak reference compares as its live referent)
            program = frozen.find_program((workspace, weakref.ref(self), handle))
            if program is None:
                program = self._program(frozen, workspace, handle)
        stream, gemm, launch = self.stream.cupy, _GEMM, _LAUNCH   # (locals: the loop's lookups are its cost)
        for kind, call, arguments in program:
            if kind is gemm:
                status = call(*arguments)
                if status:
                    handle.check(status, "cublasGemmStridedBatchedEx" if call is handle.strided
                                 else "cublasGemmBatchedEx")
            elif kind is launch:
                grid, block, args, shared_mem = arguments
                if shared_mem > 48 * 1024:
                    call.max_dynamic_shared_size_bytes = shared_mem
                call(grid, block, args, shared_mem=shared_mem, stream=stream)
            elif kind is _UPLOAD:
                self.upload_at(*arguments)
            else:   # a GEMM of the device's own (the emulated device: NumPy on its stream)
                batched, args, kwargs = arguments
                (device.gemm_batched if batched else device.gemm)(self.stream, *args, **kwargs)

    def _program(self, frozen: Any, workspace: int, handle: Any) -> tuple:
        """`run_frozen`'s replay program of `frozen` at `workspace` on this context's stream with `handle`
        (None: no cuBLAS GEMM), kept on `frozen` (one tuple: threads see a whole one). Loads the kernel
        modules the launch list needs at its first use."""
        device = self.device
        kernels = device._kernels
        program: list[tuple] = []
        for step in frozen.steps:
            kind = type(step)
            if kind is Launch:
                kernel = kernels.get(step.kernel_key)
                if kernel is None:   # a first call: every kernel file the launch list needs, loaded together
                    device.load_modules(s.file for s in frozen.steps if type(s) is Launch)
                    kernel = device.kernel(step.file, step.expr)
                program.append((_LAUNCH, kernel, (step.grid, step.block, step.rebased(workspace), step.shared_mem)))
            elif kind is Upload:
                data, address = step.rebased_at(workspace)
                program.append((_UPLOAD, None, (workspace + step.offset, data, address)))
            elif handle is not None:
                arguments = step.native(workspace, handle.ints)
                if arguments is not None:   # (None: an empty product, no call)
                    program.append((_GEMM, handle.batched if step.batched else handle.strided,
                                    (handle.handle, *arguments)))
            else:
                program.append((_HOST_GEMM, None, (step.batched, step.rebased(workspace), step.kwargs)))
        resolved = tuple(program)
        # the context by weak reference: a cached launch must not keep a stream alive, nor what the
        # stream holds (a PyTorch stream's capture and the plans it keeps until its graph goes)
        frozen.keep_program((workspace, weakref.ref(self), handle), resolved)
        return resolved

    def launch(self, file: str, expr: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               shared_mem: int = 0) -> None:
        kernel = self.device.kernel(file, expr)
        if shared_mem > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = shared_mem
        # on the plan's stream given by name: what `with stream:` makes current, without making it
        # current (CuPy 14: RawKernel.__call__ hands `stream` to Function.__call__, cupy/cuda/function.pyx)
        kernel(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem, stream=self.stream.cupy)

    def gemm_strided_batched(self, *args: Any, **kwargs: Any) -> None:
        self.device.gemm(self.stream, *args, **kwargs)

    def gemm_batched(self, *args: Any, **kwargs: Any) -> None:
        self.device.gemm_batched(self.stream, *args, **kwargs)
