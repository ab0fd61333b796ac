"""The shipped kernels (kernels/cubins/, kernels/shipped.py): the binaries are the current sources'
(rebuilt with scripts/build_cubins.sh), each is what its name says, the cuda device chooses them by
the driver's CUDA major and the GPU's architecture and falls back to NVRTC otherwise, saying so on
the `aclnn_gpu` logger; over the stand-in (emulator/fakecupy/modules.py records which path each module took)."""
from __future__ import annotations

import logging
import lzma
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from support import assert_close

import aclnn_gpu as acl
import aclnn_gpu.functional as Fn
from aclnn_gpu import runtime
from aclnn_gpu.emulator import fakecupy
from aclnn_gpu.kernels import loader, report, shipped

REQUIRED = ("sm_80", "sm_86", "sm_89", "sm_90")   # every CUDA major of the extras ships at least these
MAJORS = ("12", "13")                             # pyproject.toml's cuda12 and cuda13 extras
EM_CUDA = 190                                     # the ELF machine of a cubin


@pytest.fixture
def index():
    return shipped.read_index()


def test_shipped_binaries_are_the_current_sources(index):
    stale = shipped.stale_files(index)
    assert not stale, ("the shipped kernels are not the current sources':\n  " + "\n  ".join(stale) +
                       f"\nrebuild them with `PYTHON={sys.executable} {shipped.REBUILD}` (no GPU needed) and commit "
                       "aclnn_gpu/kernels/cubins/")


def test_every_major_of_the_extras_is_shipped(index):
    assert sorted(index["builds"]) == list(MAJORS)
    for major, build in index["builds"].items():
        assert build["nvrtc"].startswith(f"{major}."), build["nvrtc"]
        assert set(REQUIRED) <= set(build["targets"]), (major, build["targets"])
        assert any(t.startswith("compute_") for t in build["targets"]), f"CUDA {major}: no PTX for newer GPUs"


def test_each_binary_is_for_its_target_and_names_every_expression(index):
    """A cubin is a CUDA ELF whose flags name its architecture; the PTX targets its own; the lowered
    names cover the file's name expressions (the launch code looks kernels up by them)."""
    for major, build in index["builds"].items():
        for file, entry in build["files"].items():
            assert list(entry["names"]) == loader.name_expressions(file), (major, file)
            assert all(lowered.startswith("_Z") or lowered == expr for expr, lowered in entry["names"].items())
            for target, relative in entry["binaries"].items():
                data = lzma.decompress((shipped.CUBIN_DIR / relative).read_bytes())
                number = int(target.rpartition("_")[2])
                if target.startswith("sm_"):
                    assert data[:4] == b"\x7fELF", relative
                    machine, = struct.unpack_from("<H", data, 18)
                    flags, = struct.unpack_from("<I", data, 48)
                    assert machine == EM_CUDA, (relative, machine)
                    # the SM in e_flags: its low byte in the older CUDA ELF ABI (EI_OSABI 0x33, CUDA 12's
                    # NVRTC below sm_100), the next byte in the newer (EI_OSABI 0x41)
                    sm = flags & 0xFF if data[7] == 0x33 else (flags >> 8) & 0xFF
                    assert sm == number, (relative, hex(flags))
                    for lowered in entry["names"].values():
                        assert lowered.encode() in data, (relative, lowered)
                else:
                    assert f".target sm_{number}".encode() in data[:4096], relative


def test_the_hash_covers_the_code_options_the_device_compiles_with():
    """shipped.CODE_OPTIONS (what the build compiles with and the hash covers) are the cuda device's
    RawModule options (machine paths aside) and what CuPy adds to them."""
    device_options = [o for o in loader.nvrtc_options() if not o.startswith("-I")]
    assert list(shipped.CODE_OPTIONS) == device_options + list(report.CUPY_ADDED_OPTIONS)


def test_an_edited_source_is_stale_and_never_loaded(tmp_path, monkeypatch, index):
    """A kernel file or a header it includes changed after the build: `check` names it with the rebuild
    command, and the device compiles it with NVRTC instead of loading the old cubin."""
    copy = tmp_path / "kernels"
    shutil.copytree(loader.KERNEL_DIR, copy, ignore=shutil.ignore_patterns("cubins", "emulator", "__pycache__"))
    (copy / "kl_div.cu").write_text((copy / "kl_div.cu").read_text() + "\n// edited\n")
    monkeypatch.setattr(loader, "KERNEL_DIR", copy)
    monkeypatch.setattr(shipped, "_current_hash", shipped.source_hash)   # the cached hash is the real tree's
    stale = shipped.stale_files(index)
    assert stale and all("kl_div.cu" in line for line in stale), stale
    assert len(stale) == len(index["builds"])
    choice = shipped.choose("kl_div.cu", "sm_90", 13, index)
    assert choice.path is None and shipped.REBUILD in choice.reason
    assert shipped.choose("ctc_loss.cu", "sm_90", 13, index).path is not None
    (copy / "common.cuh").write_text((copy / "common.cuh").read_text() + "\n// edited\n")
    assert {line.split(": ")[1].split(" ")[0] for line in shipped.stale_files(index)} == set(loader.kernel_files())


