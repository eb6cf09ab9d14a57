"""Grouped backward rows on the GPU (norm_bwd_group_kernel, RowPlan::group_stages in the
backward): a row's slices of h, dout and dresidual_out taken by a group of plain CTAs
that exchange each row's sums through global memory give dx, dw, db and dresidual
within the tolerance of the float64 reference through autograd: RMSNorm and LayerNorm
under NORMKIT_BACKWARD_PLAN's row=group (bf16 and fp32 rows; weights of x's dtype and
fp32 beside bf16; 16 to 128 slices; one to three CTAs an SM; the weight's slice in
shared memory or not), with dresidual_out (prenorm; staged, or read directly under
dro=direct), enough rows that every CTA walks
its ring round several times and a last partial round of groups, and fewer rows than
the device holds groups; the same bits run to run, and with NORMKIT_SYNC_TIMEOUT_US=0,
where every CTA computes its rows' slice sums itself from global memory instead of
waiting; per-head weights (planned without grouped rows) and NORMKIT_GROUP_ROWS=0.
Which shapes the overrides plan this way is tests/cpp/test_backward_group_rows.cpp's.
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from test_backward_bulk_rows_gpu import _grads, test_backward_bulk_rows  # noqa: E402
from normkit.torch import rmsnorm  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, FP32, _seed, fwd_bwd_check, plan_switch, pytestmark, rand)

# (override, x dtype, weight dtype, M, N)
CASES = [
    pytest.param("row=group", FP32, FP32, 37, 262144, id="fp32-N262144-s128"),
    pytest.param("row=group", BF16, BF16, 97, 131072, id="bf16-N131072-s32"),
    pytest.param("row=group", BF16, FP32, 203, 65536, id="bf16-wfp32-N65536-s16"),
    pytest.param("row=group", FP32, FP32, 601, 32768, id="fp32-N32768-s16"),
    pytest.param("row=group", BF16, BF16, 3, 262144, id="bf16-N262144-3rows"),
    pytest.param("row=group,w=global,stages=4", FP32, FP32, 37, 262144, id="wglobal-fp32-N262144"),
    pytest.param("row=group,minb=1,ept=32", BF16, BF16, 97, 131072, id="minb1-bf16-N131072"),
    pytest.param("row=group,minb=3,ept=8", FP32, FP32, 45, 131072, id="minb3-fp32-N131072"),
    pytest.param("row=group,cta=512,minb=1", FP32, FP32, 150, 65536, id="cta512-fp32-N65536"),
]


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "dresidual_out"])
@pytest.mark.parametrize("override,xdt,wdt,m,n", CASES)
def test_backward_group_rows(override, op, with_res, xdt, wdt, m, n):
    test_backward_bulk_rows(override, op, with_res, xdt, wdt, m, n)


# dro=direct: dresidual_out read into registers, not staged (RowPlan::dro_direct), with the
# stages that then fit (lookahead 4 where six do), four stages with the weight in global
# memory, and three CTAs an SM: CASES' shapes of those ids.
DRO_DIRECT_CASES = [
    pytest.param(c.values[0] + ",dro=direct", *c.values[1:], id=c.id) for c in CASES
    if c.id in ("fp32-N262144-s128", "bf16-N131072-s32", "bf16-wfp32-N65536-s16", "wglobal-fp32-N262144",
                "minb3-fp32-N131072")
]


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,xdt,wdt,m,n", DRO_DIRECT_CASES)
def test_backward_group_rows_dro_direct(override, op, xdt, wdt, m, n):
    test_backward_bulk_rows(override, op, True, xdt, wdt, m, n)


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("xdt,n", [(FP32, 262144), (BF16, 65536)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("override", ["row=group", "row=group,dro=direct"])
def test_backward_group_rows_timeout_same_bits(op, xdt, n, override):
    # NORMKIT_SYNC_TIMEOUT_US=0: no CTA waits; each computes every slice's sums of its
    # rows from global memory, with the arithmetic of the slices' own CTAs.
    m = 41
    x = rand((m, n), xdt).requires_grad_()
    r = rand((m, n), xdt).requires_grad_()
    w = rand((n,), xdt).requires_grad_()
    b = rand((n,), xdt).requires_grad_() if op == "layernorm" else None
    with plan_switch("NORMKIT_BACKWARD_PLAN", override):
        waited = _grads(op, x, w, b, r, True)
        with plan_switch("NORMKIT_SYNC_TIMEOUT_US", "0"):
            computed = _grads(op, x, w, b, r, True)
    for i, (a, c) in enumerate(zip(waited, computed)):
        assert torch.equal(a, c), f"gradient {i} differs between waiting and computing the sums (bitwise)"


def test_backward_group_rows_per_head():
    # Per-head weights (weight (H, N) with x (B, H, N)): planned without grouped rows.
    x = rand((11, 4, 65536), FP32).requires_grad_()
    w = rand((4, 65536), FP32).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", "row=group"):
        fwd_bwd_check(rmsnorm, x, w, label="row=group per head")


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_backward_group_rows_switched_off(op):
    with plan_switch("NORMKIT_GROUP_ROWS", "0"):
        test_backward_bulk_rows("row=group", op, True, FP32, FP32, 37, 262144)


# The plans' own grouped rows (group_backward_rows_measured: fp32 at N=262144; not calls
# of few rows, so M * N > 2^23), unforced.
@pytest.mark.parametrize("op,xdt,with_res,m,n", [
    ("rmsnorm", FP32, False, 37, 262144), ("rmsnorm", FP32, True, 37, 262144),
    ("layernorm", FP32, False, 37, 262144), ("layernorm", FP32, True, 37, 262144)])
def test_backward_group_rows_own_plan(op, xdt, with_res, m, n):
    test_backward_bulk_rows("", op, with_res, xdt, xdt, m, n)
