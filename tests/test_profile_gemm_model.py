"""The profiler's GEMM traffic model (aclnn_gpu/profile `_gemm_bytes`): a batched GEMM counts the distinct
32-byte sectors its entries touch (overlapping strided entries, a stride-0 operand and repeated pointers
fetch their common bytes once), C is read only when beta != 0; and the L2 model that the GEMMs and
PyTorch's ConvTbc sequence (bench/torch_launches.py) go through: what is still cached is not fetched."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from aclnn_gpu.profile import SECTOR, _gemm_bytes, _sectors, _strided_entries
from bench import torch_launches

F16 = np.dtype(np.float16)


def _entries(*addresses):
    return np.array(addresses, dtype=np.int64)


def test_contiguous_matrix_is_its_sectors():
    iv = _sectors(_entries(0), 2, 64, 8, 64)                     # 64 x 8 fp16, dense: 1024 bytes
    assert iv.tolist() == [[0, 1024 // SECTOR]]
    iv = _sectors(_entries(0), 2, 16, 4, 64)                     # 16 of every 64 rows: 4 runs of 32 bytes
    assert iv.tolist() == [[0, 1], [4, 5], [8, 9], [12, 13]]


def test_overlapping_strided_entries_count_once():
    # gradWeight's K = 3 taps as launch.py calls it (column-major dW^T = dy^T x): x shifted by one time
    # row per tap (B*Cin elements), dy shared (stride 0)
    rows, B, Cin, Cout, K = 10, 4, 16, 8, 3
    x_rows = B * Cin * 2                                          # bytes of one time row of x
    a = _strided_entries(0, F16, B * Cin, K)
    b = _strided_entries(1 << 30, F16, 0, K)
    c = _strided_entries(2 << 30, np.float32, Cin * Cout, K)
    cold, touches = _gemm_bytes(False, True, Cout, Cin, rows * B, b, F16, Cout, a, F16, Cin, 0.0, c, np.float32,
                                Cout)
    x_bytes = (rows + K - 1) * x_rows                             # the union of the three shifted windows
    dy_bytes = rows * B * Cout * 2                                # once, not K times
    dw_bytes = K * Cin * Cout * 4
    assert cold == x_bytes + dy_bytes + dw_bytes
    assert [store for _, store in touches] == [False, False, True]   # beta 0: C written, not read
    # the same product per tap (a batch of one each) moves K times the operands
    single = sum(_gemm_bytes(False, True, Cout, Cin, rows * B, _entries(1 << 30), F16, Cout,
                             _entries(k * x_rows), F16, Cin, 0.0, _entries((2 << 30) + k * Cin * Cout * 4),
                             np.float32, Cout)[0] for k in range(K))
    assert single == K * (rows * x_rows + dy_bytes) + dw_bytes


def test_pointer_entries_and_beta():
    # a pointer array naming the same A twice and disjoint C entries; beta != 0 reads C too
    a = _entries(0, 0, 4096)
    b = _entries(1 << 30, 1 << 30, 1 << 30)
    c = _entries(2 << 30, (2 << 30) + 1024, (2 << 30) + 2048)
    m, n, k = 16, 16, 32
    cold, touches = _gemm_bytes(False, False, m, n, k, a, F16, m, b, F16, k, 1.0, c, F16, m)
    a_bytes, b_bytes, c_bytes = 2 * m * k * 2, k * n * 2, 3 * m * n * 2
    assert cold == a_bytes + b_bytes + 2 * c_bytes
    assert [store for _, store in touches] == [False, False, False, True]


needs_runtime = pytest.mark.skipif(not shutil.which("clang++"), reason="the L2 model runs in the profiler's "
                                   "runtime (clang++)")


@needs_runtime
def test_l2_touch_hits_what_is_cached():
    from aclnn_gpu.emulator import profiling
    with profiling.collect(l2_bytes=1 << 20):                     # an empty 1 MiB L2
        assert profiling.l2_touch([1000], [1010], False) == (10, 0)   # cold: 10 read misses
        assert profiling.l2_touch([1000], [1010], False) == (0, 0)    # cached
        assert profiling.l2_touch([1005], [1015], True) == (0, 10)    # stores dirty 10 sectors
        # twice the capacity: misses all but the 15 cached sectors, and evicts them
        assert profiling.l2_touch([0], [(2 << 20) // 32], False)[0] == (2 << 20) // 32 - 15
        assert profiling.l2_touch([1000], [1010], False) == (10, 0)


@needs_runtime
def test_pytorch_conv_tbc_sequence_through_the_l2_model():
    # small: everything stays cached, so the L2 model moves each tensor once; large: each addmm_ streams
    # more than the L2 holds, so the L2 model equals the cold count
    small = {"T": 64, "B": 4, "Cin": 64, "Cout": 64, "K": 3, "pad": 1}
    m = torch_launches.model("ConvTbcBackward", small, 2, "float16")
    tensors = (2 * 64 * 4 * 64 + 64 * 4 * 64 + 2 * 3 * 64 * 64 + 64) * 2    # x, dy, dx, w, dw, db
    assert m["launches"] == 2 * 3 + 6 and m["bytes"] < m["cold_bytes"]
    assert tensors <= m["bytes"] <= tensors + 4 * 64 * 2 + 3 * 64 * 2 + 64          # + the bias temporaries
    big = {"T": 1024, "B": 32, "Cin": 1024, "Cout": 1024, "K": 3, "pad": 1}
    m = torch_launches.model("ConvTbcBackward", big, 2, "float16")
    assert m["bytes"] == pytest.approx(m["cold_bytes"], rel=1e-3)
