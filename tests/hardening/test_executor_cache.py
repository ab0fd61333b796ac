"""Phase 1's executor cache (aclnn_gpu/executor/cache.py) against the uncached path: every operator bit
for bit, every bad-input row of test_bad_inputs.py refused with the same code and message after the
same objects were cached, adversarial sequences (memory freed and allocated again at the same
address, too short, as host memory; tensors rebound, re-described, destroyed; scalars of the same
value and another type or sign; int arrays changed in place) replayed with the cache on and off and
compared step by step, and the cache's bounds, switch, reset, fork and threads."""
from __future__ import annotations

import logging
import os
import re
import threading

import numpy as np
import pytest

import aclnn_gpu as acl
from aclnn_gpu import runtime
from aclnn_gpu.executor import cache as executor_cache
from aclnn_gpu.device.registry import Allocation
from aclnn_gpu.executor.cache import cache
from aclnn_gpu.meta.tensor import aclIntArray, aclTensor
from support import DEVICE_KINDS, Session
from test_bad_inputs import ROWS, SPECS, Args, raw_or_none

INVALID = int(acl.ACLNN_ERR_PARAM_INVALID)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts from an empty cache at its default bound."""
    cache.configure()
    cache.clear()
    cache.hits = cache.misses = 0
    yield
    cache.configure()
    cache.clear()


def _poison(s: Session, a: Args) -> None:
    """NaN bytes over every output whose memory is live device memory (the others cannot be written)."""
    for name in a.spec.outputs:
        t = a[name]
        if raw_or_none(s, t) is not None:
            n = max(t.element_span()[1], 1) * t.itemsize
            assert acl.aclrtMemset(t.data, n, 0xFF, n) == 0


def _run(s: Session, a: Args, gws=None) -> tuple:
    """Both phases on `a` (outputs poisoned first): (workspace size, plan, every output's bytes)."""
    _poison(s, a)
    status, ws, ex = (gws or a.spec.gws)(*a.values_in_order())
    assert status == 0, acl.aclGetRecentErrMsg()
    plan = ex.plan
    assert a.spec.execute(s.malloc(ws) if ws else None, ws, ex, s.stream) == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeStream(s.stream) == 0, acl.aclGetRecentErrMsg()
    return ws, plan, [s.raw(a[o]) for o in a.spec.outputs]


@pytest.fixture(params=DEVICE_KINDS)
def session(request):
    s = Session(request.param)
    yield s
    s.close()


@pytest.mark.parametrize("op", list(SPECS))
def test_a_hit_is_the_uncached_call_bit_for_bit(session, op):
    a = Args(SPECS[op], session)
    with executor_cache.disabled():
        uncached = _run(session, a)
    assert len(cache) == 0
    first = _run(session, a)                      # a miss: cached
    hits = cache.hits
    again = _run(session, a)                      # a hit: the same plan, no checks
    assert cache.hits == hits + 1 and again[1] is first[1] and len(cache) == 1
    assert uncached[0] == first[0] == again[0]
    assert uncached[2] == first[2] == again[2]


@pytest.mark.parametrize("op", list(SPECS))
def test_plan_tensors_are_exactly_the_memory_checked_ones(cpu_session, op, monkeypatch):
    """A hit re-proves the memory of the plan's tensors only: they must be the ones the checks proved."""
    from aclnn_gpu.plans import checks
    checked = []
    real = checks.check_tensor_memory
    monkeypatch.setattr(checks, "check_tensor_memory", lambda o, n, t, d: (checked.append(t), real(o, n, t, d)))
    a = Args(SPECS[op], cpu_session)
    status, _, ex = a.spec.gws.uncached(*a.values_in_order())
    assert status == 0
    assert {id(t) for t in checked} == {id(t) for t in ex.plan.tensors.values() if t is not None}
    assert checked


PHASE1_ROWS = [r for r in ROWS if r.op is not None and "-phase2 " not in r.id]


@pytest.mark.parametrize("row", PHASE1_ROWS, ids=[r.id for r in PHASE1_ROWS])
def test_bad_input_rows_are_refused_after_the_good_call_was_cached(cpu_session, row):
    s = cpu_session
    a = Args(SPECS[row.op], s)
    assert a.spec.gws(*a.values_in_order())[0] == 0, acl.aclGetRecentErrMsg()   # cached: these very objects
    code, tokens, call = row.mutate(s, a)
    assert call is None
    acl.base.errors.set_recent_error("")
    cached = a.spec.gws(*a.values_in_order())
    message = acl.aclGetRecentErrMsg()
    uncached = a.spec.gws.uncached(*a.values_in_order())
    assert (cached, message) == (uncached, acl.aclGetRecentErrMsg())
    assert cached == (code, None, None), message
    for token in tokens:
        assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(token)}(?![A-Za-z0-9_])", message), message


