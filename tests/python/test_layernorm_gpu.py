"""LayerNorm and the in-place fused adds on the GPU: the RMSNorm grid of DESIGN §5
(test_rmsnorm_gpu.py) applied to LayerNorm, its features, bitwise-deterministic
backward, and fused_add_rmsnorm / fused_add_layernorm (in place, same storage,
Gemma offset, CUDA-graph capture, torch.compile).

Tolerances, poisoning, marks and skips: test_rmsnorm_gpu.py. The reference is
float64 from the same rounded inputs; LayerNorm's rows are centred, so its fp32
error is that of RMSNorm on the centred row (plus the mean's, ~1e-7 relative).
"""
import pytest

torch = pytest.importorskip("torch", reason="the LayerNorm GPU tests drive CUDA memory through PyTorch")

from normkit.torch import (  # noqa: E402
    LayerNorm, fused_add_layernorm, fused_add_rmsnorm, layernorm, layernorm_bwd, layernorm_fwd, rmsnorm,
    rmsnorm_fwd)
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, COMPILE_DTYPES, COMPILE_SHAPES, DW_ATOL, EPS, FP16, FP32, NAMES, _d, _grid_params,
    _rmsnorm_kernel_cache, _seed, backward_check, cache_dir, check, check_both_plans, check_exact, fresh_dynamo,
    fwd_bwd_check, plan_switch, poison_next_allocations, pytestmark, rand, ref_forward)


def ln_ref_forward(x, weight=None, bias=None, residual=None, *, residual_dtype=None):
    """float64 LayerNorm forward. Returns (out, residual_out, h_bwd, mean, rstd)."""
    h32 = x.float() if residual is None else x.float() + residual.float()
    res_dtype = residual_dtype or (residual.dtype if residual is not None else x.dtype)
    residual_out = h32.to(res_dtype)
    h = h32.double()
    var, mean = torch.var_mean(h, dim=-1, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + EPS)
    y = (h - mean) * rstd
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    h_bwd = x if residual is None else residual_out
    return y, residual_out, h_bwd, mean.squeeze(-1), rstd.squeeze(-1)


