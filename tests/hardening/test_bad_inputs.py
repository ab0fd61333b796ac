"""The cross-operator bad-input table: every one of the ten operator entry points (five
backward + five forward, phase 1 and phase 2) and the runtime, fed hostile arguments.

Each row must return its documented code, leave `aclGetRecentErrMsg()` holding one line that starts
with the function name and names the parameter, never raise, and leave every output byte as it was
(raw storage compared before and after, the stream synchronised). The rows are generated from one
description per operator (`SPECS`), so a new check or a new operator shows up here automatically.
The per-operator tables in tests/test_*.py check the individual rules; this file checks that the
contract holds uniformly across everything.

Prints `bad inputs tried: N, crashes: 0, wrong codes: 0` (also in the terminal summary).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from aclnn_gpu.base.status import aclDataType as D
from aclnn_gpu.meta.tensor import aclTensor
from support import Session, near_end

NULLPTR = int(acl.aclnnStatus.ACLNN_ERR_PARAM_NULLPTR)
INVALID = int(acl.aclnnStatus.ACLNN_ERR_PARAM_INVALID)
TILING = int(acl.aclnnStatus.ACLNN_ERR_INNER_TILING_ERROR)
INNER_NULLPTR = int(acl.aclnnStatus.ACLNN_ERR_INNER_NULLPTR)
RT_PARAM = int(acl.aclError.ACL_ERROR_RT_PARAM_INVALID)
RT_DEVID = int(acl.aclError.ACL_ERROR_RT_INVALID_DEVICEID)

F32 = np.float32
NP_OF = {D.ACL_FLOAT: np.float32, D.ACL_FLOAT16: np.float16, D.ACL_DOUBLE: np.float64, D.ACL_BF16: dtypes.bfloat16,
         D.ACL_INT32: np.int32, D.ACL_INT64: np.int64, D.ACL_INT8: np.int8, D.ACL_UINT8: np.uint8,
         D.ACL_INT16: np.int16, D.ACL_BOOL: np.bool_}
INTS = [D.ACL_INT32, D.ACL_INT64, D.ACL_INT8, D.ACL_UINT8, D.ACL_BOOL]


# ------------------------------------------------------------------------------ operator descriptions
@dataclass
class Spec:
    op: str                       # CANN's operator name (the execute function)
    order: list[str]              # C argument order of GetWorkspaceSize
    arrays: Callable[[], dict]    # tensor name -> NumPy array (outputs: NaN-poisoned)
    scalars: dict                 # scalar / int-array name -> valid value
    outputs: list[str]
    optional: list[str] = field(default_factory=list)
    int_arrays: list[str] = field(default_factory=list)
    shape_code: int = INVALID
    bad_dtypes: dict = field(default_factory=dict)     # tensor -> [dtype codes that must be refused]
    bad_scalars: list = field(default_factory=list)    # (name, value, code)
    rank_bad: Callable[[str, tuple], tuple] = lambda name, shape: (2,) + tuple(shape)
    shape_bad: dict = field(default_factory=dict)      # tensor -> shape that must be refused
    tokens: dict = field(default_factory=dict)         # tensor -> word the shape message must hold

    @property
    def gws(self):
        return getattr(acl, self.op + "GetWorkspaceSize")

    @property
    def execute(self):
        return getattr(acl, self.op)


def _rng():
    return np.random.default_rng(1234)


def _nan(*shape, dtype=F32):
    return np.full(shape, np.nan, dtype)


def _logsoftmax(x):
    x = x - x.max(-1, keepdims=True)
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(F32)


FLOAT_BAD = INTS
CTC_ARR = lambda: {  # noqa: E731
    "gradOut": np.ones(2, F32), "logProbs": _logsoftmax(_rng().standard_normal((6, 2, 5))),
    "targets": np.array([[1, 2, 3], [2, 4, 0]], np.int64), "negLogLikelihood": np.array([3.0, 2.5], F32),
    "logAlpha": np.full((2, 6, 7), -1.0, F32), "out": _nan(6, 2, 5)}


def _specs() -> list[Spec]:
    s = []
    # ---------------------------------------------------------------- KL
    kl_bad = {n: FLOAT_BAD for n in ("gradOutput", "self", "target", "out")}
    kl_scalars = [("reduction", 4, INVALID), ("reduction", -1, INVALID), ("reduction", "mean", INVALID),
                  ("reduction", None, INVALID), ("reduction", 1.0, INVALID), ("reduction", True, INVALID),
                  ("logTarget", "yes", INVALID), ("logTarget", None, INVALID), ("logTarget", 0.5, INVALID)]
    s.append(Spec("aclnnKlDivBackward", ["gradOutput", "self", "target", "reduction", "logTarget", "out"],
                  lambda: {"gradOutput": _rng().standard_normal((2, 3)).astype(F32),
                           "self": _rng().standard_normal((2, 3)).astype(F32),
                           "target": _rng().random((2, 3)).astype(F32), "out": _nan(2, 3)},
                  {"reduction": 0, "logTarget": False}, ["out"], bad_dtypes=kl_bad, bad_scalars=kl_scalars,
                  rank_bad=lambda n, sh: (1,) * (9 - len(sh)) + tuple(sh),
                  shape_bad={"gradOutput": (2, 2), "self": (2, 2), "target": (2, 2), "out": (2, 2)}))
    s.append(Spec("aclnnKlDiv", ["self", "target", "reduction", "logTarget", "out"],
                  lambda: {"self": _rng().standard_normal((2, 3)).astype(F32),
                           "target": _rng().random((2, 3)).astype(F32), "out": _nan(2, 3)},
                  {"reduction": 0, "logTarget": False}, ["out"],
                  bad_dtypes={n: FLOAT_BAD for n in ("self", "target", "out")}, bad_scalars=kl_scalars,
                  rank_bad=lambda n, sh: (1,) * (9 - len(sh)) + tuple(sh),
                  shape_bad={"self": (2, 2), "target": (2, 2), "out": (2, 2)}))
    # ---------------------------------------------------------------- CTC
    ctc_scalars = [("blank", -1, INVALID), ("blank", 5, INVALID), ("blank", 2 ** 70, INVALID),
                   ("blank", "0", INVALID), ("blank", None, INVALID), ("blank", 1.5, INVALID),
                   ("blank", True, INVALID), ("zeroInfinity", "no", INVALID), ("zeroInfinity", None, INVALID),
                   ("zeroInfinity", 0.0, INVALID)]
    float_t = (D.ACL_INT32, D.ACL_INT64, D.ACL_UINT8, D.ACL_BOOL, D.ACL_FLOAT16)
    s.append(Spec("aclnnCtcLossBackward",
                  ["gradOut", "logProbs", "targets", "inputLengths", "targetLengths", "negLogLikelihood",
                   "logAlpha", "blank", "zeroInfinity", "out"],
                  CTC_ARR, {"inputLengths": [6, 5], "targetLengths": [3, 2], "blank": 0, "zeroInfinity": False},
                  ["out"], int_arrays=["inputLengths", "targetLengths"],
                  bad_dtypes={"gradOut": float_t, "logProbs": (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL),
                              "negLogLikelihood": float_t, "logAlpha": float_t, "out": float_t,
                              "targets": (D.ACL_DOUBLE, D.ACL_UINT8, D.ACL_INT8, D.ACL_INT16, D.ACL_BF16)},
                  bad_scalars=ctc_scalars,
                  shape_bad={"gradOut": (1,), "logProbs": (6, 2, 4), "targets": (2, 2), "negLogLikelihood": (3,),
                             "logAlpha": (2, 6, 6), "out": (6, 2, 4)}))
    s.append(Spec("aclnnCtcLoss",
                  ["logProbs", "targets", "inputLengths", "targetLengths", "blank", "zeroInfinity",
                   "negLogLikelihoodOut", "logAlphaOut"],
                  lambda: {"logProbs": CTC_ARR()["logProbs"], "targets": CTC_ARR()["targets"],
                           "negLogLikelihoodOut": _nan(2), "logAlphaOut": _nan(2, 6, 7)},
                  {"inputLengths": [6, 5], "targetLengths": [3, 2], "blank": 0, "zeroInfinity": False},
                  ["negLogLikelihoodOut", "logAlphaOut"], int_arrays=["inputLengths", "targetLengths"],
                  bad_dtypes={"logProbs": (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL), "negLogLikelihoodOut": float_t,
                              "logAlphaOut": float_t,
                              "targets": (D.ACL_DOUBLE, D.ACL_UINT8, D.ACL_INT8, D.ACL_INT16, D.ACL_BF16)},
                  bad_scalars=ctc_scalars,
                  shape_bad={"logProbs": (5, 2, 5), "targets": (2, 2), "negLogLikelihoodOut": (3,),
                             "logAlphaOut": (2, 6, 6)}))
    # ---------------------------------------------------------------- cross entropy
    ce_scalars = [("reductionOptional", "avg", TILING), ("reductionOptional", 1, INVALID),
                  ("reductionOptional", b"\xff\xfe", TILING), ("reductionOptional", "MEAN", TILING),
                  ("ignoreIndex", "x", INVALID), ("ignoreIndex", 1.5, INVALID), ("ignoreIndex", True, INVALID),
                  ("ignoreIndex", None, INVALID), ("ignoreIndex", 2 ** 64, INVALID), ("ignoreIndex", -2 ** 63 - 1, INVALID),
                  ("labelSmoothing", 1.5, TILING), ("labelSmoothing", -0.1, TILING),
                  ("labelSmoothing", float("nan"), TILING), ("labelSmoothing", float("inf"), TILING),
                  ("labelSmoothing", "0.1", INVALID), ("labelSmoothing", None, INVALID),
                  ("lseSquareScaleForZloss", "x", INVALID), ("lseSquareScaleForZloss", None, INVALID),
                  ("lseSquareScaleForZloss", 1.0, TILING), ("lseSquareScaleForZloss", -1e-4, TILING),
                  ("lseSquareScaleForZloss", float("nan"), TILING)]
    ce_float_bad = (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL, D.ACL_UINT8)
    s.append(Spec("aclnnCrossEntropyLossGrad",
                  ["gradLoss", "logProb", "target", "weightOptional", "gradZlossOptional", "lseForZlossOptional",
                   "reductionOptional", "ignoreIndex", "labelSmoothing", "lseSquareScaleForZloss", "out"],
                  lambda: {"gradLoss": np.array(1.0, F32), "logProb": _logsoftmax(_rng().standard_normal((4, 5))),
                           "target": np.array([0, 4, 2, -100], np.int64), "weightOptional": np.ones(5, F32),
                           "out": _nan(4, 5)},
                  {"gradZlossOptional": None, "lseForZlossOptional": None, "reductionOptional": "mean",
                   "ignoreIndex": -100, "labelSmoothing": 0.0, "lseSquareScaleForZloss": 0.0},
                  ["out"], optional=["weightOptional"], shape_code=TILING,
                  bad_dtypes={"gradLoss": ce_float_bad + (D.ACL_FLOAT16,), "logProb": ce_float_bad,
                              "out": ce_float_bad + (D.ACL_DOUBLE,),
                              "target": (D.ACL_FLOAT, D.ACL_DOUBLE, D.ACL_UINT8, D.ACL_BOOL, D.ACL_INT16),
                              "weightOptional": (D.ACL_FLOAT16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_BF16)},
                  bad_scalars=ce_scalars,
                  shape_bad={"logProb": (4, 4), "target": (3,), "weightOptional": (4,), "out": (4, 4),
                             "gradLoss": (2,)}))
    s.append(Spec("aclnnCrossEntropyLoss",
                  ["input", "target", "weightOptional", "reductionOptional", "ignoreIndex", "labelSmoothing",
                   "lseSquareScaleForZloss", "returnZloss", "lossOut", "logProbOut", "zlossOut", "lseForZlossOut"],
                  lambda: {"input": _rng().standard_normal((4, 5)).astype(F32),
                           "target": np.array([0, 4, 2, -100], np.int64), "weightOptional": np.ones(5, F32),
                           "lossOut": _nan(), "logProbOut": _nan(4, 5)},
                  {"reductionOptional": "mean", "ignoreIndex": -100, "labelSmoothing": 0.0,
                   "lseSquareScaleForZloss": 0.0, "returnZloss": False, "zlossOut": None, "lseForZlossOut": None},
                  ["lossOut", "logProbOut"], optional=["weightOptional"], shape_code=TILING,
                  bad_dtypes={"input": ce_float_bad, "lossOut": ce_float_bad + (D.ACL_FLOAT16,),
                              "logProbOut": ce_float_bad + (D.ACL_DOUBLE,),
                              "target": (D.ACL_FLOAT, D.ACL_DOUBLE, D.ACL_UINT8, D.ACL_BOOL, D.ACL_INT16),
                              "weightOptional": (D.ACL_FLOAT16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_BF16)},
                  bad_scalars=ce_scalars + [("returnZloss", True, NULLPTR), ("returnZloss", "x", INVALID)],
                  shape_bad={"input": (4, 4), "target": (3,), "weightOptional": (4,), "logProbOut": (4, 4),
                             "lossOut": (2,)}))
    # ---------------------------------------------------------------- conv TBC
    conv_bad = (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL, D.ACL_DOUBLE, D.ACL_UINT8)
    conv_scalars = [("pad", -1, INVALID), ("pad", "1", INVALID), ("pad", 1.0, INVALID), ("pad", None, INVALID),
                    ("pad", True, INVALID), ("pad", 2 ** 40, INVALID), ("pad", -2 ** 70, INVALID),
                    ("cubeMathType", 4, INVALID), ("cubeMathType", -1, INVALID), ("cubeMathType", "0", INVALID),
                    ("cubeMathType", None, INVALID), ("cubeMathType", 2 ** 31, INVALID)]
    s.append(Spec("aclnnConvTbcBackward",
                  ["self", "input", "weight", "bias", "pad", "cubeMathType", "gradInput", "gradWeight", "gradBias"],
                  lambda: {"self": _rng().standard_normal((5, 2, 4)).astype(F32),
                           "input": _rng().standard_normal((5, 2, 3)).astype(F32),
                           "weight": _rng().standard_normal((3, 3, 4)).astype(F32),
                           "bias": _rng().standard_normal(4).astype(F32),
                           "gradInput": _nan(5, 2, 3), "gradWeight": _nan(3, 3, 4), "gradBias": _nan(4)},
                  {"pad": 1, "cubeMathType": 0}, ["gradInput", "gradWeight", "gradBias"],
                  bad_dtypes={n: conv_bad for n in ("self", "input", "weight", "bias", "gradInput", "gradWeight",
                                                    "gradBias")},
                  bad_scalars=conv_scalars,
                  shape_bad={"self": (5, 2, 3), "input": (5, 2, 2), "weight": (3, 3, 3), "bias": (3,),
                             "gradInput": (5, 2, 2), "gradWeight": (3, 3, 3), "gradBias": (3,)}))
    s.append(Spec("aclnnConvTbc", ["self", "weight", "bias", "pad", "out", "cubeMathType"],
                  lambda: {"self": _rng().standard_normal((5, 2, 3)).astype(F32),
                           "weight": _rng().standard_normal((3, 3, 4)).astype(F32),
                           "bias": _rng().standard_normal(4).astype(F32), "out": _nan(5, 2, 4)},
                  {"pad": 1, "cubeMathType": 0}, ["out"],
                  bad_dtypes={n: conv_bad for n in ("self", "weight", "bias", "out")}, bad_scalars=conv_scalars,
                  shape_bad={"self": (5, 2, 2), "weight": (3, 3, 3), "bias": (3,), "out": (5, 2, 3)}))
    # ---------------------------------------------------------------- scaled masked softmax
    sms_bad = (D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL, D.ACL_DOUBLE, D.ACL_UINT8)
    mask_bad = (D.ACL_FLOAT, D.ACL_UINT8, D.ACL_INT32, D.ACL_INT8, D.ACL_FLOAT16)
    sms_scalars = [("scale", "x", INVALID), ("scale", None, INVALID), ("scale", True, INVALID),
                   ("scale", 1j, INVALID), ("fixTriuMask", "x", INVALID), ("fixTriuMask", None, INVALID),
                   ("fixTriuMask", 0.5, INVALID)]
    mask = lambda: (_rng().random((2, 1, 4, 8)) < 0.3)  # noqa: E731
    s.append(Spec("aclnnScaledMaskedSoftmaxBackward", ["gradOutput", "y", "mask", "scale", "fixTriuMask", "out"],
                  lambda: {"gradOutput": _rng().standard_normal((2, 2, 4, 8)).astype(F32),
                           "y": np.full((2, 2, 4, 8), 1 / 8, F32), "mask": mask(), "out": _nan(2, 2, 4, 8)},
                  {"scale": 1.0, "fixTriuMask": False}, ["out"],
                  bad_dtypes={"gradOutput": sms_bad, "y": sms_bad, "out": sms_bad, "mask": mask_bad},
                  bad_scalars=sms_scalars,
                  shape_bad={"gradOutput": (2, 2, 4, 7), "y": (2, 2, 4, 7), "mask": (2, 1, 4, 7),
                             "out": (2, 2, 4, 7)}))
    s.append(Spec("aclnnScaledMaskedSoftmax", ["x", "mask", "scale", "fixTriuMask", "y"],
                  lambda: {"x": _rng().standard_normal((2, 2, 4, 8)).astype(F32), "mask": mask(),
                           "y": _nan(2, 2, 4, 8)},
                  {"scale": 1.0, "fixTriuMask": False}, ["y"],
                  bad_dtypes={"x": sms_bad, "y": sms_bad, "mask": mask_bad}, bad_scalars=sms_scalars,
                  shape_bad={"x": (2, 2, 4, 7), "mask": (2, 3, 4, 8), "y": (2, 2, 4, 7)}))
    return s


SPECS = {spec.op: spec for spec in _specs()}


# ------------------------------------------------------------------------------ building arguments
class Args(dict):
    """The arguments of one call (name -> value, in C order) plus the arrays they were built from."""

    def __init__(self, spec: Spec, s: Session):
        super().__init__()
        self.spec, self.s = spec, s
        self.np = spec.arrays()
        for name in spec.order:
            if name in self.np:
                self[name] = s.tensor(self.np[name])
            elif name in spec.int_arrays:
                self[name] = s.int_array(spec.scalars[name])
            else:
                self[name] = spec.scalars[name]

    def values_in_order(self) -> list:
        return [self[n] for n in self.spec.order]

    def retype(self, name: str, code: int, shape: tuple | None = None) -> None:
        shape = self.np[name].shape if shape is None else shape
        arr = np.zeros(shape, NP_OF[code]) if code != D.ACL_BF16 else np.zeros(shape, dtypes.bfloat16)
        src = self.np[name]
        if shape == src.shape and np.issubdtype(src.dtype, np.floating) and code not in INTS:
            arr = np.nan_to_num(src).astype(arr.dtype)
        self[name] = self.s.tensor(arr, dtype_code=int(code))

    def reshape(self, name: str, shape: tuple) -> None:
        src = self.np[name]
        fill = np.nan if name in self.spec.outputs else 0
        arr = np.full(shape, fill, src.dtype)
        self[name] = self.s.tensor(arr)

    def over(self, name: str, ptr: int | None, *, strides=None, offset: int = 0, storage=None) -> aclTensor:
        t = self[name]
        new = acl.aclCreateTensor(list(t.shape), int(t.dtype), strides, offset, int(acl.ACL_FORMAT_ND),
                                  storage if storage is not None else list(t.shape), ptr)
        assert new is not None, acl.aclGetRecentErrMsg()
        self.s.tensors.append(new)
        self[name] = new
        return new


def nbytes(t: aclTensor) -> int:
    lo, hi = t.element_span()
    return max(hi, 1) * t.itemsize


def raw_or_none(s: Session, t: Any) -> bytes | None:
    """Every byte of the storage a tensor spans, or None when its range is not live device memory."""
    if not isinstance(t, aclTensor) or t.data is None or t.numel == 0:
        return None
    dev = acl.runtime.get_device()
    n = nbytes(t)
    alloc = dev.registry.find(t.data, n)
    if alloc is None or not alloc.on_device:
        return None
    host = bytearray(n)
    assert acl.aclrtMemcpy(host, n, t.data, n, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    return bytes(host)


# ------------------------------------------------------------------------------ the rows
@dataclass
class Row:
    id: str
    op: str | None                 # an operator of SPECS, or None for a runtime row
    mutate: Callable               # (s, args) -> (code, tokens, call or None)
    fn_name: str = ""              # the function whose message it is (prefix match)


def _null(name):
    return lambda s, a: (a.__setitem__(name, None), (NULLPTR, [name], None))[1]


def _dtype(name, code):
    return lambda s, a: (a.retype(name, code), (INVALID, [name], None))[1]


def _shape(name, shape, code, token=None):
    return lambda s, a: (a.reshape(name, shape), (code, [token or name], None))[1]


def _scalar(name, value, code, token=None):
    return lambda s, a: (a.__setitem__(name, value), (code, [token or name], None))[1]


def _lengths(name, values, token=None):
    def m(s, a):
        a[name] = s.int_array(values) if isinstance(values, list) else values
        return INVALID, [token or name], None
    return m


def _destroyed_array(name):
    def m(s, a):
        arr = s.int_array(a.spec.scalars[name])
        acl.aclDestroyIntArray(arr)
        s.arrays.remove(arr)
        a[name] = arr
        return INVALID, [name], None
    return m


def _destroyed_tensor(name):
    def m(s, a):
        t = a[name]
        acl.aclDestroyTensor(t)
        s.tensors.remove(t)
        return INVALID, [name], None
    return m


def _freed(name):
    def m(s, a):
        status, ptr = acl.aclrtMalloc(nbytes(a[name]), 0)
        acl.aclrtFree(ptr)
        a.over(name, ptr)
        return INVALID, [name], None
    return m


def _foreign(name):
    def m(s, a):
        buf = np.zeros(nbytes(a[name]) + 64, np.uint8)
        s._keep = getattr(s, "_keep", []) + [buf]
        a.over(name, buf.ctypes.data)
        return INVALID, [name], None
    return m


def _host_memory(name):
    def m(s, a):
        status, ptr = acl.aclrtMallocHost(nbytes(a[name]))
        assert status == 0
        s._host = getattr(s, "_host", []) + [ptr]
        a.over(name, ptr)
        return INVALID, [name], None
    return m


def _too_short(name):
    def m(s, a):
        need, item = nbytes(a[name]), a[name].itemsize
        a.over(name, near_end(s.malloc(need - item), need - item))   # one element past what aclrtMalloc made usable
        return INVALID, [name], None
    return m


def _past_end(name):
    def m(s, a):
        t = a[name]
        room = -(-(near_end(t.data, 0) - t.data) // t.itemsize)  # elements from t.data to the usable end
        a.over(name, t.data, offset=room - t.numel + 1, storage=[t.numel])
        return INVALID, [name], None
    return m


def _null_data(name):
    def m(s, a):
        a.over(name, None)
        return NULLPTR, [name], None
    return m


def _negative_stride(name):
    def m(s, a):
        t = a[name]
        strides = list(acl.meta.tensor.contiguous_strides(t.shape))
        k = next(i for i, n in enumerate(t.shape) if n > 1)
        strides[k] = -strides[k]
        a.over(name, t.data, strides=strides, offset=(t.shape[k] - 1) * -strides[k], storage=[t.numel])
        return INVALID, [name], None
    return m


def _alias(out, inp):
    def m(s, a):
        o, i = a[out], a[inp]
        ptr = s.malloc(max(nbytes(o), nbytes(i)))
        acl.aclrtMemcpy(ptr, nbytes(i), i.data, nbytes(i), acl.ACL_MEMCPY_DEVICE_TO_DEVICE)
        acl.aclrtMemset(ptr, nbytes(o), 0xFF, nbytes(o))  # NaN bytes where the output lies
        acl.aclrtMemcpy(ptr, nbytes(i), i.data, nbytes(i), acl.ACL_MEMCPY_DEVICE_TO_DEVICE) if nbytes(i) > nbytes(o) else None
        a.over(inp, ptr)
        a.over(out, ptr)
        return INVALID, [out], None
    return m


def _self_overlap(name):
    def m(s, a):
        t = a[name]
        strides = list(acl.meta.tensor.contiguous_strides(t.shape))
        k = next(i for i, n in enumerate(t.shape) if n > 1)
        strides[k] = 0
        a.over(name, t.data, strides=strides, storage=[t.numel])
        return INVALID, [name], None
    return m


# ---- phase 2
def _prepared(s, a, repeatable=False):
    status, ws, ex = a.spec.gws(*a.values_in_order())
    assert status == 0, acl.aclGetRecentErrMsg()
    if repeatable:
        assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    wsp = s.malloc(ws) if ws else None
    return ws, ex, wsp


def _p2(kind):
    def m(s, a):
        op, execute = a.spec.op, a.spec.execute
        ws, ex, wsp = _prepared(s, a)
        if kind == "workspace too short":
            if ws == 0:
                return INVALID, ["workspaceSize"], lambda: execute(None, -1, ex, s.stream)
            return INVALID, ["workspaceSize"], lambda: execute(wsp, ws - 1, ex, s.stream)
        if kind == "workspace None":
            return (NULLPTR if ws else INVALID), ["workspace" if ws else "workspaceSize"], lambda: execute(None, max(ws, 1) if ws else -5, ex,
                                                                                s.stream)
        if kind == "workspace freed":
            if not ws:
                return INVALID, ["workspaceSize"], lambda: execute(None, "1", ex, s.stream)
            p = s.malloc(ws)
            s.pointers.remove(p)
            acl.aclrtFree(p)
            return INVALID, ["workspace"], lambda: execute(p, ws, ex, s.stream)
        if kind == "workspace foreign":
            buf = np.zeros(max(ws, 1), np.uint8)
            s._keep = getattr(s, "_keep", []) + [buf]
            if not ws:
                return INVALID, ["workspaceSize"], lambda: execute(buf.ctypes.data, 2 ** 70 * -1, ex, s.stream)
            return INVALID, ["workspace"], lambda: execute(buf.ctypes.data, ws, ex, s.stream)
        if kind == "executor None":
            return NULLPTR, ["executor"], lambda: execute(wsp, ws, None, s.stream)
        if kind == "executor garbage":
            return INVALID, ["executor"], lambda: execute(wsp, ws, object(), s.stream)
        if kind == "executor spent":
            assert execute(wsp, ws, ex, s.stream) == 0, acl.aclGetRecentErrMsg()
            assert acl.aclrtSynchronizeStream(s.stream) == 0
            for o in a.spec.outputs:  # the first (good) run wrote them: poison again
                t = a[o]
                if isinstance(t, aclTensor) and t.numel:
                    acl.aclrtMemset(t.data, nbytes(t), 0xFF, nbytes(t))
            return INVALID, ["executor"], lambda: execute(wsp, ws, ex, s.stream)
        if kind == "executor destroyed":
            assert acl.aclDestroyAclOpExecutor(ex) == 0
            return INVALID, ["executor"], lambda: execute(wsp, ws, ex, s.stream)
        if kind == "executor foreign":
            other = next(sp for sp in SPECS.values() if sp.op != op)
            b = Args(other, s)
            _, _, ex2 = other.gws(*b.values_in_order())
            return INVALID, ["executor"], lambda: execute(wsp, ws, ex2, s.stream)
        if kind == "stream destroyed":
            st, stream = acl.aclrtCreateStream()
            acl.aclrtDestroyStream(stream)
            return INVALID, ["stream"], lambda: execute(wsp, ws, ex, stream)
        if kind == "stream garbage":
            return INVALID, ["stream"], lambda: execute(wsp, ws, ex, 12345)
        raise AssertionError(kind)
    return m


def _p2_freed(name):
    """A tensor's memory freed between phase 1 and phase 2."""
    def m(s, a):
        t = a[name]
        ptr = s.malloc(nbytes(t))
        acl.aclrtMemcpy(ptr, nbytes(t), t.data, nbytes(t), acl.ACL_MEMCPY_DEVICE_TO_DEVICE)
        a.over(name, ptr)
        ws, ex, wsp = _prepared(s, a)
        s.pointers.remove(ptr)
        acl.aclrtFree(ptr)
        return INVALID, [name], lambda: a.spec.execute(wsp, ws, ex, s.stream)
    return m


