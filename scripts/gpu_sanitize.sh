#!/usr/bin/env bash
# compute-sanitizer over one call of each operator on the GPU: the profiler's COVERAGE cases (they
# launch every kernel family of the ten operators once), in one process, under the tool named by
# GPU_SANITIZE_TOOL (memcheck by default; racecheck, initcheck, synccheck also work).
#
#   bash scripts/gpu_sanitize.sh [OUT_DIR]        # OUT_DIR/sanitizer_<tool>.log, exit 1 on any error
#
# Like scripts/gpu_check.sh it installs nothing (the working tree on PYTHONPATH, $PYTHON or python3).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
TOOL="${GPU_SANITIZE_TOOL:-memcheck}"
DIR="${1:-${OUT:-$(mktemp -d -t gpu_sanitize.XXXXXX)}}"
mkdir -p "$DIR"
LOG="$DIR/sanitizer_${TOOL}.log"
command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not installed" | tee "$LOG"; exit 1; }
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" ACLNN_GPU_DEVICE=cuda PYTHONUNBUFFERED=1
compute-sanitizer --tool "$TOOL" --error-exitcode 1 --print-limit 20 "$PY" - <<'EOF' 2>&1 | tee "$LOG"
import cupy
# CuPy's memory pool hands out slices of larger blocks: an overrun into the rest of a pooled block is
# invisible to memcheck, so every allocation is its own cudaMalloc for this run
cupy.cuda.set_allocator(None)
cupy.cuda.set_pinned_memory_allocator(None)
import numpy as np
from aclnn_gpu.profile import operators
for name, dims in operators.COVERAGE:
    op = operators.OPERATORS[name]
    d = dict(op.dims, **dims)
    call = op.setup(d, operators.DTYPES[op.dtype], np.random.default_rng(0))
    call()
    cupy.cuda.runtime.deviceSynchronize()
    print(f"sanitized {name} {dims or ''}", flush=True)
print(f"{len(operators.COVERAGE)} calls done")
EOF
rc=${PIPESTATUS[0]}
echo "compute-sanitizer --tool $TOOL: $([ "$rc" = 0 ] && echo 'no errors' || echo "FAILED (rc=$rc)") ($LOG)"
exit "$rc"
