#!/usr/bin/env bash
# Issue 6 in one call on a machine with two GPUs (e.g. the nvidia-h200-x2 kind):
# the two-GPU pytest module, then train_ddp.py under torchrun for
#   mode in ddp fsdp2 x compile in off on x norm in torch normkit
# and compare_losses.py for each (mode, compile) pair, then plot_losses.py.
#   usage: bash scripts/multigpu/run_all.sh        (results in $OUT, default a temp dir)
#
# Assumes normkit is installed for $PYTHON (default python3), e.g. by
#   python3 -m pip install --no-build-isolation --no-deps .
# and installs it that way itself (log: $OUT/build.log) when `import normkit.torch` fails.
#
# What lands in $OUT (the device tool brings back at most 8 files; this writes 6):
#   multigpu_summary.txt   environment, each step's rc and time, pytest counts, the
#                          comparisons' verdicts, norm kinds covered; rewritten after each step
#   multigpu.log           everything the steps printed
#   multigpu_results.json  {"runs": {"<mode>-<compile>-<norm>": train_ddp.py JSON},
#                           "comparisons": {"<mode>-<compile>": compare_losses.py verdict}},
#                          merged after every step (the per-run JSONs live in a temp dir)
#   pytest-multigpu.xml    JUnit XML of tests/multigpu (captured stdout included)
#   multigpu_losses.png    plot_losses.py: loss curves and step times, torch vs normkit, per
#                          (mode, compile); a plot failure is logged and leaves the status alone
#   build.log              only when this script had to install normkit
#
# Time: aims to end within MULTIGPU_BUDGET_S (default 500) seconds. Each step is
# stopped (rc 124) where it would eat the time the later steps are estimated to need,
# and a step that cannot get MIN_STEP_S seconds is skipped (rc "skip").
#
# MULTIGPU_TRAIN_EXTRA="..." appends arguments to every train_ddp.py run (e.g.
# "--device cpu --d-model 64 --layers 2 --seq 32 --vocab 256" to check this script's
# flow on a machine without GPUs; the pytest step then fails by design).
set -uo pipefail

# Multicast / NVLink SHARP off in every multi-GPU run (issue 6); the Python entry
# points force the same values again.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
BUDGET=${MULTIGPU_BUDGET_S:-500}
MIN_STEP_S=20
WORK=$(mktemp -d)
# One normkit kernel cache for the training runs: the first normkit run compiles, the
# others load from disk (the pytest module uses its own temporary caches).
export NORMKIT_CACHE_DIR="$WORK/normkit-cache"
LOG=$OUT/multigpu.log
SUMMARY=$OUT/multigpu_summary.txt
RESULTS=$OUT/multigpu_results.json
summary=()
verdicts=()
status=0

# merge KIND KEY FILE: put FILE's JSON into $RESULTS under KIND (runs|comparisons), KEY.
cat >"$WORK/merge.py" <<'EOF'
import json, os, sys
results, kind, key, path = sys.argv[1:5]
data = {"runs": {}, "comparisons": {}}
if os.path.exists(results):
    with open(results) as f:
        data = json.load(f)
try:
    with open(path) as f:
        data.setdefault(kind, {})[key] = json.load(f)
except (OSError, ValueError) as e:
    data.setdefault(kind, {})[key] = {"status": "MISSING", "error": str(e)}
with open(results + ".tmp", "w") as f:
    json.dump(data, f, indent=1)
os.replace(results + ".tmp", results)
EOF
merge() { "$PY" "$WORK/merge.py" "$RESULTS" "$@" >>"$LOG" 2>&1; }

DATE=$(date -u +"%Y-%m-%dT%H:%M:%SZ")
COMMIT=${NORMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
envinfo=$(
  echo "date: $DATE"
  echo "commit: $COMMIT"
  echo "gpus:"; nvidia-smi -L 2>&1 | sed 's/^/  /'
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | sort -u | tr '\n' ' ')"
  echo "topology:"; nvidia-smi topo -m 2>&1 | sed 's/^/  /'
  echo "env: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  "$PY" -c "import sys, torch; print('python:', sys.version.split()[0]); print('torch:', torch.__version__, '(cuda', str(torch.version.cuda) + ', nccl', '.'.join(map(str, torch.cuda.nccl.version())) + ')', 'gpus visible:', torch.cuda.device_count())" 2>&1
  echo "budget_s: $BUDGET"
)
echo "$envinfo" | tee -a "$LOG"