PHASE2 = ["workspace too short", "workspace None", "workspace freed", "workspace foreign", "executor None",
          "executor garbage", "executor spent", "executor destroyed", "executor foreign", "stream destroyed",
          "stream garbage"]


def _op_rows(spec: Spec) -> list[Row]:
    rows: list[Row] = []
    add = lambda what, m: rows.append(Row(f"{spec.op}-{what}", spec.op, m, spec.op))  # noqa: E731
    arrays = spec.arrays()
    tensors = [n for n in spec.order if n in arrays]
    required = [n for n in spec.order if (n in arrays or n in spec.int_arrays) and n not in spec.optional]
    for n in required:
        add(f"null {n}", _null(n))
    for n, codes in spec.bad_dtypes.items():
        for code in codes:
            add(f"dtype {n} {D(code).name}", _dtype(n, code))
    for n in tensors:
        add(f"rank {n}", _shape(n, spec.rank_bad(n, arrays[n].shape), spec.shape_code))
    for n, shape in spec.shape_bad.items():
        # CTC forward: a shorter T is reported on the input length that no longer fits
        token = "T" if (spec.op, n) == ("aclnnCtcLoss", "logProbs") else None
        add(f"shape {n} {list(shape)}", _shape(n, shape, spec.shape_code, token))
    for n, value, code in spec.bad_scalars:
        # a huge pad is legal by itself: the rule broken is the output length it implies
        add(f"scalar {n}={value!r}", _scalar(n, value, code, "Tout" if (n, value) == ("pad", 2 ** 40) else None))
    for n in tensors:
        add(f"destroyed {n}", _destroyed_tensor(n))
        add(f"wrong type {n}", _scalar(n, np.zeros(3), INVALID))
        if arrays[n].size:
            add(f"freed {n}", _freed(n))
            add(f"foreign {n}", _foreign(n))
            add(f"host memory {n}", _host_memory(n))
            add(f"too short {n}", _too_short(n))
            add(f"past end {n}", _past_end(n))
            add(f"null data {n}", _null_data(n))
            if any(d > 1 for d in arrays[n].shape):
                add(f"negative stride {n}", _negative_stride(n))
            add(f"phase2 freed {n}", _p2_freed(n))
    for out in spec.outputs:
        for inp in tensors:
            # KL backward never reads self's data (only its shape): out over self is proven correct in
            # test_kl_backward_out_over_self_is_correct instead of refused
            if inp != out and (spec.op, inp) != ("aclnnKlDivBackward", "self"):
                add(f"alias {out}={inp}", _alias(out, inp))
        if any(d > 1 for d in arrays[out].shape):
            add(f"self overlap {out}", _self_overlap(out))
    for n in spec.int_arrays:
        add(f"destroyed {n}", _destroyed_array(n))
        add(f"list {n}", _scalar(n, list(spec.scalars[n]), INVALID))
    if spec.int_arrays:
        add("inputLengths negative", _lengths("inputLengths", [-1, 5]))
        add("inputLengths > T", _lengths("inputLengths", [7, 5]))
        add("inputLengths huge", _lengths("inputLengths", [2 ** 62, 5]))
        add("inputLengths int64 min", _lengths("inputLengths", [-2 ** 63, 5]))
        add("inputLengths too many", _lengths("inputLengths", [6, 5, 4]))
        add("inputLengths too few", _lengths("inputLengths", [6]))
        add("targetLengths negative", _lengths("targetLengths", [-1, 2]))
        add("targetLengths too large", _lengths("targetLengths", [4, 2]))
        add("targetLengths huge", _lengths("targetLengths", [2 ** 62, 2]))
        add("targetLengths too many", _lengths("targetLengths", [3, 2, 1]))
    for kind in PHASE2:
        add(f"phase2 {kind}", _p2(kind))
    return rows


