"""How a call is timed, and how its inputs are kept out of the caches.

Every measurement takes one callable per input set and cycles through the sets,
so that no timed call finds its inputs in L2 (on a CPU: the last-level cache)
left there by the call before: `rotation_count` makes the sets' total at least
twice the cache. Three methods, one per situation:

- CUDA events around each single call (sweep shapes): their calls take 50 us and
  more, far longer than a launch, so the stream stays ahead of the host and the
  events time the device alone. One untimed call is queued first so that the
  first timed call does not start from an idle stream.
- CUDA-graph replay (decode shapes): one call is shorter than the host's launch
  overhead, so graphs of calls over consecutive sets are captured and replayed in
  turn; the time of a replay divided by its calls is the device time per call
  (launch gaps inside a graph included, host overhead not). Capture needs a
  non-default stream, and autograd's backward runs on its forward's stream, so a
  decode case runs entirely on the timer's stream; sweep cases run on the default
  stream, where a library that ignores PyTorch's current stream still lands.
- Wall clock (the CPU fallback), per call for sweep shapes and per pass over the
  sets for decode shapes.

The caller makes sure the first call (JIT compilation for normkit and the peers)
happened before any of this: warmup here only settles clocks and allocators.

A row timed while the device was disturbed (a neighbour's traffic, a clock change)
shows it as a wide spread of its samples. `steady` times such a row again, up to
RETIMES more times, and keeps the run of least spread (p80 over p20): in the H200
sweeps 2 of 724 rows spread over SPREAD_LIMIT, in an H100 sweep 12, among them one
where every implementation measured 20-50 % slow at one shape only.
"""

import functools
import math
import os
import statistics
import time

GPU_UNKNOWN_L2 = 128 << 20  # assumed when PyTorch does not report the L2 size: larger than any current GPU's
CPU_UNKNOWN_CACHE = 32 << 20
# The CPU mode rotates over at most this much: a shared host's last-level cache (hundreds of MiB
# on a server, most of it other tenants') would otherwise make every case allocate and fill
# gigabytes. Its result is a sanity check of the fallback, not a bandwidth record.
CPU_CACHE_CAP = 64 << 20
CPU_DECODE_CALLS = 64  # calls per wall-clock sample of a decode shape (sets keep rotating across samples)
MAX_SETS = 8192  # enough for 2x an L2 of 64 MiB at 16 KiB per set; more only makes set-up slow
GRAPH_CALLS = 512  # calls per captured graph (one timed sample)
SPREAD_LIMIT = 1.10  # p80 / p20 of a row's samples above which it is timed again (median of the sweeps: 1.005)
RETIMES = 2
EVENTS = "cuda-events"
GRAPH = "cuda-graph"
WALL = "wall-clock"


def rotation_count(set_bytes, cache_bytes):
    """Input sets needed for their total to exceed twice the cache (at least 2)."""
    return max(2, min(MAX_SETS, math.ceil(2 * cache_bytes / max(1, set_bytes))))


def percentile(sorted_values, q):
    """Linear interpolation between the closest ranks (q in [0, 1])."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_us):
    """Median, min, p20 and p80 of per-call times in microseconds."""
    s = sorted(samples_us)
    return {"us": statistics.median(s), "us_min": s[0], "us_p20": percentile(s, 0.2), "us_p80": percentile(s, 0.8),
            "reps": len(s)}


def spread(stats):
    """p80 over p20 of summarize's statistics (1.0 for a perfectly steady run)."""
    return stats["us_p80"] / stats["us_p20"] if stats["us_p20"] > 0 else 1.0


def steady(measure, limit=SPREAD_LIMIT, retimes=RETIMES):
    """Runs measure() -> (samples, method, calls per sample) until a run's spread is at most
    `limit`, at most 1 + retimes runs; returns (statistics of the run of least spread, method,
    calls per sample, runs made)."""
    best = None
    for run in range(1, retimes + 2):
        samples, method, calls = measure()
        stats = summarize(samples)
        if best is None or spread(stats) < spread(best[0]):
            best = (stats, method, calls)
        if spread(stats) <= limit:
            break
    return best + (run,)


def gpu_cache_bytes(torch, device):
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return (size, "L2_cache_size") if size else (GPU_UNKNOWN_L2, "assumed (PyTorch does not report the L2 size)")


