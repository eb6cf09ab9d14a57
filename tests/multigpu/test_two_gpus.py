"""Two GPUs: per-device correctness of the normkit kernels (issue 6, requirement 1; DESIGN §2).

  a. forward + backward on cuda:1 while the current device is cuda:0, against the
     float64 reference of tests/python/test_rmsnorm_gpu.py; outputs on cuda:1; the
     work runs on cuda:1's *current* stream (a non-default one, behind a spin).
  b. both devices at once from two Python threads, cold kernels included.
  c. the runtime counters, in a fresh process with an empty cache directory: each
     kernel is compiled once and loaded once per device; a second process loads
     from disk and compiles nothing.
  d. a loaded handle is never used on the wrong device: calls interleaved across
     devices and current devices stay correct and load each kernel once per device.

Norm kinds: every test that runs a norm is parametrized over NORM_KINDS: RMSNorm and
LayerNorm (normkit.torch.layernorm(x, weight, bias, eps=...)). An installation
without LayerNorm reports its cases as SKIPPED with the reason "LayerNorm NOT
covered ...", never as passed.

Needs two CUDA GPUs. With fewer, the module skips with the reason, unless
NORMKIT_TEST_REQUIRE_GPUS=2 is set (scripts/multigpu/run_all.sh sets it): then
every test fails, so a two-GPU run cannot pass by skipping.
"""
import os

# Multicast / NVLink SHARP stay off in every multi-GPU run (issue 6). Forced, not
# setdefault: a value inherited from the shell must not turn them back on.
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTI_GPU_ENV)

import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Optional  # noqa: E402

import pytest  # noqa: E402


def _required_gpus():
    value = os.environ.get("NORMKIT_TEST_REQUIRE_GPUS", "").strip()
    try:
        return int(value) if value else 0
    except ValueError:
        raise RuntimeError(f"NORMKIT_TEST_REQUIRE_GPUS={value!r}: expected a number of GPUs such as 2") from None


REQUIRED_GPUS = _required_gpus()

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    if REQUIRED_GPUS:
        raise RuntimeError(f"NORMKIT_TEST_REQUIRE_GPUS={REQUIRED_GPUS} but torch cannot be imported: {e}") from e
    pytest.skip(f"the two-GPU tests drive CUDA memory through PyTorch, which is missing: {e}", allow_module_level=True)

import normkit  # noqa: E402
import normkit.torch as nkt  # noqa: E402
from normkit import _C  # noqa: E402

# The float64 reference, comparison and tolerances of the single-GPU suite, imported
# (not copied) so that both suites judge results the same way. Only helpers are
# imported: that module's fixtures and marks stay there.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from test_rmsnorm_gpu import BF16, DW_ATOL, EPS, FP32, NAMES, check, check_exact  # noqa: E402
from test_rmsnorm_gpu import ref_backward, ref_forward  # noqa: E402

NAN = float("nan")
N = 4096  # a grid shape of test_rmsnorm_gpu.py
M = 1024


def _gpus_missing():
    want = max(2, REQUIRED_GPUS)
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to PyTorch"
    if torch.cuda.device_count() < want:
        return f"PyTorch sees {torch.cuda.device_count()} CUDA GPU(s), these tests need {want}"
    try:
        count = _C.device_count()
    except _C.NormkitError as e:
        return f"normkit finds no usable GPU: {e}"
    if count < want:
        return f"normkit's CUDA driver reports {count} device(s), these tests need {want}"
    return None


GPUS_MISSING = _gpus_missing()
if GPUS_MISSING and not REQUIRED_GPUS:
    pytest.skip(f"needs two CUDA GPUs: {GPUS_MISSING} (NORMKIT_TEST_REQUIRE_GPUS=2 makes this a failure)",
                allow_module_level=True)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _two_gpus_required():
    if GPUS_MISSING:
        pytest.fail(f"NORMKIT_TEST_REQUIRE_GPUS={REQUIRED_GPUS} but {GPUS_MISSING}", pytrace=False)


# One cache directory for the module (kernels compile once, not once per test), and
# no NORMKIT_* setting of the developer's shell (run-only mode, a forced arch, ...).
_KEEP_ENV = ("NORMKIT_TEST_", "NORMKIT_COMMIT")


def _clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NORMKIT_") or k.startswith(_KEEP_ENV)}
    env.update(MULTI_GPU_ENV)
    env.update(extra or {})
    return env


