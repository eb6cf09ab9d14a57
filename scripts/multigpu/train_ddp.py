#!/usr/bin/env python3
"""Data-parallel training of a small transformer with PyTorch's or normkit's norms (issue 6, requirement 2).

    torchrun --standalone --nproc-per-node 2 scripts/multigpu/train_ddp.py \\
        --mode {ddp,fsdp2} --norm {torch,normkit} [--compile] --out run.json

Two runs that differ only in --norm start from the same weights (same seed; the
norms' weights are ones either way) and see the same tokens (a pure function of
seed, step and rank), so their loss curves can be compared step by step
(scripts/multigpu/compare_losses.py says how closely and why).

Model: token embedding, --layers pre-norm blocks (norm -> causal self-attention via
F.scaled_dot_product_attention -> residual; norm -> GELU MLP (4x) -> residual), a
final norm and an LM head. Defaults: d=512, 8 heads, 4 layers, sequence 256,
batch 8 per rank, vocabulary 4096, AdamW (lr 1e-3, betas 0.9/0.95, wd 0.1), 50 steps.

Norm kinds: the pre-attention and final norms are RMSNorm. The pre-MLP norm is
LayerNorm where normkit has one (normkit.torch.LayerNorm, issue 5; --layernorm auto),
else RMSNorm too. What ran is printed and written to the JSON (norm_layout,
norm_kinds_covered, norm_kinds_not_covered); LayerNorm is never reported as covered
when it did not run. Both runs of a comparison resolve `auto` the same way (same
installation), and compare_losses.py checks that their layouts agree.

Precision (the usual recipe of each engine, so that both normkit kernel families the
models use get exercised; each comparison is within one mode, so the two modes need
not agree with each other):
  ddp   : fp32 parameters, gradients and AdamW state; forward/backward under
          torch.autocast(bfloat16). The residual stream is bf16 (the embedding output
          is cast), so the norms see bf16 activations with an fp32 weight, the
          mixed-dtype case normkit supports (output in x's dtype).
  fsdp2 : fully_shard per block and at the root with MixedPrecisionPolicy(param_dtype
          =bf16, reduce_dtype=fp32): fp32 sharded master weights and optimizer state,
          bf16 compute, so the norms see bf16 activations with a bf16 weight.
  The loss is computed in fp32 from the logits in both modes.

--compile compiles each block with torch.compile(fullgraph=True) before DDP/FSDP
wraps the model (the torchtitan recipe): a graph break in normkit's ops is an error.

Rank 0 writes --out: per-step loss (mean over ranks), per-step CUDA-synchronized wall
time, and a summary (median/mean step time without the first --warmup steps and any
profiled steps, tokens/s), mode, norm, compile, torch/CUDA/NCCL versions, GPU names,
normkit's runtime counters. Exit status: 0 when every loss is finite, 1 otherwise, 2
on a usage error.

Profiling: --profile-steps K (default 0: off) records the K steps right after the
--warmup steps with torch.profiler on rank 0 (CPU and CUDA activities; CPU only with
--device cpu) and writes a text report to --profile-out (default: --out with
"-profile.txt" in place of ".json"; printed when there is no --out either):
key_averages() sorted by self CUDA time (top 25) and by self CPU time (top 25), and
the number of cudaStreamSynchronize / cudaDeviceSynchronize / cudaMemcpy* calls (and
their driver API counterparts, since normkit launches through the driver API), total
and per step. The profiler slows the steps it records, so they are left out of the
step-time summary like the warm-up steps (the JSON's "profile" says which); their
losses are kept, since recording does not change what is computed. Other ranks are
not profiled; they wait for rank 0 at a barrier outside the timed region after the
last profiled step, so that none of them times rank 0's profiler teardown. The JSON's
config does not include the profiling options, so a profiled run can still be
compared with an unprofiled one.

--device cpu (gloo, for checking the script without a GPU; normkit then runs its CPU
fallback) is for development only.
"""
import os