# ---- runtime rows: (id, fn name, builder(s) -> (code, tokens, call))
def _rt(fn, code, tokens, make_args):
    def m(s, a):
        args = make_args(s)
        return code, tokens, lambda: getattr(acl, fn)(*args)
    return m


def _dead_stream(s):
    _, st = acl.aclrtCreateStream()
    acl.aclrtDestroyStream(st)
    return st


def _dead_event(s):
    _, ev = acl.aclrtCreateEvent()
    acl.aclrtDestroyEvent(ev)
    return ev


def _freed_ptr(s):
    _, p = acl.aclrtMalloc(64, 0)
    acl.aclrtFree(p)
    return p


def _live(s):
    return s.malloc(64)


def _event(s):
    _, ev = acl.aclrtCreateEvent()
    return ev


def _runtime_rows() -> list[Row]:
    P, E = RT_PARAM, INVALID
    H2D, D2H = int(acl.ACL_MEMCPY_HOST_TO_DEVICE), int(acl.ACL_MEMCPY_DEVICE_TO_HOST)
    table = [
        ("aclrtFree", P, ["allocation"], lambda s: (12345,)),
        ("aclrtFree", P, ["None"], lambda s: (None,)),
        ("aclrtFree", P, ["'x'"], lambda s: ("x",)),
        ("aclrtFree", P, ["allocation"], lambda s: (_freed_ptr(s),)),
        ("aclrtFree", P, ["interior"], lambda s: (_live(s) + 8,)),
        ("aclrtFree", P, ["device"], lambda s: (acl.aclrtMallocHost(16)[1],)),
        ("aclrtFreeHost", P, ["host"], lambda s: (_live(s),)),
        ("aclrtFreeHost", P, ["allocation"], lambda s: (-1,)),
        ("aclrtMalloc", P, ["size"], lambda s: (0, 0)),
        ("aclrtMalloc", P, ["size"], lambda s: (-1, 0)),
        ("aclrtMalloc", P, ["size"], lambda s: ("64", 0)),
        ("aclrtMalloc", P, ["size"], lambda s: (None, 0)),
        ("aclrtMalloc", P, ["policy"], lambda s: (64, 99)),
        ("aclrtMalloc", P, ["policy"], lambda s: (64, "x")),
        ("aclrtMallocHost", P, ["size"], lambda s: (0,)),
        ("aclrtMallocHost", P, ["size"], lambda s: (-5,)),
        ("aclrtMemcpy", P, ["dst"], lambda s: (12345, 8, b"12345678", 8, H2D)),
        ("aclrtMemcpy", P, ["dst"], lambda s: (_freed_ptr(s), 8, b"12345678", 8, H2D)),
        ("aclrtMemcpy", P, ["src"], lambda s: (bytearray(8), 8, _freed_ptr(s), 8, D2H)),
        ("aclrtMemcpy", P, ["dst"], lambda s: (_live(s), 128, bytes(128), 128, H2D)),
        ("aclrtMemcpy", P, ["count"], lambda s: (_live(s), 8, b"12345678", 16, H2D)),
        ("aclrtMemcpy", P, ["destMax"], lambda s: (_live(s), -1, b"1", 1, H2D)),
        ("aclrtMemcpy", P, ["count"], lambda s: (_live(s), 8, b"1", -1, H2D)),
        ("aclrtMemcpy", P, ["kind"], lambda s: (_live(s), 8, b"12345678", 8, 9)),
        ("aclrtMemcpy", P, ["kind"], lambda s: (_live(s), 8, b"12345678", 8, "h2d")),
        ("aclrtMemcpy", P, ["src"], lambda s: (_live(s), 8, None, 8, H2D)),
        ("aclrtMemcpy", P, ["src"], lambda s: (_live(s), 8, object(), 8, H2D)),
        ("aclrtMemcpy", P, ["src"], lambda s: (_live(s), 8, b"1234", 8, H2D)),
        ("aclrtMemcpy", P, ["dst"], lambda s: (bytes(8), 8, _live(s), 8, D2H)),
        ("aclrtMemcpy", P, ["dst"], lambda s: (bytearray(8), 8, bytes(8), 8, H2D)),
        ("aclrtMemcpyAsync", P, ["stream"], lambda s: (_live(s), 8, b"12345678", 8, H2D, _dead_stream(s))),
        ("aclrtMemcpyAsync", P, ["stream"], lambda s: (_live(s), 8, b"12345678", 8, H2D, "stream")),
        ("aclrtMemset", P, ["devPtr"], lambda s: (12345, 8, 0, 8)),
        ("aclrtMemset", P, ["devPtr"], lambda s: (_freed_ptr(s), 8, 0, 8)),
        ("aclrtMemset", P, ["devPtr"], lambda s: (_live(s), 128, 0, 128)),
        ("aclrtMemset", P, ["count"], lambda s: (_live(s), 8, 0, 16)),
        ("aclrtMemset", P, ["value"], lambda s: (_live(s), 8, "x", 8)),
        ("aclrtMemset", P, ["devPtr"], lambda s: (None, 8, 0, 8)),
        ("aclrtMemsetAsync", P, ["stream"], lambda s: (_live(s), 8, 0, 8, _dead_stream(s))),
        ("aclrtDestroyStream", P, ["stream"], lambda s: (None,)),
        ("aclrtDestroyStream", P, ["stream"], lambda s: (_dead_stream(s),)),
        ("aclrtDestroyStream", P, ["stream"], lambda s: (object(),)),
        ("aclrtSynchronizeStream", P, ["stream"], lambda s: (_dead_stream(s),)),
        ("aclrtSynchronizeStream", P, ["stream"], lambda s: (1,)),
        ("aclrtCreateEvent", 0, [], lambda s: ()),  # sanity row: success, no message needed
        ("aclrtDestroyEvent", P, ["event"], lambda s: (_dead_event(s),)),
        ("aclrtDestroyEvent", P, ["event"], lambda s: (None,)),
        ("aclrtDestroyEvent", P, ["event"], lambda s: ("ev",)),
        ("aclrtRecordEvent", P, ["event"], lambda s: (_dead_event(s), s.stream)),
        ("aclrtRecordEvent", P, ["stream"], lambda s: (_event(s), _dead_stream(s))),
        ("aclrtRecordEvent", P, ["event"], lambda s: (None, s.stream)),
        ("aclrtStreamWaitEvent", P, ["event"], lambda s: (s.stream, _dead_event(s))),
        ("aclrtStreamWaitEvent", P, ["stream"], lambda s: (_dead_stream(s), _event(s))),
        ("aclrtStreamWaitEvent", P, ["stream"], lambda s: (42, _event(s))),
        ("aclrtSynchronizeEvent", P, ["event"], lambda s: (_dead_event(s),)),
        ("aclrtSynchronizeEvent", P, ["event"], lambda s: (3.5,)),
        ("aclrtQueryEventStatus", P, ["event"], lambda s: (_dead_event(s),)),
        ("aclrtEventElapsedTime", P, ["startEvent"], lambda s: (_dead_event(s), _event(s))),
        ("aclrtEventElapsedTime", P, ["endEvent"], lambda s: (_event(s), None)),
        ("aclrtEventElapsedTime", P, ["recorded"], lambda s: (_event(s), _event(s))),
        ("aclrtSetDevice", RT_DEVID, ["deviceId"], lambda s: (1,)),
        ("aclrtSetDevice", RT_DEVID, ["deviceId"], lambda s: ("0",)),
        ("aclrtSetDevice", RT_DEVID, ["deviceId"], lambda s: (-1,)),
        ("aclrtResetDevice", RT_DEVID, ["deviceId"], lambda s: (7,)),
        ("aclDestroyTensor", E, ["aclTensor"], lambda s: ("tensor",)),
        ("aclDestroyTensor", E, ["destroyed"], lambda s: (_dead_tensor(s),)),
        ("aclDestroyIntArray", E, ["aclIntArray"], lambda s: (5,)),
        ("aclDestroyIntArray", E, ["destroyed"], lambda s: (_dead_array(s),)),
        ("aclSetAclOpExecutorRepeatable", INNER_NULLPTR, ["executor"], lambda s: (None,)),
        ("aclSetAclOpExecutorRepeatable", E, ["aclOpExecutor"], lambda s: ("ex",)),
        ("aclSetAclOpExecutorRepeatable", E, ["destroyed"], lambda s: (_dead_executor(s),)),
        ("aclDestroyAclOpExecutor", INNER_NULLPTR, ["executor"], lambda s: (None,)),
        ("aclDestroyAclOpExecutor", E, ["aclOpExecutor"], lambda s: (1.0,)),
        ("aclDestroyAclOpExecutor", E, ["destroyed"], lambda s: (_dead_executor(s),)),
        ("aclGetViewShape", NULLPTR, ["tensor"], lambda s: (None,)),
        ("aclGetViewShape", E, ["aclTensor"], lambda s: ("t",)),
        ("aclGetViewStrides", E, ["aclTensor"], lambda s: (_dead_tensor(s),)),
        ("aclGetDataType", E, ["aclTensor"], lambda s: (object(),)),
    ]
    rows = []
    counts: dict = {}
    for fn, code, tokens, make in table:
        counts[fn] = counts.get(fn, 0) + 1
        rows.append(Row(f"runtime-{fn}-{counts[fn]}", None, _rt(fn, code, tokens, make), fn))
    # constructors that return None (C's NULL) with a message
    for i, args in enumerate([([2, -1], 0, None, 0, 2, None, None), ([2], 999, None, 0, 2, None, None),
                              ([2], 0, [1, 1], 0, 2, None, None), ([2], 0, None, -1, 2, None, None),
                              ([2], 0, None, 0, 77, None, None), ([2], 0, None, 0, 2, None, "addr"),
                              ("xy", 0, None, 0, 2, None, None), ([2], 0, None, 0, 2, [-3], None),
                              ([2], 0, None, 0, 2, None, -8), ([1] * 65, 0, None, 0, 2, None, None)]):
        rows.append(Row(f"runtime-aclCreateTensor-{i + 1}", None, _ctor("aclCreateTensor", args), "aclCreateTensor"))
    for i, args in enumerate([(None,), ([1, "2"],), ([2 ** 64],), (5,), ([1.5],)]):
        rows.append(Row(f"runtime-aclCreateIntArray-{i + 1}", None, _ctor("aclCreateIntArray", args),
                        "aclCreateIntArray"))
    return rows