@pytest.fixture(scope="module", autouse=True)
def _module_cache(tmp_path_factory):
    directory = tmp_path_factory.mktemp("normkit-two-gpus-cache")
    mp = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("NORMKIT_") and not name.startswith(_KEEP_ENV):
            mp.delenv(name)
    mp.setenv("NORMKIT_CACHE_DIR", str(directory))
    if not GPUS_MISSING:
        _C.reload_config()
    yield directory
    mp.undo()
    if not GPUS_MISSING:
        _C.reload_config()
        _C.clear_memory_cache()
        _C.reset_counters()


@pytest.fixture(autouse=True)
def _current_device_is_0():
    """Every test starts (and must end) with cuda:0 as the current device."""
    if GPUS_MISSING:
        yield
        return
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0, "a test left another current device behind"


# ---------------------------------------------------------------------------
# Norm kinds: what each one calls and its float64 reference.


def rand(shape, dtype, device, gen, scale=1.0):
    """Random normal data drawn on the CPU (so the same seed gives the same values on every device)."""
    t = torch.randn(shape, generator=gen, dtype=torch.float32)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype).to(device)


def _rmsnorm_call(x, w, b, r):
    """(out, residual_out or None) through autograd."""
    if r is None:
        return nkt.rmsnorm(x, w, eps=EPS), None
    return nkt.rmsnorm(x, w, residual=r, eps=EPS, prenorm=True)


def _rmsnorm_ref(x, w, b, r, dout, dres):
    """float64 reference of test_rmsnorm_gpu.py: {name: expected tensor}."""
    y, res_out, h_bwd, rstd = ref_forward(x, w, residual=r)
    dx, dw, _ = ref_backward(h_bwd, w, dout, rstd, dresidual_out=dres)
    want = {"out": y, "x": dx, "weight": dw}
    if r is not None:
        want.update(residual_out=res_out, residual=dx)
    return want


def _rmsnorm_direct(x, w, dout):
    """The functional pair, called by this thread (not autograd's device thread)."""
    out, _, rstd = nkt.rmsnorm_fwd(x, w, eps=EPS, store_rstd=True)
    dx, dw, _, _ = nkt.rmsnorm_bwd(x, w, dout, rstd)
    return {"out": out, "x": dx, "weight": dw}


def _layernorm_call(x, w, b, r):
    return nkt.layernorm(x, w, b, eps=EPS), None


def _layernorm_ref(x, w, b, r, dout, dres):
    """float64 LayerNorm by torch autograd, from the same (rounded) inputs."""
    xs = x.detach().double().requires_grad_()
    ws = w.detach().double().requires_grad_()
    bs = b.detach().double().requires_grad_()
    y = torch.nn.functional.layer_norm(xs, (x.shape[-1],), ws, bs, EPS)
    dx, dw, db = torch.autograd.grad(y, [xs, ws, bs], dout.double())
    return {"out": y.detach(), "x": dx, "weight": dw, "bias": db}


@dataclass(frozen=True)
class NormKind:
    name: str
    available: bool
    missing_reason: str
    call: Callable
    reference: Callable
    has_bias: bool = False
    residual: bool = False              # supports a residual (prenorm) case
    direct: Optional[Callable] = None   # functional fwd/bwd called outside autograd


# Adding a kind = one entry here (and, in scripts/multigpu/train_ddp.py, one in NORM_IMPLS).
NORM_KINDS = {
    "rmsnorm": NormKind("rmsnorm", hasattr(nkt, "rmsnorm"), "normkit.torch has no rmsnorm",
                        _rmsnorm_call, _rmsnorm_ref, residual=True, direct=_rmsnorm_direct),
    "layernorm": NormKind("layernorm", hasattr(nkt, "layernorm"),
                          "LayerNorm NOT covered: normkit.torch has no layernorm yet (issue 5)",
                          _layernorm_call, _layernorm_ref, has_bias=True),
}


def kind_param(kind, *values, id_suffix=""):
    """A pytest.param for `kind`, SKIPPED (with the reason) when normkit lacks that kind."""
    k = NORM_KINDS[kind]
    marks = () if k.available else (pytest.mark.skip(reason=k.missing_reason),)
    return pytest.param(kind, *values, marks=marks, id=kind + id_suffix)


# (x dtype, weight dtype, residual?) of section a.
DTYPE_CASES = [(BF16, BF16, False), (BF16, FP32, False), (FP32, FP32, False), (BF16, FP32, True),
               (FP32, FP32, True)]


