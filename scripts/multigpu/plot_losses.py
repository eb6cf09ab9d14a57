#!/usr/bin/env python3
"""Plot the loss curves and step times of a scripts/multigpu/run_all.sh run.

    python3 scripts/multigpu/plot_losses.py multigpu_results.json --out multigpu.png [--title "..."]

Reads the merged results of run_all.sh ({"runs": {"<mode>-<on|off>-<norm>": ...},
"comparisons": {...}}) and writes one PNG with two blocks of 2x2 panels, rows = mode
(ddp, fsdp2), columns = compile (off, on):

  top:    the loss of torch's and normkit's norms per step, and on a second axis the
          relative difference |L_normkit - L_torch| / L_torch in percent. The curves
          of a passing pair lie on top of each other at any readable scale, so the
          difference axis is what shows how far apart they are; the title carries
          compare_losses.py's verdict.
  bottom: the wall time of every step but the first (the first holds CUDA context
          set-up, kernel loading and, with --compile, the compilation: seconds, which
          would flatten the rest; its value is in the legend). The steps that
          train_ddp.py leaves out of its summary (warm-up, and profiled steps where
          the run recorded any) are shaded; the dashed lines are the medians that the
          comparison uses.

A pair with a missing run is drawn as an empty panel that says so, so a partial run
still gives a figure. matplotlib is a dev requirement (requirements-dev.txt); the
figure is drawn on an Agg canvas, so no display is needed.

Exit status: 0 written, 1 nothing to plot or matplotlib missing, 2 unreadable input.
"""
import argparse
import json
import math
import sys

MODES = ("ddp", "fsdp2")
COMPILE = ("off", "on")
STYLE = {"torch": dict(color="tab:blue", linewidth=1.6),
         "normkit": dict(color="black", linewidth=1.2, linestyle="--")}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="multigpu_results.json of run_all.sh")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--title", default="", help="first line of the figure title (e.g. commit and date)")
    return p.parse_args(argv)


def _steps_excluded(run):
    """1-based step numbers that train_ddp.py left out of its step-time summary."""
    warmup = run.get("summary", {}).get("warmup_steps_excluded", run.get("config", {}).get("warmup", 0))
    excluded = set(range(1, warmup + 1))
    excluded.update((run.get("profile") or {}).get("steps") or [])
    return excluded


def _shade(ax, steps):
    for s in sorted(steps):
        ax.axvspan(s - 0.5, s + 0.5, color="0.9", linewidth=0, zorder=0)


def _describe(runs):
    """Subtitle: what the runs have in common (taken from the first run found)."""
    run = next(iter(runs.values()), None)
    if not run:
        return ""
    c = run.get("config", {})
    gpus = run.get("gpus") or []
    gpu = f"{len(gpus)} x {gpus[0]}" if gpus and len(set(gpus)) == 1 else ", ".join(gpus)
    kinds = ", ".join(run.get("norm_kinds_covered") or [])
    return (f"{gpu}; torch {run.get('torch_version')}, NCCL {run.get('nccl_version') or 'n/a'}; d={c.get('d_model')}, "
            f"{c.get('layers')} layers, seq {c.get('seq')}, batch {c.get('batch')}/rank, vocab {c.get('vocab')}, "
            f"{c.get('steps')} steps; norms: {kinds}")