def ln_ref_backward(h, weight, dout, mean, rstd, *, dresidual_out=None, param_shape=None):
    """float64 LayerNorm backward. Returns (dx, dw, db); dw is None without weight."""
    xhat = (h.double() - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
    dy = dout.double()
    g = dy * weight.double() if weight is not None else dy
    dx = rstd.unsqueeze(-1) * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    if dresidual_out is not None:
        dx = dx + dresidual_out.double()
    if param_shape is None:
        param_shape = weight.shape if weight is not None else dout.shape[-1:]
    dw = (dy * xhat).reshape(-1, *param_shape).sum(0) if weight is not None else None
    return dx, dw, dy.reshape(-1, *param_shape).sum(0)


def ln_check(fn, x, weight=None, bias=None, residual=None, *, out_dtype=None, residual_dtype=None, prenorm=False,
             label=""):
    """fn (layernorm, compiled, module-like) forward and backward through autograd against float64."""
    tag = f"{label}: " if label else ""
    y, res_ref, h_bwd, mean, rstd = ln_ref_forward(x.detach(), _d(weight), _d(bias), _d(residual),
                                                   residual_dtype=residual_dtype)
    poison_next_allocations((x.shape, out_dtype or x.dtype), (x.shape, res_ref.dtype), (x.shape[:-1], FP32),
                            (x.shape[:-1], FP32))
    result = fn(x, weight, bias, residual, out_dtype=out_dtype, residual_dtype=residual_dtype, eps=EPS,
                prenorm=prenorm)
    out, res_out = result if prenorm else (result, None)
    check(f"{tag}out", out, y)
    if prenorm:
        check_exact(f"{tag}residual_out", res_out, res_ref)
    backward_check(tag, out, res_out, x, weight, bias, residual,
                   lambda dout, dres, param_shape: ln_ref_backward(h_bwd, _d(weight), dout, mean, rstd,
                                                                   dresidual_out=dres, param_shape=param_shape))


# ---------------------------------------------------------------------------
# The grid (test_rmsnorm_gpu.py's), weight and bias in the weight dtype.


@pytest.mark.parametrize("xdt,wdt,m,n", _grid_params())
def test_grid_eager(xdt, wdt, m, n):
    x = rand((m, n), xdt).requires_grad_()
    w = rand((n,), wdt).requires_grad_() if wdt is not None else None
    b = rand((n,), wdt).requires_grad_() if wdt is not None else None
    ln_check(layernorm, x, w, b)


@pytest.mark.parametrize("xdt,wdt", [pytest.param(x, w, id=f"{NAMES[x]}-w{NAMES[w]}") for x, w in COMPILE_DTYPES])
def test_grid_compiled(fresh_dynamo, xdt, wdt):
    compiled = torch.compile(layernorm, fullgraph=True, dynamic=True)
    for m, n in COMPILE_SHAPES:
        x = rand((m, n), xdt).requires_grad_()
        w = rand((n,), wdt).requires_grad_() if wdt is not None else None
        ln_check(compiled, x, w, w.detach().clone().requires_grad_() if w is not None else None,
                 label=f"compiled M{m} N{n}")


@pytest.mark.parametrize("plan", ["", "row=bulk"], ids=["own-plan", "row=bulk"])
@pytest.mark.parametrize("n", [4096, 65536, 262144], ids=["N4096", "N65536-cluster", "N262144-cluster"])
def test_variance_is_stable_far_from_zero(n, plan):
    # Rows of mean 1000 and spread 1 in fp32: E[h^2] - mean^2 keeps about one bit of
    # the variance there; the kernel's two passes over the register-resident row
    # (the mean, then squared deviations around it) must give mean and rstd as
    # float64 does, and so the output. row=bulk: each CTA's slice mean (summed
    # around the slice's first element) and M2, combined over the cluster.
    m = 64
    x = (1000.0 + torch.randn((m, n), device="cuda", dtype=torch.float64)).to(FP32)
    with plan_switch("NORMKIT_FORWARD_PLAN", plan):
        out, _, mean, rstd = layernorm_fwd(x, None, eps=EPS, store_rstd=True, store_mean=True)
    y, _, _, mean_ref, rstd_ref = ln_ref_forward(x)
    assert torch.allclose(mean.double(), mean_ref, rtol=1e-6, atol=0), "mean"
    assert torch.allclose(rstd.double(), rstd_ref, rtol=2e-4, atol=0), \
        f"rstd off by up to {((rstd.double() - rstd_ref) / rstd_ref).abs().max().item():.2e} (relative)"
    # The output cannot be closer than the fp32 mean allows: the float64 mean is
    # rounded to a step of ulp(1000) = 2^-14 there, and each step shifts every
    # output by ~2^-14 * rstd. Eight steps are allowed for the rounding of the fp32
    # row sum (the kernel's summation order, emulated in numpy at these shapes, is
    # off by up to ~2 steps; the E[h^2] - mean^2 form misses by whole units).
    ulp_of_mean = 2.0 ** -14
    check("out", out, y, atol_extra=8 * ulp_of_mean * rstd_ref.max().item())


@pytest.mark.parametrize("dt", [FP32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n,plan", [(1024, ""), (65536, ""), (262144, ""), (65536, "row=bulk"), (262144, "row=bulk"),
                                    (262144, "row=group")],
                         ids=["N1024-one-cta", "N65536-cluster", "N262144-cluster", "N65536-bulk", "N262144-bulk",
                              "N262144-group"])
def test_outlier_first_column(n, dt, plan):
    # Clustered rows take their statistics from one reduction around h[:, 0]
    # (shifted_moments.cuh), row=bulk's and row=group's CTAs each around their
    # slice's first column; where that column is an outlier the guard fails and the
    # sums are taken again around the mean found. Odd rows here have an outlier every
    # 1024 columns (the first column of every slice the plans cut), even rows none:
    # all must be right (one-CTA rows, two passes, too), and an even row's bits
    # must not depend on its neighbours.
    m = 16
    x = rand((m, n), dt)
    x[1::2, ::1024] = 1e4
    with plan_switch("NORMKIT_FORWARD_PLAN", plan):
        out, _, mean, rstd = layernorm_fwd(x, None, eps=EPS, store_rstd=True, store_mean=True)
    y, _, _, mean_ref, rstd_ref = ln_ref_forward(x)
    check("out", out, y)
    assert torch.allclose(rstd.double(), rstd_ref, rtol=2e-5, atol=0), "rstd"
    assert torch.allclose(mean.double(), mean_ref, rtol=1e-5, atol=1e-6), "mean"
    calm = x.clone()
    calm[1::2] = rand((m // 2, n), dt)
    with plan_switch("NORMKIT_FORWARD_PLAN", plan):
        out_calm = layernorm_fwd(calm, None, eps=EPS)[0]
    assert torch.equal(out[0::2], out_calm[0::2]), "an even row's output changed with its neighbours"


# ---------------------------------------------------------------------------
# Features


@pytest.mark.parametrize("prenorm", [False, True], ids=["plain", "prenorm"])
@pytest.mark.parametrize("xdt,rdt,res_dt", [(BF16, BF16, None), (BF16, FP32, None), (FP16, FP16, FP32),
                                            (FP32, FP32, None)])
def test_residual_bias_out_dtype(xdt, rdt, res_dt, prenorm):
    x = rand((2, 99, 1128), xdt).requires_grad_()
    r = rand((2, 99, 1128), rdt).requires_grad_()
    w, b = rand((1128,), FP32).requires_grad_(), rand((1128,), BF16).requires_grad_()
    ln_check(layernorm, x, w, b, r, residual_dtype=res_dt, prenorm=prenorm)
    ln_check(layernorm, x.detach(), w.detach(), b.detach(), out_dtype=FP32 if xdt != FP32 else BF16)


@pytest.mark.parametrize("shape", [(3, 8, 128), (64, 4, 1000)])
def test_per_head(shape):
    x = rand(shape, BF16).requires_grad_()
    w = rand(shape[-2:], FP32).requires_grad_()
    b = rand(shape[-2:], FP32).requires_grad_()
    ln_check(layernorm, x, w, b)


@pytest.mark.parametrize("n", [1, 3, 127, 4097, 65537])
def test_strided_odd_and_unaligned_rows(n):
    base = rand((64, n + 9), BF16)
    x = base[:, 1:n + 1].requires_grad_()  # padded rows, pointer off 16-byte alignment
    ln_check(layernorm, x, rand((n,), FP32).requires_grad_(), rand((n,), BF16).requires_grad_())


def test_empty_rows():
    out, _, mean, rstd = layernorm_fwd(rand((0, 256), BF16), rand((256,), FP32), store_rstd=True, store_mean=True)
    assert out.shape == (0, 256) and mean.shape == (0,) and rstd.shape == (0,)


@pytest.mark.parametrize("xdt,wdt,m,n", [(BF16, FP32, 8192, 1024), (BF16, BF16, 199, 32768),
                                         (FP32, FP32, 4096, 4096), (BF16, FP32, 1024, 262144)],
                         ids=["bf16-wfp32-M8192-N1024", "bf16-wbf16-M199-N32768", "fp32-wfp32-M4096-N4096",
                              "bf16-wfp32-M1024-N262144"])
def test_backward_is_bitwise_deterministic(xdt, wdt, m, n):
    x, w, b, dout = rand((m, n), xdt), rand((n,), wdt), rand((n,), wdt), rand((m, n), xdt)
    _, _, mean, rstd = layernorm_fwd(x, w, b, eps=EPS, store_rstd=True, store_mean=True)
    runs = [layernorm_bwd(x, w, dout, mean, rstd, has_bias=True)[:3] for _ in range(5)]
    for i, run in enumerate(runs[1:], start=2):
        for name, first, again in zip(("dx", "dw", "db"), runs[0], run):
            assert torch.equal(first, again), f"{name} of run {i} differs from run 1 (bitwise)"
    _, _, _, mean_ref, rstd_ref = ln_ref_forward(x, w, b)
    check("mean", mean, mean_ref, atol_extra=1e-6)
    check("rstd", rstd, rstd_ref)
    dx_ref, dw_ref, db_ref = ln_ref_backward(x, w, dout, mean_ref, rstd_ref)
    check("dx", runs[0][0], dx_ref)
    check("dw", runs[0][1], dw_ref, atol_extra=DW_ATOL * m ** 0.5)
    check("db", runs[0][2], db_ref, atol_extra=DW_ATOL * m ** 0.5)


# 16-bit rows beyond N=131072 with 16-bit weight and bias take RowPlan::wait_dots
# (test_rmsnorm_plans.cpp): the dx kernel's CTAs exchange each row's chunk sums, four
# vectors a thread. M*N above 2^23, so not the plan of few rows. With
# NORMKIT_SYNC_TIMEOUT_US=0 the CTAs compute the sums from memory: the same bits.
@pytest.mark.parametrize("with_dro", [False, True], ids=["plain", "dresidual_out"])
def test_split_rows_wait_for_chunk_sums(with_dro, monkeypatch):
    import normkit
    m, n = 40, 262144
    x, w, b, dout = rand((m, n), BF16), rand((n,), BF16), rand((n,), BF16), rand((m, n), BF16)
    dro = rand((m, n), BF16) if with_dro else None
    _, _, mean, rstd = layernorm_fwd(x, w, b, eps=EPS, store_rstd=True, store_mean=True)

    def bwd():
        return layernorm_bwd(x, w, dout, mean, rstd, dresidual_out=dro, has_bias=True, has_residual=with_dro)[:3]

    normkit._C.reset_counters()
    waited = bwd()
    assert normkit._C.counters()["launches"] == 2, "the backward did not take the waiting kernel"
    monkeypatch.setenv("NORMKIT_SYNC_TIMEOUT_US", "0")
    normkit._C.reload_config()
    try:
        again = bwd()
    finally:
        monkeypatch.delenv("NORMKIT_SYNC_TIMEOUT_US")
        normkit._C.reload_config()
    for name, a, c in zip(("dx", "dw", "db"), waited, again):
        assert torch.equal(a, c), f"{name} differs on the timeout path"
    _, _, _, mean_ref, rstd_ref = ln_ref_forward(x, w, b)
    dx_ref, dw_ref, db_ref = ln_ref_backward(x, w, dout, mean_ref, rstd_ref, dresidual_out=dro)
    check("dx", waited[0], dx_ref)
    check("dw", waited[1], dw_ref, atol_extra=DW_ATOL * m ** 0.5)
    check("db", waited[2], db_ref, atol_extra=DW_ATOL * m ** 0.5)


# fp32 rows with a residual from N=32768: on sm_90 16 elements a thread over
# clusters of 2-16 CTAs (32 spilled under 1024 threads' registers), both norms, with
# bias and the statistics stored, against float64 (the in-place fused add of such
# rows: test_fused_add_in_place at N=262144).
@pytest.mark.parametrize("kind", ["rms", "ln"])
@pytest.mark.parametrize("m,n", [(64, 32768), (24, 131072), (8, 262144)])
def test_fp32_rows_with_residual_over_clusters(kind, m, n):
    x, r = rand((m, n), FP32), rand((m, n), FP32)
    w, b = rand((n,), FP32), rand((n,), FP32)
    check_forward("rmsnorm" if kind == "rms" else "layernorm", x, w, b, r, stats=True)


def check_forward(op, x, w, b, r, *, stats):
    """op's forward (rmsnorm_fwd or layernorm_fwd) on poisoned outputs against float64:
    out, residual_out (exact) when r is given, and mean / rstd when stats."""
    shape, rows = tuple(x.shape), tuple(x.shape[:-1])
    poison_next_allocations((shape, x.dtype), (shape, r.dtype if r is not None else x.dtype), (rows, FP32),
                            (rows, FP32))
    if op == "rmsnorm":
        y, res_ref, _, rstd_ref = ref_forward(x, w, b, r)
        out, res_out, rstd = rmsnorm_fwd(x, w, bias=b, residual=r, eps=EPS, store_rstd=stats)
    else:
        y, res_ref, _, mean_ref, rstd_ref = ln_ref_forward(x, w, b, r)
        out, res_out, mean, rstd = layernorm_fwd(x, w, b, residual=r, eps=EPS, store_rstd=stats, store_mean=stats)
        if stats:
            check("mean", mean, mean_ref, atol_extra=1e-6)
    check("out", out, y)
    if r is not None:
        check_exact("residual_out", res_out, res_ref)
    if stats:
        check("rstd", rstd, rstd_ref)
# Forward RMSNorm rows of 16-bit x and weight over a cluster of 1024-thread CTAs
# (N >= 65536) with a residual, or in calls of few rows: weight and bias read by the
# epilogue from shared memory (RowPlan.params_smem), against the float64 reference
# and against the plans before it (NORMKIT_PARAMS_SMEM=0) on the same inputs, which
# must agree exactly (the same arithmetic): the pipeline's persistent rows (few rows
# without a residual), rows with a residual, weight and bias, fp16, and per-head
# weights, which the pipeline reads from global memory (their head changes from row
# to row). Other rows without a residual take 64 elements a thread instead (the test
# below); LayerNorm and fp32 rows keep the global reads (slower with it).
@pytest.mark.parametrize("xdt,rdt,wdt,with_bias,heads,m,n", [
    (BF16, None, BF16, False, 1, 16, 65536), (BF16, FP32, BF16, False, 1, 70, 131072),
    (BF16, None, BF16, True, 1, 4, 262144), (FP16, FP16, FP16, False, 1, 64, 65536),
    (BF16, None, BF16, False, 4, 4, 65536), (BF16, BF16, BF16, True, 1, 40, 262144)],
    ids=["bf16-few-rows-N65536", "bf16-res-fp32-N131072", "bf16-bias-few-rows-N262144", "fp16-res-N65536",
         "bf16-4heads-few-rows-N65536", "bf16-res-bias-N262144"])
def test_forward_params_in_shared_memory(xdt, rdt, wdt, with_bias, heads, m, n):
    shape = (m, heads, n) if heads > 1 else (m, n)
    pshape = (heads, n) if heads > 1 else (n,)
    x, w = rand(shape, xdt), rand(pshape, wdt)
    r = rand(shape, rdt) if rdt is not None else None
    b = rand(pshape, wdt) if with_bias else None
    y, res_ref, _, rstd_ref = ref_forward(x, w, b, r)

    def call():
        return rmsnorm_fwd(x, w, bias=b, residual=r, eps=EPS, store_rstd=True)

    def check_outputs(what, outs):
        check(what + "out", outs[0], y)
        if r is not None:
            check_exact(what + "residual_out", outs[1], res_ref)
        check(what + "rstd", outs[2], rstd_ref)

    check_both_plans("NORMKIT_PARAMS_SMEM", call, check_outputs,
                     poison=((shape, xdt), (shape, rdt or xdt), (shape[:-1], FP32), (shape[:-1], FP32)))


# Forward 16-bit rows with a weight and without a residual of 1024 threads or more
# at 32 elements a thread (N > 16384): 64 elements a thread, half the threads a row
# (RowPlan for such rows: no pipeline, parameters from global memory),
# RMSNorm and LayerNorm, weights of x's dtype and fp32, a bias, a row length that
# leaves the last items of a thread partly empty (N=40000), per-head weights.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("xdt,wdt,with_bias,heads,m,n", [
    (BF16, BF16, False, 1, 20, 65536), (FP16, FP16, True, 1, 9, 131072), (BF16, FP32, False, 1, 5, 262144),
    (FP16, FP32, True, 1, 40, 40000), (BF16, BF16, True, 1, 9, 131072), (FP16, BF16, False, 1, 20, 65536),
    (BF16, BF16, False, 2, 3, 262144), (BF16, FP32, True, 1, 40, 32768), (FP16, FP16, False, 1, 33, 32768),
    (BF16, BF16, False, 1, 60, 20000)],
    ids=["bf16-N65536", "fp16-bias-N131072", "bf16-wfp32-N262144", "fp16-wfp32-bias-N40000",
         "bf16-bias-N131072", "fp16-wbf16-N65536", "bf16-2heads-N262144", "bf16-wfp32-bias-N32768",
         "fp16-N32768", "bf16-N20000"])
def test_sixteen_bit_rows_of_sixty_four_elements_a_thread(op, xdt, wdt, with_bias, heads, m, n):
    shape = (m, heads, n) if heads > 1 else (m, n)
    pshape = (heads, n) if heads > 1 else (n,)
    x, w = rand(shape, xdt), rand(pshape, wdt)
    b = rand(pshape, wdt) if with_bias else None
    poison_next_allocations((shape, xdt), (shape[:-1], FP32), (shape[:-1], FP32))
    if op == "rmsnorm":
        y, _, _, rstd_ref = ref_forward(x, w, b)
        out, _, rstd = rmsnorm_fwd(x, w, bias=b, eps=EPS, store_rstd=True)
    else:
        y, _, _, mean_ref, rstd_ref = ln_ref_forward(x, w, b)
        out, _, mean, rstd = layernorm_fwd(x, w, b, eps=EPS, store_rstd=True, store_mean=True)
        check("mean", mean, mean_ref, atol_extra=1e-6)
    check("out", out, y)
    check("rstd", rstd, rstd_ref)


# Forward rows of 32 elements a thread (16: fp32 with a residual) in two 512-thread
# CTAs per SM over clusters of 2-16 (N=32768-131072): LayerNorm with a residual or
# fp32 rows, RMSNorm's fp32 rows without one; LayerNorm's 16-bit rows with a residual
# at N=16384 (two 512-thread CTAs per SM, no statistics); weights of x's dtype and
# fp32, a bias, a residual of another dtype, N=40000's partly empty last items; M*N
# above 2^20 (calls of fewer elements are planned for latency).
@pytest.mark.parametrize("op,xdt,rdt,wdt,with_bias,stats,m,n", [
    ("layernorm", BF16, BF16, BF16, True, True, 33, 32768), ("layernorm", FP16, FP32, FP16, True, True, 20, 65536),
    ("layernorm", BF16, BF16, FP32, True, False, 17, 65536), ("layernorm", BF16, BF16, BF16, False, True, 9, 131072),
    ("layernorm", FP32, None, FP32, True, True, 20, 65536), ("layernorm", FP32, FP32, FP32, True, True, 29, 40000),
    ("rmsnorm", FP32, None, FP32, False, True, 33, 32768), ("rmsnorm", FP32, None, BF16, True, True, 29, 40000),
    ("rmsnorm", FP32, None, FP32, False, True, 9, 131072), ("layernorm", BF16, BF16, BF16, True, False, 65, 16384)],
    ids=["ln-bf16-res-N32768", "ln-fp16-resfp32-N65536", "ln-bf16-res-wfp32-N65536", "ln-bf16-res-N131072",
         "ln-fp32-N65536", "ln-fp32-res-N40000", "rms-fp32-N32768", "rms-fp32-wbf16-bias-N40000",
         "rms-fp32-N131072", "ln-bf16-res-N16384-nostats"])
def test_forward_rows_of_two_ctas_per_sm(op, xdt, rdt, wdt, with_bias, stats, m, n):
    x, w = rand((m, n), xdt), rand((n,), wdt)
    r = rand((m, n), rdt) if rdt is not None else None
    b = rand((n,), wdt) if with_bias else None
    check_forward(op, x, w, b, r, stats=stats)


# fp32 backward rows of 8193-16384 columns in calls of more than 2^23 elements
# (fewer take the few-row cluster plans) over a pair of CTAs with the dw (and db)
# sums in registers: 8 columns a thread at 1024 threads, LayerNorm with
# dresidual_out 16 at 512 (test_rmsnorm_plans.cpp). Through autograd against
# float64, with a residual (dresidual_out, prenorm) and without, a bf16 weight and
# bias, and an N that leaves the last items partly empty.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("wdt,with_res,m,n", [(FP32, False, 520, 16384), (FP32, True, 520, 16384),
                                              (BF16, True, 840, 10000), (FP32, False, 700, 12288)],
                         ids=["N16384", "res-N16384", "wbf16-res-N10000", "N12288"])
