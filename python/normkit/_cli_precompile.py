"""`normkit precompile`: fill the disk cache for an explicit target, with no GPU.

A deployment that runs with NORMKIT_RUN_ONLY=1 needs every kernel it will
launch in the cache beforehand; this command compiles them for the shapes and
dtypes given, the way the PyTorch front end will request them.
"""

import json
import os
import re
import sys

from normkit import _C
from normkit._C import NormkitError

from normkit._cli_lists import split_list, subset

OPS = ("rmsnorm", "layernorm")
FEATURES = ("residual", "prenorm", "bias", "rstd")
DIRECTIONS = ("fwd", "bwd")

HELP = """\
  normkit precompile --arch ARCH[,ARCH...] --n N[,N...] [--op OP[,OP...]|all] [--dtype DT[,DT...]]
                     [--weight-dtype DT|none] [--out-dtype DT] [--residual-dtype DT]
                     [--features F[,F...]] [--direction fwd,bwd] [--json]
      Compile (or find in the disk cache) the kernels for an explicit target, without
      a GPU, so that a deployment can run with NORMKIT_RUN_ONLY=1. Shows a progress
      bar, then a summary: kernels compiled / already cached, registers, and the
      spill check (exit status 1 if a kernel spills to local memory).
      --arch       compile target(s): sm_80, sm_90a, sm_100a, ... (default: NORMKIT_ARCH;
                   there is no other default)
      --n          hidden sizes (elements per row), e.g. 4096,8192
      --op         operators: rmsnorm, layernorm (the same kernels centred), or all
                   (default: rmsnorm)
      --dtype      activation dtype(s) x: fp16, bf16, fp32 (default bf16)
      --weight-dtype  weight (and bias) dtype, or none (default: --dtype)
      --out-dtype  output dtype (default: --dtype)
      --residual-dtype  dtype of residual and residual_out (default: --dtype)
      --features   any of residual (fused residual add), prenorm (residual_out returned),
                   bias, rstd (forward stores rstd, and LayerNorm's mean; implied by
                   --direction bwd)
      --direction  fwd, bwd or fwd,bwd (default fwd,bwd)
      --json       print the summary as JSON
"""


class UsageError(Exception):
    """A bad argument; reported as `normkit: error: ...` with exit status 2."""


