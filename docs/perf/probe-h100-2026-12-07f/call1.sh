#!/usr/bin/env bash
# Session 47 call 1: main's new plans on the GPU, the cooperative branch, then the full sweep.
set -u
C=${NORMKIT_COMMIT:-a63b300}
TOTAL=${TOTAL:-570}
mkdir -p $OUT/sweep $OUT/coop
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $OUT/summary.log
python3 -m pip install -q --no-build-isolation --no-deps . > $OUT/install.log 2>&1; echo "main install rc=$? t=$SECONDS" >> $OUT/summary.log
NORMKIT_ASSERT_NO_SPILLS=1 timeout 120 python3 -m pytest -q -x tests/python/test_norm_plans_gpu.py tests/python/test_backward_bulk_rows_gpu.py -k "measured_forward_plans or backward_own_plans or bulk_rows_own_plan or bulk_short_rows" > $OUT/tests.log 2>&1
echo "main tests rc=$? t=$SECONDS: $(tail -1 $OUT/tests.log)" >> $OUT/summary.log
# the cooperative branch in its own target dir
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/nk-coop .probe/coop > $OUT/coop/install.log 2>&1; echo "coop install rc=$? t=$SECONDS" >> $OUT/summary.log
(cd .probe/coop && PYTHONPATH=/tmp/nk-coop NORMKIT_ASSERT_NO_SPILLS=1 timeout 90 python3 -m pytest -q -x tests/python/test_forward_group_rows_gpu.py -k "in_place or switched_off or cuda_graph" > $OUT/coop/tests.log 2>&1; echo "coop tests rc=$? t=$SECONDS: $(tail -1 $OUT/coop/tests.log)" >> $OUT/summary.log)
for b in main coop; do
  if [ $b = coop ]; then PP=/tmp/nk-coop; else PP=; fi
  PYTHONPATH=$PP NORMKIT_COMMIT=$C-$b timeout 60 python3 -m normkit bench --op fused_add_rmsnorm,fused_add_layernorm --dtypes fp32 --n 131072,262144 --directions fwd --peers none --host-calls 0 --decode-shapes none --out $OUT/coop/bench-$b > $OUT/coop/bench-$b.log 2>&1
  echo "bench $b rc=$? t=$SECONDS" >> $OUT/summary.log
done
OUT=$OUT/sweep NORMKIT_COMMIT=$C NORMKIT_BENCH_BUDGET_S=$((TOTAL-SECONDS)) bash scripts/bench_gpu.sh --op rmsnorm,layernorm --dtypes bf16,fp32 --directions fwd,bwd --residual both --peers eager,liger --host-calls 10000 > /dev/null 2>&1
echo "sweep rc=$? t=$SECONDS: $(tail -1 $OUT/sweep/bench.log)" >> $OUT/summary.log
cat $OUT/summary.log
