"""The plans of both norms on the GPU, each against float64 on fresh random inputs with
the outputs poisoned first (test_rmsnorm_gpu.py's tolerances and marks): the shapes the
heuristics plan by themselves (rows over clusters, CTAs per SM, elements a thread, the
decode rows, the measured forward plans of with_forward_elems) and the same kernels
forced through NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN. Split from
test_layernorm_gpu.py, whose LayerNorm helpers (ln_check, the float64 references) they use.
"""
import pytest

torch = pytest.importorskip("torch", reason="the plan GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm, layernorm_fwd, rmsnorm, rmsnorm_fwd  # noqa: E402
from test_layernorm_gpu import ln_check, ln_ref_forward  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, EPS, FP16, FP32, NAMES, _rmsnorm_kernel_cache, _seed, cache_dir, check, check_both_plans, check_exact,
    fwd_bwd_check, plan_switch, poison_next_allocations, pytestmark, rand, ref_forward)


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
# pipeline off, on rows without weight or bias, where bf16 takes it; one CTA an SM by
# unused shared memory beside the kernels' own, against the whole SM or within the
# smallest carveout the launch then asks for) compute what the planned kernels do,
# within the same tolerance of the float64 reference.
@pytest.mark.parametrize("override", ["cta=512", "ept=16,cta=512,minb=2", "prefetch=0", "occ=1", "occ=1,l1=max"])
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
@pytest.mark.parametrize("xdt,n", [(BF16, 256), (BF16, 512), (BF16, 1024), (BF16, 1536), (BF16, 2048), (BF16, 3072),
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
    # the fp32 rows whose plans differ on an H100's memory (test_memory_class_plans.cpp):
    # the register rows there, the ring on an H200
    (True, FP32, False, 32768), (True, FP32, False, 65536), (True, FP32, False, 131072), (True, FP32, True, 32768),
    (False, FP32, True, 32768), (False, FP32, True, 65536), (False, FP32, False, 65536), (False, FP32, False, 131072),
    # the rows Liger-Kernel had led on the H100 (measured_slower_memory_rows): more
    # threads a row there, 256-thread CTAs for LayerNorm fp32 N=16384, RMSNorm fp32 at
    # N=2048-8192 two CTAs an SM at most (RowPlan::sm_ctas), at N=16384 1024 threads a row
    (False, FP32, True, 256), (False, FP32, True, 2048), (False, FP32, True, 4096), (False, FP32, True, 8192),
    (False, FP32, False, 2048), (False, FP32, False, 16384),
    (False, BF16, False, 256), (True, FP32, False, 16384), (False, BF16, False, 32768), (True, BF16, False, 4096),
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
