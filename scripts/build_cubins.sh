#!/usr/bin/env bash
# build_cubins.sh -- the shipped kernels (aclnn_gpu/kernels/cubins/), rebuilt for every CUDA major of
# the extras: each kernel file compiled by NVRTC to cubins (sm_80 ... sm_120) and PTX, as CuPy compiles
# it on the cuda device. Run it after changing a kernel file, a project header or a name expression
# (tests/kernels/test_shipped.py fails until then), and commit kernels/cubins/. No GPU needed. Only the
# files whose binaries are stale are compiled (ALL=1: every file; about 10 minutes of CPU on 2 cores
# for both majors). The NVRTC and runtime-header wheels of each major, at the versions
# pyproject.toml's extras pin, are unpacked (pip --target, nothing installed into the environment) into
# a cache folder, as scripts/compile_cuda12.sh does, and loaded with ctypes (aclnn_gpu/kernels/nvrtc.py).
# Environment: PYTHON (default: python), ACLNN_GPU_CACHE (the cache folder's parent), JOBS, ALL.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
pin() { grep -o "\"$1==[^\"]*\"" pyproject.toml | tr -d '"'; }
# fetch MAJOR NVRTC_PIN RUNTIME_PIN: the folder the two wheels are unpacked in (cached)
fetch() {
  local dir="${ACLNN_GPU_CACHE:-$HOME/.cache/aclnn_gpu}/cuda$1/${2#*==}"
  if [ ! -d "$dir/nvidia" ]; then
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp.$$" "$2" "$3" >&2
    mkdir -p "$(dirname "$dir")"
    mv -T "$dir.tmp.$$" "$dir" 2>/dev/null || rm -rf "$dir.tmp.$$"   # another run got there first
  fi
  echo "$dir"
}
JOBS_ARG=(); [ -n "${JOBS:-}" ] && JOBS_ARG=(--jobs "$JOBS"); [ "${ALL:-0}" = 1 ] && JOBS_ARG+=(--all)
for MAJOR in 12 13; do
  if [ "$MAJOR" = 12 ]; then NVRTC=$(pin nvidia-cuda-nvrtc-cu12); RUNTIME=$(pin nvidia-cuda-runtime-cu12)
  else NVRTC=$(pin nvidia-cuda-nvrtc); RUNTIME=$(pin nvidia-cuda-runtime); fi
  [ -n "$NVRTC" ] && [ -n "$RUNTIME" ] || { echo "build_cubins.sh: no pinned CUDA $MAJOR NVRTC/runtime in pyproject.toml" >&2; exit 1; }
  DIR=$(fetch "$MAJOR" "$NVRTC" "$RUNTIME")
  LIB=$(find "$DIR/nvidia" -name "libnvrtc.so.$MAJOR" | head -1)
  INC=$(dirname "$(find "$DIR/nvidia" -name cuda_fp16.h | head -1)")
  "$PY" -m aclnn_gpu.kernels build-cubins --nvrtc "$LIB" --cuda-include "$INC" "${JOBS_ARG[@]}"
done
"$PY" -m aclnn_gpu.kernels check
