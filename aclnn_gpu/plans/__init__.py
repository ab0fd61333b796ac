"""Layer 7, plans: what phase 1 produces and phase 2 replays, shared by every operator.

`plan.py` (the Plan base, EmptyPlan, the workspace builder and its strided copies, the phase-2
memory checks), `frozen.py` (a plan's kernel launches recorded once and replayed by every execute:
FrozenLaunch, the Recorder, `run_plan`), `checks.py` (the checks in CANN order every operator's
phase 1 runs: dtypes, formats, shapes, broadcasting, aliasing).
"""
