"""`normkit bench`: a real CPU run of --quick --op all validated against the JSON Schema,
every committed docs/perf/bench-*.json(.gz) validated too, the byte accounting of every
operator, argument errors, the in-place fused adds checked on fresh copies, and peers
that are missing, fail or disagree being reported rather than dropped.

The CPU run is the one that keeps the schema check from passing vacuously while no
bench JSON is committed. The GPU run (marked `gpu`) repeats it on the device.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from normkit.bench import options, plot, report, timing, traffic
from normkit.bench.validate import load_result

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = sorted(REPO.glob("docs/perf/bench-*.json")) + sorted(REPO.glob("docs/perf/bench-*.json.gz"))
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
# A bench small enough for in-process tests (a second or two on a CPU).
TINY = ("--device", "cpu", "--dtypes", "bf16", "--n", "1024", "--elements", "2^14", "--decode-shapes", "none", "--directions", "fwd",
        "--residual", "without", "--reps", "2", "--warmup", "0", "--host-calls", "10", "--no-plot")


def run_bench(*args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "normkit", "bench", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, cwd=REPO,
                          env=None if env is None else {**os.environ, **env})


def problems(doc):
    pytest.importorskip("jsonschema", reason="the schema check needs jsonschema (requirements-dev.txt)")
    from normkit.bench import validate

    return validate.problems(doc)


@pytest.fixture(scope="module")
def quick_cpu(tmp_path_factory):
    """(completed process, bench.json as a dict, output folder) of `normkit bench --quick --device cpu --op all`."""
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    out = tmp_path_factory.mktemp("bench-quick-cpu")
    # A switch the record must carry (NORMKIT_MEMORY_GBPS changes no CPU row).
    result = run_bench("--quick", "--device", "cpu", "--op", "all", "--out", str(out),
                       env={"NORMKIT_MEMORY_GBPS": "3352"})
    assert result.returncode == 0, result.stdout + result.stderr
    with open(out / "bench.json") as f:
        return result, json.load(f), out


# ---------------------------------------------------------------------------
# The CPU run and the schema


def test_quick_cpu_run_is_valid_and_complete(quick_cpu):
    result, doc, _ = quick_cpu
    assert "CPU mode" in result.stdout
    assert "NORMKIT_ switches in force: " in result.stdout and "NORMKIT_MEMORY_GBPS=3352" in result.stdout
    assert "Traceback" not in result.stderr
    assert problems(doc) == []
    meta = doc["meta"]
    assert meta["mode"] == "cpu" and meta["complete"] is True
    assert meta["command"].startswith("normkit bench --quick")
    assert meta["options"]["ops"] == list(options.OPS)
    assert meta["reference_copy"]["gbps"] > 0
    # The NORMKIT_ switches it ran under, but the commit (meta["commit"]).
    assert meta["normkit_environment"]["NORMKIT_MEMORY_GBPS"] == "3352"
    assert "NORMKIT_COMMIT" not in meta["normkit_environment"]
    # Every case has a checked, timed row for normkit and for eager: nothing dropped.
    shapes_per_variant = len(options.DEFAULTS["n"][1]) + len(options.DEFAULTS["decode_shapes"][1])
    for op in options.OPS:
        fused = op in options.FUSED_ADD_OPS
        cases = {(r["direction"], r["residual"], r["M"], r["N"]) for r in doc["rows"] if r["op"] == op}
        # fwd/bwd x with/without residual; the fused adds: forward with a residual only
        assert len(cases) == (1 if fused else 2 * 2) * shapes_per_variant, op
        assert all(d == "fwd" and res for d, res, _, _ in cases) or not fused, op
        for case in cases:
            rows = {r["impl"]: r for r in doc["rows"]
                    if r["op"] == op and (r["direction"], r["residual"], r["M"], r["N"]) == case}
            assert set(rows) == {"normkit", "eager"}, (op, case)
            assert rows["normkit"]["status"] == "ok", rows["normkit"]
            assert rows["normkit"]["check"]["vs_reference"], rows["normkit"]
            eager = rows["eager"]
            if eager["status"] != "ok":
                # PyTorch's CPU LayerNorm backward in bf16 sums dw and db over the rows with bf16
                # rounding (its error grows with M): a finding the check is there to make.
                assert (op, case[0], eager["dtype"]) == ("layernorm", "bwd", "bf16"), eager
                assert eager["reason"].startswith("disagrees with the fp32 reference: d"), eager
        if op == "layernorm":
            bwd = next(r for r in doc["rows"] if r["op"] == op and r["direction"] == "bwd" and r["impl"] == "normkit")
            assert set(bwd["check"]["vs_reference"]) == {"dx", "dw", "db"}
            assert "mean M*4 + rstd M*4" in bwd["bytes_formula"]
    for op in options.OPS:
        decode = [e for e in doc["latency"] if e["op"] == op and (e["M"], e["N"]) == (1, 4096)]
        assert len(decode) == (1 if op in options.FUSED_ADD_OPS else 4), op
        assert all(e["us"]["normkit"] > 0 for e in decode), op
    host = {r["impl"]: r for r in doc["host_overhead"]["results"]}
    assert host["normkit"]["status"] == "ok" and host["eager"]["status"] == "ok"
    assert doc["host_overhead"]["calls_per_round"] == options.HOST_CALLS


def test_quick_cpu_run_writes_the_plots(quick_cpu):
    """One figure per operator: bench.png (RMSNorm, as before --op) and bench-<op>.png, four at most."""
    result, _, out = quick_cpu
    names = ["bench.png", "bench-layernorm.png", "bench-fused_add_rmsnorm.png", "bench-fused_add_layernorm.png"]
    assert [plot.file_name(op) for op in options.OPS] == names
    for name in names:
        png = out / name
        if HAS_MATPLOTLIB:
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        else:
            assert not png.exists()
            assert "warning: no plot: matplotlib is not installed" in result.stdout
    assert sorted(p.name for p in out.glob("*.png")) == (sorted(names) if HAS_MATPLOTLIB else [])


def test_every_bench_json_is_valid(quick_cpu):
    """The committed results (docs/perf/bench-*.json and .json.gz, whatever matches) and this run's: at least one."""
    documents = [("quick CPU run", quick_cpu[1])]
    for path in COMMITTED:
        documents.append((str(path.relative_to(REPO)), load_result(path)))
    for name, doc in documents:
        assert problems(doc) == [], name


