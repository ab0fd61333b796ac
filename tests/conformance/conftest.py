"""The conformance run's summary: per device and operator, the cases run, passed and marked."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    try:
        from test_conformance import OPERATORS, RESULTS
    except ImportError:
        return
    if not RESULTS:
        return
    terminalreporter.section("ops-nn conformance")
    for (kind, op), c in sorted(RESULTS.items()):
        commit = OPERATORS[op]["ops_nn"]["commit"][:12]
        terminalreporter.write_line(f"{kind:9s} {op:34s} cases {c['cases']:4d}  passed {c['passed']:4d}  "
                                    f"marked {c['marked']:4d}  (ops-nn {commit})")
