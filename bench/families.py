"""The operator families the benchmarks time: for each, its shape ladder, host inputs, this
library's call, PyTorch's counterpart and the minimum work a call must do. `bench/run.py` and the
sections it prints (`capture`, `host_overhead`, `pythonic`, `cpu_gap`) all time these.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import common

F32 = np.dtype(np.float32)
SCALE = 0.125


# ----------------------------------------------------------------------------- operators
class Family:
    """One operator family. `params(e)`: the shape parameters at ladder position e in [0, 1] (the
    problem grows 100x from e=0 to e=1); `data` makes the host inputs; `ours` and `torch` build a
    runnable call for one direction; `work` is the minimum bytes (or FLOPs) the call must move."""
    name = ""
    forward = backward = ""
    metric = "bytes"

    def params(self, e: float) -> tuple: ...
    def tiny(self) -> tuple: ...
    def emulated(self, e: float) -> tuple: return self.tiny()
    def data(self, p: tuple, dt: np.dtype, rng: np.random.Generator) -> dict: ...
    def shapes(self, p: tuple) -> str: ...
    def size(self, p: tuple) -> int: ...
    def work(self, p: tuple, direction: str, dt: np.dtype) -> float: ...
    def ours(self, b: common.Buffers, d: dict, direction: str, p: tuple) -> common.Op: ...
    def torch(self, torch: Any, d: dict, direction: str, p: tuple, dev: str) -> Callable[[], Any]: ...


def _geo(base: float, e: float) -> int:
    return max(1, int(round(base * 100 ** e)))


class KlDiv(Family):
    name, forward, backward = "KlDiv", "aclnnKlDiv", "aclnnKlDivBackward"

    def params(self, e): return (_geo(40, e), 1024)
    def tiny(self): return (4, 8)
    def emulated(self, e): return (_geo(2, e), 64)
    def shapes(self, p): return f"self/target {p}, batchmean"
    def size(self, p): return p[0] * p[1]
    def work(self, p, direction, dt):   # fwd: read self, target; bwd: read target, write grad
        return 2 * p[0] * p[1] * dt.itemsize

    def data(self, p, dt, rng):
        return {"x": rng.standard_normal(p, dtype=np.float32).astype(dt),
                "t": rng.random(p, dtype=np.float32).astype(dt), "g": np.ones((), dt)}

    def ours(self, b, d, direction, p):
        import aclnn_gpu as acl
        if direction == "forward":
            return b.op(acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, b.tensor(d["x"]), b.tensor(d["t"]), 3, False,
                        b.empty((), d["x"].dtype))
        return b.op(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward, b.tensor(d["g"]),
                    b.tensor(d["x"]), b.tensor(d["t"]), 3, False, b.empty(p, d["x"].dtype))

    def torch(self, torch, d, direction, p, dev):
        import torch.nn.functional as F
        x = common.to_torch(torch, d["x"], dev).requires_grad_(direction == "backward")
        t = common.to_torch(torch, d["t"], dev)
        if direction == "forward":
            return lambda: F.kl_div(x, t, reduction="batchmean")
        loss = F.kl_div(x, t, reduction="batchmean")
        return lambda: torch.autograd.grad(loss, x, retain_graph=True)


class CrossEntropy(Family):
    name, forward, backward = "CrossEntropy", "aclnnCrossEntropyLoss", "aclnnCrossEntropyLossGrad"

    def params(self, e): return (_geo(6, e), 8192)
    def tiny(self): return (4, 8)
    def emulated(self, e): return (_geo(2, e), 64)
    def shapes(self, p): return f"logits ({p[0]}, {p[1]}), mean"
    def size(self, p): return p[0] * p[1]
    def work(self, p, direction, dt): return 2 * p[0] * p[1] * dt.itemsize + 8 * p[0]   # read N*C, write N*C, targets

    def data(self, p, dt, rng):
        N, C = p
        x = (rng.standard_normal(p, dtype=np.float32) * 2)
        t = rng.integers(0, C, N).astype(np.int64)
        t[::7] = -100
        lp = x - x.max(1, keepdims=True)
        lp -= np.log(np.exp(lp).sum(1, keepdims=True))
        return {"x": x.astype(dt), "t": t, "lp": lp.astype(dt), "g": np.ones((), dt)}

    def ours(self, b, d, direction, p):
        import aclnn_gpu as acl
        dt = d["x"].dtype
        if direction == "forward":
            return b.op(acl.aclnnCrossEntropyLossGetWorkspaceSize, acl.aclnnCrossEntropyLoss, b.tensor(d["x"]),
                        b.tensor(d["t"]), None, "mean", -100, 0.0, 0.0, False, b.empty((), dt), b.empty(p, dt),
                        None, None)
        return b.op(acl.aclnnCrossEntropyLossGradGetWorkspaceSize, acl.aclnnCrossEntropyLossGrad, b.tensor(d["g"]),
                    b.tensor(d["lp"]), b.tensor(d["t"]), None, None, None, "mean", -100, 0.0, 0.0, b.empty(p, dt))

    def torch(self, torch, d, direction, p, dev):
        import torch.nn.functional as F
        x = common.to_torch(torch, d["x"], dev).requires_grad_(direction == "backward")
        t = common.to_torch(torch, d["t"], dev)
        if direction == "forward":
            return lambda: F.cross_entropy(x, t)
        loss = F.cross_entropy(x, t)
        return lambda: torch.autograd.grad(loss, x, retain_graph=True)


class CtcLoss(Family):
    name, forward, backward = "CtcLoss", "aclnnCtcLoss", "aclnnCtcLossBackward"

    def params(self, e): return (200, _geo(0.5, e), 29, 40)          # T, N, C, L
    def tiny(self): return (8, 2, 5, 3)
    def emulated(self, e): return (12, _geo(1, e), 5, 3)
    def shapes(self, p): return "logProbs ({}, {}, {}), L={}".format(*p)
    def size(self, p): return p[0] * p[1] * p[2]

    def work(self, p, direction, dt):
        T, N, C, L = p
        X = 2 * L + 1
        if direction == "forward":   # read the label + blank columns, write alpha
            return T * N * (min(C, L + 1) + X) * dt.itemsize + N * L * 8
        return (2 * T * N * C + T * N * X) * dt.itemsize + N * L * 8   # read logProbs, alpha; write grad

    def data(self, p, dt, rng):
        import torch
        T, N, C, L = p
        lp = torch.log_softmax(torch.tensor(rng.standard_normal((T, N, C)), dtype=torch.float32), -1)
        tl = np.maximum(rng.integers(L // 2, L + 1, N), 1)
        tl[0] = L
        il = np.array([int(rng.integers(max(2 * l + 1, T * 3 // 4), T + 1)) for l in tl])
        il[0] = T
        tg = rng.integers(1, C, (N, L)).astype(np.int64)
        nll, alpha = torch.ops.aten._ctc_loss(lp, torch.from_numpy(tg), il.tolist(), tl.tolist(), 0, False)
        return {"lp": lp.numpy().astype(dt), "tg": tg, "il": il.astype(np.int64), "tl": tl.astype(np.int64),
                "nll": nll.numpy().astype(dt), "alpha": alpha.numpy().astype(dt), "g": np.ones(N, dt)}

    def ours(self, b, d, direction, p):
        import aclnn_gpu as acl
        dt = d["lp"].dtype
        il, tl = b.int_array(d["il"].tolist()), b.int_array(d["tl"].tolist())
        if direction == "forward":
            return b.op(acl.aclnnCtcLossGetWorkspaceSize, acl.aclnnCtcLoss, b.tensor(d["lp"]), b.tensor(d["tg"]),
                        il, tl, 0, False, b.empty(d["nll"].shape, dt), b.empty(d["alpha"].shape, dt))
        return b.op(acl.aclnnCtcLossBackwardGetWorkspaceSize, acl.aclnnCtcLossBackward, b.tensor(d["g"]),
                    b.tensor(d["lp"]), b.tensor(d["tg"]), il, tl, b.tensor(d["nll"]), b.tensor(d["alpha"]), 0,
                    False, b.empty(d["lp"].shape, dt))

    def torch(self, torch, d, direction, p, dev):
        lp, tg = common.to_torch(torch, d["lp"], dev), common.to_torch(torch, d["tg"], dev)
        g = common.to_torch(torch, d["g"], dev)
        if dev == "cuda":   # the native CUDA kernel takes the lengths as tensors
            il, tl = common.to_torch(torch, d["il"], dev), common.to_torch(torch, d["tl"], dev)
        else:
            il, tl = d["il"].tolist(), d["tl"].tolist()
        nll, alpha = torch.ops.aten._ctc_loss(lp, tg, il, tl, 0, False)
        if direction == "forward":
            return lambda: torch.ops.aten._ctc_loss(lp, tg, il, tl, 0, False)
        return lambda: torch.ops.aten._ctc_loss_backward(g, lp, tg, il, tl, nll, alpha, 0, False)


class ConvTbc(Family):
    name, forward, backward = "ConvTbc", "aclnnConvTbc", "aclnnConvTbcBackward"
    metric = "flops"

    def params(self, e): return (_geo(8, e), 16, 128, 128, 3, 1)    # T, B, Cin, Cout, K, pad
    def tiny(self): return (4, 2, 3, 4, 3, 1)
    def emulated(self, e): return (_geo(2, e), 2, 8, 8, 3, 1)
    def shapes(self, p): return "input ({}, {}, {}), weight ({}, {}, {}), pad {}".format(p[0], p[1], p[2], p[4],
                                                                                          p[2], p[3], p[5])
    def size(self, p): return p[0] * p[1] * p[2]

    def work(self, p, direction, dt):
        T, B, Cin, Cout, K, pad = p
        Tout = T + 2 * pad - K + 1
        fwd = 2.0 * K * Cin * Cout * Tout * B
        return fwd if direction == "forward" else fwd + 2.0 * K * Cin * Cout * T * B   # gradWeight + gradInput

    def data(self, p, dt, rng):
        T, B, Cin, Cout, K, pad = p
        Tout = T + 2 * pad - K + 1
        mk = lambda *s: rng.standard_normal(s, dtype=np.float32).astype(dt)  # noqa: E731
        return {"g": mk(Tout, B, Cout), "x": mk(T, B, Cin), "w": mk(K, Cin, Cout), "b": mk(Cout)}

    def ours(self, b, d, direction, p):
        import aclnn_gpu as acl
        pad = p[5]
        if direction == "forward":
            return b.op(acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, b.tensor(d["x"]), b.tensor(d["w"]),
                        b.tensor(d["b"]), pad, b.empty(d["g"].shape, d["g"].dtype), 0)
        outs = [b.empty(d[k].shape, d[k].dtype) for k in ("x", "w", "b")]
        return b.op(acl.aclnnConvTbcBackwardGetWorkspaceSize, acl.aclnnConvTbcBackward,
                    *(b.tensor(d[k]) for k in ("g", "x", "w", "b")), pad, 0, *outs)

    def torch(self, torch, d, direction, p, dev):
        g, x, w, bias = (common.to_torch(torch, d[k], dev) for k in ("g", "x", "w", "b"))
        pad = p[5]
        if direction == "forward":
            return lambda: torch.ops.aten.conv_tbc(x, w, bias, pad)
        return lambda: torch.ops.aten.conv_tbc_backward(g, x, w, bias, pad)


class ScaledMaskedSoftmax(Family):
    name, forward, backward = "ScaledMaskedSoftmax", "aclnnScaledMaskedSoftmax", "aclnnScaledMaskedSoftmaxBackward"

    def params(self, e): return (1, _geo(1, e), 128, 512)          # B, heads, S1, S2; mask (B, 1, S1, S2)
    def tiny(self): return (1, 2, 4, 8)
    def emulated(self, e): return (1, _geo(1, e), 4, 64)
    def shapes(self, p): return f"{p}, mask ({p[0]}, 1, {p[2]}, {p[3]})"
    def size(self, p): return p[0] * p[1] * p[2] * p[3]

    def work(self, p, direction, dt):
        M, mask = self.size(p), p[0] * p[2] * p[3]
        return (2 if direction == "forward" else 3) * M * dt.itemsize + mask   # fwd: x, y; bwd: g, y, out

    def data(self, p, dt, rng):
        B, N, S1, S2 = p
        x = rng.standard_normal(p, dtype=np.float32)
        y = np.exp(x - x.max(-1, keepdims=True))
        y /= y.sum(-1, keepdims=True)
        return {"x": x.astype(dt), "y": y.astype(dt), "g": rng.standard_normal(p, dtype=np.float32).astype(dt),
                "mask": rng.random((B, 1, S1, S2), dtype=np.float32) < 0.25}

    def ours(self, b, d, direction, p):
        import aclnn_gpu as acl
        dt = d["x"].dtype
        if direction == "forward":
            return b.op(acl.aclnnScaledMaskedSoftmaxGetWorkspaceSize, acl.aclnnScaledMaskedSoftmax, b.tensor(d["x"]),
                        b.tensor(d["mask"]), SCALE, False, b.empty(p, dt))
        return b.op(acl.aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, acl.aclnnScaledMaskedSoftmaxBackward,
                    b.tensor(d["g"]), b.tensor(d["y"]), b.tensor(d["mask"]), SCALE, False, b.empty(p, dt))

    def torch(self, torch, d, direction, p, dev):
        x, y, g = (common.to_torch(torch, d[k], dev) for k in ("x", "y", "g"))
        mask = common.to_torch(torch, d["mask"], dev)
        if direction == "forward":
            return lambda: torch.softmax(x.mul(SCALE).masked_fill_(mask, -10000.0), -1)

        def backward():
            o = torch._softmax_backward_data(g, y, -1, y.dtype)
            o.mul_(SCALE)
            return o.masked_fill_(mask, 0)
        return backward


FAMILIES: list[Family] = [KlDiv(), CrossEntropy(), CtcLoss(), ConvTbc(), ScaledMaskedSoftmax()]
