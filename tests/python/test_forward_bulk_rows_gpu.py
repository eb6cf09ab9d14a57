"""NORMKIT_FORWARD_PLAN's row=bulk on the GPU: forward rows whose CTA slices (of x and
the residual) arrive by cp.async.bulk in a ring of shared-memory stages
(norm_fwd_bulk_kernel, RowPlan::bulk_stages) compute what the float64 reference does,
with the tolerances of the planned kernels, outputs poisoned first: RMSNorm and
LayerNorm, over clusters of 1 to 16 CTAs, slices that leave threads without a last
vector (fp32 N=20000), several stage counts (one or two CTAs per SM; one stage), enough rows that
every CTA walks its ring round several times; weights of x's dtype, of another, and
none; per-head and 8-byte-aligned weights (read from global memory, not the shared
slice); a LayerNorm row mean far from zero (the slices' moments combined); the same
bits run to run; with a residual, residual_out bit-exact, and the in-place fused add.
Which shapes the override plans this way is tests/cpp/test_forward_bulk_rows.cpp's
(BulkRowsPlansTheGpuTestShapes).
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm_fwd, rmsnorm_fwd  # noqa: E402
from test_forward_smem_row_gpu import forward_check  # noqa: E402
from test_layernorm_gpu import _fused, _fused_ref, ln_ref_forward  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, FP16, FP32, EPS, _seed, check, check_exact, plan_switch, poison_next_allocations, pytestmark, rand,
    ref_forward)

# (x dtype, weight dtype or None, out dtype, M, N): the clusters of 16, 4, 8 and 1 CTAs,
# with 2 to 8 stages (tests/cpp/test_forward_bulk_rows.cpp lists the same shapes).
_SHAPES = [
    pytest.param(BF16, BF16, BF16, 200, 262144, id="bf16-N262144-c16"),
    pytest.param(FP32, FP32, FP32, 100, 262144, id="fp32-N262144-c16"),
    pytest.param(FP16, FP32, FP32, 150, 65536, id="fp16-wfp32-ofp32-N65536-c4"),
    pytest.param(BF16, BF16, BF16, 64, 200000, id="bf16-N200000-c8"),
    pytest.param(FP32, BF16, BF16, 400, 20000, id="fp32-wbf16-obf16-N20000-partial"),
    pytest.param(BF16, None, BF16, 3000, 2048, id="bf16-noweight-N2048-c1"),
]
# stages=1: the next row's copy issued into the stage the CTA has just read.
OVERRIDES = ["row=bulk", "row=bulk,minb=2", "row=bulk,cta=1024", "row=bulk,stages=1"]
# Every pairing but two under minb=2, whose plans are not the ring: fp32 N=262144 (its
# 64 KB slices leave no two stages for two CTAs an SM) and bf16 N=200000 (seven vectors a
# thread, more registers than two CTAs an SM leave).
CASES = [pytest.param(o, *s.values, id=f"{o}-{s.id}") for o in OVERRIDES for s in _SHAPES
         if not (o == "row=bulk,minb=2" and (s.values[0], s.values[4]) in ((FP32, 262144), (BF16, 200000)))]


def _run(op, x, w, b, out_dtype):
    if op == "rmsnorm":
        out, _, rstd = rmsnorm_fwd(x, w, bias=b, out_dtype=out_dtype, eps=EPS, store_rstd=True)
        return out, None, rstd
    out, _, mean, rstd = layernorm_fwd(x, w, b, out_dtype=out_dtype, eps=EPS, store_rstd=True, store_mean=True)
    return out, mean, rstd


def _check_forward(label, op, x, w, b, out_dtype):
    m = x.shape[:-1]
    poison_next_allocations((tuple(x.shape), out_dtype), (tuple(m), FP32), (tuple(m), FP32))
    out, mean, rstd = _run(op, x, w, b, out_dtype)
    if op == "rmsnorm":
        y, _, _, rstd_ref = ref_forward(x, w, b)
    else:
        y, _, _, mean_ref, rstd_ref = ln_ref_forward(x, w, b)
        check(f"{label}: mean", mean, mean_ref.reshape(mean.shape))
    check(f"{label}: out", out, y)
    check(f"{label}: rstd", rstd, rstd_ref.reshape(rstd.shape))
    again = _run(op, x, w, b, out_dtype)
    for name, first, second in zip(("out", "mean", "rstd"), (out, mean, rstd), again):
        if first is not None:
            assert torch.equal(first, second), f"{label}: {name} of a second call differs (bitwise)"


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,xdt,wdt,odt,m,n", CASES)
def test_forward_bulk_rows(override, op, xdt, wdt, odt, m, n):
    x = rand((m, n), xdt)
    w = rand((n,), wdt) if wdt is not None else None
    b = rand((n,), wdt) if (wdt is not None and op == "layernorm") else None
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        _check_forward(f"{override} {op}", op, x, w, b, odt)


# The plans' own rings in several CTAs an SM or in one stage (bulk_rows_measured_ctas):
# RMSNorm without a residual, bf16 at N=131072 (four 128-thread CTAs an SM) and 262144 (two
# of 256), a weight of either 16-bit dtype, fp32 at N=65536 (two of 256); LayerNorm with its
# bias over 16 CTAs, the weight and bias slices in shared memory, bf16 N=131072 in three
# 128-thread CTAs an SM, the others in one stage: bf16 N=262144 and fp32 N=131072 in two
# of 256, fp32 N=262144 in one of 512 (with a residual:
# test_forward_bulk_rows_residual_own_plan_layernorm); rows enough that every cluster
# walks its ring round several times and the last ones a row short.
@pytest.mark.parametrize("op,xdt,wdt,m,n", [
    pytest.param("rmsnorm", BF16, BF16, 203, 131072, id="rms-bf16-N131072"),
    pytest.param("rmsnorm", BF16, FP16, 203, 131072, id="rms-bf16-wfp16-N131072"),
    pytest.param("rmsnorm", BF16, BF16, 97, 262144, id="rms-bf16-N262144"),
    pytest.param("rmsnorm", BF16, FP16, 97, 262144, id="rms-bf16-wfp16-N262144"),
    pytest.param("rmsnorm", FP32, FP32, 301, 65536, id="rms-fp32-N65536"),
    pytest.param("layernorm", BF16, BF16, 203, 131072, id="ln-bf16-N131072"),
    pytest.param("layernorm", BF16, FP16, 203, 131072, id="ln-bf16-wfp16-N131072"),
    pytest.param("layernorm", BF16, BF16, 97, 262144, id="ln-bf16-N262144"),
    pytest.param("layernorm", FP32, FP32, 131, 131072, id="ln-fp32-N131072"),
    pytest.param("layernorm", FP32, FP32, 67, 262144, id="ln-fp32-N262144"),
])
def test_forward_bulk_rows_own_plan_several_ctas(op, xdt, wdt, m, n):
    x = rand((m, n), xdt)
    w = rand((n,), wdt)
    b = rand((n,), wdt) if op == "layernorm" else None
    with plan_switch("NORMKIT_FORWARD_PLAN", ""):
        _check_forward("own plan", op, x, w, b, xdt)


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_forward_bulk_rows_per_head_weights(op):
    # weight (H, D) with x (B, S, H, D): rows of several heads, parameters read from global.
    x = rand((3, 40, 4, 16384), BF16)
    w, b = rand((4, 16384), BF16), rand((4, 16384), BF16) if op == "layernorm" else None
    with plan_switch("NORMKIT_FORWARD_PLAN", "row=bulk"):
        _check_forward(f"per-head {op}", op, x, w, b, BF16)


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("n", [65536, 20000])
def test_forward_bulk_rows_weight_not_16_byte_aligned(op, n):
    # fp32 rows take 4-element vectors, so a bf16 weight needs 8-byte alignment only:
    # a view 4 elements into its storage keeps the plan but not the shared-memory slice.
    # N=20000: slices that leave threads without a last vector, whose parameters the
    # epilogue loads ahead of the stores only where the thread owns the vector.
    x = rand((120, n), FP32)
    w = rand((n + 8,), BF16)[4:n + 4]
    b = rand((n + 8,), BF16)[4:n + 4] if op == "layernorm" else None
    assert w.data_ptr() % 16 == 8
    with plan_switch("NORMKIT_FORWARD_PLAN", "row=bulk"):
        _check_forward(f"8-byte weight {op}", op, x, w, b, FP32)


# Rings whose weight and bias slices do not fit beside their stages, so the epilogue
# reads them from global memory, items ahead of its stores (RingParams::for_each_item):
# bf16 rows with a bias in four 128-thread CTAs an SM over 16 (N=131072) and two of 256
# over 16 (N=262144); rows enough that every cluster walks its ring round several times.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,m,n", [
    pytest.param("row=bulk,cta=128,minb=4,cluster=16", 203, 131072, id="m4c16-N131072"),
    pytest.param("row=bulk,cta=256,minb=2,cluster=16", 97, 262144, id="m2c16-N262144"),
])
def test_forward_bulk_rows_params_from_global_several_ctas(op, override, m, n):
    x = rand((m, n), BF16)
    w, b = rand((n,), BF16), rand((n,), BF16)
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        _check_forward(f"{override} {op} with a bias", op, x, w, b, BF16)


# Rows of mean 1000 under row=bulk: test_layernorm_gpu.py's test_variance_is_stable_far_from_zero.


# With a residual: (x dtype, residual dtype, M, N); the stage holds both slices.
RESIDUAL_SHAPES = [
    pytest.param(BF16, BF16, 96, 262144, id="bf16-rbf16-N262144-c16"),
    pytest.param(BF16, FP32, 120, 65536, id="bf16-rfp32-N65536"),
    pytest.param(FP32, FP32, 300, 32768, id="fp32-rfp32-N32768"),
    pytest.param(BF16, BF16, 2000, 4096, id="bf16-rbf16-N4096-c1"),
]


# Under minb=2 but N=262144, whose 64 KB stages leave no two for two CTAs an SM.
RESIDUAL_CASES = [pytest.param(o, *s.values, id=f"{o}-{s.id}") for o in ("row=bulk", "row=bulk,minb=2")
                  for s in RESIDUAL_SHAPES if not (o == "row=bulk,minb=2" and s.values[3] == 262144)]


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,xdt,rdt,m,n", RESIDUAL_CASES)
def test_forward_bulk_rows_residual(override, op, xdt, rdt, m, n):
    x, r = rand((m, n), xdt), rand((m, n), rdt)
    w, b = rand((n,), xdt), rand((n,), xdt)
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        forward_check(f"{override} {op}", op, x, w, b, r)


# The plan's own ring with a residual: LayerNorm bf16 N=131072 in two 256-thread CTAs an
# SM over 16, one stage (bulk_rows_measured_ctas).
def test_forward_bulk_rows_residual_own_plan_layernorm():
    n = 131072
    x, r = rand((131, n), BF16), rand((131, n), BF16)
    w, b = rand((n,), BF16), rand((n,), BF16)
    with plan_switch("NORMKIT_FORWARD_PLAN", ""):
        forward_check("own plan layernorm", "layernorm", x, w, b, r)


@pytest.mark.parametrize("kind", ["rms", "ln"])
@pytest.mark.parametrize("xdt,rdt,m,n", RESIDUAL_SHAPES)
def test_fused_add_in_place_bulk_rows(kind, xdt, rdt, m, n):
    # residual += x and x = norm(residual): each CTA reads its slices of a row into the
    # ring before it writes that row's slices, and reads ahead only other rows.
    x, residual = rand((m, n), xdt), rand((m, n), rdt)
    w, b = rand((n,), xdt), rand((n,), xdt) if kind == "ln" else None
    y, res_ref = _fused_ref(kind, x, residual, w, b, 0.0)
    with plan_switch("NORMKIT_FORWARD_PLAN", "row=bulk"), torch.no_grad():
        assert _fused(kind, x, residual, w, b, 0.0) is None
    check_exact(f"{kind}: residual (in place)", residual, res_ref)
    check(f"{kind}: x (in place)", x, y)
