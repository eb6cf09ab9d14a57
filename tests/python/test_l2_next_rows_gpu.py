"""Rows that prefetch a later row into L2 (RowPlan::l2_next) on the GPU. Backward
(norm_bwd_kernel's L2_NEXT, its next row): forced by NORMKIT_BACKWARD_PLAN's l2=next, refused by
l2=off, each within the tolerance of the float64 reference through autograd with dw
(and LayerNorm's db). The shapes are those whose plans test_backward_l2_next.cpp shows
taking it under l2=next: rows of several a CTA, shared-memory sums, rows over a cluster
with dresidual_out, fp32 rows over a cluster, a row length that leaves threads' last
vectors empty, and per-head weights (row r of head r % heads). Each call has more rows
than its persistent grid has CTAs, and a row count that leaves the last CTAs one row
short, so the prefetch past the last row is exercised. Forward (norm_fwd_kernel's
L2_NEXT, the row of the CTA after the grid's first wave), forced by
NORMKIT_FORWARD_PLAN's l2=next: RMSNorm and LayerNorm, with and without a residual
(residual_out bit-exact), over clusters and in CTAs of several rows, rows past the
first wave, outputs poisoned first.
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm, layernorm_fwd, rmsnorm, rmsnorm_fwd  # noqa: E402
from test_layernorm_gpu import ln_check, ln_ref_forward  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, EPS, FP32, _seed, check, check_exact, fwd_bwd_check, plan_switch, poison_next_allocations, pytestmark,
    rand, ref_forward)


@pytest.mark.parametrize("op,xdt,m,n,with_res", [
    ("layernorm", BF16, 5001, 2048, False), ("rmsnorm", BF16, 701, 16384, False),
    ("layernorm", BF16, 203, 65536, True), ("rmsnorm", FP32, 101, 131072, False),
    ("rmsnorm", FP32, 2101, 3000, True), ("layernorm", FP32, 2101, 3000, False)],
    ids=["ln-bf16-N2048", "rms-bf16-N16384", "ln-bf16-res-N65536", "rms-fp32-N131072", "rms-fp32-res-N3000",
         "ln-fp32-N3000"])
@pytest.mark.parametrize("plan", ["l2=next", "l2=off"])
def test_backward_next_row_prefetched_into_l2(op, xdt, m, n, with_res, plan):
    x = rand((m, n), xdt).requires_grad_()
    r = rand((m, n), xdt).requires_grad_() if with_res else None
    w, b = rand((n,), xdt).requires_grad_(), rand((n,), xdt).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", plan):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, residual=r, prenorm=with_res, label=plan)
        else:
            ln_check(layernorm, x, w, b, r, prenorm=with_res, label=plan)


def test_backward_next_row_prefetched_into_l2_per_head():
    heads, n = 4, 2048
    x = rand((601, heads, n), BF16).requires_grad_()
    w = rand((heads, n), BF16).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", "l2=next"):
        fwd_bwd_check(rmsnorm, x, w, label="l2=next per head")


@pytest.mark.parametrize("plan", ["l2=next", "l2=off"])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("xdt,m,n", [(BF16, 1501, 65536), (FP32, 301, 262144), (BF16, 40001, 1024),
                                     (BF16, 3001, 24576)],
                         ids=["bf16-N65536", "fp32-N262144", "bf16-N1024", "bf16-N24576"])
def test_forward_later_row_prefetched_into_l2(plan, op, with_res, xdt, m, n):
    x = rand((m, n), xdt)
    r = rand((m, n), xdt) if with_res else None
    w, b = rand((n,), xdt), rand((n,), xdt)
    with plan_switch("NORMKIT_FORWARD_PLAN", plan):
        poison_next_allocations(((m, n), xdt), ((m, n), xdt), ((m,), FP32), ((m,), FP32))
        if op == "rmsnorm":
            y, h, _, rstd_ref = ref_forward(x, w, residual=r)
            out, res_out, rstd = rmsnorm_fwd(x, w, residual=r, eps=EPS, store_rstd=True)
        else:
            y, h, _, _, rstd_ref = ln_ref_forward(x, w, b, residual=r)
            out, res_out, _, rstd = layernorm_fwd(x, w, b, residual=r, eps=EPS, store_rstd=True, store_mean=True)
    check(f"{plan}: out", out, y)
    check(f"{plan}: rstd", rstd, rstd_ref)
    if with_res:
        check_exact(f"{plan}: residual_out", res_out, h)
