#!/usr/bin/env bash
# Launch plans the heuristics do not pick, timed on the GPU machine in one call of
# the device tool: each line of a cases file runs `normkit bench` in its own process
# with NORMKIT_FORWARD_PLAN (or NORMKIT_BACKWARD_PLAN) set (the README's environment table), spilling kernels
# refused (NORMKIT_ASSERT_NO_SPILLS=1: such a row is reported failed, not timed), each
# row checked against the fp32 reference by the benchmark before it is timed.
#   usage: NORMKIT_COMMIT=<hash> [ROUNDS=2] [CASE_S=60] bash scripts/plan_cases.sh scripts/plan_cases/<file>.txt
#   PLAN_CASES_SKIP_BUILD=1: no `pip install .` first (a script that built normkit already
#   in the same call, e.g. scripts/bench_gpu.sh before it)
# Cases file: one case a line, `label ; override ; normkit bench flags`, where override
# is a NORMKIT_FORWARD_PLAN value, `bwd:` and a NORMKIT_BACKWARD_PLAN value, `env:NAME=VALUE`
# (a NORMKIT_ switch of the README's table set for the case, e.g. env:NORMKIT_GROUP_ROWS=0;
# a ~ in its value stands for a space: env:NORMKIT_NVRTC_FLAGS=-DA=1~-DB=2),
# several of them separated by spaces (`env:NORMKIT_NVRTC_FLAGS=-DX row=bulk`), or `-` for
# the plan's own; `#` starts a comment. The whole list runs ROUNDS times, so each
# case's runs are spread over the call.
# $OUT: plan_cases.jsonl (one line per case, round and normkit row: label, override,
# round, op, direction, dtype, residual, M, N, status, ratio_to_copy, us, reason),
# plan_cases.log, and a summary at the end of the log: the mean ratio per case and row.
# Decode shapes (--decode-shapes) come as rows of kind "latency" whose ratio_to_copy is
# the copy's graph-replay time over normkit's (us: normkit's time per call).
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.." || exit 2
cases=$(realpath "${1:?usage: bash scripts/plan_cases.sh <cases file>}")
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/plan_cases.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if [ "${PLAN_CASES_SKIP_BUILD:-0}" = 1 ]; then
  echo "build skipped (PLAN_CASES_SKIP_BUILD=1): the normkit python3 imports"
else
  python3 -m pip install --no-build-isolation --no-deps . >/tmp/plan-cases-build.log 2>&1 \
    || { tail -n 30 /tmp/plan-cases-build.log; exit 2; }
  echo "build done at ${SECONDS}s"
fi
: >"$OUT/plan_cases.jsonl"
for round in $(seq 1 "${ROUNDS:-2}"); do
  while IFS=';' read -r label override flags; do
    # Trim without xargs, which stops at the apostrophes of comment lines.
    trim() { local v=$1; v=${v#"${v%%[![:space:]]*}"}; echo "${v%"${v##*[![:space:]]}"}"; }
    label=$(trim "$label"); override=$(trim "${override:-}")
    [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
    [ "$override" = "-" ] && override=""
    fwd_plan="" bwd_plan="" switch=()
    for part in $override; do  # space-separated: a switch and a plan may go together
      if [ "${part#bwd:}" != "$part" ]; then bwd_plan=${part#bwd:}
      elif [ "${part#env:NORMKIT_}" != "$part" ]; then part=${part#env:}; switch+=("${part//\~/ }")
      else fwd_plan=$part; fi
    done
    echo "=== round $round: $label (${override:-own plan}) at ${SECONDS}s"
    rm -rf /tmp/plan-case
    # shellcheck disable=SC2086  # flags is a list
    (cd /tmp && env "${switch[@]}" NORMKIT_FORWARD_PLAN="$fwd_plan" NORMKIT_BACKWARD_PLAN="$bwd_plan" NORMKIT_ASSERT_NO_SPILLS=1 \
      NORMKIT_CACHE_DIR=/tmp/plan-cases-cache \
      timeout -s INT "${CASE_S:-60}" python3 -m normkit bench $flags --peers none --host-calls 0 --no-plot \
      --out /tmp/plan-case >/tmp/plan-case.log 2>&1)
    echo "rc=$?"; tail -n 1 /tmp/plan-case.log
    python3 - "$label" "$override" "$round" "$OUT/plan_cases.jsonl" <<'PY'
import json, sys
label, override, rnd, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
try:
    doc = json.load(open("/tmp/plan-case/bench.json"))
except (OSError, ValueError) as e:
    doc = {"rows": []}
    print(f"no bench.json: {e}")
with open(out, "a") as f:
    for r in doc["rows"]:
        if r["impl"] != "normkit":
            continue
        f.write(json.dumps({"label": label, "override": override, "round": rnd, "op": r["op"],
                            "direction": r["direction"], "dtype": r["dtype"], "residual": r["residual"],
                            "M": r["M"], "N": r["N"], "status": r["status"], "ratio_to_copy": r.get("ratio_to_copy"),
                            "us": r.get("us"), "reason": r.get("reason")}) + "\n")
    # Decode shapes (--decode-shapes): graph-replay time; ratio_to_copy is the copy's time over it.
    for r in doc.get("latency", []):
        us = r["us"].get("normkit")
        f.write(json.dumps({"label": label, "override": override, "round": rnd, "op": r["op"],
                            "direction": r["direction"], "dtype": r["dtype"], "residual": r["residual"],
                            "M": r["M"], "N": r["N"], "status": "ok" if us else "failed",
                            "ratio_to_copy": r["copy_us"] / us if us else None, "us": us,
                            "reason": None, "kind": "latency"}) + "\n")
PY
  done <"$cases"
done
echo "=== summary (mean ratio to copy per case and row; runs in brackets)"
python3 - "$OUT/plan_cases.jsonl" <<'PY'
import collections, json, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    shape = f"M={r['M']},N={r['N']}" if r.get("kind") == "latency" else f"{r['N']:>6}"
    key = (r["op"], r["direction"], r["dtype"], "res" if r["residual"] else "-", shape, r["label"], r["override"] or "-")
    runs[key].append(r["ratio_to_copy"] if r["status"] == "ok" else None)
for key in sorted(runs):
    vals = [v for v in runs[key] if v is not None]
    mean = f"{sum(vals) / len(vals):.3f}" if vals else "failed"
    print(f"{'/'.join(map(str, key[:5])):36s} {key[5]:28s} {key[6]:22s} {mean} {runs[key]}")
PY
echo "=== end at ${SECONDS}s"
