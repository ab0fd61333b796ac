"""`python -m aclnn_gpu.capi`: build the C ABI (if needed) and print what a build system needs.

    --cflags --libs   compiler and linker flags, on one line (g++ x.cpp $(python -m aclnn_gpu.capi --cflags --libs))
    --prefix          the CANN-style root (ASCEND_PATH / ASCEND_HOME_PATH for a CANN CMakeLists)
    --cmake-dir       the directory for find_package(aclnn_gpu) (-Daclnn_gpu_DIR=...)
    --pkg-config-path the directory of aclnn_gpu.pc (PKG_CONFIG_PATH)
    --build           build only (prints the prefix); --table lists the exported functions

    install --prefix DIR   install as a CANN toolkit: DIR/set_env.sh, DIR/latest/{include,lib64}
                           (aclnn_gpu/capi/install.py has the layout)
"""
from __future__ import annotations

import argparse
import os
import sys

from . import CapiBuildError, cflags, libs, prefix


def install_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m aclnn_gpu.capi install",
                                     description="Install the C ABI in the Ascend toolkit's layout: "
                                                 "PREFIX/set_env.sh, PREFIX/latest/include, PREFIX/latest/lib64.")
    parser.add_argument("--prefix", required=True, help="the toolkit folder (as /usr/local/Ascend/ascend-toolkit)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler command")
    args = parser.parse_args(argv)
    from .install import install
    try:
        home = install(args.prefix, args.verbose)
    except (CapiBuildError, OSError) as e:
        print(f"python -m aclnn_gpu.capi install: {e}", file=sys.stderr)
        return 1
    print(f"installed in {home}; to build and run CANN programs: source {home.parent / 'set_env.sh'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install"]:
        return install_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m aclnn_gpu.capi",
                                     usage="%(prog)s [-h] [--cflags] [--libs] [--prefix] [--cmake-dir]\n"
                                           + " " * 32 + "[--pkg-config-path] [--build] [--table] [-v]\n"
                                           "       %(prog)s install --prefix DIR [-v]",
                                     description="Build aclnn_gpu's C ABI (CANN's acl/aclnn headers and "
                                                 "libraries) and print the flags to compile against it.",
                                     epilog="install --prefix DIR [-v]: install the C ABI as a CANN toolkit "
                                            "(DIR/set_env.sh, DIR/latest/{include,lib64}); "
                                            "`python -m aclnn_gpu.capi install --help` tells more.")
    parser.add_argument("--cflags", action="store_true", help="print the compiler flags (-I...)")
    parser.add_argument("--libs", action="store_true", help="print the linker flags (-L... -lascendcl ...)")
    parser.add_argument("--prefix", action="store_true", help="print the CANN-style root (include/, lib64/)")
    parser.add_argument("--cmake-dir", action="store_true", help="print the directory for find_package(aclnn_gpu)")
    parser.add_argument("--pkg-config-path", action="store_true", help="print the directory holding aclnn_gpu.pc")
    parser.add_argument("--build", action="store_true", help="build the library if needed and print the prefix")
    parser.add_argument("--table", action="store_true", help="list the exported C functions and their header")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler command")
    args = parser.parse_args(argv)
    if args.table:
        from .bridge import python_function
        from .table import entries
        for e in entries():
            state = "" if e.returns == "string" or python_function(e) else "   (unsupported: no Python function)"
            print(f"{e.header:44} {e.restype} {e.name}({e.c_params}){state}")
        return 0
    try:
        root = prefix(args.verbose)
    except CapiBuildError as e:
        print(f"python -m aclnn_gpu.capi: {e}", file=sys.stderr)
        return 1
    words = (cflags(root) if args.cflags else []) + (libs(root) if args.libs else [])
    if words:
        print(" ".join(words))
    for flag, path in ((args.prefix or args.build, root), (args.cmake_dir, root / "lib64" / "cmake" / "aclnn_gpu"),
                       (args.pkg_config_path, root / "lib64" / "pkgconfig")):
        if flag:
            print(path)
    return 0


def run() -> int:
    """main(), quiet when the reader of stdout goes away early (`--table | head`), as CLI tools are."""
    try:
        status = main()
        sys.stdout.flush()              # a closed pipe shows here, not in the interpreter's last flush
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing left to flush at exit
        return 1


if __name__ == "__main__":
    sys.exit(run())