def add_parser(commands, formatter_class):
    p = commands.add_parser(
        "precompile", help="compile kernels into the disk cache for a target (no GPU needed)",
        description="Compile (or find in the disk cache) the kernels the operators (--op) will use for an explicit "
                    "target, without a GPU, so that a deployment can run with NORMKIT_RUN_ONLY=1. Exit status "
                    "1 if a kernel spills to local memory.",
        formatter_class=formatter_class)
    p.add_argument("--arch", help="comma-separated compile targets such as sm_80,sm_90a (default: NORMKIT_ARCH)")
    p.add_argument("--n", required=True, help="comma-separated hidden sizes N (elements per row), e.g. 4096,8192")
    p.add_argument("--op", default="rmsnorm", metavar="OP[,OP...]",
                   help="operators: rmsnorm, layernorm, or all (default: rmsnorm)")
    p.add_argument("--dtype", default="bf16", help="comma-separated activation dtypes: fp16, bf16, fp32 "
                                                   "(default: bf16)")
    p.add_argument("--weight-dtype", help="weight/bias dtype (fp16, bf16, fp32) or none (default: --dtype)")
    p.add_argument("--out-dtype", help="output dtype (default: --dtype)")
    p.add_argument("--residual-dtype", help="dtype of residual and residual_out (default: --dtype)")
    p.add_argument("--features", default="",
                   help="comma-separated: residual (fused residual add), prenorm (residual_out returned), bias, "
                        "rstd (forward stores rstd, and LayerNorm's mean; implied by bwd) (default: none)")
    p.add_argument("--direction", default="fwd,bwd", help="fwd, bwd or fwd,bwd (default: fwd,bwd)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)
    return p


_split = split_list


def _dtype(name, flag):
    try:
        return _C.norm_dtype_name(name)
    except ValueError:
        raise UsageError(f"{flag}: unknown dtype {name!r} (expected fp16, bf16 or fp32)") from None


def _choices(text, valid, flag):
    values = _split(text)
    for v in values:
        if v not in valid:
            raise UsageError(f"{flag}: unknown value {v!r} (expected {', '.join(valid)})")
    return values


def _ops(text):
    return subset(text, OPS, "--op", "operator", UsageError)


def _parse(args):
    ops = _ops(args.op)
    archs = _split(args.arch) or _split(os.environ.get("NORMKIT_ARCH", ""))
    if not archs:
        raise UsageError("--arch: give the compile target(s), e.g. --arch sm_90a (or set NORMKIT_ARCH); "
                         "there is no default architecture")
    archs = [_C.parse_target(a) for a in archs]  # NormkitError names a bad target
    _check_nvrtc_targets(archs)
    sizes = []
    for text in _split(args.n) or [""]:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"--n: expected comma-separated positive integers, got {args.n!r}")
        sizes.append(n)
    dtypes = [_dtype(d, "--dtype") for d in _split(args.dtype)]
    if not dtypes:
        raise UsageError("--dtype: give at least one of fp16, bf16, fp32")
    features = set(_choices(args.features, FEATURES, "--features"))
    directions = _choices(args.direction, DIRECTIONS, "--direction")
    if not directions:
        raise UsageError("--direction: give fwd, bwd or fwd,bwd")
    weight = args.weight_dtype
    if weight is not None and weight.strip().lower() != "none":
        weight = _dtype(weight, "--weight-dtype")
    out = _dtype(args.out_dtype, "--out-dtype") if args.out_dtype else None
    res = _dtype(args.residual_dtype, "--residual-dtype") if args.residual_dtype else None
    return ops, archs, sizes, dtypes, weight, out, res, features, directions


def _check_nvrtc_targets(archs):
    try:
        tools = _C.toolchain(False)
    except NormkitError:
        return  # the compile reports why NVRTC is unavailable
    supported = tools["nvrtc_archs"]
    for arch in archs:
        digits = re.search(r"_(\d+)", arch)
        if digits and supported and int(digits.group(1)) not in supported:
            raise UsageError(f"--arch: NVRTC {tools['nvrtc_version']} cannot compile for {arch} (its targets: "
                             f"{', '.join(f'sm_{a}' for a in supported)})")


def variants(sizes, dtypes, weight, out_dtype, residual_dtype, features, directions):
    """The kernel variants normkit.torch.rmsnorm requests for these settings (as _C keyword arguments).

    normkit.torch.layernorm decides what it stores the same way (its mean with rstd),
    so these are LayerNorm's variants too."""
    training = "bwd" in directions
    result = []
    for x in dtypes:
        w = x if weight is None else (None if weight.lower() == "none" else weight)
        out = out_dtype or x
        res = residual_dtype or x
        has_res = "residual" in features
        prenorm = "prenorm" in features
        # rmsnorm() writes residual_out when it returns it (prenorm) or when the
        # backward needs it as its input h.
        res_out = has_res and (prenorm or training) or (prenorm and res != x)
        bias = (w or x) if "bias" in features else None
        for n in sizes:
            if "fwd" in directions:
                result.append(dict(n=n, backward=False, x=x, weight=w, bias=bias, residual=res if has_res else None,
                                   residual_out=res if res_out else None, out=out,
                                   store_rstd=training or "rstd" in features))
            if training:
                result.append(dict(n=n, backward=True, x=res if has_res else x, weight=w, bias=bias,
                                   residual=res if prenorm and (has_res or res != x) else None,
                                   residual_out=res if has_res and res != x else None, out=x, dout=out))
    return result


def _progress():
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:  # pragma: no cover - rich is a dependency
        return None
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True, markup=False, highlight=False))


def _binding(op, what):
    """_C.<op>_precompile, _precompile_count or _variant_describe: the same arguments for every op."""
    return getattr(_C, f"{op}_{what}")


