"""Backward register rows that read their weight slice from shared memory
(norm_bwd_kernel's W_SMEM, RowPlan::weight_smem) on the GPU: forced by
NORMKIT_BACKWARD_PLAN's w=smem, refused by w=global, and the plans' own choice (which
takes it for most rows of N <= 32768 on sm_90), each within the tolerance of the float64
reference through autograd with dw (and LayerNorm's db): rows of one CTA, of several a
CTA, over a cluster, with the cp.async ring and shared-memory sums, dresidual_out, and a
per-head weight (one head a CTA).
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm, rmsnorm  # noqa: E402
from test_layernorm_gpu import ln_check  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, FP32, _seed, fwd_bwd_check, plan_switch, pytestmark, rand)


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("xdt,m,n,with_res", [
    (BF16, 2100, 4096, False), (BF16, 2100, 4096, True), (BF16, 8200, 1024, True), (FP32, 1030, 8192, False),
    (BF16, 300, 32768, False), (FP32, 2100, 3000, True)],
    ids=["bf16-N4096", "bf16-res-N4096", "bf16-res-N1024", "fp32-N8192", "bf16-N32768", "fp32-res-N3000"])
@pytest.mark.parametrize("plan", ["w=smem", "w=global", ""], ids=["smem", "global", "own"])
def test_backward_weight_in_shared_memory(op, xdt, m, n, with_res, plan):
    backward_check_under_plan(op, xdt, m, n, with_res, plan)


def backward_check_under_plan(op, xdt, m, n, with_res, plan):
    """op ("rmsnorm" or "layernorm") on fresh (m, n) rows of xdt with a weight (and
    LayerNorm's bias), and a residual through prenorm if with_res (the backward's
    dresidual_out), forward and backward under NORMKIT_BACKWARD_PLAN=plan ("" for the
    plans' own), checked against the float64 reference."""
    x = rand((m, n), xdt).requires_grad_()
    r = rand((m, n), xdt).requires_grad_() if with_res else None
    w, b = rand((n,), xdt).requires_grad_(), rand((n,), xdt).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", plan):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, residual=r, prenorm=with_res, label=plan or "own plan")
        else:
            ln_check(layernorm, x, w, b, r, prenorm=with_res, label=plan or "own plan")


def test_backward_weight_in_shared_memory_per_head():
    backward_per_head_check_under_plan(600, "w=smem")


def backward_per_head_check_under_plan(m, plan):
    """RMSNorm of (m, 4, 2048) bf16 rows with a weight per head (row r of head r % 4)
    under NORMKIT_BACKWARD_PLAN=plan, forward and backward against the float64 reference."""
    heads, n = 4, 2048
    x = rand((m, heads, n), BF16).requires_grad_()
    w = rand((heads, n), BF16).requires_grad_()
    with plan_switch("NORMKIT_BACKWARD_PLAN", plan):
        fwd_bwd_check(rmsnorm, x, w, label=f"{plan} per head")
