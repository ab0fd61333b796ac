#!/usr/bin/env bash
# ci_kernels.sh -- the kernel part of CI (called by .ci/run). No GPU needed.
#   1. compile report: every kernel of kernels/manifest.py through NVRTC for sm_80 and sm_90;
#      fails on any spill, compiler warning or error.
#   2. sanitizer proofs: the fixtures show that ASan, UBSan and the TSan replay catch their bugs.
#   3. ASan+UBSan run of every `kernels` test (all of tests/kernels and tests marked `kernels`)
#      with the emulator built -fsanitize=address,undefined, recording every launch.
#   4. ThreadSanitizer replay of the recorded launches that use barriers or dynamic shared memory.
# Environment: PYTHON (default: python), ACLNN_GPU_CACHE (emulator build cache, keep it between runs),
# CI_KERNELS_ARTIFACTS (default: a temporary directory; the report JSON, the recording and the
# sanitizer reports land there), ACLNN_GPU_TEST_SEED (the tests' seed; drawn and printed if unset).
# A sanitizer report aborts the ASan+UBSan run: sanitize.py keeps the reports in $ART/sanitizer-logs
# and prints them, the test that was running and the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
ART="${CI_KERNELS_ARTIFACTS:-$(mktemp -d -t ci_kernels.XXXXXX)}"
mkdir -p "$ART"
REC="$ART/launches"
rm -rf "$REC"
if [ -z "${ACLNN_GPU_TEST_SEED:-}" ]; then   # run alone (scripts/test.sh sets and prints it)
  export ACLNN_GPU_TEST_SEED="$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
  echo "::: test seed $ACLNN_GPU_TEST_SEED"
fi
status=0
t_all=$SECONDS

step() {  # step NAME CMD...: run, time, remember failure, continue
  local name=$1; shift
  local t0=$SECONDS
  echo "::: $name: $*"
  if "$@"; then echo "::: $name: ok ($((SECONDS - t0)) s)"; else echo "::: $name: FAILED ($((SECONDS - t0)) s)"; status=1; fi
}

step "compile report" "$PY" -m aclnn_gpu.kernels.report --json "$ART/kernel_report.json"
step "sanitizer proofs" "$PY" -m pytest -q -p no:cacheprovider -m sanitizer tests/kernels
step "asan+ubsan kernel tests" env ACLNN_GPU_EMU_RECORD="$REC" ACLNN_GPU_EMU_RECORD_FILTER=sync \
  ACLNN_GPU_EMU_RECORD_PER_KERNEL=1 ACLNN_GPU_SANITIZER_LOGS="$ART/sanitizer-logs" \
  "$PY" -m aclnn_gpu.emulator.sanitize -q -p no:cacheprovider -m "kernels and not sanitizer" tests
step "tsan replay" "$PY" -m aclnn_gpu.emulator.tsan "$REC" --only-sync --max-blocks 1 --max-per-kernel 1

echo "::: kernel CI total $((SECONDS - t_all)) s, status $status (artifacts: $ART)"
exit $status
