"""RMSNorm on the GPU: the correctness grid of DESIGN §5.

x dtype {bf16, fp16, fp32} x weight dtype {same, fp32, none} x M {1, 199, 8192} x
N {192 ... 262144}, eager, forward and backward through autograd (grads of x and
weight), against a float64 reference computed from the same rounded inputs; and a
subset of it under torch.compile(fullgraph=True, dynamic=True). The feature tests
(bias, residual, per-head, strides, alignment, streams, graphs, determinism, guard
regions) are in test_rmsnorm_gpu_features.py, which imports the helpers below.

Every test is marked `gpu` and skips, with the reason, where no CUDA GPU is usable;
NORMKIT_TEST_REQUIRE_GPU=1 (set by scripts/gpu_check.sh) makes that an error
instead, so a GPU run cannot pass by skipping. A failing `import normkit.torch`
is an error everywhere.
"""
import contextlib
import math
import os
import zlib

import pytest

torch = pytest.importorskip("torch", reason="the RMSNorm GPU tests drive CUDA memory through PyTorch")

from normkit import _C  # noqa: E402
from normkit.torch import rmsnorm  # noqa: E402


def _gpu_missing():
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to PyTorch"
    try:
        count = _C.device_count()
    except _C.NormkitError as e:
        return f"normkit finds no usable GPU: {e}"
    return None if count > 0 else "normkit: the CUDA driver reports 0 devices"


GPU_MISSING = _gpu_missing()
if GPU_MISSING and os.environ.get("NORMKIT_TEST_REQUIRE_GPU") == "1":
    raise RuntimeError(f"NORMKIT_TEST_REQUIRE_GPU=1 but {GPU_MISSING}")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_MISSING is not None, reason=str(GPU_MISSING))]

DEVICE = "cuda"
EPS = 1e-6
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
NAMES = {BF16: "bf16", FP16: "fp16", FP32: "fp32", None: "none"}

# ---------------------------------------------------------------------------
# Tolerances. A result `got` passes where |got - want| <= ATOL + RTOL * |want|, with
# `want` the float64 reference rounded to got's dtype (the kernel rounds once, at
# the store).
#  16-bit: 2 ulps at the bottom of a binade (bf16 2 * 2^-7, fp16 2 * 2^-10): one for
#    the kernel's fp32 value landing across a rounding boundary from the exact one,
#    one for the reference's own double rounding (torch casts float64 -> fp32 -> 16-bit).
#  fp32: the kernel sums N squares in fp32 and takes rsqrt: ~1e-6 relative at
#    N = 262144; 1e-5 leaves a 10x margin.
#  ATOL covers values near zero, where x*rstd*w and dx's cancellation (g - xhat*c)
#    carry an fp32 absolute error of ~1e-7 times the O(1) terms.
RTOL = {BF16: 2.0**-6, FP16: 2.0**-9, FP32: 1e-5}
ATOL = {BF16: 1e-5, FP16: 1e-5, FP32: 1e-5}
# dw and db are sums over rows: their fp32 accumulation error grows with the number
# of rows summed (at worst ~rows * 2^-24 * mean|term|; ~sqrt(rows) for random
# rounding), so they get an extra absolute allowance of DW_ATOL * sqrt(rows).
DW_ATOL = 2e-5

# The environment of the runtime: a developer's NORMKIT_* settings (run-only mode,
# forced arch, dump dirs...) must not change what these tests see.
_KEEP_ENV = ("NORMKIT_TEST_", "NORMKIT_COMMIT")


@pytest.fixture(scope="module")
def _rmsnorm_kernel_cache(tmp_path_factory):
    directory = tmp_path_factory.getbasetemp() / "normkit-rmsnorm-cache"
    directory.mkdir(exist_ok=True)
    mp = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("NORMKIT_") and not name.startswith(_KEEP_ENV):
            mp.delenv(name)
    mp.setenv("NORMKIT_CACHE_DIR", str(directory))
    _C.reload_config()
    yield directory
    mp.undo()
    _C.reload_config()
    _C.clear_memory_cache()
    _C.reset_counters()


