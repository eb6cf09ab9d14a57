"""bench.png: GB/s against N per implementation, one panel per (dtype, direction,
residual), with the per-shape copy (what the ratios use) and the large reference
copy drawn as ceilings. One figure per operator: bench.png for RMSNorm (as
before --op existed), bench-<op>.png for the others.

matplotlib is optional (a dev requirement, not a dependency of normkit): without
it the plot is skipped with a warning and the JSON is the result. The figure is
drawn on an Agg canvas directly, so that the user's pyplot backend and state are
left alone.
"""

import math

TITLES = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm", "fused_add_rmsnorm": "fused_add_rmsnorm (in place)",
          "fused_add_layernorm": "fused_add_layernorm (in place)"}
STYLE = {"normkit": dict(color="black", linewidth=2.2, marker="o"), "copy": dict(color="gray", linestyle="--"),
         "reference": dict(color="gray", linestyle=":", linewidth=1)}


def file_name(op):
    return "bench.png" if op == "rmsnorm" else f"bench-{op}.png"


def write_plot(doc, path, op="rmsnorm"):
    """Writes the plot of one operator's rows; returns None, or why there is none."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        return f"matplotlib is not installed ({e}); pip install matplotlib"
    rows = [r for r in doc["rows"] if r["kind"] == "sweep" and r["op"] == op]
    panels = {}
    for r in rows:
        panels.setdefault((r["dtype"], r["direction"], r["residual"]), []).append(r)
    if not panels:
        return "no sweep shapes were run (decode shapes are in the JSON's latency section)"
    cols = min(4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    meta = doc["meta"]
    fig.suptitle(f"{TITLES.get(op, op)}, {meta['device']['name']}, M*N = {meta['sweep_elements']}, commit "
                 f"{(meta['commit'] or 'unknown')[:12]}, {meta['date_utc']}", fontsize=9)
    for i, ((dtype, direction, residual), group) in enumerate(panels.items()):
        ax = fig.add_subplot(nrows, cols, i + 1)
        copy = sorted({(r["N"], r["copy_gbps"]) for r in group if r["impl"] == "normkit"})
        if copy:
            ax.plot([n for n, _ in copy], [g for _, g in copy], label="copy (same bytes)", **STYLE["copy"])
        for impl in dict.fromkeys(r["impl"] for r in group):
            points = sorted((r["N"], r["gbps"]) for r in group if r["impl"] == impl and r["status"] == "ok")
            if points:
                ax.plot([n for n, _ in points], [g for _, g in points], label=impl,
                        **STYLE.get(impl, dict(marker=".")))
        if meta["reference_copy"]:
            ax.axhline(meta["reference_copy"]["gbps"], label=f"copy {meta['reference_copy']['bytes_copied'] >> 20} MiB",
                       **STYLE["reference"])
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dtype} {direction}{' + residual' if residual else ''}", fontsize=9)
        ax.set_xlabel("N")
        ax.set_ylabel("GB/s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    return None
