#!/usr/bin/env python3
"""Host time per call of each layer of an eager RMSNorm call on a CUDA device,
and of the steps inside normkit's backward (timers wrapped around them). A
diagnostic for the host-bound shapes, not a test.

    python scripts/host_profile.py [--shapes 1x4096,8192x4096] [--dtype bf16]
"""

import argparse
import collections
import functools
import time
import types

import torch
import torch.nn.functional as F

import normkit.torch as nkt
import profile_rmsnorm  # beside this script
from normkit.torch import _impl, _ops

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
totals = collections.Counter()
counts = collections.Counter()


def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            totals[name] += time.perf_counter() - t
            counts[name] += 1
    return wrapper


def instrument():
    for name in ("check_bwd", "_device_of", "bwd_meta", "rmsnorm_bwd_impl", "check_fwd", "fwd_meta",
                 "rmsnorm_fwd_impl"):
        setattr(_impl, name, timed(name, getattr(_impl, name)))
    c = types.SimpleNamespace(**{k: getattr(_impl._C, k) for k in dir(_impl._C) if not k.startswith("__")})
    for name in ("rmsnorm_bwd", "rmsnorm_bwd_workspace_bytes", "rmsnorm_fwd"):
        setattr(c, name, timed("_C." + name, getattr(_impl._C, name)))
    _impl._C = c
    _ops._backward = timed("_backward", _ops._backward)
    _ops._setup_context = timed("_setup_context", _ops._setup_context)


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


def host_us(fn):
    def reset():
        totals.clear()
        counts.clear()
    return profile_rmsnorm.host_us(fn, n=400, warmup=30, after_warmup=reset)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x4096,8192x4096")
    ap.add_argument("--dtype", default="bf16")
    args = ap.parse_args()
    dtype = DTYPES[args.dtype]
    instrument()
    for spec in args.shapes.split(","):
        m, n = map(int, spec.split("x"))
        for with_w in (True, False):
            x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
            w = (torch.rand(n, device="cuda", dtype=dtype) + 0.5).requires_grad_() if with_w else None
            inputs = (x, w) if with_w else (x,)
            dy = torch.randn_like(x)
            y = nkt.rmsnorm(x, w)
            ye = F.rms_norm(x, (n,), w)
            yi = Identity.apply(x) * 1.0
            ya = x * 1.0
            print(f"== {args.dtype} M={m} N={n} weight={with_w}")
            rows = {
                "grad normkit": lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True),
                "grad eager": lambda: torch.autograd.grad(ye, inputs, dy, retain_graph=True),
                "grad py-identity*1": lambda: torch.autograd.grad(yi, (x,), dy, retain_graph=True),
                "grad x*1": lambda: torch.autograd.grad(ya, (x,), dy, retain_graph=True),
                "fwd+grad-graph normkit": lambda: nkt.rmsnorm(x, w),
                "fwd+grad-graph eager": lambda: F.rms_norm(x, (n,), w),
                "fwd no-grad normkit": lambda: nkt.rmsnorm(x.detach(), None if w is None else w.detach()),
                "fwd no-grad eager": lambda: F.rms_norm(x.detach(), (n,), None if w is None else w.detach()),
                "torch.empty_like": lambda: torch.empty_like(x),
            }
            if with_w and _ops._ext is not None:
                xd, wd = x.detach(), w.detach()
                _, _, rstd = nkt.rmsnorm_fwd(xd, wd, store_rstd=True)
                y_wc = nkt.rmsnorm(x, wd)  # weight without grad
                ye_wc = F.rms_norm(x, (n,), wd)
                rows.update({
                    "grad normkit x only": lambda: torch.autograd.grad(y, (x,), dy, retain_graph=True),
                    "grad eager x only": lambda: torch.autograd.grad(ye, (x,), dy, retain_graph=True),
                    "grad normkit w const": lambda: torch.autograd.grad(y_wc, (x,), dy, retain_graph=True),
                    "grad eager w const": lambda: torch.autograd.grad(ye_wc, (x,), dy, retain_graph=True),
                    "ext bwd weight": lambda: _ops._ext.rmsnorm_bwd(xd, wd, dy, rstd, None, None, None, None, 0.0),
                    "ext bwd no weight": lambda: _ops._ext.rmsnorm_bwd(xd, None, dy, rstd, None, None, None, None,
                                                                       0.0),
                    "grad normkit again": lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True),
                    "grad eager again": lambda: torch.autograd.grad(ye, inputs, dy, retain_graph=True),
                })
            for name, fn in rows.items():
                us = host_us(fn)
                inner = "  ".join(f"{k}={totals[k] / counts[k] * 1e6:.1f}" for k in sorted(totals))
                print(f"  host {name:24s} {us:8.1f} us/call   {inner}")


if __name__ == "__main__":
    main()
