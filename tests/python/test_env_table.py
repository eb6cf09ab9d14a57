"""Every NORMKIT_ environment variable the library, its Python package or the
scripts read has a row in the README's environment table (the guide's rule: one
table documents them all)."""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
# A read of the variable: getenv / the runtime's env helpers / os.environ / os.getenv.
READ = re.compile(r"""(?:getenv|env_string|env_flag|env_switch|environ(?:\.get)?|\$\{?)\s*[(\[]?\s*["']?(NORMKIT_[A-Z0-9_]+)""")


def variables_read():
    found = {}
    for top in ("src", "include", "python", "scripts", "tests"):
        for path in (REPO / top).rglob("*"):
            if path.suffix not in {".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh"} or not path.is_file():
                continue
            for name in READ.findall(path.read_text(errors="replace")):
                found.setdefault(name, str(path.relative_to(REPO)))
    return found


def readme_table_variables():
    """The NORMKIT_ variables of the README's environment table (one row each)."""
    readme = (REPO / "README.md").read_text()
    return set(re.findall(r"^\| `(NORMKIT_[A-Z0-9_]+)` \|", readme, flags=re.M))


def test_every_variable_read_is_in_the_readme_table():
    rows = readme_table_variables()
    found = variables_read()
    assert "NORMKIT_CACHE_DIR" in found and "NORMKIT_FORWARD_PLAN" in found, "the scan found too little"
    missing = {name: where for name, where in found.items() if name not in rows}
    assert not missing, f"read but not in the README's table: {missing}"