def run(args, out):
    try:
        ops, archs, sizes, dtypes, weight, out_dtype, res_dtype, features, directions = _parse(args)
    except UsageError as e:
        return _usage(e)
    jobs = [(op, arch, v) for op in ops for arch in archs
            for v in variants(sizes, dtypes, weight, out_dtype, res_dtype, features, directions)]
    total = sum(_binding(op, "precompile_count")(arch, **v) for op, arch, v in jobs)
    rows, kernels = [], []
    progress = _progress()
    task = progress.add_task("precompile", total=total) if progress else None
    if progress:
        progress.start()
    try:
        for op, arch, v in jobs:
            what = f"{arch} {_binding(op, 'variant_describe')(**v)}"
            if progress:
                progress.update(task, description=f"{arch} {op} {'bwd' if v['backward'] else 'fwd'} n={v['n']}")
            callback = (lambda _k: progress.advance(task)) if progress else None
            done = _binding(op, "precompile")(arch, **v, callback=callback)
            for k in done:
                k.update(op=op, arch=arch, variant=what)
            kernels.extend(done)
            rows.append((op, arch, v, done))
    finally:
        if progress:
            progress.stop()
    return _summary(args, out, ops, archs, rows, kernels)


def _short(v):
    """fwd n=4096 x=bf16 weight=fp32 ... with only the parts present."""
    parts = ["bwd" if v["backward"] else "fwd", f"n={v['n']}", f"x={v['x']}"]
    names = ("weight", "bias", "residual", "residual_out", "out", "dout")
    if v["backward"]:
        names = ("weight", "dbias", "dresidual_out", "dresidual", "dx", "dout")
    for key, label in zip(("weight", "bias", "residual", "residual_out", "out", "dout"), names):
        if v.get(key):
            parts.append(f"{label}={v[key]}")
    if not v["backward"] and v.get("store_rstd"):
        parts.append("rstd")
    return " ".join(parts)


def _variant_line(op, arch, v, done):
    compiled = sum(not k["from_cache"] for k in done)
    regs = max((k["registers"] for k in done), default=-1)
    spills = sum(k["spill_bytes"] > 0 for k in done)
    unknown = sum(k["spill_bytes"] < 0 for k in done)
    spill = f"{spills} spill" if spills else ("no spills" if not unknown else f"spills unknown ({unknown})")
    kernels = "1 kernel" if len(done) == 1 else f"{len(done)} kernels"
    return (f"{arch} {op} {_short(v)}: {kernels} ({compiled} compiled, {len(done) - compiled} cached), "
            f"max {regs if regs >= 0 else '?'} registers, {spill}")


def _summary(args, out, ops, archs, rows, kernels):
    compiled = sum(not k["from_cache"] for k in kernels)
    cached = len(kernels) - compiled
    spilled = [k for k in kernels if k["spill_bytes"] > 0]
    unknown = [k for k in kernels if k["spill_bytes"] < 0]
    if args.json:
        print(json.dumps({"ops": list(ops), "archs": archs, "cache_dir": _C.cache_dir(), "kernels": kernels,
                          "compiled": compiled, "cached": cached, "spilled": len(spilled),
                          "spill_unknown": len(unknown)}, indent=2))
    else:
        for op, arch, v, done in rows:
            out.line(_variant_line(op, arch, v, done))
        out.line(f"{len(kernels)} kernels for {', '.join(archs)} in {_C.cache_dir()}: "
                 f"{compiled} compiled, {cached} already cached")
        if spilled:
            out.line(f"spill check: FAIL, {len(spilled)} kernel(s) spill to local memory:")
            for k in spilled:
                out.line(f"  {k['arch']} {k['op']} {k['template_args']}: {k['spill_bytes']} bytes")
        elif unknown:
            out.line(f"spill check: no spills reported ({len(unknown)} kernel(s) had no ptxas report)")
        else:
            out.line("spill check: no kernel spills to local memory")
    return 1 if spilled else 0


def _usage(error):
    print(f"normkit: error: {error}", file=sys.stderr)
    return 2
