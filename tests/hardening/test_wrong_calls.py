"""Every public C-style function called with the wrong number of arguments or a wrong keyword:
ACLNN_ERR_PARAM_INVALID (aclnn*) or ACL_ERROR_INVALID_PARAM (acl*), with a message naming the
function and its parameters in C order, never an internal error naming private code. Also the
phase-2 pointer check that the registry's generation count makes O(1): a pointer freed after an
execute passed is still refused, with phase 1's code and message."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from support import DEVICE_KINDS, Session

import aclnn_gpu as acl
from aclnn_gpu.base.status import aclError, aclnnStatus


def _c_functions() -> list[str]:
    names = []
    for name in dir(acl):
        fn = getattr(acl, name)
        if name.startswith("acl") and callable(fn) and hasattr(fn, "__wrapped__") and not inspect.isclass(fn):
            names.append(name)
    return sorted(names)


C_FUNCTIONS = _c_functions()


def test_every_c_function_is_listed():
    # the five operators' 20 entry points and the runtime's: a listing that lost them would test nothing
    assert sum(n.startswith("aclnn") for n in C_FUNCTIONS) >= 20
    assert len(C_FUNCTIONS) >= 50


def _status(ret):
    return ret[0] if isinstance(ret, tuple) else ret


def _expected(name: str) -> int:
    """aclnn* (and the aclnn_base helpers such as aclGetViewShape, whose other failures are aclnn
    codes too): ACLNN_ERR_PARAM_INVALID; the ACL runtime (aclrt*, aclInit ...): ACL_ERROR_INVALID_PARAM."""
    status = getattr(acl, name).bad_call_status
    if name.startswith("aclnn"):
        assert status == aclnnStatus.ACLNN_ERR_PARAM_INVALID
    if name.startswith(("aclrt", "aclInit", "aclFinalize")):
        assert status == aclError.ACL_ERROR_INVALID_PARAM
    assert status in (aclnnStatus.ACLNN_ERR_PARAM_INVALID, aclError.ACL_ERROR_INVALID_PARAM)
    return status


@pytest.mark.parametrize("name", C_FUNCTIONS)
@pytest.mark.parametrize("call", ["too_many", "bad_keyword", "missing"])
def test_wrong_call_is_a_parameter_error(name, call):
    fn = getattr(acl, name)
    params = list(inspect.signature(fn).parameters.values())
    if call == "too_many":
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            pytest.skip("takes any number of positional arguments")
        args, kwargs = [None] * (len(params) + 2), {}
    elif call == "bad_keyword":
        args, kwargs = [], {"notAParameter": 1}
    else:
        required = [p for p in params if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
        if not required:
            pytest.skip("no required parameter")
        args, kwargs = [], {}
    acl.aclrtSetDevice(0)
    ret = fn(*args, **kwargs)
    message = acl.aclGetRecentErrMsg()
    expected_params = f"expected {name}({', '.join(p.name for p in params)})"
    if ret is None:   # the functions that return an object return NULL on error
        pass
    else:
        assert _status(ret) == _expected(name), (name, ret, message)
        if isinstance(ret, tuple):
            assert all(v is None for v in ret[1:])
    assert message.startswith(f"{name}: wrong arguments"), message
    assert expected_params in message, message
    assert "internal" not in message and "_build" not in message, message


@pytest.fixture(params=DEVICE_KINDS)
def session(request):
    s = Session(request.param)
    yield s
    s.close()


def _kl_backward(s: Session):
    rng = np.random.default_rng(3)
    g = s.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    x = s.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    t = s.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    out = s.tensor(np.zeros((4, 8), np.float32))
    status, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(g, x, t, 1, True, out)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    work = s.malloc(ws) if ws else None
    return (g, x, t, out), ws, ex, work


def test_pointer_freed_after_a_passed_execute_is_refused(session):
    (_g, _x, t, _out), ws, ex, work = _kl_backward(session)
    for _ in range(2):   # the second execute takes the O(1) path
        assert acl.aclnnKlDivBackward(work, ws, ex, session.stream) == 0, acl.aclGetRecentErrMsg()
    other = session.malloc(64)
    assert acl.aclrtFree(other) == 0      # an unrelated free: the full check runs again and passes
    session.pointers.remove(other)
    assert acl.aclnnKlDivBackward(work, ws, ex, session.stream) == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeStream(session.stream) == 0
    assert acl.aclrtFree(t.data) == 0
    session.pointers.remove(t.data)
    assert acl.aclnnKlDivBackward(work, ws, ex, session.stream) == aclnnStatus.ACLNN_ERR_PARAM_INVALID
    message = acl.aclGetRecentErrMsg()
    assert message.startswith("aclnnKlDivBackward: target data: address") and "not inside a live allocation" in message


def test_destroyed_tensor_after_a_passed_execute_is_refused(session):
    (g, _x, _t, _out), ws, ex, work = _kl_backward(session)
    assert acl.aclnnKlDivBackward(work, ws, ex, session.stream) == 0
    assert acl.aclDestroyTensor(g) == 0
    session.tensors.remove(g)
    assert acl.aclnnKlDivBackward(work, ws, ex, session.stream) == aclnnStatus.ACLNN_ERR_PARAM_INVALID
    assert acl.aclGetRecentErrMsg() == "aclnnKlDivBackward: gradOutput was destroyed"


def test_repeated_execute_reads_new_input_values(session):
    """A frozen launch holds addresses, never values: new inputs give new results."""
    (g, _x, _t, out), ws, ex, work = _kl_backward(session)
    results = []
    for value in (1.0, 2.0):
        assert acl.aclrtMemcpy(g.data, 4 * 32, np.full(32, value, np.float32).tobytes(), 4 * 32,
                               acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0, acl.aclGetRecentErrMsg()
        assert acl.aclnnKlDivBackward(work, ws, ex, session.stream) == 0
        assert acl.aclrtSynchronizeStream(session.stream) == 0
        results.append(session.read(out))
    np.testing.assert_array_equal(results[1], 2 * results[0])