def test_schema_rejects_what_it_should(quick_cpu):
    doc = json.loads(json.dumps(quick_cpu[1]))
    doc["schema_version"] = 2
    del doc["rows"][0]["bytes"]
    doc["rows"][1]["status"] = "fine"
    doc["meta"]["implementations"]["quack"]["status"] = "maybe"
    doc["rows"][2]["op"] = "groupnorm"
    doc["latency"][0]["op"] = "groupnorm"
    found = "\n".join(problems(doc))
    assert "schema_version" in found
    assert "rows/0: 'bytes' is a required property" in found
    assert "rows/1/status" in found
    assert "meta/implementations/quack/status" in found
    assert "rows/2/op" in found and "latency/0/op" in found


def test_an_ok_row_needs_its_numbers(quick_cpu):
    doc = json.loads(json.dumps(quick_cpu[1]))
    doc["rows"][0]["us"] = None
    assert any(p.startswith("rows/0/us") for p in problems(doc))


def test_the_benchmark_never_imports_jsonschema(tmp_path):
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    code = ("import sys; from normkit.cli import main; rc = main(['bench', *sys.argv[1:]]); "
            "print('jsonschema imported:', 'jsonschema' in sys.modules); sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, *TINY, "--out", str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "jsonschema imported: False" in result.stdout


# ---------------------------------------------------------------------------
# Byte accounting (DESIGN §4)


@pytest.mark.parametrize("dtype,e", [("bf16", 2), ("fp16", 2), ("fp32", 4)])
def test_forward_bytes(dtype, e):
    M, N = 8192, 4096
    plain = traffic.traffic("fwd", dtype, M, N, False)
    assert plain.bytes == 2 * M * N * e + N * e  # x, out; weight
    assert plain.formula == f"x M*N*{e} + out M*N*{e} + weight N*{e}"
    residual = traffic.traffic("fwd", dtype, M, N, True)
    assert residual.bytes == 4 * M * N * e + N * e  # + residual, residual_out
    assert "residual M*N" in residual.formula and "residual_out M*N" in residual.formula


@pytest.mark.parametrize("dtype,e", [("bf16", 2), ("fp32", 4)])
def test_backward_bytes(dtype, e):
    M, N = 512, 262144
    plain = traffic.traffic("bwd", dtype, M, N, False)
    assert plain.bytes == 3 * M * N * e + 2 * N * e + 4 * M  # x, dout, dx; weight, dw; fp32 rstd
    assert plain.formula == f"x M*N*{e} + dout M*N*{e} + dx M*N*{e} + weight N*{e} + rstd M*4 + dw N*{e}"
    residual = traffic.traffic("bwd", dtype, M, N, True)
    assert residual.bytes == plain.bytes + M * N * e  # + dresidual_out; dresidual is dx itself
    assert residual.formula.endswith(f"dresidual_out M*N*{e}")
    assert sum(b for _, b in residual.terms) == residual.bytes


@pytest.mark.parametrize("dtype,e", [("bf16", 2), ("fp32", 4)])
def test_layernorm_bytes(dtype, e):
    """As RMSNorm plus the bias (forward: no mean/rstd stored, as no rstd for RMSNorm); backward reads mean and
    rstd (fp32 per row) and writes dw and db."""
    M, N = 8192, 4096
    fwd = traffic.traffic("fwd", dtype, M, N, False, "layernorm")
    assert fwd.bytes == traffic.traffic("fwd", dtype, M, N, False).bytes + N * e
    assert fwd.formula == f"x M*N*{e} + out M*N*{e} + weight N*{e} + bias N*{e}"
    assert traffic.traffic("fwd", dtype, M, N, True, "layernorm").bytes == fwd.bytes + 2 * M * N * e
    bwd = traffic.traffic("bwd", dtype, M, N, False, "layernorm")
    assert bwd.bytes == 3 * M * N * e + 3 * N * e + 2 * 4 * M  # x, dout, dx; weight, dw, db; mean, rstd
    assert bwd.formula == (f"x M*N*{e} + dout M*N*{e} + dx M*N*{e} + weight N*{e} + mean M*4 + rstd M*4 + "
                           f"dw N*{e} + db N*{e}")
    residual = traffic.traffic("bwd", dtype, M, N, True, "layernorm")
    assert residual.bytes == bwd.bytes + M * N * e and residual.formula.endswith(f"dresidual_out M*N*{e}")


@pytest.mark.parametrize("dtype,e", [("bf16", 2), ("fp16", 2), ("fp32", 4)])
def test_fused_add_bytes(dtype, e):
    """x and residual read, both overwritten, weight (and bias) read: the out-of-place forward's bytes."""
    M, N = 128, 8192
    rms = traffic.traffic("fwd", dtype, M, N, True, "fused_add_rmsnorm")
    assert rms.bytes == 4 * M * N * e + N * e
    assert rms.formula == f"x M*N*{e} + residual M*N*{e} + out M*N*{e} + residual_out M*N*{e} + weight N*{e}"
    assert rms.bytes == traffic.traffic("fwd", dtype, M, N, True).bytes
    ln = traffic.traffic("fwd", dtype, M, N, True, "fused_add_layernorm")
    assert ln.bytes == rms.bytes + N * e and ln.formula.endswith(f"weight N*{e} + bias N*{e}")
    assert ln.bytes == traffic.traffic("fwd", dtype, M, N, True, "layernorm").bytes


def test_bytes_of_an_unknown_direction_name_it():
    with pytest.raises(ValueError, match="direction"):
        traffic.traffic("sideways", "bf16", 1, 1, False)
    with pytest.raises(ValueError, match="direction"):
        traffic.traffic("sideways", "bf16", 1, 1, False, "layernorm")
    with pytest.raises(ValueError, match="forward only"):
        traffic.traffic("bwd", "bf16", 1, 1, True, "fused_add_rmsnorm")
    with pytest.raises(ValueError, match="op"):
        traffic.traffic("fwd", "bf16", 1, 1, False, "groupnorm")


# ---------------------------------------------------------------------------
# Timing helpers


def test_rotation_exceeds_twice_the_cache():
    assert timing.rotation_count(16 << 10, 60 << 20) * (16 << 10) >= 2 * (60 << 20)
    assert timing.rotation_count(1 << 30, 60 << 20) == 2  # never fewer than two sets
    assert timing.rotation_count(1, 1 << 40) == timing.MAX_SETS


def test_summary_statistics():
    stats = timing.summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert stats == {"us": 3.0, "us_min": 1.0, "us_p20": 1.8, "us_p80": 4.2, "reps": 5}


def test_disturbed_runs_are_timed_again():
    steady_run = [100.0 + i * 0.1 for i in range(30)]  # p80/p20 ~1.002
    wide_run = [100.0] * 15 + [160.0] * 15  # bimodal, as a row timed while the device was disturbed
    less_wide = [100.0] * 20 + [130.0] * 10

    def runs(*sample_sets):
        queue = list(sample_sets)
        return lambda: (queue.pop(0), "m", 1)

    stats, method, calls, made = timing.steady(runs(steady_run, wide_run))
    assert made == 1 and stats["us_p80"] < 104 and (method, calls) == ("m", 1)  # steady: timed once
    stats, _, _, made = timing.steady(runs(wide_run, steady_run, wide_run))
    assert made == 2 and stats["us"] < 102  # the steady second run is kept
    stats, _, _, made = timing.steady(runs(wide_run, less_wide, wide_run, steady_run))
    assert made == 1 + timing.RETIMES == 3 and stats["us_p80"] == 130.0  # at most RETIMES more; least spread kept
    assert timing.spread(timing.summarize(wide_run)) > timing.SPREAD_LIMIT
    row = {"op": "rmsnorm", "direction": "fwd", "dtype": "bf16", "M": 8, "N": 4096, "residual": False,
           "impl": "normkit", "status": "ok", "us": 100.0, "gbps": 1.0, "ratio_to_copy": 0.9, "normkit_speedup": None,
           "us_p20": 100.0, "us_p80": 130.0, "timings": 3}
    assert "(timed 3x, p80/p20 1.30)" in report.format_row(row)
    assert "timed" not in report.format_row(dict(row, timings=None))


# ---------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize("args,flag", [
    (("--peers", "eager,foo"), "--peers"),
    (("--peers", ""), "--peers"),
    (("--dtypes", "bf8"), "--dtypes"),
    (("--n", "0"), "--n"),
    (("--n", "1k"), "--n"),
    (("--elements", "many"), "--elements"),
    (("--decode-shapes", "4096"), "--decode-shapes"),
    (("--directions", "up"), "--directions"),
    (("--residual", "maybe"), "--residual"),
    (("--device", "tpu"), "--device"),
    (("--reps", "0"), "--reps"),
    (("--warmup", "-1"), "--warmup"),
    (("--host-calls", "-5"), "--host-calls"),
    (("--n", "none", "--decode-shapes", "none"), "--n"),
    (("--op", "groupnorm"), "--op"),
    (("--op", ""), "--op"),
    (("--op", "rmsnorm,all"), "--op"),
    (("--op", "fused_add_rmsnorm,fused_add_layernorm", "--directions", "bwd"), "--op"),
])
def test_argument_errors_name_the_argument(cli, tmp_path, args, flag):
    code, out, err = cli("bench", *args, "--out", str(tmp_path / "never"))
    assert code == 2, out + err
    assert err.startswith(f"normkit: error: {flag}: "), err
    assert not (tmp_path / "never").exists()