# ------------------------------------------------------------------------------ memory, one change at a time
def _redescribe(t: aclTensor, shape: tuple, data: int | None = None) -> None:
    """aclInitTensor's change in place: a contiguous view of `shape` (at `data`, default: where it is)."""
    t.describe(tuple(shape), t.dtype, acl.meta.tensor.contiguous_strides(shape), 0, t.format, tuple(shape),
               t.data if data is None else data)


def _reallocate(s: Session, ptr: int, size: int | None = None, on_device: bool = True) -> None:
    """aclrtFree(ptr), then an allocation at the same address (what an allocator handing the address
    back does): `size` bytes (default: as before) of the same memory, device or host memory."""
    device = runtime.get_device()
    old = device.registry.get(ptr)
    s.pointers.remove(ptr)
    assert (acl.aclrtFree if old.on_device else acl.aclrtFreeHost)(ptr) == 0
    device.registry.add(Allocation(ptr, old.size if size is None else size, on_device, old.buffer))
    s.pointers.append(ptr)
    s.kept = getattr(s, "kept", []) + [old.buffer]


def test_memory_freed_and_allocated_again_at_the_same_address(session):
    a = Args(SPECS["aclnnKlDivBackward"], session)
    first = _run(session, a)
    target = a["target"]
    full = runtime.get_device().registry.get(target.data).size
    _reallocate(session, target.data)                       # the same range, live again
    hits = cache.hits
    again = _run(session, a)
    assert cache.hits == hits + 1 and again[2] == first[2]
    _reallocate(session, target.data, size=target.numel * target.itemsize - 1)   # too short now
    expected = a.spec.gws.uncached(*a.values_in_order())
    message = acl.aclGetRecentErrMsg()
    assert expected[0] == INVALID and "target" in message
    assert a.spec.gws(*a.values_in_order()) == expected and acl.aclGetRecentErrMsg() == message
    _reallocate(session, target.data, full, on_device=False)   # host memory at that address
    assert a.spec.gws(*a.values_in_order())[0] == INVALID
    assert "host memory" in acl.aclGetRecentErrMsg() and "target" in acl.aclGetRecentErrMsg()
    _reallocate(session, target.data, full)                 # device memory again: a hit
    hits = cache.hits
    assert _run(session, a)[2] == first[2] and cache.hits == hits + 1


def test_an_unrelated_free_keeps_hitting_and_the_executor_starts_proven(cpu_session):
    s = cpu_session
    a = Args(SPECS["aclnnCtcLossBackward"], s)
    first = _run(s, a)
    s.pointers.remove(p := s.malloc(64))
    assert acl.aclrtFree(p) == 0                             # the registry generation moves on
    hits = cache.hits
    status, _, ex = a.spec.gws(*a.values_in_order())
    assert status == 0 and cache.hits == hits + 1
    assert ex.checked_generation == runtime.get_device().registry.generation
    assert _run(s, a)[2] == first[2]


