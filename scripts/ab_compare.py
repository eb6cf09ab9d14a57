"""Compares `normkit bench` JSON files of two sides (scripts/ab_gpu.sh's runs): the
mean ratio to copy of normkit's sweep rows (microseconds of its decode rows) per
side, each run beside it, and a mark where the means differ by more than 2 % (3 %
for the decode rows, whose times are a few microseconds).

    python3 scripts/ab_compare.py old-1.json old-2.json -- new-1.json new-2.json
"""
import sys

from sweep_status import load_result  # beside this script: plain or gzipped bench JSON


def normkit_rows(path):
    doc = load_result(path)
    rows = {}
    for r in doc["rows"]:
        if r["impl"] == "normkit" and r["status"] == "ok" and r["kind"] == "sweep":
            rows[(r["op"], r["direction"], r["dtype"], "res" if r["residual"] else "-", r["M"], r["N"])] = \
                r["ratio_to_copy"]
    for lat in doc.get("latency") or []:
        if lat["us"].get("normkit") is not None:
            key = (lat["op"], lat["direction"], lat["dtype"], "res" if lat["residual"] else "-", lat["M"], lat["N"], "us")
            rows[key] = lat["us"]["normkit"]
    return rows


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    old = [normkit_rows(p) for p in argv[:split]]
    new = [normkit_rows(p) for p in argv[split + 1:]]
    if not old or not new:
        sys.exit(__doc__)
    for key in sorted(set().union(*old, *new), key=str):
        a = [r[key] for r in old if key in r]
        b = [r[key] for r in new if key in r]
        if not a or not b:
            continue
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        latency = key[-1] == "us"
        limit = 0.03 if latency else 0.02
        better = (mb < ma) if latency else (mb > ma)
        mark = " " if abs(mb - ma) <= limit * ma else ("+" if better else "-")
        runs = " ".join(f"{v:.3f}" for v in a) + " | " + " ".join(f"{v:.3f}" for v in b)
        print(f"{mark} {'/'.join(map(str, key)):52s} {ma:8.3f} -> {mb:8.3f}   ({runs})")


if __name__ == "__main__":
    main(sys.argv[1:])
