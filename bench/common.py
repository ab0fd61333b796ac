"""Shared benchmark helpers: device selection, repeatable executors over preallocated buffers,
timing (CPU wall clock in separate blocks; GPU events with the L2 cache flushed and inputs
rotated), the device's measured copy bandwidth and matrix throughput, Markdown tables, JSON, and a
small text progress bar. Used by `bench/run.py` (`python -m bench`) and the per-operator scripts.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------------------------- devices
def detect_device(requested: str | None) -> str:
    """The device kind to benchmark: the one asked for, else cuda when CuPy sees a GPU, else cpu."""
    if requested:
        return requested
    try:
        import cupy
        return "cuda" if cupy.cuda.runtime.getDeviceCount() > 0 else "cpu"
    except Exception:  # noqa: BLE001 - no CuPy or no driver: the cpu device
        return "cpu"


def setup_device(requested: str | None) -> str:
    """Select the aclnn_gpu device (ACLNN_GPU_DEVICE + aclrtSetDevice) and return its kind."""
    kind = detect_device(requested)
    os.environ["ACLNN_GPU_DEVICE"] = kind
    import aclnn_gpu as acl
    if acl.aclrtSetDevice(0) != 0:
        raise SystemExit(f"aclrtSetDevice failed: {acl.aclGetRecentErrMsg()}")
    return acl.current_device_kind()


def torch_device(kind: str) -> str:
    return "cuda" if kind == "cuda" else "cpu"


def torch_dtype(torch: Any, dt: Any) -> Any:
    from aclnn_gpu.base import dtypes
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
            dtypes.bfloat16: torch.bfloat16, np.dtype(np.float64): torch.float64,
            np.dtype(np.int64): torch.int64, np.dtype(np.bool_): torch.bool}[np.dtype(dt)]


def to_torch(torch: Any, a: np.ndarray, device: str) -> Any:
    """A torch tensor with the values and dtype of a NumPy array (bfloat16 included)."""
    from aclnn_gpu.base import dtypes
    a = np.ascontiguousarray(a)
    if a.dtype == dtypes.bfloat16:
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a.copy())
    return t.to(device)


# ------------------------------------------------------------------ our operators, two-phase
class Buffers:
    """Device buffers, tensors and a stream owned by one benchmark case (DeviceArrays underneath)."""

    def __init__(self) -> None:
        from aclnn_gpu.demo.samples import DeviceArrays
        self.session = DeviceArrays()
        self.stream = self.session.stream
        self.executors: list[Any] = []

    def malloc(self, nbytes: int) -> int:
        return self.session.malloc(nbytes)

    def tensor(self, array: Any) -> Any:
        return self.session.tensor(np.ascontiguousarray(array))

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        return self.session.tensor(np.zeros(tuple(shape), np.dtype(dtype)))

    def int_array(self, values: Iterable[int]) -> Any:
        return self.session.int_array(list(values))

    def read(self, tensor: Any) -> np.ndarray:
        return self.session.read(tensor)

    def op(self, get_ws: Callable, execute: Callable, *args: Any) -> "Op":
        op = Op(self, get_ws, execute, *args)
        self.executors.append(op)
        return op

    def close(self) -> None:
        import aclnn_gpu as acl
        acl.aclrtSynchronizeStream(self.stream)
        for op in self.executors:
            op.close()
        self.executors = []
        self.session.close()


class Op:
    """A repeatable executor over preallocated buffers. `enqueue()` is the execute call alone
    (asynchronous); calling the object runs execute + aclrtSynchronizeStream."""

    def __init__(self, buffers: Buffers, get_ws: Callable, execute: Callable, *args: Any) -> None:
        import aclnn_gpu as acl
        self.acl, self.b, self.execute = acl, buffers, execute
        status, self.ws, self.ex = get_ws(*args)
        assert status == 0, acl.aclGetRecentErrMsg()
        assert acl.aclSetAclOpExecutorRepeatable(self.ex) == 0, acl.aclGetRecentErrMsg()
        self.work = buffers.malloc(self.ws) if self.ws else None
        self.closed = False

    def enqueue(self) -> None:
        assert self.execute(self.work, self.ws, self.ex, self.b.stream) == 0, self.acl.aclGetRecentErrMsg()

    def sync(self) -> None:
        assert self.acl.aclrtSynchronizeStream(self.b.stream) == 0, self.acl.aclGetRecentErrMsg()

    def __call__(self) -> None:
        self.enqueue()
        self.sync()

    def close(self) -> None:
        if not self.closed:
            self.acl.aclDestroyAclOpExecutor(self.ex)
            self.closed = True


# ---------------------------------------------------------------------------------- timing
def median_ms(fn: Callable[[], Any], *, warmup: int = 2, reps: int = 7, budget_s: float = 3.0,
              pause_s: float = 0.3, min_reps: int = 3) -> float:
    """Median wall time (ms) of `fn` (which must include its own synchronize), in its own block
    after a pause: on a small CPU, PyTorch's OpenMP threads and OpenBLAS's threads spin-wait after
    their parallel regions, so interleaving the libraries call by call slows whichever runs next.
    Stops after `reps` runs, or after `budget_s` once `min_reps` runs are in."""
    return statistics.median(sample_ms(fn, warmup=warmup, reps=reps, budget_s=budget_s, pause_s=pause_s,
                                       min_reps=min_reps))


def sample_ms(fn: Callable[[], Any], *, warmup: int = 2, reps: int = 7, budget_s: float = 3.0,
              pause_s: float = 0.3, min_reps: int = 3) -> list[float]:
    if pause_s:
        time.sleep(pause_s)
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def medians_ms(*fns: Callable[[], Any], **kw: Any) -> list[float]:
    """`median_ms` of each fn, one block after the other."""
    return [median_ms(fn, **kw) for fn in fns]


def gpu_event_ms(fn: Callable[[], Any], reps: int, *, warmup: int = 3, flush: bool = True) -> float:
    """Median CUDA-event time (ms) of `fn` on the current CuPy stream, after warm-up; with `flush`, a
    buffer of 8x the L2 size is written before each run so no run finds its inputs in L2. The events
    and the flush go on the legacy default stream; the library's aclrt streams are blocking streams,
    so the end event waits for what `fn` enqueued there and the flush finishes before it starts."""
    import cupy as cp
    buf = None
    if flush:
        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id).get("l2CacheSize", 50 << 20)
        buf = cp.empty(max(256 << 20, 8 * int(l2)), cp.uint8)
    for _ in range(warmup):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for i in range(reps):
        if buf is not None:
            buf.fill(i & 0xFF)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


class GpuTimer:
    """Device-event timing on a GPU: before each timed run the L2 cache is flushed by writing a
    buffer several times its size, and the inputs are rotated among several copies (`fns[i % k]`),
    so no run finds its data in cache. Medians of event-measured times, after warm-up."""

    def __init__(self, flush_bytes: int = 512 << 20) -> None:
        import cupy as cp
        self.cp = cp
        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id).get("l2CacheSize", 50 << 20)
        self.flush = cp.empty(max(flush_bytes, 8 * int(l2)), cp.uint8)

    def cupy_ms(self, enqueues: Sequence[Callable[[], Any]], stream: Any, *, warmup: int = 3, reps: int = 20) -> float:
        """`enqueues`: one per input copy, each putting the work on cupy stream `stream`."""
        cp = self.cp
        for i in range(warmup):
            enqueues[i % len(enqueues)]()
        stream.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for i in range(reps):
            with stream:
                self.flush.fill(i & 0xFF)
            start.record(stream)
            enqueues[i % len(enqueues)]()
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return statistics.median(times)

    def torch_ms(self, fns: Sequence[Callable[[], Any]], *, warmup: int = 3, reps: int = 20) -> float:
        import torch
        flush = torch.empty(self.flush.size, dtype=torch.uint8, device="cuda")
        for i in range(warmup):
            fns[i % len(fns)]()
        torch.cuda.synchronize()
        times = []
        for i in range(reps):
            flush.fill_(i & 0xFF)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[i % len(fns)]()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        del flush
        return statistics.median(times)


# ------------------------------------------------------------------------- device ceilings
def measure_ceilings(kind: str, quick: bool = False) -> dict[str, float]:
    """The device's copy bandwidth (GB/s, bytes read + written) and fp32 matrix throughput
    (GFLOP/s), measured now. CPU: a large np.copyto and a large fp32 np.matmul; GPU: a CuPy
    device-to-device copy of 1 GiB and a cuBLAS GEMM (fp32, and TF32/bf16)."""
    if kind == "cuda":
        import cupy as cp
        timer = GpuTimer()
        stream = cp.cuda.Stream(non_blocking=True)
        n = 1 << 30
        src, dst = cp.empty(n, cp.uint8), cp.empty(n, cp.uint8)

        def copy():
            with stream:
                dst[...] = src   # noqa: F821 - runs before the `del` below
        copy_ms = timer.cupy_ms([copy], stream, reps=5 if quick else 20)
        del src, dst
        out = {"copy_GBps": 2 * n / copy_ms / 1e6}
        m = 8192
        for label, dt in (("fp32", cp.float32), ("fp16", cp.float16)):
            a, b = cp.ones((m, m), dt), cp.ones((m, m), dt)

            def mm():
                with stream:
                    cp.matmul(a, b)
            out[f"matmul_{label}_GFLOPs"] = 2 * m ** 3 / timer.cupy_ms([mm], stream, reps=5 if quick else 10) / 1e6
            del a, b
        out["matmul_GFLOPs"] = out["matmul_fp32_GFLOPs"]
        return out
    n = (64 << 20) // 4                                  # 256 MiB per array, far beyond any cache
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    copy_ms = min(sample_ms(lambda: np.copyto(dst, src), warmup=1, reps=5, budget_s=2.0, pause_s=0.1))  # noqa: F821
    del src, dst
    m = 2048
    a = np.ones((m, m), np.float32)
    b = np.ones((m, m), np.float32)
    mm_ms = min(sample_ms(lambda: np.matmul(a, b), warmup=1, reps=5, budget_s=2.0, pause_s=0.1))
    return {"copy_GBps": 2 * n * 4 / copy_ms / 1e6, "matmul_GFLOPs": 2 * m ** 3 / mm_ms / 1e6}


# ---------------------------------------------------------------------------------- output
def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A Markdown table; `align` is one char per column: 'l' or 'r' (default: numbers right)."""
    rows = [[_cell(v) for v in row] for row in rows]
    align = align or "".join("r" if rows and _numeric(rows[0][i]) else "l" for i in range(len(headers)))
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        a = abs(v)
        return f"{v:.3g}" if a < 0.01 and a else f"{v:.3f}" if a < 10 else f"{v:.2f}" if a < 100 else f"{v:.1f}" \
            if a < 1e4 else f"{v:.0f}"
    return str(v)