def test_fp32_backward_rows_over_a_pair_of_ctas(op, wdt, with_res, m, n):
    x = rand((m, n), FP32).requires_grad_()
    w = rand((n,), wdt).requires_grad_()
    r = rand((m, n), FP32).requires_grad_() if with_res else None
    if op == "rmsnorm":
        fwd_bwd_check(rmsnorm, x, w, residual=r, prenorm=with_res)
    else:
        ln_check(layernorm, x, w, rand((n,), wdt).requires_grad_(), r, prenorm=with_res)


# LayerNorm's 16-bit backward rows of 32 columns a thread on sm_90 (test_rmsnorm_plans.cpp):
# with dresidual_out at N=2049-4096, 128 threads with the dw and db sums in shared memory
# (the cp.async ring's 256 threads with NORMKIT_SMEM_SUMS=0); without it at N=513-1024,
# four 32-thread rows a CTA of the ring. fp32 weight and bias beside fp16 rows, an N that
# leaves the last items partly empty; M*N above 2^23, so not the plan of few rows.
@pytest.mark.parametrize("smem_sums", ["1", "0"], ids=["smem-sums", "switch-off"])
@pytest.mark.parametrize("xdt,wdt,n,with_res", [(BF16, BF16, 4096, True), (FP16, FP32, 3000, True),
                                                (BF16, BF16, 1024, False), (FP16, FP32, 768, False)],
                         ids=["bf16-res-N4096", "fp16-wfp32-res-N3000", "bf16-N1024", "fp16-wfp32-N768"])
