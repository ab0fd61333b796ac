#!/usr/bin/env bash
# The GPU check: everything only a GPU can prove, in one command that fits the lent GPU machine
# (offline, Python 3.12 with CuPy, cuda-bindings, NCCL, cuBLAS, NVRTC, torch and pytest preinstalled;
# only the working tree travels; at most 8 files come back from $OUT; about 6 minutes).
#
#   bash scripts/gpu_check.sh                         # on a machine with an NVIDIA GPU
#   ACLNN_GPU_CHECK_DEVICE=emulated bash scripts/gpu_check.sh   # the same steps on the emulated device
#
# It installs nothing: the working tree runs from PYTHONPATH on $PYTHON (default python3). Every
# result goes to $OUT (default: a new temporary folder), written as each step completes, the speed
# questions first, then what an earlier run did not reach, so a run cut short still says the most:
#   env.txt      the machine, driver, packages, the commit
#   speed.json   python -m bench.gpu_speed: ConvTbc's launches one by one; ConvTbc forward and backward
#                against torch.conv_tbc and cuDNN (conv1d) at four shapes in fp32, fp16 and bf16; host
#                time per execute and per GetWorkspaceSize + execute of the ten operators against a
#                tiny PyTorch op; KL, CE and softmax at the mid and a >= 256 MB size as a fraction of
#                the measured copy ceiling (its short lines also go to summary.txt)
#   probe.json   scripts/gpu_probe.py: each driver-level capability in its own try (NVRTC compile of
#                every kernel, streams/events/copies/memset, pinned memory, capture and replay of a
#                kernel, a copy and a GEMM, cuBLAS fp32/TF32/fp16/bf16 against NumPy, a one-rank NCCL
#                all-reduce, one HCCL communicator)
#   steps.log    the output of every step (the speed tables, the demo, the probe, the fork and
#                torch.cuda.graph tests, the training-step benchmark, the test run, the bench)
#   junit.xml    the operator tests on the device (a subset that fits; --maxfail and a per-test
#                timeout; tests that need two GPUs, a computing fork child or the emulator skip
#                themselves with the reason); their output is the "tests" section of steps.log
#   bench.json   python -m bench --quick on the device against PyTorch on the same GPU (CUDA events)
#   ncu.json     Nsight Compute's DRAM bytes and sectors of one launch per kernel, where ncu works
#                (GPU_CHECK_NCU=0 skips it); pair it with the profiler's model on any machine with
#                python -m aclnn_gpu.profile.ncu_compare --from-ncu ncu.json
#   summary.txt  one line per step, the speed lines, and last a line to paste into a note
# Order: env, speed, probe, demo, the fork tests and torch.cuda.graph captures (CTC and the attention
# step, global and relaxed capture modes), the training-step benchmark (attention, CTC), the test run,
# the capture example, the bench, ncu. Knobs: GPU_CHECK_DEADLINE_S (default 345: every step's
# timeout is cut to what is left of it), GPU_CHECK_SPEED_SECTIONS (bench.gpu_speed's sections),
# GPU_CHECK_TESTS (the test files), GPU_CHECK_PYTEST_ARGS (added to pytest's), GPU_CHECK_FULL_BENCH=1,
# GPU_CHECK_NCU_CASES (operators of the traffic budget for ncu, comma-separated; default all).
# compute-sanitizer over one call of each operator is separate: scripts/gpu_sanitize.sh (or, at the end
# of this run, GPU_CHECK_SANITIZE=1).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY="${PYTHON:-python3}"
DEV="${ACLNN_GPU_CHECK_DEVICE:-cuda}"
OUT="${OUT:-${GPU_CHECK_OUT:-$(mktemp -d -t gpu_check.XXXXXX)}}"
mkdir -p "$OUT"
DEADLINE=$((SECONDS + ${GPU_CHECK_DEADLINE_S:-345}))
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1       # nothing is fetched, whatever a step tries
export CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-$(mktemp -d -t cupy_cache.XXXXXX)}"
export HYPOTHESIS_STORAGE_DIRECTORY="${HYPOTHESIS_STORAGE_DIRECTORY:-$(mktemp -d -t hypothesis.XXXXXX)}"   # not the working tree
SUMMARY="$OUT/summary.txt"
STEPS="$OUT/steps.log"
: > "$SUMMARY"; : > "$STEPS"
declare -a VERDICTS=()

