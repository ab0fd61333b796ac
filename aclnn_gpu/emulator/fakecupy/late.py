"""The late stand-in's settings (ACLNN_GPU_EMU_LATE=1, seeded by ACLNN_GPU_EMU_LATE_SEED): what a GPU
does and the prompt host queues do not (docs/TESTING.md):
- each stream's batch of work starts after a random delay (seeded, printed): a launch, an async copy
  or memset returns before the device has done it, and work of different streams may run in any
  order (CUDA Programming Guide, "Asynchronous Concurrent Execution", streams);
- a pageable host source of cudaMemcpyAsync is read at the call, a pinned one when the copy runs
  (runtime.py, memcpyAsync);
- cupy.cuda.alloc is CuPy's pool (emulator/fakepool.py, through memory.py): freed chunks poisoned and
  handed out again in cupy/cuda/memory.pyx's order;
- the legacy stream orders with the blocking streams both ways (streams.py, Stream._late_order), and
  cudaMemcpy / cudaMemset run on it.
Whether it is on is streams.py's (`set_late`); capture modes (streams.py, `_unsafe`) apply late or not.
"""
from __future__ import annotations

import os
import random
import sys
import threading
import time


class LateRules:
    """The late stand-in's settings: its seed and the range of each batch's delay (seconds)."""

    def __init__(self, seed: int, max_delay: float = 0.002, min_delay: float = 0.0):
        self.seed = seed
        self.min_delay, self.max_delay = min_delay, max_delay
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def delay(self) -> None:
        with self._lock:
            seconds = self._random.uniform(self.min_delay, self.max_delay)
        if seconds > 0:
            time.sleep(seconds)



def late_from_environment() -> LateRules | None:
    """ACLNN_GPU_EMU_LATE=1, seeded by ACLNN_GPU_EMU_LATE_SEED. Without a seed one is drawn, printed
    (stderr) and put in the environment, so the processes this one starts share it and print nothing."""
    if os.environ.get("ACLNN_GPU_EMU_LATE", "") in ("", "0"):
        return None
    seed_text = os.environ.get("ACLNN_GPU_EMU_LATE_SEED", "")
    if seed_text:
        return LateRules(int(seed_text))
    seed = random.SystemRandom().randrange(1 << 31)
    os.environ["ACLNN_GPU_EMU_LATE_SEED"] = str(seed)
    print(f"aclnn_gpu emulated device: late stand-in on, ACLNN_GPU_EMU_LATE_SEED={seed}", file=sys.stderr)
    return LateRules(seed)