write_summary() {  # write_summary yes|no: whether the script got to its end
  {
    echo "$envinfo"
    echo "normkit: ${nkinfo:-not checked yet}"
    echo "norm kinds: ${kinds:-unknown}"
    printf '%s\n' "${summary[@]}"
    if [ -s "$OUT/pytest-multigpu.xml" ]; then
      "$PY" - "$OUT/pytest-multigpu.xml" <<'EOF' 2>&1
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
print(f"pytest: {n['tests']} tests, {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped")
for case in root.iter("testcase"):
    for tag in ("failure", "error", "skipped"):
        for el in case.findall(tag):
            msg = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
            print(f"  {tag:7} {case.get('name')}: {msg}")
EOF
    fi
    printf '%s\n' "${verdicts[@]}"
    echo "wall_s: $SECONDS"
    echo "finished: $1"
    echo "status: $([ "$status" -eq 0 ] && echo PASS || echo FAIL)"
  } >"$SUMMARY"
}

# step NAME MAX_S RESERVE_S CMD...: runs CMD (output to the console and $LOG) for at
# most MAX_S seconds and at most what the budget leaves after RESERVE_S for later steps.
step() {
  local name=$1 max=$2 reserve=$3
  shift 3
  local start=$SECONDS limit=$((BUDGET - SECONDS - reserve))
  [ "$limit" -le "$max" ] || limit=$max
  if [ "$limit" -lt "$MIN_STEP_S" ]; then
    echo "=== $name: SKIPPED, ${limit}s of the budget left for it (< ${MIN_STEP_S}s)" | tee -a "$LOG"
    summary+=("$(printf 'step: %-26s rc=%-4s %4ss (budget)' "$name" skip 0)")
    status=1
    write_summary no
    return 1
  fi
  echo "=== $name (limit ${limit}s): $*" | tee -a "$LOG"
  timeout -s INT -k 20 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  echo "=== $name: rc=$rc in ${took}s" | tee -a "$LOG"
  summary+=("$(printf 'step: %-26s rc=%-4s %4ss' "$name" "$rc" "$took")")
  [ "$rc" -eq 0 ] || status=1
  write_summary no
  return "$rc"
}

# --- normkit importable? (else install it) ----------------------------------
nkcheck='import normkit, normkit.torch; from normkit.torch import _ops; print("normkit", normkit.__version__, "from", normkit.__file__, "| _torch_C:", "used" if _ops._ext is not None else "NOT used (" + _ops._why_no_ext + ")")'
if ! nkinfo=$("$PY" -c "$nkcheck" 2>&1); then
  echo "normkit is not importable ($nkinfo); installing it (log: $OUT/build.log)" | tee -a "$LOG"
  start=$SECONDS
  "$PY" -m pip install --disable-pip-version-check --no-build-isolation --no-deps -v . >"$OUT/build.log" 2>&1
  rc=$?
  summary+=("$(printf 'step: %-26s rc=%-4s %4ss' install "$rc" "$((SECONDS - start))")")
  tail -n 20 "$OUT/build.log" | tee -a "$LOG"
  if ! nkinfo=$("$PY" -c "$nkcheck" 2>&1); then
    echo "normkit still not importable: $nkinfo" | tee -a "$LOG"
    status=1
    write_summary yes
    exit 1
  fi
fi
echo "$nkinfo" | tee -a "$LOG"
kinds=$("$PY" -c 'import normkit.torch as t; ok = ["rmsnorm"] + (["layernorm"] if hasattr(t, "layernorm") else []); print("covered:", ", ".join(ok) + ("" if "layernorm" in ok else "; NOT covered: layernorm (normkit.torch has no layernorm yet, issue 5)"))' 2>&1)
echo "norm kinds $kinds" | tee -a "$LOG"
write_summary no

