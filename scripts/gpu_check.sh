#!/usr/bin/env bash
# One call on the GPU machine: build normkit with the image's python, run every C++
# and Python test (GPU tests included) and the runtime load-time measurement.
# Logs go to $OUT (the device tool brings them back); a short summary is printed last.
#   usage: bash scripts/gpu_check.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
summary=()
status=0

step() {
  local name=$1
  shift
  local start=$SECONDS
  echo "=== $name: $*"
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 15 "$OUT/$name.log"
  summary+=("$(printf '%-12s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
  [ "$rc" -eq 0 ] || status=1
}

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  echo "commit: ${NORMKIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -n 2
  $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
step install "$PY" -m pip install --no-build-isolation --no-deps -v .
step cpp_build bash -c "cmake -S . -B build/gpu ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DNORMKIT_BUILD_TESTS=ON && cmake --build build/gpu -j\$(nproc)"
step ctest ctest --test-dir build/gpu --output-on-failure -j8
step pytest "$PY" -m pytest -v -rs tests/python "$@"
step load_times "$PY" scripts/runtime_load_times.py --repeats 5 --json "$OUT/load_times.json"

echo "=== summary"
printf '%s\n' "${summary[@]}"
exit $status
