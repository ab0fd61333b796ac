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

echo "::: kernel proofs"
PYTHON="$PY" bash scripts/ci_kernels.sh

echo "::: all checks passed in $((SECONDS - start)) s"