def test_sixteen_bit_backward_rows_of_32_columns(xdt, wdt, n, with_res, smem_sums):
    m = (1 << 23) // n + 3
    x = rand((m, n), xdt).requires_grad_()
    r = rand((m, n), xdt).requires_grad_() if with_res else None
    w, b = rand((n,), wdt).requires_grad_(), rand((n,), wdt).requires_grad_()
    with plan_switch("NORMKIT_SMEM_SUMS", smem_sums):
        ln_check(layernorm, x, w, b, r, prenorm=with_res)


# NORMKIT_FORWARD_PLAN: plans the heuristics do not pick (clusters of 512-thread CTAs;
# 16 elements a thread over 8 of them, or for fp32 rows the two-pass kernel; the
# pipeline off, on rows without weight or bias, where bf16 takes it) compute what the
# planned kernels do, within the same tolerance of the float64 reference.
@pytest.mark.parametrize("override", ["cta=512", "ept=16,cta=512,minb=2", "prefetch=0"])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("xdt,m,n", [(BF16, 20, 65536), (FP32, 9, 131072)], ids=["bf16-N65536", "fp32-N131072"])
def test_forward_plan_override(override, op, xdt, m, n):
    x = rand((m, n), xdt)
    w, b = (None, None) if override == "prefetch=0" else (rand((n,), xdt), rand((n,), xdt))
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        poison_next_allocations(((m, n), xdt), ((m,), FP32), ((m,), FP32))
        if op == "rmsnorm":
            y, _, _, rstd_ref = ref_forward(x, w)
            out, _, rstd = rmsnorm_fwd(x, w, eps=EPS, store_rstd=True)
        else:
            y, _, _, _, rstd_ref = ln_ref_forward(x, w, b)
            out, _, _, rstd = layernorm_fwd(x, w, b, eps=EPS, store_rstd=True, store_mean=True)
    check(f"{override}: out", out, y)
    check(f"{override}: rstd", rstd, rstd_ref)