def test_a_rebound_or_redescribed_tensor_misses(session):
    """aclSetInputTensorAddr (CANN's rebinding of an executor's tensor) and aclInitTensor change a tensor
    in place (`rebind`, `describe`): the next GetWorkspaceSize must see the new description (the same
    objects are one key, whose one entry follows their latest description). The fields themselves
    cannot be written."""
    s = session
    a = Args(SPECS["aclnnKlDivBackward"], s)
    first = _run(s, a)
    target = a["target"]
    original = target.data
    moved = s.tensor(a.np["target"] * 0.5)
    with pytest.raises(AttributeError):
        target.data = moved.data
    lengths = s.int_array([1, 2])
    with pytest.raises(AttributeError):
        lengths.values = (1,)
    target.rebind(moved.data)                                # rebound to other memory
    misses = cache.misses
    rebound = _run(s, a)
    assert cache.misses == misses + 1 and len(cache) == 1   # the key's one entry now holds the new address
    hits = cache.hits
    assert _run(s, a)[2] == rebound[2] and cache.hits == hits + 1
    target.rebind(original)                                  # back: a miss again, the first result
    misses = cache.misses
    assert _run(s, a)[2] == first[2] and cache.misses == misses + 1
    target.rebind(moved.data)
    with executor_cache.disabled():
        assert _run(s, a)[2] == rebound[2] != first[2]
    gone = s.malloc(64)
    s.pointers.remove(gone)
    assert acl.aclrtFree(gone) == 0
    target.rebind(gone)                                      # its last memory check was for the old range
    assert a.spec.gws(*a.values_in_order())[0] == INVALID and "target" in acl.aclGetRecentErrMsg()
    target.rebind(original)
    _redescribe(target, (3, 2))                              # re-described in place (same bytes)
    status = a.spec.gws(*a.values_in_order())
    message = acl.aclGetRecentErrMsg()
    assert status == a.spec.gws.uncached(*a.values_in_order()) and status[0] == INVALID and "target" in message
    assert acl.aclGetRecentErrMsg() == message
    if hasattr(acl, "aclSetInputTensorAddr"):                # once the runtime has it
        _redescribe(target, (2, 3))
        _, _, ex = a.spec.gws(*a.values_in_order())
        assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
        assert acl.aclSetInputTensorAddr(ex, 2, target, moved.data) == 0
        misses = cache.misses
        assert a.spec.gws(*a.values_in_order())[0] == 0 and cache.misses == misses + 1


def test_an_executor_reused_after_its_tensors_were_destroyed(session):
    s = session
    a = Args(SPECS["aclnnCrossEntropyLossGrad"], s)
    _run(s, a)
    status, ws, ex = a.spec.gws(*a.values_in_order())       # a hit
    assert status == 0 and cache.hits == 1
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    assert acl.aclDestroyTensor(a["logProb"]) == 0
    s.tensors.remove(a["logProb"])
    before = s.raw(a["out"])
    assert a.spec.execute(s.malloc(ws) if ws else None, ws, ex, s.stream) == INVALID
    assert acl.aclGetRecentErrMsg() == "aclnnCrossEntropyLossGrad: logProb was destroyed"
    assert acl.aclrtSynchronizeStream(s.stream) == 0 and s.raw(a["out"]) == before
    assert a.spec.gws(*a.values_in_order()) == (INVALID, None, None)
    message = acl.aclGetRecentErrMsg()
    assert "logProb was destroyed" in message
    assert a.spec.gws.uncached(*a.values_in_order()) == (INVALID, None, None)
    assert acl.aclGetRecentErrMsg() == message