def test_unknown_peer_lists_the_known_ones(cli):
    code, _, err = cli("bench", "--peers", "triton")
    assert code == 2
    assert "unknown peer 'triton'" in err
    for name in options.PEERS:
        assert name in err


def test_unknown_op_lists_the_known_ones(cli):
    code, _, err = cli("bench", "--op", "layer_norm")
    assert code == 2
    assert "unknown operator 'layer_norm'" in err
    for name in options.OPS + ("all",):
        assert name in err


def _parse(*argv):
    import argparse

    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    return options.from_args(parser.parse_args(list(argv)))


def test_op_defaults_to_rmsnorm_and_all_means_every_operator():
    assert _parse().ops == ("rmsnorm",)
    assert _parse("--quick").ops == ("rmsnorm",)
    assert _parse("--op", "all").ops == options.OPS
    assert _parse("--op", "fused_add_layernorm, layernorm,layernorm").ops == ("layernorm", "fused_add_layernorm")
    assert _parse("--op", "layernorm").as_dict()["ops"] == ["layernorm"]


def test_fused_adds_are_forward_only_and_always_add_a_residual():
    from normkit.bench import shapes

    opts = _parse("--op", "all", "--residual", "without", "--n", "1024", "--decode-shapes", "1x4096",
                  "--dtypes", "bf16")
    cases = shapes.cases(opts, gpu=False)
    by_op = {op: [c for c in cases if c.op == op] for op in options.OPS}
    for op in ("rmsnorm", "layernorm"):
        assert {(c.direction, c.residual) for c in by_op[op]} == {("fwd", False), ("bwd", False)}
    for op in options.FUSED_ADD_OPS:
        assert {(c.direction, c.residual, c.kind) for c in by_op[op]} == {("fwd", True, "sweep"),
                                                                         ("fwd", True, "decode")}
    assert all(c.kind == "sweep" for c in cases[:6]) and all(c.kind == "decode" for c in cases[6:])
    # Without fwd the fused adds drop out (the other operators still run).
    opts = _parse("--op", "layernorm,fused_add_rmsnorm", "--directions", "bwd")
    assert {c.op for c in shapes.cases(opts, gpu=False)} == {"layernorm"}


