#!/usr/bin/env bash
# compile_cuda12.sh -- the kernel compile report against CUDA 12's NVRTC (the `cuda12` extra), from
# the same interpreter that runs the CUDA 13 report: the nvidia-cuda-nvrtc-cu12 and
# nvidia-cuda-runtime-cu12 wheels, at the versions pyproject.toml's cuda12 extra pins, are unpacked
# (pip --target, no install into the environment) into a cache folder and loaded with ctypes
# (aclnn_gpu/kernels/nvrtc.py). About 20 s; no GPU needed.
# Environment: PYTHON (default: python), ACLNN_GPU_CACHE (the cache folder's parent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
pin() { grep -o "\"$1==[^\"]*\"" pyproject.toml | tr -d '"'; }
NVRTC=$(pin nvidia-cuda-nvrtc-cu12)
RUNTIME=$(pin nvidia-cuda-runtime-cu12)
[ -n "$NVRTC" ] && [ -n "$RUNTIME" ] || { echo "compile_cuda12.sh: no pinned cu12 NVRTC/runtime in pyproject.toml" >&2; exit 1; }
DIR="${ACLNN_GPU_CACHE:-$HOME/.cache/aclnn_gpu}/cuda12/${NVRTC#*==}"
LIB="$DIR/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
if [ ! -e "$LIB" ]; then
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$DIR.tmp.$$" "$NVRTC" "$RUNTIME"
  mkdir -p "$(dirname "$DIR")"
  mv -T "$DIR.tmp.$$" "$DIR" 2>/dev/null || rm -rf "$DIR.tmp.$$"   # another run got there first
fi
exec "$PY" -m aclnn_gpu.kernels.report --nvrtc "$LIB" --cuda-include "$DIR/nvidia/cuda_runtime/include" "$@"
