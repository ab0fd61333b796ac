"""The ten operators as the profiler drives them, gathered from each family's ops/<family>/samples.py
(in ops/registry.py's SAMPLES order): inputs of a given shape, the public `functional` call that runs on
the emulated device, and the operator's minimum bytes (bench/README.md's formulas; for ConvTbc, the
bytes of its operands, read once and written once).

Each case is a named set of dimensions with small defaults (`dims`), the dtype, and `setup(dims,
dtype, rng) -> call`: setup runs what the call needs first (a forward, outside the profile) and
`call()` is the profiled operator call. A family's case gets `functional` and the demo's DeviceArrays
from here (`Drivers`: ops sit below both). Besides sizes, some dimensions are layout switches (0/1),
described beside each family's cases: `strided` (the main inputs are transposed views: the strided
kernels or the gather copies), `stridedout` (CrossEntropyLossGrad through the two-phase API into a
non-contiguous output), `zloss` (CrossEntropyLoss / CrossEntropyLossGrad with CANN's z-loss, scale
1e-4: lse (N,) out / in), `none` (KlDiv: reduction none), `bcast` (KlDivBackward: self (1, C) against
target (N, C), a reduced gradient), `fptargets` (CTC: float targets, cast on the device). COVERAGE
lists the cases that together launch every kernel family of the ten operators (the minimum bytes of a
layout variant are those of the contiguous call: a reference, not a bound).
"""
from __future__ import annotations

import dataclasses

from ..ops.registry import SAMPLES, family_modules
from ..ops.samples import DTYPES, CoverageCase, Drivers, ProfileCase

__all__ = ["COVERAGE", "DTYPES", "OPERATORS", "Operator"]


# An operator as the profiler runs it: its family's ProfileCase with the drivers bound, so that
# `setup(dims, dtype, rng) -> call()` (prepare work done inside setup)
Operator = ProfileCase


def _drivers() -> Drivers:
    from .. import functional
    from ..demo.samples import DeviceArrays
    return Drivers(functional=functional, device_arrays=DeviceArrays)


def _operator(case: ProfileCase) -> Operator:
    """The family's case with the drivers bound at setup (functional is imported on first use, as a
    call of the profile needs the emulated device chosen first)."""
    return dataclasses.replace(case, setup=lambda d, dt, rng: case.setup(d, dt, rng, _drivers()))


_FAMILIES = family_modules(SAMPLES, "samples")   # each family's samples module, in SAMPLES order

OPERATORS: dict[str, Operator] = {case.name: _operator(case) for module in _FAMILIES for case in module.PROFILE_CASES}

# Cases that together launch every kernel family of the ten operators (tests/kernels/test_traffic_budget.py
# checks them against kernels/manifest.py): the defaults, plus each family's layout variants and long rows;
# a third item is the element type when it is not the operator's.
COVERAGE: list[CoverageCase] = [(name, {}) for name in OPERATORS]
for _module in _FAMILIES:
    COVERAGE += _module.COVERAGE
