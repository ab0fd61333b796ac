#!/usr/bin/env bash
# The test command of the README (and of CI): every test on the cpu and emulated devices, the demo on
# both, the example programs, then the kernel proofs (compile report, ASan/UBSan, TSan replay).
# PYTHON selects the interpreter (default: python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export ACLNN_GPU_CACHE="${ACLNN_GPU_CACHE:-$HOME/.cache/aclnn_gpu}"
start=$SECONDS

echo "::: tests (cpu and emulated devices)"
"$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" tests

echo "::: demo on the cpu and emulated devices"
"$PY" -m aclnn_gpu --device cpu --repeat 3
"$PY" -m aclnn_gpu --device emulated --repeat 1

if [ -d examples ]; then
  echo "::: example programs (cpu device)"
  for program in examples/ascend_samples/*.py examples/train_*.py; do
    [ -e "$program" ] || continue
    [ "$(basename "$program")" = acl_sample.py ] && continue   # the samples' shared helpers
    echo "--- $program"
    ACLNN_GPU_DEVICE=cpu MPLBACKEND=Agg "$PY" "$program"
  done
fi

echo "::: C and C++ sample programs over the C ABI (cpu device)"
# tests/capi compiles and checks them on both devices against PyTorch; this is the README's command line.
capi_flags="$("$PY" -m aclnn_gpu.capi --cflags --libs)"
capi_out="$(mktemp -d)"
for program in examples/cpp/*.cpp examples/c/*.c; do
  [ -e "$program" ] || continue
  echo "--- $program"
  case "$program" in
    *.c) ${CC:-gcc} -std=c99 -Wall -Wextra -pedantic -Werror "$program" $capi_flags -o "$capi_out/a.out" ;;
    *) ${CXX:-g++} -std=c++17 -Wall -Wextra -Iexamples/cpp "$program" $capi_flags -o "$capi_out/a.out" ;;
  esac
  ACLNN_GPU_DEVICE=cpu "$capi_out/a.out" | tail -1
done
rm -rf "$capi_out"

echo "::: kernel proofs"
PYTHON="$PY" bash scripts/ci_kernels.sh

echo "::: all checks passed in $((SECONDS - start)) s"
