#!/usr/bin/env python3
"""Where the host time of one eager no-grad RMSNorm call goes (issue 4 requirement 4:
M=1, N=4096 bf16 with a weight, <= 5 us per call over 10,000 calls).

Each line times one layer of the call on its own, as wall time per call over
back-to-back calls (median of --rounds rounds of --calls calls, a synchronize
closing each round), so that their differences say what each layer adds:

  normkit.torch.rmsnorm      the public call (what `normkit bench` reports): a C function
                             (_torch_C.public_rmsnorm) binding its arguments itself
  normkit.torch.rmsnorm(eps=)  the same with a keyword argument
  Python wrapper (before)    the public call as it was, a Python function calling
                             _torch_C.rmsnorm (rebuilt here, for comparison on one run)
  _torch_C.rmsnorm           the C++ eager path alone through pybind11 (checks, allocation, launch)
  _C.rmsnorm_fwd             normkit's C API on preallocated tensors: plan memo and launch only
  _ops._is_compiling         the Python wrapper's one check before the C++ entry
  _torch_C parse only        the C++ entry's argument conversion and first check (returns None)
  torch.empty_like           one output allocation by PyTorch's caching allocator
  cupy empty kernel          a driver launch of an empty kernel (the floor), when CuPy is there
  F.rms_norm                 PyTorch eager, for reference

and, for the calls that launch a kernel, whether the loop was bound by the host or
by the GPU: the kernel's own time per call by CUDA-graph replay (no host work) is
printed next to the host time. Where the host time per call is above it, the GPU
waited for the host and the host time is what the loop measured. (CUDA events around
the host loop cannot tell: they span the host's issue time either way.)

    python scripts/host_breakdown.py [--calls 10000] [--rounds 5] [--json OUT.json]

A diagnostic, not a test: needs a CUDA device.
"""

import argparse
import json
import statistics
import sys
import time


def host_args(doc, name):
    """The host-time scripts' command line (--calls, --rounds, --json), parsed; exits with a
    message naming `name` where there is no CUDA device (they time the GPU call's host path)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10000, help="calls per round (default 10000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (default 5)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"{name}: needs a CUDA device (this times the GPU call's host path)")
    return args


def main():
    args = host_args(__doc__, "host_breakdown")
    import torch
    import torch.nn.functional as F

    import normkit.torch as nkt
    from normkit.torch import _impl, _ops

    m, n = 1, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5
    out = torch.empty_like(x)
    x0 = torch.ones((), device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.current_stream().cuda_stream
    ext = _ops._ext
    c_fwd = _impl._C.rmsnorm_fwd

    def python_wrapper():
        # normkit.torch.rmsnorm before it became a C function: the wrapper's checks and
        # conversions, then pybind11's dispatch into the C++ path.
        if not _ops._is_compiling():
            result = ext.rmsnorm(x, w, None, None, None, None, float(1e-6), bool(False), float(0.0))
            if result is not None:
                return result
        raise RuntimeError("host_breakdown: the C++ path declined a plain call")

    def c_api():
        c_fwd(m, n, 0, x.data_ptr(), "bf16", 0, n, 0, "", 0, 0, out.data_ptr(), "bf16", 0, n, 0, "", 0, n,
              w.data_ptr(), "bf16", 0, "", 1, 0, 0, 1e-6, 0.0, 0, stream)

    calls = {
        "normkit.torch.rmsnorm": lambda: nkt.rmsnorm(x, w),
        "normkit.torch.rmsnorm(eps=)": lambda: nkt.rmsnorm(x, w, eps=1e-6),
        "Python wrapper (before)": python_wrapper if ext is not None else None,
        "_torch_C.rmsnorm": (lambda: ext.rmsnorm(x, w, None, None, None, None, 1e-6, False, 0.0))
        if ext is not None else None,
        "_C.rmsnorm_fwd": c_api,
        # The wrapper's own checks, and the C++ entry's argument conversion alone
        # (a 0-d x fails its first check and returns None before any allocation).
        "_ops._is_compiling": _ops._is_compiling,
        "_torch_C parse only": (lambda: ext.rmsnorm(x0, w, None, None, None, None, 1e-6, False, 0.0))
        if ext is not None else None,
        "torch.empty_like": lambda: torch.empty_like(x),
        "F.rms_norm": lambda: F.rms_norm(x, (n,), w, 1e-6),
    }
    try:
        import cupy

        empty = cupy.RawKernel('extern "C" __global__ void empty() {}', "empty")
        empty((1,), (32,), ())
        calls["cupy empty kernel"] = lambda: empty((1,), (32,), ())
    except Exception as e:  # CuPy is optional: the floor is then not measured
        print(f"cupy empty kernel: not measured ({type(e).__name__}: {e})")

    def graph_us(fn, calls=100, replays=20):
        """GPU time per call of fn by CUDA-graph replay (host work excluded)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / (calls * replays))
        return statistics.median(times)

    # The kernel each call launches, timed alone; the C++ path and the C API launch
    # normkit's kernel as the public call does.
    kernel_us = {}
    with torch.no_grad():
        nk_us = graph_us(lambda: nkt.rmsnorm(x, w))
        for name in ("normkit.torch.rmsnorm", "normkit.torch.rmsnorm(eps=)", "Python wrapper (before)",
                     "_torch_C.rmsnorm", "_C.rmsnorm_fwd"):
            kernel_us[name] = nk_us
        kernel_us["F.rms_norm"] = graph_us(lambda: F.rms_norm(x, (n,), w, 1e-6))

    print(f"normkit.torch.rmsnorm is {nkt.rmsnorm!r}")
    results = {}
    with torch.no_grad():
        for name, fn in calls.items():
            if fn is None:
                print(f"{name:28s} not available")
                continue
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            rounds = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                wall = time.perf_counter() - t  # host time to issue the calls
                torch.cuda.synchronize()
                rounds.append(wall / args.calls * 1e6)
            r = results[name] = {"us_per_call": statistics.median(rounds), "rounds_us": rounds}
            line = f"{name:28s} host {r['us_per_call']:6.2f} us/call"
            if name in kernel_us:
                r["kernel_us_graph"] = kernel_us[name]
                bound = "host-bound" if r["us_per_call"] > kernel_us[name] else "GPU-bound"
                line += f"   kernel {kernel_us[name]:5.2f} us by graph replay ({bound})"
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"M": m, "N": n, "dtype": "bf16", "calls": args.calls, "rounds": args.rounds,
                       "public_entry": repr(nkt.rmsnorm), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
