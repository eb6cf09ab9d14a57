"""Cold vs warm kernel acquisition times of the JIT runtime, for docs/perf/.

cold      : empty cache dir, new process: NVRTC compile + disk store + module load
warm-disk : same cache dir, new process: disk read + module load (no compile)
warm-mem  : same process, second call: already loaded (warm lookup)
host      : wall time per warm call over 10,000 calls without synchronizing (host overhead)

Each case runs in its own process (so CUDA/NVRTC start-up is excluded by timing
only the first normkit call after a warm-up of PyTorch's CUDA context).
Usage: python scripts/runtime_load_times.py [--repeats 5] [--json OUT.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, time, torch
from normkit import _C
x = torch.randn(1 << 20, device="cuda"); y = torch.zeros_like(x)
torch.cuda.synchronize()
s = torch.cuda.current_stream().cuda_stream
def call():
    t = time.perf_counter()
    _C.selftest_axpy(x.data_ptr(), y.data_ptr(), x.numel(), 1.0, s, 2, 0, False)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3
first = call()
second = call()
counters = _C.counters()
# Host cost of a warm call (binding + pointer->device + warm lookup + launch), no sync in the loop.
n = 10000
t = time.perf_counter()
for _ in range(n):
    _C.selftest_axpy(x.data_ptr(), y.data_ptr(), x.numel(), 1.0, s, 2, 0, False)
host_us = (time.perf_counter() - t) / n * 1e6
torch.cuda.synchronize()
print(json.dumps({"first_ms": first, "second_ms": second, "host_us": host_us, "counters": counters}))
"""


def child(cache_dir):
    env = dict(os.environ, NORMKIT_CACHE_DIR=cache_dir)
    out = subprocess.check_output([sys.executable, "-c", CHILD], env=env, text=True)
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="process pairs to run (default 5)")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    rows = {"cold": [], "warm_disk": [], "warm_memory": [], "warm_call_host_us": [], "cold_compile_ms": [], "warm_disk_read_ms": [],
            "cold_load_ms": [], "warm_load_ms": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as d:
            cold = child(d)
            warm = child(d)
        assert cold["counters"]["compiles"] == 1 and warm["counters"]["compiles"] == 0
        assert warm["counters"]["disk_hits"] == 1
        rows["cold"].append(cold["first_ms"])
        rows["warm_disk"].append(warm["first_ms"])
        rows["warm_memory"].append(warm["second_ms"])
        rows["warm_call_host_us"].append(warm["host_us"])
        rows["cold_compile_ms"].append(cold["counters"]["compile_ns"] / 1e6)
        rows["warm_disk_read_ms"].append(warm["counters"]["disk_read_ns"] / 1e6)
        rows["cold_load_ms"].append(cold["counters"]["load_ns"] / 1e6)
        rows["warm_load_ms"].append(warm["counters"]["load_ns"] / 1e6)
    summary = {k: statistics.median(v) for k, v in rows.items()}
    print("median over %d process pairs (ms; warm_call_host_us in microseconds):" % args.repeats)
    for k, v in summary.items():
        print(f"  {k:18s} {v:9.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median_ms": summary, "samples_ms": rows}, f, indent=2)


if __name__ == "__main__":
    main()