def test_an_executor_follows_a_tensor_rebound_after_its_getworkspacesize(session):
    """A tensor moved to other memory after GetWorkspaceSize (aclSetRawTensorAddr, or another executor's
    aclSetOutputTensorAddr), its old memory freed: execute writes where the tensor is now, as CANN reads
    a tensor's address at launch, and never into the freed range the plan was made on; a rebind to
    nullptr is refused at execute with the check's message."""
    s = session
    x = np.log(np.full((4,), 0.25, np.float32))
    y = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    self_, target, out = s.tensor(x), s.tensor(y), s.empty((4,), np.float32)
    status, ws, ex = acl.aclnnKlDivGetWorkspaceSize(self_, target, 0, False, out)   # reduction "none"
    assert status == 0, acl.aclGetRecentErrMsg()
    assert acl.aclSetAclOpExecutorRepeatable(ex) == 0
    old = out.data
    moved = s.malloc(16)
    assert acl.aclSetRawTensorAddr(out, moved) == 0
    s.pointers.remove(old)
    assert acl.aclrtFree(old) == 0
    assert acl.aclnnKlDiv(s.malloc(ws) if ws else None, ws, ex, s.stream) == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    expected = y * (np.log(y) - x)
    np.testing.assert_allclose(s.read(out), expected, rtol=1e-6)
    # another executor of the same tensors rebinds `out` through CANN's executor call: this one follows too
    _, ws2, ex2 = acl.aclnnKlDivGetWorkspaceSize(self_, target, 0, False, out)
    assert acl.aclSetAclOpExecutorRepeatable(ex2) == 0
    again = s.malloc(16)
    assert acl.aclSetOutputTensorAddr(ex2, 0, out, again) == 0
    assert acl.aclnnKlDiv(s.malloc(ws) if ws else None, ws, ex, s.stream) == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeStream(s.stream) == 0
    assert out.data == again
    np.testing.assert_allclose(s.read(out), expected, rtol=1e-6)
    assert acl.aclSetRawTensorAddr(out, None) == 0                        # rebound to nullptr
    assert acl.aclnnKlDiv(s.malloc(ws) if ws else None, ws, ex, s.stream) == acl.ACLNN_ERR_PARAM_NULLPTR
    assert "aclnnKlDiv" in acl.aclGetRecentErrMsg() and "out" in acl.aclGetRecentErrMsg()
    assert acl.aclSetRawTensorAddr(out, again) == 0
    assert acl.aclDestroyAclOpExecutor(ex) == 0 and acl.aclDestroyAclOpExecutor(ex2) == 0


def test_scalars_of_equal_value_but_another_type_or_sign(session):
    s = session
    a = Args(SPECS["aclnnScaledMaskedSoftmaxBackward"], s)
    a["scale"] = 0.0
    plus = _run(s, a)
    a["scale"] = -0.0                                        # 0.0 == -0.0, hash equal: the same key, a miss
    minus = _run(s, a)
    assert (cache.hits, cache.misses, len(cache)) == (0, 2, 1)
    assert _run(s, a)[2] == minus[2] and cache.hits == 1
    a["scale"] = 0.0
    assert _run(s, a)[2] == plus[2] and (cache.hits, cache.misses) == (1, 3)
    if s.kind == "cpu":
        assert minus[2] != plus[2]                          # NumPy's zero gradients carry the scale's sign
    a["fixTriuMask"] = 0                                     # False == 0: another type, another key
    _run(s, a)
    assert (cache.hits, cache.misses, len(cache)) == (1, 4, 2)
    a["fixTriuMask"] = False
    with executor_cache.disabled():
        a["scale"] = -0.0
        assert _run(s, a)[2] == minus[2]
        a["scale"] = 0.0
        assert _run(s, a)[2] == plus[2]
    k = Args(SPECS["aclnnKlDivBackward"], s)
    k["reduction"] = 1
    _run(s, k)
    k["reduction"] = True                                    # == 1, but refused by the checks
    assert k.spec.gws(*k.values_in_order()) == (INVALID, None, None)
    assert "reduction must be an integer" in acl.aclGetRecentErrMsg()


def test_an_int_array_changed_in_place_misses(cpu_session):
    s = cpu_session
    a = Args(SPECS["aclnnCtcLossBackward"], s)
    _run(s, a)
    a["targetLengths"].set_values((4, 2))                    # longer than logAlpha allows
    assert a.spec.gws(*a.values_in_order())[0] == INVALID
    message = acl.aclGetRecentErrMsg()
    assert a.spec.gws.uncached(*a.values_in_order())[0] == INVALID and acl.aclGetRecentErrMsg() == message
    a["targetLengths"].set_values((3, 1))
    misses = cache.misses
    changed = _run(s, a)
    with executor_cache.disabled():
        assert _run(s, a)[2] == changed[2]
    assert cache.misses == misses + 1


# ------------------------------------------------------------------------------ adversarial sequences
MUTATIONS = ("reallocate", "short", "host", "free", "unrelated", "restore", "rebind", "unbind", "destroy",
             "recreate", "describe", "scalar", "scalar", "lengths")
