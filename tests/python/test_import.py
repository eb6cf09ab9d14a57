import importlib.metadata
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

import normkit
from normkit import _C


def run_python(code, **kwargs):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, **kwargs)


def test_import_loads_no_cuda_library_and_no_torch():
    result = run_python(
        """
        import json, sys
        import normkit
        maps = open("/proc/self/maps").read()
        print(json.dumps({
            "libcuda": "libcuda" in maps,
            "libnvrtc": "libnvrtc" in maps,
            "torch": "torch" in sys.modules,
            "nvidia": any(m == "nvidia" or m.startswith("nvidia.") for m in sys.modules),
        }))
        """)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded == {"libcuda": False, "libnvrtc": False, "torch": False, "nvidia": False}


def test_extension_exports_only_its_init_function():
    # torch loads its libraries RTLD_GLOBAL; any C++ symbol _C exported could be
    # bound to torch's copy instead (this crashed std::regex when torch came first).
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("binutils' nm is not installed")
    result = subprocess.run([nm, "-D", "--defined-only", _C.__file__], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    exported = [line.split()[-1] for line in result.stdout.splitlines() if line.strip()]
    assert exported == ["PyInit__C"]


def test_public_names():
    assert normkit.__version__ == importlib.metadata.version("normkit")
    assert issubclass(normkit.NormkitError, RuntimeError)
    assert normkit.NormkitError is _C.NormkitError
    for name in ("counters", "reset_counters", "cache_dir"):
        assert callable(getattr(normkit, name))


def test_counters_has_every_field():
    counters = normkit.counters()
    assert set(counters) == {"compiles", "memory_hits", "disk_hits", "disk_invalid", "module_loads", "launches",
                             "compile_ns", "disk_read_ns", "load_ns"}
    assert all(isinstance(v, int) for v in counters.values())


def test_cache_dir_follows_environment(cache_dir, monkeypatch, tmp_path):
    assert normkit.cache_dir() == str(cache_dir)
    assert _C.config()["cache_dir"] == str(cache_dir)
    monkeypatch.delenv("NORMKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _C.reload_config()
    assert normkit.cache_dir() == str(tmp_path / "xdg" / "normkit")


def test_config_reflects_environment(monkeypatch):
    config = _C.config()
    assert config["cache_mode"] == "disk"
    assert config["arch"] is None
    assert config["run_only"] is False
    monkeypatch.setenv("NORMKIT_CACHE_MODE", "memory")
    monkeypatch.setenv("NORMKIT_ARCH", "sm_90a")
    monkeypatch.setenv("NORMKIT_NVRTC_FLAGS", "-DFOO=1  -DBAR=2")
    monkeypatch.setenv("NORMKIT_LINEINFO", "1")
    _C.reload_config()
    config = _C.config()
    assert config["cache_mode"] == "memory"
    assert config["arch"] == "sm_90a"
    assert config["extra_nvrtc_flags"] == ["-DFOO=1", "-DBAR=2"]
    assert config["lineinfo"] is True
    monkeypatch.setenv("NORMKIT_CACHE_MODE", "off")
    _C.reload_config()
    assert _C.config()["cache_mode"] == "off"


def test_nvrtc_search_dirs_accepts_paths(tmp_path):
    # Only checks that the binding takes a list; which directory wins is the runtime's business.
    _C.add_nvrtc_search_dirs([str(tmp_path)])


def test_without_driver_device_count_says_what_is_missing():
    try:
        count = _C.device_count()
    except _C.NormkitError as e:
        message = str(e)
        assert "libcuda" in message or "driver" in message.lower(), message
        assert _C.driver_error(), "driver_error() should explain why the driver is unavailable"
    else:
        pytest.skip(f"a CUDA driver is present here ({count} devices)")
