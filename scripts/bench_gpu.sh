#!/usr/bin/env bash
# `normkit bench` on the GPU machine, in one call of the device tool.
#   usage: NORMKIT_COMMIT=<hash> bash scripts/bench_gpu.sh [normkit bench flags...]
#   e.g.   NORMKIT_COMMIT=$(git rev-parse HEAD) bash scripts/bench_gpu.sh --quick
#
# 1. builds and installs normkit with the image's python (no network there);
# 2. installs the peers' wheels when a .whl/ folder was carried with the tree (quack,
#    Liger-Kernel, FlashInfer and what they need), into /tmp/site, first on PYTHONPATH;
# 3. runs `python -m normkit bench <flags> --out $OUT`.
# What lands in $OUT (the device tool brings back at most 8 files): bench.json,
# bench.png (bench-<op>.png per other --op: at most four plots) and bench.log (build,
# wheel install and the benchmark's output).
#
# Time: the device tool stops a command at 600 s. The benchmark is sent SIGINT when
# NORMKIT_BENCH_BUDGET_S (default 570) runs out; bench.json is rewritten after every shape, so
# what was measured comes back (meta.complete false). A full sweep of both dtypes with
# every peer does not fit: split it with --dtypes / --directions / --peers.
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
BUDGET=${NORMKIT_BENCH_BUDGET_S:-570}
LOG=$OUT/bench.log
export PYTHONUNBUFFERED=1
{
  echo "date: $(date -u +"%Y-%m-%dT%H:%M:%SZ")"
  echo "commit: ${NORMKIT_COMMIT:-unknown (set NORMKIT_COMMIT)}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -n 1)"
  echo "command: NORMKIT_COMMIT=${NORMKIT_COMMIT:-?} bash scripts/bench_gpu.sh $*"
} | tee "$LOG"

echo "=== pip install normkit" | tee -a "$LOG"
if ! "$PY" -m pip install --no-build-isolation --no-deps -v . >>"$LOG" 2>&1; then
  tail -n 40 "$LOG"
  echo "bench_gpu: building normkit failed (see bench.log)" | tee -a "$LOG"
  exit 2
fi

# shellcheck source=scripts/peer_wheels.sh
. scripts/peer_wheels.sh
if install_peer_wheels "$PY" /tmp/site >>"$LOG" 2>&1; then
  [ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  echo "bench_gpu: installing the wheels failed; the peers they hold will be reported as not installed" \
    | tee -a "$LOG"
fi

limit=$((BUDGET - SECONDS))
[ "$limit" -ge 30 ] || limit=30
echo "=== normkit bench (limit ${limit}s): $* --out $OUT" | tee -a "$LOG"
timeout -s INT -k 20 "$limit" "$PY" -m normkit bench "$@" --out "$OUT" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
echo "=== rc=$rc wall_s=$SECONDS" | tee -a "$LOG"
exit "$rc"