SCALARS = {"aclnnKlDivBackward": {"reduction": [0, 1, 2, 3, True, 1.0], "logTarget": [False, True, 0, 1]},
           "aclnnCrossEntropyLossGrad": {"reductionOptional": ["mean", "sum", "none", "avg"],
                                         "ignoreIndex": [-100, 2, True, -100.0],
                                         "labelSmoothing": [0.0, -0.0, 0.1, 0.25, float("nan")]},
           "aclnnCtcLossBackward": {"blank": [0, 4, 5, False], "zeroInfinity": [False, True, 0, 1]},
           "aclnnScaledMaskedSoftmaxBackward": {"scale": [1.0, 0.0, -0.0, 0.5, 1], "fixTriuMask": [False, True, 0]}}


def _plan_sequence(rng: np.random.Generator, spec, episodes: int) -> list[tuple]:
    """Episodes of: everything healed, a call (cached), one to three changes each followed by a call,
    then a last call: every change is tried against an entry made just before it."""
    tensors = [n for n in spec.order if n in spec.arrays()]
    scalars = list(SCALARS[spec.op])

    def step(action: str) -> tuple:
        return (action, tensors[rng.integers(len(tensors))], scalars[rng.integers(len(scalars))],
                int(rng.integers(1 << 30)))
    out = []
    for _ in range(episodes):
        out += [step("heal"), step("call")]
        for _ in range(rng.integers(1, 4)):
            out += [step(MUTATIONS[rng.integers(len(MUTATIONS))]), step("call")]
        out.append(step("call"))
    return out


def _replay(kind: str, spec, sequence: list[tuple]) -> list:
    """Run `sequence` on a fresh session; what every call returned, with addresses blanked out."""
    s = Session(kind)
    try:
        a = Args(spec, s)
        home = {n: a[n].data for n in a.np}
        full = {n: runtime.get_device().registry.get(home[n]).size for n in a.np}
        shapes = {n: a[n].shape for n in a.np}
        log = []
        for action, name, scalar, r in sequence:
            t = a[name]
            live = runtime.get_device().registry.get(home[name])
            if action == "heal":   # everything back as Args made it (the same objects where they live)
                for n in a.np:
                    if home[n] in getattr(s, "freed", {}):
                        old = s.freed.pop(home[n])
                        runtime.get_device().registry.add(Allocation(old.base, old.size, True, old.buffer))
                        s.pointers.append(home[n])
                    now = runtime.get_device().registry.get(home[n])
                    if now.size != full[n] or not now.on_device:
                        _reallocate(s, home[n], full[n])
                    if a[n].destroyed:
                        a[n] = acl.aclCreateTensor(list(shapes[n]), int(a[n].dtype), None, 0, int(a[n].format),
                                                   list(shapes[n]), home[n])
                        s.tensors.append(a[n])
                    _redescribe(a[n], shapes[n], home[n])
                for n, value in spec.scalars.items():
                    if n in spec.int_arrays:
                        a[n].set_values(tuple(value))
                    else:
                        a[n] = value
            elif action == "call":
                _poison(s, a)
                status, ws, ex = spec.gws(*a.values_in_order())
                message = re.sub(r"0x[0-9a-f]+", "0x?", acl.aclGetRecentErrMsg()) if status else ""
                if status == 0:
                    assert spec.execute(s.malloc(ws) if ws else None, ws, ex, s.stream) == 0, acl.aclGetRecentErrMsg()
                    assert acl.aclrtSynchronizeStream(s.stream) == 0
                log.append((status, ws, message, [raw_or_none(s, a[o]) for o in spec.outputs]))
            elif action in ("reallocate", "short", "host") and live is not None:
                size = max(t.numel * t.itemsize - 1, 1) if action == "short" else live.size
                _reallocate(s, home[name], size, on_device=action != "host")
            elif action == "free" and live is not None:
                s.pointers.remove(home[name])
                s.kept = getattr(s, "kept", []) + [live.buffer]
                assert (acl.aclrtFree if live.on_device else acl.aclrtFreeHost)(home[name]) == 0
                s.freed = getattr(s, "freed", {}) | {home[name]: live}
            elif action == "restore" and home[name] in getattr(s, "freed", {}):
                old = s.freed.pop(home[name])
                runtime.get_device().registry.add(Allocation(old.base, old.size, True, old.buffer))
                s.pointers.append(home[name])
            elif action == "rebind":
                factor = 1 + (r % 3)
                t.rebind(s.tensor(np.asarray(a.np[name] * factor, a.np[name].dtype)).data)
            elif action == "unbind":
                t.rebind(home[name])
            elif action == "destroy" and not t.destroyed:
                acl.aclDestroyTensor(t)
            elif action == "recreate":
                new = acl.aclCreateTensor(list(t.shape), int(t.dtype), list(t.strides), t.offset, int(t.format),
                                          list(t.storage_shape), home[name])
                s.tensors.append(new)
                a[name] = new
            elif action == "describe":
                shape = tuple(reversed(t.shape)) if r % 2 else t.shape
                _redescribe(t, shape)
            elif action == "scalar" and scalar is not None:
                choices = SCALARS[spec.op][scalar]
                a[scalar] = choices[r % len(choices)]
            elif action == "lengths" and spec.int_arrays:
                array = a[spec.int_arrays[r % 2]]
                if isinstance(array, aclIntArray):
                    array.set_values(tuple(int(v) for v in np.maximum(np.array(array.values) + (r % 3) - 1, 0)))
            elif action == "unrelated":
                p = s.malloc(128)
                s.pointers.remove(p)
                assert acl.aclrtFree(p) == 0
        return log
    finally:
        registry = runtime.get_device().registry
        for ptr, old in getattr(s, "freed", {}).items():   # so close() frees each allocation once
            registry.add(Allocation(old.base, old.size, True, old.buffer))
            s.pointers.append(ptr)
        for ptr in list(s.pointers):
            live = registry.get(ptr)
            if live is not None and not live.on_device:
                s.pointers.remove(ptr)
                acl.aclrtFreeHost(ptr)
        s.close()


