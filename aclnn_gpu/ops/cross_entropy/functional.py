"""The cross-entropy operators' functional bodies: `aclnn_gpu.functional.cross_entropy_loss` and
`cross_entropy_loss_grad` are made of them (functional/dispatch.py, entry_point). Imported only by
aclnn_gpu.functional (layer 14), through ops/registry.py's FUNCTIONAL list; it imports nothing from that
layer."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arguments import OperatorCall, reduction_name
from ...base import dtypes
from .api import (aclnnCrossEntropyLoss, aclnnCrossEntropyLossGetWorkspaceSize, aclnnCrossEntropyLossGrad,
                  aclnnCrossEntropyLossGradGetWorkspaceSize)


def result_keeping_shape(call: OperatorCall, host: np.ndarray) -> Any:
    """call.result with the host array's shape kept (a 0-D loss stays 0-D for torch / CuPy callers:
    np.ascontiguousarray in functional's from_numpy turns 0-D arrays into shape (1,))."""
    result = call.result(host)
    return result.reshape(host.shape) if tuple(result.shape) != host.shape else result


def cross_entropy_loss(call: OperatorCall, input: Any, target: Any, weight: Any = None, reduction: str | int = "mean",
                       ignore_index: int = -100, label_smoothing: float = 0.0,
                       lse_square_scale_for_zloss: float = 0.0) -> tuple[Any, ...]:
    """Cross-entropy loss over logits (aclnnCrossEntropyLoss): input (N, C), target (N,) int64/int32,
    weight (C,) float32 or None -> (loss, log_prob); loss is (N,) for "none", else 0-D; both in the
    input's dtype. lse_square_scale_for_zloss != 0 adds the z-loss (docs/API.md §7) and returns
    (loss, log_prob, lse_for_zloss), lse (N,) for cross_entropy_loss_grad."""
    name = reduction_name("cross_entropy_loss", reduction)
    x, t, w = call.tensor(input, "input"), call.tensor(target, "target"), call.tensor(weight, "weight")
    dt = dtypes.to_numpy(x.dtype) if x is not None else np.float32
    n = x.shape[0] if x is not None and len(x.shape) >= 1 else 0
    loss, loss_host = call.output((n,) if name == "none" else (), dt)
    lp, lp_host = call.output(x.shape if x is not None else (0, 0), dt)
    lse, lse_host = call.output((n,), dt) if lse_square_scale_for_zloss else (None, None)
    call.run(aclnnCrossEntropyLossGetWorkspaceSize, aclnnCrossEntropyLoss, x, t, w, name, ignore_index,
             label_smoothing, lse_square_scale_for_zloss, False, loss, lp, None, lse)
    if lse_host is None:
        return result_keeping_shape(call, loss_host), result_keeping_shape(call, lp_host)
    return (result_keeping_shape(call, loss_host), result_keeping_shape(call, lp_host),
            result_keeping_shape(call, lse_host))


def cross_entropy_loss_grad(call: OperatorCall, grad_loss: Any, log_prob: Any, target: Any, weight: Any = None,
                            reduction: str | int = "mean", ignore_index: int = -100,
                            label_smoothing: float = 0.0, lse_square_scale_for_zloss: float = 0.0,
                            lse_for_zloss: Any = None) -> Any:
    """Gradient of cross_entropy_loss with respect to the logits (aclnnCrossEntropyLossGrad), given
    log_prob = log_softmax(logits): (N, C) in log_prob's dtype. grad_loss is (N,) for "none", else a
    scalar (0-D or [1]). lse_square_scale_for_zloss != 0: the z-loss's gradient too, from the
    forward's lse_for_zloss (N,)."""
    name = reduction_name("cross_entropy_loss_grad", reduction)
    g, lp = call.tensor(grad_loss, "grad_loss"), call.tensor(log_prob, "log_prob")
    t, w = call.tensor(target, "target"), call.tensor(weight, "weight")
    lse = call.tensor(lse_for_zloss, "lse_for_zloss")
    out, host = call.output(lp.shape if lp is not None else (), dtypes.to_numpy(lp.dtype) if lp is not None
                            else np.float32)
    call.run(aclnnCrossEntropyLossGradGetWorkspaceSize, aclnnCrossEntropyLossGrad, g, lp, t, w, None, lse,
             name, ignore_index, label_smoothing, lse_square_scale_for_zloss, out)
    return result_keeping_shape(call, host)


OPERATORS = (cross_entropy_loss, cross_entropy_loss_grad)   # the public functions, in the order documented
BY_VALUE: dict[str, tuple[str, ...]] = {}   # operator -> the parameters keyed by value in the call cache