@pytest.mark.parametrize("arch, driver, target", [
    ("sm_90", 13, "cuda13/ctc_loss.sm_90.cubin.xz"),
    ("sm_80", 12, "cuda12/ctc_loss.sm_80.cubin.xz"),
    ("sm_86", 12, "cuda12/ctc_loss.sm_86.cubin.xz"),
    ("sm_89", 13, "cuda13/ctc_loss.sm_89.cubin.xz"),
    ("sm_87", 13, "cuda13/ctc_loss.sm_86.cubin.xz"),     # same major, lower minor: binary compatible
    ("sm_120", 13, "cuda13/ctc_loss.sm_120.cubin.xz"),
    ("sm_121", 13, "cuda13/ctc_loss.sm_120.cubin.xz"),
    ("sm_130", 13, "cuda13/ctc_loss.compute_120.ptx.xz"),   # newer than every cubin: the driver compiles the PTX
])
def test_choice_by_cuda_major_and_architecture(arch, driver, target, index):
    choice = shipped.choose("ctc_loss.cu", arch, driver, index)
    assert choice.path == shipped.CUBIN_DIR / target, choice
    assert choice.names == index["builds"][str(driver)]["files"]["ctc_loss.cu"]["names"]


@pytest.mark.parametrize("arch, driver, why", [
    ("sm_75", 13, "no shipped cubin for sm_75 with CUDA 13"),   # older than every target, below the PTX
    ("sm_110", 13, "no shipped cubin for sm_110"),               # no sm_11x cubin, below the PTX
    ("sm_90", 14, "no shipped kernels for CUDA 14 (shipped: CUDA 12, 13)"),
    ("sm_90", 11, "no shipped kernels for CUDA 11"),
])
def test_no_choice_says_why(arch, driver, why, index):
    choice = shipped.choose("ctc_loss.cu", arch, driver, index)
    assert choice.path is None and why in choice.reason, choice


def test_choice_off_by_environment_and_without_an_index(monkeypatch, index):
    assert shipped.choose("kl_div.cu", "sm_90", 13, {}).reason.startswith("this install has no shipped kernels")
    monkeypatch.setenv(shipped.ENV, "0")
    assert shipped.choose("kl_div.cu", "sm_90", 13, index).path is None


# ------------------------------------------------------------------------------ over the stand-in
@pytest.fixture
def cold_emulated(monkeypatch):
    """A fresh emulated device (no module loaded yet) on this thread, fakecupy's record cleared."""
    monkeypatch.setenv("ACLNN_GPU_DEVICE", "emulated")
    monkeypatch.setenv("ACLNN_GPU_DEVICE_COUNT", "1")
    runtime.release_devices()
    fakecupy.module_loads.clear()
    yield
    acl.aclrtSetDevice(0)
    runtime.release_devices()


def _first_call(rng) -> None:
    x = rng.standard_normal((64, 32)).astype(np.float32)
    t = rng.random((64, 32)).astype(np.float32)
    got = Fn.kl_div_backward(np.ones((), np.float32), x, t, "sum")
    assert_close(got, -t.astype(np.float64), np.float32)   # d/dx sum(t * (log t - x)) = -t


@pytest.mark.parametrize("driver, capability, folder, target", [
    (13000, (9, 0), "cuda13", "sm_90"),
    (12080, (8, 6), "cuda12", "sm_86"),
    (13010, (12, 1), "cuda13", "sm_120"),
])
def test_a_cold_first_call_loads_the_shipped_cubin(cold_emulated, monkeypatch, rng, caplog, driver, capability,
                                                   folder, target):
    """The first call on a fresh device loads kernels/cubins/<folder>/kl_div.<target>.cubin: no NVRTC
    compile, no log line, the right kernels run (the stand-in finds them by their lowered names)."""
    monkeypatch.setattr(fakecupy.runtime, "DRIVER_VERSION", driver)
    monkeypatch.setattr(fakecupy.runtime, "COMPUTE_CAPABILITY", capability)
    with caplog.at_level(logging.INFO, logger="aclnn_gpu"):
        _first_call(rng)
    loaded = [Path(path) for kind, path in fakecupy.module_loads if kind == "load"]
    assert [p for p in loaded if p.parent.name == folder and p.name.startswith(f"kl_div.{target}.")], loaded
    assert not [kind for kind, _ in fakecupy.module_loads if kind != "load"], fakecupy.module_loads
    assert "compiled by NVRTC" not in caplog.text


