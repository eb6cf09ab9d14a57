#!/usr/bin/env bash
# Session 48 call 1 (main a76ccc5): GPU tests of the fused add / grouped rows (ecff52d, a76ccc5
# never ran on a GPU), the fused-add sweep with eager, Liger and torch.compile (both dtypes),
# then LayerNorm fp32 against torch.compile. Results tarred after each step.
set -u
C=${NORMKIT_COMMIT:-a76ccc5}
TOTAL=${TOTAL:-575}
W=$OUT/w; mkdir -p $W
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader)" > $W/summary.log
python3 -m pip install -q --no-build-isolation --no-deps . > $W/install.log 2>&1; echo "install rc=$? t=$SECONDS" >> $W/summary.log
. scripts/peer_wheels.sh; install_peer_wheels python3 /tmp/site >> $W/install.log 2>&1; echo "wheels rc=$? t=$SECONDS" >> $W/summary.log
export PYTHONPATH=/tmp/site
NORMKIT_ASSERT_NO_SPILLS=1 timeout 110 python3 -m pytest -q tests/python/test_forward_group_rows_gpu.py tests/python/test_layernorm_gpu.py -k "fused_add or group_rows or in_place" > $W/tests.log 2>&1
echo "tests rc=$? t=$SECONDS: $(tail -1 $W/tests.log)" >> $W/summary.log
tar czf $OUT/a.tgz -C $OUT w
NORMKIT_COMMIT=$C timeout -s INT -k 10 $((TOTAL-SECONDS-150)) python3 -m normkit bench --op fused_add_rmsnorm,fused_add_layernorm --dtypes bf16,fp32 --directions fwd --peers eager,liger,compile --host-calls 0 --decode-shapes none --out $W/fa > $W/fa.log 2>&1
echo "fused-add bench rc=$? t=$SECONDS" >> $W/summary.log
tar czf $OUT/b.tgz -C $OUT w && rm -f $OUT/a.tgz
NORMKIT_COMMIT=$C timeout -s INT -k 10 $((TOTAL-SECONDS-5)) python3 -m normkit bench --op layernorm --dtypes fp32 --peers compile,eager --host-calls 0 --decode-shapes none --out $W/ln > $W/ln.log 2>&1
echo "ln compile bench rc=$? t=$SECONDS" >> $W/summary.log
tar czf $OUT/c.tgz -C $OUT w && rm -f $OUT/b.tgz
cat $W/summary.log
