"""LayerNorm and the in-place fused adds on the GPU: the RMSNorm grid of DESIGN §5
(test_rmsnorm_gpu.py) applied to LayerNorm, its features, bitwise-deterministic
backward, and fused_add_rmsnorm / fused_add_layernorm (in place, same storage,
Gemma offset, CUDA-graph capture, torch.compile). The plans' own shapes and the
NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN overrides, both norms: test_norm_plans_gpu.py.

Tolerances, poisoning, marks and skips: test_rmsnorm_gpu.py. The reference is
float64 from the same rounded inputs; LayerNorm's rows are centred, so its fp32
error is that of RMSNorm on the centred row (plus the mean's, ~1e-7 relative).
"""
import pytest

torch = pytest.importorskip("torch", reason="the LayerNorm GPU tests drive CUDA memory through PyTorch")

from normkit.torch import (  # noqa: E402
    LayerNorm, fused_add_layernorm, fused_add_rmsnorm, layernorm, layernorm_bwd, layernorm_fwd)
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, COMPILE_DTYPES, COMPILE_SHAPES, DW_ATOL, EPS, FP16, FP32, NAMES, _d, _grid_params,
    _rmsnorm_kernel_cache, _seed, backward_check, cache_dir, check, check_exact, fresh_dynamo,
    plan_switch, poison_next_allocations, pytestmark, rand, ref_forward)


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