@pytest.mark.parametrize("driver, capability, why", [
    (13000, (7, 5), "no shipped cubin for sm_75 with CUDA 13"),
    (14000, (9, 0), "no shipped kernels for CUDA 14"),
])
def test_the_fallback_compiles_and_says_why(cold_emulated, monkeypatch, rng, caplog, driver, capability, why):
    monkeypatch.setattr(fakecupy.runtime, "DRIVER_VERSION", driver)
    monkeypatch.setattr(fakecupy.runtime, "COMPUTE_CAPABILITY", capability)
    with caplog.at_level(logging.INFO, logger="aclnn_gpu"):
        _first_call(rng)
    assert ("nvrtc", loader.source("kl_div.cu")) in fakecupy.module_loads
    assert not [kind for kind, _ in fakecupy.module_loads if kind != "nvrtc"], fakecupy.module_loads
    lines = [r.getMessage() for r in caplog.records if "kernels/kl_div.cu compiled by NVRTC" in r.getMessage()]
    assert len(lines) == 1 and why in lines[0] and f"sm_{capability[0]}{capability[1]}" in lines[0], caplog.text


def test_a_first_call_loads_every_file_its_launch_list_needs_together(cold_emulated, monkeypatch, rng):
    """A call whose launch list needs two kernel files (ConvTbc into a strided output: the plan in
    conv_tbc.cu, the scatter into the output in strided_copy.cu) loads both in one `load_all` (NVRTC in
    parallel threads where no binary ships), not one after the other as each launch reaches them."""
    monkeypatch.setattr(fakecupy.runtime, "COMPUTE_CAPABILITY", (7, 5))      # no shipped cubin: NVRTC compiles
    calls = []
    real = shipped.load_all
    monkeypatch.setattr(shipped, "load_all", lambda cp, arch, scope, files, *a, **k:
                        calls.append(sorted(files)) or real(cp, arch, scope, files, *a, **k))
    from support import Session
    s = Session("emulated")
    try:
        x = s.tensor(rng.standard_normal((6, 2, 2)).astype(np.float32))
        w = s.tensor(rng.standard_normal((3, 2, 3)).astype(np.float32))
        b = s.tensor(rng.standard_normal(3).astype(np.float32))
        y = s.poisoned((6, 2, 3), np.float32, strided=True)                # scattered by strided_copy.cu
        assert s.run(acl.aclnnConvTbcGetWorkspaceSize, acl.aclnnConvTbc, x, w, b, 1, y, 0) == 0, \
            acl.aclGetRecentErrMsg()
    finally:
        s.close()
    assert calls == [["conv_tbc.cu", "strided_copy.cu"]], calls
    assert sorted(src for kind, src in fakecupy.module_loads if kind == "nvrtc") == \
        sorted(loader.source(f) for f in ("conv_tbc.cu", "strided_copy.cu"))


def test_a_binary_that_does_not_load_falls_back(cold_emulated, monkeypatch, tmp_path, caplog):
    """A shipped binary the driver refuses (here one that is no cubin) is compiled with NVRTC instead."""
    bad = tmp_path / "cuda13" / "kl_div.sm_90.cubin.xz"
    bad.parent.mkdir()
    bad.write_bytes(lzma.compress(b"not a cubin"))
    monkeypatch.setenv("ACLNN_GPU_CACHE", str(tmp_path / "cache"))
    choice = shipped.choose("kl_div.cu", "sm_90", 13)
    monkeypatch.setattr(shipped, "choose", lambda *a: shipped.Choice("kl_div.cu", bad, "sm_90", choice.names, "test"))
    device = runtime.device_of(0)
    with caplog.at_level(logging.INFO, logger="aclnn_gpu"):
        device.kernel("kl_div.cu", loader.name_expressions("kl_div.cu")[0])
    assert [kind for kind, _ in fakecupy.module_loads] == ["nvrtc"]
    assert "did not load (CUDADriverError" in caplog.text and "CUDA_ERROR_INVALID_IMAGE" in caplog.text


