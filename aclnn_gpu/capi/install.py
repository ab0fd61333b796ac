"""Installing the C ABI as a CANN toolkit: `python -m aclnn_gpu.capi install --prefix DIR`.

Owns the installed layout, the Ascend toolkit's (`/usr/local/Ascend/ascend-toolkit`):

    DIR/set_env.sh                   what `source .../ascend-toolkit/set_env.sh` is for a CANN program
    DIR/latest -> <version>
    DIR/<version>/include/           acl/, aclnn/, aclnnop/, hccl/ (CANN's headers)
    DIR/<version>/lib64/             libascendcl.so (a copy, not a link into the cache) and CANN's
                                     other link names (libnnopbase.so, libopapi*.so, libhccl.so)
    DIR/<version>/lib64/pkgconfig/   aclnn_gpu.pc        lib64/cmake/aclnn_gpu/  find_package(aclnn_gpu)
    DIR/<version>/bin/setenv.bash    the same variables (CANN's samples source `$ASCEND_HOME_PATH/bin/setenv.bash`)
    DIR/<version>/set_env.sh         the same again (CANN 8.5's layout keeps set_env.sh in the version folder)

Nothing under DIR points into `$ACLNN_GPU_CACHE`: a program built against DIR keeps working when
the cache is cleared (the library still starts the interpreter and package it was built with).
The variables are the toolkit's: ASCEND_TOOLKIT_HOME and ASCEND_HOME_PATH (the `latest` folder),
LD_LIBRARY_PATH (its lib64 first), and ASCEND_CUSTOM_PATH, which CANN's documented sample
CMakeLists reads for the folder holding include/ and lib64/ (the toolkit leaves it to the user; a
toolkit that answers only CANN programs sets it, so that CMakeLists builds unedited).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .build import LIBRARY, build, write_around_library
from .build import _tmp_name as tmp_name


def version() -> str:
    from .. import __version__
    return __version__


def set_env_script(latest: Path) -> str:
    """The shell script of the toolkit's variables, `latest` being the folder with include/ and lib64/."""
    home = "'" + str(latest).replace("'", "'\\''") + "'"   # single-quoted: no shell expansion of the path
    return (f"# aclnn_gpu {version()} as a CANN toolkit (written by `python -m aclnn_gpu.capi install`):\n"
            "# the variables of the Ascend toolkit's set_env.sh, for CANN programs and build files.\n"
            f"export ASCEND_TOOLKIT_HOME={home}\n"
            'export ASCEND_HOME_PATH="${ASCEND_TOOLKIT_HOME}"\n'
            "# CANN's sample CMakeLists takes include/ and lib64/ from here\n"
            'export ASCEND_CUSTOM_PATH="${ASCEND_TOOLKIT_HOME}"\n'
            "# programs built with -DCMAKE_SKIP_RPATH=TRUE (CANN's documented cmake line) find the library here\n"
            'export LD_LIBRARY_PATH="${ASCEND_TOOLKIT_HOME}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"\n'
            'export PKG_CONFIG_PATH="${ASCEND_TOOLKIT_HOME}/lib64/pkgconfig${PKG_CONFIG_PATH:+:${PKG_CONFIG_PATH}}"\n'
            'export CMAKE_PREFIX_PATH="${ASCEND_TOOLKIT_HOME}${CMAKE_PREFIX_PATH:+:${CMAKE_PREFIX_PATH}}"\n')


def install(prefix: Path, verbose: bool = False) -> Path:
    """Build (if the cache has no library) and install into `prefix`; returns `prefix/<version>`.
    Installing again over an earlier install replaces its files."""
    built = build(verbose)
    prefix = Path(prefix).resolve()
    home = prefix / version()
    (home / "lib64").mkdir(parents=True, exist_ok=True)
    include = home / "include"
    tmp = tmp_name(include)
    shutil.copytree(built / "include", tmp)
    if include.exists():
        shutil.rmtree(include)
    os.replace(tmp, include)
    lib = home / "lib64" / LIBRARY
    tmp = tmp_name(lib)
    shutil.copy2(built / "lib64" / LIBRARY, tmp)
    os.replace(tmp, lib)   # a running program keeps the file it mapped
    write_around_library(home)
    latest = prefix / "latest"
    if latest.is_symlink() or not latest.exists():
        tmp = tmp_name(latest)
        tmp.symlink_to(version())
        os.replace(tmp, latest)
    script = set_env_script(latest if latest.is_symlink() else home)
    for path in (prefix / "set_env.sh", home / "set_env.sh", home / "bin" / "setenv.bash"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script)
    return home
