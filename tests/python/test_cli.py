import json
import os
import pathlib
import subprocess
import sys

import pytest

import normkit
from normkit import _C


def run_cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "normkit", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, **kwargs)


def test_help_documents_every_command_and_flag():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    for word in ("doctor", "--selftest", "--json", "cache list", "cache verify", "--delete-invalid",
                 "cache clear"):
        assert word in result.stdout, word


def test_console_script_is_installed():
    script = pathlib.Path(sys.executable).parent / "normkit"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert normkit.__version__ in result.stdout


def test_doctor(gpu_available):
    result = run_cli("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert f"normkit {normkit.__version__}" in out
    assert "NVRTC" in out and "CUDA driver" in out
    assert "cache:" in out and os.environ["NORMKIT_CACHE_DIR"] in out
    assert "PyTorch: " in out
    if gpu_available:
        assert "GPUs" in out
    else:
        assert "no GPU found: " in out


def test_doctor_json(gpu_available):
    result = run_cli("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["normkit_version"] == normkit.__version__
    assert report["cache"]["directory"] == os.environ["NORMKIT_CACHE_DIR"]
    assert report["cache"]["mode"] == "disk"
    assert report["cache"]["entries"] == 0
    torch_info = report["torch"]
    if torch_info["installed"]:
        # Where torch is installed when normkit builds (CI, the GPU machine), the C++ path is built and used.
        import torch

        assert torch_info["version"] == torch.__version__
        assert torch_info["cpp_eager_path"] is True, torch_info["why_not"]
    else:
        assert torch_info["cpp_eager_path"] is False and torch_info["why_not"]
    if gpu_available:
        assert report["gpus"] and report["no_gpu_reason"] is None
        for gpu in report["gpus"]:
            assert gpu["target"].startswith(("sm_", "compute_"))
    else:
        assert report["gpus"] == []
        assert report["no_gpu_reason"]
        assert report["driver"]["available"] is False
        assert report["driver"]["error"]


def test_doctor_reports_nvrtc(nvrtc):
    report = json.loads(run_cli("doctor", "--json").stdout)
    assert report["nvrtc"]["available"] is True
    assert report["nvrtc"]["version"] == nvrtc["nvrtc_version"]
    assert "sm_80" in report["nvrtc"]["targets"]


def test_doctor_selftest_without_gpu_exits_zero(gpu_available):
    if gpu_available:
        pytest.skip("a GPU is present; the GPU suite covers --selftest")
    result = run_cli("doctor", "--selftest")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no GPU found: " in result.stdout


@pytest.mark.gpu
def test_doctor_selftest_passes_on_every_gpu():
    result = run_cli("doctor", "--selftest", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [g["selftest"] for g in report["gpus"]] == ["PASS"] * _C.device_count()


def test_usage_error_exits_2():
    result = run_cli("cache", "frobnicate")
    assert result.returncode == 2
    assert "error: argument ACTION: invalid choice" in result.stderr


def test_normkit_error_is_reported_without_traceback(cli, monkeypatch):
    import normkit.cli

    def broken():
        raise _C.NormkitError("the disk is on fire")

    monkeypatch.setattr(normkit.cli._C, "cache_clear", broken)
    code, out, err = cli("cache", "clear")
    assert code == 2
    assert err.strip() == "normkit: error: the disk is on fire"
    assert "Traceback" not in err


def test_runtime_configuration_error_exits_2(monkeypatch):
    # An invalid setting surfaces as a NormkitError from the runtime, not a traceback.
    env = dict(os.environ, NORMKIT_CACHE_MODE="sideways")
    result = run_cli("cache", "list", env=env)
    assert "Traceback" not in result.stderr
    if result.returncode != 0:
        assert result.returncode == 2
        assert result.stderr.startswith("normkit: error: ")


def test_empty_cache_commands(cli, cache_dir):
    code, out, _ = cli("cache", "list")
    assert code == 0 and "no cache entries" in out
    code, out, _ = cli("cache", "verify")
    assert code == 0 and "checked 0 entries" in out
    code, out, _ = cli("cache", "clear")
    assert code == 0 and "removed 0" in out


@pytest.fixture
def fake_gpus(monkeypatch):
    """Three simulated GPUs (the second fails its self-test), to exercise doctor's GPU path anywhere."""
    import normkit.cli

    devices = [
        {"ordinal": 0, "name": "Fake H200", "cc": "9.0", "sm_count": 132, "memory_gbps": 4916, "slower_memory": False, "target": "sm_90a"},
        {"ordinal": 1, "name": "Fake A100", "cc": "8.0", "sm_count": 108, "memory_gbps": 0, "slower_memory": False, "target": "sm_80"},
        {"ordinal": 2, "name": "Fake H100", "cc": "9.0", "sm_count": 132, "memory_gbps": 3352, "slower_memory": True, "target": "sm_90a"},
        # an MPS client limited to half the SMs
        {"ordinal": 3, "name": "MPS H100", "cc": "9.0", "sm_count": 66, "device_sm_count": 132,
         "memory_gbps": 3352, "slower_memory": True, "target": "sm_90a"},
        # an H200 whose plans read an H100's bandwidth (NORMKIT_MEMORY_GBPS)
        {"ordinal": 4, "name": "Forced H200", "cc": "9.0", "sm_count": 132, "memory_gbps": 3352,
         "driver_memory_gbps": 4916, "slower_memory": True, "target": "sm_90a"},
    ]
    fake = normkit.cli._C
    monkeypatch.setattr(fake, "device_count", lambda: len(devices))
    monkeypatch.setattr(fake, "device_info", lambda i: dict(devices[i]))
    monkeypatch.setattr(fake, "toolchain", lambda need_driver=False: {
        "nvrtc_version": "13.0", "nvrtc_archs": [75, 80, 90, 100], "driver_version": 13000})
    monkeypatch.setattr(fake, "selftest_run", lambda i: "y[3] = 1 (expected 7)" if i == 1 else "")
    return devices


def test_doctor_lists_gpus(cli, fake_gpus):
    code, out, err = cli("doctor")
    assert code == 0, err
    assert "CUDA driver: 13.0" in out
    assert "no GPU found" not in out
    for gpu in fake_gpus:
        assert gpu["name"] in out and gpu["target"] in out and str(gpu["sm_count"]) in out
    # The memory class the plans read: an H100's named, an unknown bandwidth said so.
    assert "3352 (H100 plans)" in out and "4916" in out and "unknown" in out
    # A bandwidth forced by NORMKIT_MEMORY_GBPS is said to be, beside the driver's.
    assert "* GPU 4: the plans read NORMKIT_MEMORY_GBPS=3352, not the driver's 4916 GB/s" in out
    assert out.count("NORMKIT_MEMORY_GBPS") == 1
    # The SMs the process may use, beside the device's where they differ (MPS).
    assert "66/132" in out


def test_doctor_selftest_failure_exits_1(cli, fake_gpus):
    code, out, _ = cli("doctor", "--selftest")
    assert code == 1
    assert "PASS" in out and "FAIL" in out
    assert "selftest FAIL on GPU 1: y[3] = 1 (expected 7)" in out

    code, out, _ = cli("doctor", "--selftest", "--json")
    assert code == 1
    report = json.loads(out)
    assert [g["selftest"] for g in report["gpus"]] == ["PASS", "FAIL", "PASS", "PASS", "PASS"]


def test_doctor_without_nvrtc_says_why(cli, monkeypatch):
    import normkit.cli

    def no_nvrtc(need_driver=False):
        raise _C.NormkitError("NVRTC unavailable: could not open NVRTC [here]")

    monkeypatch.setattr(normkit.cli._C, "toolchain", no_nvrtc)
    code, out, _ = cli("doctor")
    assert code == 0
    assert "NVRTC: unavailable" in out and "could not open NVRTC [here]" in out