@pytest.fixture(autouse=True)
def cache_dir(_rmsnorm_kernel_cache):
    """Overrides conftest.py's per-test empty cache and cleared memory cache.

    Kernels are JIT-compiled per (N, dtypes, features); recompiling them for every
    test would cost minutes. These tests check numbers, not the cache, so both
    test_rmsnorm_gpu*.py modules share one directory (and the kernels stay loaded
    within a module).
    """
    return _rmsnorm_kernel_cache


@pytest.fixture(autouse=True)
def _seed(request):
    # Fresh random data per test, reproducible from the test's id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


# ---------------------------------------------------------------------------
# Inputs, reference, comparison


def rand(shape, dtype, scale=1.0):
    """Random normal data in `dtype` (never zeros: zeros hide missing terms)."""
    t = torch.randn(shape, device=DEVICE, dtype=dtype)
    return t.mul_(scale) if scale != 1.0 else t


@contextlib.contextmanager
def plan_switch(name, value):
    """A NORMKIT_ plan switch set for the body, the config reloaded on the way in and out."""
    before = os.environ.get(name)
    os.environ[name] = value
    _C.reload_config()
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before
        _C.reload_config()


def check_both_plans(switch, call, check_outputs, poison=()):
    """call() with the plan switch `switch` on, then off, twice each (outputs
    poisoned first): check_outputs(label, outputs of the first call) for each, the
    two calls' outputs bitwise equal, and the two plans' outputs equal (None outputs
    skipped)."""
    first_runs = []
    for value in ("1", "0"):
        label = f"{switch}={value}: "
        runs = []
        with plan_switch(switch, value):
            for _ in range(2):
                poison_next_allocations(*poison)
                runs.append(call())
        check_outputs(label, runs[0])
        for i, (first, again) in enumerate(zip(runs[0], runs[1])):
            if first is not None:
                assert torch.equal(first, again), label + f"output {i} of run 2 differs from run 1 (bitwise)"
        first_runs.append(runs[0])
    for i, (on, off) in enumerate(zip(*first_runs)):
        if on is not None:
            assert torch.equal(on, off), f"{switch}: output {i} differs between the two plans"


def poison_next_allocations(*specs):
    """Makes the memory the next allocations of these (shape, dtype)s will get NaN.

    PyTorch's caching allocator is deterministic: blocks of the same sizes freed in
    this order are what the same requests get back next. So an output element a
    kernel forgets to write reads NaN instead of stale, plausible data. Best effort:
    if the library allocates differently the test only loses that edge; it can
    never fail because of it.
    """
    blocks = [torch.empty(shape, dtype=dtype, device=DEVICE).fill_(float("nan")) for shape, dtype in specs]
    del blocks


def ref_forward(x, weight=None, bias=None, residual=None, *, residual_dtype=None, weight_offset=0.0):
    """float64 forward of DESIGN §3. Returns (out, residual_out, h_bwd, rstd).

    h is x + residual in fp32, exactly as specified, so residual_out (h in its
    dtype) is exact. h_bwd is what the backward normalizes: residual_out as stored
    when a residual was added, else x (DESIGN §3, rmsnorm.hpp).
    """
    h32 = x.float() if residual is None else x.float() + residual.float()
    res_dtype = residual_dtype or (residual.dtype if residual is not None else x.dtype)
    residual_out = h32.to(res_dtype)
    h = h32.double()
    rstd = torch.rsqrt(h.square().mean(-1, keepdim=True) + EPS)
    y = h * rstd
    if weight is not None:
        y = y * (weight.double() + weight_offset)
    if bias is not None:
        y = y + bias.double()
    h_bwd = x if residual is None else residual_out
    return y, residual_out, h_bwd, rstd.squeeze(-1)


def ref_backward(h, weight, dout, rstd, *, weight_offset=0.0, dresidual_out=None, param_shape=None):
    """float64 backward of DESIGN §3. Returns (dx, dw, db); dw is None without weight.

    rstd: float64, shape h.shape[:-1]. dw and db are summed over every leading
    dimension except the head one in per-head mode (param_shape (H, N)).
    """
    r = rstd.unsqueeze(-1)
    xhat = h.double() * r
    dy = dout.double()
    g = dy * (weight.double() + weight_offset) if weight is not None else dy
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    if dresidual_out is not None:
        dx = dx + dresidual_out.double()
    if param_shape is None:
        param_shape = weight.shape if weight is not None else dout.shape[-1:]
    dw = (dy * xhat).reshape(-1, *param_shape).sum(0) if weight is not None else None
    db = dy.reshape(-1, *param_shape).sum(0)
    return dx, dw, db