def _cases():
    params = []
    for kind, k in NORM_KINDS.items():
        for xdt, wdt, res in DTYPE_CASES:
            if res and not k.residual:
                continue
            params.append(kind_param(kind, xdt, wdt, res,
                                     id_suffix=f"-x{NAMES[xdt]}-w{NAMES[wdt]}" + ("-residual" if res else "")))
    return params


def make_inputs(kind, xdt, wdt, residual, device, seed, m=M, n=N):
    """Leaf tensors (x, w, b, r) that require grad, and (dout, dres), on `device`."""
    k = NORM_KINDS[kind]
    gen = torch.Generator().manual_seed(seed)
    x = rand((m, n), xdt, device, gen).requires_grad_()
    w = rand((n,), wdt, device, gen, 0.5).add_(1.0).requires_grad_()
    b = rand((n,), wdt, device, gen, 0.1).requires_grad_() if k.has_bias else None
    r = rand((m, n), xdt, device, gen).requires_grad_() if residual else None
    dout = rand((m, n), xdt, device, gen)
    dres = rand((m, n), xdt, device, gen) if residual else None
    return (x, w, b, r), (dout, dres)


def run_autograd(kind, leaves, grads_out):
    """Forward + backward through autograd: {name: result}."""
    x, w, b, r = leaves
    dout, dres = grads_out
    out, res_out = NORM_KINDS[kind].call(x, w, b, r)
    outputs, gouts = [out], [dout]
    if res_out is not None:
        outputs.append(res_out)
        gouts.append(dres)
    names = [n for n, t in (("x", x), ("weight", w), ("bias", b), ("residual", r)) if t is not None]
    inputs = [t for t in (x, w, b, r) if t is not None]
    grads = torch.autograd.grad(outputs, inputs, gouts)
    got = {"out": out, **dict(zip(names, grads))}
    if res_out is not None:
        got["residual_out"] = res_out
    return got


def reference(kind, leaves, grads_out):
    x, w, b, r = (None if t is None else t.detach() for t in leaves)
    dout, dres = grads_out
    return NORM_KINDS[kind].reference(x, w, b, r, dout, dres if r is not None else None)


def check_all(label, got, want, rows, device):
    for name, g in got.items():
        assert g.device == torch.device(device), f"{label}: {name} is on {g.device}, want {device}"
        if name == "residual_out":
            check_exact(f"{label}: residual_out", g, want[name].to(g.dtype))
            continue
        extra = DW_ATOL * math.sqrt(rows) if name in ("weight", "bias") else 0.0
        check(f"{label}: {name if name == 'out' else 'd' + name}", g, want[name], atol_extra=extra)


# ---------------------------------------------------------------------------
# a. cuda:1 while the current device is cuda:0; cuda:1's current stream


# ~200 ms at H200 clocks (~2 GHz); test_rmsnorm_gpu_features.py uses 100M for ~50 ms.
SPIN_CYCLES = 400_000_000


