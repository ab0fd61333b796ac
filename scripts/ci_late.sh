#!/usr/bin/env bash
# ci_late.sh -- the emulated device's tests again over the late stand-in (ACLNN_GPU_EMU_LATE=1,
# device/fakecupy.py): every stream's work starts late, pinned sources are read when the copy runs,
# freed memory comes back poisoned in CuPy's pool order, captures honour their modes. An ordering
# defect the prompt stand-in hides fails here. Run by scripts/test.sh beside the main tests.
# Environment: PYTHON (default: python), ACLNN_GPU_EMU_LATE_SEED (the stand-in's delays; derived from
# ACLNN_GPU_TEST_SEED when unset, and printed so a red run replays).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export ACLNN_GPU_EMU_LATE=1
export ACLNN_GPU_EMU_LATE_SEED="${ACLNN_GPU_EMU_LATE_SEED:-${ACLNN_GPU_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}}"
echo "::: late stand-in: the emulated tests with ACLNN_GPU_EMU_LATE=1 ACLNN_GPU_EMU_LATE_SEED=$ACLNN_GPU_EMU_LATE_SEED" \
  "ACLNN_GPU_TEST_SEED=${ACLNN_GPU_TEST_SEED:-} (replay: the same variables and the test id)"
t0=$SECONDS
# every test on the emulated device alone (ACLNN_GPU_TEST_DEVICES), less what has no device stream to
# reorder or runs elsewhere: tests/kernels (kernels on a standalone context, no streams), the docs'
# builds, the two-host network tests (beside the main run), the installs of the C ABI, the example
# trainings, the callgrind counts and the soak (the main run's)
ACLNN_GPU_TEST_DEVICES=emulated "$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" -k "not soak" \
  --ignore=tests/kernels --ignore=tests/test_docs.py --ignore=tests/test_hccl_hosts.py \
  --ignore=tests/capi/test_install.py --ignore=tests/test_examples.py --ignore=tests/test_host_overhead_bench.py \
  --durations=10 tests
echo "::: late stand-in: ok ($((SECONDS - t0)) s)"
