#!/usr/bin/env python3
"""Capture a training step once, replay it every step (ACL graphs: aclmdlRICaptureBegin / End,
aclmdlRIExecuteAsync), and compare it with the same step made of direct calls.

The model is a linear classifier written with two of the library's operator families: a ConvTbc
with a kernel of width 1 is a linear layer over (T, B, features), and CrossEntropyLoss turns its
logits into the loss. One step, queued on a stream:
  1. asynchronous copies of the batch (features, targets) and of the weights from pinned host
     memory (aclrtMallocHost) into device memory;
  2. aclnnConvTbc -> aclnnCrossEntropyLoss (forward), aclnnCrossEntropyLossGrad ->
     aclnnConvTbcBackward (backward);
  3. asynchronous copies of the loss and the weight gradients back into pinned host memory.
The host then applies SGD to its copy of the weights and writes the next batch into the same
pinned buffers, so the captured copies carry the new values into the next replay.

Two runs from the same initial weights: direct calls every step, then the captured model replayed
every step. The losses must agree bit for bit; the time per step of each is printed.

    python examples/capture_training_step.py [--steps N]
ACLNN_EXAMPLE_STEPS overrides the default step count (the tests use it to keep CI fast).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import aclnn_gpu as acl

T, B, FEATURES, CLASSES = 8, 16, 16, 4      # N = T * B = 128 samples per batch
LR = 0.5
H2D, D2H, H2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST, acl.ACL_MEMCPY_HOST_TO_HOST


def check(ret, call: str):
    """The value of an ACL call that returns (status, value), or its status; stop at a failure."""
    status = ret[0] if isinstance(ret, tuple) else ret
    if status != acl.ACL_SUCCESS:
        raise SystemExit(f"{call} failed with {int(status)}: {acl.aclGetRecentErrMsg()}")
    return ret[1] if isinstance(ret, tuple) and len(ret) == 2 else ret


class Buffer:
    """Device memory and the pinned host memory that feeds it or receives it."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = max(int(np.prod(self.shape)) * self.dtype.itemsize, 1)
        self.device = check(acl.aclrtMalloc(self.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc")
        self.host = check(acl.aclrtMallocHost(self.nbytes), "aclrtMallocHost")

    def tensor(self, shape=None):
        shape = list(self.shape if shape is None else shape)
        tensor = acl.aclCreateTensor(shape, {np.float32: acl.ACL_FLOAT, np.int64: acl.ACL_INT64}[self.dtype.type],
                                     None, 0, acl.ACL_FORMAT_ND, shape, self.device)
        if tensor is None:
            raise SystemExit(f"aclCreateTensor: {acl.aclGetRecentErrMsg()}")
        return tensor

    def write_host(self, array):   # the host side of the pinned buffer (a host-to-host copy)
        array = np.ascontiguousarray(array, self.dtype)
        check(acl.aclrtMemcpy(self.host, self.nbytes, array, array.nbytes, H2H), "aclrtMemcpy")

    def read_host(self):
        out = np.empty(self.shape, self.dtype)
        check(acl.aclrtMemcpy(out, out.nbytes, self.host, out.nbytes, H2H), "aclrtMemcpy")
        return out

    def upload(self, stream):
        check(acl.aclrtMemcpyAsync(self.device, self.nbytes, self.host, self.nbytes, H2D, stream), "aclrtMemcpyAsync")

    def download(self, stream):
        check(acl.aclrtMemcpyAsync(self.host, self.nbytes, self.device, self.nbytes, D2H, stream), "aclrtMemcpyAsync")

    def free(self):
        check(acl.aclrtFree(self.device), "aclrtFree")
        check(acl.aclrtFreeHost(self.host), "aclrtFreeHost")


class Step:
    """The buffers, tensors and repeatable executors of one training step (see the module docstring)."""

    def __init__(self):
        N = T * B
        self.x, self.target = Buffer((T, B, FEATURES), np.float32), Buffer((N,), np.int64)
        self.weight, self.bias = Buffer((1, FEATURES, CLASSES), np.float32), Buffer((CLASSES,), np.float32)
        self.logits, self.loss = Buffer((T, B, CLASSES), np.float32), Buffer((), np.float32)
        self.log_prob, self.grad_logits = Buffer((N, CLASSES), np.float32), Buffer((N, CLASSES), np.float32)
        self.one = Buffer((), np.float32)
        self.grad_x, self.grad_weight = Buffer((T, B, FEATURES), np.float32), Buffer((1, FEATURES, CLASSES), np.float32)
        self.grad_bias = Buffer((CLASSES,), np.float32)
        self.one.write_host(np.ones((), np.float32))
        self.buffers = [self.x, self.target, self.weight, self.bias, self.logits, self.loss, self.log_prob,
                        self.grad_logits, self.one, self.grad_x, self.grad_weight, self.grad_bias]
        logits_2d = self.logits.tensor((N, CLASSES))   # the same memory seen as (N, classes)
        grad_logits_3d = self.grad_logits.tensor((T, B, CLASSES))
        self.tensors = [self.x.tensor(), self.target.tensor(), self.weight.tensor(), self.bias.tensor(),
                        self.logits.tensor(), logits_2d, self.loss.tensor(), self.log_prob.tensor(),
                        self.grad_logits.tensor(), grad_logits_3d, self.one.tensor(), self.grad_x.tensor(),
                        self.grad_weight.tensor(), self.grad_bias.tensor()]
        (x, target, weight, bias, logits, logits2, loss, log_prob, grad_logits, grad_logits3, one, grad_x, grad_weight,
         grad_bias) = self.tensors
        self.calls = [
            self._executor(acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, x, weight, bias, 0, logits, 0),
            self._executor(acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, logits2, target,
                           None, "mean", -100, 0.0, 0.0, False, loss, log_prob, None, None),
            self._executor(acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad, one, log_prob,
                           target, None, None, None, "mean", -100, 0.0, 0.0, grad_logits),
            self._executor(acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward, grad_logits3, x, weight,
                           bias, 0, 0, grad_x, grad_weight, grad_bias),
        ]

    def _executor(self, get_workspace_size, execute, *args):
        _, size, executor = check(get_workspace_size(*args), get_workspace_size.__name__)
        check(acl.aclSetAclOpExecutorRepeatable(executor), "aclSetAclOpExecutorRepeatable")
        workspace = check(acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc") if size else None
        return execute, workspace, size, executor

    def issue(self, stream):
        """Queue one whole step on `stream` (captured once, or called every step)."""
        for buffer in (self.x, self.target, self.weight, self.bias, self.one):
            buffer.upload(stream)
        for execute, workspace, size, executor in self.calls:
            check(execute(workspace, size, executor, stream), execute.__name__)
        for buffer in (self.loss, self.grad_weight, self.grad_bias):
            buffer.download(stream)

    def close(self):
        for _, workspace, _, executor in self.calls:
            check(acl.aclDestroyAclOpExecutor(executor), "aclDestroyAclOpExecutor")
            if workspace:
                check(acl.aclrtFree(workspace), "aclrtFree")
        for tensor in self.tensors:
            check(acl.aclDestroyTensor(tensor), "aclDestroyTensor")
        for buffer in self.buffers:
            buffer.free()


def train(step: Step, stream, steps: int, run_step) -> tuple[list[float], float]:
    """SGD from the same start for `steps` steps; (losses, seconds per step). `run_step()` queues a step."""
    rng = np.random.default_rng(0)
    true_weight = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    weight, bias = np.zeros((1, FEATURES, CLASSES), np.float32), np.zeros(CLASSES, np.float32)
    losses, elapsed = [], 0.0
    for _ in range(steps):
        x = rng.standard_normal((T, B, FEATURES)).astype(np.float32)
        step.x.write_host(x)
        step.target.write_host((x.reshape(-1, FEATURES) @ true_weight).argmax(1))
        step.weight.write_host(weight)
        step.bias.write_host(bias)
        start = time.perf_counter()
        run_step()
        check(acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
        elapsed += time.perf_counter() - start
        losses.append(float(step.loss.read_host()))
        weight = weight - LR * step.grad_weight.read_host()
        bias = bias - LR * step.grad_bias.read_host()
    return losses, elapsed / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--steps", type=int, default=int(os.environ.get("ACLNN_EXAMPLE_STEPS", "200")),
                        help="training steps of each run, direct and replayed (default 200, or ACLNN_EXAMPLE_STEPS)")
    steps = parser.parse_args().steps
    check(acl.aclInit(None), "aclInit")
    check(acl.aclrtSetDevice(0), "aclrtSetDevice")
    stream = check(acl.aclrtCreateStream(), "aclrtCreateStream")
    step = Step()

    direct, direct_s = train(step, stream, steps, lambda: step.issue(stream))

    check(acl.aclmdlRICaptureBegin(stream, acl.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), "aclmdlRICaptureBegin")
    step.issue(stream)                                     # recorded, not run
    model = check(acl.aclmdlRICaptureEnd(stream), "aclmdlRICaptureEnd")
    replayed, replay_s = train(step, stream, steps, lambda: check(acl.aclmdlRIExecuteAsync(model, stream),
                                                                  "aclmdlRIExecuteAsync"))
    check(acl.aclmdlRIDestroy(model), "aclmdlRIDestroy")

    for i in sorted({0, steps // 4, steps // 2, steps - 1}):
        print(f"step {i:4d}  loss {direct[i]:.6f} (direct)  {replayed[i]:.6f} (replayed)")
    if direct != replayed:
        raise SystemExit("the replayed steps' losses differ from the direct steps' losses")
    if steps >= 4 and not direct[-1] < direct[0]:
        raise SystemExit(f"the loss did not decrease: {direct[0]} -> {direct[-1]}")
    print(f"time per step on {acl.current_device_kind()}: direct calls {direct_s * 1e6:.0f} us, "
          f"captured and replayed {replay_s * 1e6:.0f} us ({direct_s / replay_s:.2f}x); losses identical over "
          f"{steps} steps")
    step.close()
    check(acl.aclrtDestroyStream(stream), "aclrtDestroyStream")
    check(acl.aclrtResetDevice(0), "aclrtResetDevice")
    check(acl.aclFinalize(), "aclFinalize")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
