"""scripts/sweep_status.py, the counts docs/perf/h200.md reports from a sweep's
bench.json, on small made-up sweeps: the bandwidth targets by direction and N, peers
faster by time (and beyond the samples' spread), decode rows, neighbours more than 5 % apart, rows that moved."""

import gzip
import json

import pytest


@pytest.fixture(scope="module")
def sweep_status(load_script):
    return load_script("sweep_status.py")


def row(direction, n, ratio, impl="normkit", us=None, residual=False, status="ok"):
    return {"op": "rmsnorm", "direction": direction, "dtype": "bf16", "residual": residual, "N": n, "M": 1,
            "kind": "sweep", "impl": impl, "status": status, "ratio_to_copy": ratio,
            "us": us if us is not None else 100.0 / ratio}


def doc(rows, latency=()):
    return {"rows": list(rows), "latency": list(latency)}


def listed(sweep_status, capsys, tmp_path, rows, *flags, latency=()):
    """What `sweep_status.py SWEEP --list [flags]` prints for a sweep of these rows."""
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc(rows, latency)))
    assert sweep_status.main([str(path), "--list", *flags]) == 0
    return capsys.readouterr().out


def test_targets_by_direction_and_n(sweep_status):
    s = sweep_status.status(doc([
        row("fwd", 512, 0.81), row("fwd", 1024, 0.919), row("fwd", 2048, 0.93),
        row("bwd", 512, 0.79), row("bwd", 1024, 0.88), row("bwd", 2048, 0.879),
        row("bwd", 4096, 0.5, status="failed")]))
    assert s["rows"] == 6  # the failed row is not counted
    assert [(k[1], k[4]) for k, _ in s["below"]] == [("bwd", 512), ("bwd", 2048), ("fwd", 1024)]


def test_peers_faster_by_time_and_decode_rows(sweep_status):
    s = sweep_status.status(doc(
        [row("fwd", 1024, 0.95, us=10.0), row("fwd", 1024, 0.9, impl="liger", us=9.9),
         row("fwd", 2048, 0.95, us=20.0), row("fwd", 2048, 0.9, impl="liger", us=20.1),
         row("fwd", 2048, 0.5, impl="eager", us=40.0), row("fwd", 4096, 0.9, impl="eager", us=1.0)],
        latency=[{"us": {"normkit": 2.2, "liger": 2.1, "eager": 8.0}}, {"us": {"normkit": 2.0, "liger": None}},
                 {"us": {"normkit": None, "liger": 1.0}}]))
    # The peer's N=4096 row has no normkit row to race.
    assert s["peers"] == {"liger": [2, 1], "eager": [1, 0]}
    assert s["decode"] == {"liger": 1} and s["decode_rows"] == 2


def test_peer_faster_beyond_the_spread_or_within_it(sweep_status, capsys, tmp_path):
    def spread(r, p20, p80):
        return dict(r, us_p20=p20, us_p80=p80)

    rows = [spread(row("fwd", 1024, 0.95, us=10.0), 9.9, 10.1), spread(row("fwd", 1024, 0.9, impl="liger", us=9.7), 9.6, 9.8),
            spread(row("fwd", 2048, 0.95, us=20.0), 19.8, 20.2), spread(row("fwd", 2048, 0.9, impl="liger", us=19.9), 19.7, 20.0),
            row("fwd", 4096, 0.95, us=30.0), row("fwd", 4096, 0.9, impl="liger", us=29.0)]
    s = sweep_status.status(doc(rows))
    # N=1024: liger's p80 9.8 under our p20 9.9; N=2048: 20.0 over 19.8, a tie; N=4096
    # has no percentiles: by the medians.
    assert s["peers"] == {"liger": [3, 3]} and s["clear"] == {"liger": 2}
    out = listed(sweep_status, capsys, tmp_path, rows)
    assert "peers: liger faster on 3 of 3 rows (2 beyond the p20-p80 spreads)" in out
    assert "liger faster: rmsnorm fwd bf16 N=2048 19.9 against 20.0 us (0.5 %) (within the spreads)" in out
    assert "liger faster: rmsnorm fwd bf16 N=1024 9.7 against 10.0 us (3.1 %)\n" in out


