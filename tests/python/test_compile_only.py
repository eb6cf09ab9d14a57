"""Compile-only path: NVRTC without a GPU, the memory and disk caches, and the cache CLI."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from normkit import _C

pytestmark = pytest.mark.usefixtures("nvrtc")


def entry_files(cache_dir):
    return sorted(pathlib.Path(cache_dir).rglob("*.nkc"))


def counts():
    c = _C.counters()
    return c["compiles"], c["memory_hits"], c["disk_hits"]


def _selftest_without_compute_cache(target, cache_dir):
    """selftest_compile in a fresh process and cache directory, the CUDA compute cache off.

    With a driver present, NVRTC serves a PTX->cubin step it has seen before (on
    a GPU machine: the same self-test kernel, compiled earlier for the device)
    from the CUDA compute cache and prints no ptxas report; the entry then has
    no register count (the runtime checks spills at load instead)."""
    code = (
        "import json; from normkit import _C; k = _C.selftest_compile(%r); "
        "print(json.dumps({n: k[n] for n in ('registers', 'spill_store_bytes', 'spill_load_bytes', "
        "'ptxas_log', 'lowered_name')}))" % target
    )
    # A cache directory of its own: this test's holds the entry just compiled,
    # with no report either.
    env = dict(os.environ, CUDA_CACHE_DISABLE="1", NORMKIT_CACHE_DIR=str(cache_dir / "without-compute-cache"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "sm_100a"])
def test_selftest_compiles_without_spills(target, nvrtc, cache_dir):
    if int(target[3:].rstrip("a")) not in nvrtc["nvrtc_archs"]:
        pytest.skip(f"NVRTC {nvrtc['nvrtc_version']} has no {target}")
    k = _C.selftest_compile(target)
    assert k["target"] == target
    assert len(k["key"]) == 64 and all(ch in "0123456789abcdef" for ch in k["key"])
    assert k["binary_size"] > 0
    assert k["lowered_name"]
    if not k["ptxas_log"]:
        # Only with a driver (the compute cache); then the report is asked again.
        assert k["registers"] == -1 and k["spill_store_bytes"] == -1
        k = _selftest_without_compute_cache(target, cache_dir)
    report = f"ptxas report of {k['lowered_name']}:\n{k['ptxas_log']}"
    assert k["registers"] > 0, report
    assert k["spill_store_bytes"] == 0, report
    assert k["spill_load_bytes"] == 0, report


def test_memory_then_disk_cache(cache_dir):
    first = _C.selftest_compile("sm_80")
    assert counts() == (1, 0, 0)
    assert len(entry_files(cache_dir)) == 1

    second = _C.selftest_compile("sm_80")
    assert counts() == (1, 1, 0)
    assert second["key"] == first["key"]

    # A fresh process would find the entry on disk and not compile.
    _C.clear_memory_cache()
    third = _C.selftest_compile("sm_80")
    assert counts() == (1, 1, 1)
    assert third["key"] == first["key"]
    assert third["binary_size"] == first["binary_size"]


def test_new_instantiation_or_target_is_a_new_key():
    base = _C.selftest_compile("sm_80", unroll=1)
    unrolled = _C.selftest_compile("sm_80", unroll=4)
    other_target = _C.selftest_compile("sm_90a", unroll=1)
    assert _C.counters()["compiles"] == 3
    assert len({base["key"], unrolled["key"], other_target["key"]}) == 3


def test_codegen_environment_changes_the_key(monkeypatch):
    plain = _C.selftest_compile("sm_80")
    monkeypatch.setenv("NORMKIT_LINEINFO", "1")
    _C.reload_config()
    with_lineinfo = _C.selftest_compile("sm_80")
    assert with_lineinfo["key"] != plain["key"]
    assert _C.counters()["compiles"] == 2


def test_memory_mode_writes_nothing_to_disk(cache_dir, monkeypatch):
    monkeypatch.setenv("NORMKIT_CACHE_MODE", "memory")
    _C.reload_config()
    _C.selftest_compile("sm_80")
    _C.selftest_compile("sm_80")
    assert counts() == (1, 1, 0)
    assert entry_files(cache_dir) == []


def test_cache_off_compiles_every_time(cache_dir, monkeypatch):
    monkeypatch.setenv("NORMKIT_CACHE_MODE", "off")
    _C.reload_config()
    _C.selftest_compile("sm_80")
    _C.selftest_compile("sm_80")
    assert counts() == (2, 0, 0)
    assert entry_files(cache_dir) == []


def test_run_only_refuses_to_compile(monkeypatch):
    monkeypatch.setenv("NORMKIT_RUN_ONLY", "1")
    _C.reload_config()
    with pytest.raises(_C.NormkitError):
        _C.selftest_compile("sm_80")
    assert _C.counters()["compiles"] == 0


def test_cache_list_reports_entries(cache_dir, cli):
    a = _C.selftest_compile("sm_80")
    b = _C.selftest_compile("sm_80", unroll=2)
    entries = _C.cache_list(False)
    assert sorted(e["key"] for e in entries) == sorted([a["key"], b["key"]])
    for e in entries:
        assert e["valid"], e["problem"]
        assert e["size"] > 0
        assert pathlib.Path(e["path"]).is_file()

    code, out, err = cli("cache", "list")
    assert code == 0, err
    assert a["key"][:16] in out and b["key"][:16] in out
    assert "2 entries" in out

    code, out, _ = cli("cache", "list", "--json")
    assert code == 0
    assert sorted(e["key"] for e in json.loads(out)) == sorted([a["key"], b["key"]])


def test_verify_finds_and_deletes_a_corrupt_entry(cache_dir, cli):
    good = _C.selftest_compile("sm_80")
    bad = _C.selftest_compile("sm_80", unroll=3)
    code, out, err = cli("cache", "verify")
    assert code == 0, out + err

    path = pathlib.Path(next(e["path"] for e in _C.cache_list(False) if e["key"] == bad["key"]))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    code, out, _ = cli("cache", "verify")
    assert code == 1
    assert "INVALID" in out and path.name in out
    assert good["key"] not in out

    code, out, _ = cli("cache", "verify", "--delete-invalid")
    assert code == 0
    assert not path.exists()

    code, out, _ = cli("cache", "verify")
    assert code == 0
    assert [e["key"] for e in _C.cache_list(True)] == [good["key"]]

    # The runtime treats the deleted entry as a miss and compiles it again.
    _C.clear_memory_cache()
    _C.reset_counters()
    _C.selftest_compile("sm_80", unroll=3)
    assert _C.counters()["compiles"] == 1


def test_garbage_in_an_entry_header_is_reported_not_raised(cache_dir, cli):
    _C.selftest_compile("sm_80")
    (path,) = entry_files(cache_dir)
    data = bytearray(path.read_bytes())
    # Past the fixed-size prefix, inside the key=value header text: not UTF-8 any more.
    data[40] = 0xFF
    data[41] = 0xFE
    path.write_bytes(bytes(data))
    (entry,) = _C.cache_list(True)
    assert entry["valid"] is False and entry["problem"]
    code, out, err = cli("cache", "list")
    assert code == 0, err
    code, out, err = cli("cache", "verify")
    assert code == 1, err
    assert "INVALID" in out


def test_corrupt_entry_is_recompiled_not_trusted(cache_dir):
    k = _C.selftest_compile("sm_80")
    (path,) = entry_files(cache_dir)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    _C.clear_memory_cache()
    _C.reset_counters()
    again = _C.selftest_compile("sm_80")
    c = _C.counters()
    assert again["key"] == k["key"]
    assert c["compiles"] == 1 and c["disk_hits"] == 0 and c["disk_invalid"] == 1


def test_cache_clear_empties(cache_dir, cli):
    _C.selftest_compile("sm_80")
    _C.selftest_compile("sm_80", unroll=2)
    code, out, _ = cli("cache", "clear")
    assert code == 0
    assert "removed 2" in out
    assert _C.cache_list(False) == []
    assert entry_files(cache_dir) == []
    code, out, _ = cli("cache", "list")
    assert code == 0 and "no cache entries" in out