def _ctor(fn, args):
    def m(s, a):
        def call():
            result = getattr(acl, fn)(*args)
            return "NULL" if result is None else result
        return "NULL", [], call
    return m


def _dead_tensor(s):
    t = acl.aclCreateTensor([2], 0, None, 0, 2, None, None)
    acl.aclDestroyTensor(t)
    return t


def _dead_array(s):
    arr = acl.aclCreateIntArray([1])
    acl.aclDestroyIntArray(arr)
    return arr


def _dead_executor(s):
    spec = SPECS["aclnnKlDiv"]
    a = Args(spec, s)
    _, _, ex = spec.gws(*a.values_in_order())
    acl.aclDestroyAclOpExecutor(ex)
    return ex


ROWS = [r for spec in SPECS.values() for r in _op_rows(spec)] + _runtime_rows()

# Rows where the library misbehaves today (and docs/HARDENING.md lists); xfail(strict) so a fix shows.
KNOWN_BUGS: dict[str, str] = {}

TALLY = {"tried": 0, "crashes": 0, "wrong": 0, "known": 0, "ops": set()}


def _param(row: Row):
    marks = [pytest.mark.xfail(reason=KNOWN_BUGS[row.id], strict=True)] if row.id in KNOWN_BUGS else []
    return pytest.param(row, id=row.id, marks=marks)


