"""The CPU emulator of CUDA kernels: the project's `.cu` files, unchanged, compiled with g++ against
`emu.h` and launched on host memory with CuPy's call shape.

Modules:
  emu.h      the CUDA device language on the CPU (fibers per CUDA thread; -DEMU_THREADS: OS threads)
  build.py   source rewrite, launch glue, g++ command lines, precompiled header, the build cache
  driver.py  EmuModule / EmuKernel (cupy.RawModule / RawKernel shape), argument packing, errors
  record.py  recording launches (ACLNN_GPU_EMU_RECORD) for the ThreadSanitizer replay
  sanitize.py `python -m aclnn_gpu.emulator.sanitize [pytest args]`: ASan+UBSan test run
  tsan.py    `python -m aclnn_gpu.emulator.tsan DIR`: ThreadSanitizer replay of a recording
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
