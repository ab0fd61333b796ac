"""aclnnKlDiv / aclnnKlDivBackward on the cpu and emulated devices against PyTorch CPU autograd in
float64 (and the NumPy reference), plus the bad-input table."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import aclnn_gpu as acl
from aclnn_gpu.base import dtypes
from support import assert_close, assert_refused, near_end

REDUCTIONS = {0: "none", 1: "mean", 2: "sum", 3: "batchmean"}
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16, np.dtype(np.float64)]


def torch_kl(self64: np.ndarray, target64: np.ndarray, reduction: int, log_target: bool, grad64: np.ndarray):
    """Forward and d/dself in float64 with CANN's reductions (batchmean divides by B[0])."""
    x = torch.tensor(self64, requires_grad=True)
    t = torch.tensor(target64)
    xb, tb = torch.broadcast_tensors(x, t)
    elementwise = torch.nn.functional.kl_div(xb, tb, reduction="none", log_target=log_target)
    if reduction == 0:
        loss = elementwise
    elif reduction == 1:
        loss = elementwise.mean()
    elif reduction == 2:
        loss = elementwise.sum()
    else:
        loss = elementwise.sum() / (elementwise.shape[0] if elementwise.dim() else 1)
    loss.backward(torch.broadcast_to(torch.tensor(grad64), loss.shape))
    return loss.detach().numpy(), x.grad.numpy()


def random_shapes(rng: np.random.Generator):
    """self and target shapes: equal, target broadcasting beyond self, self beyond target, a 0-D
    target, a 0-D self."""
    rank = int(rng.integers(1, 5))
    base = [int(rng.integers(1, 7)) for _ in range(rank)]
    form = rng.integers(0, 5)
    if form == 3:
        return base, []
    if form == 4:
        return [], base
    if form == 0:
        return base, base
    if form == 1:  # target broadcasts beyond self (extra leading dim, a size-1 dim in self)
        self_shape = list(base)
        self_shape[int(rng.integers(0, rank))] = 1
        return self_shape, [int(rng.integers(2, 4))] + base
    target = list(base)
    target[int(rng.integers(0, rank))] = 1
    return base, target[int(rng.integers(0, rank)):]


