"""The sweep: for each case, its inputs and a copy of the same bytes, then every
implementation checked and timed on those same inputs.

Order matters for what the numbers mean, so it is fixed here:
1. the reference copy and the host overhead first: cheap, and what requirement 4
   asks for survives even when a long sweep is cut short;
2. per case, the per-shape copy is timed in the same way (same rotation, same
   method) as the kernels it is compared with;
3. per implementation, the first call (which JIT-compiles) is the checked call and
   is never timed; a failure or a disagreement becomes that row's status. The
   in-place fused adds overwrite their inputs, so their checked call runs on a fresh
   copy of input set 0 taken before any implementation ran (`pristine`), then one
   untimed call on the sets, whose values then drift from call to call (never
   re-initialized inside the timed region).
The JSON is rewritten after every case (meta.complete stays false until the end),
so a run stopped by a time limit still leaves every finished row on disk.
"""

import contextlib
import dataclasses
import math
import os
import statistics
import time

from . import check, impls, meta, plot, report, shapes, timing, traffic
from .options import PEERS, BenchUsageError

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
GPU_REFERENCE_COPY = 1 << 30  # DESIGN §4: the copy reference is taken over at least 1 GiB
CPU_REFERENCE_COPY = 256 << 20
# Buffer sets the per-shape copy is measured on (the fastest counts; see _run_case).
COPY_ALLOCATIONS = 3
HOST_M, HOST_N = 1, 4096


@dataclasses.dataclass
class Inputs:
    x: object
    w: object
    r: object  # None without residual
    dout: object  # None in forward
    dres: object  # None in forward or without residual
    b: object = None  # the bias: LayerNorm and fused_add_layernorm only


