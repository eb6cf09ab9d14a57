"""The `normkit` command: environment diagnostics, compile-cache management, precompilation and benchmarks."""

import argparse
import datetime
import importlib.util
import json
import os
import sys

import normkit
from normkit import _C, _cli_precompile
from normkit._C import NormkitError
from normkit.bench import options as bench_options

EPILOG = """\
commands:
  normkit doctor [--selftest] [--json]
      Report the normkit version, the CUDA driver, NVRTC and its targets, every
      GPU with its resolved compile target, and the compile cache.
      --selftest  also compile, launch and check a small kernel on each GPU
                  (exit status 1 if any GPU fails)
      --json      print the report as JSON instead of text
  normkit cache list [--json]
      List the disk cache entries (key, kernel family, target, size, created).
      --json      print the entries as JSON
  normkit cache verify [--delete-invalid]
      Check every entry's checksum and header; list the bad ones with the problem
      (exit status 1 if any is invalid and was not deleted).
      --delete-invalid  remove the invalid entries
  normkit cache clear
      Remove every entry from the disk cache.
""" + _cli_precompile.HELP + bench_options.HELP + """
The cache directory and everything else the runtime reads from the environment
(NORMKIT_CACHE_DIR, NORMKIT_CACHE_MODE, NORMKIT_ARCH, ...) are listed in README.md.
Exit status: 0 on success, 1 when a check failed, 2 on errors.
"""


# ---------------------------------------------------------------------------
# Output: rich when it is installed (it is a dependency), plain text otherwise,
# so that a broken environment can still be diagnosed.


