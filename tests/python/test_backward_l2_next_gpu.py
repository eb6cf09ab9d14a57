"""Backward rows that prefetch their next row into L2 (norm_bwd_kernel's L2_NEXT,
RowPlan::l2_next) on the GPU: forced by NORMKIT_BACKWARD_PLAN's l2=next, refused by
l2=off, each within the tolerance of the float64 reference through autograd with dw
(and LayerNorm's db). The shapes are those whose plans test_backward_l2_next.cpp shows
taking it under l2=next: rows of several a CTA, shared-memory sums, rows over a cluster
with dresidual_out, fp32 rows over a cluster, a row length that leaves threads' last
vectors empty, and per-head weights (row r of head r % heads). Each call has more rows
than its persistent grid has CTAs, and a row count that leaves the last CTAs one row
short, so the prefetch past the last row is exercised.
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from test_backward_weight_smem_gpu import backward_check_under_plan, backward_per_head_check_under_plan  # noqa: E402
from test_rmsnorm_gpu import BF16, FP32, _seed, pytestmark  # noqa: E402,F401  (fixtures are used by name)


@pytest.mark.parametrize("op,xdt,m,n,with_res", [
    ("layernorm", BF16, 5001, 2048, False), ("rmsnorm", BF16, 701, 16384, False),
    ("layernorm", BF16, 203, 65536, True), ("rmsnorm", FP32, 101, 131072, False),
    ("rmsnorm", FP32, 2101, 3000, True), ("layernorm", FP32, 2101, 3000, False)],
    ids=["ln-bf16-N2048", "rms-bf16-N16384", "ln-bf16-res-N65536", "rms-fp32-N131072", "rms-fp32-res-N3000",
         "ln-fp32-N3000"])
@pytest.mark.parametrize("plan", ["l2=next", "l2=off"])
def test_backward_next_row_prefetched_into_l2(op, xdt, m, n, with_res, plan):
    backward_check_under_plan(op, xdt, m, n, with_res, plan)


def test_backward_next_row_prefetched_into_l2_per_head():
    backward_per_head_check_under_plan(601, "l2=next")