def cast(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.asarray(array).astype(dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", [0, 1, 2, 3], ids=REDUCTIONS.get)
def test_backward_random(session, rng, dtype, reduction):
    for trial in range(3):
        self_shape, target_shape = random_shapes(rng)
        log_target = bool(rng.integers(0, 2))
        broadcast = np.broadcast_shapes(self_shape, target_shape)
        grad_shape = broadcast if reduction == 0 and rng.integers(0, 2) else ()
        x = cast(rng.standard_normal(self_shape), dtype)
        t = cast(rng.standard_normal(target_shape) if log_target else rng.random(target_shape), dtype)
        g = cast(rng.standard_normal(grad_shape), dtype)
        strided = bool(rng.integers(0, 2)) and len(target_shape) > 0
        out = session.poisoned(self_shape, dtype, strided=strided)
        status = session.run(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward,
                             session.tensor(g), session.tensor(x), session.tensor(t, strided=strided, offset=3),
                             reduction, log_target, out)
        assert status == 0, acl.aclGetRecentErrMsg()
        _, expected = torch_kl(x.astype(np.float64), t.astype(np.float64), reduction, log_target,
                               g.astype(np.float64))
        got = session.read(out)
        assert not np.isnan(got.astype(np.float64)).any(), "an output element was left unwritten"
        terms = max(1, int(np.prod(broadcast)) // max(1, int(np.prod(self_shape))))
        assert_close(got, expected, dtype, scale=float(terms), what=f"{self_shape} {target_shape} {log_target}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", [0, 1, 2, 3], ids=REDUCTIONS.get)
def test_forward_random(session, rng, dtype, reduction):
    for trial in range(2):
        self_shape, target_shape = random_shapes(rng)
        log_target = bool(rng.integers(0, 2))
        broadcast = np.broadcast_shapes(self_shape, target_shape)
        x = cast(rng.standard_normal(self_shape), dtype)
        t = cast(rng.standard_normal(target_shape) if log_target else rng.random(target_shape), dtype)
        if not log_target and t.size:
            t.reshape(-1)[0] = 0  # xlogy's 0 * log 0
        out = session.poisoned(broadcast if reduction == 0 else (), dtype)
        status = session.run(acl.aclnnKlDivGetWorkspaceSize, acl.aclnnKlDiv, session.tensor(x, strided=True),
                             session.tensor(t), reduction, log_target, out)
        assert status == 0, acl.aclGetRecentErrMsg()
        expected, _ = torch_kl(x.astype(np.float64), t.astype(np.float64), reduction, log_target,
                               np.ones(()))
        scale = float(np.sqrt(np.prod(broadcast))) if reduction else 1.0
        assert_close(session.read(out), expected, dtype, scale=4 * scale)


def test_mixed_dtypes(session, rng):
    """CANN accepts mixed float dtypes (a UT passes fp16 gradOutput, fp32 self, fp16 target, fp32 out)."""
    x = rng.standard_normal((5, 7)).astype(np.float32)
    t = rng.random((5, 7)).astype(np.float16)
    g = rng.standard_normal((5, 7)).astype(np.float16)
    out = session.poisoned((5, 7), np.float32)
    assert session.run(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward, session.tensor(g),
                       session.tensor(x), session.tensor(t), 0, False, out) == 0, acl.aclGetRecentErrMsg()
    assert_close(session.read(out), -(g.astype(np.float64) * t), np.float32)


def test_rank_8_and_empty(session, rng):
    shape = (2, 1, 2, 1, 2, 1, 2, 3)
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.random((2, 2, 2, 2, 2, 2, 2, 3)).astype(np.float32)
    out = session.poisoned(shape, np.float32)
    assert session.run(acl.aclnnKlDivBackwardGetWorkspaceSize, acl.aclnnKlDivBackward,
                       session.tensor(np.ones((), np.float32)), session.tensor(x), session.tensor(t), 2, False,
                       out) == 0, acl.aclGetRecentErrMsg()
    assert_close(session.read(out), -t.astype(np.float64).sum(axis=(1, 3, 5), keepdims=True), np.float32, 4)
    empty = np.zeros((3, 0, 5), np.float32)
    status, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(
        session.tensor(np.ones((), np.float32)), session.tensor(empty), session.tensor(empty), 1, False,
        session.tensor(empty))
    assert (status, ws) == (0, 0)
    assert acl.aclnnKlDivBackward(None, 0, ex, session.stream) == 0


def test_matches_reference(cpu_session, rng):
    """The NumPy reference (the cpu device) against PyTorch, on a larger broadcast case."""
    from aclnn_gpu.reference import kl_div as reference
    x = rng.standard_normal((4, 1, 6))
    t = rng.random((3, 4, 5, 6))
    g = rng.standard_normal(())
    got = reference.kl_div_backward(g, t, x.shape, 3, False, np.dtype(np.float64))
    _, expected = torch_kl(x, t, 3, False, g)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


# ------------------------------------------------------------------------------------ bad inputs
def _bad_cases():
    """(name, builder returning GetWorkspaceSize args, expected status). `s` is the session."""
    f32 = np.float32

    def ok(s, **change):
        args = dict(gradOutput=s.tensor(np.ones((2, 3), f32)), self=s.tensor(np.ones((2, 3), f32)),
                    target=s.tensor(np.ones((2, 3), f32)), reduction=1, logTarget=False,
                    out=s.poisoned((2, 3), f32))
        args.update({k: (v(s) if callable(v) else v) for k, v in change.items()})
        return args

    I = 161002
    N = 161001
    return [
        ("null gradOutput", lambda s: ok(s, gradOutput=None), N),
        ("null self", lambda s: ok(s, self=None), N),
        ("null target", lambda s: ok(s, target=None), N),
        ("null out", lambda s: ok(s, out=None), N),
        ("int32 gradOutput", lambda s: ok(s, gradOutput=lambda s: s.tensor(np.ones((2, 3), np.int32))), I),
        ("int64 self", lambda s: ok(s, self=lambda s: s.tensor(np.ones((2, 3), np.int64))), I),
        ("bool target", lambda s: ok(s, target=lambda s: s.tensor(np.ones((2, 3), np.bool_))), I),
        ("int32 out", lambda s: ok(s, out=lambda s: s.tensor(np.ones((2, 3), np.int32))), I),
        ("rank 9 self", lambda s: ok(s, self=lambda s: s.tensor(np.ones((1,) * 9, f32))), I),
        ("not broadcastable", lambda s: ok(s, target=lambda s: s.tensor(np.ones((4, 3), f32))), I),
        ("gradOutput enlarges B", lambda s: ok(s, gradOutput=lambda s: s.tensor(np.ones((5, 2, 3), f32))), I),
        ("gradOutput not broadcastable", lambda s: ok(s, gradOutput=lambda s: s.tensor(np.ones((2, 4), f32))), I),
        ("out shape", lambda s: ok(s, out=lambda s: s.poisoned((3, 2), f32)), I),
        ("reduction -1", lambda s: ok(s, reduction=-1), I),
        ("reduction 4", lambda s: ok(s, reduction=4), I),
        ("reduction 6", lambda s: ok(s, reduction=6), I),
        ("reduction not int", lambda s: ok(s, reduction="mean"), I),
        ("self not a tensor", lambda s: ok(s, self=np.ones((2, 3), f32)), I),
        ("destroyed target", lambda s: ok(s, target=lambda s: _destroyed(s.tensor(np.ones((2, 3), f32)))), I),
        ("foreign pointer", lambda s: ok(s, gradOutput=lambda s: acl.aclCreateTensor(
            (2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3), np.ones(6, f32).ctypes.data)), I),
        ("freed pointer", lambda s: ok(s, target=lambda s: _freed(s, (2, 3))), I),
        ("too-short range", lambda s: ok(s, target=lambda s: acl.aclCreateTensor(
            (2, 3), acl.ACL_FLOAT, None, 2, acl.ACL_FORMAT_ND, (2, 3), near_end(s.malloc(24), 24))), I),
        ("null data", lambda s: ok(s, target=lambda s: acl.aclCreateTensor(
            (2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3), None)), N),
        ("out overlaps itself", lambda s: ok(s, out=lambda s: acl.aclCreateTensor(
            (2, 3), acl.ACL_FLOAT, (0, 1), 0, acl.ACL_FORMAT_ND, (3,), s.malloc(12))), I),
        ("out aliases target", lambda s: _alias(ok(s)), I),
        ("host memory as data", lambda s: ok(s, target=lambda s: acl.aclCreateTensor(
            (2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3), acl.aclrtMallocHost(24)[1])), I),
    ]


def _destroyed(tensor):
    acl.aclDestroyTensor(tensor)
    return tensor


def _freed(s, shape):
    status, ptr = acl.aclrtMalloc(24, 0)
    t = acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, ptr)
    acl.aclrtFree(ptr)
    return t


def _alias(args):
    args["out"] = acl.aclCreateTensor((2, 3), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (2, 3),
                                      args["target"].data)
    return args


BAD = _bad_cases()


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(cpu_session, case):
    name, build, expected = case
    assert_refused(cpu_session, acl.aclnnKlDivBackwardGetWorkspaceSize, "aclnnKlDivBackward", build(cpu_session), expected)


def test_bad_input_table_is_large():
    assert len(BAD) >= 25


def test_phase_two_checks(cpu_session, rng):
    s = cpu_session
    x = s.tensor(rng.standard_normal((64, 33)).astype(np.float32))
    t = s.tensor(rng.random((64, 33)).astype(np.float32), strided=True)
    out = s.poisoned((64, 33), np.float32)
    before = s.raw(out)
    status, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(s.tensor(np.ones((), np.float32)), x, t, 1, False, out)
    assert status == 0 and ws > 0
    assert acl.aclnnKlDivBackward(None, ws, ex, s.stream) == 161001          # workspace null
    small = s.malloc(ws)
    assert acl.aclnnKlDivBackward(small, ws - 1, ex, s.stream) == 161002     # workspace too short
    assert acl.aclnnKlDivBackward(near_end(small, ws) + 8, ws, ex, s.stream) == 161002  # past the allocation
    assert acl.aclnnKlDivBackward(small, ws, None, s.stream) == 161001       # executor null
    assert acl.aclnnKlDivBackward(small, ws, "executor", s.stream) == 161002
    assert acl.aclnnKlDiv(small, ws, ex, s.stream) == 161002                  # another operator's executor
    assert acl.aclnnKlDivBackward(small, ws, ex, "stream") == 161002          # not a stream
    assert s.raw(out) == before
    assert acl.aclnnKlDivBackward(small, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert acl.aclnnKlDivBackward(small, ws, ex, s.stream) == 161002          # spent
    assert "not repeatable" in acl.aclGetRecentErrMsg()


def test_repeatable_executor(session, rng):
    s = session
    xs = rng.standard_normal((8, 5)).astype(np.float32)
    ts = rng.random((8, 5)).astype(np.float32)
    out = s.poisoned((8, 5), np.float32)
    status, ws, ex = acl.aclnnKlDivBackwardGetWorkspaceSize(s.tensor(np.ones((), np.float32)), s.tensor(xs),
                                                            s.tensor(ts), 2, True, out)
    assert status == 0
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    workspace = s.malloc(ws) if ws else None
    for _ in range(3):
        assert acl.aclnnKlDivBackward(workspace, ws, ex, s.stream) == 0
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert_close(s.read(out), -np.exp(ts.astype(np.float64)), np.float32)
    assert acl.aclDestroyAclOpExecutor(ex) == 0
    assert acl.aclnnKlDivBackward(workspace, ws, ex, s.stream) == 161002
    assert acl.aclDestroyAclOpExecutor(None) == 561103
    assert acl.aclSetAclOpExecutorRepeatable(object()) == acl.ACLNN_ERR_PARAM_INVALID
