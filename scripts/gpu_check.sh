#!/usr/bin/env bash
# One call on the GPU machine: build normkit with the image's python, run every C++
# and Python test (GPU tests included: the RMSNorm grid and feature suites too) and
# the runtime load-time measurement.
#   usage: bash scripts/gpu_check.sh [pytest args...]
#
# What lands in $OUT (the device tool brings back at most 8 files, so logs are merged):
#   gpu_summary.txt  environment, each step's rc and time, pytest counts per test file,
#                    wall time; rewritten after every step, so a cut-short run still has one
#   build.log        pip install + CMake build
#   ctest.log  pytest.log  load_times.log  load_times.json
#   eager.log  eager-comparison.json/.md (GPU_CHECK_EAGER=1; not with the load times: 8-file limit)
#   pytest-gpu.xml   JUnit XML of the pytest step
# Keep a run with: python3 scripts/record_gpu_run.py record <folder with those files>
#
# Environment: GPU_CHECK_BUDGET_S (below), GPU_CHECK_EAGER=1 (above), GPU_CHECK_SKIP_LOAD_TIMES=1,
# GPU_CHECK_SWEEPS=1 (also run the CPU-only spill sweeps RmsNormKernelSweep.*, which CI runs;
# off by default).
#
# Time: the device tool stops a command at 600 s. The whole check aims to end by
# GPU_CHECK_BUDGET_S (default 570): each step is stopped (rc 124) where it would run
# into the time the later steps need; pytest is stopped with SIGINT, so it still
# writes its XML and the tests that ran are counted. ctest keeps 330 s back for
# pytest, so a budget below ~450 s leaves it only its 30 s minimum (ctest itself
# takes ~25 s on the H200 machine, after a ~55 s build).
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
BUDGET=${GPU_CHECK_BUDGET_S:-570}
SUMMARY=$OUT/gpu_summary.txt
summary=()
status=0

