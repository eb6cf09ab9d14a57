"""What a run shows and leaves behind: the live table, the summary, the JSON.

Rows are printed as they are measured (a sweep takes minutes, and a failing peer
should be visible when it fails, not at the end), under a progress bar that
disappears when the run ends; the summary then condenses the rows per panel of
the plots (per operator: dtype x direction x residual). Output goes through rich with markup
off: reasons quote error messages, whose [brackets] rich would eat as styles.
The JSON is written atomically because it is rewritten after every case.
"""

import json
import math
import os
import statistics

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

# (header, width, align) of the live rows: 80 columns, a terminal's default and what a
# non-terminal gets from rich. speedup is normkit's over the row's peer (peer time / normkit time).
COLUMNS = (("op", 9, "<"), ("dir", 3, "<"), ("dtype", 5, "<"), ("M", 6, ">"), ("N", 6, ">"), ("res", 3, "<"),
           ("impl", 10, "<"), ("us/call", 8, ">"), ("GB/s", 7, ">"), ("x copy", 6, ">"), ("speedup", 7, ">"))
# The operators as the live rows and the tables name them (the JSON has the full names).
SHORT_OP = {"rmsnorm": "rmsnorm", "layernorm": "layernorm", "fused_add_rmsnorm": "add+rms",
            "fused_add_layernorm": "add+ln"}


class Output:
    def __init__(self):
        # soft_wrap: long lines (reasons, paths) stay whole in logs; tables still fit the width.
        self.console = Console(markup=False, highlight=False, soft_wrap=True)

    def line(self, text="", style=None):
        self.console.print(text, style=style)


def _cells(values):
    return " ".join(f"{str(v):{align}{width}}" for v, (_, width, align) in zip(values, COLUMNS))


def _num(value, fmt):
    return "-" if value is None else format(value, fmt)


def format_row(row):
    head = [SHORT_OP.get(row["op"], row["op"]), row["direction"], row["dtype"], row["M"], row["N"],
            "yes" if row["residual"] else "no", row["impl"]]
    if row["status"] != "ok":
        return _cells(head) + f" {row['status']}: {row['reason']}"
    text = _cells(head + [_num(row["us"], ".2f"), _num(row["gbps"], ".1f"), _num(row["ratio_to_copy"], ".3f"),
                          "-" if row["normkit_speedup"] is None else f"{row['normkit_speedup']:.2f}x"])
    if row.get("timings"):  # timed again: its first run's samples spread too wide (timing.steady)
        text += f"  (timed {row['timings']}x, p80/p20 {row['us_p80'] / row['us_p20']:.2f})"
    return text


class Live:
    """Progress over the cases, with each measured row printed above the bar."""

    def __init__(self, output, total):
        self.console = output.console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True)
        self.task = self.progress.add_task("starting", total=total)

    def __enter__(self):
        self.progress.start()
        self.console.print(_cells([c[0] for c in COLUMNS]), style="bold")
        return self

    def __exit__(self, *exc):
        self.progress.stop()
        return False

    def status(self, text):
        self.progress.update(self.task, description=text)

    def advance(self):
        self.progress.advance(self.task)

    def row(self, row):
        if row["status"] == "unsupported":
            return  # by design, not a result: the summary lists what each implementation lacks
        style = None if row["status"] == "ok" else "red"
        self.console.print(Text(format_row(row), style=style or ""))

    def reference(self, copy, host):
        self.console.print(f"reference copy: {copy['bytes_copied'] / 2**30:.2f} GiB copy_ at {copy['gbps']:.1f} GB/s "
                           f"(ratios to copy use the per-shape copy of the same bytes)")
        if host:
            self.console.print(host_line(host))


def host_line(host):
    parts = [f"{r['impl']} {r['us_per_call']:.2f} us" if r["status"] == "ok" else f"{r['impl']} failed: {r['reason']}"
             for r in host["results"]]
    return (f"host time per call (M={host['M']}, N={host['N']} {host['dtype']}, weight, no grad, "
            f"{host['calls_per_round']} calls x {host['rounds']} rounds, {host['device']}): " + ", ".join(parts))


