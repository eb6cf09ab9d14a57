#!/usr/bin/env python3
"""Where a normkit backward call's time goes, kernel by kernel, on the GPU machine.

`normkit bench` times a backward call as a whole (the row kernel, the dW/dB reduction,
any memset); Nsight Compute times one kernel alone, caches flushed. Neither says how a
call's time splits between its kernels when the calls run back to back as the
benchmark runs them. This runs the benchmark's backward calls (rmsnorm_bwd /
layernorm_bwd on rstd and mean from the forward, input sets rotated so that nothing is
served from L2) and prints, per shape: the call's time by CUDA events, each kernel's
mean time from the profiler (CUPTI), and the rest (launch gaps). A diagnostic: it checks
nothing.

    python3 scripts/bwd_kernel_times.py --op rmsnorm --dtype bf16 --n 2048,4096,8192 [--dro] [--calls 30]
        [--between flush|idle]

--between separates the calls, to tell what a kernel loses by running right after the
call before it (what Nsight Compute, which replays one kernel alone, does not see):
`flush` reads a buffer of twice the L2 between calls (the previous call's dirty lines are
written back during that read, not during the next row kernel), `idle` synchronizes and
sleeps 2 ms (the GPU starts each call idle, as under a profiler's replay). The call's
time by events then includes what separates them, so only the kernels' times are printed.
"""

import argparse
import collections
import time

import torch

import normkit.torch as nkt

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def short_name(name):
    # "void nk::norm_bwd_kernel<nk::RowConfig<...>, ...>(nk::NormBwdParams)" -> "norm_bwd_kernel"
    head = name.split("<", 1)[0].split("(", 1)[0]
    return head.replace("void ", "").split("::")[-1].strip()


def make_calls(op, dt, m, n, dro, sets):
    calls = []
    for _ in range(sets):
        x, w, dout = (torch.randn(*s, device="cuda", dtype=dt) for s in ((m, n), (n,), (m, n)))
        dres = torch.randn(m, n, device="cuda", dtype=dt) if dro else None
        if op == "rmsnorm":
            _, h, rstd = nkt.rmsnorm_fwd(x, w, store_rstd=True)
            calls.append(lambda h=h, w=w, d=dout, r=rstd, q=dres: nkt.rmsnorm_bwd(
                h, w, d, r, dresidual_out=q, has_residual=q is not None))
        else:
            b = torch.randn(n, device="cuda", dtype=dt)
            _, h, mean, rstd = nkt.layernorm_fwd(x, w, b, store_rstd=True, store_mean=True)
            calls.append(lambda h=h, w=w, d=dout, mu=mean, r=rstd, q=dres: nkt.layernorm_bwd(
                h, w, d, mu, r, dresidual_out=q, has_bias=True, has_residual=q is not None))
    return calls


def between_calls(kind):
    """What runs between two timed calls (None: nothing, the benchmark's way)."""
    if kind == "flush":
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        scratch = torch.ones(2 * l2 // 4, device="cuda", dtype=torch.float32)
        return lambda: scratch.sum()
    if kind == "idle":
        def idle():
            torch.cuda.synchronize()
            time.sleep(0.002)
        return idle
    return None


def one_shape(a, n):
    dt = DTYPES[a.dtype]
    m = max(1, (1 << 27) // n)
    # Enough sets that a set's tensors have left the 50 MB L2 before it comes back.
    sets = max(2, -(-(128 << 20) // (m * n * dt.itemsize)) + 1)
    calls = make_calls(a.op, dt, m, n, a.dro, sets)
    for f in calls:
        f()  # compile, allocate
    torch.cuda.synchronize()
    separate = between_calls(a.between)
    call_us = None
    if separate is None:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(a.calls):
            calls[i % sets]()
        stop.record()
        torch.cuda.synchronize()
        call_us = start.elapsed_time(stop) * 1e3 / a.calls
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(a.calls):
            if separate is not None:
                separate()
            calls[i % sets]()
        torch.cuda.synchronize()
    per_kernel = collections.defaultdict(float)
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            per_kernel[short_name(e.name)] += e.device_time_total / a.calls
    kernels = " ".join(f"{k}={v:.1f}" for k, v in sorted(per_kernel.items(), key=lambda kv: -kv[1]))
    if call_us is None:
        print(f"{a.op} {a.dtype} dro={int(a.dro)} M={m} N={n} (between calls: {a.between}): {kernels}", flush=True)
        return
    rest = call_us - sum(per_kernel.values())
    print(f"{a.op} {a.dtype} dro={int(a.dro)} M={m} N={n}: call {call_us:.1f} us | {kernels} | rest {rest:.1f} us",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", choices=("rmsnorm", "layernorm"), required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--n", required=True, help="normalized sizes, comma-separated")
    ap.add_argument("--dro", action="store_true", help="with dresidual_out (a residual, prenorm)")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--between", choices=("none", "flush", "idle"), default="none",
                    help="what separates the calls (see above); default none, back to back as the benchmark")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("no CUDA device: this times the GPU kernels")
    for n in (int(v) for v in a.n.split(",")):
        one_shape(a, n)


if __name__ == "__main__":
    main()
