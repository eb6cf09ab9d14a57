#!/usr/bin/env bash
# Session 47 call 2: where the bf16 backward (no dresidual_out) loses its time in the call
# at N != 8192: per-kernel times with PDL off and with plain stores, beside the own plan.
set -u
mkdir -p $OUT
python3 -m pip install -q --no-build-isolation --no-deps . > $OUT/install.log 2>&1; echo "install rc=$? t=$SECONDS" > $OUT/summary.log
for v in own pdl0 plain pdl0plain; do
  case $v in
    own) E="";; pdl0) E="NORMKIT_PDL=0";; plain) E="NORMKIT_NVRTC_FLAGS=-DNK_STORE_CACHE=0";; pdl0plain) E="NORMKIT_PDL=0 NORMKIT_NVRTC_FLAGS=-DNK_STORE_CACHE=0";;
  esac
  for op in rmsnorm layernorm; do
    env $E timeout 80 python3 scripts/bwd_kernel_times.py --op $op --dtype bf16 --n 2048,4096,8192,16384 --calls 40 > $OUT/kt-$v-$op.log 2>&1
    echo "== $v $op rc=$? t=$SECONDS" >> $OUT/summary.log; cat $OUT/kt-$v-$op.log >> $OUT/summary.log
  done
done
cat $OUT/summary.log