# --- the plan: estimated seconds per run (for the reserves) -------------------
EST_EAGER=20
EST_COMPILE=60
runs=()
for mode in ddp fsdp2; do for norm in torch normkit; do runs+=("$mode off $norm"); done; done
for mode in ddp fsdp2; do for norm in torch normkit; do runs+=("$mode on $norm"); done; done
est() { [ "$1" = on ] && echo "$EST_COMPILE" || echo "$EST_EAGER"; }
reserve_after() {  # seconds the runs after index $1 are estimated to need
  local i total=0
  for ((i = $1 + 1; i < ${#runs[@]}; i++)); do
    read -r _ c _ <<<"${runs[$i]}"
    total=$((total + $(est "$c")))
  done
  echo "$total"
}

# --- 1. pytest ------------------------------------------------------------------
step pytest 200 "$(reserve_after -1)" \
  env NORMKIT_TEST_REQUIRE_GPUS=2 "$PY" -m pytest -q -rs -p no:cacheprovider -o junit_logging=system-out tests/multigpu \
  --junitxml="$OUT/pytest-multigpu.xml"

# --- 2. training runs and comparisons ---------------------------------------------
for ((i = 0; i < ${#runs[@]}; i++)); do
  read -r mode comp norm <<<"${runs[$i]}"
  key="$mode-$comp-$norm"
  flags=()
  [ "$comp" = on ] && flags=(--compile)
  read -r -a extra <<<"${MULTIGPU_TRAIN_EXTRA:-}"
  flags+=("${extra[@]}")
  max=90
  [ "$comp" = on ] && max=200
  step "train $key" "$max" "$(reserve_after "$i")" \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 scripts/multigpu/train_ddp.py \
    --mode "$mode" --norm "$norm" "${flags[@]}" --out "$WORK/$key.json"
  merge runs "$key" "$WORK/$key.json"
  if [ "$norm" = normkit ]; then
    pair="$mode-$comp"
    if [ -s "$WORK/$pair-torch.json" ] && [ -s "$WORK/$pair-normkit.json" ]; then
      echo "=== compare $pair" | tee -a "$LOG"
      cmp_out=$("$PY" scripts/multigpu/compare_losses.py "$WORK/$pair-torch.json" "$WORK/$pair-normkit.json" \
        --json-out "$WORK/compare-$pair.json" 2>&1)
      rc=$?
      echo "$cmp_out" | tee -a "$LOG"
      merge comparisons "$pair" "$WORK/compare-$pair.json"
      line=$(grep -E '^(PASS|FAIL) ' <<<"$cmp_out" | tail -n 1)
      [ "$rc" -eq 0 ] || status=1
      [ "$rc" -le 1 ] || line="ERROR $pair: compare_losses rc=$rc (see multigpu.log)"
      verdicts+=("compare $pair: rc=$rc ${line}")
      ratio=$("$PY" -c "import json; d = json.load(open('$WORK/compare-$pair.json')); r = d.get('step_time_ratio_normkit_over_torch'); print(f\"median step torch {d['median_step_s_torch'] * 1e3:.2f} ms, normkit {d['median_step_s_normkit'] * 1e3:.2f} ms, ratio {r:.3f}\" if r else 'no step times')" 2>/dev/null)
      verdicts+=("  $ratio")
    else
      verdicts+=("compare $pair: NOT RUN (a training run of the pair has no result)")
      status=1
    fi
    write_summary no
  fi
done

# The plot is a view of $RESULTS, not a check: its failure is reported, never a FAIL.
echo "=== plot" | tee -a "$LOG"
plot_out=$("$PY" scripts/multigpu/plot_losses.py "$RESULTS" --out "$OUT/multigpu_losses.png" \
  --title "normkit $COMMIT, $DATE: torch norms vs normkit norms" 2>&1)
rc=$?
echo "$plot_out" | tee -a "$LOG"
if [ "$rc" -eq 0 ]; then
  summary+=("plot: multigpu_losses.png")
else
  summary+=("plot: NOT written (plot_losses.py rc=$rc: $(tail -n 1 <<<"$plot_out"); see multigpu.log)")
fi

write_summary yes
echo "--- $SUMMARY" | tee -a "$LOG"
cat "$SUMMARY"
echo "files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
rm -rf "$WORK"
exit "$status"
