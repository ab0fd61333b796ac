"""hicann/ops-nn's own test cases of the five operator pairs, run on every test device (cpu and emulated
in CI; cuda where ACLNN_GPU_TEST_DEVICES names it): each op_api unit-test case with the status it
expects, each system-test case drawn as its table says and judged against its golden (runner.py). The
cases are data (cases/*.json: the ops-nn commit and the paths they were read from, written by
scripts/gen_conformance.py); a case this library decides otherwise (docs/API.md §7) carries a "mark"
and is checked against that decision, and is counted as marked, never dropped."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aclnn_gpu.runtime import release_devices

from runner import Outcome, run_system_case, run_unit_case
from support import DEVICE_KINDS, Session, rng_with_seed

CASES = Path(__file__).parent / "cases"
OPERATORS = {p.stem: json.loads(p.read_text()) for p in sorted(CASES.glob("*.json"))}
RESULTS: dict[tuple[str, str], dict[str, int]] = {}   # (device, op) -> counts, for the summary

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


def _params():
    for kind in DEVICE_KINDS:
        for op, data in OPERATORS.items():
            for case in data["cases"]:
                yield pytest.param(kind, op, case, id=f"{kind}-{op}-{case['id']}")


def _expected_ok(expect: Any, status: int) -> bool:
    if expect is None:   # ops-nn states no expectation (its EXPECT is commented out): phase 1 must not crash
        return True
    if isinstance(expect, dict):
        return status != expect["not"]
    return status == expect


def _check(s: Session, op: str, case: dict[str, Any], rng: Any) -> dict[str, Any] | None:
    """Run one case; pytest.fail with what differs, else the mark it was judged by (None: ops-nn's own)."""
    mark = case.get("mark")
    if case["kind"] == "ut":
        status, message = run_unit_case(s, op, case, rng)
        expect = mark["status"] if mark and "status" in mark else case["expect"]
        if not _expected_ok(expect, status):
            what = f"marked {mark['section']}: documented {expect}" if mark else f"ops-nn expects {expect}"
            pytest.fail(f"{op} {case['id']}: status {status} ({message}); {what}")
    else:
        try:
            applied = run_system_case(s, op, case, rng)
            if applied and not mark:
                mark = {"section": applied}
                print(f"marked: {applied}")
        except Outcome as why:
            note = f" (marked {mark['section']})" if mark else ""
            pytest.fail(f"{op} {case['id']}{note}: {why}")
    return mark


@pytest.mark.parametrize("kind,op,case", list(_params()))
def test_case(request, kind, op, case):
    """A case with "xfail" for this device is still run, and strictly: it must fail (then it is reported
    as xfailed, with the failure), and a case that passes fails the test, so a fixed case cannot hide
    behind its xfail."""
    s = session_for(kind)
    rng = rng_with_seed(request)
    counts = RESULTS.setdefault((kind, op), {"cases": 0, "passed": 0, "marked": 0})
    counts["cases"] += 1
    before = (len(s.tensors), len(s.arrays), len(s.pointers))
    xfail = case.get("xfail")
    expected_to_fail = bool(xfail) and kind in xfail.get("devices", [kind])
    try:
        try:
            mark = _check(s, op, case, rng)
        except pytest.fail.Exception as failure:
            if expected_to_fail:
                pytest.xfail(f"{xfail['reason']} [{failure}]")
            raise
    finally:
        _release(s, before)
    if expected_to_fail:
        pytest.fail(f"{op} {case['id']} passes on {kind} but carries xfail ({xfail['reason']}): remove it "
                    "(tests/conformance/marks.py, then scripts/gen_conformance.py)")
    counts["marked" if mark else "passed"] += 1


def teardown_module():
    if "session" in _held:
        _held.pop("session").close()
        _held.clear()
    release_devices()
