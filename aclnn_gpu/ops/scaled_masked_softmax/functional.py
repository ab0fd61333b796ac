"""The scaled masked softmax operators' functional bodies: `aclnn_gpu.functional.scaled_masked_softmax`
and `scaled_masked_softmax_backward` are made of them (functional/dispatch.py, entry_point). Imported only
by aclnn_gpu.functional (layer 14), through ops/registry.py's FUNCTIONAL list; it imports nothing from
that layer."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arguments import OperatorCall
from ...base import dtypes
from .api import (aclnnScaledMaskedSoftmax, aclnnScaledMaskedSoftmaxBackward,
                  aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, aclnnScaledMaskedSoftmaxGetWorkspaceSize)


def scaled_masked_softmax(call: OperatorCall, x: Any, mask: Any, scale: float = 1.0,
                          fix_triu_mask: bool = False) -> Any:
    """Scaled masked softmax (aclnnScaledMaskedSoftmax): x (B, N, S1, S2) float, mask bool
    (Bm, Nm, S1, S2) with Bm in {B, 1}, Nm in {N, 1} (true = masked out; None allowed with
    fix_triu_mask) -> y = softmax(scale * x) over the last axis in x's dtype, zeros on fully masked rows."""
    t, m = call.tensor(x, "x"), call.tensor(mask, "mask")
    y, host = call.output(t.shape if t is not None else (), dtypes.to_numpy(t.dtype) if t is not None
                          else np.float32)
    call.run(aclnnScaledMaskedSoftmaxGetWorkspaceSize, aclnnScaledMaskedSoftmax, t, m, scale, fix_triu_mask, y)
    return call.result(host)


def scaled_masked_softmax_backward(call: OperatorCall, grad_output: Any, y: Any, mask: Any, scale: float = 1.0,
                                   fix_triu_mask: bool = False) -> Any:
    """Gradient of scaled_masked_softmax with respect to x (aclnnScaledMaskedSoftmaxBackward):
    scale * y * (grad_output - rowsum(grad_output * y)), 0 where masked, in grad_output's dtype."""
    g, yt, m = call.tensor(grad_output, "grad_output"), call.tensor(y, "y"), call.tensor(mask, "mask")
    out, host = call.output(g.shape if g is not None else (), dtypes.to_numpy(g.dtype) if g is not None
                            else np.float32)
    call.run(aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize, aclnnScaledMaskedSoftmaxBackward, g, yt, m,
             scale, fix_triu_mask, out)
    return call.result(host)


OPERATORS = (scaled_masked_softmax, scaled_masked_softmax_backward)   # the public functions, documented order
BY_VALUE: dict[str, tuple[str, ...]] = {}   # operator -> the parameters keyed by value in the call cache