# One 16-byte vector a thread in small CTAs of several rows, many an SM, on a plain grid
# (prefetch=0): the shape of scripts/plan_cases/forward-one-vector-rows.txt for short fp32
# rows, at N=1000 too (a row's last vectors on fewer threads), with and without a
# residual, both norms, forward and backward through autograd: rows of 64-512 threads,
# one to four a CTA (a cta= below the row's threads would put the row over a cluster
# instead). None of these spills (normkit precompile, sm_90a, NVRTC 13).
@pytest.mark.parametrize("override,n", [
    ("ept=4,cta=128,minb=16,prefetch=0", 256), ("ept=4,cta=128,minb=16,prefetch=0", 512),
    ("ept=4,cta=256,minb=8,prefetch=0", 512), ("ept=4,cta=256,minb=8,prefetch=0", 1000),
    ("ept=4,cta=256,minb=8,prefetch=0", 1024), ("ept=4,cta=512,minb=4,prefetch=0", 2048)])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
def test_forward_one_vector_rows(override, n, op, with_res):
    m = (1 << 20) // n + 37  # past kFewRowsForwardElements
    x = rand((m, n), FP32).requires_grad_()
    w = rand((n,), FP32).requires_grad_()
    r = rand((m, n), FP32).requires_grad_() if with_res else None
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, residual=r, prenorm=with_res, label=override)
        else:
            ln_check(layernorm, x, w, rand((n,), FP32).requires_grad_(), r, prenorm=with_res, label=override)