def _fail(name, got, want64, bad, err, rtol, atol):
    count = int(bad.sum())
    first = int(torch.argmax(bad.reshape(-1).to(torch.uint8)))
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), tuple(got.shape)))
    nans = int(torch.isnan(got).sum()) if got.is_floating_point() else 0
    worst = float(torch.nan_to_num(err, nan=math.inf).max())
    pytest.fail(f"{name}: {count} of {got.numel()} elements outside rtol={rtol:g} atol={atol:g} "
                f"({NAMES.get(got.dtype, got.dtype)}, shape {tuple(got.shape)}); first at {where}: "
                f"got {got[where].item()!r}, want {want64[where].item()!r}; max error {worst:g}; "
                f"NaN in result: {nans}", pytrace=False)


def check(name, got, want, *, atol_extra=0.0):
    """got (any float dtype) against a float64 reference, with got's dtype tolerances."""
    assert got is not None, f"{name}: missing (None)"
    assert tuple(got.shape) == tuple(want.shape), f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    want64 = want.to(got.dtype).double()
    rtol, atol = RTOL[got.dtype], ATOL[got.dtype] + atol_extra
    err = (got.double() - want64).abs_()
    bad = ~(err <= want64.abs().mul_(rtol).add_(atol))  # NaN counts as bad
    if bool(bad.any()):
        _fail(name, got, want64, bad, err, rtol, atol)


