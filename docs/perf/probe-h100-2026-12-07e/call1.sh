export NORMKIT_COMMIT=52b38d4-dirty PYTHONUNBUFFERED=1
mkdir -p $OUT/ncu $OUT/pc
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/b.log 2>&1 || tail /tmp/b.log
echo "built at $SECONDS"
NORMKIT_ASSERT_NO_SPILLS=1 timeout -s INT 150 python3 -m pytest -q tests/python/test_forward_group_rows_gpu.py -k "fused_add_in_place_grouped or timeout_same_bits or own_plan" > $OUT/pytest.log 2>&1; tail -4 $OUT/pytest.log
echo "pytest done at $SECONDS"
timeout -s INT 90 python3 -m normkit bench --op fused_add_rmsnorm,fused_add_layernorm --dtypes fp32 --n 65536,131072,262144 --directions fwd --peers none --decode-shapes none --host-calls 0 --no-plot --out $OUT/b > $OUT/bench.log 2>&1; grep -E "^\s*(fused|op)" $OUT/bench.log | tail -12
echo "bench done at $SECONDS"
OUT=$OUT/ncu CASE_S=40 KERNEL='norm_bwd_(bulk_)?kernel' NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum timeout -s INT 200 bash scripts/ncu_backward.sh scripts/ncu_cases/h100-bwd-bf16-cliffs.txt > /dev/null 2>&1
echo "ncu done at $SECONDS"
OUT=$OUT/pc ROUNDS=2 CASE_S=40 timeout -s INT $((580-SECONDS)) bash scripts/plan_cases.sh scripts/plan_cases/liger-clear-rows-h100.txt > /dev/null 2>&1
echo "all done at $SECONDS"
