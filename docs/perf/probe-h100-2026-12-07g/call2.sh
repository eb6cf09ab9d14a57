#!/usr/bin/env bash
set -u
C=${NORMKIT_COMMIT:-a76ccc5}
TOTAL=${TOTAL:-575}
W=$OUT/w; mkdir -p $W/sweep
export PYTHONPATH=/tmp/site
for m in default flush idle; do
  if [ $m = default ]; then A=; else A="--between $m"; fi
  timeout 70 python3 scripts/bwd_kernel_times.py --op rmsnorm --dtype bf16 --n 2048,4096,8192,16384 $A > $W/kt-$m.log 2>&1
  echo "kt $m rc=$? t=$SECONDS" >> $W/summary.log
done
tar czf $OUT/a.tgz -C $OUT w
OUT=$W/sweep NORMKIT_COMMIT=$C NORMKIT_BENCH_BUDGET_S=$((TOTAL-SECONDS-10)) bash scripts/bench_gpu.sh --op rmsnorm,layernorm --dtypes bf16,fp32 --directions fwd,bwd --residual both --peers eager,liger --host-calls 10000 > /dev/null 2>&1
echo "sweep rc=$? t=$SECONDS: $(tail -1 $W/sweep/bench.log)" >> $W/summary.log
tar czf $OUT/b.tgz -C $OUT w && rm -f $OUT/a.tgz
cat $W/summary.log
