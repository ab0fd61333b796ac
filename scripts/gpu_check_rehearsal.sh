#!/usr/bin/env bash
# A rehearsal of scripts/gpu_check.sh in the lent GPU machine's conditions, on the emulated device (CI
# runs it; no GPU needed): a fresh clone of the committed tree, an interpreter that has every package
# but not the project (no install of it, no editable finder), pip pointed at no index, no network at
# all (a network namespace with only loopback up: `unshare -n`, root needed), results only in $OUT.
# Fails when the check fails, when it wrote anything outside $OUT's 8 files, or when the project was
# importable without the check's own PYTHONPATH.
#
#   bash scripts/gpu_check_rehearsal.sh           # PYTHON: the interpreter whose packages are lent
# GPU_CHECK_TESTS / GPU_CHECK_PYTEST_ARGS pass through (default: a short subset, the same script).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY="${PYTHON:-python3}"
WORK=$(mktemp -d -t gpu_rehearsal.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# the interpreter: a venv whose one .pth names the lent interpreter's site-packages as a plain path, so
# its packages import but the .pth files there (the editable install's finder among them) never run
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$PY" -m venv --without-pip "$WORK/venv"
"$WORK/venv/bin/python" -c "import sysconfig, sys; open(sysconfig.get_paths()['purelib'] + '/lent.pth', 'w').write(sys.argv[1] + '\n')" "$SITE"
LENT="$WORK/venv/bin/python"
if (cd "$WORK" && "$LENT" -c "import aclnn_gpu" 2>/dev/null); then
  echo "rehearsal: the lent interpreter imports aclnn_gpu without the check's PYTHONPATH"; exit 1
fi
"$LENT" -c "import numpy, torch, pytest" || { echo "rehearsal: the lent interpreter misses a package"; exit 1; }

git clone -q --no-hardlinks "$ROOT" "$WORK/repo"
mkdir "$WORK/out"
command -v unshare >/dev/null || { echo "rehearsal: unshare (util-linux) is needed"; exit 1; }
set +e
unshare -n env -u PYTHONPATH HOME="$WORK/home" OUT="$WORK/out" PYTHON="$LENT" ACLNN_GPU_CHECK_DEVICE=emulated \
  PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_NO_INDEX=1 \
  GPU_CHECK_TESTS="${GPU_CHECK_TESTS:-tests/test_kl_div.py tests/test_capture.py tests/test_frozen_launch.py}" \
  GPU_CHECK_PYTEST_ARGS="${GPU_CHECK_PYTEST_ARGS:-}" \
  bash -c 'ip link set lo up && cd "$1" && bash scripts/gpu_check.sh' _ "$WORK/repo"
rc=$?
set -e
echo "::: rehearsal artifacts: $(cd "$WORK/out" && ls | tr '\n' ' ')"
n=$(find "$WORK/out" -type f | wc -l)
[ "$n" -le 8 ] || { echo "rehearsal: $n files in OUT (the device tool returns 8)"; rc=1; }
for f in env.txt speed.json probe.json summary.txt junit.xml steps.log; do
  [ -s "$WORK/out/$f" ] || { echo "rehearsal: OUT/$f is missing or empty"; rc=1; }
done
grep -q '^speed: ConvTbc backward' "$WORK/out/summary.txt" || { echo "rehearsal: summary.txt has no speed lines"; rc=1; }
if [ -n "$(git -C "$WORK/repo" status --porcelain --ignored | grep -v -E '__pycache__|\.pyc$' || true)" ]; then
  echo "rehearsal: the check wrote into the working tree:"; git -C "$WORK/repo" status --porcelain --ignored; rc=1
fi
tail -1 "$WORK/out/summary.txt" 2>/dev/null || true
[ "$rc" = 0 ] && echo "::: GPU check rehearsal (emulated, offline): ok" || echo "::: GPU check rehearsal: FAILED"
exit "$rc"
