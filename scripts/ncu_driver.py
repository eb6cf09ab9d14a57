#!/usr/bin/env python3
"""One norm's training step (forward, then backward through autograd) a few times on
random inputs, for Nsight Compute to profile a chosen launch of the backward (see
scripts/ncu_backward.sh). A diagnostic, not a test: it checks nothing.

    python3 scripts/ncu_driver.py --op layernorm --dtype bf16 --n 65536 [--m ROWS] [--dro] [--calls 4]
    python3 scripts/ncu_driver.py --forward liger --op rmsnorm --dtype fp32 --n 512 --dro

--forward IMPL: inference forward calls alone (under no_grad, as `normkit bench` times
them), of normkit or of Liger-Kernel (its RMSNorm, fused add RMSNorm or LayerNorm
function, as the benchmark calls them), so that a peer's kernel is profiled on the
same inputs as ours (ncu_backward.sh's KERNEL= names the kernel to profile).

--dro: a residual with prenorm=True, so the backward gets dresidual_out (residual_out's
gradient); the residual itself does not require grad. M defaults to 2^27 / N, the
sweep's shapes.
"""

import argparse

import torch

import normkit.torch as nkt

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", choices=("rmsnorm", "layernorm"), required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--n", type=int, required=True, help="the normalized size")
    ap.add_argument("--m", type=int, default=0, help="rows (default 2^27 / N)")
    ap.add_argument("--dro", action="store_true", help="with a residual and prenorm: the backward's dresidual_out")
    ap.add_argument("--calls", type=int, default=4, help="training steps; the first compiles the kernels")
    ap.add_argument("--forward", choices=("normkit", "liger"), default=None,
                    help="forward calls alone under no_grad, of this implementation (--dro: with a residual)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("no CUDA device: this drives the GPU kernels for Nsight Compute")
    if a.n < 1 or a.calls < 1 or a.m < 0:
        ap.error("--n and --calls must be >= 1, --m >= 0")
    dt, m = DTYPES[a.dtype], a.m or max(1, (1 << 27) // a.n)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=dt, generator=gen)

    if a.forward:
        forward_calls(a, m, rand)
        return
    x, w = rand(m, a.n).requires_grad_(), rand(a.n).requires_grad_()
    b = rand(a.n).requires_grad_() if a.op == "layernorm" else None
    res = rand(m, a.n) if a.dro else None
    douts = [rand(m, a.n)] + ([rand(m, a.n)] if a.dro else [])
    for _ in range(a.calls):
        result = normkit_call(a, x, w, b, res)
        outs = list(result) if a.dro else [result]
        torch.autograd.backward(outs, douts)
    torch.cuda.synchronize()
    print(f"{a.op} {a.dtype} M={m} N={a.n} dro={a.dro}: {a.calls} steps")


def normkit_call(a, x, w, b, res):
    if a.op == "rmsnorm":
        return nkt.rmsnorm(x, w, residual=res, prenorm=a.dro)
    return nkt.layernorm(x, w, b, res, prenorm=a.dro)


def forward_calls(a, m, rand):
    x, w = rand(m, a.n), rand(a.n)
    b = rand(a.n) if a.op == "layernorm" else None
    res = rand(m, a.n) if a.dro else None
    if a.forward == "liger":
        # The benchmark's own calls of Liger-Kernel (normkit.bench.impls), so that the
        # profiled kernel is the one `normkit bench` times.
        from normkit.bench.impls import Liger

        liger = Liger(torch)
        liger.load()
        if a.op == "layernorm":
            if a.dro:
                raise SystemExit("Liger-Kernel's LayerNorm has no residual add")
            if liger.layer is None:
                raise SystemExit("liger_kernel.ops.layer_norm could not be imported")

            def call():
                return liger.ln_forward(x, w, b, None)
        else:
            def call():
                return liger.forward(x, w, res)
    else:
        def call():
            return normkit_call(a, x, w, b, res)
    with torch.no_grad():
        for _ in range(a.calls):
            call()
    torch.cuda.synchronize()
    print(f"{a.forward} {a.op} {a.dtype} M={m} N={a.n} residual={a.dro}: {a.calls} forward calls")


if __name__ == "__main__":
    main()
