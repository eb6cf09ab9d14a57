"""Where a full `normkit bench` sweep stands against issue 4's targets, from its
bench.json: the counts that docs/perf/h200.md's "Current status" reports.

  - bandwidth: normkit's sweep rows below their ratio to copy (forward 0.92, backward
    0.88 for N >= 1024; 0.80 below);
  - peers: per peer, the sweep rows it ran where it was faster than normkit (and of
    those, how many clear: the peer's p80 under normkit's p20, so not a tie within the
    samples' spread), and the decode rows (graph replay) where it was;
  - cliffs: rows whose ratio is more than 5 % from a neighbour's (the next smaller or
    larger N of the same op, direction, dtype and residual);
  - unsteady: sweep rows of any implementation whose samples still spread wide after the
    bench timed them again (p80/p20 over SPREAD_LIMIT): the device was disturbed while
    they ran, so a peer "faster", a row "below" or a cliff that involves one is marked
    "(unsteady)" in the lists rather than taken as measured.

With --list, the rows below target, the rows a peer was faster on (both times) and the
cliffs (with the neighbours' ratios) are listed; with --against OLD.json, every row
whose ratio moved by more than --threshold (default 2 %) since OLD.json. --op keeps one
operator's rows (issue 4 is RMSNorm's, issue 5 LayerNorm's).

    python3 scripts/sweep_status.py docs/perf/bench-h200-sweep-0e60596.json.gz --list
    python3 scripts/sweep_status.py docs/perf/bench-h200-sweep-0e60596.json.gz --list --op rmsnorm
    python3 scripts/sweep_status.py NEW.json --against OLD.json
"""
import argparse
import collections
import gzip
import json
import sys

FORWARD_TARGET, BACKWARD_TARGET, SHORT_TARGET, SHORT_N = 0.92, 0.88, 0.80, 1024
CLIFF = 0.05
SPREAD_LIMIT = 1.10  # normkit.bench.timing.SPREAD_LIMIT (this script runs without normkit installed)


def load_result(path):
    """A bench JSON file, plain or gzipped (docs/perf keeps them as .json.gz)."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def target(direction, n):
    if n < SHORT_N:
        return SHORT_TARGET
    return FORWARD_TARGET if direction == "fwd" else BACKWARD_TARGET


def sweep_rows(doc, op=None):
    """{(op, direction, dtype, residual, N): row} of normkit's timed sweep rows, and
    the peers' sweep rows as a list; only `op`'s when given."""
    ours, peers = {}, []
    for r in doc["rows"]:
        if r["kind"] != "sweep" or r["status"] != "ok" or (op and r["op"] != op):
            continue
        key = (r["op"], r["direction"], r["dtype"], bool(r["residual"]), r["N"])
        if r["impl"] == "normkit":
            ours[key] = r
        else:
            peers.append((key, r))
    return ours, peers


def unsteady(r):
    """Whether a timed row's samples spread wider than the bench accepts (p80 over p20)."""
    p20, p80 = r.get("us_p20"), r.get("us_p80")
    return bool(p20 and p80 and p80 / p20 > SPREAD_LIMIT)


def clearly_faster(peer, ours):
    """Whether the peer's row beat ours beyond the samples' spread: its p80 under our
    p20 (rows without the percentiles: by their medians)."""
    if peer.get("us_p80") and ours.get("us_p20"):
        return peer["us_p80"] < ours["us_p20"]
    return peer["us"] < ours["us"]