@pytest.mark.parametrize("op", list(SCALARS))
def test_adversarial_sequences_with_and_without_the_cache(op, rng):
    spec = SPECS[op]
    kinds = [k for k in DEVICE_KINDS if k != "cuda"] or ["cpu"]
    hits = 0
    for kind in kinds:
        for _ in range(3 if kind == "cpu" else 2):
            sequence = _plan_sequence(rng, spec, 20)
            cache.clear()
            before = cache.hits
            cached = _replay(kind, spec, sequence)
            hits += cache.hits - before
            with executor_cache.disabled():
                uncached = _replay(kind, spec, sequence)
            for step, (c, u) in enumerate(zip(cached, uncached)):
                assert c == u, f"{kind}: call {step} differs: {c[:3]} != {u[:3]}"
    assert hits > 0   # the sequences did reach the cache


# ------------------------------------------------------------------------------ bounds, switch, lifetime
def test_bounded_least_recently_used_first(cpu_session):
    s = cpu_session
    cache.configure(3)
    calls = [Args(SPECS["aclnnKlDiv"], s) for _ in range(4)]
    for a in calls[:3]:
        assert a.spec.gws(*a.values_in_order())[0] == 0
    assert calls[0].spec.gws(*calls[0].values_in_order())[0] == 0 and cache.hits == 1   # 0 is now the newest
    assert calls[3].spec.gws(*calls[3].values_in_order())[0] == 0 and len(cache) == 3   # 1 goes
    hits = cache.hits
    for a in (calls[0], calls[2], calls[3]):
        assert a.spec.gws(*a.values_in_order())[0] == 0
    assert cache.hits == hits + 3
    assert calls[1].spec.gws(*calls[1].values_in_order())[0] == 0 and cache.hits == hits + 3


