"""The CPU emulator against NumPy: the emulated device features the kernels rely on, argument
packing and its errors, launch errors, threads, and the build cache."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from aclnn_gpu.emulator import (EmuArgumentError, EmuDeadlockError, EmuLaunchError, EmuModule)

FIX = Path(__file__).resolve().parent / "fixtures"
EXPRS = ["block_reverse<float, 128>", "block_reverse<double, 64>"]


@pytest.fixture(scope="module")
def feat():
    return EmuModule.from_file(FIX / "features.cu", name_expressions=EXPRS)


def test_dynamic_shared_shuffle_ballot_count_ragged_grid(feat):
    rng = np.random.default_rng(1)
    n, B = 1000, 256                      # 4 blocks, the last one ragged
    G = (n + B - 1) // B
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(G, np.nan, np.float32)
    counts = np.zeros(2, np.int32)
    feat.get_function("dyn_reduce")((G,), (B,), (x, out, counts, np.int32(n)), shared_mem=(B // 32) * 4)
    xp = np.zeros(G * B, np.float32)
    xp[:n] = x
    np.testing.assert_allclose(out, xp.reshape(G, B).sum(1, dtype=np.float64), atol=1e-4)
    assert counts[0] == (x > 0).sum() and counts[1] == (x > 0).sum()


@pytest.mark.parametrize("m,d,src", [(1, 1, 0), (16, 5, 31), (7, 31, 13)])
def test_shuffles_match_cuda_semantics(feat, m, d, src):
    x = (np.arange(64, dtype=np.int32) * 7 + 3)
    out = np.full(4 * 64, -999, np.int32)
    feat.get_function("shuffles")((1,), (64,), (x, out, np.int32(m), np.int32(d), np.int32(src)))
    lane = np.arange(64) % 32
    warp0 = np.arange(64) - lane
    got = out.reshape(64, 4)
    np.testing.assert_array_equal(got[:, 0], x[warp0 + (lane ^ m)])
    np.testing.assert_array_equal(got[:, 1], x[warp0 + np.where(lane + d < 32, lane + d, lane)])
    np.testing.assert_array_equal(got[:, 2], x[warp0 + np.where(lane - d >= 0, lane - d, lane)])
    np.testing.assert_array_equal(got[:, 3], x[warp0 + src])


def test_half_bfloat16_round_to_nearest_even_and_2d_grid(feat):
    rng = np.random.default_rng(2)
    w, hgt = 37, 19                       # 2-D grid, ragged in both dimensions
    x = (rng.standard_normal((hgt, w)) * 1000).astype(np.float32)
    special = np.array([65504, 65520, 65519.99, 1e-8, 5.96e-8, 2.98e-8, 2**-25, -0.0, np.inf, -np.inf,
                        1 + 2**-11, 1 + 3 * 2**-11, 6.1e-5, 3.0e38, 1.00390625, 1.01171875, np.nan], np.float32)
    x.flat[:special.size] = special
    h = np.zeros((hgt, w), np.uint16)
    bf = np.zeros((hgt, w), np.uint16)
    back = np.zeros((hgt, w), np.float32)
    imax = np.zeros(1, np.int32)
    feat.get_function("halfs")(((w + 15) // 16, (hgt + 7) // 8), (16, 8),
                               (x, h, bf, back, imax, np.int32(w), np.int32(hgt)))
    with np.errstate(over="ignore"):
        ref_h = x.astype(np.float16)
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(h[finite], ref_h.view(np.uint16)[finite])
    assert np.isnan(h.view(np.float16)[~finite]).all()
    u = x.view(np.uint32).astype(np.uint64)
    ref_bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(bf[finite], ref_bf[finite])
    ref_back = ref_h.astype(np.float32) + (ref_bf.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back[finite], ref_back[finite])
    assert imax[0] == np.abs(x).view(np.int32).max()   # NaN's bits included, as atomicMax sees them


def test_float_math_uses_float_overloads(feat):
    # log(exp(x) + 1.0f): with the float overloads (expf/logf, as CUDA's exp(float)) the sum is
    # rounded to float; with exp(double) it would not be, and the results differ for x < 0.
    x = np.linspace(-20, 20, 1001).astype(np.float32)
    y = np.zeros_like(x)
    feat.get_function("float_math")((4,), (256,), (x, y, np.int32(x.size)))
    f32 = np.float32
    e = np.exp(x.astype(np.float64)).astype(f32)                # correctly rounded expf
    ref = np.log((e + f32(1)).astype(np.float64)).astype(f32)   # float sum, correctly rounded logf
    dbl = np.log(np.exp(x.astype(np.float64)) + 1).astype(f32)  # what exp(double) would give
    assert (y == ref).mean() > 0.99
    assert (y == dbl).mean() < (y == ref).mean() - 0.1


@pytest.mark.parametrize("expr,dtype,block", [("block_reverse<float, 128>", np.float32, 128),
                                              ("block_reverse<double, 64>", np.float64, 64)])
def test_template_via_name_expression_static_shared(feat, expr, dtype, block):
    n = 3 * block + 17
    a = np.arange(n, dtype=dtype)
    b = np.full(n, np.nan, dtype)
    g = (n + block - 1) // block
    feat.get_function(expr)((g,), (block,), (a, b, np.int64(n)))
    ap = np.zeros(g * block, dtype)
    ap[:n] = a
    for k in range(g):  # each block reverses its tile; the ragged last block only writes j < n
        lo, hi = k * block, min(n, (k + 1) * block)
        np.testing.assert_array_equal(b[lo:hi], ap[lo:(k + 1) * block][::-1][: hi - lo])


def test_shared_memory_starts_poisoned_every_block(feat):
    y = np.zeros(3 * 32, np.float32)
    feat.get_function("read_uninit_shared")((3,), (32,), (y,))
    assert np.isnan(y).all()       # not zeros, and not the 7.0 the previous block left behind


def test_reverse_schedule_gives_same_results(feat, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(700).astype(np.float32)
    outs = []
    for rev in ("0", "1"):
        monkeypatch.setenv("EMU_SCHED_REVERSE", rev)
        out = np.zeros(3, np.float32)
        counts = np.zeros(2, np.int32)
        feat.get_function("dyn_reduce")((3,), (256,), (x, out, counts, np.int32(700)), shared_mem=32)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_argument_size_mismatch_is_a_clear_error(feat):
    k = feat.get_function("float_math")
    x = np.zeros(4, np.float32)
    with pytest.raises(EmuArgumentError, match=r"'float_math' argument 2: the kernel parameter is 4 bytes, got 8"):
        k((1,), (32,), (x, x, 4))                      # Python int -> int64, like CuPy
    with pytest.raises(EmuArgumentError, match="takes 3 arguments, got 2"):
        k((1,), (32,), (x, x))
    with pytest.raises(EmuArgumentError, match="unsupported type"):
        k((1,), (32,), (x, x, "4"))


def test_pointer_arguments_ptr_objects_and_uint64(feat):
    class DevPtr:                                      # CuPy-MemoryPointer-like
        def __init__(self, a):
            self.ptr = a.ctypes.data
    x = np.linspace(-1, 1, 64).astype(np.float32)
    y1, y2 = np.zeros_like(x), np.zeros_like(x)
    k = feat.get_function("float_math")
    k((1,), (64,), (DevPtr(x), DevPtr(y1), np.int32(64)))
    k((1,), (64,), (np.uint64(x.ctypes.data), np.uint64(y2.ctypes.data), np.int32(64)))
    np.testing.assert_array_equal(y1, y2)
    assert np.all(y1 > 0)


def test_launch_configuration_errors(feat):
    k = feat.get_function("float_math")
    x = np.zeros(4, np.float32)
    with pytest.raises(EmuLaunchError, match="invalid block"):
        k((1,), (1025,), (x, x, np.int32(0)))
    with pytest.raises(EmuLaunchError, match="invalid block"):
        k((1,), (32, 32, 2), (x, x, np.int32(0)))
    with pytest.raises(EmuLaunchError, match="invalid grid"):
        k((0,), (32,), (x, x, np.int32(0)))
    with pytest.raises(EmuLaunchError, match="dynamic shared memory"):
        k((1,), (32,), (x, x, np.int32(0)), shared_mem=48 * 1024 + 4)
    k.max_dynamic_shared_size_bytes = 96 * 1024           # opt-in, as with cudaFuncSetAttribute
    k((1,), (32,), (x, x, np.int32(0)), shared_mem=64 * 1024)
    with pytest.raises(KeyError, match="no kernel"):
        feat.get_function("not_there")


def test_deadlock_is_an_exception_and_module_stays_usable():
    m = EmuModule.from_file(FIX / "deadlock.cu")
    y = np.zeros(64, np.float32)
    with pytest.raises(EmuDeadlockError, match="deadlock"):
        m.get_function("shuffle_half_warp")((2,), (64,), (y,))
    with pytest.raises(EmuDeadlockError):                 # fibers were abandoned cleanly: again
        m.get_function("shuffle_half_warp")((1,), (32,), (y,))


def test_concurrent_launches_from_threads(feat):
    rng = np.random.default_rng(4)
    errors = []

    def work(seed):
        try:
            r = np.random.default_rng(seed)
            for _ in range(5):
                n = int(r.integers(1, 600))
                a = r.standard_normal(n)
                b = np.full(n, np.nan)
                g = (n + 63) // 64
                feat.get_function("block_reverse<double, 64>")((g,), (64,), (a, b, np.int64(n)))
                ap = np.zeros(g * 64)
                ap[:n] = a
                for k in range(g):
                    lo, hi = k * 64, min(n, (k + 1) * 64)
                    assert np.array_equal(b[lo:hi], ap[lo:(k + 1) * 64][::-1][: hi - lo])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(int(s),)) for s in rng.integers(0, 1 << 30, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_build_cache_and_concurrent_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("ACLNN_GPU_CACHE", str(tmp_path))
    src = (FIX / "features.cu").read_text() + "\n// cache test\n"
    mods, errors = [], []

    def build():
        try:
            mods.append(EmuModule(src, filename="features_copy.cu"))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(m.compile_seconds > 0 for m in mods) == 1    # built once, found twice
    assert len({m.library_path for m in mods}) == 1
    assert EmuModule(src, filename="features_copy.cu").compile_seconds == 0.0


def test_build_tools_run_without_the_sanitizer_runtime(tmp_path, monkeypatch):
    """A sanitized test process (sanitize.py) preloads libasan/libubsan: the compiler it starts must
    not inherit them (the ASan run compiled every kernel under the ASan runtime, ~1.8x slower)."""
    from aclnn_gpu.emulator import build

    seen = tmp_path / "env"
    wrapper = tmp_path / "cxx"
    # Records the environment the build gives the compiler, then is the compiler.
    wrapper.write_text(f'#!/bin/sh\nenv >> "{seen}"\nexec g++ "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(build, "CXX", str(wrapper))
    monkeypatch.setenv("ACLNN_GPU_CACHE", str(tmp_path / "cache"))
    # A runtime that does not exist: were it passed on, ld.so would only warn and the check below fail.
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/libasan.so.8:/nonexistent/libubsan.so.1")
    monkeypatch.setenv("ASAN_OPTIONS", "abort_on_error=1")
    mod = EmuModule((FIX / "oob.cu").read_text() + "\n// tool env test\n", filename="oob_copy.cu")
    assert mod.compile_seconds > 0
    recorded = seen.read_text()
    assert "ACLNN_GPU_CACHE=" in recorded                    # the wrapper did run, with the build's env
    assert "libasan" not in recorded and "libubsan" not in recorded and "ASAN_OPTIONS" not in recorded
