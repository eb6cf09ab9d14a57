#!/usr/bin/env bash
# Nsight Compute on the backward row kernels, in one call of the device tool: why a
# backward row runs where it does against its bytes (stall reasons, occupancy, memory
# throughput, issue slots, executed instructions), which timing alone does not say. The H200 machine (Firecracker) reads the
# counters; the clocks stay as they are (--clock-control none, the device README's
# METHOD.md).
#   usage: NORMKIT_COMMIT=<hash> [CASE_S=90] [KERNEL=norm_bwd_kernel] bash scripts/ncu_backward.sh scripts/ncu_cases/<file>.txt
# KERNEL=norm_fwd_kernel profiles the same step's forward row kernel instead (the
# override is still NORMKIT_BACKWARD_PLAN's: forward cases take `-`). A case whose flags
# hold `--forward liger` profiles Liger-Kernel's forward kernel (KERNEL= a regex naming
# both, e.g. 'norm_fwd_kernel|_rms_norm_forward|_layer_norm_forward'), from the carried
# .whl/ (scripts/peer_wheels.sh).
# Cases file: one case a line, `label ; override ; ncu_driver.py flags`, where override
# is a NORMKIT_BACKWARD_PLAN value or `-` for the plan's own; `#` starts a comment. Each
# case profiles the third training step's backward row kernel (norm_bwd_kernel: not
# the split rows' kernels; the first step compiles).
# $OUT: ncu.csv (every case's `ncu --csv --page details`, each after a line
# `=== <label> ; <override> ; <flags>`), ncu.log (the build and each case's output).
# NCU_METRICS=a,b adds raw metrics to the sections (e.g. dram__bytes_read.sum,
# dram__bytes_write.sum: the bytes a kernel moved against the bytes it was counted for).
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.." || exit 2
cases=$(realpath "${1:?usage: bash scripts/ncu_backward.sh <cases file>}")
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)}
[ -x "${NCU:-}" ] || { echo "ncu_backward: no ncu on this machine (set NCU=<path>)"; exit 2; }
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/ncu.log") 2>&1
echo "commit: ${NORMKIT_COMMIT:-unknown}; $("$NCU" --version | tail -n 1)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps . >/tmp/ncu-build.log 2>&1 \
  || { tail -n 30 /tmp/ncu-build.log; exit 2; }
echo "build done at ${SECONDS}s"
# shellcheck source=peer_wheels.sh
source scripts/peer_wheels.sh
if install_peer_wheels python3 /tmp/ncu-site >/tmp/ncu-peers.log 2>&1; then
  [ -d /tmp/ncu-site ] && export PYTHONPATH=/tmp/ncu-site${PYTHONPATH:+:$PYTHONPATH}
else
  echo "peer wheels did not install (peer cases will fail):"; tail -n 5 /tmp/ncu-peers.log
fi
: >"$OUT/ncu.csv"
trim() { local v=$1; v=${v#"${v%%[![:space:]]*}"}; echo "${v%"${v##*[![:space:]]}"}"; }
while IFS=';' read -r label override flags; do
  label=$(trim "$label"); override=$(trim "${override:-}"); flags=$(trim "${flags:-}")
  [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
  [ "$override" = "-" ] && override=""
  echo "=== $label (${override:-own plan}) at ${SECONDS}s"
  echo "=== $label ; ${override:--} ; $flags" >>"$OUT/ncu.csv"
  # shellcheck disable=SC2086  # flags is a list
  NORMKIT_BACKWARD_PLAN="$override" NORMKIT_ASSERT_NO_SPILLS=1 NORMKIT_CACHE_DIR=/tmp/ncu-cache \
    timeout -s INT "${CASE_S:-90}" "$NCU" --clock-control none --target-processes all \
    --kernel-name "regex:${KERNEL:-norm_bwd_kernel}" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats ${NCU_METRICS:+--metrics "$NCU_METRICS"} --csv --page details \
    python3 scripts/ncu_driver.py $flags >/tmp/ncu-case.csv 2>/tmp/ncu-case.err
  echo "rc=$?"; tail -n 3 /tmp/ncu-case.err
  grep '^"' /tmp/ncu-case.csv >>"$OUT/ncu.csv" || { echo "no ncu rows"; tail -n 5 /tmp/ncu-case.csv; }
done <"$cases"
echo "=== end at ${SECONDS}s"
