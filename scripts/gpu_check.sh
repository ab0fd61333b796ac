#!/usr/bin/env bash
# The day a GPU is lent: everything that can only be proven on one, in one command.
#   1. installs the cuda extra (CuPy, NVRTC, cuBLAS wheels) into the interpreter's environment;
#   2. runs the test suite on the cuda device (ACLNN_GPU_TEST_DEVICES=cuda: tests/support.py widens
#      the tolerances by GPU_TOLERANCE_SCALE for the GPU's expf/logf ulps and fused multiply-adds);
#   3. runs `python -m bench` on the cuda device (quick sizes unless GPU_CHECK_FULL_BENCH=1);
#   4. where Nsight Compute (ncu) is installed: for one launch of each kernel of the traffic budget's
#      cases, ncu's DRAM bytes and global-load/store sectors beside the profiler's modelled ones.
# ACLNN_GPU_CHECK_DEVICE=emulated runs the same steps on the emulated device (no GPU: proves the script;
# the ncu step is skipped as there is no GPU to profile). GPU_CHECK_PYTEST_ARGS adds pytest arguments
# (e.g. "-k kl_div" for a short proof). PYTHON selects the interpreter (default: python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
DEV="${ACLNN_GPU_CHECK_DEVICE:-cuda}"
OUT="${GPU_CHECK_OUT:-$(mktemp -d -t gpu_check.XXXXXX)}"
start=$SECONDS
status=0

if [ "$DEV" = cuda ]; then
  echo "::: installing the cuda extra"
  "$PY" -m pip install -q -e ".[cuda,test,bench]"
  "$PY" -c "import cupy; assert cupy.is_available(), 'CuPy sees no GPU'; print('GPU:', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
fi

echo "::: test suite on $DEV"
# shellcheck disable=SC2086
ACLNN_GPU_TEST_DEVICES="$DEV" "$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" tests ${GPU_CHECK_PYTEST_ARGS:-} || status=1

echo "::: bench on $DEV"
"$PY" -m bench --device "$DEV" $([ "${GPU_CHECK_FULL_BENCH:-0}" = 1 ] || echo --quick) --out "$OUT/bench" || status=1

if [ "$DEV" = cuda ] && command -v ncu >/dev/null; then
  echo "::: profiler vs Nsight Compute (one launch per kernel)"
  "$PY" -m aclnn_gpu.profile.ncu_compare --out "$OUT/ncu" || status=1
else
  echo "::: ncu comparison skipped (device $DEV, ncu $(command -v ncu || echo 'not installed'))"
fi

echo "::: gpu_check on $DEV: $([ $status = 0 ] && echo OK || echo FAILED) in $((SECONDS - start)) s (artifacts: $OUT)"
exit $status
