"""The CPU emulator of CUDA (layer 5 of docs/DESIGN.md, "Import layers": it imports only base,
reference, kernels and the host machinery): the project's `.cu` files, unchanged, compiled with g++
against `emu.h` and launched on host memory with CuPy's call shape, and the CuPy stand-in the
emulated device runs the cuda device's code over.

Modules:
  emu.h, include/  the CUDA device language on the CPU (fibers per CUDA thread; -DEMU_THREADS: OS
             threads), and the CUDA headers the kernels include
  build.py   source rewrite, launch glue, g++ command lines, precompiled header, the build cache
  driver.py  EmuModule / EmuKernel (cupy.RawModule / RawKernel shape), argument packing, errors
  context.py StandaloneEmuContext: NumPy memory for the kernels' unit tests
  fakecupy/  the CuPy stand-in (streams, events, graphs, memory, runtime, cuda-bindings calls,
             RawModule) the emulated device runs on
  fakepool.py the late stand-in's CuPy memory pool (ACLNN_GPU_EMU_LATE=1)
  record.py  recording launches (ACLNN_GPU_EMU_RECORD) for the ThreadSanitizer replay
  sanitize.py `python -m aclnn_gpu.emulator.sanitize [pytest args]`: ASan+UBSan test run
  tsan.py    `python -m aclnn_gpu.emulator.tsan DIR`: ThreadSanitizer replay of a recording (replay_main.cpp)
  profile_rt.cpp, profiling.py  the memory profiler's trace runtime (C++) and its Python side

Environment: ACLNN_GPU_CACHE (cache root, default ~/.cache/aclnn_gpu), ACLNN_GPU_EMU_SANITIZE=address,
ACLNN_GPU_EMU_PROFILE=1 (profiling build: clang++, see build.py and profiling.py),
ACLNN_GPU_EMU_RECORD=<dir>, EMU_SCHED_REVERSE=1 (run fibers in reverse order), EMU_STACK_KB (fiber
stack size, default 128).
"""
from .build import EmuBuildError
from .driver import (EmuArgumentError, EmuDeadlockError, EmuError, EmuKernel, EmuLaunchError,
                     EmuModule)
from .record import record_to, set_memory_resolver

__all__ = ["EmuArgumentError", "EmuBuildError", "EmuDeadlockError", "EmuError", "EmuKernel",
           "EmuLaunchError", "EmuModule", "record_to", "set_memory_resolver"]
