"""NORMKIT_FORWARD_PLAN's row=smem on the GPU: forward rows whose slice of x (and of the
residual) is staged in shared memory by cp.async instead of held in registers
(norm_fwd_kernel's SMEM_ROW, RowPlan::smem_row) compute what the planned kernels do,
within the same tolerance of the float64 reference: RMSNorm and LayerNorm, with and
without a residual, over clusters (N=65536 and 131072), in CTAs of several rows
(N=1024), in 256- and 512-thread CTAs, outputs poisoned first; and the in-place fused
add, whose residual_out is the residual it reads, bit-exact in the residual. Then the
plans that take it without an override (with_staged_rows: LayerNorm fp32 with a
residual, N=16385-131072 on sm_90), out of place and in place.
"""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive CUDA memory through PyTorch")

from normkit.torch import layernorm_fwd, rmsnorm_fwd  # noqa: E402
from test_layernorm_gpu import _fused, _fused_ref, ln_ref_forward  # noqa: E402
from test_rmsnorm_gpu import (  # noqa: E402,F401  (fixtures are used by name)
    BF16, EPS, FP32, _seed, check, check_exact, plan_switch, poison_next_allocations, pytestmark, rand,
    ref_forward)

OVERRIDES = ["row=smem", "row=smem,cta=256", "row=smem,ept=32,cta=512"]


@pytest.mark.parametrize("override", OVERRIDES)
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("xdt,m,n", [(BF16, 20, 65536), (FP32, 9, 131072), (BF16, 1030, 1024)],
                         ids=["bf16-N65536", "fp32-N131072", "bf16-N1024"])
def test_forward_smem_row(override, op, with_res, xdt, m, n):
    x = rand((m, n), xdt)
    r = rand((m, n), xdt) if with_res else None
    w, b = rand((n,), xdt), rand((n,), xdt)
    with plan_switch("NORMKIT_FORWARD_PLAN", override):
        forward_check(override, op, x, w, b, r)


def forward_check(label, op, x, w, b, r):
    """op's forward of x (+ r) with weight w (and LayerNorm's bias b), storing the
    statistics, outputs poisoned first: out and rstd against the float64 reference,
    residual_out bit-exact where there is a residual."""
    poison_next_allocations((x.shape, x.dtype), (x.shape, (r if r is not None else x).dtype),
                            (x.shape[:-1], FP32), (x.shape[:-1], FP32))
    if op == "rmsnorm":
        y, h, _, rstd_ref = ref_forward(x, w, residual=r)
        out, res_out, rstd = rmsnorm_fwd(x, w, residual=r, eps=EPS, store_rstd=True)
    else:
        y, h, _, _, rstd_ref = ln_ref_forward(x, w, b, residual=r)
        out, res_out, _, rstd = layernorm_fwd(x, w, b, residual=r, eps=EPS, store_rstd=True, store_mean=True)
    check(f"{label}: out", out, y)
    check(f"{label}: rstd", rstd, rstd_ref)
    if r is not None:
        check_exact(f"{label}: residual_out", res_out, h)


@pytest.mark.parametrize("override", OVERRIDES)
@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_fused_add_in_place_smem_row(override, kind):
    m, n = 12, 65536
    x, residual = rand((m, n), BF16), rand((m, n), BF16)
    w, b = rand((n,), BF16), rand((n,), BF16) if kind == "ln" else None
    y, res_ref = _fused_ref(kind, x, residual, w, b, 0.0)
    with plan_switch("NORMKIT_FORWARD_PLAN", override), torch.no_grad():
        assert _fused(kind, x, residual, w, b, 0.0) is None
    check_exact(f"{override}: residual (in place)", residual, res_ref)
    check(f"{override}: x (in place)", x, y)


# with_staged_rows' own plans: LayerNorm's fp32 rows with a residual, N=16385-131072
# (256-thread CTAs up to 32768), M*N above the calls of few rows.
@pytest.mark.parametrize("n", [20000, 32768, 65536, 131072])
def test_layernorm_fp32_residual_rows_staged(n):
    m = (1 << 21) // n + 5
    x, r = rand((m, n), FP32), rand((m, n), FP32)
    w, b = rand((n,), FP32), rand((n,), FP32)
    poison_next_allocations(((m, n), FP32), ((m, n), FP32), ((m,), FP32), ((m,), FP32))
    y, h, _, _, rstd_ref = ln_ref_forward(x, w, b, residual=r)
    out, res_out, _, rstd = layernorm_fwd(x, w, b, residual=r, eps=EPS, store_rstd=True, store_mean=True)
    check(f"N={n}: out", out, y)
    check(f"N={n}: rstd", rstd, rstd_ref)
    check_exact(f"N={n}: residual_out", res_out, h)
    y2, res_ref = _fused_ref("ln", x, r, w, b, 0.0)
    with torch.no_grad():
        assert _fused("ln", x, r, w, b, 0.0) is None
    check_exact(f"N={n}: residual (in place)", r, res_ref)
    check(f"N={n}: x (in place)", x, y2)