def check_exact(name, got, want):
    """Bit-exact comparison (residual_out is fully specified: fp32 sum, one rounding)."""
    assert got is not None, f"{name}: missing (None)"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, want {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    if not torch.equal(got, want):
        bad = got != want
        _fail(name, got, want.double(), bad, (got.double() - want.double()).abs(), 0.0, 0.0)


def fwd_bwd_check(fn, x, weight=None, bias=None, residual=None, *, out_dtype=None, residual_dtype=None,
                  weight_offset=0.0, prenorm=False, label=""):
    """Runs fn (rmsnorm, a compiled rmsnorm, a module) forward, then backward through
    autograd, and checks out, residual_out (prenorm) and the gradient of every input
    that requires grad (views included) against the float64 reference."""
    tag = f"{label}: " if label else ""
    y, residual_out_ref, h_bwd, rstd = ref_forward(x.detach(), _d(weight), _d(bias), _d(residual),
                                                   residual_dtype=residual_dtype, weight_offset=weight_offset)
    out_dt = out_dtype or x.dtype
    poison_next_allocations((x.shape, out_dt), (x.shape, residual_out_ref.dtype), (x.shape[:-1], FP32))
    result = fn(x, weight, bias=bias, residual=residual, out_dtype=out_dtype, residual_dtype=residual_dtype,
                eps=EPS, prenorm=prenorm, weight_offset=weight_offset)
    out, res_out = result if prenorm else (result, None)
    assert out.dtype == out_dt, f"{tag}out dtype {out.dtype}, want {out_dt}"
    check(f"{tag}out", out, y)
    if prenorm:
        check_exact(f"{tag}residual_out", res_out, residual_out_ref)
    backward_check(tag, out, res_out, x, weight, bias, residual,
                   lambda dout, dres, param_shape: ref_backward(h_bwd, _d(weight), dout, rstd,
                                                                weight_offset=weight_offset, dresidual_out=dres,
                                                                param_shape=param_shape))


def backward_check(tag, out, res_out, x, weight, bias, residual, ref_grads):
    """The gradient of every input that requires grad (views included), through autograd
    from random gradients of out (and of res_out unless None), against
    ref_grads(dout, dresidual_out, param_shape) -> float64 (dx, dw, db).
    test_layernorm_gpu.py uses it with LayerNorm's reference."""
    inputs = [(n, t) for n, t in (("x", x), ("weight", weight), ("bias", bias), ("residual", residual))
              if t is not None and t.requires_grad]
    if not inputs:
        return
    dout = rand(out.shape, out.dtype)
    outputs, grads_out, dres = [out], [dout], None
    if res_out is not None:
        dres = rand(res_out.shape, res_out.dtype)
        outputs.append(res_out)
        grads_out.append(dres)
    poison_next_allocations(*[(t.shape, t.dtype) for _, t in inputs])
    grads = torch.autograd.grad(outputs, [t for _, t in inputs], grads_out)
    param = weight if weight is not None else bias
    dx, dw, db = ref_grads(dout, dres, param.shape if param is not None else None)
    rows = x.numel() // (param.numel() if param is not None else x.shape[-1])
    want = {"x": dx, "residual": dx, "weight": dw, "bias": db}
    for (name, _), g in zip(inputs, grads):
        extra = DW_ATOL * math.sqrt(rows) if name in ("weight", "bias") else 0.0
        check(f"{tag}d{name}", g, want[name], atol_extra=extra)


def _d(t):
    return None if t is None else t.detach()


# ---------------------------------------------------------------------------
# The grid

GRID_M = (1, 199, 8192)
GRID_N = (192, 256, 760, 1024, 1128, 4096, 32768, 131072, 262144)
# M*N is capped at 2^28 elements: 8192 x 131072 would be 2^30 (2 GiB of bf16 per
# tensor, 8 GiB per float64 reference tensor, and seconds per test). So M=8192 runs
# as M=2048 for N=131072 and as M=1024 for N=262144 (ids say "cap"); the largest
# tests still move 0.5-1 GiB per tensor.
MAX_ELEMENTS = 1 << 28


def _grid_dtypes():
    pairs = []
    for x in (BF16, FP16, FP32):
        for w in (x, FP32, None):  # "same" and fp32 coincide for fp32 x: once
            if (x, w) not in pairs:
                pairs.append((x, w))
    return pairs


def _grid_params():
    params = []
    for x, w in _grid_dtypes():
        for n in GRID_N:
            for m in GRID_M:
                rows = min(m, MAX_ELEMENTS // n)
                mid = f"M{m}" if rows == m else f"M{rows}cap"
                params.append(pytest.param(x, w, rows, n, id=f"{NAMES[x]}-w{NAMES[w]}-{mid}-N{n}"))
    return params


@pytest.mark.parametrize("xdt,wdt,m,n", _grid_params())
def test_grid_eager(xdt, wdt, m, n):
    x = rand((m, n), xdt).requires_grad_()
    w = rand((n,), wdt).requires_grad_() if wdt is not None else None
    fwd_bwd_check(rmsnorm, x, w)


@pytest.fixture
def fresh_dynamo():
    """An empty torch.compile cache, and an error (not a silent eager fallback) if
    the recompile limit is hit, so a passing test really ran compiled code."""
    torch._dynamo.reset()
    settings = {"recompile_limit": 32, "fail_on_recompile_limit_hit": True}
    settings = {k: v for k, v in settings.items() if hasattr(torch._dynamo.config, k)}
    with torch._dynamo.config.patch(**settings):
        yield
    torch._dynamo.reset()


# torch.compile: compiling is seconds per graph, so a subset of the grid. One compiled
# function per dtype pair (dynamo specializes on dtype and on weight being None)
# runs every shape below with dynamic shapes (M=1 gets its own specialization). The
# shapes are grid shapes, so the kernels are already compiled by the eager grid.
COMPILE_DTYPES = [(BF16, BF16), (BF16, FP32), (FP16, FP32), (FP32, FP32), (BF16, None)]
COMPILE_SHAPES = ((1, 4096), (199, 760), (8192, 1024), (199, 32768), (1024, 262144))


@pytest.mark.parametrize("xdt,wdt", [pytest.param(x, w, id=f"{NAMES[x]}-w{NAMES[w]}") for x, w in COMPILE_DTYPES])
def test_grid_compiled(fresh_dynamo, xdt, wdt):
    compiled = torch.compile(rmsnorm, fullgraph=True, dynamic=True)
    for m, n in COMPILE_SHAPES:
        x = rand((m, n), xdt).requires_grad_()
        w = rand((n,), wdt).requires_grad_() if wdt is not None else None
        fwd_bwd_check(compiled, x, w, label=f"compiled M{m} N{n}")
