"""Turns what scripts/gpu_check.sh left in $OUT into a kept record in docs/perf/.

  python scripts/record_gpu_run.py counts pytest-gpu.xml
      Per-file pass/fail/error/skip counts of a JUnit XML, as `key: value` lines
      (gpu_check.sh appends them to gpu_summary.txt).
  python scripts/record_gpu_run.py record RESULTS_DIR [--xml F] [--summary F] [--out F] [--command CMD]
      Reads RESULTS_DIR/pytest-gpu.xml and RESULTS_DIR/gpu_summary.txt (the files the
      device tool brought back) and writes docs/perf/rmsnorm-correctness-h200.md:
      the latest run in full (date, GPU, driver, commit, command, counts per test
      file, failures, skips, slowest tests, wall time) and one history row per run;
      rows already in the file are kept, a rerun of the same date and commit replaced.

Standard library only: it runs on the GPU machine's image and here alike.
"""
import argparse
import collections
import os
import re
import sys
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "docs", "perf", "rmsnorm-correctness-h200.md")
STATUSES = ("passed", "failed", "errors", "skipped")
HISTORY_BEGIN = "<!-- history-begin: record_gpu_run.py keeps the rows between these markers -->"
HISTORY_END = "<!-- history-end -->"
HISTORY_HEADER = ("| date | commit | GPU | driver | tests | passed | failed | errors | skipped | pytest (s) | "
                  "whole check (s) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

Case = collections.namedtuple("Case", "file name status seconds message")


def _file_of(classname):
    """'tests.python.test_x' (or 'tests.python.test_x.TestY') -> 'tests/python/test_x.py'."""
    parts = (classname or "").split(".")
    modules = [i for i, p in enumerate(parts) if p.startswith("test_") or p.endswith("_test")]
    if not modules:
        return classname or "?"
    return "/".join(parts[:modules[-1] + 1]) + ".py"


def parse_junit(path):
    """Returns (cases, pytest seconds, timestamp) of a pytest JUnit XML (xunit1 or xunit2)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    cases = []
    for suite in suites:
        for tc in suite.iter("testcase"):
            if tc.get("name") is None and tc.get("classname") is None:
                # What pytest writes for the test that was running when it got SIGINT
                # (gpu_check.sh's time limit): not a pass.
                cases.append(Case("(interrupted)", "the test running when pytest was stopped", "errors",
                                  float(tc.get("time") or 0.0), "interrupted: the run hit its time limit"))
                continue
            status, message = "passed", ""
            for tag, name in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
                child = tc.find(tag)
                if child is not None:
                    status, message = name, (child.get("message") or (child.text or "")).strip()
                    break
            file = tc.get("file") or _file_of(tc.get("classname"))
            cases.append(Case(file, tc.get("name", "?"), status, float(tc.get("time") or 0.0), message))
    seconds = sum(float(s.get("time") or 0.0) for s in suites)
    return cases, seconds, (suites[0].get("timestamp") if suites else None)


def count(cases):
    """{file: Counter(status -> n, 'tests' -> n, 'seconds' -> s)} plus a '**total**' entry."""
    per_file = collections.OrderedDict()
    for c in sorted(cases, key=lambda c: c.file):
        entry = per_file.setdefault(c.file, collections.Counter())
        entry[c.status] += 1
        entry["tests"] += 1
        entry["seconds"] += c.seconds
    total = collections.Counter()
    for entry in per_file.values():
        total.update(entry)
    return per_file, total


def _counts_text(entry):
    return (f"{entry['tests']} tests: {entry['passed']} passed, {entry['failed']} failed, {entry['errors']} errors, "
            f"{entry['skipped']} skipped")


def cmd_counts(args):
    cases, seconds, _ = parse_junit(args.xml)
    per_file, total = count(cases)
    print(f"pytest: {_counts_text(total)}; {seconds:.1f} s ({os.path.basename(args.xml)})")
    for file, entry in per_file.items():
        print(f"pytest_file: {file} {_counts_text(entry)}; {entry['seconds']:.1f} s")
    return 0


def parse_summary(path):
    """gpu_summary.txt: `key: value` lines; `step:` lines are collected in order."""
    info, steps = {}, []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    continue
                key, value = key.strip(), value.strip()
                if key == "step":
                    m = re.match(r"(\S+)\s+rc=(\S+)\s+(\d+)s", value)
                    steps.append(m.groups() if m else (value, "?", "?"))
                elif key and key not in info:
                    info[key] = value
    return info, steps


def _history_rows(text):
    if HISTORY_BEGIN not in text or HISTORY_END not in text:
        return []
    block = text.split(HISTORY_BEGIN, 1)[1].split(HISTORY_END, 1)[0]
    return [line for line in block.splitlines() if line.startswith("| ") and not line.startswith(("| date", "| ---"))]


def _md(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render(info, steps, cases, pytest_seconds, timestamp, command, old_rows):
    per_file, total = count(cases)
    date = info.get("date") or timestamp or "unknown"
    commit = info.get("commit", "unknown")
    gpu, driver = info.get("gpu", "unknown GPU"), info.get("driver", "unknown")
    verdict = "PASS" if total["failed"] == 0 and total["errors"] == 0 and total["tests"] > 0 else "FAIL"
    if info.get("finished") == "no":
        verdict += " (the check was cut short: see the steps)"
    wall = info.get("wall_s", "?")
    lines = [
        "# RMSNorm correctness on the H200: GPU test suite",
        "",
        "Written by `scripts/record_gpu_run.py record` from `pytest-gpu.xml` and `gpu_summary.txt`, the files",
        "`scripts/gpu_check.sh` leaves in `$OUT`. The suite: `tests/python/test_rmsnorm_gpu.py` (the grid of",
        "DESIGN §5: dtype x weight dtype x M x N, eager and torch.compile, forward and backward against a",
        "float64 reference) and `tests/python/test_rmsnorm_gpu_features.py` (bias, residual, per-head, strides,",
        "alignment, streams, graphs, determinism, guard regions, compute-sanitizer), next to the rest of",
        "`tests/python`.",
        "",
        "## Latest run",
        "",
        f"- Date: {date}",
        f"- GPU: {gpu} ({info.get('gpu_memory', '?')}), driver {driver}; nvcc {info.get('nvcc', '?')}; "
        f"Python {info.get('python', '?')}, torch {info.get('torch', '?')}",
        f"- Commit: {commit}",
        f"- Command (on the GPU machine, through the device tool): `{command or info.get('command', '?')}`",
        f"- Result: **{verdict}**: {total['passed']} passed, {total['failed']} failed, {total['errors']} errors, "
        f"{total['skipped']} skipped of {total['tests']} tests; pytest {pytest_seconds:.1f} s, whole check {wall} s",
        "",
        "| test file | tests | passed | failed | errors | skipped | time (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for file, e in list(per_file.items()) + [("**total**", total)]:
        lines.append(f"| {file} | {e['tests']} | {e['passed']} | {e['failed']} | {e['errors']} | {e['skipped']} | "
                     f"{e['seconds']:.1f} |")
    if steps:
        lines += ["", "Steps of `gpu_check.sh` (rc 124: stopped at its time limit):", "",
                  "| step | rc | time (s) |", "| --- | --- | --- |"]
        lines += [f"| {name} | {rc} | {secs} |" for name, rc, secs in steps]
    bad = [c for c in cases if c.status in ("failed", "errors")]
    if bad:
        lines += ["", "### Failures and errors", ""]
        lines += [f"- `{c.file}::{c.name}` ({c.status}): {_md(c.message.splitlines()[0] if c.message else '')[:300]}"
                  for c in bad[:50]]
        if len(bad) > 50:
            lines.append(f"- ... and {len(bad) - 50} more (see pytest.log)")
    skips = collections.Counter(c.message.splitlines()[0] if c.message else "" for c in cases if c.status == "skipped")
    if skips:
        lines += ["", "### Skips, by reason", ""]
        lines += [f"- {n} x {_md(reason)[:300]}" for reason, n in skips.most_common()]
    slow = sorted((c for c in cases if c.seconds > 0), key=lambda c: -c.seconds)[:10]
    if slow:
        lines += ["", "### Slowest tests", "", "| test | time (s) |", "| --- | --- |"]
        lines += [f"| `{c.file}::{c.name}` | {c.seconds:.2f} |" for c in slow]
    row = (f"| {date} | {commit} | {_md(gpu)} | {driver} | {total['tests']} | {total['passed']} | {total['failed']} | "
           f"{total['errors']} | {total['skipped']} | {pytest_seconds:.1f} | {wall} |")
    rows = [r for r in old_rows if not r.startswith(f"| {date} | {commit} |")] + [row]
    rows.sort(key=lambda r: r.split("|")[1].strip(), reverse=True)
    lines += ["", "## History", "", HISTORY_BEGIN, HISTORY_HEADER] + rows + [HISTORY_END, ""]
    return "\n".join(lines)


def cmd_record(args):
    xml = args.xml or os.path.join(args.results, "pytest-gpu.xml")
    summary = args.summary or os.path.join(args.results, "gpu_summary.txt")
    if not os.path.exists(xml):
        print(f"record_gpu_run: no JUnit XML at {xml} (did the pytest step run?)", file=sys.stderr)
        return 1
    cases, seconds, timestamp = parse_junit(xml)
    info, steps = parse_summary(summary)
    old = ""
    if os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read()
    text = render(info, steps, cases, seconds, timestamp, args.command, _history_rows(old))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    _, total = count(cases)
    print(f"record_gpu_run: wrote {args.out} ({_counts_text(total)})")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("counts", help="per-file counts of a JUnit XML as key: value lines")
    c.add_argument("xml")
    c.set_defaults(func=cmd_counts)
    r = sub.add_parser("record", help="write/update the markdown record from a results folder")
    r.add_argument("results", nargs="?", default=".", help="folder holding pytest-gpu.xml and gpu_summary.txt")
    r.add_argument("--xml", help="JUnit XML (default: RESULTS/pytest-gpu.xml)")
    r.add_argument("--summary", help="summary (default: RESULTS/gpu_summary.txt)")
    r.add_argument("--out", default=DEFAULT_OUT, help="markdown record (default: %(default)s)")
    r.add_argument("--command", help="the command as run (default: the summary's command line)")
    r.set_defaults(func=cmd_record)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
