#!/usr/bin/env bash
# Session 47 call 4 (main with the cooperative in-place fused add): the fused add sweep (both
# dtypes, all N) with peers, then GPU tests of the grouped rows and the fused add; results tarred
# after each step (the device tool returns at most 8 files).
set -u
C=${NORMKIT_COMMIT:-?}
W=$OUT/w; mkdir -p $W/b
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $W/summary.log
python3 -m pip install -q --no-build-isolation --no-deps . > $W/install.log 2>&1; echo "install rc=$? t=$SECONDS" >> $W/summary.log
NORMKIT_COMMIT=$C timeout 130 python3 -m normkit bench --op fused_add_rmsnorm,fused_add_layernorm --dtypes bf16,fp32 --directions fwd --peers eager,liger --host-calls 0 --decode-shapes none --out $W/b > $W/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $W/summary.log
tar czf $OUT/bench.tgz -C $OUT w
NORMKIT_ASSERT_NO_SPILLS=1 timeout $((${TOTAL:-230}-SECONDS)) python3 -m pytest -q tests/python/test_forward_group_rows_gpu.py tests/python/test_layernorm_gpu.py -k "fused_add or group_rows" > $W/tests.log 2>&1
echo "tests rc=$? t=$SECONDS: $(tail -1 $W/tests.log)" >> $W/summary.log
tar czf $OUT/all.tgz -C $OUT w && rm -f $OUT/bench.tgz
cat $W/summary.log
