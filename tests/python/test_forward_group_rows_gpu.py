"""Grouped forward rows on the GPU (norm_fwd_group_kernel, RowPlan::group_stages): a
row's slices taken by a group of plain CTAs that exchange their moments through global
memory compute what the float64 reference does, outputs poisoned first: RMSNorm and
LayerNorm under NORMKIT_FORWARD_PLAN's row=group (bf16, fp16 and fp32 x; weights of x's
dtype, of another, and none; 32 to 128 slices; one to three CTAs an SM), with enough
rows that every CTA walks its ring round several times and a last partial round of
groups; per-head weights (read from global memory); a residual (residual_out
bit-exact); the plans' own grouped rows (the measured fp32 calls); the same bits run to
run, and with NORMKIT_SYNC_TIMEOUT_US=0, where every CTA computes its rows' slice
moments itself from global memory instead of waiting; LayerNorm rows far from zero; the
in-place fused add on its own grouped kernel, launched cooperatively (the out-of-place
call's bits, with and without NORMKIT_SYNC_TIMEOUT_US=0) and NORMKIT_GROUP_ROWS=0; a CUDA graph
of a grouped call (its scratch captured as allocation nodes). Which shapes the
overrides plan this way is tests/cpp/test_forward_group_rows.cpp's
(GroupRowsPlansTheGpuTestShapes).
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm_fwd, rmsnorm_fwd  # noqa: E402
from test_forward_bulk_rows_gpu import _check_forward  # noqa: E402  (checks, then the same bits again)
from test_forward_smem_row_gpu import forward_check  # noqa: E402
from test_layernorm_gpu import _fused, _fused_ref, ln_ref_forward  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, FP16, FP32, EPS, _seed, check, check_exact, plan_switch, pytestmark, rand)

# (override, x dtype, weight dtype or None, out dtype, M, N)
CASES = [
    pytest.param("row=group", FP32, FP32, FP32, 37, 262144, id="fp32-N262144-s128"),
    pytest.param("row=group", BF16, BF16, BF16, 70, 131072, id="bf16-N131072-s32"),
    pytest.param("row=group", FP16, FP32, FP32, 90, 65536, id="fp16-wfp32-ofp32-N65536"),
    pytest.param("row=group", BF16, None, BF16, 400, 32768, id="bf16-noweight-N32768"),
    pytest.param("row=group", FP32, BF16, BF16, 300, 32768, id="fp32-wbf16-obf16-N32768"),
    pytest.param("row=group,minb=3,ept=16", FP32, FP32, FP32, 21, 262144, id="minb3-fp32-N262144"),
    pytest.param("row=group,minb=3,ept=16", BF16, BF16, FP32, 45, 131072, id="minb3-bf16-N131072"),
    pytest.param("row=group,cta=512,minb=1", FP32, FP32, FP32, 150, 65536, id="cta512-fp32-N65536"),
]


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("override,xdt,wdt,odt,m,n", CASES)
def test_forward_group_rows(override, op, xdt, wdt, odt, m, n):
    x = rand((m, n), xdt)
    w = rand((n,), wdt) if wdt is not None else None
    b = rand((n,), wdt) if (wdt is not None and op == "layernorm") else None
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        _check_forward(f"{override} {op}", op, x, w, b, odt)


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_forward_group_rows_per_head_weights(op):
    # weight (H, D) with x (B, S, H, D): each row's parameters by head, from global memory.
    x = rand((3, 10, 4, 32768), FP32)
    w, b = rand((4, 32768), FP32), rand((4, 32768), FP32) if op == "layernorm" else None
    with plan_switch("NORMKIT_FORWARD_PLAN", "row=group"):
        _check_forward(f"per-head {op}", op, x, w, b, FP32)


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_forward_group_rows_strided_rows(op):
    # Rows 2N apart (a view of every other row): the slices' copies follow the stride.
    n = 65536
    x = rand((80, 2 * n), FP32)[:, :n]
    w, b = rand((n,), FP32), rand((n,), FP32) if op == "layernorm" else None
    with plan_switch("NORMKIT_FORWARD_PLAN", "row=group"):
        _check_forward(f"strided {op}", op, x, w, b, FP32)


RESIDUAL_CASES = [
    pytest.param(FP32, FP32, 45, 262144, id="fp32-rfp32-N262144"),
    pytest.param(FP32, FP32, 300, 32768, id="fp32-rfp32-N32768"),
    pytest.param(BF16, BF16, 60, 131072, id="bf16-rbf16-N131072"),
    pytest.param(BF16, FP32, 100, 65536, id="bf16-rfp32-N65536"),
]


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("xdt,rdt,m,n", RESIDUAL_CASES)
def test_forward_group_rows_residual(op, xdt, rdt, m, n):
    x, r = rand((m, n), xdt), rand((m, n), rdt)
    w, b = rand((n,), xdt), rand((n,), xdt)
    with plan_switch("NORMKIT_FORWARD_PLAN", "row=group"):
        forward_check(f"row=group {op}", op, x, w, b, r)


# The plans' own grouped rows (group_rows_measured): fp32, weight and bias of x's dtype,
# calls above the few-rows line; (op, residual, N).
OWN = [("rmsnorm", True, 262144), ("layernorm", True, 262144), ("layernorm", False, 262144)]


@pytest.mark.parametrize("op,residual,n", OWN)
def test_forward_group_rows_own_plan(op, residual, n):
    m = (1 << 21) // n + 3
    x = rand((m, n), FP32)
    r = rand((m, n), FP32) if residual else None
    w, b = rand((n,), FP32), rand((n,), FP32)
    forward_check(f"own plan {op}", op, x, w, b if op == "layernorm" else None, r)


@pytest.mark.parametrize("op,residual,n,override", [("rmsnorm", True, 262144, ""), ("layernorm", False, 262144, ""),
                                                    ("layernorm", True, 32768, "row=group"),
                                                    ("rmsnorm", False, 65536, "row=group,cta=512,minb=1")])
def test_forward_group_rows_timeout_same_bits(op, residual, n, override):
    # NORMKIT_SYNC_TIMEOUT_US=0: no CTA waits; each computes every slice's moments of
    # its rows from global memory with the slices' own arithmetic: the same bits.
    m = (1 << 21) // n + 3
    x = rand((m, n), FP32)
    r = rand((m, n), FP32) if residual else None
    w, b = rand((n,), FP32), rand((n,), FP32)

    def run():
        if op == "rmsnorm":
            return rmsnorm_fwd(x, w, residual=r, eps=EPS, store_rstd=True)
        out, res_out, _, rstd = layernorm_fwd(x, w, b, residual=r, eps=EPS, store_rstd=True, store_mean=True)
        return out, res_out, rstd

    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        waited = run()
        with plan_switch("NORMKIT_SYNC_TIMEOUT_US", "0"):
            computed = run()
    for name, a, c in zip(("out", "residual_out", "rstd"), waited, computed):
        if a is not None:
            assert torch.equal(a, c), f"{op} N={n}: {name} differs between waiting and computing (bitwise)"


def test_layernorm_group_rows_far_from_zero():
    # Rows of 1000 +- 1: the slices' means and M2 combined without cancellation.
    n = 262144
    x = 1000.0 + rand((12, n), FP32)
    w, b = rand((n,), FP32), rand((n,), FP32)
    _, _, mean, rstd = layernorm_fwd(x, w, b, eps=EPS, store_rstd=True, store_mean=True)
    _, _, _, mean_ref, rstd_ref = ln_ref_forward(x, w, b)
    check("mean 1000: mean", mean, mean_ref.reshape(mean.shape))
    check("mean 1000: rstd", rstd, rstd_ref.reshape(rstd.shape))


@pytest.mark.parametrize("timeout", ["2000", "0"], ids=["waiting", "timed-out"])
@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_fused_add_in_place_grouped(kind, timeout):
    # residual += x, x = norm(residual) on a shape the plans group: the in-place kernel
    # (COOPERATIVE, launched cooperatively) gives the out-of-place grouped call's bits.
    # It waits for its group with no deadline, so NORMKIT_SYNC_TIMEOUT_US=0 (every CTA of
    # the out-of-place call computes its rows' slice moments itself) changes nothing.
    m, n = 64, 262144
    x0, residual0 = rand((m, n), FP32), rand((m, n), FP32)
    w, b = rand((n,), FP32), rand((n,), FP32) if kind == "ln" else None
    y, res_ref = _fused_ref(kind, x0, residual0, w, b, 0.0)
    with plan_switch("NORMKIT_SYNC_TIMEOUT_US", timeout):
        if kind == "rms":
            out_ref, res_out_ref, _ = rmsnorm_fwd(x0, w, residual=residual0, eps=EPS)
        else:
            out_ref, res_out_ref, _, _ = layernorm_fwd(x0, w, b, residual=residual0, eps=EPS)
        for rep in range(3):
            x, residual = x0.clone(), residual0.clone()
            with torch.no_grad():
                assert _fused(kind, x, residual, w, b, 0.0) is None
            assert torch.equal(residual, res_out_ref), f"{kind} rep {rep}: residual differs from out of place"
            assert torch.equal(x, out_ref), f"{kind} rep {rep}: x differs from out of place"
    check_exact(f"{kind}: residual (in place)", residual, res_ref)
    check(f"{kind}: x (in place)", x, y)


def test_group_rows_switched_off_same_result():
    # NORMKIT_GROUP_ROWS=0 gives the plans from before grouped rows: the same values
    # within the kernels' tolerance (different reduction orders).
    n = 262144
    x, r = rand((12, n), FP32), rand((12, n), FP32)
    w = rand((n,), FP32)
    with plan_switch("NORMKIT_GROUP_ROWS", "0"):
        forward_check("NORMKIT_GROUP_ROWS=0", "rmsnorm", x, w, None, r)


def test_forward_group_rows_in_a_cuda_graph():
    n = 262144
    x, r = rand((9, n), FP32), rand((9, n), FP32)
    w = rand((n,), FP32)
    eager_out, eager_res, _ = rmsnorm_fwd(x, w, residual=r, eps=EPS, store_rstd=True)  # also compiles and loads
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out, res_out, _ = rmsnorm_fwd(x, w, residual=r, eps=EPS, store_rstd=True)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out), "graph replay: out differs from the eager call"
    assert torch.equal(res_out, eager_res), "graph replay: residual_out differs from the eager call"


# The in-place fused add's grouped rows in a CUDA graph: the cooperative kernel is
# captured as such a node, and its replays give the eager call's bits.
def test_fused_add_in_place_grouped_in_a_cuda_graph():
    n = 262144
    x0, residual0 = rand((9, n), FP32), rand((9, n), FP32)
    w = rand((n,), FP32)
    x_eager, residual_eager = x0.clone(), residual0.clone()
    with torch.no_grad():
        _fused("rms", x_eager, residual_eager, w, None, 0.0)  # also compiles and loads
        x, residual = x0.clone(), residual0.clone()
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                _fused("rms", x, residual, w, None, 0.0)
        x.copy_(x0)
        residual.copy_(residual0)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(residual, residual_eager), "graph replay: residual differs from the eager call"
    assert torch.equal(x, x_eager), "graph replay: x differs from the eager call"
