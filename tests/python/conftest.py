import importlib.util
import os
import pathlib

import pytest

from normkit import _C

# Variables that change what the runtime does with a cache or a target; a
# developer's shell must not leak them into the tests.
_RUNTIME_ENV = (
    "NORMKIT_CACHE_MODE",
    "NORMKIT_RUN_ONLY",
    "NORMKIT_ARCH",
    "NORMKIT_ASSERT_NO_SPILLS",
    "NORMKIT_LINEINFO",
    "NORMKIT_NVRTC_FLAGS",
    "NORMKIT_DUMP_DIR",
)

_gpu_skip_reason = []  # memo: computed once per session


def gpu_skip_reason():
    """None when a GPU is usable, else why not."""
    if not _gpu_skip_reason:
        try:
            count = _C.device_count()
        except _C.NormkitError as e:
            reason = f"no usable NVIDIA GPU: {e}"
        else:
            reason = None if count > 0 else "no NVIDIA GPU: the CUDA driver reports 0 devices"
        _gpu_skip_reason.append(reason)
    return _gpu_skip_reason[0]


# Run order: the kernel correctness suites first, the benchmark's tests last. On
# the GPU machine scripts/gpu_check.sh stops pytest at its time budget; cut there,
# a run must have checked the kernels rather than the bench (whose GPU tests take
# ~150 s and ran first in alphabetical order, leaving test_torch_ext unrun).
_FIRST = ("test_rmsnorm_gpu.py", "test_rmsnorm_gpu_features.py", "test_layernorm_gpu.py", "test_norm_plans_gpu.py",
          "test_torch_ext.py", "test_gpu_runtime.py")
_LAST = ("test_bench.py",)


def _run_rank(item):
    name = item.path.name
    if name in _FIRST:
        return _FIRST.index(name)
    return len(_FIRST) + (1 if name in _LAST else 0)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_run_rank)  # stable: the order within each file is kept
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = gpu_skip_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


def _fresh_runtime_state():
    _C.reload_config()
    _C.clear_memory_cache()
    _C.reset_counters()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own empty cache directory and a fresh runtime state."""
    directory = tmp_path / "normkit-cache"
    monkeypatch.setenv("NORMKIT_CACHE_DIR", str(directory))
    for name in _RUNTIME_ENV:
        monkeypatch.delenv(name, raising=False)
    _fresh_runtime_state()
    yield directory
    monkeypatch.undo()
    _fresh_runtime_state()


@pytest.fixture
def nvrtc():
    """The NVRTC toolchain info; skips when NVRTC cannot be loaded (fails under NORMKIT_TEST_REQUIRE_NVRTC=1)."""
    try:
        return _C.toolchain(False)
    except _C.NormkitError as e:
        if os.environ.get("NORMKIT_TEST_REQUIRE_NVRTC") == "1":
            pytest.fail(f"NVRTC is required here (NORMKIT_TEST_REQUIRE_NVRTC=1) but could not be loaded: {e}")
        pytest.skip(f"NVRTC not available: {e}")


@pytest.fixture
def cli(capsys):
    """Runs normkit.cli.main in-process; returns (exit code, stdout, stderr)."""
    from normkit.cli import main

    def run(*argv):
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture(scope="session")
def load_script():
    """Loads a module of scripts/ by file name (scripts/ is not a package), once per name."""
    folder = pathlib.Path(__file__).resolve().parents[2] / "scripts"
    loaded = {}

    def load(file_name):
        if file_name not in loaded:
            spec = importlib.util.spec_from_file_location(file_name.removesuffix(".py"), folder / file_name)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[file_name] = module
        return loaded[file_name]

    return load


@pytest.fixture
def gpu_available():
    return gpu_skip_reason() is None
