#!/usr/bin/env python3
"""Why LayerNorm's long forward rows trail RMSNorm's: the forward of both norms with
and without a bias (the bench's LayerNorm always has one, its RMSNorm never), in the
plan's own shape and under NORMKIT_FORWARD_PLAN overrides, as a ratio to a device
copy of the same bytes (x read, out written) timed in the same process.

    python3 scripts/proto/fwd_param_probe.py [--cases FILE] [--reps 30] [--json OUT]

A case is `op params N dtype plan [NAME=VALUE ...]`, one a line: params `bias` or
`nobias`, `+res` appended for a residual (prenorm: residual_out written too, and the
copy moves both tensors); plan `-` for the plan's own; NAME=VALUE sets a NORMKIT_
switch for the case (e.g. NORMKIT_NVRTC_FLAGS=-DX=1), unset after it. Each case:
three input sets rotated (M*N = 2^27 each, nothing served from L2), the first call
checked against an fp32 reference (max abs error printed), then the median of --reps
calls by CUDA events. A diagnostic, not a test: needs a CUDA device.
"""

import argparse
import json
import os
import statistics

import torch

import normkit
import normkit.torch as nkt

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEFAULT_CASES = """
layernorm bias 131072 bf16 -
layernorm nobias 131072 bf16 -
rmsnorm nobias 131072 bf16 -
rmsnorm bias 131072 bf16 -
"""


def median_us(fn, sets, reps):
    for i in range(3):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = sets[i % len(sets)]
        a.record()
        fn(*args)
        e.record()
        e.synchronize()
        times.append(a.elapsed_time(e) * 1000.0)
    return statistics.median(times)


def reference(op, x, w, b, eps):
    h = x.float()
    if op == "layernorm":
        h = h - h.mean(dim=-1, keepdim=True)
    y = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + eps) * w.float()
    return y + b.float() if b is not None else y


def run_case(op, params, n, dtype, plan, env, reps):
    os.environ["NORMKIT_FORWARD_PLAN"] = "" if plan == "-" else plan
    for k, v in env.items():
        os.environ[k] = v
    normkit._C.reload_config()
    try:
        return _run_case(op, params, n, dtype, plan, reps)
    finally:
        for k in env:
            del os.environ[k]


def _run_case(op, params, n, dtype, plan, reps):
    bias = params.split("+")[0]
    res = params.endswith("+res")
    dt = DTYPES[dtype]
    m = (1 << 27) // n
    gen = torch.Generator(device="cuda").manual_seed(n)
    sets = []
    for _ in range(3):
        x = torch.randn(m, n, device="cuda", dtype=dt, generator=gen)
        r = torch.randn(m, n, device="cuda", dtype=dt, generator=gen) if res else None
        sets.append((x, torch.empty_like(x), r, torch.empty_like(x) if res else None))
    w = (torch.rand(n, device="cuda", generator=gen) + 0.5).to(dt)
    b = torch.randn(n, device="cuda", dtype=dt, generator=gen) if bias == "bias" else None
    fn = nkt.layernorm if op == "layernorm" else nkt.rmsnorm
    with torch.no_grad():
        x0, r0 = sets[0][0][:64], (sets[0][2][:64] if res else None)
        got = fn(x0, w, b, r0, eps=1e-5, prenorm=res)
        got = got[0] if res else got
        err = (got.float() - reference(op, x0.float() + (r0.float() if res else 0), w, b, 1e-5)).abs().max().item()

        def copy(x, o, r, o2):
            o.copy_(x)
            if r is not None:
                o2.copy_(r)

        ours = median_us(lambda x, _o, r, _o2: fn(x, w, b, r, eps=1e-5, prenorm=res), sets, reps)
        copy = median_us(copy, sets, reps)
    del sets
    torch.cuda.empty_cache()
    return {"op": op, "params": params, "n": n, "dtype": dtype, "plan": plan, "us": ours, "copy_us": copy,
            "ratio_to_copy": copy / ours, "max_abs_err": err}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="cases file (default: four rows at N=131072)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    text = open(a.cases).read() if a.cases else DEFAULT_CASES
    rows = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        op, params, n, dtype, plan, *env = line.split()
        env = dict(kv.split("=", 1) for kv in env)
        label = " ".join([plan] + [f"{k}={v}" for k, v in sorted(env.items())])
        try:
            row = run_case(op, params, int(n), dtype, plan, env, a.reps)
            row["env"] = env
        except Exception as e:  # one failing plan must not end the call
            row = {"op": op, "params": params, "env": env, "n": int(n), "dtype": dtype, "plan": plan, "error": f"{type(e).__name__}: {e}"}
            print(f"{op:9} {params:10} N={n:>6} {dtype} {label:60} FAILED {row['error'][:200]}", flush=True)
        else:
            print(f"{op:9} {params:10} N={n:>6} {dtype} {label:60} {row['us']:8.1f} us  copy {row['copy_us']:8.1f} us  "
                  f"ratio {row['ratio_to_copy']:.3f}  err {row['max_abs_err']:.3g}", flush=True)
        rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
