#!/usr/bin/env bash
# The test command of the README (and of CI): lint and type check, every test on the cpu and emulated
# devices (with coverage when ACLNN_GPU_COVERAGE=1), the API reference build, the demo on both
# devices, the example programs, the offline rehearsal of the GPU check; beside them on the second core,
# the kernel proofs (compile report with CUDA 13's NVRTC, ASan/UBSan, TSan replay) and then the emulated
# tests again over the late stand-in (scripts/ci_late.sh: the whole emulated suite); beside both, the two-host network tests, which
# mostly wait on links and timeouts; after the main run, while those finish, the compile report with CUDA 12's.
# PYTHON selects the interpreter (default: python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
# One seed for every randomised test of the run (tests/seeding.py), printed first: a run that dies
# half-way (a sanitizer report aborts pytest) still says how to replay what it ran.
export ACLNN_GPU_TEST_SEED="${ACLNN_GPU_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "::: test seed $ACLNN_GPU_TEST_SEED: a failing test replays with" \
  "ACLNN_GPU_TEST_SEED=$ACLNN_GPU_TEST_SEED python -m pytest '<test id>' (its report prints the exact command)"
export ACLNN_GPU_CACHE="${ACLNN_GPU_CACHE:-$HOME/.cache/aclnn_gpu}"
start=$SECONDS

echo "::: lint (ruff check) and type check (mypy), configured in pyproject.toml"
t0=$SECONDS
"$PY" -m ruff check .
"$PY" -m mypy
echo "::: lint and types: ok ($((SECONDS - t0)) s)"

# The kernel proofs (scripts/ci_kernels.sh: NVRTC compile report, ASan+UBSan and TSan runs of the
# emulated kernels), then the late stand-in's pass (scripts/ci_late.sh), run beside the main test run:
# on one core, and CI has two (the late pass runs in shards whose waits overlap). The two-host network tests and the soak run beside
# both (the first wait on 1 mbit links and fault timeouts; the soak runs for a fixed time, its default
# 60 s per device, whatever share of the cores it gets). Each log is printed when its job ends
# (below), or as far as it got if this script stops first.
proofs_log=$(mktemp -t aclnn-proofs.XXXXXX)
hosts_log=$(mktemp -t aclnn-hosts.XXXXXX)
# (setsid: their own process group, so stopping them stops the tests and emulators they started)
PYTHON="$PY" setsid bash -c 'k=0; bash scripts/ci_kernels.sh || k=$?; l=0; bash scripts/ci_late.sh || l=$?
  echo "::: kernel proofs status $k, late stand-in status $l"; [ "$k" = 0 ] && [ "$l" = 0 ]' > "$proofs_log" 2>&1 &
proofs_pid=$!
setsid "$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" --durations=10 tests/test_hccl_hosts.py \
  tests/hardening/test_soak.py > "$hosts_log" 2>&1 &
hosts_pid=$!
stop_beside() {
  local pid name log
  for pid in "$proofs_pid:kernel proofs and late stand-in:$proofs_log" "$hosts_pid:two-host tests and soak:$hosts_log"; do
    IFS=: read -r pid name log <<< "$pid"
    if kill -0 "$pid" 2>/dev/null; then
      kill -- "-$pid" 2>/dev/null || kill -- "$pid" 2>/dev/null || true
      echo "::: $name stopped early; their log so far ($log):"
      cat "$log"
    fi
  done
}
trap stop_beside EXIT
echo "::: beside the tests: kernel proofs then the late stand-in (pid $proofs_pid, log $proofs_log)," \
  "two-host tests and soak (pid $hosts_pid, log $hosts_log)"

echo "::: tests (cpu and emulated devices)"
coverage=()
# coverage costs about a third of the main run's time (the 20 minutes of CI on 2 cores do not hold it
# beside the conformance suite): measured when ACLNN_GPU_COVERAGE=1 and pytest-cov (the dev extra) is there
if [ "${ACLNN_GPU_COVERAGE:-0}" = 1 ] && "$PY" -c "import pytest_cov" 2>/dev/null; then
  export COVERAGE_FILE="${COVERAGE_FILE:-$(mktemp -d -t aclnn-cov.XXXXXX)/.coverage}"
  coverage=(--cov=aclnn_gpu --cov-report=)
fi
"$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" --durations=25 "${coverage[@]}" \
  --ignore=tests/test_hccl_hosts.py --ignore=tests/hardening/test_soak.py tests
if [ ${#coverage[@]} -gt 0 ]; then
  echo "::: test coverage of aclnn_gpu: $("$PY" -m coverage report --format=total)%"
fi

echo "::: API reference (Sphinx, warnings are errors)"
docs_out=$(mktemp -d -t aclnn-docs.XXXXXX)
"$PY" -m sphinx -W --keep-going -q -b html docs/sphinx "$docs_out"
echo "::: API reference built: $docs_out/index.html"

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

echo "::: GPU check rehearsal: scripts/gpu_check.sh on the emulated device, offline, from a fresh clone"
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
  PYTHON="$PY" bash scripts/gpu_check_rehearsal.sh
else   # a developer's machine without root: the same script with the network namespace left out is not the rehearsal
  echo "::: GPU check rehearsal skipped: it needs root for its network namespace (unshare -n); CI runs it"
fi

# while the second core still works on the kernel proofs and the late pass
echo "::: compile report with CUDA 12's NVRTC (the cuda12 extra)"
t0=$SECONDS
cu12_log=$(mktemp -t aclnn-cu12.XXXXXX)
if PYTHON="$PY" bash scripts/compile_cuda12.sh > "$cu12_log" 2>&1; then
  tail -n 1 "$cu12_log"
else
  cat "$cu12_log"; echo "::: compile report, CUDA 12: FAILED"; exit 1
fi
echo "::: compile report, CUDA 12: ok ($((SECONDS - t0)) s)"

echo "::: two-host tests and kernel proofs + late stand-in (started beside the tests): waiting for them"
t0=$SECONDS
hosts_status=0
wait "$hosts_pid" || hosts_status=$?
proofs_status=0
wait "$proofs_pid" || proofs_status=$?
trap - EXIT
echo "::: two-host tests and soak (tests/test_hccl_hosts.py, tests/hardening/test_soak.py):"
cat "$hosts_log"
cat "$proofs_log"
if [ "$hosts_status" != 0 ]; then
  echo "::: two-host tests or soak: FAILED (status $hosts_status; their log is above)"; exit 1
fi
if [ "$proofs_status" != 0 ]; then
  echo "::: kernel proofs or late stand-in: FAILED (status $proofs_status; their log is above)"; exit 1
fi
echo "::: two-host tests, kernel proofs and late stand-in: ok (waited $((SECONDS - t0)) s after the rest)"

echo "::: all checks passed in $((SECONDS - start)) s"
