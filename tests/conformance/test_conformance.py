"""hicann/ops-nn's own test cases of the five operator pairs, run on every test device (cpu and emulated
in CI; cuda where ACLNN_GPU_TEST_DEVICES names it): each op_api unit-test case with the status it
expects, each system-test case drawn as its table says and judged against its golden (runner.py). The
cases are data (cases/*.json: the ops-nn commit and the paths they were read from, written by
scripts/gen_conformance.py); a case this library decides otherwise (docs/API.md §7) carries a "mark"
and is checked against that decision, and is counted as marked, never dropped.

One test per (device, operator) runs that operator's cases in a loop (a pytest item per case cost more
than most cases: 3640 items), every case with a seed of its own (the run's seed hashed with the test's
id and the case's id) and its own memory released after it. The test fails listing every case that
failed, each with its seed, its inputs as the table draws them and the first mismatch, and the command
that replays that case alone (ACLNN_GPU_CONFORMANCE_CASE=<case id>). A case carrying "xfail" for the
device is run too, and strictly: it must fail (it is then listed as expected), and one that passes
fails the test, so a fixed case cannot hide behind its xfail."""
from __future__ import annotations

import json
import os
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aclnn_gpu.runtime import release_devices

from runner import Outcome, run_system_case, run_unit_case
from seeding import SEED_ENV, draw_seed, run_seed
from support import DEVICE_KINDS, Session

CASES = Path(__file__).parent / "cases"
OPERATORS = {p.stem: json.loads(p.read_text()) for p in sorted(CASES.glob("*.json"))}
RESULTS: dict[tuple[str, str], dict[str, int]] = {}   # (device, op) -> counts, for the summary
ONLY_ENV = "ACLNN_GPU_CONFORMANCE_CASE"               # run only the case of this id (a replay)

_held: dict[str, Any] = {}


def session_for(kind: str) -> Session:
    """One session per device kind for the whole run (a fresh one per case would cost more than the
    case), switched when the kind changes, and made again when another test reset the devices in
    between (pytest-xdist interleaves modules: its stream is then refused)."""
    import aclnn_gpu as acl
    held = _held.get("session")
    if held is not None and (_held["kind"] != kind or acl.aclrtSynchronizeStream(held.stream) != 0):
        if _held["kind"] != kind:
            held.close()
        held = None
    if held is None:
        _held.update(kind=kind, session=Session(kind))
    return _held["session"]


def _release(s: Session, marks: tuple[int, int, int]) -> None:
    """Free what one case allocated (the session's lists grow in allocation order)."""
    import aclnn_gpu as acl
    t, a, p = marks
    acl.aclrtSynchronizeStream(s.stream)
    for tensor in s.tensors[t:]:
        acl.aclDestroyTensor(tensor)
    for array in s.arrays[a:]:
        acl.aclDestroyIntArray(array)
    for ptr in s.pointers[p:]:
        acl.aclrtFree(ptr)
    del s.tensors[t:], s.arrays[a:], s.pointers[p:]


def _expected_ok(expect: Any, status: int) -> bool:
    if expect is None:   # ops-nn states no expectation (its EXPECT is commented out): phase 1 must not crash
        return True
    if isinstance(expect, dict):
        return status != expect["not"]
    return status == expect


class CaseFailed(Exception):
    """One case's expectation not met (the message says what differs)."""


def _check(s: Session, op: str, case: dict[str, Any], rng: np.random.Generator) -> dict[str, Any] | None:
    """Run one case; CaseFailed with what differs, else the mark it was judged by (None: ops-nn's own)."""
    mark = case.get("mark")
    if case["kind"] == "ut":
        status, message = run_unit_case(s, op, case, rng)
        expect = mark["status"] if mark and "status" in mark else case["expect"]
        if not _expected_ok(expect, status):
            what = f"marked {mark['section']}: documented {expect}" if mark else f"ops-nn expects {expect}"
            raise CaseFailed(f"status {status} ({message}); {what}")
    else:
        try:
            applied = run_system_case(s, op, case, rng)
        except Outcome as why:
            note = f"(marked {mark['section']}) " if mark else ""
            raise CaseFailed(f"{note}{why}") from None
        if applied and not mark:
            mark = {"section": applied}
    return mark


def _inputs(case: dict[str, Any]) -> str:
    """The case's inputs as its table gives them (dtype, shape, range or values), for a failure."""
    parts = []
    for i in case.get("inputs", []):
        what = i.get("range", i.get("values", i.get("value")))
        shape = f"{i['shape']}" if i.get("shape") is not None else ""
        parts.append(f"{i['name']}={i.get('dtype', '')}{shape}:{json.dumps(what, separators=(',', ':'))}")
    return "; ".join(parts) if parts else json.dumps({k: v for k, v in case.items() if k not in ("id", "kind")})[:400]


def _params():
    for kind in DEVICE_KINDS:
        for op in OPERATORS:
            yield pytest.param(kind, op, id=f"{kind}-{op}")


@pytest.mark.parametrize("kind,op", list(_params()))
def test_operator(request, kind, op):
    s = session_for(kind)
    counts = RESULTS.setdefault((kind, op), {"cases": 0, "passed": 0, "marked": 0})
    only = os.environ.get(ONLY_ENV, "").strip()
    failed: list[str] = []
    passing_xfails: list[str] = []
    for case in OPERATORS[op]["cases"]:
        if only and case["id"] != only:
            continue
        seed = draw_seed(f"{request.node.nodeid}::{case['id']}")
        xfail = case.get("xfail")
        expected_to_fail = bool(xfail) and kind in xfail.get("devices", [kind])
        counts["cases"] += 1
        before = (len(s.tensors), len(s.arrays), len(s.pointers))
        why = None
        try:
            mark = _check(s, op, case, np.random.default_rng(seed))
        except CaseFailed as e:
            why = str(e)
        except Exception as e:  # noqa: BLE001 - a crash in one case is that case's failure, not the loop's
            why = f"raised {type(e).__name__}: {e} ({traceback.extract_tb(e.__traceback__)[-1].line})"
        finally:
            _release(s, before)
        if why is None and expected_to_fail:
            passing_xfails.append(f"{case['id']} passes but carries xfail ({xfail['reason']}): remove it "
                                  "(tests/conformance/marks.py, then scripts/gen_conformance.py)")
        elif why is not None and expected_to_fail:
            print(f"expected failure {case['id']} (seed {seed}): {xfail['reason']} [{why}]")
        elif why is not None:
            failed.append(f"{case['id']} (seed {seed}; {case['kind']}; {_inputs(case)}): {why}")
        else:
            counts["marked" if mark else "passed"] += 1
    if only and not counts["cases"]:
        pytest.skip(f"{ONLY_ENV}={only}: no such case of {op}")
    if failed or passing_xfails:
        replay = (f"replay one: {SEED_ENV}={run_seed()} {ONLY_ENV}=<case id> python -m pytest "
                  f"'{request.node.nodeid}'")
        pytest.fail(f"{op} on {kind}: {len(failed)} of {counts['cases']} cases failed"
                    + "".join(f"\n  {line}" for line in failed + passing_xfails) + f"\n{replay}", pytrace=False)


def teardown_module():
    if "session" in _held:
        _held.pop("session").close()
        _held.clear()
    release_devices()
