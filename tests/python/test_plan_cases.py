"""The cases files of scripts/plan_cases.sh hold nothing that would fail only on the GPU machine,
where device time is scarce: every line has a label, an override and `normkit bench` flags; a
forced plan parses as NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN (the runtime's own parser,
through a configuration reload); an `env:` switch is one of the README's table; the flags are
ones `normkit bench` accepts. The line rules are plan_cases.sh's (see its header)."""
import argparse
import pathlib
import shlex

import pytest

from test_env_table import readme_table_variables

REPO = pathlib.Path(__file__).resolve().parents[2]
CASES = sorted((REPO / "scripts" / "plan_cases").glob("*.txt"))


def case_lines(path):
    """(line number, [label, override, flags]) of each case line, as plan_cases.sh reads them."""
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        fields = [f.strip() for f in line.split(";")]
        if not fields[0] or fields[0].startswith("#"):
            continue
        yield lineno, fields


def case_environment(override, switches):
    """The variables plan_cases.sh sets for an override: the two plans (empty unless forced) and
    each env: switch, `~` standing for a space."""
    env = {"NORMKIT_FORWARD_PLAN": "", "NORMKIT_BACKWARD_PLAN": ""}
    for part in ([] if override == "-" else override.split()):
        if part.startswith("bwd:"):
            env["NORMKIT_BACKWARD_PLAN"] = part[len("bwd:"):]
        elif part.startswith("env:NORMKIT_"):
            name, _, value = part[len("env:"):].partition("=")
            assert name in switches, f"{name} is not in the README's table"
            env[name] = value.replace("~", " ")
        else:
            env["NORMKIT_FORWARD_PLAN"] = part
    return env


def test_there_are_cases_files():
    assert len(CASES) > 10


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_cases_file_parses(path, monkeypatch):
    from normkit import _C
    from normkit.bench import options

    switches = readme_table_variables()
    parser = argparse.ArgumentParser(exit_on_error=False)
    options.add_arguments(parser)
    labels = set()
    lines = list(case_lines(path))
    assert lines, f"{path.name}: no case"
    try:
        for lineno, fields in lines:
            where = f"{path.name}:{lineno}"
            assert len(fields) == 3, f"{where}: `label ; override ; flags` expected, got {len(fields)} fields"
            label, override, flags = fields
            assert label not in labels, f"{where}: label {label!r} used twice"
            labels.add(label)
            assert override, f"{where}: an empty override (`-` is the own plan)"
            try:
                env = case_environment(override, switches)
            except AssertionError as e:
                pytest.fail(f"{where}: {e}")
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            try:
                _C.reload_config()
            except Exception as e:  # normkit.NormkitError: the message names the variable
                pytest.fail(f"{where}: {e}")
            # plan_cases.sh appends these; a later flag wins, as on the command line.
            argv = shlex.split(flags) + ["--peers", "none", "--host-calls", "0", "--no-plot", "--out", "/tmp/x"]
            try:
                args, unknown = parser.parse_known_args(argv)
                assert not unknown, f"unknown arguments {unknown}"
                options.from_args(args)
            except (argparse.ArgumentError, options.BenchUsageError, AssertionError, SystemExit) as e:
                pytest.fail(f"{where}: normkit bench refuses {flags!r}: {e}")
    finally:
        monkeypatch.undo()
        _C.reload_config()
