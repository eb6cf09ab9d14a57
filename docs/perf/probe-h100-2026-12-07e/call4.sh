# 1. param_grad_reduce A/B: 7c9d5ca's (8 lanes of 32 columns) against 1bbd61d's shape by
#    the parts, both builds installed side by side, the backward rows alternated twice.
# 2. on an H100: plan cases of the forward rows Liger still led; on an H200: the full sweep.
export PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
rm -rf /tmp/src-base && mkdir /tmp/src-base && cp -r CMakeLists.txt Makefile README.md cmake device include pyproject.toml python src requirements-dev.txt /tmp/src-base/
( cd /tmp/src-base && patch -R -p1 < "$OLDPWD/docs/perf/probe-h100-2026-12-07e/param-shape.diff" > /dev/null ) || exit 3
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/nk-base /tmp/src-base > /tmp/b1.log 2>&1 || { tail /tmp/b1.log; exit 2; }
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/nk-new . > /tmp/b2.log 2>&1 || { tail /tmp/b2.log; exit 2; }
echo "built at $SECONDS"
for round in 1 2; do for v in base new; do
  (cd /tmp && PYTHONPATH=/tmp/nk-$v NORMKIT_CACHE_DIR=/tmp/cache-$v timeout -s INT 90 python3 -m normkit bench --op rmsnorm,layernorm --dtypes bf16,fp32 --directions bwd --residual both --peers none --decode-shapes none --host-calls 0 --no-plot --out /tmp/ab-$v-$round > /tmp/ab-$v-$round.log 2>&1)
  echo "$v round $round rc=$? at $SECONDS: $(tail -n 1 /tmp/ab-$v-$round.log)"; cp /tmp/ab-$v-$round/bench.json $OUT/ab-$v-$round.json
done; done
if [[ $gpu == *H200* ]]; then
  OUT=$OUT/sweep NORMKIT_COMMIT=2ed4abe NORMKIT_BENCH_BUDGET_S=$((585-SECONDS)) bash scripts/bench_gpu.sh --op rmsnorm,layernorm --dtypes bf16,fp32 --directions fwd,bwd --residual both --peers eager,liger --host-calls 10000 > /dev/null 2>&1
  echo "sweep done at $SECONDS"; tail -n 3 $OUT/sweep/bench.log
else
  python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/b3.log 2>&1
  { for p in "" row=bulk,ept=8 row=bulk,ept=16 row=bulk,ept=32; do
      echo "plan: ${p:-own}"; NORMKIT_BACKWARD_PLAN=$p NORMKIT_NVRTC_FLAGS=-DNK_STORE_CACHE=1 timeout -s INT 30 python3 scripts/bwd_kernel_times.py --op rmsnorm --dtype bf16 --n 4096,8192
    done
    echo "plan: own"; timeout -s INT 30 python3 scripts/bwd_kernel_times.py --op layernorm --dtype bf16 --n 4096,8192; } 2>&1 | grep -v -i warn > $OUT/times.log
  cat $OUT/times.log
  OUT=$OUT/pc NORMKIT_COMMIT=2ed4abe ROUNDS=2 CASE_S=40 timeout -s INT $((570-SECONDS)) bash scripts/plan_cases.sh scripts/plan_cases/liger-rows-h100-2.txt > /dev/null 2>&1
  echo "all done at $SECONDS"; sed -n '/=== summary/,$p' $OUT/pc/plan_cases.log
fi