left() { echo $((DEADLINE - SECONDS)); }
# run_step NAME SECONDS COMMAND...: the command under a timeout (its own or what is left, the smaller),
# output appended to steps.log and shown; its verdict and duration appended to summary.txt.
run_step() {
  local name=$1 limit=$2; shift 2
  local budget; budget=$(left)
  [ "$budget" -lt "$limit" ] && limit=$budget
  if [ "$limit" -lt 5 ]; then
    echo "$name: not run (the ${GPU_CHECK_DEADLINE_S:-345} s deadline is reached)" | tee -a "$SUMMARY"
    VERDICTS+=("$name=not-run"); return 0
  fi
  echo "::: $name (at most ${limit} s)" | tee -a "$STEPS"
  local t0=$SECONDS rc
  timeout -s INT -k 10 "$limit" "$@" 2>&1 | tee -a "$STEPS"
  rc=${PIPESTATUS[0]}
  local verdict=ok
  [ "$rc" = 0 ] || verdict="FAILED(rc=$rc)"
  [ "$rc" = 124 ] && verdict="TIMED-OUT(${limit}s)"
  echo "$name: $verdict in $((SECONDS - t0)) s" | tee -a "$SUMMARY"
  VERDICTS+=("$name=$verdict")
  return 0
}

# ---------------------------------------------------------------- 1. environment
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "device kind: $DEV; python: $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)')"
  echo "uname: $(uname -srm)"; echo "cpus: $(nproc)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
  command -v nvidia-smi >/dev/null && nvidia-smi | sed -n 's/.*\(CUDA Version: *[0-9.]*\).*/\1/p' | head -1
  echo "nvcc: $(command -v nvcc >/dev/null && nvcc --version | tail -1 || echo none)"
  echo "ncu: $(command -v ncu || echo none); compute-sanitizer: $(command -v compute-sanitizer || echo none)"
  echo "c++ compiler: $(command -v clang++ || command -v g++ || echo none)"
  "$PY" -m pip list 2>/dev/null | grep -i -E '^(cupy|cuda-|nvidia-(nccl|cublas|cuda-nvrtc|cuda-runtime)|numpy |ml.dtypes|torch |pytest|hypothesis|matplotlib|cffi)' || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# ---------------------------------------------------------------- 2. the speed questions
# ConvTbc per launch, against torch.conv_tbc and cuDNN; host time against a tiny PyTorch op; the
# memory-bound families against the copy ceiling (bench/gpu_speed.py; speed.json rewritten per row)
run_step speed 110 "$PY" -m bench.gpu_speed --device "$DEV" --json "$OUT/speed.json" --summary "$SUMMARY" \
  ${GPU_CHECK_SPEED_SECTIONS:+--sections "$GPU_CHECK_SPEED_SECTIONS"}

# one kernel launch and one GEMM through each path a frozen launch could take (CuPy, cuda-bindings,
# cuda.core and nvmath-python where importable), beside a tiny PyTorch CUDA op: the launch-path decision
if [ "$DEV" = cuda ]; then run_step launch_cost 20 "$PY" scripts/launch_cost.py --calls 200; fi

# ---------------------------------------------------------------- 3. the probe, then the demo
run_step probe 60 "$PY" scripts/gpu_probe.py "$OUT" --device "$DEV"
run_step demo 30 "$PY" -m aclnn_gpu --device "$DEV" --repeat 3

# ---------------------------------------------------------------- 4. what the last GPU run did not reach
# the fork tests (a computing fork child of a CUDA process is refused, a pool worker's AclnnError
# reaches the parent) and torch.cuda.graph of the attention training step and of CTC's mean, in the
# global and relaxed capture modes; the stream-ordering tests (a slow producer on a non-blocking CuPy stream
# before a functional call, a torch.cuda.graph capture on one thread while another calls operators, an ACL
# capture while PyTorch works on its default stream: tests/test_stream_order.py), and a graph's reset()
# releasing what its capture kept (the CUDA user object's destructor, polled with a timeout)
ACLNN_GPU_TEST_DEVICES="$DEV" run_step fork_and_graphs 60 "$PY" -m pytest -q -p no:cacheprovider -rfEs --tb=short \
  -o faulthandler_timeout=40 tests/test_fork.py tests/test_stream_order.py \
  "tests/test_torch_stream.py::test_cuda_graph_capture_of_a_training_step" \
  "tests/test_torch_stream.py::test_cuda_graph_capture_of_ctc_mean" \
  "tests/test_torch_stream.py::test_cuda_graph_reset_releases_what_its_capture_kept"
