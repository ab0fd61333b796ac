"""The ConvTBC operators' functional bodies: `aclnn_gpu.functional.conv_tbc` and `conv_tbc_backward`
are made of them (functional/dispatch.py, entry_point). Imported only by aclnn_gpu.functional (layer 14),
through ops/registry.py's FUNCTIONAL list; it imports nothing from that layer."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arguments import OperatorCall, integer
from ...base import dtypes
from .api import aclnnConvTbc, aclnnConvTbcBackward, aclnnConvTbcBackwardGetWorkspaceSize, aclnnConvTbcGetWorkspaceSize


def conv_tbc(call: OperatorCall, input: Any, weight: Any, bias: Any, pad: int = 0, cube_math_type: int = 0) -> Any:
    """ConvTBC forward (aclnnConvTbc): input (T, B, Cin), weight (K, Cin, Cout), bias (Cout) ->
    (T + 2*pad - K + 1, B, Cout) in the input's dtype."""
    pad, cube_math_type = integer("conv_tbc", "pad", pad), integer("conv_tbc", "cube_math_type", cube_math_type)
    x, w, b = call.tensor(input, "input"), call.tensor(weight, "weight"), call.tensor(bias, "bias")
    shape: tuple[int, ...] = ()
    if x is not None and w is not None and len(x.shape) == 3 and len(w.shape) == 3:
        shape = (max(x.shape[0] + 2 * pad - w.shape[0] + 1, 0), x.shape[1], w.shape[2])
    out, host = call.output(shape, dtypes.to_numpy(x.dtype) if x is not None else np.float32)
    call.run(aclnnConvTbcGetWorkspaceSize, aclnnConvTbc, x, w, b, pad, out, cube_math_type)
    return call.result(host)


def conv_tbc_backward(call: OperatorCall, grad: Any, input: Any, weight: Any, bias: Any, pad: int = 0,
                      cube_math_type: int = 0) -> tuple[Any, Any, Any]:
    """ConvTBC backward (aclnnConvTbcBackward): (grad_input, grad_weight, grad_bias) in the dtypes of
    input, weight and bias."""
    pad = integer("conv_tbc_backward", "pad", pad)
    cube_math_type = integer("conv_tbc_backward", "cube_math_type", cube_math_type)   # 0..3: the API checks
    g, x = call.tensor(grad, "grad"), call.tensor(input, "input")
    w, b = call.tensor(weight, "weight"), call.tensor(bias, "bias")
    outs = [call.output(t.shape if t is not None else (), dtypes.to_numpy(t.dtype) if t is not None
                        else np.float32) for t in (x, w, b)]
    call.run(aclnnConvTbcBackwardGetWorkspaceSize, aclnnConvTbcBackward, g, x, w, b, pad,
             cube_math_type, outs[0][0], outs[1][0], outs[2][0])
    return tuple(call.result(host) for _, host in outs)


OPERATORS = (conv_tbc, conv_tbc_backward)   # the public functions, in the order they are documented
BY_VALUE: dict[str, tuple[str, ...]] = {}   # operator -> the parameters keyed by value in the call cache