@pytest.fixture(scope="module")
def cpu():
    s = Session("cpu")
    yield s
    s.close()
    for p in getattr(s, "_host", []):
        acl.aclrtFreeHost(p)


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_bad_input(cpu, row):
    s = cpu
    TALLY["tried"] += 1
    known = row.id in KNOWN_BUGS
    problems: list[str] = []
    outputs: list = []
    try:
        args = Args(SPECS[row.op], s) if row.op else None
        code, tokens, call = row.mutate(s, args)
        if args is not None:
            outputs = [args[o] for o in args.spec.outputs]
            inputs = [args[n] for n in args.spec.order if isinstance(args[n], aclTensor) and n not in args.spec.outputs]
        before = [raw_or_none(s, t) for t in outputs]
        inputs_before = [raw_or_none(s, t) for t in inputs] if args is not None else []
        acl.base.errors.set_recent_error("")
        result = call() if call is not None else args.spec.gws(*args.values_in_order())
    except Exception as e:  # noqa: BLE001 - an exception out of the API is the crash we count
        TALLY["crashes" if not known else "known"] += 1
        pytest.fail(f"{row.id}: raised {type(e).__name__}: {e}")
    status = result[0] if isinstance(result, tuple) else result
    message = acl.aclGetRecentErrMsg()
    if code == "NULL":  # constructors: None plus a message
        if status != "NULL":
            problems.append(f"returned {result!r}, expected None")
    elif int(status) != code:
        problems.append(f"code {int(status)} != expected {code} ({message!r})")
    if isinstance(result, tuple) and status != 0 and any(v is not None for v in result[1:]):
        problems.append(f"out-parameters {result[1:]} not None on failure")
    if code != 0:
        if not message.startswith(row.fn_name) or ":" not in message:
            problems.append(f"message {message!r} does not start with {row.fn_name}")
        if "\n" in message or not message.strip():
            problems.append(f"message {message!r} is not one line")
        for tok in tokens:
            if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(tok)}(?![A-Za-z0-9_])", message):
                problems.append(f"message {message!r} does not name {tok!r}")
        if "internal error" in message:
            problems.append(f"internal error reported: {message!r}")
    acl.aclrtSynchronizeStream(s.stream)
    after = [raw_or_none(s, t) for t in outputs]
    if after != before:
        problems.append("an output's bytes changed on a failed call")
    if args is not None and [raw_or_none(s, t) for t in inputs] != inputs_before:
        problems.append("an input's bytes changed")
    if row.op:
        TALLY["ops"].add(row.op)
    if problems:
        TALLY["wrong" if not known else "known"] += 1
        pytest.fail(f"{row.id}: " + "; ".join(problems))