# the training-step benchmark: aclnn_gpu.torch on PyTorch's stream against PyTorch's own ops, eager and under
# torch.compile(fullgraph=True) (aot_eager: no Triton build inside the deadline), steps/s and tokens/s from
# CUDA events in the same run; elsewhere cpu tensors through functional on the check's device
train_args=(--backend aot_eager)
[ "$DEV" = cuda ] && train_args+=(--device cuda --steps 20 --warmup 2) || train_args+=(--steps 3 --batch 4)
train_limit=30
[ "$DEV" = cuda ] || train_limit=60   # the emulated device on a shared CPU runs the step several times slower
for model in attention ctc; do
  ACLNN_GPU_DEVICE="$DEV" run_step "train_$model" "$train_limit" "$PY" examples/compile_training_step.py --model "$model" "${train_args[@]}"
done

# ---------------------------------------------------------------- 5. the operator tests on the device
DEFAULT_TESTS="tests/test_kl_div.py tests/test_cross_entropy.py tests/test_scaled_masked_softmax.py
  tests/test_ctc_loss.py tests/test_ctc_loss_split.py::test_split_recursions_stress_on_cuda tests/test_conv_tbc.py tests/test_cross_entropy_zloss.py tests/test_capture.py tests/test_frozen_launch.py
  tests/test_devices.py tests/test_runtime.py tests/test_functional.py tests/test_torch_autograd.py
  tests/test_torch_rules.py
  tests/test_hccl.py tests/test_examples.py tests/test_functional_cache.py
  tests/test_workspace_builder.py tests/test_torch_stream.py tests/hardening tests/kernels/test_gemm_math_mode.py tests/conformance"
workers=()
if [ "$DEV" = cuda ] && "$PY" -c "import xdist" 2>/dev/null; then   # one CUDA context per worker: ample on one GPU
  workers=(-n "${GPU_CHECK_WORKERS:-8}")
fi
# shellcheck disable=SC2086
ACLNN_GPU_TEST_DEVICES="$DEV" run_step tests 190 "$PY" -m pytest -q -p no:cacheprovider -m "not sanitizer and not slow" \
  "${workers[@]}" --maxfail="${GPU_CHECK_MAXFAIL:-40}" -o faulthandler_timeout=80 \
  $("$PY" -c "import pytest_timeout" 2>/dev/null && echo "--timeout=80") \
  -rfEs --tb=short --junitxml="$OUT/junit.xml" ${GPU_CHECK_TESTS:-$DEFAULT_TESTS} ${GPU_CHECK_PYTEST_ARGS:-}

# ---------------------------------------------------------------- 6. capture example, bench, ncu
ACLNN_GPU_DEVICE="$DEV" run_step capture_example 30 "$PY" examples/capture_training_step.py --steps 20
bench_dir=$(mktemp -d -t gpu_bench.XXXXXX)
run_step bench 60 "$PY" -m bench --device "$DEV" $([ "${GPU_CHECK_FULL_BENCH:-0}" = 1 ] || echo --quick) --out "$bench_dir"
[ -f "$bench_dir/bench.json" ] && cp "$bench_dir/bench.json" "$OUT/bench.json"
if [ "$DEV" = cuda ] && [ "${GPU_CHECK_NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  run_step ncu 60 "$PY" -m aclnn_gpu.profile.ncu_compare --out "$(mktemp -d)" --ncu-only "$OUT/ncu.json" \
    ${GPU_CHECK_NCU_CASES:+--cases "$GPU_CHECK_NCU_CASES"}
else
  echo "ncu: skipped (device $DEV, GPU_CHECK_NCU=${GPU_CHECK_NCU:-1}, ncu $(command -v ncu || echo 'not installed'))" | tee -a "$SUMMARY"
fi

if [ "$DEV" = cuda ] && [ "${GPU_CHECK_SANITIZE:-0}" = 1 ]; then   # its log is in steps.log (8 files come back)
  run_step sanitize 120 bash scripts/gpu_sanitize.sh "$(mktemp -d)"
fi

# ---------------------------------------------------------------- 7. the line for a note
tests_line=$("$PY" - "$OUT/junit.xml" <<'EOF' 2>/dev/null || echo "tests: no junit.xml"
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s.find("testsuite")
n, f, e, k = (int(s.get(x, 0)) for x in ("tests", "failures", "errors", "skipped"))
print(f"tests: {n - f - e - k} passed, {f + e} failed, {k} skipped")
EOF
)
probe_line=$("$PY" - "$OUT/probe.json" <<'EOF' 2>/dev/null || echo "probe: no probe.json"
import json, sys
d = json.load(open(sys.argv[1]))
ok = [s["step"] for s in d["steps"] if s["status"] == "ok"]
bad = [s["step"] for s in d["steps"] if s["status"] == "FAILED"]
env = next((s.get("result") or {} for s in d["steps"] if s["step"] == "environment"), {})
print(f"probe: {len(ok)}/{len(d['steps'])} ok" + (f" (FAILED: {', '.join(bad)})" if bad else "")
      + (f"; {env.get('name')}, CuPy {env.get('cupy')}, CUDA runtime {env.get('cuda_runtime')}" if env.get("name") else ""))
EOF
)
status=OK
for v in "${VERDICTS[@]}"; do case "$v" in *=ok) ;; *) status=FAILED ;; esac; done
line="gpu_check on $DEV, $(date -u +%F), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null): $status in $((SECONDS - DEADLINE + ${GPU_CHECK_DEADLINE_S:-345})) s; $probe_line; $tests_line; steps: ${VERDICTS[*]}"
echo "$line" | tee -a "$SUMMARY"
echo "::: artifacts: $OUT"
[ "$status" = OK ]

