"""The tracked tree stays small enough for the device tool to carry it to the GPU machine
(64 MiB in all, with the peers' wheels of `.whl/`, ~4 MB, carried beside it), and the
benchmark results committed under docs/perf stay gzipped: a sweep's JSON is ~1 MB as text,
and at 60 MB of them the tree stopped fitting (session 42)."""
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
# 64 MiB less the wheels and room for the untracked results of a session.
TRACKED_LIMIT = 48 * 1024 * 1024


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def test_tracked_tree_fits_the_device_tool():
    files = [p for p in tracked_files() if p.is_file()]
    assert len(files) > 100, "git ls-files found too little"
    total = sum(p.stat().st_size for p in files)
    largest = sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:5]
    assert total < TRACKED_LIMIT, (
        f"tracked files take {total / 2**20:.1f} MiB (limit {TRACKED_LIMIT / 2**20:.0f}); largest: "
        + ", ".join(f"{p.relative_to(REPO)} {p.stat().st_size // 1024} KiB" for p in largest))


def test_committed_bench_results_are_gzipped():
    plain = [str(p.relative_to(REPO)) for p in tracked_files()
             if p.parent == REPO / "docs" / "perf" and p.name.startswith("bench-") and p.suffix == ".json"]
    assert not plain, f"commit these as .json.gz (gzip -9 -n FILE): {plain}"
