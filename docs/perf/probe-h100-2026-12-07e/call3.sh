export PYTHONUNBUFFERED=1
mkdir -p $OUT/sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/b.log 2>&1 || { tail /tmp/b.log; exit 2; }
echo "built at $SECONDS"
NORMKIT_ASSERT_NO_SPILLS=1 timeout -s INT 170 python3 -m pytest -q tests/python/test_norm_plans_gpu.py -k "measured_forward_plans or backward_own_plans or decode_rows_own_plans" > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
echo "pytest done at $SECONDS"
{ timeout -s INT 30 python3 scripts/bwd_kernel_times.py --op rmsnorm --dtype bf16 --n 256,2048,4096,262144
  timeout -s INT 30 python3 scripts/bwd_kernel_times.py --op layernorm --dtype bf16 --n 256,16384,262144; } 2>&1 | grep -v -i warn > $OUT/times.log
echo "times done at $SECONDS"; cat $OUT/times.log
OUT=$OUT/sweep NORMKIT_COMMIT=2ed4abe NORMKIT_BENCH_BUDGET_S=300 bash scripts/bench_gpu.sh --op rmsnorm,layernorm --dtypes bf16,fp32 --directions fwd,bwd --residual both --peers eager,liger --host-calls 10000 > /dev/null 2>&1
echo "sweep done at $SECONDS"; tail -3 $OUT/sweep/bench.log
( cd .probe/wip && python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/bw.log 2>&1 || tail /tmp/bw.log
  cd /tmp && for g in 1 0; do NORMKIT_GROUP_ROWS=$g NORMKIT_LOG=info timeout -s INT 40 python3 -m normkit bench --op fused_add_rmsnorm,fused_add_layernorm --dtypes fp32 --n 262144 --directions fwd --peers none --decode-shapes none --host-calls 0 --no-plot --out /tmp/w$g 2>&1 | grep -E "normkit\]|add\+" | grep -v "^\s*$" | sort | uniq -c | head -20; done ) > $OUT/wip.log 2>&1
echo "all done at $SECONDS"; cat $OUT/wip.log
