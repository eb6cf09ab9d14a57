# param_grad_reduce lanes: the backward's kernels timed one by one, before and after.
export NORMKIT_COMMIT=7c9d5ca+param-lanes PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
times() {
  for spec in "rmsnorm bf16" "layernorm bf16"; do
    set -- $spec
    timeout -s INT 100 python3 scripts/bwd_kernel_times.py --op $1 --dtype $2 --n 256,1024,2048,4096,8192,16384,32768,262144
  done
  timeout -s INT 40 python3 scripts/bwd_kernel_times.py --op rmsnorm --dtype fp32 --n 256,2048,4096,16384
  timeout -s INT 40 python3 scripts/bwd_kernel_times.py --op layernorm --dtype bf16 --dro --n 16384,32768
}
patch -R -p1 < .probe/param-lanes.diff > /dev/null || exit 3
python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/b.log 2>&1 || { tail /tmp/b.log; exit 2; }
echo "=== baseline (8 lanes) built at $SECONDS"
NORMKIT_CACHE_DIR=/tmp/c-base times 2>&1 | tee $OUT/base.log
patch -p1 < .probe/param-lanes.diff > /dev/null || exit 3
python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/b.log 2>&1 || { tail /tmp/b.log; exit 2; }
echo "=== lanes by parts built at $SECONDS"
NORMKIT_CACHE_DIR=/tmp/c-new times 2>&1 | tee $OUT/new.log
echo "=== done at $SECONDS"