@pytest.mark.parametrize("kind,xdt,wdt,residual", _cases())
def test_on_cuda1_while_current_device_is_0(kind, xdt, wdt, residual):
    dev = "cuda:1"
    leaves, grads_out = make_inputs(kind, xdt, wdt, residual, dev, seed=1234)
    want = reference(kind, leaves, grads_out)
    k = NORM_KINDS[kind]

    # 1) cuda:1's default stream, current device 0. Also compiles and loads every
    # kernel that part 2 launches, so nothing is compiled inside its timed window.
    assert torch.cuda.current_device() == 0
    got = run_autograd(kind, leaves, grads_out)
    direct = k.direct(leaves[0].detach(), leaves[1].detach(), grads_out[0]) if k.direct and not residual else None
    assert torch.cuda.current_device() == 0, "the call changed the current device"
    torch.cuda.synchronize(1)
    check_all("default stream, autograd", got, want, M, dev)
    if direct is not None:
        check_all("default stream, rmsnorm_fwd/rmsnorm_bwd", direct, want, M, dev)

    # 2) A side stream s is made cuda:1's current stream, then the current device goes
    # back to 0. On s: a ~200 ms spin, then the real inputs are copied into buffers
    # that hold NaN. Every call is issued while s still spins. A kernel on s reads the
    # real inputs; a kernel on any other stream (cuda:1's default stream, idle, or
    # cuda:0's) runs at once and reads NaN (or fails), so the checks below fail.
    x, w, b, r = leaves
    dout, dres = grads_out
    xs = torch.full_like(x, NAN, requires_grad=False)
    rs = torch.full_like(r, NAN, requires_grad=False) if r is not None else None
    ds = torch.full_like(dout, NAN)
    drs = torch.full_like(dres, NAN) if dres is not None else None
    torch.cuda.synchronize(1)
    s = torch.cuda.Stream(device=1)
    with torch.cuda.device(1), torch.cuda.stream(s):
        torch.cuda._sleep(SPIN_CYCLES)
        xs.copy_(x.detach())
        ds.copy_(dout)
        if rs is not None:
            rs.copy_(r.detach())
            drs.copy_(dres)
        with torch.cuda.device(0):
            assert torch.cuda.current_device() == 0
            assert torch.cuda.current_stream(1) == s, "test premise: s is cuda:1's current stream"
            assert torch.cuda.current_stream(0) != s
            leaves_s = (xs.requires_grad_(), w, b, rs.requires_grad_() if rs is not None else None)
            got_s = run_autograd(kind, leaves_s, (ds, drs))
            direct_s = k.direct(xs.detach(), w.detach(), ds) if direct is not None else None
            pending = not s.query()
            assert torch.cuda.current_device() == 0
    s.synchronize()
    assert pending, ("inconclusive: the side stream had finished its spin when the calls returned "
                     "(the library synchronized, or SPIN_CYCLES is too short for this GPU)")
    check_all("cuda:1's current (side) stream, autograd", got_s, want, M, dev)
    if direct_s is not None:
        check_all("cuda:1's current (side) stream, rmsnorm_fwd/rmsnorm_bwd", direct_s, want, M, dev)


# ---------------------------------------------------------------------------
# b. both devices at once from two threads

THREAD_ITERATIONS = 60
# Variants the threads cycle through; N=1024 is new to this module, so its kernels
# are compiled and loaded while both threads run.
THREAD_VARIANTS = [(BF16, FP32, False, 4096), (BF16, BF16, False, 1024), (FP32, FP32, False, 4096),
                   (BF16, FP32, True, 1024)]


def _thread_params():
    params = []
    for kind in NORM_KINDS:
        for current in ("own", "other"):
            params.append(kind_param(kind, current, id_suffix=f"-current-device-{current}"))
    return params


