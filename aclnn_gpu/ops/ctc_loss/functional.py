"""The CTC loss operators' functional bodies: `aclnn_gpu.functional.ctc_loss` and `ctc_loss_backward`
are made of them (functional/dispatch.py, entry_point). Imported only by aclnn_gpu.functional (layer 14),
through ops/registry.py's FUNCTIONAL list; it imports nothing from that layer."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arguments import OperatorCall
from ...base import dtypes
from .api import aclnnCtcLoss, aclnnCtcLossBackward, aclnnCtcLossBackwardGetWorkspaceSize, aclnnCtcLossGetWorkspaceSize


def ctc_loss(call: OperatorCall, log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
             blank: int = 0, zero_infinity: bool = False) -> tuple[Any, Any]:
    """CTC loss (aclnnCtcLoss): log_probs (T, N, C), targets (N, S) padded or 1-D concatenated, lengths
    as sequences of ints or integer arrays -> (neg_log_likelihood (N,), log_alpha (N, T, 2*maxL+1)) in
    log_probs' dtype. zero_infinity returns 0 for an infinite loss."""
    lp, tg = call.tensor(log_probs, "log_probs"), call.tensor(targets, "targets")
    il = call.int_array(input_lengths, "input_lengths") if input_lengths is not None else None
    tl = call.int_array(target_lengths, "target_lengths") if target_lengths is not None else None
    max_l = max([0, *tl.values]) if tl is not None else 0   # (the lengths as the call read them)
    T, N = (lp.shape[0], lp.shape[1]) if lp is not None and len(lp.shape) == 3 else (0, 0)
    dt = dtypes.to_numpy(lp.dtype) if lp is not None else np.dtype(np.float32)
    nll, nll_host = call.output((N,), dt)
    la, la_host = call.output((N, T, 2 * max_l + 1), dt)
    call.run(aclnnCtcLossGetWorkspaceSize, aclnnCtcLoss, lp, tg, il, tl, blank, zero_infinity, nll, la)
    return call.result(nll_host), call.result(la_host)


def ctc_loss_backward(call: OperatorCall, grad_out: Any, log_probs: Any, targets: Any, input_lengths: Any,
                      target_lengths: Any, neg_log_likelihood: Any, log_alpha: Any, blank: int = 0,
                      zero_infinity: bool = False) -> Any:
    """PyTorch's raw `_ctc_loss_backward` (aclnnCtcLossBackward): the gradient with respect to the
    logits (T, N, C), no reduction, in grad_out's dtype. With zero_infinity a sample that cannot align
    is zeroed whether the neg_log_likelihood given is the raw +inf or ctc_loss(zero_infinity=True)'s 0
    (decided from log_alpha)."""
    g, lp = call.tensor(grad_out, "grad_out"), call.tensor(log_probs, "log_probs")
    tg = call.tensor(targets, "targets")
    il = call.int_array(input_lengths, "input_lengths") if input_lengths is not None else None
    tl = call.int_array(target_lengths, "target_lengths") if target_lengths is not None else None
    nll, la = call.tensor(neg_log_likelihood, "neg_log_likelihood"), call.tensor(log_alpha, "log_alpha")
    dt = dtypes.to_numpy(g.dtype) if g is not None else np.dtype(np.float32)
    out, host = call.output(lp.shape if lp is not None else (), dt)
    call.run(aclnnCtcLossBackwardGetWorkspaceSize, aclnnCtcLossBackward, g, lp, tg, il, tl, nll, la, blank,
             zero_infinity, out)
    return call.result(host)


OPERATORS = (ctc_loss, ctc_loss_backward)   # the public functions, in the order they are documented
# operator -> the parameters keyed by value in the call cache: the lengths shape the plan (log_alpha's width)
BY_VALUE: dict[str, tuple[str, ...]] = {"ctc_loss": ("input_lengths", "target_lengths"),
                                        "ctc_loss_backward": ("input_lengths", "target_lengths")}