def status(doc, op=None):
    ours, peers = sweep_rows(doc, op)
    shaky = sorted({(k, r["impl"]) for k, r in list(ours.items()) + peers if unsteady(r)})
    below = sorted((k, r["ratio_to_copy"]) for k, r in ours.items() if r["ratio_to_copy"] < target(k[1], k[4]))
    faster = collections.defaultdict(lambda: [0, 0])  # peer -> [rows ran, rows faster]
    faster_rows = []  # (peer, key, normkit us, peer us)
    clear_rows = set()  # (peer, key): faster beyond both rows' p20-p80 spread
    for key, r in peers:
        if key in ours:
            won = r["us"] < ours[key]["us"]
            faster[r["impl"]][0] += 1
            faster[r["impl"]][1] += won
            if won:
                faster_rows.append((r["impl"], key, ours[key]["us"], r["us"]))
                if clearly_faster(r, ours[key]):
                    clear_rows.add((r["impl"], key))
    decode = collections.Counter()
    decode_rows = 0
    for lat in doc.get("latency") or []:
        if op and lat.get("op", op) != op:
            continue
        mine = lat["us"].get("normkit")
        if mine is None:
            continue
        decode_rows += 1
        for impl, us in lat["us"].items():
            if impl != "normkit" and us is not None and us < mine:
                decode[impl] += 1
    groups = collections.defaultdict(dict)
    for k, r in ours.items():
        groups[k[:4]][k[4]] = r["ratio_to_copy"]
    cliffs, cliff_context = [], {}
    for g, by_n in groups.items():
        ns = sorted(by_n)
        for i, n in enumerate(ns):
            near = [by_n[ns[j]] for j in (i - 1, i + 1) if 0 <= j < len(ns)]
            if any(abs(by_n[n] - v) / v > CLIFF for v in near):
                cliffs.append(g + (n,))
                cliff_context[g + (n,)] = [(m, by_n[m]) for m in ns[max(0, i - 1):i + 2]]
    clear = collections.Counter(peer for peer, _ in clear_rows)  # peer -> such rows
    return {"rows": len(ours), "below": below, "peers": dict(faster), "clear": dict(clear), "clear_rows": clear_rows,
            "decode": dict(decode),
            "decode_rows": decode_rows, "cliffs": sorted(cliffs), "faster_rows": sorted(faster_rows),
            "cliff_context": cliff_context, "unsteady": shaky}


def moved(old_doc, new_doc, threshold, op=None):
    old, _ = sweep_rows(old_doc, op)
    new, _ = sweep_rows(new_doc, op)
    out = []
    for k in sorted(new):
        if k in old:
            a, b = old[k]["ratio_to_copy"], new[k]["ratio_to_copy"]
            if abs(b / a - 1) > threshold:
                out.append((k, a, b))
    return out


def name(key):
    op, direction, dtype, residual, n = key
    return f"{op} {direction} {dtype}{' residual' if residual else ''} N={n}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_json")
    ap.add_argument("--list", action="store_true", help="list the rows below target")
    ap.add_argument("--against", metavar="OLD_JSON", help="list the rows that moved since this sweep")
    ap.add_argument("--threshold", type=float, default=0.02, help="relative move that --against lists (0.02)")
    ap.add_argument("--op", choices=("rmsnorm", "layernorm"), help="only this operator's rows")
    args = ap.parse_args(argv)
    doc = load_result(args.bench_json)
    s = status(doc, args.op)
    print(f"bandwidth: {len(s['below'])} of {s['rows']} rows below target")
    for peer, (ran, won) in sorted(s["peers"].items()):
        print(f"peers: {peer} faster on {won} of {ran} rows ({s['clear'].get(peer, 0)} beyond the p20-p80 spreads)")
    print(f"decode: peers faster on {s['decode'] or 'none'} of {s['decode_rows']} decode rows")
    print(f"cliffs: {len(s['cliffs'])} of {s['rows']} rows more than {CLIFF:.0%} off a neighbour")
    print(f"unsteady: {len(s['unsteady'])} rows with p80/p20 over {SPREAD_LIMIT:.2f} after the bench's re-timing")
    if args.list:
        shaky = set(s["unsteady"])

        def mark(*keyed):  # keyed: (key, impl) pairs the line's judgment rests on
            return " (unsteady)" if any(k in shaky for k in keyed) else ""

        for key, ratio in s["below"]:
            print(f"  below: {name(key)} {ratio:.3f} (target {target(key[1], key[4]):.2f}){mark((key, 'normkit'))}")
        for peer, key, ours_us, peer_us in s["faster_rows"]:
            tie = "" if (peer, key) in s["clear_rows"] else " (within the spreads)"
            print(f"  {peer} faster: {name(key)} {peer_us:.1f} against {ours_us:.1f} us "
                  f"({(ours_us / peer_us - 1) * 100:.1f} %){tie}{mark((key, 'normkit'), (key, peer))}")
        for key in s["cliffs"]:
            near = ", ".join(f"{m}: {r:.3f}" for m, r in s["cliff_context"][key])
            neighbours = [(key[:4] + (m,), "normkit") for m, _ in s["cliff_context"][key]]
            print(f"  cliff: {name(key)} ({near}){mark(*neighbours)}")
        for key, impl in s["unsteady"]:
            print(f"  unsteady: {name(key)} {impl}")
    if args.against:
        for key, a, b in moved(load_result(args.against), doc, args.threshold, args.op):
            print(f"  moved: {name(key)} {a:.3f} -> {b:.3f} ({(b / a - 1) * 100:+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