def test_destroying_a_tensor_or_array_drops_its_entries(cpu_session):
    """A create/run/destroy loop (CANN's samples) keeps nothing: an entry naming a destroyed object goes."""
    s = cpu_session
    kl, ctc = Args(SPECS["aclnnKlDivBackward"], s), Args(SPECS["aclnnCtcLossBackward"], s)
    for a in (kl, ctc):
        assert a.spec.gws(*a.values_in_order())[0] == 0
    assert len(cache) == 2 and len(kl["target"].cache_keys) == 1
    assert acl.aclDestroyTensor(kl["target"]) == 0
    s.tensors.remove(kl["target"])
    assert len(cache) == 1 and kl["target"].cache_keys is None and kl["out"].cache_keys == {}
    assert acl.aclDestroyIntArray(ctc["inputLengths"]) == 0
    s.arrays.remove(ctc["inputLengths"])
    assert len(cache) == 0 and ctc["logProbs"].cache_keys == {}
    cache.configure(1)                                        # an evicted entry leaves its objects' lists too
    a, b = Args(SPECS["aclnnKlDiv"], s), Args(SPECS["aclnnKlDiv"], s)
    assert a.spec.gws(*a.values_in_order())[0] == 0 and b.spec.gws(*b.values_in_order())[0] == 0
    assert len(cache) == 1 and a["self"].cache_keys == {} and len(b["self"].cache_keys) == 1


def test_switched_off_and_a_bad_limit(cpu_session, monkeypatch, caplog):
    a = Args(SPECS["aclnnKlDiv"], cpu_session)
    monkeypatch.setenv("ACLNN_CACHE_LIMIT", "0")
    cache.configure()
    for _ in range(3):
        assert _run(cpu_session, a)[0] == 0
    assert len(cache) == 0 and cache.hits == 0
    monkeypatch.setenv("ACLNN_CACHE_LIMIT", "lots")
    with caplog.at_level(logging.WARNING, logger="aclnn_gpu"):
        cache.configure()
    assert cache.limit == executor_cache.DEFAULT_LIMIT and "ACLNN_CACHE_LIMIT='lots'" in caplog.text
    monkeypatch.setenv("ACLNN_CACHE_LIMIT", "5")
    runtime.release_devices()                                  # read again once every device was reset
    assert cache.limit == 5


def test_reset_drops_the_devices_entries(session):
    a = Args(SPECS["aclnnKlDiv"], session)
    assert a.spec.gws(*a.values_in_order())[0] == 0 and len(cache) == 1
    device = runtime.get_device()
    session.close()
    runtime.release_devices()
    assert len(cache) == 0 and device.stale is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
def test_a_fork_child_starts_empty(cpu_session):
    a = Args(SPECS["aclnnKlDiv"], cpu_session)
    assert a.spec.gws(*a.values_in_order())[0] == 0 and len(cache) == 1
    pid = os.fork()
    if pid == 0:   # the child: exit code 0 when the cache is empty
        os._exit(0 if len(cache) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert len(cache) == 1


def test_threads_share_entries(session):
    s = session
    calls = [Args(SPECS[op], s) for op in ("aclnnKlDivBackward", "aclnnCrossEntropyLossGrad",
                                           "aclnnScaledMaskedSoftmaxBackward")]
    with executor_cache.disabled():
        expected = [_run(s, a)[2] for a in calls]
    streams = [acl.aclrtCreateStream()[1] for _ in range(4)]
    failures: list = []
    workspaces = {(k, id(a)): s.malloc(1 << 16) for k in range(4) for a in calls}

    def worker(k: int) -> None:
        stream = streams[k]
        try:
            for i in range(40 if s.kind == "cpu" else 4):
                a = calls[(i + k) % len(calls)]
                status, ws, ex = a.spec.gws(*a.values_in_order())
                assert status == 0, acl.aclGetRecentErrMsg()
                assert a.spec.execute(workspaces[k, id(a)] if ws else None, ws, ex, stream) == 0
                assert acl.aclrtSynchronizeStream(stream) == 0
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures and not any(t.is_alive() for t in threads), failures
    assert len(cache) == len(calls) and cache.hits > 0
    for a, want in zip(calls, expected):
        assert [s.raw(a[o]) for o in a.spec.outputs] == want
    for stream in streams:
        assert acl.aclrtDestroyStream(stream) == 0