def _empty(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _integer_steps(ax):
    from matplotlib.ticker import MaxNLocator  # matplotlib is imported only once write_plot found it

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _loss_panel(ax, pair, runs, verdict):
    ax.set_title(pair, fontsize=9)
    present = {name: run for name, run in runs.items() if run and run.get("losses")}
    if not present:
        _empty(ax, "no result from either run")
        return
    for name, run in present.items():
        ax.plot(range(1, len(run["losses"]) + 1), run["losses"], label=f"{name} norms", **STYLE[name])
    ax.set_xlabel("step")
    _integer_steps(ax)
    ax.set_ylabel("loss (mean over ranks)")
    handles, labels = ax.get_legend_handles_labels()
    if len(present) == 2:
        t, n = present["torch"]["losses"], present["normkit"]["losses"]
        rel = [abs(b - a) / abs(a) * 100 if a else math.nan for a, b in zip(t, n)]
        ax2 = ax.twinx()
        ax2.plot(range(1, len(rel) + 1), rel, color="tab:red", linewidth=0.8, alpha=0.8, label="|rel. diff| (%)")
        ax2.set_ylabel("|rel. diff| (%)", color="tab:red", fontsize=8)
        ax2.tick_params(axis="y", labelcolor="tab:red", labelsize=7)
        ax2.set_ylim(bottom=0)
        more = ax2.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    else:
        missing = "normkit" if "torch" in present else "torch"
        ax.set_title(f"{pair}: no {missing} run, nothing compared", fontsize=9)
    if verdict and "max_step_rel" in verdict:
        ax.set_title(f"{pair}: {verdict.get('status', '?')}, max step {verdict['max_step_rel']:.3%}, "
                     f"last-10 mean {verdict.get('final_mean_rel', math.nan):.3%}", fontsize=9)
    elif verdict:  # compare_losses.py could not compare (its "error" says why; the log has it in full)
        ax.set_title(f"{pair}: comparison {verdict.get('status', '?')}", fontsize=9)
    ax.legend(handles, labels, fontsize=7, loc="upper right")


def _time_panel(ax, pair, runs):
    ax.set_title(f"{pair}: step time", fontsize=9)
    drawn = False
    top = 0.0
    for name in ("torch", "normkit"):
        run = runs.get(name)
        if not run or not run.get("step_times_s"):
            continue
        ms = [t * 1e3 for t in run["step_times_s"]]
        if not drawn:
            _shade(ax, _steps_excluded(run))
        median = run.get("summary", {}).get("median_step_s")
        label = f"{name} (step 1: {ms[0]:.0f} ms"
        label += f"; median {median * 1e3:.2f} ms)" if median else ")"
        ax.plot(range(2, len(ms) + 1), ms[1:], marker=".", markersize=3, label=label, **STYLE[name])
        if median:
            ax.axhline(median * 1e3, color=STYLE[name]["color"], linestyle=":", linewidth=1)
        top = max([top] + ms[1:])
        drawn = True
    if not drawn:
        _empty(ax, "no step times")
        return
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("step (shaded: left out of the median)")
    _integer_steps(ax)
    ax.set_ylabel("wall time per step (ms)")
    ax.legend(fontsize=7, loc="lower right")


def write_plot(doc, path, title=""):
    """Writes the PNG; returns None, or why there is none."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        return f"matplotlib is not installed ({e}); it is in requirements-dev.txt"
    runs = doc.get("runs") or {}
    ok_runs = {k: v for k, v in runs.items() if isinstance(v, dict) and "losses" in v}
    if not ok_runs:
        return "no training run with losses in the results"
    comparisons = doc.get("comparisons") or {}
    fig = Figure(figsize=(13, 15), layout="constrained")
    FigureCanvasAgg(fig)
    subtitle = _describe(ok_runs)
    fig.suptitle("\n".join(s for s in (title or "normkit multi-GPU training: torch norms vs normkit norms",
                                       subtitle) if s), fontsize=10)
    grid = fig.add_gridspec(4, 2)
    for r, mode in enumerate(MODES):
        for c, comp in enumerate(COMPILE):
            pair = f"{mode}-{comp}"
            pair_runs = {norm: ok_runs.get(f"{pair}-{norm}") for norm in ("torch", "normkit")}
            label = f"{mode}, compile {comp}"
            _loss_panel(fig.add_subplot(grid[r, c]), label, pair_runs, comparisons.get(pair))
            _time_panel(fig.add_subplot(grid[2 + r, c]), label, pair_runs)
    try:
        fig.savefig(path, dpi=80)
    except OSError as e:
        return f"cannot write {path}: {e}"
    return None


def main(argv=None):
    args = parse_args(argv)
    try:
        with open(args.results) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plot_losses: cannot read {args.results}: {e}", file=sys.stderr)
        return 2
    why = write_plot(doc, args.out, args.title)
    if why:
        print(f"plot_losses: no plot: {why}", file=sys.stderr)
        return 1
    print(f"plot_losses: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