def cpu_cache_bytes():
    """The largest CPU cache level from sysfs (Linux; else an assumption), capped at CPU_CACHE_CAP."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = 0
    try:
        for entry in os.listdir(base):
            if not entry.startswith("index"):
                continue
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * scale)
    except (OSError, ValueError):
        best = 0
    if not best:
        return CPU_UNKNOWN_CACHE, "assumed (no sysfs cache size)"
    if best > CPU_CACHE_CAP:
        return CPU_CACHE_CAP, f"sysfs: largest cache level {best} bytes, capped at {CPU_CACHE_CAP}"
    return best, "sysfs: largest cache level"


class GpuTimer:
    """Times callables on the current stream; graphs are captured on `stream`, which the caller
    makes current for the whole of a decode case."""

    def __init__(self, torch, stream, reps, warmup):
        self.torch = torch
        self.stream = stream
        self.reps = reps
        self.warmup = warmup

    def measure(self, fns, decode):
        """(per-call samples in us, method, calls per sample)."""
        if decode:
            return self._graph(fns), GRAPH, min(len(fns), GRAPH_CALLS)
        return self._events(fns), EVENTS, 1

    def _new_events(self):
        event = self.torch.cuda.Event
        return ([event(enable_timing=True) for _ in range(self.reps)],
                [event(enable_timing=True) for _ in range(self.reps)])

    def _events(self, fns):
        for i in range(self.warmup):
            fns[i % len(fns)]()
        self.torch.cuda.synchronize()
        fns[-1]()  # queued ahead, so the first timed call does not start from an idle stream
        starts, ends = self._new_events()
        for r in range(self.reps):
            starts[r].record()
            fns[r % len(fns)]()
            ends[r].record()
        ends[-1].synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def _graph(self, fns):
        """Graphs of up to GRAPH_CALLS calls each, together covering every set once, replayed in
        turn: a set comes back only after all the others, yet a sample is never longer than
        GRAPH_CALLS calls (a graph over thousands of sets would make every replay slow)."""
        torch = self.torch
        for i in range(self.warmup):
            fns[i % len(fns)]()
        chunks = [fns[i:i + GRAPH_CALLS] for i in range(0, len(fns), GRAPH_CALLS)]
        graphs = []
        try:
            for chunk in chunks:
                graphs.append(torch.cuda.CUDAGraph())
                with torch.cuda.graph(graphs[-1], stream=self.stream):
                    for fn in chunk:
                        fn()
            for graph in graphs:
                graph.replay()  # the first replay uploads the graph
            torch.cuda.synchronize()
            graphs[-1].replay()  # queued ahead, as in _events
            starts, ends = self._new_events()
            for r in range(self.reps):
                starts[r].record()
                graphs[r % len(graphs)].replay()
                ends[r].record()
            ends[-1].synchronize()
            return [s.elapsed_time(e) * 1e3 / len(chunks[r % len(chunks)])
                    for r, (s, e) in enumerate(zip(starts, ends))]
        finally:
            del graphs


class CpuTimer:
    def __init__(self, reps, warmup):
        self.reps = reps
        self.warmup = warmup

    def measure(self, fns, decode):
        """Single calls for sweep shapes; CPU_DECODE_CALLS calls per sample for decode shapes, whose
        calls are too short for one perf_counter pair each."""
        calls = min(len(fns), CPU_DECODE_CALLS) if decode else 1
        for i in range(self.warmup):
            fns[i % len(fns)]()
        samples = []
        k = 0
        for _ in range(self.reps):
            start = time.perf_counter()
            for _ in range(calls):
                fns[k % len(fns)]()
                k += 1
            samples.append((time.perf_counter() - start) * 1e6 / calls)
        return samples, WALL, calls


def copy_fns(torch, nbytes, device, cache_bytes):
    """Callables that each copy_ half of `nbytes` (read + write = nbytes), rotated like the inputs."""
    half = max(16, -(-nbytes // 32) * 16)  # nbytes / 2, in whole 16-byte vectors
    count = rotation_count(2 * half, cache_bytes)
    src = torch.zeros(count, half, dtype=torch.uint8, device=device)
    dst = torch.zeros_like(src)  # touched now: on a CPU, first-touch page faults would be timed
    return [functools.partial(torch.Tensor.copy_, d, s) for d, s in zip(dst.unbind(), src.unbind())], 2 * half


def reference_copy(torch, timer, device, nbytes):
    """GB/s of one copy_ of `nbytes` (2 * nbytes moved), the bandwidth reference of DESIGN §4."""
    src = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    dst = torch.zeros_like(src)
    samples, method, _ = timer.measure([functools.partial(torch.Tensor.copy_, dst, src)], decode=False)
    result = summarize(samples)
    return {"bytes_copied": nbytes, "bytes_moved": 2 * nbytes, "us": result["us"],
            "gbps": 2 * nbytes / result["us"] / 1e3, "reps": result["reps"], "method": method,
            "what": "torch.Tensor.copy_ of one buffer into another (read + write counted), median"}


def host_loop(fn, calls, rounds, sync):
    """Wall time per call of `calls` back-to-back calls (one sync closing each round), per round, in us."""
    for _ in range(min(calls, 200)):
        fn()
    sync()
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per_round.append((time.perf_counter() - start) * 1e6 / calls)
    return per_round