def test_load_all_compiles_the_fallbacks_in_parallel_threads(monkeypatch, caplog):
    """Several files without a shipped binary are compiled in worker threads, one log line each, and
    every file is reported done once."""
    monkeypatch.setenv(shipped.ENV, "0")
    files = ["strided_copy.cu", "kl_div.cu"]
    done: list[str] = []
    with caplog.at_level(logging.INFO, logger="aclnn_gpu"):
        modules = shipped.load_all(fakecupy, "sm_90", lambda: fakecupy.cuda.Device(0), files, jobs=2,
                                   progress=lambda file, module: done.append(file))
    assert sorted(modules) == sorted(done) == sorted(files)
    records = [r for r in caplog.records if "compiled by NVRTC" in r.getMessage()]
    assert sorted(r.getMessage().split()[1] for r in records) == sorted(f"kernels/{f}" for f in files)
    assert all(r.threadName.startswith("aclnn_gpu-nvrtc") for r in records), [r.threadName for r in records]
    assert all("ACLNN_GPU_SHIPPED_KERNELS=0" in r.getMessage() for r in records)


def test_load_all_loads_the_shipped_ones_on_the_calling_thread(monkeypatch, caplog):
    monkeypatch.setattr(fakecupy.runtime, "DRIVER_VERSION", 13000)
    with caplog.at_level(logging.INFO, logger="aclnn_gpu"):
        modules = shipped.load_all(fakecupy, "sm_90", lambda: fakecupy.cuda.Device(0), ["strided_copy.cu"])
    module = modules["strided_copy.cu"]
    assert isinstance(module, shipped.ShippedModule) and module.choice.target == "sm_90"
    assert "compiled by NVRTC" not in caplog.text


def test_unpacked_once_into_the_cache(tmp_path, monkeypatch):
    """A packed binary is unpacked to the user's cache, named by its hash, once; an unwritable cache
    falls back to the temporary folder."""
    packed = shipped.CUBIN_DIR / "cuda13" / "strided_copy.sm_90.cubin.xz"
    monkeypatch.setenv("ACLNN_GPU_CACHE", str(tmp_path / "cache"))
    first = shipped.unpacked(packed)
    assert first.parent == tmp_path / "cache" / "cubins" / "cuda13" and first.suffix == ".cubin"
    assert first.read_bytes() == lzma.decompress(packed.read_bytes())
    mtime = first.stat().st_mtime_ns
    assert shipped.unpacked(packed) == first and first.stat().st_mtime_ns == mtime
    (tmp_path / "ro").write_text("a file where the cache folder would be")
    monkeypatch.setenv("ACLNN_GPU_CACHE", str(tmp_path / "ro"))
    monkeypatch.setattr(shipped.tempfile, "tempdir", str(tmp_path / "tmp"))
    assert shipped.unpacked(packed).is_relative_to(tmp_path / "tmp")


def test_check_command(capsys):
    from aclnn_gpu.kernels.__main__ import main
    assert main(["check"]) == 0
    assert "current sources" in capsys.readouterr().out


def test_the_package_data_takes_every_shipped_file():
    """pyproject.toml's package data covers index.json and every binary (a wheel, or an sdist, carries
    them; an editable install reads them in place)."""
    import fnmatch
    tomllib = pytest.importorskip("tomllib")
    root = loader.KERNEL_DIR.parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["aclnn_gpu"]
    package = loader.KERNEL_DIR.parent
    files = [p.relative_to(package).as_posix() for p in shipped.CUBIN_DIR.rglob("*") if p.is_file()]
    assert len(files) == 1 + sum(len(e["binaries"]) for b in shipped.read_index()["builds"].values()
                                 for e in b["files"].values())
    assert [f for f in files if not any(fnmatch.fnmatchcase(f, p) for p in patterns)] == []


@pytest.mark.parametrize("shipped_on", [True, False])
def test_warm_makes_every_file_ready_with_a_progress_bar(monkeypatch, shipped_on):
    """`python -m aclnn_gpu.kernels warm` over the stand-in: every kernel file, one progress line each
    (the bar filling up), shipped binaries where they serve, NVRTC otherwise."""
    import io
    monkeypatch.setattr(fakecupy.runtime, "DRIVER_VERSION", 13000)
    if not shipped_on:
        monkeypatch.setenv(shipped.ENV, "0")
    out = io.StringIO()
    done = shipped.warm(0, out=out, jobs=2, cp=fakecupy)
    assert sorted(done) == sorted(loader.kernel_files())
    assert set(done.values()) == ({"shipped sm_90"} if shipped_on else {"NVRTC"})
    lines = out.getvalue().splitlines()
    assert "(sm_90, CUDA driver 13)" in lines[0]
    n = len(loader.kernel_files())
    assert [line.split("]")[0].count("#") for line in lines[1:]] == list(range(1, n + 1))
    assert lines[-1].split("] ")[1].startswith(f"{n}/{n}")


def test_warm_without_a_gpu_says_so(capsys):
    from aclnn_gpu.device.cuda import cuda_available
    from aclnn_gpu.kernels.__main__ import main
    if cuda_available():
        pytest.skip("a GPU is present: warm would compile for it")
    assert main(["warm"]) == 2
    assert "cannot be used" in capsys.readouterr().err
