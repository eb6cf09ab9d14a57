#!/usr/bin/env python3
"""Compare the loss curves of a --norm torch run and a --norm normkit run of train_ddp.py.

    python3 scripts/multigpu/compare_losses.py TORCH.json NORMKIT.json [--json-out verdict.json]

Both runs must be the same experiment except for the norm implementation: same mode,
compile flag, configuration, world size, norm layout (norm kinds) and data (the data
digests of every rank). Then the normkit curve passes when all of these hold:

  1. every loss of both runs is finite;
  2. step 1:          |L_nk - L_t| / L_t <= 0.5 %   (--first-rtol)
  3. every step:      |L_nk - L_t| / L_t <= 2 %     (--step-rtol)
  4. last 10 steps:   |mean L_nk - mean L_t| / mean L_t <= 1 %   (--final-rtol)
  5. both runs learned: mean of the last 10 losses <= 95 % of the first loss
     (--min-drop 0.05), so that the comparison is between curves that move.

Why these numbers. The two runs start from identical weights and see identical
batches; the only difference is how the norms round. Both implementations compute
in fp32 and round the output once to the activation dtype (bf16), so an output
element differs by at most about one bf16 ulp (2^-8 relative) and only where the
fp32 values fall on different sides of a rounding boundary; the backward likewise
differs by fp32 summation order and one final rounding. At step 1 the loss is a
mean over every token of the global batch (2 ranks x 8 x 256 = 4096 tokens), so
such unbiased per-element differences move it by well under 0.1 %: 0.5 % is the
bound for step 1. During training the small gradient differences change the
trajectory; AdamW normalizes every update by the gradient's running RMS, so a
relative gradient perturbation e changes an update by about e (lr does not amplify
it), and the perturbations of successive steps compound slowly. Over 50 steps two
correct bf16 runs that differ only in rounding (or in reduction order: flash-attention
backward and NCCL reductions are not bitwise reproducible either) typically stay
within a few tenths of a percent in loss; 2 % at any single step leaves room for
that drift and for single-step spikes, which do not cancel exactly because the
states already differ. The mean of the last 10 steps averages the per-step jitter
out, so it gets the tighter 1 %.

A rehearsal on the CPU (gloo, normkit's CPU fallback; same script with d=256, 4
layers, sequence 128, batch 8, vocabulary 4096, 50 steps, DDP) gives a scale: the
loss fell from 8.28 to 4.45; torch vs normkit differed by at most 0.011 % at any
step and 0.002 % on the last-10 mean. Deliberately broken norms in place of normkit's:
rstd treated as a constant in the backward (dx without its projection term) -> 83 %
at step 50 and 69 % on the last-10 mean; dx halved -> 6.7 % / 6.3 % (both FAIL); no
weight gradient at all -> DDP itself stops ("parameters that were not used in
producing loss"). The GPU runs round differently (bf16 tensor-core matmuls,
flash-attention backward), so their correct-vs-correct gap is expected to be larger
than on the CPU, but still far below the bounds.

What a failure means. An implementation error that changes what the model learns
-- a wrong or missing dx term, gradients from stale data (a launch on the wrong
stream), a result computed on or copied from the wrong device, a norm whose
gradient DDP/FSDP cannot see -- bends the curve by much more than these bounds
within 50 steps. What this check cannot see: errors that do not change training
within 50 steps (e.g. a slightly wrong dweight, since the norm weights start at 1
and move little); those are covered by the float64 comparisons of
tests/python/test_rmsnorm_gpu*.py and tests/multigpu/test_two_gpus.py. Step 1 is
also insensitive to a wrong forward scale: with the small initial weights the
logits are near zero and the first loss is close to ln(vocab) whatever the norms
return, which is why the curve, not the first value, is the check.

Exit status: 0 pass, 1 fail, 2 unusable input (missing file, different experiments).
Prints a per-step table and the step times of both implementations.
"""
import argparse
import json
import math
import statistics
import sys

SAME_FIELDS = ("mode", "compile", "device", "world_size", "config", "norm_layout", "norm_kinds_covered",
               "data_digest", "torch_version")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Tolerances and their justification: see the module docstring.")
    p.add_argument("torch_json", help="train_ddp.py --norm torch result")
    p.add_argument("normkit_json", help="train_ddp.py --norm normkit result (same mode, compile flag, config)")
    p.add_argument("--first-rtol", type=float, default=0.005)
    p.add_argument("--step-rtol", type=float, default=0.02)
    p.add_argument("--final-rtol", type=float, default=0.01)
    p.add_argument("--final-steps", type=int, default=10, help="steps averaged for the final comparison")
    p.add_argument("--min-drop", type=float, default=0.05,
                   help="each run's mean final loss must be <= (1 - min_drop) x its first loss")
    p.add_argument("--json-out", default="", help="write the verdict and the numbers here")
    return p.parse_args(argv)


def load(path):
    with open(path) as f:
        return json.load(f)