# Multicast / NVLink SHARP stay off in every multi-GPU run (issue 6); forced before
# torch (and NCCL) is imported, whatever the shell says.
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTI_GPU_ENV)

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402

SCHEMA = "normkit-multigpu-train/1"
ALL_NORM_KINDS = ("rmsnorm", "layernorm")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Run under torchrun --nproc-per-node N (N >= 1); see the module docstring.")
    p.add_argument("--mode", choices=("ddp", "fsdp2"), required=True,
                   help="DistributedDataParallel, or FSDP2 (torch.distributed.fsdp.fully_shard)")
    p.add_argument("--norm", choices=("torch", "normkit"), required=True,
                   help="torch.nn.RMSNorm/LayerNorm, or normkit.torch.RMSNorm/LayerNorm")
    p.add_argument("--compile", action="store_true", help="torch.compile each block (fullgraph=True)")
    p.add_argument("--layernorm", choices=("auto", "on", "off"), default="auto",
                   help="pre-MLP norm is LayerNorm: auto = where normkit.torch has LayerNorm (default)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the step-time summary")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eps", type=float, default=1e-6, help="eps of every norm (explicit, so both implementations agree)")
    p.add_argument("--noise", type=float, default=0.25,
                   help="synthetic data: probability that a token is uniform noise instead of the "
                        "fixed successor of the previous token")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: script checks only (gloo)")
    p.add_argument("--out", default="", help="JSON written by rank 0 (default: print only)")
    p.add_argument("--profile-steps", type=int, default=0, metavar="K",
                   help="record K steps after the warm-up with torch.profiler on rank 0 (default 0: off)")
    p.add_argument("--profile-out", default="", metavar="PATH",
                   help="the profile's text report (default: <--out without .json>-profile.txt, else stdout)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.d_model % args.heads:
        p.error("need --steps >= 1, --warmup >= 0 and --d-model divisible by --heads")
    if args.profile_steps < 0:
        p.error("need --profile-steps >= 0")
    # At least one step must remain for the step-time summary.
    if args.profile_steps and args.warmup + args.profile_steps >= args.steps:
        p.error(f"--profile-steps {args.profile_steps} after --warmup {args.warmup} leaves no timed step "
                f"of --steps {args.steps}")
    if args.profile_steps and not args.profile_out and args.out:
        base = args.out[:-5] if args.out.endswith(".json") else args.out
        args.profile_out = base + "-profile.txt"
    return args


# ---------------------------------------------------------------------------
# Norms: (implementation, kind) -> module class. Adding a kind = one line per
# implementation in norm_class (and it is picked up where NORM_KINDS allows it).


def normkit_kinds():
    """Norm kinds normkit.torch provides: ('rmsnorm', 'layernorm'), or ('rmsnorm',) before LayerNorm."""
    import normkit.torch as nkt

    kinds = ["rmsnorm"]
    if hasattr(nkt, "layernorm") and hasattr(nkt, "LayerNorm"):
        kinds.append("layernorm")
    return tuple(kinds)


def norm_class(impl, kind):
    import torch

    if impl == "torch":
        return {"rmsnorm": torch.nn.RMSNorm, "layernorm": torch.nn.LayerNorm}[kind]
    import normkit.torch as nkt

    # normkit's modules are drop-ins: torch's constructor (normalized_shape, eps, ...).
    return {"rmsnorm": lambda: nkt.RMSNorm, "layernorm": lambda: nkt.LayerNorm}[kind]()


def norm_layout(args):
    """Which kind each norm slot uses; the same for --norm torch and --norm normkit."""
    available = normkit_kinds()
    if args.layernorm == "on" and "layernorm" not in available:
        raise SystemExit("--layernorm on: normkit.torch has no LayerNorm yet (issue 5)")
    use_ln = args.layernorm == "on" or (args.layernorm == "auto" and "layernorm" in available)
    layout = {"attn_norm": "rmsnorm", "mlp_norm": "layernorm" if use_ln else "rmsnorm", "final_norm": "rmsnorm"}
    covered = sorted(set(layout.values()))
    not_covered = {}
    for kind in ALL_NORM_KINDS:
        if kind in covered:
            continue
        if kind not in available:
            not_covered[kind] = f"normkit.torch has no {kind} (LayerNorm arrives with issue 5)" \
                if kind == "layernorm" else f"normkit.torch has no {kind}"
        else:
            not_covered[kind] = f"--layernorm {args.layernorm}"
    return layout, covered, not_covered


def build_model(args, layout):
    import torch
    import torch.nn.functional as F
    from torch import nn

    def make_norm(slot):
        return norm_class(args.norm, layout[slot])(args.d_model, eps=args.eps)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.heads = args.heads
            self.attn_norm = make_norm("attn_norm")
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.mlp_norm = make_norm("mlp_norm")
            self.fc1 = nn.Linear(d, 4 * d, bias=False)
            self.fc2 = nn.Linear(4 * d, d, bias=False)

        def forward(self, h):
            b, t, d = h.shape
            q, k, v = self.qkv(self.attn_norm(h)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return h + self.fc2(F.gelu(self.fc1(self.mlp_norm(h)), approximate="tanh"))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(args.vocab, args.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.final_norm = make_norm("final_norm")
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:  # GPT-2 style init; norms keep their ones
                    std = 0.02 / math.sqrt(2 * args.layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                    nn.init.normal_(p, std=std)

        def forward(self, tokens):
            h = self.emb(tokens).to(torch.bfloat16)  # bf16 residual stream in both modes
            for block in self.blocks:
                h = block(h)
            return self.head(self.final_norm(h))

    return Model()


# ---------------------------------------------------------------------------
# Data: sequences of a noisy fixed successor map (learnable: the loss falls from
# ln(vocab) toward the noise floor), a pure function of (seed, step, rank).


def make_batches(args, rank):
    import torch

    perm = torch.randperm(args.vocab, generator=torch.Generator().manual_seed(args.seed))
    batches = []
    for step in range(args.steps):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank * 7 + 1)
        t = args.seq + 1
        noise = torch.randint(args.vocab, (args.batch, t), generator=g)
        use_noise = torch.rand(args.batch, t, generator=g) < args.noise
        seq = torch.empty(args.batch, t, dtype=torch.long)
        seq[:, 0] = noise[:, 0]
        for i in range(1, t):
            seq[:, i] = torch.where(use_noise[:, i], noise[:, i], perm[seq[:, i - 1]])
        batches.append(seq)
    digest = 0
    for seq in batches:
        digest = zlib.crc32(seq.numpy().tobytes(), digest)
    return batches, f"{digest:08x}"


# ---------------------------------------------------------------------------
# Profiling (--profile-steps)

# Calls that make the host wait for the GPU or copy through it; a norm that adds any
# per call would show here. cu* are the driver API's (normkit's runtime uses it).
SYNC_CALL_PREFIXES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy",
                      "cuStreamSynchronize", "cuCtxSynchronize", "cuMemcpy")
TOP_ROWS = 25


def span(first, last):
    """'step 6' or 'steps 6..7' (1-based numbers)."""
    return f"step {first}" if first == last else f"steps {first}..{last}"


def start_profiler(cuda):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # acc_events: one recording either way; it only keeps torch's warning about events
    # dropped between cycles (there is one cycle here) out of the log.
    prof = profile(activities=activities, acc_events=True)
    prof.start()
    return prof


def profile_report(prof, args, cuda, steps, step_times, logged_steps):
    """The text report of --profile-steps (steps: 1-based numbers of the recorded steps)."""
    k = len(steps)
    averages = prof.key_averages()
    calls = {}
    for event in averages:
        if event.key.startswith(SYNC_CALL_PREFIXES):
            calls[event.key] = calls.get(event.key, 0) + event.count
    out = [f"train_ddp.py profile: mode={args.mode} norm={args.norm} compile={args.compile} device={args.device}, "
           f"rank 0, {span(steps[0], steps[-1])} ({k} step(s), after {args.warmup} warm-up step(s))",
           "step times under the profiler (ms): " + ", ".join(f"{t * 1e3:.2f}" for t in step_times),
           "argv: " + " ".join(sys.argv),
           "",
           "== host-device synchronizations and copies (count in the window; per step)"]
    if calls:
        for name, count in sorted(calls.items()):
            out.append(f"  {name:40} {count:6d}  {count / k:8.2f}/step")
    else:
        out.append("  none recorded" + (" (--device cpu: no CUDA calls)" if not cuda else ""))
    if cuda:
        # What the script itself adds, from reading it (not measured separately): timing
        # brackets each step with torch.cuda.synchronize, the batch is copied host to
        # device, and the logged steps read the loss back with .item().
        out.append(f"  of these, the script's own (timing and logging): 2 torch.cuda.synchronize per step "
                   f"(cudaDeviceSynchronize), 1 host-to-device batch copy per step (cudaMemcpy*), and a "
                   f"loss.item() read-back on {logged_steps} logged step(s) in this window")
    out += ["", f"== top {TOP_ROWS} by self CUDA time"]
    if cuda:
        out.append(averages.table(sort_by="self_device_time_total", row_limit=TOP_ROWS))
    else:
        out.append("not recorded (--device cpu: CPU activity only)")
    out += ["", f"== top {TOP_ROWS} by self CPU time",
            averages.table(sort_by="self_cpu_time_total", row_limit=TOP_ROWS)]
    return "\n".join(out) + "\n"


def write_text(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import normkit

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
            print(f"rank {rank}: needs a CUDA GPU for local rank {local_rank} "
                  f"({torch.cuda.device_count()} visible); --device cpu checks the script without one",
                  file=sys.stderr)
            return 2
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if "RANK" in os.environ:
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None,
                                timeout=datetime.timedelta(seconds=120))
    else:  # a single process without torchrun
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1,
                                device_id=device if cuda else None)

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    layout, covered, not_covered = norm_layout(args)
    log(f"[train] mode={args.mode} norm={args.norm} compile={args.compile} world={world} device={args.device} "
        f"torch={torch.__version__}")
    log(f"[train] norm kinds covered: {', '.join(covered)} (layout {layout})")
    for kind, why in not_covered.items():
        log(f"[train] norm kind NOT covered: {kind}: {why}")
    log("[train] env: " + " ".join(f"{k}={os.environ.get(k)}" for k in MULTI_GPU_ENV))

    torch.manual_seed(args.seed)
    model = build_model(args, layout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    batches, digest = make_batches(args, rank)

    if args.compile:
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block, fullgraph=True)

    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[local_rank] if cuda else None)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(device.type, (world,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    if cuda:
        normkit.reset_counters()
        torch.cuda.reset_peak_memory_stats(device)
    # 0-based indices of the profiled steps: the first ones after the warm-up.
    profiled = range(args.warmup, args.warmup + args.profile_steps)
    prof = None

    def logged(step):
        return step == 0 or (step + 1) % 10 == 0

    losses_local, times = [], []
    dist.barrier()
    t_start = time.perf_counter()
    for step in range(args.steps):
        if rank == 0 and profiled and step == profiled[0]:
            prof = start_profiler(cuda)
        seq = batches[step].to(device, non_blocking=True)
        sync()
        t0 = time.perf_counter()
        with autocast:
            logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), seq[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses_local.append(loss.detach())
        if logged(step):
            log(f"[train] step {step + 1:3d}/{args.steps} local loss {loss.item():.4f} ({times[-1] * 1e3:.1f} ms)")
        if profiled and step == profiled[-1]:
            if prof is not None:
                prof.stop()
            dist.barrier()
    total_s = time.perf_counter() - t_start

    profile_info = None
    if rank == 0 and prof is not None:
        steps_1 = [i + 1 for i in profiled]
        report = profile_report(prof, args, cuda, steps_1, [times[i] for i in profiled],
                                sum(logged(i) for i in profiled))
        if args.profile_out:
            write_text(args.profile_out, report)
            log(f"[train] profile of {span(steps_1[0], steps_1[-1])} written to {args.profile_out}")
        else:
            print(report, flush=True)
        profile_info = {"steps": steps_1, "report": args.profile_out or None,
                        "activities": ["cpu", "cuda"] if cuda else ["cpu"], "rank": 0}

    losses = torch.stack(losses_local).float()
    dist.all_reduce(losses)  # mean over ranks: the global batch's loss
    losses = (losses / world).cpu().tolist()
    gathered = [None] * world
    local_info = {"rank": rank, "device": str(device),
                  "gpu": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
                  "data_digest": digest}
    dist.all_gather_object(gathered, local_info)

    ok = all(math.isfinite(v) for v in losses)
    timed = [t for i, t in enumerate(times) if i >= args.warmup and i not in profiled]
    n_warmup, n_profiled = min(args.warmup, len(times)), len(profiled)
    if not timed:  # no more steps than warm-up steps (parse_args keeps profiling from causing this)
        timed, n_warmup, n_profiled = times, 0, 0
    tokens = args.batch * args.seq * world
    summary = {
        "warmup_steps_excluded": n_warmup,
        "profiled_steps_excluded": n_profiled,
        "median_step_s": statistics.median(timed),
        "mean_step_s": statistics.fmean(timed),
        "min_step_s": min(timed),
        "max_step_s": max(timed),
        "first_step_s": times[0],
        "tokens_per_s": tokens / statistics.median(timed),
        "total_s": total_s,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "mean_loss_last_10": statistics.fmean(losses[-10:]),
    }
    excluded = span(args.warmup + 1, args.steps)
    if profiled:
        excluded += f" without the profiled {span(profiled[0] + 1, profiled[-1] + 1)}"
    log(f"[train] loss {losses[0]:.4f} -> {losses[-1]:.4f}; median step {summary['median_step_s'] * 1e3:.2f} ms "
        f"({excluded}), {summary['tokens_per_s']:.0f} tokens/s, total {total_s:.1f} s")

    if rank == 0:
        result = {
            "schema": SCHEMA,
            "ok": ok,
            "mode": args.mode,
            "norm": args.norm,
            "compile": bool(args.compile),
            "device": args.device,
            "world_size": world,
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "normkit_version": normkit.__version__,
            "python": platform.python_version(),
            "gpus": [g["gpu"] for g in gathered],
            "ranks": gathered,
            "env": {k: os.environ.get(k) for k in MULTI_GPU_ENV},
            "config": {k: getattr(args, k) for k in ("steps", "warmup", "seed", "d_model", "heads", "layers", "seq",
                                                      "batch", "vocab", "lr", "weight_decay", "eps", "noise",
                                                      "layernorm")},
            "precision": ("fp32 params/grads/AdamW, bf16 autocast, bf16 residual stream" if args.mode == "ddp" else
                          "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fp32 sharded master"),
            "parameters": n_params,
            "norm_layout": layout,
            "norm_kinds_covered": covered,
            "norm_kinds_not_covered": not_covered,
            "data_digest": [g["data_digest"] for g in gathered],
            "losses": losses,
            "step_times_s": times,
            "summary": summary,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
            "normkit_counters": normkit.counters() if args.norm == "normkit" else None,
            "profile": profile_info,
            "argv": sys.argv,
        }
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out + ".tmp", "w") as f:
                json.dump(result, f, indent=1)
            os.replace(args.out + ".tmp", args.out)
            log(f"[train] wrote {args.out}")
    if not ok:
        print(f"rank {rank}: non-finite loss in {losses}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
