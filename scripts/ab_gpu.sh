#!/usr/bin/env bash
# A/B of two trees in one call of the device tool: the working tree against an older
# one, benchmarked in alternating runs (old, new, old, new) so that drift between runs
# shows as a difference between the two runs of one side, then optional GPU tests.
#   here:  git archive -o .scratch/old.tar <old commit>    (.scratch/ is in .gitignore)
#   there: OLD_TAR=.scratch/old.tar OLDC=<old> NEWC=<new> BENCH="<normkit bench flags>" \
#          [TESTS="<pytest args>"] [ROUNDS=2] [BENCH_S=150] [TESTS_S=200] bash scripts/ab_gpu.sh
# (carry .scratch, and .whl for the peers' wheels.) The old tree is installed into
# /tmp/ab-old-site (first on PYTHONPATH for its runs), the new one into the image's
# site-packages, which the tests use. Each bench run gets its own kernel cache.
# $OUT: ab.log, ab-old-<round>.json, ab-new-<round>.json (at most 2 rounds x 2 + 2 logs
# fit the tool's 8 files), pytest.log. Compare: python3 scripts/ab_compare.py old*.json -- new*.json
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
: "${OLD_TAR:?OLD_TAR: a git archive of the old tree}" "${OLDC:?OLDC: the old commit}" "${NEWC:?NEWC: the new commit}"
: "${BENCH:?BENCH: normkit bench flags}"
exec > >(tee -a "$OUT/ab.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
rm -rf /tmp/ab-old /tmp/ab-old-site && mkdir -p /tmp/ab-old && tar -xf "$OLD_TAR" -C /tmp/ab-old
# shellcheck source=scripts/peer_wheels.sh
. scripts/peer_wheels.sh
install_peer_wheels python3 /tmp/ab-peers || echo "ab_gpu: installing the peer wheels failed"
(python3 -m pip install --no-build-isolation --no-deps . >/tmp/ab-build-new.log 2>&1
 echo "new build rc=$? at ${SECONDS}s") &
new_pid=$!
(cd /tmp/ab-old && python3 -m pip install --no-build-isolation --no-deps --upgrade --target /tmp/ab-old-site . \
   >/tmp/ab-build-old.log 2>&1
 echo "old build rc=$? at ${SECONDS}s") &
old_pid=$!
# Not a bare `wait`: it would also wait for the tee of the process substitution above, forever.
wait "$new_pid" "$old_pid"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for side in old new; do
    if [ "$side" = old ]; then path=/tmp/ab-old-site:/tmp/ab-peers; commit=$OLDC; else path=/tmp/ab-peers; commit=$NEWC; fi
    echo "=== round $round $side ($commit) at ${SECONDS}s"
    # shellcheck disable=SC2086  # BENCH is a list of flags
    (cd /tmp && NORMKIT_CACHE_DIR=/tmp/ab-cache-$side NORMKIT_COMMIT=$commit PYTHONPATH=$path \
      timeout -s INT "${BENCH_S:-150}" python3 -m normkit bench $BENCH --no-plot --out /tmp/ab-$side-$round \
      >/tmp/ab-$side-$round.log 2>&1)
    echo "rc=$?"; tail -n 1 "/tmp/ab-$side-$round.log"
    cp "/tmp/ab-$side-$round/bench.json" "$OUT/ab-$side-$round.json" 2>/dev/null || echo "no bench.json"
  done
done
if [ -n "${TESTS:-}" ]; then
  echo "=== pytest at ${SECONDS}s: $TESTS"
  # shellcheck disable=SC2086
  NORMKIT_TEST_REQUIRE_GPU=1 PYTHONPATH=/tmp/ab-peers timeout -s INT "${TESTS_S:-200}" python3 -m pytest -q -rs $TESTS \
    >"$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; tail -n 3 "$OUT/pytest.log"
fi
echo "=== end at ${SECONDS}s"