def compare(t, n, args):
    """(problems: list of str, numbers: dict). Raises ValueError for runs that are not comparable."""
    if t.get("norm") != "torch" or n.get("norm") != "normkit":
        raise ValueError(f"expected a --norm torch run then a --norm normkit run, got {t.get('norm')} and "
                         f"{n.get('norm')}")
    for field in SAME_FIELDS:
        if t.get(field) != n.get(field):
            raise ValueError(f"not the same experiment: {field} differs: {t.get(field)!r} vs {n.get(field)!r}")
    lt, ln = t["losses"], n["losses"]
    if len(lt) != len(ln) or not lt:
        raise ValueError(f"different or empty loss curves: {len(lt)} vs {len(ln)} steps")

    problems = []
    finite = all(math.isfinite(v) for v in lt + ln)
    if not finite:
        problems.append("non-finite loss")
    rel = [abs(b - a) / abs(a) if a else math.inf for a, b in zip(lt, ln)]
    k = min(args.final_steps, len(lt))
    mt, mn = statistics.fmean(lt[-k:]), statistics.fmean(ln[-k:])
    final_rel = abs(mn - mt) / abs(mt) if mt else math.inf
    worst = max(range(len(rel)), key=lambda i: rel[i])
    if finite:
        if rel[0] > args.first_rtol:
            problems.append(f"step 1: relative difference {rel[0]:.3%} > {args.first_rtol:.2%}")
        if rel[worst] > args.step_rtol:
            bad = sum(r > args.step_rtol for r in rel)
            problems.append(f"{bad} step(s) beyond {args.step_rtol:.2%}; worst step {worst + 1}: {rel[worst]:.3%}")
        if final_rel > args.final_rtol:
            problems.append(f"mean of the last {k} steps: relative difference {final_rel:.3%} > "
                            f"{args.final_rtol:.2%}")
        for name, curve, mean in (("torch", lt, mt), ("normkit", ln, mn)):
            if mean > (1 - args.min_drop) * curve[0]:
                problems.append(f"{name} run did not learn: mean of the last {k} losses {mean:.4f} > "
                                f"{1 - args.min_drop:.2f} x first loss {curve[0]:.4f}")
    st, sn = t.get("summary", {}), n.get("summary", {})
    numbers = {
        "mode": t["mode"], "compile": t["compile"], "steps": len(lt),
        "norm_kinds_covered": t.get("norm_kinds_covered"), "norm_kinds_not_covered": t.get("norm_kinds_not_covered"),
        "tolerances": {"first_rtol": args.first_rtol, "step_rtol": args.step_rtol, "final_rtol": args.final_rtol,
                       "final_steps": k, "min_drop": args.min_drop},
        "first_rel": rel[0], "max_step_rel": rel[worst], "max_step": worst + 1, "final_mean_rel": final_rel,
        "final_mean_torch": mt, "final_mean_normkit": mn,
        "median_step_s_torch": st.get("median_step_s"), "median_step_s_normkit": sn.get("median_step_s"),
        "step_time_ratio_normkit_over_torch": (sn["median_step_s"] / st["median_step_s"]
                                               if st.get("median_step_s") and sn.get("median_step_s") else None),
    }
    return problems, numbers


def print_table(t, n, numbers):
    lt, ln = t["losses"], n["losses"]
    print(f"{'step':>4} {'loss torch':>11} {'loss normkit':>12} {'diff':>10} {'rel diff':>9}")
    for i, (a, b) in enumerate(zip(lt, ln)):
        mark = "  <- max" if i + 1 == numbers["max_step"] else ""
        rel = abs(b - a) / abs(a) if a else math.inf
        print(f"{i + 1:>4} {a:>11.5f} {b:>12.5f} {b - a:>+10.5f} {rel:>9.4%}{mark}")
    k = numbers["tolerances"]["final_steps"]
    print(f"mean of the last {k}: torch {numbers['final_mean_torch']:.5f}, normkit {numbers['final_mean_normkit']:.5f} "
          f"({numbers['final_mean_rel']:.4%})")
    ts, ns = numbers["median_step_s_torch"], numbers["median_step_s_normkit"]
    if ts and ns:
        print(f"median step time (after warm-up): torch {ts * 1e3:.2f} ms, normkit {ns * 1e3:.2f} ms "
              f"(normkit/torch {ns / ts:.3f})")


def main(argv=None):
    args = parse_args(argv)
    try:
        t, n = load(args.torch_json), load(args.normkit_json)
        problems, numbers = compare(t, n, args)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"compare_losses: cannot compare {args.torch_json} and {args.normkit_json}: {e}", file=sys.stderr)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"status": "ERROR", "error": str(e), "torch_json": args.torch_json,
                           "normkit_json": args.normkit_json}, f, indent=1)
        return 2
    label = f"mode={numbers['mode']} compile={numbers['compile']}"
    print(f"== loss curves, {label}: torch.nn norms vs normkit norms "
          f"(norm kinds covered: {', '.join(numbers['norm_kinds_covered'] or [])})")
    for kind, why in (numbers["norm_kinds_not_covered"] or {}).items():
        print(f"   NOT covered: {kind} ({why})")
    print_table(t, n, numbers)
    status = "FAIL" if problems else "PASS"
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"{status} {label}: step 1 {numbers['first_rel']:.3%} (<= {args.first_rtol:.2%}), max step "
          f"{numbers['max_step_rel']:.3%} at step {numbers['max_step']} (<= {args.step_rtol:.2%}), last-"
          f"{numbers['tolerances']['final_steps']} mean {numbers['final_mean_rel']:.3%} (<= {args.final_rtol:.2%})")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"status": status, "problems": problems, **numbers,
                       "losses_torch": t["losses"], "losses_normkit": n["losses"]}, f, indent=1)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