def _first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def make_sets(torch, case, device, cache_bytes, gen):
    """Input sets for a case: one allocation per tensor role, cut into per-set views that start on
    256-byte boundaries (what vectorized kernels expect of a fresh allocation)."""
    dtype = getattr(torch, DTYPES[case.dtype])
    element = torch.empty((), dtype=dtype).element_size()
    roles = [("x", (case.M, case.N)), ("w", (case.N,))]
    if case.has_bias:
        roles.append(("b", (case.N,)))
    if case.residual:
        roles.append(("r", (case.M, case.N)))
    if case.direction == "bwd":
        roles.append(("dout", (case.M, case.N)))
        if case.residual:
            roles.append(("dres", (case.M, case.N)))
    align = 256 // element
    strides = {name: -(-math.prod(shape) // align) * align for name, shape in roles}
    count = timing.rotation_count(sum(strides.values()) * element, cache_bytes)
    views = {}
    for name, shape in roles:
        buf = torch.empty(count * strides[name], dtype=dtype, device=device)
        if name == "w":
            buf.uniform_(0.5, 1.5, generator=gen)
        elif name == "b":
            buf.uniform_(-0.5, 0.5, generator=gen)
        else:
            buf.normal_(generator=gen)
        per = math.prod(shape)
        views[name] = [buf[i * strides[name]:i * strides[name] + per].view(shape) for i in range(count)]
    none = [None] * count
    return [Inputs(views["x"][i], views["w"][i], views.get("r", none)[i], views.get("dout", none)[i],
                   views.get("dres", none)[i], views.get("b", none)[i])
            for i in range(count)]


def fresh_copy(inputs):
    """Input set with its own x and residual (what the in-place fused adds overwrite); the rest shared."""
    return dataclasses.replace(inputs, x=inputs.x.clone(), r=None if inputs.r is None else inputs.r.clone())


def _mode(torch, opts):
    """(gpu?, why this mode)."""
    if opts.device == "cpu":
        return False, "--device cpu"
    if torch.cuda.is_available():
        return True, f"--device {opts.device}: PyTorch sees {torch.cuda.device_count()} CUDA device(s)"
    if opts.device == "cuda":
        raise BenchUsageError("--device: cuda was asked for but PyTorch sees no CUDA device")
    return False, "no CUDA device visible to PyTorch (--device auto)"


def load_impls(torch, opts, gpu):
    """(implementations to run, normkit first; the `implementations` meta of every one)."""
    normkit = impls.Normkit(torch)
    info = {"normkit": {"status": "available", "why": None, "version": normkit.load(), "timed": normkit.timed,
                        "timed_by_op": normkit.timed_by_op()}}
    run = [normkit]
    for name in PEERS:
        impl = impls.BY_NAME[name](torch)
        entry = {"status": "available", "why": None, "version": None, "timed": impl.timed,
                 "timed_by_op": impl.timed_by_op()}
        info[name] = entry
        if name not in opts.peers:
            entry.update(status="not requested", why="not in --peers")
            continue
        if not gpu and opts.peers_all and name != "eager":
            entry.update(status="skipped", why="CPU mode with --peers all runs PyTorch eager only (name a peer "
                                               "in --peers to run it on the CPU where it can)")
            continue
        try:
            entry["version"] = impl.load()
        except ImportError as e:
            entry.update(status="not installed", why=_first_line(e))
            continue
        except Exception as e:  # a broken install is a finding, not a crash of the benchmark
            entry.update(status="import failed", why=_first_line(e))
            continue
        if not gpu and impl.gpu_only:
            entry.update(status="skipped", why="needs a CUDA device (CPU mode)")
            continue
        run.append(impl)
    return run, info


class Bench:
    def __init__(self, torch, opts, gpu, device, cache_bytes, timer, live):
        self.torch = torch
        self.opts = opts
        self.gpu = gpu
        self.device = device
        self.cache_bytes = cache_bytes
        self.timer = timer
        self.live = live
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(0)

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def run_case(self, case, implementations):
        # A decode case runs on the timer's own stream from its first tensor on: graphs are captured
        # there, and autograd runs a backward on the stream its forward ran on (timing's docstring).
        on_stream = self.gpu and case.kind == shapes.DECODE
        with (self.torch.cuda.stream(self.timer.stream) if on_stream else contextlib.nullcontext()):
            return self._run_case(case, implementations)

    def _run_case(self, case, implementations):
        torch = self.torch
        decode = case.kind == shapes.DECODE
        t = traffic.traffic(case.direction, case.dtype, case.M, case.N, case.residual, case.op)
        self.live.status(f"{case.label}: inputs and copy")
        sets = make_sets(torch, case, self.device, self.cache_bytes, self.gen)
        # The copy of the same bytes, on COPY_ALLOCATIONS fresh buffer sets, the fastest kept: on the
        # H200 the same copy ran at ~3750 or ~4180 GB/s from one shape to the next in one run (the
        # norm kernels' own GB/s moved ~1%), which made ratio_to_copy jump by 0.1 between runs.
        copies = []
        for _ in range(COPY_ALLOCATIONS):
            fns, copy_bytes = timing.copy_fns(torch, t.bytes, self.device, self.cache_bytes)
            copies.append(timing.summarize(self.timer.measure(fns, decode)[0]))
            del fns
        copy = min(copies, key=lambda c: c["us"])
        base = {"op": case.op, "direction": case.direction, "dtype": case.dtype, "M": case.M, "N": case.N,
                "residual": case.residual, "kind": case.kind, "bytes": t.bytes, "bytes_formula": t.formula,
                "input_sets": len(sets), "copy_us": copy["us"], "copy_gbps": copy_bytes / copy["us"] / 1e3,
                "copy_us_allocations": [c["us"] for c in copies]}
        rows = []
        # Forward is timed as inference (no rstd stored, no graph built); backward needs grad mode.
        with (torch.no_grad() if case.direction == "fwd" else torch.enable_grad()):
            try:
                ref, ref_error = check.reference(torch, case, sets[0], impls.EPS), None
            except Exception as e:  # without a reference nothing can be checked, so nothing is timed
                ref, ref_error = None, f"fp32 reference failed: {_first_line(e)}"
            # The fused adds overwrite the sets as they are timed: each implementation is checked on its
            # own fresh copy of set 0, as it was before anything ran.
            self.pristine = fresh_copy(sets[0]) if case.fused_add else None
            self.normkit_outputs = None
            for impl in implementations:
                row = dict(base, impl=impl.name, status="ok", reason=None, timed=impl.describe(case),
                           method=None, calls_per_sample=None, us=None, us_min=None, us_p20=None, us_p80=None,
                           reps=None, gbps=None, ratio_to_copy=None, normkit_speedup=None, setup_s=None, check=None)
                why = impl.unsupported(case)
                if why:
                    row.update(status="unsupported", reason=why)
                elif ref_error:
                    row.update(status="failed", reason=ref_error)
                else:
                    self.live.status(f"{case.label}: {impl.name}")
                    self._measure(impl, case, sets, ref, row)
                    if row["status"] == "ok" and rows and rows[0]["status"] == "ok" and impl.name != "normkit":
                        row["normkit_speedup"] = row["us"] / rows[0]["us"]
                rows.append(row)
                self.live.row(row)
        del sets, ref
        self.normkit_outputs = self.pristine = None
        if self.gpu:
            torch.cuda.empty_cache()
        return rows

    def _measure(self, impl, case, sets, ref, row):
        fns = outputs = None
        try:
            start = time.perf_counter()
            if case.fused_add:
                # In place: checked on a fresh copy (compiling on first use), then timed on the sets.
                outputs = impl.prepare(case, [fresh_copy(self.pristine)])[0]()
                fns = impl.prepare(case, sets)
                fns[0]()  # untimed: a recompile for the sets' layout (views at offsets) would happen here
            else:
                fns = impl.prepare(case, sets)
                outputs = fns[0]()  # compiles on first use: checked, never timed
            self.sync()
            row["setup_s"] = time.perf_counter() - start
            is_normkit = impl.name == "normkit"
            row["check"], why = check.agreement(case, outputs, ref, None if is_normkit else self.normkit_outputs)
            if is_normkit and why is None:
                self.normkit_outputs = outputs
            outputs = None
            if why:
                row.update(status="failed", reason=why)
                return
            # Timed again where disturbed on the GPU only: the CPU fallback's wall clock on a
            # shared host is a sanity check, and its spread would triple the CPU run's time.
            stats, method, calls, runs = timing.steady(lambda: self.timer.measure(fns, case.kind == shapes.DECODE),
                                                       retimes=timing.RETIMES if self.gpu else 0)
            row.update(stats, method=method, calls_per_sample=calls, gbps=row["bytes"] / stats["us"] / 1e3,
                       ratio_to_copy=row["copy_us"] / stats["us"])
            if runs > 1:
                row["timings"] = runs
        except Exception as e:  # any failure of one implementation on one shape is that row's result
            row.update(status="failed", reason=_first_line(e))
        finally:
            del fns, outputs
            try:
                self.sync()
            except Exception:
                pass  # a broken context is reported by the rows that follow


def host_overhead(torch, gpu, device, opts):
    """Requirement 4: wall time per warm no-grad call at M=1, N=4096 bf16 with a weight."""
    if opts.host_calls == 0:
        return None
    import normkit.torch as nkt
    import torch.nn.functional as F

    x = torch.randn(HOST_M, HOST_N, dtype=torch.bfloat16, device=device)
    w = torch.rand(HOST_N, dtype=torch.bfloat16, device=device) + 0.5
    calls = {"normkit": ("normkit.torch.rmsnorm(x, weight) (= normkit.rmsnorm)",
                         lambda: nkt.rmsnorm(x, w, eps=impls.EPS)),
             "eager": ("torch.nn.functional.rms_norm(x, (4096,), weight, eps)",
                       lambda: F.rms_norm(x, (HOST_N,), w, impls.EPS))}
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    results = []
    with torch.no_grad():
        for name, (text, fn) in calls.items():
            entry = {"impl": name, "call": text, "status": "ok", "reason": None, "us_per_call": None,
                     "rounds_us": None}
            try:
                rounds = timing.host_loop(fn, opts.host_calls, opts.host_rounds, sync)
                entry.update(us_per_call=statistics.median(rounds), rounds_us=rounds)
            except Exception as e:
                entry.update(status="failed", reason=_first_line(e))
            results.append(entry)
    from normkit.torch import _ops

    what = ("wall time per call of back-to-back calls on the same warm inputs, one synchronize closing each "
            "round; median over the rounds")
    if not gpu:
        what += "; on the CPU the call also does the work, so this is not host overhead alone"
    return {"what": what, "M": HOST_M, "N": HOST_N, "dtype": "bf16", "weight": True, "grad": False,
            "device": "cuda" if gpu else "cpu", "calls_per_round": opts.host_calls, "rounds": opts.host_rounds,
            "normkit_cpp_eager_path": _ops._ext is not None, "results": results}


def latency(rows):
    """Decode shapes, one entry per case: each implementation's time per call (None if it did not run)."""
    entries = {}
    for row in rows:
        if row["kind"] != shapes.DECODE:
            continue
        key = (row["op"], row["dtype"], row["direction"], row["residual"], row["M"], row["N"])
        entry = entries.setdefault(key, {"op": row["op"], "dtype": row["dtype"], "direction": row["direction"],
                                         "residual": row["residual"], "M": row["M"], "N": row["N"],
                                         "method": None, "copy_us": row["copy_us"], "us": {}})
        entry["us"][row["impl"]] = row["us"]
        entry["method"] = entry["method"] or row["method"]
    return list(entries.values())


def run(opts, argv):
    """The whole benchmark; returns the exit status (1 when a normkit row failed)."""
    console = report.Output()
    try:
        import torch
    except ImportError as e:
        raise BenchUsageError(f"normkit bench needs PyTorch ({e})") from None
    gpu, mode_reason = _mode(torch, opts)
    case_list = shapes.cases(opts, gpu)  # raises on bad --elements before anything slow
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    cache_bytes, cache_source = timing.gpu_cache_bytes(torch, device) if gpu else timing.cpu_cache_bytes()
    if not gpu:
        console.line(f"CPU mode ({mode_reason}): benchmarking normkit's CPU fallback against PyTorch CPU")
    implementations, impl_info = load_impls(torch, opts, gpu)
    os.makedirs(opts.out, exist_ok=True)
    json_path = os.path.join(opts.out, "bench.json")
    started = time.perf_counter()
    doc = {"schema_version": 1,
           "meta": meta.collect(torch, gpu, mode_reason, meta.device_info(torch, gpu, device, cache_bytes,
                                                                          cache_source), argv),
           "rows": [], "latency": [], "host_overhead": None}
    # Numbers taken under forced plans, another memory class or extra NVRTC flags are not the
    # defaults': say so before the first row, as the record does (meta.normkit_environment).
    switches = doc["meta"]["normkit_environment"]
    if switches:
        console.line("NORMKIT_ switches in force: " + ", ".join(f"{k}={v}" for k, v in switches.items()))
    doc["meta"].update(
        complete=False, elapsed_s=0.0, eps=impls.EPS, options=opts.as_dict(),
        sweep_elements=shapes.sweep_elements(opts, gpu), implementations=impl_info,
        method={"timing": ("sweep shapes: CUDA events around each call, median of --reps calls; decode shapes: "
                           "CUDA-graph replay of one call per input set, median of --reps replays divided by the "
                           "calls per replay" if gpu else
                           "time.perf_counter per call (sweep) or per pass over the input sets (decode), median"),
                "rotation": (f"input sets cycled so that their total is at least twice the "
                             f"{'L2' if gpu else 'largest CPU'} cache ({cache_bytes} bytes; input_sets per row)"),
                "bytes": traffic.__doc__.strip(),
                "ratio_to_copy": "gbps / copy_gbps: the per-shape copy of the same byte count (copy_us in the row), "
                                 "timed in the same way in the same run, the fastest median of "
                                 f"{COPY_ALLOCATIONS} fresh buffer sets (copy_us_allocations); reference_copy is "
                                 "reported beside it",
                "check": check.DESCRIPTION},
        reference_copy=None)
    timer = (timing.GpuTimer(torch, torch.cuda.Stream(device), opts.reps, opts.warmup) if gpu
             else timing.CpuTimer(opts.reps, opts.warmup))
    interrupted = False
    try:
        doc["host_overhead"] = host_overhead(torch, gpu, device, opts)
        with report.Live(console, len(case_list)) as live:
            doc["meta"]["reference_copy"] = timing.reference_copy(
                torch, timer, device, GPU_REFERENCE_COPY if gpu else CPU_REFERENCE_COPY)
            live.reference(doc["meta"]["reference_copy"], doc["host_overhead"])
            bench = Bench(torch, opts, gpu, device, cache_bytes, timer, live)
            for case in case_list:
                doc["rows"].extend(bench.run_case(case, implementations))
                doc["latency"] = latency(doc["rows"])
                doc["meta"]["elapsed_s"] = time.perf_counter() - started
                report.write_json(doc, json_path)
                live.advance()
    except KeyboardInterrupt:
        # Ctrl-C, or scripts/bench_gpu.sh's time limit: what was measured is still written and summarized.
        interrupted = True
        console.line("interrupted: writing what was measured (meta.complete stays false)")
    doc["meta"].update(complete=not interrupted, elapsed_s=time.perf_counter() - started)
    report.write_json(doc, json_path)
    written = [json_path]
    if opts.plot:
        # One figure per operator (at most four files: the GPU machine brings back eight).
        for op in opts.ops:
            png = os.path.join(opts.out, plot.file_name(op))
            problem = plot.write_plot(doc, png, op)
            if problem:
                console.line(f"warning: no plot{'' if op == shapes.OP else ' for ' + op}: {problem}")
            else:
                written.append(png)
    report.summary(console, doc, written)
    if interrupted:
        return 130
    return 1 if any(r["impl"] == "normkit" and r["status"] != "ok" for r in doc["rows"]) else 0
