"""GPU proof of the JIT runtime (issue: foundation, requirement 10).

Runs the runtime's self-test kernel (y = a*x + y) through the whole path on real
tensors: compile, disk cache, per-device load, launch on a non-default stream,
graph capture. Skipped on machines without a CUDA GPU, with the reason printed.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="the GPU runtime tests drive CUDA memory through PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU visible to PyTorch", allow_module_level=True)

from normkit import _C  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMKIT_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("NORMKIT_CACHE_MODE", "NORMKIT_RUN_ONLY", "NORMKIT_ARCH"):
        monkeypatch.delenv(var, raising=False)
    _C.reload_config()
    _C.clear_memory_cache()
    _C.reset_counters()
    yield tmp_path / "cache"
    _C.clear_memory_cache()


def _axpy(x, y, a, stream=None, unroll=1, cluster=0, pdl=False):
    s = stream if stream is not None else torch.cuda.current_stream(x.device)
    _C.selftest_axpy(x.data_ptr(), y.data_ptr(), x.numel(), a, s.cuda_stream, unroll, cluster, pdl)


def test_selftest_without_framework_memory(fresh_cache):
    for d in range(_C.device_count()):
        assert _C.selftest_run(d) == ""


def test_resolved_target_is_exact_cubin(fresh_cache):
    for d in range(_C.device_count()):
        info = _C.device_info(d)
        major, minor = torch.cuda.get_device_capability(d)
        assert info["cc"] == f"{major}.{minor}"
        arch = major * 10 + minor
        assert info["target"] == (f"sm_{arch}a" if arch >= 90 else f"sm_{arch}")


def test_results_and_ordering_on_a_non_default_stream(fresh_cache):
    n = (1 << 22) + 3
    x = torch.randn(n, device="cuda")
    y0 = torch.randn(n, device="cuda")
    y = y0.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    ref = y0.double()
    with torch.cuda.stream(stream):
        # Our launches interleaved with PyTorch's own kernels on the same stream:
        # the result is right only if every launch runs in stream order.
        for i in range(20):
            a = 0.5 + 0.1 * i
            _axpy(x, y, a, stream)
            ref = a * x.double() + ref
            if i % 5 == 4:
                y.mul_(0.5)
                ref = ref * 0.5
        out = y.clone()
    stream.synchronize()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    c = _C.counters()
    assert c["compiles"] == 1 and c["module_loads"] == 1 and c["launches"] == 20


def test_cluster_and_pdl_launch_attributes(fresh_cache):
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    ref = y.double() + 2.0 * x.double() + 3.0 * x.double()
    _axpy(x, y, 2.0, cluster=2)
    _axpy(x, y, 3.0, pdl=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_poisoned_tail_is_not_written(fresh_cache):
    n = 1000
    x = torch.randn(n + 256, device="cuda")
    y = torch.full((n + 256,), float("nan"), device="cuda")
    y[:n] = 1.0
    _C.selftest_axpy(x.data_ptr(), y.data_ptr(), n, 2.0, torch.cuda.current_stream().cuda_stream, 1, 0, False)
    torch.cuda.synchronize()
    torch.testing.assert_close(y[:n], 1.0 + 2.0 * x[:n])
    assert torch.isnan(y[n:]).all(), "kernel wrote past n"


def test_host_pointer_is_a_clear_error(fresh_cache):
    x = torch.randn(16)
    y = torch.randn(16, device="cuda")
    with pytest.raises(_C.NormkitError, match="'x' is not CUDA device memory"):
        _C.selftest_axpy(x.data_ptr(), y.data_ptr(), 16, 1.0, 0, 1, 0, False)


def test_second_process_loads_from_disk_without_compiling(fresh_cache):
    script = textwrap.dedent(
        """
        import json, torch
        from normkit import _C
        x = torch.randn(4096, device="cuda"); y = torch.zeros_like(x)
        _C.selftest_axpy(x.data_ptr(), y.data_ptr(), x.numel(), 1.0, torch.cuda.current_stream().cuda_stream, 2, 0, False)
        torch.cuda.synchronize()
        assert torch.equal(y, x)
        print(json.dumps(_C.counters()))
        """
    )
    env = dict(os.environ, NORMKIT_CACHE_DIR=str(fresh_cache))
    runs = [json.loads(subprocess.check_output([sys.executable, "-c", script], env=env, text=True).strip().splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["compiles"] == 1 and runs[0]["disk_hits"] == 0
    assert runs[1]["compiles"] == 0 and runs[1]["disk_hits"] == 1 and runs[1]["module_loads"] == 1


def test_graph_capture_cold_kernel_raises_warm_up_first(fresh_cache):
    x = torch.randn(8192, device="cuda")
    y = torch.zeros_like(x)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(_C.NormkitError, match="[Ww]arm up first"):
        with torch.cuda.graph(graph, stream=stream):
            _axpy(x, y, 1.0, torch.cuda.current_stream(), unroll=3)
    assert _C.counters()["compiles"] == 0, "nothing may be compiled during capture"


def test_graph_capture_after_prepare_replays_correctly(fresh_cache):
    x = torch.randn(8192, device="cuda")
    y = torch.zeros_like(x)
    _C.selftest_prepare([x.device.index], 3)
    loads = _C.counters()["module_loads"]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _axpy(x, y, 1.0, torch.cuda.current_stream(), unroll=3)
    assert _C.counters()["module_loads"] == loads
    y.zero_()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 3.0 * x)


def test_run_only_miss_is_an_error_on_the_gpu_path(fresh_cache, monkeypatch):
    monkeypatch.setenv("NORMKIT_RUN_ONLY", "1")
    _C.reload_config()
    x = torch.randn(64, device="cuda")
    y = torch.zeros_like(x)
    with pytest.raises(_C.NormkitError, match="NORMKIT_RUN_ONLY"):
        _axpy(x, y, 1.0, unroll=4)


def test_launch_error_names_the_kernel(fresh_cache):
    x = torch.randn(1 << 16, device="cuda")
    y = torch.zeros_like(x)
    # 32 CTAs per cluster is above every GPU's limit (16): the driver rejects the launch.
    with pytest.raises(_C.NormkitError, match="selftest_axpy"):
        _axpy(x, y, 1.0, cluster=32)
    _axpy(x, y, 1.0)  # the error was not sticky: the next launch works
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x)
