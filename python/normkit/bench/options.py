"""The flags of `normkit bench` and their checks.

Kept free of torch (and of everything else heavy) so that `normkit --help` and
argument errors cost nothing: the CLI builds its parser from here and only
imports the runner once the arguments are known to be good. `--quick` only
changes defaults; a flag given explicitly always wins, so a quick run can still
be narrowed or widened one flag at a time.
"""

import dataclasses
import re

from normkit._cli_lists import split_list, subset

OPS = ("rmsnorm", "layernorm", "fused_add_rmsnorm", "fused_add_layernorm")
FUSED_ADD_OPS = ("fused_add_rmsnorm", "fused_add_layernorm")  # forward only, in place, always with a residual
DTYPES = ("bf16", "fp16", "fp32")
DIRECTIONS = ("fwd", "bwd")
RESIDUAL_CHOICES = ("with", "without", "both")
PEERS = ("eager", "compile", "quack", "liger", "flashinfer")
DEVICES = ("auto", "cuda", "cpu")

SWEEP_N = tuple(1 << k for k in range(8, 19))  # 256 ... 262144 (DESIGN §4)
DECODE_SHAPES = tuple((m, n) for n in (4096, 8192) for m in (1, 16, 128))
GPU_ELEMENTS = 1 << 27  # M*N of the sweep shapes on a GPU (DESIGN §4)
CPU_ELEMENTS = 1 << 20  # ... and on a CPU, where 2^27 would take minutes per shape
HOST_CALLS = 10000  # requirement 4: host overhead as wall time over 10,000 calls

# (full run, --quick): what --quick changes when the flag itself is not given.
DEFAULTS = {
    "dtypes": (("bf16", "fp32"), ("bf16",)),
    "n": (SWEEP_N, (1024, 16384)),
    "decode_shapes": (DECODE_SHAPES, ((1, 4096),)),
    "reps": (30, 10),
    "warmup": (5, 2),
    "host_rounds": (5, 3),
}

HELP = """\
  normkit bench [--quick] [--out DIR] [--device auto|cuda|cpu] [--op OP[,OP...]|all]
                [--dtypes DT[,DT...]] [--n N[,N...]|none] [--elements E]
                [--decode-shapes MxN[,MxN...]|none] [--directions fwd,bwd]
                [--residual with|without|both] [--peers P[,P...]|all|none]
                [--reps R] [--warmup W] [--host-calls C] [--no-plot]
      Benchmark RMSNorm (and with --op LayerNorm and the in-place fused adds) against a
      device copy of the same bytes and the peers found (PyTorch eager, torch.compile,
      quack, Liger-Kernel, FlashInfer): GB/s, ratio to the copy, speed-up over each peer,
      decode latency by CUDA-graph replay and host overhead per call; writes bench.json
      and bench.png (bench-<op>.png per other op) to --out. Without a GPU it benchmarks
      the CPU fallback against PyTorch CPU. See `normkit bench --help`.
"""


class BenchUsageError(Exception):
    """A bad flag value; the message starts with the flag's name."""