def test_cliffs_against_either_neighbour(sweep_status):
    s = sweep_status.status(doc([
        row("fwd", 1024, 1.0), row("fwd", 2048, 0.96), row("fwd", 4096, 0.90), row("fwd", 8192, 0.90),
        row("fwd", 1024, 0.5, residual=True)]))
    # 0.96 -> 0.90 from N=2048 to 4096: 6.7 % of 4096's ratio, 6.2 % of 2048's, so
    # both are cliffs; 1024 -> 2048 is 4.2 %; the lone residual row has no neighbour.
    assert [k[4] for k in s["cliffs"]] == [2048, 4096]


def test_rows_that_moved(sweep_status, capsys, tmp_path):
    old = tmp_path / "old.json.gz"  # gzipped, as docs/perf keeps them
    new = tmp_path / "new.json"
    with gzip.open(old, "wt") as f:
        json.dump(doc([row("bwd", 1024, 0.80), row("bwd", 2048, 0.90)]), f)
    new.write_text(json.dumps(doc([row("bwd", 1024, 0.85), row("bwd", 2048, 0.905)])))
    assert sweep_status.main([str(new), "--against", str(old), "--list"]) == 0
    out = capsys.readouterr().out
    assert "bandwidth: 1 of 2 rows below target" in out
    assert "below: rmsnorm bwd bf16 N=1024 0.850 (target 0.88)" in out
    assert "moved: rmsnorm bwd bf16 N=1024 0.800 -> 0.850 (+6.2 %)" in out
    assert "N=2048" not in out.split("moved:")[-1]


def test_one_operator_and_the_listed_peer_rows_and_cliffs(sweep_status, capsys, tmp_path):
    layernorm = dict(row("fwd", 1024, 0.5), op="layernorm")
    rows = [row("fwd", 1024, 0.95, us=10.0), row("fwd", 1024, 0.9, impl="liger", us=9.5),
            row("fwd", 2048, 0.85), layernorm]
    latency = [{"op": "rmsnorm", "us": {"normkit": 2.0, "liger": 1.9}},
               {"op": "layernorm", "us": {"normkit": 2.0, "liger": 1.8}}]
    s = sweep_status.status(doc(rows, latency), op="rmsnorm")
    assert s["rows"] == 2 and s["decode_rows"] == 1
    assert s["faster_rows"] == [("liger", ("rmsnorm", "fwd", "bf16", False, 1024), 10.0, 9.5)]
    out = listed(sweep_status, capsys, tmp_path, rows, "--op", "rmsnorm", latency=latency)
    assert "liger faster: rmsnorm fwd bf16 N=1024 9.5 against 10.0 us (5.3 %)" in out
    assert "cliff: rmsnorm fwd bf16 N=2048 (1024: 0.950, 2048: 0.850)" in out
    assert "layernorm" not in out


def test_unsteady_rows_are_counted_and_mark_the_judgments_they_carry(sweep_status, capsys, tmp_path):
    def spread(r, ratio):  # p20 / p80 around the median, ratio = p80 / p20
        return dict(r, us_p20=r["us"], us_p80=r["us"] * ratio)

    rows = [spread(row("fwd", 1024, 0.95, us=10.0), 1.01), spread(row("fwd", 1024, 0.9, impl="liger", us=9.5), 1.3),
            spread(row("fwd", 2048, 0.80), 1.25), spread(row("fwd", 4096, 0.95), 1.10), row("fwd", 8192, 0.95)]
    s = sweep_status.status(doc(rows))
    # p80/p20 of exactly the limit is steady, as in the bench; rows without the fields are too.
    assert [(k[4], impl) for k, impl in s["unsteady"]] == [(1024, "liger"), (2048, "normkit")]
    out = listed(sweep_status, capsys, tmp_path, rows)
    assert "unsteady: 2 rows with p80/p20 over 1.10" in out
    assert "below: rmsnorm fwd bf16 N=2048 0.800 (target 0.92) (unsteady)" in out
    assert "liger faster: rmsnorm fwd bf16 N=1024 9.5 against 10.0 us (5.3 %) (within the spreads) (unsteady)" in out
    # N=4096's cliff to 2048 rests on the unsteady N=2048 row; 8192 has no cliff.
    assert "cliff: rmsnorm fwd bf16 N=4096 (2048: 0.800, 4096: 0.950, 8192: 0.950) (unsteady)" in out
    assert "  unsteady: rmsnorm fwd bf16 N=1024 liger" in out


def test_spread_limit_is_the_bench_s(sweep_status):
    from normkit.bench import timing

    assert sweep_status.SPREAD_LIMIT == timing.SPREAD_LIMIT
