#!/usr/bin/env python3
"""A loop of eager no-grad normkit.torch.rmsnorm calls (M=1, N=4096 bf16 with a weight,
issue 4's host-time case) for --seconds, for a sampling profiler to split the host
time by C++ frame:

    py-spy record --native --rate 2000 --format raw -o stacks.txt -- python3 scripts/proto/host_loop.py

normkit's own frames have names only in an unstripped build (scikit-build-core strips on
install by default): `pip install --no-build-isolation --no-deps --config-settings=install.strip=false
--config-settings=cmake.build-type=RelWithDebInfo .` first. Prints the host time per call over
the whole loop. A diagnostic: needs a CUDA device.
"""
import argparse
import time

import torch

import normkit.torch as nkt

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--seconds", type=float, default=8.0)
args = ap.parse_args()
x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
with torch.no_grad():
    for _ in range(1000):
        nkt.rmsnorm(x, w)
    torch.cuda.synchronize()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for _ in range(10000):
            nkt.rmsnorm(x, w)
        torch.cuda.synchronize()
        calls += 10000
    print(f"{(time.perf_counter() - start) / calls * 1e6:.2f} us per call over {calls} calls")