@dataclasses.dataclass(frozen=True)
class Options:
    quick: bool
    out: str
    device: str
    ops: tuple  # in OPS order
    dtypes: tuple
    n: tuple
    elements: int  # None: the mode's default (GPU_ELEMENTS or CPU_ELEMENTS)
    decode_shapes: tuple
    directions: tuple
    residual: tuple  # of bools: False = without, True = with
    peers: tuple  # peer names, in PEERS order
    peers_all: bool  # --peers all (the mode decides what runs) rather than an explicit list
    reps: int
    warmup: int
    host_calls: int
    host_rounds: int
    plot: bool

    def as_dict(self):
        d = dataclasses.asdict(self)
        d["decode_shapes"] = [f"{m}x{n}" for m, n in self.decode_shapes]
        d["residual"] = ["with" if r else "without" for r in self.residual]
        for key in ("ops", "dtypes", "n", "directions", "peers"):
            d[key] = list(d[key])
        return d


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="a small subset for a first look: bf16, N=1024,16384, decode 1x4096, fwd and bwd, with and "
                        "without residual, 10 reps, 3 host-overhead rounds (each flag below still overrides it)")
    p.add_argument("--out", default="bench-out", metavar="DIR",
                   help="output folder for bench.json and the plots: bench.png (rmsnorm), bench-<op>.png (the other "
                        "operators) (default: bench-out)")
    p.add_argument("--device", default="auto", metavar="DEV",
                   help="cuda, cpu or auto: the GPU when PyTorch sees one, else the CPU fallback against PyTorch CPU "
                        "(default: auto)")
    p.add_argument("--op", default="rmsnorm", metavar="OP[,OP...]",
                   help="operators: rmsnorm, layernorm (weight and bias), fused_add_rmsnorm, fused_add_layernorm "
                        "(in place, forward only, always with a residual: they run when fwd is in --directions, "
                        "whatever --residual says), or all (default: rmsnorm)")
    p.add_argument("--dtypes", metavar="DT[,DT...]",
                   help="activation (and weight) dtypes: bf16, fp16, fp32 (default: bf16,fp32; quick: bf16)")
    p.add_argument("--n", metavar="N[,N...]",
                   help="hidden sizes of the bandwidth sweep, or none (default: 256,512,...,262144; "
                        "quick: 1024,16384)")
    p.add_argument("--elements", metavar="E",
                   help="M*N of every sweep shape, M = E/N; an integer or 2^K (default: 2^27 on a GPU, 2^20 on a CPU)")
    p.add_argument("--decode-shapes", metavar="MxN[,MxN...]",
                   help="decode shapes timed by CUDA-graph replay (on a CPU: a loop), or none "
                        "(default: 1x4096,16x4096,128x4096,1x8192,16x8192,128x8192; quick: 1x4096)")
    p.add_argument("--directions", default="fwd,bwd", metavar="D[,D]",
                   help="fwd, bwd or fwd,bwd (default: fwd,bwd)")
    p.add_argument("--residual", default="both", metavar="R",
                   help="with (fused residual add, residual_out written; in bwd the gradient of residual_out is "
                        "read), without, or both (default: both)")
    p.add_argument("--peers", default="all", metavar="P[,P...]",
                   help="peers to run next to normkit: eager, compile, quack, liger, flashinfer, all or none "
                        "(default: all: every importable one on a GPU; eager only on a CPU, where compile runs "
                        "only when named)")
    p.add_argument("--reps", type=int, metavar="R",
                   help="timed repetitions per measurement: single calls for sweep shapes, graph replays for "
                        "decode shapes (default: 30; quick: 10)")
    p.add_argument("--warmup", type=int, metavar="W",
                   help="untimed calls (cycling over the input sets) before timing, after the first call, which "
                        "compiles and is checked (default: 5; quick: 2)")
    p.add_argument("--host-calls", type=int, default=HOST_CALLS, metavar="C",
                   help="calls per round of the host-overhead measurement (M=1, N=4096 bf16, no grad); 0 skips it "
                        f"(default: {HOST_CALLS})")
    p.add_argument("--no-plot", action="store_true", help="do not write the plots (bench.png, bench-<op>.png)")


_split = split_list


def _choices(text, valid, flag):
    values = _split(text)
    if not values:
        raise BenchUsageError(f"{flag}: empty (expected one or more of {', '.join(valid)})")
    for v in values:
        if v not in valid:
            raise BenchUsageError(f"{flag}: unknown value {v!r} (expected {', '.join(valid)})")
    # Canonical order and no repeats, whatever order they were given in.
    return tuple(v for v in valid if v in values)


def _positive_int(text, flag):
    m = re.fullmatch(r"\s*(\d+)\s*(?:\^\s*(\d+)\s*)?", text)
    if not m:
        raise BenchUsageError(f"{flag}: {text!r} is not a positive integer (or B^K)")
    value = int(m.group(1)) ** int(m.group(2)) if m.group(2) else int(m.group(1))
    if value <= 0:
        raise BenchUsageError(f"{flag}: {text!r} must be positive")
    return value


