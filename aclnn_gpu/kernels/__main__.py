"""`python -m aclnn_gpu.kernels COMMAND`: the shipped kernels' commands.

    build-cubins [--nvrtc LIB --cuda-include DIR] [--all]      compile kernels/cubins/ for one CUDA major:
                                                               the stale files, or --all (scripts/
                                                               build_cubins.sh: both majors)
    check                                                      exit 1 when a shipped binary is not the
                                                               current sources' (says the rebuild command)
    warm [--device N] [--jobs N]                               make every kernel file ready on the GPU:
                                                               shipped binaries loaded, the rest compiled
                                                               into CuPy's cache, with a progress bar
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aclnn_gpu.kernels", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build-cubins", help="compile every kernel file to cubins/PTX (one CUDA major)")
    b.add_argument("--nvrtc", metavar="LIB", help="this libnvrtc.so.N instead of cuda-python's (ACLNN_GPU_NVRTC)")
    b.add_argument("--cuda-include", metavar="DIR", help="the CUDA headers (cuda_fp16.h) of that NVRTC's major")
    b.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: CPU count)")
    b.add_argument("--all", action="store_true", help="recompile every file (default: only the files whose "
                   "shipped binaries are not the current sources')")
    sub.add_parser("check", help="are the shipped binaries the current sources'?")
    w = sub.add_parser("warm", help="load or compile every kernel file for the present GPU")
    w.add_argument("--device", type=int, default=0, help="the GPU (CuPy's device id; default 0)")
    w.add_argument("--jobs", type=int, default=None, help="parallel NVRTC compiles (default: CPU count)")
    a = ap.parse_args(argv)

    # the kernel tables are complete: Python imported the `aclnn_gpu` package first (kernels/manifest.py)
    from . import shipped
    if a.command == "build-cubins":
        if a.nvrtc:
            os.environ["ACLNN_GPU_NVRTC"] = a.nvrtc
        from . import cubins, loader
        cubins.build([a.cuda_include] if a.cuda_include else list(loader.cuda_include_dirs()), a.jobs,
                     everything=a.all)
        return 0
    if a.command == "check":
        stale = shipped.stale_files()
        for line in stale:
            print(f"stale: {line}", file=sys.stderr)
        if stale:
            print(f"rebuild with: {shipped.REBUILD}", file=sys.stderr)
            return 1
        print("the shipped kernels are the current sources'")
        return 0
    try:
        shipped.warm(a.device, jobs=a.jobs)
    except Exception as e:  # noqa: BLE001 - no CuPy, no driver, no GPU: said in one line
        print(f"python -m aclnn_gpu.kernels warm: GPU {a.device} cannot be used ({type(e).__name__}: {e}); "
              "it needs CuPy and a GPU: pip install 'aclnn_gpu[cuda]'", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
