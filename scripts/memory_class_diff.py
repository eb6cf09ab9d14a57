#!/usr/bin/env python3
"""The sweep's rows whose kernels differ between the two memory classes, with no GPU.

The plans read the device's peak DRAM bandwidth (an H100's class under 4000 GB/s, an
H200's above it; `RowPlanInputs::slower_memory`), and since session 44 most of what was
measured on H100s is planned on the H100's class only. To time one class's plans on the
other's GPU (`NORMKIT_MEMORY_GBPS`), one needs the rows where they differ: this runs
`normkit precompile --json` for sm_90a under NORMKIT_MEMORY_GBPS=3352 and =4916 per
operator, dtype, direction and residual, over the standard sweep's N, and prints each
row whose kernels (cache keys: template arguments and compile options, the evict-first
stores' `-DNK_PLAN_STORE_CACHE=1` included) are not the same. The kernels precompile
lists include those of calls with few rows and per-head calls, so a row listed may differ
only there. Kernels compile into --cache-dir (minutes the first time; reruns read it).

    python3 scripts/memory_class_diff.py [--op rmsnorm,layernorm] [--dtypes bf16,fp32]
        [--directions fwd,bwd] [--n 256,...] [--cache-dir DIR] [--verbose]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

SWEEP_N = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
H100_GBPS, H200_GBPS = 3352, 4916


def precompile(op, dtype, direction, residual, ns, gbps, cache_dir):
    """{N: {cache_key: template_args}} of one variant under NORMKIT_MEMORY_GBPS=gbps."""
    features = []
    if residual:
        # residual_out returned, as the benchmark's calls do: the backward then has dresidual_out.
        features += ["residual", "prenorm"]
    if op == "layernorm":
        features.append("bias")  # the benchmark's LayerNorm has weight and bias
    cmd = [sys.executable, "-m", "normkit", "precompile", "--arch", "sm_90a", "--op", op, "--dtype", dtype,
           "--direction", direction, "--n", ",".join(map(str, ns)), "--json"]
    if features:
        cmd += ["--features", ",".join(features)]
    env = {**os.environ, "NORMKIT_MEMORY_GBPS": str(gbps), "NORMKIT_CACHE_DIR": cache_dir}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode not in (0, 1):  # 1: a kernel spills (still listed)
        sys.exit(f"memory_class_diff: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    kernels = collections.defaultdict(dict)
    for k in json.loads(done.stdout)["kernels"]:
        n = int(re.search(r" n=(\d+)", k["variant"]).group(1))
        kernels[n][k["cache_key"]] = k["template_args"]
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", default="rmsnorm,layernorm")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--directions", default="fwd,bwd")
    ap.add_argument("--n", default=",".join(map(str, SWEEP_N)))
    ap.add_argument("--cache-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "normkit-class-diff"))
    ap.add_argument("--verbose", action="store_true", help="print each class's kernels of the rows that differ")
    args = ap.parse_args()
    ns = [int(n) for n in args.n.split(",")]
    differing = 0
    for op in args.op.split(","):
        for dtype in args.dtypes.split(","):
            for direction in args.directions.split(","):
                for residual in (False, True):
                    h100 = precompile(op, dtype, direction, residual, ns, H100_GBPS, args.cache_dir)
                    h200 = precompile(op, dtype, direction, residual, ns, H200_GBPS, args.cache_dir)
                    rows = [n for n in ns if set(h100[n]) != set(h200[n])]
                    differing += len(rows)
                    tag = f"{op}/{direction}/{dtype}/{'with' if residual else 'without'} residual"
                    print(f"{tag}: {', '.join(map(str, rows)) if rows else 'none'}", flush=True)
                    if args.verbose:
                        for n in rows:
                            for name, kernels, other in (("H100", h100[n], h200[n]), ("H200", h200[n], h100[n])):
                                for key, entry in kernels.items():
                                    if key not in other:
                                        print(f"    N={n} {name} only: {entry}")
    print(f"{differing} rows differ")


if __name__ == "__main__":
    main()
