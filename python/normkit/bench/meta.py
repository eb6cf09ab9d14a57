"""Where and how a result was measured, for the JSON's `meta` (DESIGN §4: every kept
measurement names its date, GPU, driver, commit and exact command).

Each probe degrades to null rather than failing: a benchmark whose numbers are
good must not be lost because nvidia-smi or git is missing on the machine.
"""

import datetime
import os
import platform
import shlex
import socket
import subprocess

import normkit
from normkit import _C


def _run(argv):
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else None


def commit():
    """(commit, where it came from): NORMKIT_COMMIT wins, since the GPU machine's copy of the tree
    may carry a stale .git."""
    env = os.environ.get("NORMKIT_COMMIT")
    if env:
        return env, "NORMKIT_COMMIT"
    head = _run(["git", "rev-parse", "HEAD"])
    return (head, "git rev-parse HEAD") if head else (None, "unknown (no NORMKIT_COMMIT, no git checkout)")


def _cuda_driver_api():
    try:
        version = _C.toolchain(True)["driver_version"]
    except _C.NormkitError:
        return None
    # cuDriverGetVersion encodes 13.0 as 13000.
    return f"{version // 1000}.{(version % 1000) // 10}" if version else None


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(torch, gpu, device, cache_bytes, cache_source):
    if not gpu:
        return {"kind": "cpu", "name": _cpu_name(), "cores": os.cpu_count(), "sm_count": None,
                "compute_capability": None, "memory_bytes": None, "cache_bytes": cache_bytes,
                "cache_source": cache_source}
    props = torch.cuda.get_device_properties(device)
    return {"kind": "cuda", "name": props.name, "cores": None, "sm_count": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}", "memory_bytes": props.total_memory,
            "cache_bytes": cache_bytes, "cache_source": cache_source}


def collect(torch, gpu, mode_reason, device_meta, argv):
    rev, rev_source = commit()
    driver = None
    if gpu:
        smi = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i",
                    str(torch.cuda.current_device())])
        driver = smi.splitlines()[0].strip() if smi else None
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "gpu" if gpu else "cpu",
        "mode_reason": mode_reason,
        "device": device_meta,
        "driver_version": driver,
        "cuda_driver_api": _cuda_driver_api() if gpu else None,
        "cuda_version": torch.version.cuda,
        "torch_version": torch.__version__,
        "normkit_version": normkit.__version__,
        "python_version": platform.python_version(),
        "commit": rev,
        "commit_source": rev_source,
        "command": shlex.join(["normkit", *argv]),
        "hostname": socket.gethostname(),
        # The NORMKIT_ switches of the run (plans forced, memory class, NVRTC flags, ...):
        # numbers taken under them are not the defaults'. The commit is "commit" above; an
        # empty value is the same as unset (scripts/plan_cases.sh sets the plans so).
        "normkit_environment": {k: v for k, v in sorted(os.environ.items())
                                if k.startswith("NORMKIT_") and k != "NORMKIT_COMMIT" and v},
    }