@pytest.mark.parametrize("kind", ["cpu", "emulated"])
def test_kl_backward_out_over_self_is_correct(kind):
    """An output over an input the operator never reads is allowed when the result is right: KL backward
    reads only self's shape, so `out` may share self's memory (PyTorch's in-place pattern)."""
    s = Session(kind)
    try:
        spec = SPECS["aclnnKlDivBackward"]
        a = Args(spec, s)
        assert s.run(spec.gws, spec.execute, *a.values_in_order()) == 0, acl.aclGetRecentErrMsg()
        expected = s.read(a["out"])
        b = Args(spec, s)
        b.over("out", b["self"].data)
        assert s.run(spec.gws, spec.execute, *b.values_in_order()) == 0, acl.aclGetRecentErrMsg()
        np.testing.assert_array_equal(s.read(b["out"]), expected)
    finally:
        s.close()


def test_zz_bad_input_summary(figures):
    """Runs after the table (file order): prints the figure and fails if any row crashed or was wrong."""
    n_ops = len(TALLY["ops"])
    figures(f"bad inputs tried: {TALLY['tried']}, crashes: {TALLY['crashes']}, wrong codes: {TALLY['wrong']}")
    figures(f"bad inputs: {n_ops} operator entry points + runtime; {len(ROWS)} rows; "
            f"known library bugs (xfail rows): {TALLY['known']}")
    assert TALLY["crashes"] == 0 and TALLY["wrong"] == 0
    assert TALLY["tried"] == 0 or TALLY["tried"] >= 300 or TALLY["tried"] < len(ROWS)  # -k subsets allowed