# ================================================================ cold start: the shipped kernels
# (kernels/shipped.py) The first call of every operator on a cold CuPy cache (CUPY_CACHE_DIR, and on
# cuda the cubin unpack cache ACLNN_GPU_CACHE, empty temporary folders), with the shipped kernels and
# without them (ACLNN_GPU_SHIPPED_KERNELS=0: every kernel file compiled by NVRTC at first use), each
# against the operator's tenth call: scripts/cold_start.py, its JSON line and a table in steps.log, the
# table in summary.txt too (no new file: 8 come back). Runs after the summary line, on its own time
# (GPU_CHECK_COLDSTART_S per run, default 150; GPU_CHECK_COLDSTART=0 skips it); the script's exit
# status stays the summary's unless this fails.
check_status=$?
if [ "${GPU_CHECK_COLDSTART:-1}" = 1 ]; then
  cold_rc=0
  cold_json=$(mktemp -t coldstart.XXXXXX)
  for shipped_kernels in 1 0; do
    cold_tmp=$(mktemp -d -t coldstart.XXXXXX)
    cold_env=(CUPY_CACHE_DIR="$cold_tmp/cupy" ACLNN_GPU_SHIPPED_KERNELS=$shipped_kernels)
    [ "$DEV" = cuda ] && cold_env+=(ACLNN_GPU_CACHE="$cold_tmp/aclnn_gpu")   # (emulated: its kernel builds stay)
    echo "::: coldstart shipped=$shipped_kernels" | tee -a "$STEPS"
    env "${cold_env[@]}" timeout -s INT -k 10 "${GPU_CHECK_COLDSTART_S:-150}" "$PY" scripts/cold_start.py \
      --device "$DEV" >> "$cold_json" 2>> "$STEPS" || cold_rc=1
    rm -rf "$cold_tmp"
  done
  sed 's/^/coldstart-json: /' "$cold_json" >> "$STEPS"
  "$PY" - "$cold_json" <<'PYEOF' 2>&1 | tee -a "$STEPS" "$SUMMARY"
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
for run in runs:
    label = "shipped kernels" if run["shipped"] else "NVRTC at first use"
    print(f"coldstart ({label}, {run['device']}): first calls {run['total_first_s']} s in all, "
          f"{run['nvrtc_compiles']} NVRTC compiles")
    for r in run["operators"]:
        print(f"  {r['operator']:34} first {r['first_ms']:9.2f} ms  tenth {r['tenth_ms']:7.2f} ms  "
              f"x{r['ratio']:<7} {' '.join(r['first_call_kernels'])}")
PYEOF
  rm -f "$cold_json"
  echo "coldstart: $([ $cold_rc = 0 ] && echo ok || echo FAILED) (steps.log)" | tee -a "$SUMMARY"
  [ $cold_rc = 0 ] || check_status=1
fi
exit $check_status
