"""The first call of every operator on a cold cache against its tenth call: one process, one device,
the demo's ten cases (aclnn_gpu/demo/), each call both phases and a synchronize with a fresh
executor. Run it with CUPY_CACHE_DIR and ACLNN_GPU_CACHE set to empty folders for a cold start, and
once with ACLNN_GPU_SHIPPED_KERNELS=0 to see what the shipped kernels save (scripts/gpu_check.sh does
both). Prints one JSON object: per operator the first and tenth call in ms and the kernel files the
first call loaded ("load") or compiled ("nvrtc"), read from the `aclnn_gpu` logger and CuPy's side.

    python scripts/cold_start.py [--device cuda|emulated] [--calls 10]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/cold_start.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="device kind (default cuda)")
    ap.add_argument("--calls", type=int, default=10, help="calls per operator; the last is the warm one")
    a = ap.parse_args(argv)
    os.environ["ACLNN_GPU_DEVICE"] = a.device
    import numpy as np

    import aclnn_gpu as acl
    from aclnn_gpu.demo import build_cases
    from aclnn_gpu.kernels import shipped
    from aclnn_gpu.demo.samples import DeviceArrays

    compiled: list[str] = []

    class Spy(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "compiled by NVRTC" in record.getMessage():
                compiled.append(record.getMessage())

    logging.getLogger("aclnn_gpu").addHandler(Spy())
    logging.getLogger("aclnn_gpu").setLevel(logging.INFO)
    loaded: list[str] = []
    load_module = shipped.load_module

    def spy_load(cp, file, arch):   # which files a call made ready, and how
        module = load_module(cp, file, arch)
        how = f"load {module.choice.target}" if isinstance(module, shipped.ShippedModule) else "nvrtc"
        loaded.append(f"{file}:{how}")
        return module

    shipped.load_module = spy_load   # device/cuda.py calls it through the module attribute
    t0 = time.perf_counter()
    if acl.aclrtSetDevice(0) != 0:
        print(json.dumps({"error": acl.aclGetRecentErrMsg()}))
        return 2
    rows = []
    with DeviceArrays() as session:
        session.malloc(1 << 20)   # the context and the memory pool: not part of any operator's first call
        setup_s = time.perf_counter() - t0
        for case, get_ws, execute, build_args in build_cases(np.random.default_rng(2026), a.device == "emulated"):
            args = build_args(session)
            times, first_loads = [], []
            for call in range(a.calls):
                del loaded[:]
                start = time.perf_counter()
                status, workspace, size, executor = session.prepare(get_ws, *args)
                status = status or execute(workspace, size, executor, session.stream) or \
                    acl.aclrtSynchronizeStream(session.stream)
                times.append((time.perf_counter() - start) * 1e3)
                if status:
                    raise RuntimeError(f"{case.name}: {acl.aclGetRecentErrMsg()}")
                acl.aclDestroyAclOpExecutor(executor)
                if call == 0:
                    first_loads = list(loaded)
            rows.append({"operator": case.name, "first_ms": round(times[0], 2), "tenth_ms": round(times[-1], 2),
                         "ratio": round(times[0] / times[-1], 1), "first_call_kernels": first_loads})
    print(json.dumps({"device": a.device, "shipped": os.environ.get(shipped.ENV, "1") != "0",
                      "cupy_cache": os.environ.get("CUPY_CACHE_DIR"), "setup_s": round(setup_s, 2),
                      "total_first_s": round(sum(r["first_ms"] for r in rows) / 1e3, 2),
                      "nvrtc_compiles": len(compiled), "operators": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