def test_elements_smaller_than_n(cli, tmp_path):
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    code, _, err = cli("bench", "--device", "cpu", "--n", "4096", "--elements", "1024", "--out", str(tmp_path))
    assert code == 2
    assert err.startswith("normkit: error: --elements: 1024 is smaller than N=4096")


def test_device_cuda_without_a_gpu(cli, tmp_path):
    torch = pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    code, _, err = cli("bench", "--device", "cuda", "--out", str(tmp_path))
    assert code == 2
    assert err.startswith("normkit: error: --device: ")


def test_help_and_readme_document_every_flag():
    result = subprocess.run([sys.executable, "-m", "normkit", "bench", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    top = subprocess.run([sys.executable, "-m", "normkit", "--help"], capture_output=True, text=True, timeout=60)
    assert "normkit bench" in top.stdout
    readme = (REPO / "README.md").read_text()
    assert "### `normkit bench`" in readme
    flags = ["--quick", "--out", "--device", "--op", "--dtypes", "--n", "--elements", "--decode-shapes", "--directions",
             "--residual", "--peers", "--reps", "--warmup", "--host-calls", "--no-plot"]
    for flag in flags:
        assert flag in result.stdout, flag
        assert f"`{flag}" in readme, flag


# ---------------------------------------------------------------------------
# Peers: missing, failing, disagreeing


def _tiny(cli, tmp_path, *extra):
    code, out, err = cli("bench", *TINY, "--out", str(tmp_path), *extra)
    with open(tmp_path / "bench.json") as f:
        return code, out, err, json.load(f)


def test_missing_peers_are_reported(cli, tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    for module in ("quack", "liger_kernel", "flashinfer"):
        monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    code, out, err, doc = _tiny(cli, tmp_path, "--peers", "eager,quack,liger,flashinfer")
    assert code == 0, out + err
    impls = doc["meta"]["implementations"]
    for name, module in (("quack", "quack"), ("liger", "liger_kernel"), ("flashinfer", "flashinfer")):
        assert impls[name]["status"] == "not installed", impls[name]
        assert module in impls[name]["why"]
        assert f"{name}" in out
    assert impls["compile"]["status"] == "not requested"
    assert impls["eager"]["status"] == "available"
    assert "quack: not installed: ModuleNotFoundError: " in out
    assert {r["impl"] for r in doc["rows"]} == {"normkit", "eager"}
    assert problems(doc) == []


def test_a_failing_peer_is_a_failed_row(cli, tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    from normkit.bench import impls

    def broken(self, x, w, r):
        raise RuntimeError("peer exploded\nsecond line")

    monkeypatch.setattr(impls.Eager, "forward", broken)
    code, out, err, doc = _tiny(cli, tmp_path, "--peers", "eager")
    assert code == 0, out + err  # a peer's failure is a result, not an error of the benchmark
    row = next(r for r in doc["rows"] if r["impl"] == "eager")
    assert row["status"] == "failed" and row["reason"] == "RuntimeError: peer exploded"
    assert row["us"] is None
    assert "failed: RuntimeError: peer exploded" in out
    assert "1 row(s) failed" in out
    assert problems(doc) == []


def test_a_disagreeing_peer_is_not_timed(cli, tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    from normkit.bench import impls

    real = impls.Eager.forward

    def wrong(self, x, w, r):
        out, h = real(self, x, w, r)
        return out * 1.5, h

    monkeypatch.setattr(impls.Eager, "forward", wrong)
    code, out, err, doc = _tiny(cli, tmp_path, "--peers", "eager")
    assert code == 0, out + err
    row = next(r for r in doc["rows"] if r["impl"] == "eager")
    assert row["status"] == "failed"
    assert row["reason"].startswith("disagrees with the fp32 reference: out relative error")
    assert row["check"]["vs_normkit"]["out"] > row["check"]["tolerance"]
    assert row["method"] is None and row["us"] is None


def test_the_fused_adds_are_checked_on_fresh_copies(cli, tmp_path, monkeypatch):
    """In place: timing overwrites the input sets and nothing restores them, so every implementation's checked
    call runs on its own copy of set 0 as it was before anything ran. Eager, checked after normkit was timed,
    must still agree with the fp32 reference and with normkit's checked outputs."""
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    from normkit.bench import impls

    calls = []
    real = impls.Normkit.fused_add

    def spy(self, op, x, r, w, b):
        calls.append((op, x.data_ptr(), r.data_ptr()))
        return real(self, op, x, r, w, b)

    monkeypatch.setattr(impls.Normkit, "fused_add", spy)
    code, out, err, doc = _tiny(cli, tmp_path, "--op", "fused_add_rmsnorm,fused_add_layernorm", "--peers", "eager",
                                "--reps", "6", "--warmup", "3")
    assert code == 0, out + err
    assert problems(doc) == []
    assert {(r["op"], r["impl"], r["residual"]) for r in doc["rows"]} == {
        (op, impl, True) for op in options.FUSED_ADD_OPS for impl in ("normkit", "eager")}
    for row in doc["rows"]:
        assert row["status"] == "ok", row
        tol = row["check"]["tolerance"]
        assert max(row["check"]["vs_reference"].values()) <= tol, row
        assert set(row["check"]["vs_reference"]) == {"out", "residual_out"}
        if row["impl"] == "eager":
            assert max(row["check"]["vs_normkit"].values()) <= 2 * tol, row
    for op in options.FUSED_ADD_OPS:
        mine = [c for c in calls if c[0] == op]
        sets = next(r["input_sets"] for r in doc["rows"] if r["op"] == op)
        checked, timed = mine[0], mine[1:]
        # the untimed first call on the sets, the warmup and the timed calls: all on the sets, none on the copy
        assert len(timed) == 1 + 3 + 6
        assert sets >= 2 and len({c[1] for c in timed}) == min(sets, 6)  # cycled over the sets
        assert checked[1] not in {c[1] for c in timed} and checked[2] not in {c[2] for c in timed}


def test_normkit_failing_its_check_is_exit_status_1(cli, tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    from normkit.bench import impls

    real = impls.Normkit.forward
    monkeypatch.setattr(impls.Normkit, "forward", lambda self, x, w, r: (real(self, x, w, r)[0] * 0, None))
    code, out, err, doc = _tiny(cli, tmp_path, "--peers", "none")
    assert code == 1, out + err
    assert doc["rows"][0]["status"] == "failed"


def test_an_interrupted_run_keeps_what_it_measured(cli, tmp_path, monkeypatch):
    """Ctrl-C, or bench_gpu.sh's time limit (SIGINT): exit 130, and a valid JSON with the finished cases."""
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    from normkit.bench import runner

    real = runner.Bench.run_case
    calls = []

    def interrupted_on_the_second_case(self, case, implementations):
        calls.append(case)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, case, implementations)

    monkeypatch.setattr(runner.Bench, "run_case", interrupted_on_the_second_case)
    code, out, err, doc = _tiny(cli, tmp_path, "--peers", "eager", "--directions", "fwd,bwd")
    assert code == 130, out + err
    assert "interrupted: writing what was measured" in out
    assert doc["meta"]["complete"] is False
    assert {(r["direction"], r["impl"]) for r in doc["rows"]} == {("fwd", "normkit"), ("fwd", "eager")}
    assert problems(doc) == []


# ---------------------------------------------------------------------------
# On the GPU


@pytest.mark.gpu
def test_quick_gpu_run_is_valid(tmp_path):
    """Events, graph replay, the copies and the host overhead on the device; eager as the only peer keeps
    it short (the other peers' first calls compile for tens of seconds: scripts/bench_gpu.sh runs them)."""
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    result = run_bench("--quick", "--peers", "eager", "--out", str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    with open(tmp_path / "bench.json") as f:
        doc = json.load(f)
    assert doc["meta"]["mode"] == "gpu" and doc["meta"]["complete"] is True
    assert doc["meta"]["device"]["sm_count"] > 0
    assert problems(doc) == []
    assert all(r["status"] == "ok" for r in doc["rows"]), [r for r in doc["rows"] if r["status"] != "ok"]
    normkit_rows = [r for r in doc["rows"] if r["impl"] == "normkit"]
    assert {r["method"] for r in normkit_rows} == {"cuda-events", "cuda-graph"}
    decode = next(e for e in doc["latency"] if (e["M"], e["N"], e["direction"], e["residual"]) == (1, 4096, "fwd",
                                                                                                   False))
    assert decode["method"] == "cuda-graph" and decode["us"]["normkit"] > 0
    host = {r["impl"]: r for r in doc["host_overhead"]["results"]}
    assert host["normkit"]["us_per_call"] > 0 and host["eager"]["us_per_call"] > 0


@pytest.mark.gpu
def test_quick_gpu_run_of_layernorm_and_the_fused_adds(tmp_path):
    """--op on the device: LayerNorm (fwd, bwd, with and without residual) and the in-place fused adds, eager
    as the peer, every row checked and timed, decode shapes by graph replay (in-place calls captured)."""
    pytest.importorskip("torch", reason="normkit bench needs PyTorch")
    ops = ("layernorm", "fused_add_rmsnorm", "fused_add_layernorm")
    result = run_bench("--quick", "--peers", "eager", "--op", ",".join(ops), "--host-calls", "0", "--out",
                       str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    with open(tmp_path / "bench.json") as f:
        doc = json.load(f)
    assert doc["meta"]["mode"] == "gpu" and doc["meta"]["complete"] is True
    assert problems(doc) == []
    assert {r["op"] for r in doc["rows"]} == set(ops)
    assert all(r["status"] == "ok" for r in doc["rows"]), [r for r in doc["rows"] if r["status"] != "ok"]
    assert {r["method"] for r in doc["rows"]} == {"cuda-events", "cuda-graph"}
    assert not (tmp_path / "bench.png").exists()  # no rmsnorm rows, no RMSNorm figure
    if HAS_MATPLOTLIB:
        assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"bench-{op}.png" for op in ops)
