"""NORMKIT_BACKWARD_PLAN's row=bulk on the GPU: backward rows whose CTA slices of h,
dout and dresidual_out arrive by cp.async.bulk in a ring of shared-memory stages
(norm_bwd_bulk_kernel, RowPlan::bulk_stages) give dx, dw, db and dresidual within the
tolerance of the float64 reference through autograd: RMSNorm and LayerNorm, over
clusters of 1 to 16 CTAs, slices that leave threads without a last vector (fp32
N=20000), weights of x's dtype and fp32 beside bf16 rows, with dresidual_out (prenorm),
256-thread CTAs and two stages, enough rows that each CTA walks its ring round several
times (and a row count that leaves the last CTAs a row short), per-head weights; the
same bits run to run. Which shapes the override plans this way is
tests/cpp/test_backward_bulk_rows.cpp's (BackwardBulkRowsPlansTheGpuTestShapes).
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm, rmsnorm  # noqa: E402
from test_backward_weight_smem_gpu import backward_per_head_check_under_plan  # noqa: E402
from test_layernorm_gpu import ln_check  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, FP32, _seed, fwd_bwd_check, plan_switch, pytestmark, rand)

# (x dtype, weight dtype, M, N): clusters of 16, 8, 4 (fp32 weight beside bf16), an
# uneven slice (fp32 N=20000 over 4 CTAs: 1250 vectors), one CTA (N=4096).
SHAPES = [
    pytest.param(BF16, BF16, 97, 262144, id="bf16-N262144"),
    pytest.param(FP32, FP32, 203, 65536, id="fp32-N65536"),
    pytest.param(BF16, FP32, 203, 65536, id="bf16-wfp32-N65536"),
    pytest.param(FP32, FP32, 601, 20000, id="fp32-N20000"),
    pytest.param(BF16, BF16, 3001, 4096, id="bf16-N4096"),
]


def _grads(op, x, w, b, r, prenorm):
    for t in (x, w, b, r):
        if t is not None:
            t.grad = None
    if op == "rmsnorm":
        result = rmsnorm(x, w, residual=r, prenorm=prenorm)
    else:
        result = layernorm(x, w, b, r, prenorm=prenorm)
    out, res_out = result if prenorm else (result, None)
    loss = (out.float() * torch.linspace(-1, 1, out.shape[-1], device=out.device)).sum()
    if res_out is not None:
        loss = loss + res_out.float().sum() * 0.5
    loss.backward()
    return [t.grad.clone() for t in (x, w, b, r) if t is not None]


@pytest.mark.parametrize("override", ["row=bulk", "row=bulk,cta=256", "row=bulk,stages=2"])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "dresidual_out"])
@pytest.mark.parametrize("xdt,wdt,m,n", SHAPES)
def test_backward_bulk_rows(override, op, with_res, xdt, wdt, m, n):
    x = rand((m, n), xdt).requires_grad_()
    r = rand((m, n), xdt).requires_grad_() if with_res else None
    w = rand((n,), wdt).requires_grad_()
    b = rand((n,), wdt).requires_grad_() if op == "layernorm" else None
    with plan_switch("NORMKIT_BACKWARD_PLAN", override):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, residual=r, prenorm=with_res, label=override)
        else:
            ln_check(layernorm, x, w, b, r, prenorm=with_res, label=override)
        first = _grads(op, x, w, b, r, with_res)
        again = _grads(op, x, w, b, r, with_res)
    for i, (a, c) in enumerate(zip(first, again)):
        assert torch.equal(a, c), f"{override}: gradient {i} of a second backward differs (bitwise)"


# Short rows, several a stage (tests/cpp/test_backward_bulk_rows.cpp's
# BackwardBulkShortRowsTakeSeveralRowsAStage): 16 rows of one warp (N=256), four rows
# of 128 threads (N=1024, M not a multiple of four: the last group a row short), two
# rows of 256 threads with 64 idle (N=1536), fp32 rows two a stage; ept=16 and 32
# (two and four vectors a thread, as the plans take them), two 256-thread CTAs an SM.
SHORT_SHAPES = [
    pytest.param(BF16, 4099, 256, id="bf16-N256"),
    pytest.param(BF16, 3001, 1024, id="bf16-N1024"),
    pytest.param(BF16, 1003, 1536, id="bf16-N1536"),
    pytest.param(FP32, 2001, 1024, id="fp32-N1024"),
]


@pytest.mark.parametrize("override", ["row=bulk", "row=bulk,ept=8", "row=bulk,ept=16", "row=bulk,ept=32",
                                      "row=bulk,cta=256,minb=2"])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "dresidual_out"])
@pytest.mark.parametrize("xdt,m,n", SHORT_SHAPES)
def test_backward_bulk_short_rows(override, op, with_res, xdt, m, n):
    test_backward_bulk_rows(override, op, with_res, xdt, xdt, m, n)


# The plans' own bulk rows, unforced, not calls of few rows (M * N > 2^23): the short
# rows (bulk_backward_short_rows_ept: bf16 at N=256-8192, LayerNorm at ept=16 with
# dresidual_out and 32 without, RMSNorm at 16, and RMSNorm without it at N=16384 at 32,
# one row a stage, and on an H100's memory at N=4096 at 8, one vector a thread; M
# leaves the last group short), among
# them LayerNorm's with dresidual_out at N=2048-8192 on the shared reads, and bf16 rows with
# dresidual_out at N=16384 (the shared reads over a pair of CTAs); the long rows in
# several CTAs an SM (bulk_backward_measured_ctas): LayerNorm at N=16384-32768 in three
# 128-thread CTAs an SM, with dresidual_out at 32768 in two of 256 and at 65536 in three
# of 128, RMSNorm at N=32768-131072 in two of 256; both norms with dresidual_out at
# N=131072 over 16 CTAs (LayerNorm's in two stages).
@pytest.mark.parametrize("op,with_res,n", [
    ("layernorm", False, 1024), ("layernorm", True, 1024), ("layernorm", False, 8192), ("layernorm", True, 256),
    ("layernorm", True, 2048), ("layernorm", True, 4096), ("rmsnorm", True, 2048), ("rmsnorm", False, 4096),
    ("rmsnorm", False, 8192),
    ("rmsnorm", False, 16384), ("layernorm", True, 16384),
    ("rmsnorm", True, 16384), ("layernorm", False, 16384), ("layernorm", False, 32768), ("layernorm", True, 32768),
    ("layernorm", True, 65536), ("rmsnorm", False, 32768), ("rmsnorm", False, 65536), ("rmsnorm", False, 131072),
    ("rmsnorm", True, 131072), ("layernorm", True, 131072)])
def test_backward_bulk_rows_own_plan(op, with_res, n):
    m = (1 << 23) // n + 5
    test_backward_bulk_rows("", op, with_res, BF16, BF16, m, n)


# refill=early (RowPlan::early_refill, norm_bwd_bulk_kernel's EARLY_REFILL): pass 1 keeps
# h, dout and dresidual_out in registers and the stage is refilled before pass 2. Each branch of the
# ring's row loop: one CTA of one row a stage (bf16 N=16384, four vectors a thread), rows
# of 128 threads four a stage (N=2048, LayerNorm and RMSNorm) and of one warp sixteen a
# stage (N=256: its own CTA barrier), clusters on the pointer reads (fp32 N=65536, an fp32
# weight beside bf16 rows, uneven slices at N=20000) and on the shared reads (RMSNorm bf16
# N=262144 over 16), with and without dresidual_out. Where the held vectors do not fit
# (LayerNorm bf16 at four vectors a thread: N=65536 over 4, 262144 over 16; with
# dresidual_out RMSNorm's too) the ring refills after pass 2;
# tests/cpp/test_backward_early_refill.cpp tells which.
EARLY_REFILL_CASES = [
    pytest.param("row=bulk,ept=32,refill=early", BF16, BF16, 601, 16384, id="bf16-N16384-ept32"),
    pytest.param("row=bulk,cluster=2,refill=early", BF16, BF16, 601, 16384, id="bf16-N16384-cluster2"),
    pytest.param("row=bulk,ept=16,refill=early", BF16, BF16, 3001, 2048, id="bf16-N2048-ept16"),
    pytest.param("row=bulk,ept=8,refill=early", BF16, BF16, 4099, 256, id="bf16-N256-warp-rows"),
    pytest.param("row=bulk,refill=early", FP32, FP32, 203, 65536, id="fp32-N65536"),
    pytest.param("row=bulk,refill=early", BF16, FP32, 203, 65536, id="bf16-wfp32-N65536"),
    pytest.param("row=bulk,refill=early", FP32, FP32, 601, 20000, id="fp32-N20000"),
    pytest.param("row=bulk,reads=shared,refill=early", BF16, BF16, 97, 262144, id="bf16-N262144-shared"),
]


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "dresidual_out"])
@pytest.mark.parametrize("override,xdt,wdt,m,n", EARLY_REFILL_CASES)
def test_backward_bulk_rows_early_refill(override, op, with_res, xdt, wdt, m, n):
    test_backward_bulk_rows(override, op, with_res, xdt, wdt, m, n)


# The rows whose own plan takes refill=early on the H100's memory class (under 4 TB/s;
# bulk_backward_early_refill_measured): LayerNorm bf16 with dresidual_out N=32768 and
# RMSNorm bf16 N=16384 are test_backward_bulk_rows_own_plan's; RMSNorm fp32 N=65536 here.
# On the H200's class these run the late refill, so the tests hold on either;
# tests/cpp/test_memory_class_plans.cpp tells which plan each class gets.
def test_backward_early_refill_own_plan():
    n = 65536
    test_backward_bulk_rows("", "rmsnorm", False, FP32, FP32, (1 << 23) // n + 5, n)


def test_backward_bulk_rows_per_head():
    # One head a CTA row (blockIdx.y), each head's weight slice its own.
    backward_per_head_check_under_plan(601, "row=bulk")


def _view_8_bytes_past_16(n, dtype):
    # A leaf of n elements 8 bytes past a 16-byte boundary (16-bit: 4 elements in).
    base = rand((n + 4,), dtype)
    assert base.data_ptr() % 16 == 0
    return base[4:].detach().requires_grad_()


# fp32 rows take vectors of 4 (16 bytes); a 16-bit weight then needs only 8-byte
# alignment, so its slice may not be 16-byte aligned for the bulk copy: the ring
# kernels then copy it into shared memory with plain loads where they read it there
# unconditionally (norm_bwd_bulk_kernel's SHARED_READS, norm_bwd_group_kernel), or read
# it from global memory (the bulk ring's pointer reads): both exercised here.
@pytest.mark.parametrize("override", ["row=bulk", "row=bulk,reads=shared", "row=bulk,reads=pointer", "row=group"])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_backward_ring_weight_8_byte_aligned(override, op):
    m, n = 203, 65536
    x = rand((m, n), FP32).requires_grad_()
    w = _view_8_bytes_past_16(n, BF16)
    assert w.data_ptr() % 16 == 8
    b = _view_8_bytes_past_16(n, BF16) if op == "layernorm" else None
    with plan_switch("NORMKIT_BACKWARD_PLAN", override):
        if op == "rmsnorm":
            fwd_bwd_check(rmsnorm, x, w, label=override + " weight 8 bytes past 16")
        else:
            ln_check(layernorm, x, w, b, None, label=override + " weight 8 bytes past 16")
