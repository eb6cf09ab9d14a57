#!/usr/bin/env python3
"""Where an RMSNorm call spends its time on the GPU: host time per call of each
layer (autograd, custom op, direct call, raw binding) and the kernels' own time
from torch.profiler. A diagnostic, not a test.

    python scripts/profile_rmsnorm.py [--shapes 1x4096,8192x4096] [--dtype bf16]
"""

import argparse
import time

import torch
import torch.nn.functional as F

import normkit.torch as nkt
from normkit.torch import _impl

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def host_us(fn, n=300, warmup=20, after_warmup=None):
    """Host wall time of one call of fn (us), averaged over n calls after `warmup`
    calls; `after_warmup()` runs between the two (e.g. to reset counters)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if after_warmup is not None:
        after_warmup()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x4096,8192x4096,8192x32768")
    ap.add_argument("--dtype", default="bf16")
    args = ap.parse_args()
    dtype = DTYPES[args.dtype]
    for spec in args.shapes.split(","):
        m, n = map(int, spec.split("x"))
        x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.rand(n, device="cuda", dtype=dtype) + 0.5).requires_grad_()
        dy = torch.randn_like(x)
        y = nkt.rmsnorm(x, w)
        ye = F.rms_norm(x, (n,), w)
        out, _, rstd = nkt.rmsnorm_fwd(x.detach(), w.detach(), store_rstd=True)
        print(f"== {args.dtype} M={m} N={n}")
        rows = {
            "autograd.grad normkit": lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True),
            "autograd.grad eager": lambda: torch.autograd.grad(ye, (x, w), dy, retain_graph=True),
            "rmsnorm_bwd direct": lambda: nkt.rmsnorm_bwd(x.detach(), w.detach(), dy, rstd),
            "custom op bwd": lambda: torch.ops.normkit.rmsnorm_bwd(x.detach(), w.detach(), dy, rstd, None, None,
                                                                   None, None, 0.0),
            "bwd impl": lambda: _impl.rmsnorm_bwd_impl(x.detach(), w.detach(), dy, rstd, None, None, None, None,
                                                       0.0),
            "fwd no-grad": lambda: nkt.rmsnorm(x.detach(), w.detach()),
        }
        for name, fn in rows.items():
            print(f"  host {name:24s} {host_us(fn):9.1f} us/call")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                torch.autograd.grad(y, (x, w), dy, retain_graph=True)
                torch.autograd.grad(ye, (x, w), dy, retain_graph=True)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))


if __name__ == "__main__":
    main()