# NORMKIT_BACKWARD_PLAN: backward plans the heuristics do not pick compute what the
# planned kernels do, within the same tolerance of the float64 reference, through
# autograd with dw and db: 8 columns a thread (one 512-thread CTA at N=4096; the stash
# at fp32 N=16384), then in CTAs of at most 256 threads (shared-memory sums), the
# pipelines off, two CTAs per SM; and rows of one CTA with their dw/db sums in shared
# memory (sums=smem without cluster=). Each compiled without spills for sm_90a (ptxas,
# 2026-11-30); `minb=2` spilled for LayerNorm's fp32 N=16384 pair, so it runs at N=4096.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,xdt,m,n", [
    ("ept=8", BF16, 2100, 4096), ("ept=8", FP32, 520, 16384), ("ept=8,cta=256", BF16, 2100, 4096),
    ("ept=8,cta=256", FP32, 520, 16384), ("prefetch=0", BF16, 2100, 4096), ("prefetch=0", FP32, 520, 16384),
    ("minb=2", BF16, 2100, 4096), ("ept=16,cta=128,minb=8,prefetch=0,sums=smem", BF16, 4100, 2048),
    ("ept=16,cta=512,minb=2,prefetch=0,sums=smem", BF16, 1030, 8192)])
def test_backward_plan_override(override, op, xdt, m, n):
    x = rand((m, n), xdt).requires_grad_()
    w, b = rand((n,), xdt).requires_grad_(), rand((n,), xdt).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", override):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, b, label=override)
        else:
            ln_check(layernorm, x, w, b, label=override)


# NORMKIT_BACKWARD_PLAN's cluster=: rows in registers over a cluster of 8-16 CTAs
# that reduce through row_sums_walk's st.async pushes and mbarrier waits (reduce.cuh),
# the next row prefetched or not, through autograd with dw (and LayerNorm's db). Row
# counts that leave the persistent clusters different numbers of rows. Each compiled
# without spills for sm_90a (ptxas, 2026-11-30). "" is the plans' own: fp32 rows at
# N=32768 and RMSNorm's bf16 rows at N=65536 take such clusters by default on sm_90
# (plan_cluster_rows). sums=smem: the dw/db sums in shared memory.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,xdt,m,n", [
    ("cluster=8,cta=512", BF16, 259, 32768), ("cluster=8,cta=512", FP32, 259, 32768),
    ("cluster=8,cta=512,minb=2,prefetch=0", BF16, 259, 32768),
    ("cluster=16,cta=512", BF16, 131, 65536), ("cluster=16,cta=512,minb=2,prefetch=0", FP32, 131, 65536),
    ("cluster=16,cta=1024,prefetch=0", BF16, 67, 131072), ("", FP32, 259, 32768), ("", BF16, 131, 65536),
    ("cluster=8,cta=512,minb=2,prefetch=0,sums=smem", BF16, 131, 65536),
    ("cluster=16,cta=1024,prefetch=0,sums=smem", FP32, 67, 131072)])
def test_backward_rows_over_a_cluster(override, op, xdt, m, n):
    x = rand((m, n), xdt).requires_grad_()
    w = rand((n,), xdt).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", override):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, label=override)
        else:
            ln_check(layernorm, x, w, rand((n,), xdt).requires_grad_(), label=override)


# The backward's own plans measured at 201f760 and 8dfc416 (sm_90): plain register rows
# for 16-bit LayerNorm up to N=16384 and at N=1536 and 3072 (with dresidual_out up to
# 8192, from 2048 with the dw/db sums in shared memory) and RMSNorm N=8192
# (with_plain16_rows), cluster rows with their dw/db sums in shared memory for 16-bit
# rows from N=32768 and LayerNorm's fp32 rows with dresidual_out (plan_cluster_rows).
# prenorm: residual_out's gradient is the kernel's dresidual_out (the residual does
# not require grad: no separate dresidual). M*N just above kFewRowsElements (2^23),
# so not the plans of few rows, and a row count that leaves the persistent CTAs and
# clusters different numbers of rows.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("prenorm", [False, True], ids=["plain", "dresidual_out"])
@pytest.mark.parametrize("xdt,n", [(BF16, 256), (BF16, 1024), (BF16, 1536), (BF16, 2048), (BF16, 3072),
                                   (BF16, 4096), (BF16, 8192),
                                   (BF16, 16384), (BF16, 32768), (BF16, 65536), (BF16, 131072), (BF16, 262144),
                                   (FP32, 32768), (FP32, 131072)])
