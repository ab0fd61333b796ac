"""Every handle kind of the API misused as a hostile caller would (docs/HARDENING.md, "Misused
handles"): destroyed with nullptr, destroyed twice, used after its destroy, given to the destroy of
every other kind, and forged (an object the API never made). Each misuse gets a documented code
that is not an internal error, a message that names the function, and a handle given to the wrong
destroy is left alive and usable (tests/capi/test_capi_handle_misuse.py does the same from C, under ASan).
"""
from __future__ import annotations

import pytest

import aclnn_gpu as acl
from aclnn_gpu.base.status import aclError, aclnnStatus

# codes that say "bug in the library", never an answer to a bad argument
INTERNAL = {int(aclError.ACL_ERROR_INTERNAL_ERROR), int(aclnnStatus.ACLNN_ERR_INNER), int(acl.HCCL_E_INTERNAL),
            int(aclError.ACL_ERROR_RT_INTERNAL_ERROR)}


def _code(result) -> int:
    return int(result[0] if isinstance(result, tuple) else result)


def _ok(result):
    assert _code(result) == 0, acl.aclGetRecentErrMsg()
    return result[1] if isinstance(result, tuple) else result


def _tensor():
    ptr = _ok(acl.aclrtMalloc(64, 0))
    return acl.aclCreateTensor([2, 3], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [2, 3], ptr)


def _executor():
    t = [_tensor() for _ in range(4)]
    ret, _, executor = acl.aclnnKlDivBackwardGetWorkspaceSize(t[0], t[1], t[2], 1, False, t[3])
    assert ret == 0, acl.aclGetRecentErrMsg()
    return executor


def _run_model(model) -> int:
    code = _code(acl.aclmdlRIExecuteAsync(model, None))
    return code or _code(acl.aclrtSynchronizeStream(None))


def _model():
    stream = _ok(acl.aclrtCreateStream())
    ptr = _ok(acl.aclrtMalloc(64, 0))
    _ok(acl.aclmdlRICaptureBegin(stream, 0))
    _ok(acl.aclrtMemsetAsync(ptr, 64, 1, 64, stream))
    return _ok(acl.aclmdlRICaptureEnd(stream))


def _comm():
    root = _ok(acl.HcclGetRootInfo())
    return _ok(acl.HcclCommInitRootInfo(1, root, 0))


# kind: (make, destroy, use, destroy(nullptr) is a no-op)
KINDS = {
    "tensor": (_tensor, acl.aclDestroyTensor, acl.aclGetViewShape, True),
    "scalar": (lambda: acl.aclCreateScalar(1.5, acl.ACL_FLOAT), acl.aclDestroyScalar,
               lambda s: 0 if acl.aclCreateScalarList([s]) is not None else acl.ACLNN_ERR_PARAM_INVALID, True),
    "int_array": (lambda: acl.aclCreateIntArray([1, 2]), acl.aclDestroyIntArray, acl.aclGetIntArraySize, True),
    "float_array": (lambda: acl.aclCreateFloatArray([1.0]), acl.aclDestroyFloatArray, acl.aclGetFloatArraySize,
                    True),
    "bool_array": (lambda: acl.aclCreateBoolArray([True]), acl.aclDestroyBoolArray, acl.aclGetBoolArraySize, True),
    "tensor_list": (lambda: acl.aclCreateTensorList([_tensor()]), acl.aclDestroyTensorList,
                    acl.aclGetTensorListSize, True),
    "scalar_list": (lambda: acl.aclCreateScalarList([acl.aclCreateScalar(1, acl.ACL_INT32)]),
                    acl.aclDestroyScalarList, acl.aclGetScalarListSize, True),
    "executor": (_executor, acl.aclDestroyAclOpExecutor, acl.aclSetAclOpExecutorRepeatable, False),
    "stream": (lambda: _ok(acl.aclrtCreateStream()), acl.aclrtDestroyStream, acl.aclrtSynchronizeStream, False),
    "event": (lambda: _ok(acl.aclrtCreateEvent()), acl.aclrtDestroyEvent, acl.aclrtQueryEventStatus, False),
    "context": (lambda: _ok(acl.aclrtCreateContext(0)), acl.aclrtDestroyContext, acl.aclrtSetCurrentContext, False),
    "model": (_model, acl.aclmdlRIDestroy, _run_model, False),
    "hccl_comm": (_comm, acl.HcclCommDestroy, acl.HcclGetRankSize, True),
}


class Forged:
    """An object the API never made (the C ABI turns a forged pointer into one like it)."""


def _refused(result, fn: str, case: str) -> int:
    code = _code(result)
    message = acl.aclGetRecentErrMsg()
    assert code != 0, f"{fn} {case}: accepted"
    assert code not in INTERNAL, f"{fn} {case}: internal error {code}: {message}"
    assert fn in message, f"{fn} {case}: message does not name the function: {message}"
    return code


@pytest.fixture(scope="module")
def device():
    acl.aclrtSetDevice(0)
    yield
    acl.aclrtSetDevice(0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_null_twice_after_destroy_and_forged(kind, device, cpu_session, figures):
    make, destroy, use, null_is_noop = KINDS[kind]
    fn = destroy.__name__
    if null_is_noop:
        assert _code(destroy(None)) == 0, f"{fn}(nullptr) is a no-op in CANN"
    else:
        _refused(destroy(None), fn, "nullptr")
    for forged in (Forged(), 0x1230, "handle"):
        _refused(destroy(forged), fn, f"forged {forged!r}")
    obj = make()
    assert _code(use(obj)) == 0, acl.aclGetRecentErrMsg()
    assert _code(destroy(obj)) == 0, acl.aclGetRecentErrMsg()
    codes = {_refused(destroy(obj), fn, "destroyed twice")}
    code = _code(use(obj))
    assert code != 0 and code not in INTERNAL, f"{kind} used after its destroy: {code} {acl.aclGetRecentErrMsg()}"
    figures(f"handle misuse, {kind}: nullptr {'no-op' if null_is_noop else 'refused'}, forged / twice / "
            f"after destroy refused with {sorted(codes | {code})}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_destroy_of_another_kind_leaves_the_handle_alive(kind, device, cpu_session):
    make, _, use, _ = KINDS[kind]
    obj = make()
    for other, (_, destroy, _, _) in sorted(KINDS.items()):
        if other == kind:
            continue
        _refused(destroy(obj), destroy.__name__, f"given a {kind}")
    assert _code(use(obj)) == 0, f"{kind} no longer usable after the wrong destroys: {acl.aclGetRecentErrMsg()}"
    assert _code(KINDS[kind][1](obj)) == 0, acl.aclGetRecentErrMsg()