def _numeric(s: str) -> bool:
    try:
        float(s.rstrip("%x"))
        return True
    except ValueError:
        return False


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=_json_default) + "\n")


def _json_default(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def geomean(values: Sequence[float]) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


class Progress:
    """A one-line text progress bar on stderr: redrawn in place with \\r on a terminal; elsewhere
    (CI logs) a line per 10% step, so logs stay short and readable."""

    def __init__(self, total: int, label: str = "bench", stream: Any = None, width: int = 28) -> None:
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.done, self.start, self.last_decile = 0, time.perf_counter(), -1

    def step(self, what: str = "", n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        self._draw(what)

    def note(self, what: str) -> None:
        """Show what runs next without advancing."""
        if self.tty:
            self._draw(what)

    def _draw(self, what: str) -> None:
        frac = self.done / self.total
        elapsed = time.perf_counter() - self.start
        if self.tty:
            filled = int(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            line = f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.0f}s {what}"
            cols = 100
            try:
                cols = os.get_terminal_size(self.stream.fileno()).columns
            except (OSError, ValueError, AttributeError):
                pass
            self.stream.write(line[:cols - 1].ljust(cols - 1))
            self.stream.flush()
        else:
            decile = int(frac * 10)
            if decile != self.last_decile or self.done == self.total:
                self.last_decile = decile
                self.stream.write(f"{self.label}: {100 * frac:3.0f}% ({self.done}/{self.total}, "
                                  f"{elapsed:.0f}s) {what}\n")
                self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