nvsmi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -n 1)
IFS=',' read -r gpu_name gpu_driver gpu_mem _ <<<"$nvsmi"
trim() { local v=${1:-unknown}; v=${v#"${v%%[![:space:]]*}"}; echo "${v%"${v##*[![:space:]]}"}"; }
envinfo=$(
  echo "date: $(date -u +"%Y-%m-%dT%H:%M:%SZ")"
  echo "commit: ${NORMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "gpu: $(trim "${gpu_name:-}")"
  echo "driver: $(trim "${gpu_driver:-}")"
  echo "gpu_memory: $(trim "${gpu_mem:-}")"
  echo "nvidia_smi: $nvsmi (name, driver, memory, SM clock, memory clock)"
  echo "nvcc: $(nvcc --version 2>&1 | grep -m 1 -o "release .*" || echo unknown)"
  $PY -c "import sys, torch; print('python:', sys.version.split()[0]); print('torch:', torch.__version__, '(cuda', str(torch.version.cuda) + ')')" 2>&1
  echo "command: NORMKIT_COMMIT=${NORMKIT_COMMIT:-?} bash scripts/gpu_check.sh $*"
)
echo "$envinfo"

write_summary() {  # write_summary yes|no: whether the check got to its end
  {
    echo "$envinfo"
    printf '%s\n' "${summary[@]}"
    if [ -s "$OUT/pytest-gpu.xml" ]; then
      "$PY" scripts/record_gpu_run.py counts "$OUT/pytest-gpu.xml" 2>&1
    fi
    echo "wall_s: $SECONDS"
    echo "finished: $1"
    echo "status: $([ "$status" -eq 0 ] && echo PASS || echo FAIL)"
  } >"$SUMMARY"
}

# step NAME LOG RESERVE CMD...: runs CMD with its output appended to $OUT/LOG.log,
# stopped when less than RESERVE seconds of the budget would be left for later steps.
step() {
  local name=$1 log=$2 reserve=$3
  shift 3
  local start=$SECONDS limit=$((BUDGET - SECONDS - reserve))
  [ "$limit" -ge 30 ] || limit=30
  echo "=== $name (limit ${limit}s): $*" | tee -a "$OUT/$log.log"
  timeout -s INT -k 20 "$limit" "$@" >>"$OUT/$log.log" 2>&1
  local rc=$?
  tail -n 15 "$OUT/$log.log"
  summary+=("$(printf 'step: %-11s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
  [ "$rc" -eq 0 ] || status=1
  write_summary no
}
write_summary no

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# Reserves (seconds of the budget a step leaves to the ones after it): stopping a
# build early would only fail every later step, so builds keep 60 s back; ctest
# yields to the Python suites, which need about 5 min (the RMSNorm grid JIT-compiles
# ~200 kernels and runs ~300 tests) plus ~1 min for the load times.
step install build 60 "$PY" -m pip install --no-build-isolation --no-deps -v .
step cpp_build build 60 bash -c "cmake -S . -B build/gpu ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DNORMKIT_BUILD_TESTS=ON && cmake --build build/gpu -j\$(nproc)"
# The spill sweeps (RmsNormKernelSweep.*) compile kernels for fixed targets without a
# GPU: CI runs them, and here they took 158 s of the budget on a branch with many new
# kernels (619d2e2), starving pytest. GPU_CHECK_SWEEPS=1 runs them here too.
sweeps=(-E 'RmsNormKernelSweep\.')
[ "${GPU_CHECK_SWEEPS:-0}" = 1 ] && sweeps=()
step ctest ctest 330 env NORMKIT_ASSERT_NO_SPILLS=1 ctest --test-dir build/gpu --output-on-failure -j8 "${sweeps[@]}"
# ctest keeps the example's output only on failure, and the example passes without
# a GPU too (it skips its GPU half): here its GPU half must have run and agreed.
# `tee -a`: stderr is ctest.log here, and a plain tee truncated it (the ctest
# output of the runs up to 50f6905 was lost that way).
step example ctest 320 bash -c 'build/gpu/rmsnorm_example | tee -a /dev/stderr | grep -q "GPU and CPU results agree"'
# NORMKIT_TEST_REQUIRE_GPU / _NVRTC: on this machine a missing GPU or NVRTC is a
# failure, not a skip, so the GPU suites cannot pass by not running.
# With GPU_CHECK_EAGER=1 pytest leaves ~150 s for the eager comparison.
pytest_reserve=40
[ "${GPU_CHECK_EAGER:-0}" = 1 ] && pytest_reserve=150
step pytest pytest "$pytest_reserve" env NORMKIT_TEST_REQUIRE_GPU=1 NORMKIT_TEST_REQUIRE_NVRTC=1 NORMKIT_ASSERT_NO_SPILLS=1 \
  "$PY" -m pytest -v -rs --durations=30 --junitxml="$OUT/pytest-gpu.xml" tests/python "$@"
# GPU_CHECK_SKIP_LOAD_TIMES=1 leaves out the runtime timing step (its record is in
# docs/perf/runtime-h200.md): saves ~50 s and two of the eight files that come back.
if [ "${GPU_CHECK_SKIP_LOAD_TIMES:-0}" != 1 ]; then
  step load_times load_times 0 "$PY" scripts/runtime_load_times.py --repeats 5 --json "$OUT/load_times.json"
fi
# GPU_CHECK_EAGER=1 adds normkit vs eager PyTorch on the test grid's shapes
# (scripts/eager_comparison.py, ~90 s; eager-comparison.json/.md in $OUT). With the
# load times left out the check then returns 8 files, the tool's limit.
if [ "${GPU_CHECK_EAGER:-0}" = 1 ]; then
  step eager eager 0 env NORMKIT_COMMIT="${NORMKIT_COMMIT:-unknown}" "$PY" scripts/eager_comparison.py --out "$OUT"
fi

write_summary yes
echo "=== summary ($OUT/gpu_summary.txt)"
cat "$SUMMARY"
exit $status
