"""Checks a bench JSON against schema.json (its shape, not its numbers).

jsonschema is imported only inside these functions: it is a development
requirement used by the tests and CI, and the benchmark itself never needs it
(the GPU machine does not have it).

    python -m normkit.bench.validate FILE.json [FILE.json.gz ...]

docs/perf keeps its results gzipped (FILE.json.gz): the device tool carries the
working tree under 64 MiB, and a sweep's JSON is ~1 MB of text, ~120 KB gzipped.
"""

import gzip
import json
import os
import sys

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")


def load_schema():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


def problems(doc):
    """Every schema violation in `doc`, as 'path: message' lines (empty when it is valid)."""
    import jsonschema

    schema = load_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    found = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        found.append(f"{where}: {error.message}")
    return found


def load_result(path):
    """A bench JSON file, plain or gzipped (by its .gz suffix)."""
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return json.load(f)


def problems_in_file(path):
    return problems(load_result(path))


def main(argv=None):
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m normkit.bench.validate FILE.json[.gz] [FILE.json[.gz] ...]", file=sys.stderr)
        return 2
    bad = 0
    for path in paths:
        found = problems_in_file(path)
        bad += bool(found)
        print(f"{path}: {'valid' if not found else f'{len(found)} problem(s)'}")
        for line in found:
            print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