@pytest.mark.parametrize("kind,current", _thread_params())
def test_two_devices_from_two_threads(kind, current):
    k = NORM_KINDS[kind]
    variants = [v for v in THREAD_VARIANTS if k.residual or not v[2]]
    prepared = {}  # (device, variant index) -> (leaves, grads_out, want); built here, serially
    for d in (0, 1):
        for i, (xdt, wdt, res, n) in enumerate(variants):
            leaves, grads_out = make_inputs(kind, xdt, wdt, res, f"cuda:{d}", seed=100 + i, m=256, n=n)
            prepared[d, i] = leaves, grads_out, reference(kind, leaves, grads_out)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    _C.clear_memory_cache()  # cold handles: both threads load (and compile N=1024) at the same time

    barrier = threading.Barrier(2)
    errors, done = [], [0, 0]

    def worker(d):
        try:
            # "own": the thread's current device is its data's; "other": the other GPU.
            torch.cuda.set_device(d if current == "own" else 1 - d)
            barrier.wait(timeout=60)
            for it in range(THREAD_ITERATIONS):
                i = it % len(variants)
                leaves, grads_out, want = prepared[d, i]
                got = run_autograd(kind, leaves, grads_out)
                check_all(f"thread for cuda:{d}, iteration {it}, variant {i}", got, want, 256, f"cuda:{d}")
                done[d] += 1
        except BaseException:  # noqa: BLE001 - pytest.fail raises a BaseException; report it
            errors.append(f"thread for cuda:{d}:\n{traceback.format_exc()}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(d,), name=f"normkit-cuda{d}") for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish within 300 s"
    assert not errors, "\n".join(errors)
    assert done == [THREAD_ITERATIONS, THREAD_ITERATIONS], f"iterations done per device: {done}"


# ---------------------------------------------------------------------------
# c. counters in a fresh process: compiled once, loaded once per device

COUNTERS_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import normkit
    from normkit import _C
    from normkit.torch import rmsnorm

    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    n, m = 4096, 256
    g = torch.Generator().manual_seed(7)
    x_cpu = torch.randn(m, n, generator=g).to(torch.bfloat16)
    w_cpu = torch.randn(n, generator=g).mul_(0.5).add_(1.0)
    d_cpu = torch.randn(m, n, generator=g).to(torch.bfloat16)
    report = {"targets": [_C.target_for_device(0), _C.target_for_device(1)],
              "devices": [_C.device_info(0), _C.device_info(1)], "cache_dir": normkit.cache_dir(), "steps": []}

    def fwd(dev):  # one kernel variant: inference forward (no rstd)
        with torch.no_grad():
            y = rmsnorm(x_cpu.to(dev), w_cpu.to(dev), eps=1e-6)
        return [y.cpu()]

    def fwd_bwd(dev):  # training forward (stores rstd) + backward
        x = x_cpu.to(dev).requires_grad_()
        w = w_cpu.to(dev).requires_grad_()
        y = rmsnorm(x, w, eps=1e-6)
        dx, dw = torch.autograd.grad(y, [x, w], d_cpu.to(dev))
        return [y.detach().cpu(), dx.cpu(), dw.cpu()]

    def ref_ok(y):
        h = x_cpu.double()
        want = (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6) * w_cpu.double()).to(y.dtype).double()
        return bool(((y.double() - want).abs() <= 2.0 ** -6 * want.abs() + 1e-5).all())

    normkit.reset_counters()
    for phase, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        results = {}
        # device 0, then device 1, then both again; the current device stays 0
        for visit, dev in enumerate((0, 1, 0, 1)):
            before = normkit.counters()
            result = fn(f"cuda:{dev}")
            torch.cuda.synchronize(dev)
            results.setdefault(dev, result)
            after = normkit.counters()
            report["steps"].append({"phase": phase, "device": dev, "visit": visit // 2,
                                    "current_device": torch.cuda.current_device(),
                                    "delta": {k: after[k] - before[k] for k in after}})
        report[phase + "_same_bits_on_both_devices"] = all(
            torch.equal(a, b) for a, b in zip(results[0], results[1]))
        report[phase + "_out_matches_float64"] = ref_ok(results[0][0]) and ref_ok(results[1][0])
    report["totals"] = normkit.counters()
    print("NORMKIT_REPORT " + json.dumps(report))
    """
)


def _run_counters_script(cache):
    env = _clean_env({"NORMKIT_CACHE_DIR": str(cache)})
    proc = subprocess.run([sys.executable, "-c", COUNTERS_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"counter script failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("NORMKIT_REPORT ")]
    assert lines, f"no report from the counter script:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("NORMKIT_REPORT "):])


def _sum(steps, key, **where):
    return sum(s["delta"][key] for s in steps if all(s[k] == v for k, v in where.items()))


def _table(report):
    keys = ("compiles", "memory_hits", "disk_hits", "disk_invalid", "module_loads", "launches")
    rows = [f"{'phase':8} {'dev':>3} {'visit':>5} " + " ".join(f"{k:>12}" for k in keys)]
    for s in report["steps"]:
        rows.append(f"{s['phase']:8} {s['device']:>3} {s['visit']:>5} "
                    + " ".join(f"{s['delta'][k]:>12}" for k in keys))
    return "\n".join(rows)


def test_compiled_once_loaded_once_per_device(tmp_path, record_property):
    cache = tmp_path / "fresh-cache"
    first = _run_counters_script(cache)
    second = _run_counters_script(cache)  # same directory, new process
    record_property("counters_first_process", json.dumps(first["steps"]))
    record_property("counters_second_process", json.dumps(second["steps"]))
    tables = f"first process (empty cache):\n{_table(first)}\nsecond process (same cache):\n{_table(second)}"
    print(tables)
    same_target = first["targets"][0] == first["targets"][1]

    for report, name in ((first, "first process"), (second, "second process")):
        steps = report["steps"]
        assert all(s["current_device"] == 0 for s in steps), f"{name}: the current device changed\n{tables}"
        for phase in ("fwd", "fwd_bwd"):
            assert report[phase + "_out_matches_float64"], f"{name}: {phase} output differs from float64"
            assert report[phase + "_same_bits_on_both_devices"], \
                f"{name}: {phase}: one binary, same inputs, different bits on the two devices"
            loads0 = _sum(steps, "module_loads", phase=phase, device=0, visit=0)
            loads1 = _sum(steps, "module_loads", phase=phase, device=1, visit=0)
            assert loads0 >= 1, f"{name}: {phase}: no module loaded on cuda:0's first call\n{tables}"
            assert loads1 == loads0, (f"{name}: {phase}: {loads0} module(s) loaded on cuda:0 but {loads1} on "
                                      f"cuda:1; each kernel must be loaded once per device\n{tables}")
            for key in ("module_loads", "compiles", "disk_hits", "disk_invalid"):
                again = _sum(steps, key, phase=phase, visit=1)
                assert again == 0, f"{name}: {phase}: the repeat calls did {again} {key}\n{tables}"
            if same_target:
                c1 = _sum(steps, "compiles", phase=phase, device=1)
                d1 = _sum(steps, "disk_hits", phase=phase, device=1)
                assert c1 == 0, f"{name}: {phase}: cuda:1 (same target as cuda:0) compiled {c1} kernel(s)\n{tables}"
                assert d1 == 0, (f"{name}: {phase}: cuda:1 re-read {d1} binary(ies) from disk instead of "
                                 f"sharing cuda:0's\n{tables}")
        assert _sum(steps, "disk_invalid") == 0, f"{name}: rejected disk entries\n{tables}"

    # First process, empty cache: every kernel compiled exactly once, for all devices.
    compiled = first["totals"]["compiles"]
    loaded0 = _sum(first["steps"], "module_loads", device=0)
    expected = loaded0 * (1 if same_target else 2)
    assert compiled == expected, (f"first process: {compiled} compile(s) for {loaded0} kernel(s) per device "
                                  f"(targets {first['targets']}): want {expected}\n{tables}")
    assert _sum(first["steps"], "disk_hits") == 0, f"first process: disk hits with an empty cache\n{tables}"
    # Second process: nothing compiled; each binary read from disk once (per target).
    assert second["totals"]["compiles"] == 0, f"second process compiled with a warm disk cache\n{tables}"
    assert _sum(second["steps"], "disk_hits") == compiled, \
        f"second process: {_sum(second['steps'], 'disk_hits')} disk hit(s), want {compiled}\n{tables}"
    assert _sum(second["steps"], "module_loads") == _sum(first["steps"], "module_loads")


# ---------------------------------------------------------------------------
# d. a handle is never used on the wrong device

# (data's device, current device): every combination, interleaved.
INTERLEAVE = [(1, 0), (0, 1), (1, 1), (0, 0), (1, 0), (0, 1), (1, 1), (0, 0)]


@pytest.mark.parametrize("kind", [kind_param(kind) for kind in NORM_KINDS])
def test_handles_stay_on_their_device(kind, record_property):
    prepared = {}
    for d in (0, 1):
        leaves, grads_out = make_inputs(kind, BF16, FP32, False, f"cuda:{d}", seed=99)
        prepared[d] = leaves, grads_out, reference(kind, leaves, grads_out)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    infos = [_C.device_info(d) for d in (0, 1)]
    assert [i["ordinal"] for i in infos] == [0, 1], infos
    record_property("device_info", json.dumps(infos))

    _C.clear_memory_cache()  # no handle loaded anywhere
    _C.reset_counters()
    loads, outs = [], {}
    for step, (d, current) in enumerate(INTERLEAVE):
        leaves, grads_out, want = prepared[d]
        before = _C.counters()["module_loads"]
        with torch.cuda.device(current):
            got = run_autograd(kind, leaves, grads_out)
            assert torch.cuda.current_device() == current
        torch.cuda.synchronize(d)
        loads.append(_C.counters()["module_loads"] - before)
        check_all(f"step {step}: data on cuda:{d}, current device cuda:{current}", got, want, M, f"cuda:{d}")
        outs.setdefault(d, got["out"].detach().cpu())
    trace = ", ".join(f"cuda:{d} (current {c}): {n} load(s)" for (d, c), n in zip(INTERLEAVE, loads))
    record_property("module_loads_per_step", trace)
    assert loads[0] >= 1 and loads[1] == loads[0], f"each device loads its own handles once: {trace}"
    assert sum(loads[2:]) == 0, f"no more loads once both devices have their handles: {trace}"
    assert torch.equal(outs[0], outs[1]), "same inputs, same binary: both devices must give the same bits"

    # Inputs on two devices are refused with a clear error, never launched with one device's handle.
    x1 = prepared[1][0][0].detach()
    w0 = prepared[0][0][1].detach()
    with pytest.raises((ValueError, RuntimeError)) as info:
        NORM_KINDS[kind].call(x1, w0, prepared[0][0][2], None)
    message = str(info.value)
    assert "cuda:0" in message and "cuda:1" in message, f"the error should name both devices: {message}"
