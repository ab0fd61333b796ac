"""The C ABI installed as a CANN toolkit (`python -m aclnn_gpu.capi install --prefix DIR`): the
Ascend toolkit's layout and variables, CANN's documented sample CMakeLists flow (`source set_env.sh`,
`cmake ../ -DCMAKE_CXX_COMPILER=g++ -DCMAKE_SKIP_RPATH=TRUE`) building examples/cpp unedited, the
programs running after the library's cache is cleared, their results checked against PyTorch, and
the embedded interpreter ignoring the caller's PYTHONPATH / PYTHONHOME unless ACLNN_GPU_PYTHON_ENV=1.

One install and one CMake build per module, into the module's temporary folder, with a cache of
its own (ACLNN_GPU_CACHE), which the tests then delete.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_capi import check_against_torch

pytest.importorskip("cffi")

ROOT = Path(__file__).resolve().parents[2]
LINK_NAMES = ("libnnopbase.so", "libopapi.so", "libopapi_nn.so", "libopapi_math.so", "libhccl.so")


def _bash(script: str, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory) -> dict:
    """An install into <tmp>/Ascend/ascend-toolkit, built with a cache of its own."""
    tmp = tmp_path_factory.mktemp("toolkit")
    cache, prefix = tmp / "cache", tmp / "Ascend" / "ascend-toolkit"
    env = dict(os.environ, ACLNN_GPU_CACHE=str(cache))
    proc = subprocess.run([sys.executable, "-m", "aclnn_gpu.capi", "install", "--prefix", str(prefix)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"source {prefix}/set_env.sh" in proc.stdout
    return {"tmp": tmp, "cache": cache, "prefix": prefix, "env": env}


def test_the_toolkit_layout(toolkit):
    """DIR/set_env.sh, DIR/latest -> <version>, include/ with CANN's header paths, lib64/ with the
    library itself (a file) and CANN's link names, pkg-config and CMake files; nothing under DIR
    points into the cache."""
    from aclnn_gpu import __version__
    prefix = toolkit["prefix"]
    latest = prefix / "latest"
    assert latest.is_symlink() and os.readlink(latest) == __version__
    for header in ("acl/acl.h", "aclnn/acl_meta.h", "aclnnop/aclnn_ctc_loss.h", "hccl/hccl.h"):
        assert (latest / "include" / header).is_file(), header
    lib = latest / "lib64" / "libascendcl.so"
    assert lib.is_file() and not lib.is_symlink()
    for name in LINK_NAMES:
        assert os.readlink(latest / "lib64" / name) == "libascendcl.so", name
    assert (latest / "lib64" / "pkgconfig" / "aclnn_gpu.pc").is_file()
    assert (latest / "lib64" / "cmake" / "aclnn_gpu" / "aclnn_gpuConfig.cmake").is_file()
    cache = str(toolkit["cache"])
    for path in prefix.rglob("*"):
        assert not str(path.resolve()).startswith(cache), path
        if path.is_file() and path.suffix in (".sh", ".bash", ".pc", ".cmake"):
            assert cache not in path.read_text(), path
    for script in (prefix / "set_env.sh", latest / "set_env.sh", latest / "bin" / "setenv.bash"):
        assert script.read_text() == (prefix / "set_env.sh").read_text()


def test_set_env_sets_the_toolkits_variables(toolkit):
    """ASCEND_TOOLKIT_HOME / ASCEND_HOME_PATH / ASCEND_CUSTOM_PATH name the `latest` folder,
    LD_LIBRARY_PATH starts with its lib64 (and gains no empty entry when it was unset)."""
    latest = toolkit["prefix"] / "latest"
    names = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_CUSTOM_PATH", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH")
    env = {k: v for k, v in os.environ.items() if k not in names}
    proc = _bash(f"source {toolkit['prefix']}/set_env.sh && " + " && ".join(f'echo "${n}"' for n in names), env)
    assert proc.returncode == 0, proc.stderr
    values = dict(zip(names, proc.stdout.splitlines()))
    assert values["ASCEND_TOOLKIT_HOME"] == values["ASCEND_HOME_PATH"] == values["ASCEND_CUSTOM_PATH"] == str(latest)
    assert values["LD_LIBRARY_PATH"] == f"{latest}/lib64"
    assert values["PKG_CONFIG_PATH"] == f"{latest}/lib64/pkgconfig"
    proc = _bash(f'source {toolkit["prefix"]}/set_env.sh && echo "$LD_LIBRARY_PATH"', dict(env, LD_LIBRARY_PATH="/x"))
    assert proc.stdout.strip() == f"{latest}/lib64:/x"


@pytest.fixture(scope="module")
def cmake_build(toolkit) -> Path:
    """examples/cpp built by its CANN-style CMakeLists exactly as CANN's documentation says
    (`source set_env.sh`, `cmake ../ -DCMAKE_CXX_COMPILER=g++ -DCMAKE_SKIP_RPATH=TRUE`, make), then the
    library's cache deleted: the programs have only the toolkit."""
    if not shutil.which("cmake"):
        pytest.skip("no cmake on this machine")
    build = toolkit["tmp"] / "build"
    build.mkdir()
    proc = _bash(f"source {toolkit['prefix']}/set_env.sh && cd {build} && "
                 f"cmake {ROOT / 'examples' / 'cpp'} -DCMAKE_CXX_COMPILER={os.environ.get('CXX', 'g++')} "
                 "-DCMAKE_SKIP_RPATH=TRUE && make kl_div_backward cross_entropy_loss ctc_loss", toolkit["env"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    shutil.rmtree(toolkit["cache"])
    return build / "bin"


@pytest.mark.parametrize("device", ["cpu", "emulated"])
@pytest.mark.parametrize("name", ["kl_div_backward", "cross_entropy_loss", "ctc_loss"])
def test_cann_cmake_flow_runs_after_the_cache_is_cleared(toolkit, cmake_build, name, device):
    """Run from `source set_env.sh` (no rpath: LD_LIBRARY_PATH finds the library), with the cache the
    library was built in deleted and the caller's PYTHONHOME / PYTHONPATH pointing nowhere."""
    env = dict(toolkit["env"], ACLNN_GPU_DEVICE=device, PYTHONHOME="/nonexistent", PYTHONPATH="/nonexistent")
    env.pop("ACLNN_GPU_PYTHON_ENV", None)
    proc = _bash(f"source {toolkit['prefix']}/set_env.sh && {cmake_build / name}", env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_against_torch(name, proc.stdout)
    assert not (toolkit["cache"] / "capi").exists()   # nothing was rebuilt: the toolkit's library ran


def test_python_environment_is_read_only_when_asked(toolkit, cmake_build, tmp_path):
    """A PYTHONPATH whose `numpy` cannot be imported: ignored by default (the program runs); with
    ACLNN_GPU_PYTHON_ENV=1 it is the embedded interpreter's path, numpy fails, and aclInit returns
    ACL_ERROR_INTERNAL_ERROR (500000)."""
    (tmp_path / "numpy.py").write_text("raise ImportError('a numpy of the caller, not of aclnn_gpu')\n")
    env = dict(toolkit["env"], ACLNN_GPU_DEVICE="cpu", PYTHONPATH=str(tmp_path))
    run = f"source {toolkit['prefix']}/set_env.sh && {cmake_build / 'kl_div_backward'}"
    proc = _bash(run, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = _bash(run, dict(env, ACLNN_GPU_PYTHON_ENV="1"))
    assert proc.returncode != 0
    assert "aclInit failed. ERROR: 500000" in proc.stdout, proc.stdout[-2000:]
    assert "a numpy of the caller" in proc.stderr, proc.stderr[-2000:]
