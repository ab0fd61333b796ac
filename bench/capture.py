"""The "capture" table: what replaying a captured model (aclmdlRIExecuteAsync) costs on the host,
beside the direct execute calls it stands for.

Ten operators (forward and backward of the five families, tiny tensors, repeatable executors) are
captured once, alone (one model per operator) and as one sequence (one model of the ten). Timed:
- the cuda code path: the cuda device's code over `bench/instant_cupy.py`, whose launches and
  graph launches return at once, so a figure is the library's own Python per call, CuPy's
  cudaGraphLaunch excluded (the goal: at most 1 us per operator for the sequence);
- the cpu device: the calls and a stream synchronize (the NumPy work runs), per operator.
Per-call figures are medians over batches. Also run alone: `python -m bench.capture [--calls N]`.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from . import common
from .families import FAMILIES
from .host_overhead import InstantDevice, per_call_us

GOAL_US = 1.0   # host time per operator of a replayed sequence on the cuda code path


def _ok(ret: Any) -> Any:
    import aclnn_gpu as acl
    status = ret[0] if isinstance(ret, tuple) else ret
    assert status == 0, acl.aclGetRecentErrMsg()
    return ret[1] if isinstance(ret, tuple) else None


def capture(stream: Any, issue: Callable[[], None]) -> Any:
    """The model (aclmdlRI) of what `issue()` queues on `stream`."""
    import aclnn_gpu as acl
    _ok(acl.aclmdlRICaptureBegin(stream, acl.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL))
    try:
        issue()
    except BaseException:   # end the capture, so the stream (and every later measurement) is usable again
        status, model = acl.aclmdlRICaptureEnd(stream)
        if status == 0:
            acl.aclmdlRIDestroy(model)
        raise
    return _ok(acl.aclmdlRICaptureEnd(stream))


def measure(families: list, calls: int, batches: int, synchronize: bool) -> dict:
    """Per-operator microseconds of direct execute calls and of replays, on the process's device."""
    import aclnn_gpu as acl
    buffers = common.Buffers()
    stream = buffers.stream
    models: list[Any] = []
    after = (lambda: _ok(acl.aclrtSynchronizeStream(stream))) if synchronize else (lambda: None)

    def timed(fn: Callable[[], Any], per: int) -> float:
        if synchronize:   # the synchronize is part of each call: the work is done on the cpu device
            return per_call_us(lambda: (fn(), after()), calls, batches) / per
        return per_call_us(fn, calls, batches, after) / per
    try:
        rng = np.random.default_rng(1)
        ops = []
        for fam in families:
            p = fam.tiny()
            d = fam.data(p, np.dtype(np.float32), rng)
            ops += [(fam.forward, fam.ours(buffers, d, "forward", p)),
                    (fam.backward, fam.ours(buffers, d, "backward", p))]
        rows = []
        for name, op in ops:
            model = capture(stream, op.enqueue)
            models.append(model)
            rows.append({"operator": name, "direct_us": timed(op.enqueue, 1),
                         "replay_us": timed(lambda m=model: acl.aclmdlRIExecuteAsync(m, stream), 1)})

        def sequence() -> None:
            for _, op in ops:
                op.enqueue()
        model = capture(stream, sequence)
        models.append(model)
        n = len(ops)
        return {"rows": rows, "n": n, "sequence_direct_us": timed(sequence, n),
                "sequence_replay_us": timed(lambda: acl.aclmdlRIExecuteAsync(model, stream), n)}
    finally:
        after()
        for model in models:
            acl.aclmdlRIDestroy(model)
        buffers.close()


def run(families: list, calls: int = 200, batches: int = 9) -> dict:
    """Both tables: the cuda code path (instant CuPy) and the cpu device (the process's device, cpu)."""
    with InstantDevice():
        cuda = measure(families, calls, batches, synchronize=False)
    cpu = measure(families, max(calls // 10, 5), batches, synchronize=True)
    return {"cuda_code_path": cuda, "cpu": cpu, "goal_us": GOAL_US,
            "goal_met": cuda["sequence_replay_us"] <= GOAL_US}


def table(result: dict) -> str:
    cuda, cpu = result["cuda_code_path"], result["cpu"]
    rows = [[c["operator"], c["direct_us"], c["replay_us"], p["direct_us"], p["replay_us"]]
            for c, p in zip(cuda["rows"], cpu["rows"])]
    rows.append([f"sequence of the {cuda['n']}, per operator", cuda["sequence_direct_us"],
                 cuda["sequence_replay_us"], cpu["sequence_direct_us"], cpu["sequence_replay_us"]])
    verdict = "met" if result["goal_met"] else "NOT met"
    speedup = cuda["sequence_direct_us"] / max(cuda["sequence_replay_us"], 1e-9)
    return (common.markdown_table(["operator", "cuda code path: execute", "cuda code path: replay",
                                   "cpu: execute + sync", "cpu: replay + sync"], rows, "lrrrr")
            + f"\n\nReplay of the captured sequence on the cuda code path: {cuda['sequence_replay_us']:.3f} us per "
              f"operator ({speedup:.0f}x less than the direct calls), CuPy's graph launch excluded; goal <= "
              f"{result['goal_us']:.0f} us: {verdict}.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.capture",
                                 description="Host cost of replaying captured models (aclmdlRIExecuteAsync) beside "
                                             "the direct calls, on the cuda code path and on the cpu device.")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed batch (default 200)")
    args = ap.parse_args(argv)
    common.setup_device("cpu")
    print(table(run(FAMILIES, args.calls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