def _span(values, fmt, suffix=""):
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    text = f"{lo:{fmt}}{suffix}" if lo == hi else f"{lo:{fmt}}-{hi:{fmt}}{suffix}"
    return text + (f" (median {statistics.median(values):{fmt}})" if len(values) > 2 else "")


def _impls(doc):
    return [name for name, info in doc["meta"]["implementations"].items() if info["status"] == "available"]


def _bandwidth_tables(doc):
    """One table per operator (an op column would not fit 80 columns)."""
    rows = [r for r in doc["rows"] if r["kind"] == "sweep"]
    peers = [p for p in _impls(doc) if p != "normkit"]
    by_op = {}
    for r in rows:
        by_op.setdefault(r["op"], {}).setdefault((r["dtype"], r["direction"], r["residual"]), []).append(r)
    tables = []
    for op, groups in by_op.items():
        table = Table(title=f"sweep, {op}: normkit x copy, and normkit's speed-up over each peer (peer time / "
                            "normkit time)", title_justify="left")
        for name in ["dtype", "dir", "res", "N", "normkit x copy", "normkit GB/s"] + [f"vs {p}" for p in peers]:
            table.add_column(name)
        for (dtype, direction, residual), group in groups.items():
            nk = [r for r in group if r["impl"] == "normkit" and r["status"] == "ok"]
            ns = sorted({r["N"] for r in group})
            cells = [dtype, direction, "yes" if residual else "no",
                     f"{ns[0]}-{ns[-1]}" if len(ns) > 1 else str(ns[0]),
                     _span([r["ratio_to_copy"] for r in nk], ".3f"), _span([r["gbps"] for r in nk], ".0f")]
            for p in peers:
                mine = [r for r in group if r["impl"] == p]
                speedups = [r["normkit_speedup"] for r in mine if r["normkit_speedup"] is not None]
                failed = sum(r["status"] == "failed" for r in mine)
                text = _span(speedups, ".2f", "x") if mine and mine[0]["status"] != "unsupported" else "n/a"
                cells.append(text + (f", {failed} failed" if failed else ""))
            table.add_row(*(Text(c) for c in cells))
        tables.append(table)
    return tables


def _latency_table(doc):
    if not doc["latency"]:
        return None
    names = _impls(doc)
    table = Table(title=f"decode latency, us per call ({doc['latency'][0]['method']})", title_justify="left")
    for name in ["op", "dtype", "dir", "res", "M", "N", "copy"] + names:
        table.add_column(name, justify="right")
    for e in doc["latency"]:
        op = e.get("op", "rmsnorm")
        cells = [SHORT_OP.get(op, op), e["dtype"], e["direction"], "yes" if e["residual"] else "no", str(e["M"]),
                 str(e["N"]), f"{e['copy_us']:.2f}"] + [_num(e["us"].get(n), ".2f") for n in names]
        table.add_row(*(Text(c) for c in cells))
    return table


def summary(output, doc, written):
    console = output.console
    for table in (*_bandwidth_tables(doc), _latency_table(doc)):
        if table is not None:
            console.print(table)
    if doc["host_overhead"]:
        console.print(host_line(doc["host_overhead"]))
    not_run = {}
    for name, info in doc["meta"]["implementations"].items():
        if info["status"] not in ("available", "not requested"):
            not_run.setdefault(f"{info['status']}: {info['why']}", []).append(name)
    for why, names in not_run.items():
        console.print(f"{', '.join(names)}: {why}")
    unsupported = sorted({f"{r['impl']} ({r['reason']})" for r in doc["rows"] if r["status"] == "unsupported"})
    if unsupported:
        console.print("not run by design: " + "; ".join(unsupported))
    failed = [r for r in doc["rows"] if r["status"] == "failed"]
    if failed:
        console.print(f"{len(failed)} row(s) failed (reasons above and in rows[].reason)", style="red")
    console.print(f"{doc['meta']['mode']} mode, {len(doc['rows'])} rows in {doc['meta']['elapsed_s']:.1f} s; "
                  f"wrote {', '.join(written)}")


def _finite(value):
    """JSON has no NaN or infinity: they become null (a NaN error is already a failed check)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(doc, path):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(_finite(doc), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