def test_backward_own_plans_of_plain_and_shared_sum_rows(op, prenorm, xdt, n):
    m = (1 << 23) // n + 3
    x = rand((m, n), xdt).requires_grad_()
    w = rand((n,), xdt).requires_grad_()
    res = rand((m, n), xdt) if prenorm else None
    b = rand((n,), xdt).requires_grad_() if op == "layernorm" else None
    label = f"{op} {NAMES[xdt]} N={n}"
    if op == "rmsnorm":
        fwd_bwd_check(rmsnorm, x, w, residual=res, prenorm=prenorm, label=label)
        result = rmsnorm(x, w, residual=res, eps=EPS, prenorm=prenorm)
    else:
        ln_check(layernorm, x, w, b, res, prenorm=prenorm, label=label)
        result = layernorm(x, w, b, res, eps=EPS, prenorm=prenorm)
    # Twice from the same gradients: the same bits (the dw/db sums in a fixed order).
    outs = list(result) if prenorm else [result]
    douts = [rand(o.shape, o.dtype) for o in outs]
    params = [t for t in (x, w, b) if t is not None]
    first = torch.autograd.grad(outs, params, douts, retain_graph=True)
    again = torch.autograd.grad(outs, params, douts)
    for name, g1, g2 in zip(("dx", "dw", "db"), first, again):
        assert torch.equal(g1, g2), f"{label}: {name} differs between two identical backward calls"


# Decode calls' own plans at N=4096 and 8192 (with_decode_rows, sm_90): 16-bit N=4096
# rows over 256 threads (every call of few rows), fp32 rows and N=8192 over a cluster
# of small CTAs (up to 16 rows; M=128 and 200 take the plans of few rows), statistics
# stored or not (a training step of few rows), with and without a residual, on
# poisoned outputs against float64.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("xdt", [BF16, FP32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("stats", [False, True], ids=["no-stats", "stats"])
@pytest.mark.parametrize("m,n", [(1, 4096), (16, 4096), (200, 4096), (1, 8192), (3, 8192), (128, 8192)])
def test_decode_rows_own_plans(op, xdt, with_res, stats, m, n):
    x = rand((m, n), xdt)
    w = rand((n,), xdt)
    b = rand((n,), xdt) if op == "layernorm" else None
    r = rand((m, n), xdt) if with_res else None
    check_forward(op, x, w, b, r, stats=stats)


def test_module_is_a_drop_in(fresh_dynamo):
    theirs = torch.nn.LayerNorm(4096, device="cuda")
    with torch.no_grad():
        theirs.weight.copy_(rand((4096,), FP32))
        theirs.bias.copy_(rand((4096,), FP32))
    ours = LayerNorm(4096, device="cuda")
    ours.load_state_dict(theirs.state_dict())
    x = rand((199, 4096), BF16)
    for fn in (ours, torch.compile(ours, fullgraph=True)):
        got = fn(x)
        want = torch.nn.functional.layer_norm(x.double(), (4096,), theirs.weight.double(), theirs.bias.double(),
                                              1e-5)
        check("out", got, want)


# ---------------------------------------------------------------------------
# In-place fused add


def _fused_ref(kind, x, residual, w, b, offset):
    if kind == "rms":
        y, res_out, _, _ = ref_forward(x, w, b, residual, weight_offset=offset)
    else:
        y, res_out, _, _, _ = ln_ref_forward(x, w, b, residual)
    return y, res_out


def _fused(kind, x, residual, w, b, offset):
    if kind == "rms":
        return fused_add_rmsnorm(x, residual, w, EPS, offset, bias=b)
    return fused_add_layernorm(x, residual, w, b, EPS)


FUSED_CASES = [("rms", BF16, BF16, 0.0), ("rms", BF16, FP32, 1.0), ("rms", FP16, FP16, 0.0), ("rms", FP32, FP32, 1.0),
               ("ln", BF16, BF16, 0.0), ("ln", BF16, FP32, 0.0), ("ln", FP32, FP32, 0.0)]


@pytest.mark.parametrize("m,n", [(1, 4096), (199, 760), (8192, 1024), (128, 8192), (3, 262144)])
@pytest.mark.parametrize("kind,xdt,rdt,offset", [pytest.param(*c, id=f"{c[0]}-{NAMES[c[1]]}-{NAMES[c[2]]}-o{c[3]}")
                                                 for c in FUSED_CASES])
def test_fused_add_in_place(kind, xdt, rdt, offset, m, n):
    x, residual = rand((m, n), xdt), rand((m, n), rdt)
    w, b = rand((n,), FP32, 0.2 if offset else 1.0), rand((n,), xdt) if kind == "ln" else None
    y, res_ref = _fused_ref(kind, x, residual, w, b, offset)
    ptrs = (x.data_ptr(), residual.data_ptr())
    with torch.no_grad():
        assert _fused(kind, x, residual, w, b, offset) is None
    assert (x.data_ptr(), residual.data_ptr()) == ptrs
    check_exact("residual (in place)", residual, res_ref)
    check("x (in place)", x, y)


