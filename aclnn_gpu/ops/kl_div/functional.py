"""The KL divergence operators' functional bodies: `aclnn_gpu.functional.kl_div` and `kl_div_backward`
are made of them (functional/dispatch.py, entry_point). Imported only by aclnn_gpu.functional (layer 14),
through ops/registry.py's FUNCTIONAL list; it imports nothing from that layer."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import arguments
from ..arguments import OperatorCall
from ...base import dtypes
from .api import aclnnKlDiv, aclnnKlDivBackward, aclnnKlDivBackwardGetWorkspaceSize, aclnnKlDivGetWorkspaceSize

REDUCTIONS = ("none", "mean", "sum", "batchmean")


def kl_div(call: OperatorCall, self: Any, target: Any, reduction: str | int = "mean", log_target: bool = False) -> Any:
    """KL divergence loss (aclnnKlDiv): `none` gives the broadcast shape, the others a 0-D array."""
    code = arguments.reduction("kl_div", reduction, REDUCTIONS)
    x, t = call.tensor(self, "self"), call.tensor(target, "target")
    shape: tuple[int, ...] = ()
    if code == 0 and x is not None and t is not None:
        try:
            shape = np.broadcast_shapes(x.shape, t.shape)
        except ValueError:   # the API names the mismatch
            pass
    out, host = call.output(shape, dtypes.to_numpy(x.dtype) if x is not None else np.float32)
    call.run(aclnnKlDivGetWorkspaceSize, aclnnKlDiv, x, t, code, log_target, out)
    return call.result(host)


def kl_div_backward(call: OperatorCall, grad_output: Any, self: Any, target: Any, reduction: str | int = "mean",
                    log_target: bool = False) -> Any:
    """Gradient of kl_div with respect to `self` (aclnnKlDivBackward), in `self`'s dtype."""
    code = arguments.reduction("kl_div_backward", reduction, REDUCTIONS)
    g, x, t = call.tensor(grad_output, "grad_output"), call.tensor(self, "self"), call.tensor(target, "target")
    out, host = call.output(x.shape if x is not None else (), dtypes.to_numpy(x.dtype) if x is not None
                            else np.float32)
    call.run(aclnnKlDivBackwardGetWorkspaceSize, aclnnKlDivBackward, g, x, t, code, log_target, out)
    return call.result(host)


OPERATORS = (kl_div, kl_div_backward)   # the public functions, in the order they are documented
BY_VALUE: dict[str, tuple[str, ...]] = {}   # operator -> the parameters keyed by value in the call cache
