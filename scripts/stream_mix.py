#!/usr/bin/env python3
"""What PyTorch's own streaming kernels reach on this GPU, by the mix of reads and writes.

The norm kernels are judged against a device copy of the same bytes (one read stream,
one write stream). The backward without dresidual_out reads two tensors and writes one;
with it, three and one; the forward with a residual two and two. Whether a mix other
than the copy's can reach the copy's bandwidth at all is a property of the GPU and its
memory, not of normkit: this times plain PyTorch elementwise kernels of each mix, with
CUDA events, on tensors far larger than L2 (each call's bytes read fresh), and prints
GB/s and the ratio to the copy measured in the same run.

    python3 scripts/stream_mix.py [--elements 134217728] [--reps 40] [--json out.json]

One line per (dtype, mix); the median of --reps calls after 5 untimed ones.
"""

import argparse
import json
import statistics
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 27, help="elements of each tensor (default 2^27)")
    parser.add_argument("--reps", type=int, default=40, help="timed calls per mix (median reported)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.elements <= 0 or args.reps <= 0:
        parser.error("--elements and --reps must be positive")

    import torch

    if not torch.cuda.is_available():
        print("stream_mix: no CUDA device; nothing to measure", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, {args.elements} elements a tensor")

    def time_us(fn):
        for _ in range(5):
            fn()
        start = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        for s, e in zip(start, end):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(start, end))

    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        t = [torch.randn(args.elements, device=dev, dtype=dtype) for _ in range(5)]
        size = t[0].element_size() * args.elements
        # (name, reads, writes, call): every tensor is distinct, so each call streams all its bytes.
        mixes = [
            ("copy 1R1W", 1, 1, lambda: t[1].copy_(t[0])),
            ("add 2R1W", 2, 1, lambda: torch.add(t[0], t[1], out=t[2])),
            ("addcmul 3R1W", 3, 1, lambda: torch.addcmul(t[0], t[1], t[2], out=t[3])),
            ("fill 0R1W", 0, 1, lambda: t[4].fill_(1.0)),
            ("sum 1R0W", 1, 0, lambda: t[0].sum()),
        ]
        copy_gbps = None
        for name, reads, writes, fn in mixes:
            us = time_us(fn)
            gbps = (reads + writes) * size / us / 1e3
            copy_gbps = copy_gbps or gbps
            row = {"dtype": str(dtype).replace("torch.", ""), "mix": name, "reads": reads, "writes": writes,
                   "us": round(us, 2), "gbps": round(gbps, 1), "ratio_to_copy": round(gbps / copy_gbps, 3)}
            rows.append(row)
            print(f"{row['dtype']:9s} {name:13s} {us:9.2f} us {gbps:8.1f} GB/s  {gbps / copy_gbps:.3f} x copy")
        t.clear()
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                       "elements": args.elements, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