class _Output:
    def __init__(self):
        try:
            from rich.console import Console
        except ImportError:  # pragma: no cover - rich is a declared dependency
            self._console = None
        else:
            # markup off: runtime messages contain [file:line] suffixes that rich
            # would otherwise swallow as style tags.
            self._console = Console(markup=False, highlight=False)

    def line(self, text="", style=None):
        if self._console is None:
            print(text)
        else:
            self._console.print(text, style=style, soft_wrap=True)

    def heading(self, text):
        self.line(text, style="bold")

    def table(self, columns, rows, title=None):
        if self._console is None:
            self._plain_table(columns, rows, title)
            return
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, title_justify="left", show_lines=False)
        for name in columns:
            table.add_column(name)
        for row in rows:
            table.add_row(*(Text(str(cell)) for cell in row))
        self._console.print(table)

    @staticmethod
    def _plain_table(columns, rows, title):
        if title:
            print(title)
        cells = [list(columns)] + [[str(c) for c in row] for row in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        for r in cells:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _strip_prefix(text, prefix):
    return text[len(prefix):] if text.startswith(prefix) else text


def _indent(text, prefix="  "):
    return "\n".join(prefix + line for line in text.splitlines())


def _count(n, singular, plural=None):
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _human_size(n):
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable


def _driver_version_text(version):
    # cuDriverGetVersion encodes 13.0 as 13000 and 12.8 as 12080.
    if not version:
        return "unknown"
    return f"{version // 1000}.{(version % 1000) // 10}"


def _created_text(entry):
    meta = entry.get("meta", {})
    for field in ("created_unix", "created", "created_at"):
        value = meta.get(field)
        if value:
            if value.isdigit():
                return datetime.datetime.fromtimestamp(int(value)).strftime("%Y-%m-%d %H:%M:%S")
            return value
    try:
        mtime = os.path.getmtime(entry["path"])
    except OSError:
        return "-"
    return datetime.datetime.fromtimestamp(mtime).strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------------------
# doctor


def _collect_report(selftest):
    config = _C.config()
    report = {"normkit_version": normkit.__version__}

    driver = {"available": False, "version": None, "version_text": None, "error": None}
    device_count = 0
    try:
        device_count = _C.device_count()
        driver["available"] = True
    except NormkitError as e:
        driver["error"] = _C.driver_error() or str(e)

    nvrtc = {"available": False, "version": None, "targets": [], "error": None}
    try:
        tools = _C.toolchain(False)
        nvrtc.update(available=True, version=tools["nvrtc_version"],
                     targets=[f"sm_{a}" for a in tools["nvrtc_archs"]])
    except NormkitError as e:
        nvrtc["error"] = str(e)

    if driver["available"] and nvrtc["available"]:
        # The driver version comes with the toolchain query, which also needs NVRTC.
        try:
            version = _C.toolchain(True)["driver_version"]
            driver.update(version=version, version_text=_driver_version_text(version))
        except NormkitError:
            pass

    gpus = []
    for ordinal in range(device_count):
        try:
            gpu = dict(_C.device_info(ordinal))
            gpu["error"] = None
        except NormkitError as e:
            gpu = {"ordinal": ordinal, "error": str(e)}
        if selftest:
            if gpu["error"] is not None:
                gpu["selftest"] = "FAIL"
                gpu["selftest_error"] = gpu["error"]
            else:
                try:
                    problem = _C.selftest_run(ordinal)
                except NormkitError as e:
                    problem = str(e)
                gpu["selftest"] = "FAIL" if problem else "PASS"
                gpu["selftest_error"] = problem or None
        gpus.append(gpu)

    if device_count:
        no_gpu_reason = None
    elif driver["error"]:
        no_gpu_reason = driver["error"]
    else:
        no_gpu_reason = "the CUDA driver reports no devices"

    cache = {
        "directory": config["cache_dir"],
        "mode": config["cache_mode"],
        "usable": None,
        "entries": None,
        "total_bytes": None,
        "error": None,
    }
    try:
        cache["usable"] = bool(_C.disk_cache_usable())
        entries = _C.cache_list(False)
        cache["entries"] = len(entries)
        cache["total_bytes"] = sum(e["size"] for e in entries)
    except NormkitError as e:
        cache["error"] = str(e)

    report.update(driver=driver, nvrtc=nvrtc, gpus=gpus, no_gpu_reason=no_gpu_reason, cache=cache,
                  arch_override=config["arch"], torch=_torch_report())
    return report


def _torch_report():
    """The PyTorch front end: torch's version and whether eager calls take the C++ path (why not, if not).
    Imports torch when it is installed (only here, not for the other commands)."""
    if importlib.util.find_spec("torch") is None:
        return {"installed": False, "version": None, "cpp_eager_path": False, "why_not": "torch is not installed"}
    try:
        import torch
        from normkit.torch import _ops
    except Exception as e:  # a broken torch install is a finding, not a crash of the report
        return {"installed": True, "version": None, "cpp_eager_path": False, "why_not": f"import failed: {e}"}
    return {"installed": True, "version": torch.__version__, "cpp_eager_path": _ops._ext is not None,
            "why_not": _ops._why_no_ext or None}


def _print_report(out, report, selftest):
    out.line(f"normkit {report['normkit_version']}")

    driver = report["driver"]
    if driver["available"]:
        version = driver["version_text"] or "version unknown (needs NVRTC to query)"
        out.line(f"CUDA driver: {version}")
    else:
        out.line("CUDA driver: unavailable")
        out.line(_indent(_strip_prefix(driver["error"], "CUDA driver unavailable: ")))

    nvrtc = report["nvrtc"]
    if nvrtc["available"]:
        out.line(f"NVRTC: {nvrtc['version']}")
        out.line(f"  targets: {' '.join(nvrtc['targets'])}")
    else:
        out.line("NVRTC: unavailable")
        out.line(_indent(_strip_prefix(nvrtc["error"], "NVRTC unavailable: ")))

    if report["arch_override"]:
        out.line(f"NORMKIT_ARCH: {report['arch_override']} (overrides the per-device target)")

    if report["no_gpu_reason"]:
        # The full reason is printed with the driver above; its first line is the gist.
        reason = _strip_prefix(report["no_gpu_reason"], "CUDA driver unavailable: ")
        out.line(f"no GPU found: {reason.splitlines()[0].rstrip(':')}")
    else:
        # Memory: the peak DRAM bandwidth the plans read (the runtime's slower_memory class,
        # an H100's, plans some rows otherwise than an H200's; docs/perf/h200-2026-12-07c.md).
        columns = ["GPU", "name", "compute capability", "SMs", "memory GB/s", "target"]
        if selftest:
            columns.append("selftest")
        rows = []
        forced = []  # footnotes of the GPUs whose bandwidth NORMKIT_MEMORY_GBPS replaced
        for gpu in report["gpus"]:
            if gpu["error"]:
                row = [gpu["ordinal"], f"error: {gpu['error']}", "-", "-", "-", "-"]
            else:
                gbps = gpu.get("memory_gbps") or 0
                memory = f"{gbps} (H100 plans)" if gpu.get("slower_memory") else (str(gbps) if gbps else "unknown")
                driver_gbps = gpu.get("driver_memory_gbps", gbps)
                if driver_gbps != gbps:
                    memory += " *"
                    forced.append(f"* GPU {gpu['ordinal']}: the plans read NORMKIT_MEMORY_GBPS={gbps}, "
                                  f"not the driver's {driver_gbps or 'unknown'} GB/s")
                # Under MPS with an active-thread limit the process may use fewer SMs than the
                # device has; the grids are sized for those (runtime_device.cpp, device_info).
                sms = gpu["sm_count"]
                if gpu.get("device_sm_count", sms) != sms:
                    sms = f"{sms}/{gpu['device_sm_count']}"
                row = [gpu["ordinal"], gpu["name"], gpu["cc"], sms, memory, gpu["target"]]
            if selftest:
                row.append(gpu["selftest"])
            rows.append(row)
        out.table(columns, rows, title="GPUs")
        for line in forced:
            out.line(line)
        if selftest:
            for gpu in report["gpus"]:
                if gpu["selftest"] == "FAIL":
                    out.line(f"selftest FAIL on GPU {gpu['ordinal']}: {gpu['selftest_error']}")

    torch_info = report["torch"]
    if not torch_info["installed"]:
        out.line("PyTorch: not installed (normkit.torch needs it)")
    elif torch_info["cpp_eager_path"]:
        out.line(f"PyTorch: {torch_info['version']}; eager calls take the C++ path (normkit._torch_C)")
    else:
        out.line(f"PyTorch: {torch_info['version'] or 'unusable'}; eager calls take the custom ops "
                 f"(more host time): {torch_info['why_not']}")

    cache = report["cache"]
    out.line(f"cache: {cache['directory']}")
    out.line(f"  mode: {cache['mode']}")
    if cache["error"]:
        out.line(f"  error: {cache['error']}")
    else:
        usable = "yes" if cache["usable"] else "no (memory-only)"
        out.line(f"  usable: {usable}")
        out.line(f"  entries: {cache['entries']} ({_human_size(cache['total_bytes'])})")


def _cmd_doctor(args, out):
    report = _collect_report(args.selftest)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_report(out, report, args.selftest)
    failed = any(gpu.get("selftest") == "FAIL" for gpu in report["gpus"])
    return 1 if failed else 0


# ---------------------------------------------------------------------------
# cache


def _cmd_cache_list(args, out):
    entries = _C.cache_list(False)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    directory = _C.cache_dir()
    if not entries:
        out.line(f"no cache entries in {directory}")
        return 0
    rows = []
    for e in entries:
        meta = e["meta"]
        rows.append([
            e["key"][:16],
            meta.get("family", "-"),
            meta.get("target", "-"),
            _human_size(e["size"]),
            _created_text(e),
        ])
    out.table(["key", "family", "target", "size", "created"], rows)
    total = sum(e["size"] for e in entries)
    out.line(f"{_count(len(entries), 'entry', 'entries')}, {_human_size(total)} in {directory}")
    invalid = sum(1 for e in entries if not e["valid"])
    if invalid:
        out.line(f"{_count(invalid, 'entry', 'entries')} unreadable; run `normkit cache verify` for details")
    return 0


def _cmd_cache_verify(args, out):
    entries = _C.cache_list(True)
    bad = [e for e in entries if not e["valid"]]
    deleted = 0
    for e in bad:
        out.line(f"INVALID {e['path']}: {e['problem'] or 'unknown problem'}")
        if args.delete_invalid:
            try:
                os.remove(e["path"])
            except FileNotFoundError:
                pass
            deleted += 1
            out.line(f"  deleted {e['path']}")
    summary = (f"checked {_count(len(entries), 'entry', 'entries')} in {_C.cache_dir()}: "
               f"{len(entries) - len(bad)} valid, {len(bad)} invalid")
    if args.delete_invalid and bad:
        summary += f" ({deleted} deleted)"
    out.line(summary)
    return 1 if bad and not args.delete_invalid else 0


def _cmd_cache_clear(args, out):
    directory = _C.cache_dir()
    removed = _C.cache_clear()
    out.line(f"removed {_count(removed, 'cache entry', 'cache entries')} from {directory}")
    return 0


# ---------------------------------------------------------------------------
# bench


def _cmd_bench(args, out):
    try:
        opts = bench_options.from_args(args)
        # Imported here: the runner imports torch, which no other command needs.
        from normkit.bench import runner

        return runner.run(opts, args.argv)
    except bench_options.BenchUsageError as e:
        return _error(e)


# ---------------------------------------------------------------------------


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="normkit",
        description="Diagnostics and compile-cache management for normkit's JIT CUDA runtime.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"normkit {normkit.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    doctor = commands.add_parser(
        "doctor", help="report driver, NVRTC, GPUs, cache and the PyTorch front end",
        description="Report the normkit version, the CUDA driver, NVRTC, every GPU, the compile cache and "
                    "whether PyTorch eager calls take the C++ path (and why not). "
                    "Without a GPU or driver it says why and still exits 0.")
    doctor.add_argument("--selftest", action="store_true",
                        help="run a small kernel on every GPU and check it (exit 1 on failure)")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=_cmd_doctor)

    cache = commands.add_parser("cache", help="inspect or clean the disk compile cache",
                                description="Inspect or clean the disk compile cache.")
    actions = cache.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list entries", description="List the disk cache entries.")
    listing.add_argument("--json", action="store_true", help="print the entries as JSON")
    listing.set_defaults(func=_cmd_cache_list)
    verify = actions.add_parser("verify", help="check every entry",
                                description="Check every entry; exit 1 if any is invalid and not deleted.")
    verify.add_argument("--delete-invalid", action="store_true", help="remove the invalid entries")
    verify.set_defaults(func=_cmd_cache_verify)
    clear = actions.add_parser("clear", help="remove every entry", description="Remove every cache entry.")
    clear.set_defaults(func=_cmd_cache_clear)

    _cli_precompile.add_parser(commands, argparse.RawDescriptionHelpFormatter)

    bench = commands.add_parser(
        "bench", help="benchmark RMSNorm (--op: LayerNorm, fused adds) against a device copy and the peers "
                      "(JSON + plot)",
        description="Benchmark RMSNorm (DESIGN section 4), and with --op LayerNorm and the in-place fused adds "
                    "(forward only): GB/s of forward and backward, with and without a residual, against a device "
                    "copy of the same bytes timed in the same run and against the peers that are importable "
                    "(PyTorch eager, torch.compile of the reference, quack, Liger-Kernel, FlashInfer), each checked "
                    "against an fp32 reference and normkit before it is timed; decode shapes by CUDA-graph replay; "
                    "host time per call at M=1, N=4096. Prints a table and writes bench.json (schema: "
                    "normkit/bench/schema.json) and bench.png (bench-<op>.png for the other operators) to --out. "
                    "Without a GPU it benchmarks normkit's CPU fallback against PyTorch CPU and says so. Exit "
                    "status 1 if a normkit row failed its check; a failing peer is a result, not an error.")
    bench_options.add_arguments(bench)
    bench.set_defaults(func=_cmd_bench)
    return parser


def _error(message):
    print(f"normkit: error: {message}", file=sys.stderr)
    return 2


def main(argv=None):
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the exact command line, for records
    out = _Output()
    try:
        return args.func(args, out)
    except NormkitError as e:
        return _error(e)
    except BrokenPipeError:
        # The reader went away (`normkit cache list | head`); say nothing more.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1
    except OSError as e:
        return _error(e)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