def _n_list(text):
    if text.strip() == "none":
        return ()
    values = sorted({_positive_int(v, "--n") for v in _split(text)})
    if not values:
        raise BenchUsageError("--n: empty (expected hidden sizes such as 1024,4096 or none)")
    return tuple(values)


def _decode_shapes(text):
    if text.strip() == "none":
        return ()
    shapes = []
    for item in _split(text):
        m = re.fullmatch(r"(\d+)[xX](\d+)", item)
        if not m or int(m.group(1)) <= 0 or int(m.group(2)) <= 0:
            raise BenchUsageError(f"--decode-shapes: {item!r} is not MxN with positive M and N (e.g. 1x4096)")
        shape = (int(m.group(1)), int(m.group(2)))
        if shape not in shapes:
            shapes.append(shape)
    if not shapes:
        raise BenchUsageError("--decode-shapes: empty (expected MxN[,MxN...] or none)")
    return tuple(shapes)


def _peers(text):
    values = _split(text)
    if values == ["all"]:
        return PEERS, True
    if values == ["none"]:
        return (), False
    unknown = [v for v in values if v not in PEERS]
    if unknown or not values:
        what = f"unknown peer {unknown[0]!r}" if unknown else "empty"
        raise BenchUsageError(f"--peers: {what} (expected any of {', '.join(PEERS)}, or all, or none)")
    return tuple(p for p in PEERS if p in values), False


def _ops(text):
    return subset(text, OPS, "--op", "operator", BenchUsageError)


def _count(value, flag, minimum):
    if value < minimum:
        raise BenchUsageError(f"{flag}: {value} is below the minimum of {minimum}")
    return value


def from_args(args):
    """Options from parsed arguments; BenchUsageError naming the flag when one is bad."""
    def pick(name):
        full, quick = DEFAULTS[name]
        return quick if args.quick else full

    if args.device not in DEVICES:
        raise BenchUsageError(f"--device: unknown value {args.device!r} (expected {', '.join(DEVICES)})")
    if args.residual not in RESIDUAL_CHOICES:
        raise BenchUsageError(f"--residual: unknown value {args.residual!r} (expected {', '.join(RESIDUAL_CHOICES)})")
    residual = {"with": (True,), "without": (False,), "both": (False, True)}[args.residual]
    ops = _ops(args.op)
    directions = _choices(args.directions, DIRECTIONS, "--directions")
    if all(op in FUSED_ADD_OPS for op in ops) and "fwd" not in directions:
        raise BenchUsageError(f"--op: {', '.join(ops)} {'has' if len(ops) == 1 else 'have'} no backward, and "
                              "--directions has no fwd: there is nothing to run")
    peers, peers_all = _peers(args.peers)
    n = _n_list(args.n) if args.n is not None else pick("n")
    decode = _decode_shapes(args.decode_shapes) if args.decode_shapes is not None else pick("decode_shapes")
    if not n and not decode:
        raise BenchUsageError("--n: with --decode-shapes none there is nothing to run")
    return Options(
        quick=args.quick,
        out=args.out,
        device=args.device,
        ops=ops,
        dtypes=_choices(args.dtypes, DTYPES, "--dtypes") if args.dtypes is not None else pick("dtypes"),
        n=n,
        elements=_positive_int(args.elements, "--elements") if args.elements is not None else None,
        decode_shapes=decode,
        directions=directions,
        residual=residual,
        peers=peers,
        peers_all=peers_all,
        reps=_count(args.reps, "--reps", 1) if args.reps is not None else pick("reps"),
        warmup=_count(args.warmup, "--warmup", 0) if args.warmup is not None else pick("warmup"),
        host_calls=_count(args.host_calls, "--host-calls", 0),
        host_rounds=pick("host_rounds"),
        plot=not args.no_plot,
    )