# Rows with a residual in CTAs under 1024 threads issue all of their loads before
# storing residual_out, and rows of the last CTA past M load row 0 in their place
# (norm_fwd_kernel's BATCH_LOADS). In place, with M leaving part of the last CTA
# without rows (N <= 4096: several rows a CTA) and the batch a view of a larger
# buffer: the outputs against float64, and the rows past M untouched.
@pytest.mark.parametrize("m,n", [(4099, 256), (1031, 1024), (259, 4096), (65, 16384)])
@pytest.mark.parametrize("kind,xdt,rdt,offset", [pytest.param(*c, id=f"{c[0]}-{NAMES[c[1]]}-{NAMES[c[2]]}-o{c[3]}")
                                                 for c in FUSED_CASES])
def test_fused_add_rows_past_the_batch_untouched(kind, xdt, rdt, offset, m, n):
    x_all, residual_all = rand((m + 2, n), xdt), rand((m + 2, n), rdt)
    x, residual = x_all[:m], residual_all[:m]
    tails = (x_all[m:].clone(), residual_all[m:].clone())
    w, b = rand((n,), FP32, 0.2 if offset else 1.0), rand((n,), xdt) if kind == "ln" else None
    y, res_ref = _fused_ref(kind, x, residual, w, b, offset)
    with torch.no_grad():
        _fused(kind, x, residual, w, b, offset)
    check_exact("residual (in place)", residual, res_ref)
    check("x (in place)", x, y)
    assert torch.equal(x_all[m:], tails[0]) and torch.equal(residual_all[m:], tails[1])


@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_fused_add_matches_out_of_place_bitwise(kind):
    x, residual, w = rand((199, 4096), BF16), rand((199, 4096), BF16), rand((4096,), FP32)
    want = _fused_out_of_place(kind, x, residual, w)
    _fused(kind, x, residual, w, None, 0.0)
    assert torch.equal(x, want[0]) and torch.equal(residual, want[1])


def _fused_out_of_place(kind, x, residual, w):
    if kind == "rms":
        return fused_add_rmsnorm(x, residual, w, EPS, inplace=False)
    return fused_add_layernorm(x, residual, w, None, EPS, inplace=False)


@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_fused_add_cuda_graph_and_compile(kind, fresh_dynamo):
    m, n = 16, 4096
    x, residual, w = rand((m, n), BF16), rand((m, n), BF16), rand((n,), BF16)

    def step():
        _fused(kind, x, residual, w, None, 0.0)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: compiles and loads the kernel
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        x.copy_(rand((m, n), BF16))
        residual.copy_(rand((m, n), BF16))
        y, res_ref = _fused_ref(kind, x.clone(), residual.clone(), w, None, 0.0)
        graph.replay()
        torch.cuda.synchronize()
        check_exact("residual (graph replay)", residual, res_ref)
        check("x (graph replay)", x, y)
    compiled = torch.compile(lambda a, r: (_fused(kind, a, r, w, None, 0.0), a * 1)[1], fullgraph=True)
    x2, r2 = rand((m, n), BF16), rand((m, n), BF16)
    y, res_ref = _fused_ref(kind, x2, r2, w, None, 0.0)
    out = compiled(x2, r2)
    check("compiled out", out, y)
    check_exact("compiled residual", r2, res_ref)


# ---------------------------------------------------------------------------
# with_forward_elems (src/norm/rmsnorm_heuristics_fwd.cpp): the forward plans of other
# elements a thread than plan_rows' 32 on sm_90, at the ends of their ranges, both
# norms, forward and backward through autograd (training: the statistics stored).

_MEASURED_FORWARD = [
    # (center, dtype, residual, N)
    (False, BF16, True, 256), (True, BF16, True, 2048), (False, FP16, True, 1024),
    (False, BF16, False, 8192), (False, BF16, True, 5120), (True, BF16, False, 16384), (True, BF16, False, 12288),
    (False, FP32, False, 256), (True, FP32, False, 512), (False, FP32, False, 8192), (True, FP32, False, 6144),
    (False, FP32, True, 256), (True, FP32, True, 4096), (False, FP32, True, 16384),
    # the short fp32 rows' measured shapes (measured_short_fp32_rows)
    (False, FP32, True, 1024), (True, FP32, True, 640), (True, FP32, True, 2048), (False, FP32, True, 1500),
    (True, FP32, False, 4096), (True, FP32, False, 3800), (False, FP32, True, 512), (False, FP32, True, 384),
    (False, FP32, False, 512), (False, FP32, False, 384), (False, FP32, False, 1024), (False, FP32, False, 1000),
    # the long rows' measured shapes (test_forward_long_rows.cpp)
    (False, BF16, True, 131072), (False, BF16, False, 65536), (False, BF16, False, 131072), (True, BF16, False, 131072),
    (True, FP32, True, 262144),
]


@pytest.mark.parametrize("center,xdt,with_res,n", [
    pytest.param(c, x, r, n, id=f"{'ln' if c else 'rms'}-{NAMES[x]}-{'res' if r else 'nores'}-N{n}")
    for c, x, r, n in _MEASURED_FORWARD])
def test_measured_forward_plans(center, xdt, with_res, n):
    m = (1 << 20) // n + 37  # past kFewRowsForwardElements (calls of few rows are planned apart)
    x = rand((m, n), xdt).requires_grad_()
    w = rand((n,), xdt).requires_grad_()
    b = rand((n,), xdt).requires_grad_() if center else None
    r = rand((m, n), xdt).requires_grad_() if with_res else None
    if center:
        ln_check(layernorm, x, w, b, r, prenorm=with_res, label=f"N={n}")
    else:
        fwd_bwd_check(rmsnorm, x, w, residual=r, prenorm=with_res, label=f"N={n}")
