"""The one workspace builder (aclnn_gpu/plans/plan.py: WorkspaceBuilder -> Workspace): ranges in call
order on 256-byte boundaries, where kernels find each tensor, and the order of the copies around an
operator's launches (staged inputs, input conversions | launches | output conversions, staged outputs)."""
from __future__ import annotations

import numpy as np
import pytest

from aclnn_gpu.plans.plan import NO_WORKSPACE, WorkspaceBuilder, tensor_ptr
from support import Session


@pytest.fixture
def session():
    s = Session("cpu")
    yield s
    s.close()


class Calls:
    sm_count = 4

    def __init__(self):
        self.calls: list[tuple] = []

    def upload(self, dst, host):
        self.calls.append(("upload", dst))

    def launch(self, file, expr, grid, block, args, shared_mem=0):
        self.calls.append(("launch", expr, int(args[0]), int(args[1])))


def test_ranges_addresses_and_copy_order(session):
    rng = np.random.default_rng(0)
    dense = session.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    strided_in = session.tensor(rng.standard_normal((4, 8)).astype(np.float32), strided=True)
    strided_out = session.tensor(np.zeros((4, 8), np.float16), strided=True)
    cast = session.tensor(rng.standard_normal(10).astype(np.float32))
    copies: list[tuple] = []
    builder = WorkspaceBuilder()
    builder.stage_all([dense, strided_in, None], [strided_out])
    builder.stage(strided_in)   # staged once
    builder.convert(cast, 80, lambda ctx, src, dst: copies.append(("cast", src, dst)))
    builder.convert(strided_out, 4 * 32, lambda ctx, src, dst: copies.append(("out", src, dst)), output=True)
    builder.reserve("tiling", 24)
    ws = builder.build()
    # strided_in: 128 data bytes + its tiling words; strided_out: 64 + tiling; then 80, 128, 24 -> 256 each
    assert ws.size == 7 * 256
    base = 1 << 20
    assert ws.address(dense, base) == tensor_ptr(dense)           # contiguous: used in place
    assert ws.address(strided_in, base) == base                   # its staged copy
    assert ws.address(cast, base) == base + 4 * 256               # the converted copy
    assert ws.address(strided_out, base) == base + 5 * 256        # the kernels write the conversion buffer
    assert ws.address(None, base) == 0
    assert ws.at("tiling", base) == base + 6 * 256 and ws.at("tiling", 0) == 0
    ctx = Calls()
    ws.gather(ctx, base)
    ws.scatter(ctx, base)
    assert [c[:2] for c in ctx.calls] == [("upload", base + 256), ("launch", "strided_gather<4>"),
                                         ("upload", base + 3 * 256), ("launch", "strided_scatter<2>")]
    assert ctx.calls[1][2:] == (tensor_ptr(strided_in), base)
    # the input's cast reads the tensor; the output's conversion writes its staged copy, scattered after
    assert copies == [("cast", tensor_ptr(cast), base + 4 * 256), ("out", base + 5 * 256, base + 2 * 256)]


def test_nothing_reserved_is_no_workspace(session):
    dense = session.tensor(np.zeros((2, 3), np.float32))
    builder = WorkspaceBuilder()
    builder.stage_all([dense], [dense])
    builder.reserve("tiling", 0)
    assert builder.build() is NO_WORKSPACE and NO_WORKSPACE.size == 0
