"""`import normkit` must not import torch; the torch names load it on first use."""

import importlib.util
import subprocess
import sys

import pytest


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_import_normkit_does_not_import_torch():
    result = _run("import sys, normkit, normkit.cli; normkit.cache_dir(); normkit.counters();"
                  "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'));"
                  "print('ok')")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_unknown_attribute_is_attribute_error_without_torch():
    result = _run("import sys, normkit; assert not hasattr(normkit, 'no_such_name');"
                  "assert 'torch' not in sys.modules; print('ok')")
    assert result.returncode == 0, result.stderr


def test_torch_names_import_torch_lazily():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    result = _run("import sys, normkit; f = normkit.rmsnorm; assert 'torch' in sys.modules;"
                  "import normkit.torch as nt; assert f is nt.rmsnorm and normkit.RMSNorm is nt.RMSNorm; print('ok')")
    assert result.returncode == 0, result.stderr
