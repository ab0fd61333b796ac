"""The ops-nn cases whose expectation this library's documented decisions change (docs/API.md §7, the
row named in "section"), and the cases that wait on another change ("xfail", with the reason).
mark_for(op, case) gives the mark scripts/gen_conformance.py writes into the case, or None; the runner
checks what the mark says instead of ops-nn's expectation:
    "status": the documented status of phase 1 (unit-test and system-test cases);
    "golden": a named adjustment of the golden to the documented result (runner.py, ADJUSTMENTS)."""
from __future__ import annotations

from typing import Any

SECTION = "docs/API.md §7"


def _attr(case: dict[str, Any], name: str) -> Any:
    return next((i["range"] for i in case["inputs"] if i["name"] == name), None)


def _dtype(case: dict[str, Any], name: str) -> Any:
    return next((i.get("dtype") for i in case["inputs"] if i["name"] == name), None)


def _has_neg_inf(case: dict[str, Any], name: str) -> bool:
    r = _attr(case, name)
    return r == "-inf" or (isinstance(r, list) and "-inf" in r)


def mark_for(op: str, case: dict[str, Any]) -> dict[str, Any] | None:
    cid = case["id"]
    if op == "aclnnCrossEntropyLoss" and case["kind"] == "st":
        k = _attr(case, "lseSquareScaleForZloss")
        if isinstance(k, (int, float)) and not 0 <= k < 1:
            return {"section": f"{SECTION}: CE lseSquareScaleForZloss outside [0, 1)", "status": 561002,
                    "why": f"the case passes lseSquareScaleForZloss = {k}; CANN ignores the z-loss (not yet "
                           "effective), the library refuses a scale outside CANN's documented range"}
    if op == "aclnnKlDivBackward" and cid == "ut:case_fp_reduction_exceed":
        return {"section": f"{SECTION}: KL reduction code outside 0..3", "status": 161002,
                "why": "reduction = 6: CANN treats it as none, the library refuses it"}
    if op == "aclnnScaledMaskedSoftmax" and cid == "ut:Ascend910B_aclnnScaledMaskedSoftmax_dim4_out_of_range":
        return {"section": f"{SECTION}: scaled masked softmax row length", "status": 0,
                "why": "a row of 5000: CANN allows at most 4096, the library any length"}
    if op in ("aclnnScaledMaskedSoftmax",) and case["kind"] == "st" and _has_neg_inf(case, "x"):
        return {"section": f"{SECTION}: scaled masked softmax, a row whose kept values are all -inf",
                "golden": "softmax_all_neg_inf_rows_zero",
                "why": "x drawn with -inf: such a row is NaN in the golden, zeros in the library"}
    if op == "aclnnCtcLossBackward" and case["kind"] == "st" and _attr(case, "logAlpha") in ("inf", ["inf"]):
        return {"section": f"{SECTION}: CTC backward, logAlpha holding +inf", "golden": "ctc_pos_inf_log_alpha_sums_to_inf",
                "why": "logAlpha drawn +inf (no forward gives it): a column of two or more states is NaN in PyTorch's "
                       "and CANN's pairwise logsumexp (inf - inf), +inf in the library's column sum (its gradient "
                       "-inf * gradOut)"}
    if op == "aclnnCtcLossBackward" and case["kind"] == "st" and _attr(case, "gradOutput") in (
            ["inf"], ["-inf"], "inf", "-inf") and _dtype(case, "logProbs") in ("fp32", "fp16", "bf16"):
        return {"section": f"{SECTION}: CTC backward, an infinite gradOut times a difference below the normal "
                           "range of float32", "golden": "ctc_inf_grad_sign_below_fp32_normal",
                "why": "gradOut drawn +-inf and logProbs down to -100: where exp(lp) and the occupancy term are both "
                       "below FLT_MIN the GPU (CuPy's -ftz=true) cannot always tell which is larger; the float64 "
                       "golden can. Either infinity is documented there, never NaN"}
    if op == "aclnnScaledMaskedSoftmaxBackward" and cid in (
            "ut:test_scaled_masked_softmax_backward_wrong_shape_y_grad",
            "ut:test_scaled_masked_softmax_backward_wrong_shape_mask"):
        return {"section": "docs/API.md §1 (constructors return None on bad arguments): aclCreateTensor with a "
                           "negative dimension", "status": -1,
                "why": "the test builds a tensor of shape [1, 2, 4, -1]: aclCreateTensor refuses it, so the "
                       "operator is never called (the refusal CANN's test expects happens one call earlier)"}
    return None


def xfail_for(op: str, case: dict[str, Any]) -> dict[str, Any] | None:
    """Cases that fail for a reason outside this suite's files: {"reason": what must change, "devices":
    the device kinds it fails on (absent: all)}."""
    return None
