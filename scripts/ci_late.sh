#!/usr/bin/env bash
# ci_late.sh -- the whole emulated suite again over the late stand-in (ACLNN_GPU_EMU_LATE=1,
# emulator/fakecupy/): every stream's work starts late, pinned sources are read when the copy runs,
# freed memory comes back poisoned in CuPy's pool order, captures honour their modes. An ordering
# defect the prompt stand-in hides fails here. Run by scripts/test.sh beside the main tests.
# The late stand-in's time is mostly waiting (its delays), not computing, so the suite runs as
# ACLNN_GPU_LATE_SHARDS (default 4) pytest processes over disjoint sets of test files, whose waits
# overlap on one core; each shard's log is printed when it ends.
# Environment: PYTHON (default: python), ACLNN_GPU_EMU_LATE_SEED (the stand-in's delays; derived from
# ACLNN_GPU_TEST_SEED when unset, and printed so a red run replays).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export ACLNN_GPU_EMU_LATE=1
export ACLNN_GPU_EMU_LATE_SEED="${ACLNN_GPU_EMU_LATE_SEED:-${ACLNN_GPU_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}}"
shards="${ACLNN_GPU_LATE_SHARDS:-4}"
echo "::: late stand-in: the emulated suite with ACLNN_GPU_EMU_LATE=1 ACLNN_GPU_EMU_LATE_SEED=$ACLNN_GPU_EMU_LATE_SEED" \
  "ACLNN_GPU_TEST_SEED=${ACLNN_GPU_TEST_SEED:-} in $shards shards (replay: the same variables and the test id)"
t0=$SECONDS
# Every test file of the emulated suite but those with nothing stream-ordered to show: the kernels' unit
# tests and sanitizers (they run the emulator directly), the NumPy references and the GPU models (no
# device), the layout, seeding and docs checks, the install flow, the examples, the host-call
# benchmark; and the two-host tests and the soak (the main run's neighbour runs them). Dealt out
# largest first to the shard with the fewest bytes so far. The instruction-count ceilings (callgrind)
# are left out too: under the stand-in's delays they count its waiting.
mapfile -t files < <(find tests -name 'test_*.py' -not -path 'tests/kernels/*' -not -name '*_reference.py' \
  -not -name test_reference_parallel.py -not -name test_latency_model.py -not -name test_profile_gemm_model.py \
  -not -name test_gpu_model_bench.py -not -name test_launch_fill.py -not -name test_import_layers.py \
  -not -name test_seeding.py -not -name test_family_samples.py \
  -not -name test_docs.py -not -name test_hccl_hosts.py -not -name test_install.py -not -name test_examples.py \
  -not -name test_host_overhead_bench.py -not -name test_soak.py -printf '%s %p\n' | sort -rn | cut -d' ' -f2)
declare -a sizes groups
for ((i = 0; i < shards; i++)); do sizes[i]=0; groups[i]=""; done
for f in "${files[@]}"; do
  best=0
  for ((i = 1; i < shards; i++)); do (( sizes[i] < sizes[best] )) && best=$i; done
  sizes[best]=$(( sizes[best] + $(stat -c %s "$f") ))
  groups[best]+=" $f"
done
logs=() pids=()
for ((i = 0; i < shards; i++)); do
  log=$(mktemp -t aclnn-late.XXXXXX)
  logs+=("$log")
  # shellcheck disable=SC2086  # the group is a list of paths without spaces
  # (bounded: a shard that hangs is stopped after ACLNN_GPU_LATE_SHARD_S, default 900 s, and fails the pass)
  ACLNN_GPU_TEST_DEVICES=emulated timeout --kill-after=10 "${ACLNN_GPU_LATE_SHARD_S:-900}" "$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer" --durations=5 \
    -k "not instruction_counts" \
    ${groups[i]} > "$log" 2>&1 &
  pids+=($!)
done
status=0
for ((i = 0; i < shards; i++)); do
  s=0
  wait "${pids[i]}" || s=$?
  [ "$s" = 124 ] && echo "::: late stand-in shard $((i + 1))/$shards: stopped after ${ACLNN_GPU_LATE_SHARD_S:-900} s"
  echo "::: late stand-in shard $((i + 1))/$shards (status $s):${groups[i]}"
  cat "${logs[i]}"
  rm -f "${logs[i]}"
  [ "$s" = 0 ] || status=$s
done
[ "$status" = 0 ] || { echo "::: late stand-in: FAILED ($((SECONDS - t0)) s)"; exit "$status"; }
echo "::: late stand-in: ok ($((SECONDS - t0)) s)"
