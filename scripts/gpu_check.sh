#!/usr/bin/env bash
# The day a GPU is lent: everything that can only be proven on one, in one command.
#   1. installs the cuda12 or cuda13 extra (CuPy, NVRTC, cuBLAS, NCCL wheels) into the interpreter's
#      environment: ACLNN_GPU_CHECK_CUDA=12|13 picks it, else the CUDA major the driver reports
#      (nvidia-smi); then the compile report with that NVRTC, the kernels of the code that will load;
#   2. runs the test suite on the cuda device (ACLNN_GPU_TEST_DEVICES=cuda: tests/support.py widens
#      the tolerances by GPU_TOLERANCE_SCALE for the GPU's expf/logf ulps and fused multiply-adds);
#   3. the capture step: tests/test_capture.py again on its own (ACL graphs over CUDA stream capture and
#      cudaGraphLaunch, which only a GPU runs) and examples/capture_training_step.py (time per step
#      with and without capture);
#   4. runs `python -m bench` on the cuda device (quick sizes unless GPU_CHECK_FULL_BENCH=1);
#   5. where Nsight Compute (ncu) is installed: for one launch of each kernel of the traffic budget's
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
  MAJOR="${ACLNN_GPU_CHECK_CUDA:-}"
  if [ -z "$MAJOR" ] && command -v nvidia-smi >/dev/null; then   # the newest CUDA the driver runs
    MAJOR=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
  fi
  case "${MAJOR:-13}" in 12) EXTRA=cuda12 ;; 1[3-9]) EXTRA=cuda13 ;;
    *) echo "::: CUDA ${MAJOR} is older than 12: no extra of this library runs on this driver"; exit 1 ;; esac
  echo "::: installing the $EXTRA extra (driver: CUDA ${MAJOR:-unknown})"
  "$PY" -m pip install -q -e ".[$EXTRA,test,bench]"
  "$PY" -c "import cupy; assert cupy.is_available(), 'CuPy sees no GPU'; print('GPU:', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
  echo "::: compile report with the $EXTRA NVRTC"
  "$PY" -m aclnn_gpu.kernels.report --json "$OUT/kernel_report.json" || status=1
fi

echo "::: test suite on $DEV"
# shellcheck disable=SC2086
ACLNN_GPU_TEST_DEVICES="$DEV" "$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" tests ${GPU_CHECK_PYTEST_ARGS:-} || status=1

echo "::: capture (ACL graphs) on $DEV"
ACLNN_GPU_TEST_DEVICES="$DEV" "$PY" -m pytest -q -p no:cacheprovider tests/test_capture.py || status=1
ACLNN_GPU_DEVICE="$DEV" "$PY" examples/capture_training_step.py || status=1

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
