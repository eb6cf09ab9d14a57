"""normkit.torch on CPU tensors (the C++ CPU fallback): values against a float64
reference, autograd, custom-op checks, torch.compile and argument errors."""

import logging

import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit.torch import RMSNorm, rmsnorm, rmsnorm_bwd, rmsnorm_fwd  # noqa: E402

FP = (torch.float32, torch.float16, torch.bfloat16)
# (rtol, atol) of a value rounded to this dtype against the exact result.
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


def close(actual, expected, dtype=None, scale=1.0):
    rtol, atol = TOL[dtype or actual.dtype]
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol * scale, atol=atol * scale)


def ref_fwd(x, weight=None, bias=None, residual=None, eps=1e-6, weight_offset=0.0):
    """float64: (out, h, rstd)."""
    h = x.double() + (residual.double() if residual is not None else 0)
    rstd = torch.rsqrt(h.square().mean(-1) + eps)
    y = h * rstd[..., None]
    if weight is not None:
        y = y * (weight.double() + weight_offset)
    if bias is not None:
        y = y + bias.double()
    return y, h, rstd


def rnd(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float32) * scale).to(dtype)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------------------
# forward values


@pytest.mark.parametrize("dtype", FP)
@pytest.mark.parametrize("wdtype", [None, "same", torch.float32])
@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("m", [1, 5])
def test_forward_matches_reference(dtype, wdtype, n, m):
    x = rnd(m, n, dtype=dtype, scale=3.0)
    w = None if wdtype is None else rnd(n, dtype=dtype if wdtype == "same" else wdtype)
    out, res_out, rstd = rmsnorm_fwd(x, w, store_rstd=True)
    y, _, r = ref_fwd(x, w)
    assert out.dtype == dtype and out.shape == x.shape
    close(out, y)
    torch.testing.assert_close(rstd.double(), r, rtol=1e-5, atol=0)
    assert res_out is x  # no residual, no dtype change
    close(rmsnorm(x, w), y)


@pytest.mark.parametrize("dtype", FP)
@pytest.mark.parametrize("res_dtype", [None, torch.float32, torch.bfloat16])
def test_residual_prenorm_and_dtypes(dtype, res_dtype):
    x = rnd(3, 4, 96, dtype=dtype)
    residual = rnd(3, 4, 96, dtype=torch.float16)
    w, b = rnd(96), rnd(96, dtype=torch.bfloat16)
    out, res_out = rmsnorm(x, w, b, residual, out_dtype=torch.float32, residual_dtype=res_dtype, eps=1e-5,
                           prenorm=True)
    y, h, _ = ref_fwd(x, w, b, residual, eps=1e-5)
    assert out.dtype == torch.float32
    assert res_out.dtype == (res_dtype or torch.float16)
    close(res_out, h)
    # The output is computed from h in fp32, not from the rounded residual_out.
    close(out, y, dtype=torch.float32, scale=10)
    out2, res_out2, rstd = rmsnorm_fwd(x, w, b, residual, torch.float32, res_dtype, 1e-5, store_rstd=True)
    torch.testing.assert_close(out2, out)
    torch.testing.assert_close(res_out2, res_out)
    assert rstd.shape == (3, 4) and rstd.dtype == torch.float32


def test_residual_dtype_without_residual_writes_residual_out():
    x = rnd(4, 32, dtype=torch.bfloat16)
    out, res_out, rstd = rmsnorm_fwd(x, residual_dtype=torch.float32)
    assert res_out is not x and res_out.dtype == torch.float32
    torch.testing.assert_close(res_out, x.float())
    assert rstd is None
    out, res_out = rmsnorm(x, prenorm=True)
    assert res_out is x


@pytest.mark.parametrize("offset", [1.0, -0.5])
def test_weight_offset(offset):
    x, w = rnd(6, 40), rnd(40)
    close(rmsnorm(x, w, weight_offset=offset), ref_fwd(x, w, weight_offset=offset)[0])


@pytest.mark.parametrize("with_bias", [False, True])
def test_per_head_weight(with_bias):
    heads, d = 4, 24
    x = rnd(2, 3, heads, d)
    w = rnd(heads, d)
    b = rnd(heads, d) if with_bias else None
    out = rmsnorm(x, w, b)
    close(out, ref_fwd(x, w, b)[0])


def test_bias_without_weight():
    x, b = rnd(5, 16), rnd(16)
    close(rmsnorm(x, bias=b), ref_fwd(x, bias=b)[0])


def test_strided_rows_without_copy(caplog):
    big = rnd(8, 200)
    x = big[:, 10:138]  # row stride 200
    qkv = rnd(5, 3 * 4, 32)
    q = qkv[:, :4, :]  # two-level rows: (5, 4) with strides (384, 32)
    res = rnd(5, 4, 32)
    w = rnd(32)
    with caplog.at_level(logging.WARNING, logger="normkit"):
        w128 = rnd(128)
        close(rmsnorm(x, w128), ref_fwd(x, w128)[0])
        close(rmsnorm(q, w, residual=res), ref_fwd(q, w, residual=res)[0])
        # a broadcast (stride 0) residual is an input too
        r0 = rnd(1, 1, 32).expand(5, 4, 32)
        close(rmsnorm(q, w, residual=r0), ref_fwd(q, w, residual=r0)[0])
    assert not [r for r in caplog.records if "copying" in r.getMessage()]


def test_inexpressible_rows_are_copied_and_logged_once(caplog):
    base = rnd(4, 6, 8, 16)
    x = base[::2, ::2, ::2, :]  # three leading levels that do not merge
    with caplog.at_level(logging.WARNING, logger="normkit"):
        for _ in range(3):
            close(rmsnorm(x), ref_fwd(x)[0])
    copies = [r for r in caplog.records if "copying" in r.getMessage()]
    assert len(copies) <= 1  # at most once per process (another test may have logged it first)
    if copies:
        assert "NORMKIT_LOG" in copies[0].getMessage() and "x" in copies[0].getMessage()


@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16), (3, 0)])
def test_empty_input(shape):
    x = torch.empty(shape)
    out, res_out, rstd = rmsnorm_fwd(x, residual=torch.empty(shape), store_rstd=True)
    assert out.shape == shape and res_out.shape == shape and rstd.shape == shape[:-1]
    w = torch.ones(shape[-1], requires_grad=True)
    xg = x.clone().requires_grad_()
    rmsnorm(xg, w).sum().backward()
    assert xg.grad.shape == shape and w.grad.shape == (shape[-1],)
    assert torch.count_nonzero(w.grad) == 0


# ---------------------------------------------------------------------------
# backward values and autograd


def ref_grads(x, w, b, residual, dout, dres_out=None, eps=1e-6, weight_offset=0.0, prenorm=False):
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b, residual)]
    y, h, _ = ref_fwd(*leaves, eps=eps, weight_offset=weight_offset)
    loss = (y * dout.double()).sum()
    if prenorm and dres_out is not None:
        loss = loss + (h * dres_out.double()).sum()
    targets = [t for t in leaves if t is not None]
    grads = torch.autograd.grad(loss, targets)
    it = iter(grads)
    return [next(it) if t is not None else None for t in leaves]


@pytest.mark.parametrize("dtype,wdtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.float16)])
@pytest.mark.parametrize("features", ["", "bias", "residual", "bias,residual,prenorm", "offset"])
def test_autograd_matches_reference(dtype, wdtype, features):
    m, n = 7, 80
    x = rnd(m, n, dtype=dtype).requires_grad_()
    w = rnd(n, dtype=wdtype).requires_grad_()
    b = rnd(n, dtype=wdtype).requires_grad_() if "bias" in features else None
    r = rnd(m, n, dtype=torch.float32).requires_grad_() if "residual" in features else None
    prenorm = "prenorm" in features
    offset = 1.0 if "offset" in features else 0.0
    dout = rnd(m, n, dtype=dtype)
    dres = rnd(m, n) if prenorm else None
    result = rmsnorm(x, w, b, r, prenorm=prenorm, weight_offset=offset)
    if prenorm:
        out, res_out = result
        torch.autograd.backward([out, res_out], [dout, dres.to(res_out.dtype)])
    else:
        result.backward(dout)
    gx, gw, gb, gr = ref_grads(x, w, b, r, dout, dres, weight_offset=offset, prenorm=prenorm)
    scale = 4.0  # h (and so the backward's input) is rounded once more than the reference
    close(x.grad, gx, dtype=dtype, scale=scale)
    assert x.grad.dtype == dtype
    close(w.grad, gw, dtype=wdtype, scale=scale * m ** 0.5)
    if b is not None:
        close(b.grad, gb, dtype=wdtype, scale=scale * m ** 0.5)
    if r is not None:
        assert r.grad.dtype == torch.float32
        close(r.grad, gr, dtype=dtype, scale=scale)


def test_per_head_gradients():
    x = rnd(3, 4, 16).requires_grad_()
    w = rnd(4, 16).requires_grad_()
    b = rnd(4, 16).requires_grad_()
    dout = rnd(3, 4, 16)
    rmsnorm(x, w, b).backward(dout)
    gx, gw, gb, _ = ref_grads(x, w, b, None, dout)
    close(x.grad, gx)
    close(w.grad, gw, scale=4)
    close(b.grad, gb, scale=4)
    bias_only = rnd(4, 16).requires_grad_()
    rmsnorm(x.detach(), bias=bias_only).backward(dout)
    close(bias_only.grad, dout.sum(0))


def test_gradient_only_through_residual_out():
    x, w, r = rnd(4, 16).requires_grad_(), rnd(16).requires_grad_(), rnd(4, 16).requires_grad_()
    _, res_out = rmsnorm(x, w, residual=r, prenorm=True)
    res_out.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    torch.testing.assert_close(r.grad, torch.ones_like(r))
    torch.testing.assert_close(w.grad, torch.zeros_like(w))


def test_op_without_stored_rstd_or_residual_out_still_differentiates():
    # A direct op call may skip rstd and residual_out; the backward rebuilds them.
    x, w, r = rnd(5, 24).requires_grad_(), rnd(24).requires_grad_(), rnd(5, 24).requires_grad_()
    dout = rnd(5, 24)
    out, _, _ = torch.ops.normkit.rmsnorm_fwd(x, w, None, r, None, None, 1e-6, 0.0, False, False)
    out.backward(dout)
    gx, gw, _, gr = ref_grads(x, w, None, r, dout)
    close(x.grad, gx, scale=4)
    close(w.grad, gw, scale=4)
    close(r.grad, gr, scale=4)


def test_rmsnorm_bwd_function():
    m, n = 9, 48
    x, w, dout = rnd(m, n), rnd(n), rnd(m, n)
    _, _, rstd = rmsnorm_fwd(x, w, store_rstd=True)
    dx, dw, db, dres = rmsnorm_bwd(x, w, dout, rstd, has_bias=True, has_residual=True)
    gx, gw, gb, _ = ref_grads(x, w, torch.zeros(n), None, dout)
    close(dx, gx)
    close(dw, gw, scale=4)
    close(db, gb, scale=4)
    assert dres is dx
    dres_out = rnd(m, n, dtype=torch.bfloat16)
    dx2, dw2, db2, dres2 = rmsnorm_bwd(x, None, dout, rstd, dresidual_out=dres_out, has_residual=True)
    assert dw2 is None and db2 is None and dres2.dtype == torch.bfloat16
    gx2 = ref_grads(x, None, None, None, dout)[0] + dres_out.double()
    close(dx2, gx2)
    close(dres2, gx2)


# ---------------------------------------------------------------------------
# float64 (CPU fallback only): the real op computed in double, under gradcheck

# torch.autograd.gradcheck's own defaults. The CPU fallback computes fp64 calls in
# double; the one fp32 quantity is the saved rstd (fp32 in the API), which puts
# the analytical gradients ~1e-7 (relative) from exact: far inside these.
GRADCHECK = dict(eps=1e-6, atol=1e-5, rtol=1e-3)


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


GRADCHECK_CASES = {
    "plain": dict(),
    "weight": dict(weight=True),
    "weight,bias": dict(weight=True, bias=True),
    "weight,residual": dict(weight=True, residual=True),
    "weight,bias,residual,prenorm": dict(weight=True, bias=True, residual=True, prenorm=True),
    "residual,prenorm": dict(residual=True, prenorm=True),
    "bias": dict(bias=True),
    "weight_offset": dict(weight=True, bias=True, weight_offset=1.0),
    "per-head": dict(weight=True, bias=True, residual=True, prenorm=True, heads=4),
    "per-head bias only": dict(bias=True, heads=4),
}


@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck_float64(case):
    c = GRADCHECK_CASES[case]
    heads = c.get("heads", 0)
    n = 12
    x = _f64(3, heads, n) if heads else _f64(5, n)
    pshape = (heads, n) if heads else (n,)
    inputs = {"x": x}
    if c.get("weight"):
        inputs["weight"] = _f64(*pshape)
    if c.get("bias"):
        inputs["bias"] = _f64(*pshape)
    if c.get("residual"):
        inputs["residual"] = _f64(*x.shape)
    names = list(inputs)
    prenorm = c.get("prenorm", False)

    def f(*tensors):
        result = rmsnorm(**dict(zip(names, tensors)), eps=1e-5, prenorm=prenorm,
                         weight_offset=c.get("weight_offset", 0.0))
        for t in result if prenorm else (result,):
            assert t.dtype == torch.float64  # the genuine op, no cast around it
        return result

    assert torch.autograd.gradcheck(f, tuple(inputs.values()), **GRADCHECK)


def test_gradcheck_float64_through_the_custom_op():
    # The dispatcher path (torch.ops and its registered autograd) rather than the
    # eager autograd.Function that rmsnorm() takes.
    def f(x, w, b, r):
        out, res_out, _rstd = torch.ops.normkit.rmsnorm_fwd(x, w, b, r, None, None, 1e-6, 0.5, True, True)
        return out, res_out

    assert torch.autograd.gradcheck(f, (_f64(4, 10), _f64(10), _f64(10), _f64(4, 10)), **GRADCHECK)


def test_float64_values_are_computed_in_double():
    m, n = 6, 1000
    x, r = torch.randn(m, n, dtype=torch.float64) * 3, torch.randn(m, n, dtype=torch.float64)
    w, b = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
    eps = 2.0 ** -17  # exact in fp32, as the C++ API passes eps
    out, res_out, rstd = rmsnorm_fwd(x, w, b, r, eps=eps, store_rstd=True)
    y, h, ref_rstd = ref_fwd(x, w, b, r, eps=eps)
    assert out.dtype == res_out.dtype == torch.float64 and rstd.dtype == torch.float32
    # An fp32 step anywhere would show as ~1e-7; double alone stays near 1e-15.
    torch.testing.assert_close(out, y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res_out, h, rtol=0, atol=0)
    torch.testing.assert_close(rstd, ref_rstd.float(), rtol=0, atol=0)  # fp32 in the API: rounded once
    # Backward against the formula of rmsnorm_bwd, in double with the same fp32 rstd.
    dout = torch.randn_like(x)
    dx, dw, db, _ = rmsnorm_bwd(res_out, w, dout, rstd, has_bias=True)
    rs = rstd.double()[:, None]
    xhat, g = h * rs, dout * w
    torch.testing.assert_close(dx, rs * (g - xhat * (g * xhat).mean(-1, keepdim=True)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dw, (dout * xhat).sum(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, dout.sum(0), rtol=1e-12, atol=1e-12)


def test_float64_mixed_with_float32_parameters():
    x, w = torch.randn(5, 64, dtype=torch.float64), torch.randn(64)
    out = rmsnorm(x, w)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref_fwd(x, w)[0], rtol=1e-12, atol=1e-12)


def test_float64_cuda_check_without_a_gpu():
    # The check behind the CUDA rejection below: CPU calls pass it.
    from normkit.torch import _impl

    assert _impl.dtype_name(torch.float64, "x") == "fp64"
    with pytest.raises(TypeError, match="weight: torch.float64 runs only on the CPU fallback"):
        _impl.dtype_name(torch.float64, "weight", cuda=True)


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["x", "weight", "out_dtype"])
def test_float64_cuda_tensors_are_rejected(which):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    x = torch.randn(4, 16, device="cuda", dtype=torch.float64 if which == "x" else torch.float32)
    w = torch.randn(16, device="cuda", dtype=torch.float64 if which == "weight" else torch.float32)
    with pytest.raises(TypeError, match=f"{which}: torch.float64 runs only on the CPU fallback"):
        rmsnorm(x, w, out_dtype=torch.float64 if which == "out_dtype" else None)


# ---------------------------------------------------------------------------
# custom ops


def _fwd_args(x, w=None, b=None, r=None, out_dtype=None, res_dtype=None, eps=1e-6, offset=0.0, rstd=True, res=True):
    return (x, w, b, r, out_dtype, res_dtype, eps, offset, rstd, res)


@pytest.mark.parametrize("case", range(6))
def test_opcheck_forward(case):
    m, n = 5, 24
    grad = case % 2 == 0
    x = rnd(m, n).requires_grad_(grad)
    w = rnd(n).requires_grad_(grad)
    b = rnd(n, dtype=torch.bfloat16)
    r = rnd(m, n, dtype=torch.float16).requires_grad_(grad)
    cases = [
        _fwd_args(x, w),
        _fwd_args(x, None, None, None, rstd=False, res=False),
        _fwd_args(x, w, b, r, torch.bfloat16, torch.float32, 1e-5, 1.0),
        _fwd_args(x.to(torch.bfloat16).requires_grad_(grad), w, None, r, res=True),
        _fwd_args(rnd(2, 3, 4, n).requires_grad_(grad), rnd(4, n).requires_grad_(grad), rstd=True, res=False),
        _fwd_args(x[:, :n // 2].detach().requires_grad_(grad), w[:n // 2].detach(), rstd=False, res=False),
    ]
    torch.library.opcheck(torch.ops.normkit.rmsnorm_fwd.default, cases[case])


@pytest.mark.parametrize("case", range(4))
def test_opcheck_backward(case):
    m, n = 6, 32
    x, w, dout = rnd(m, n), rnd(n), rnd(m, n, dtype=torch.bfloat16)
    rstd = torch.rand(m) + 0.5
    cases = [
        (x, w, dout, rstd, None, None, None, None, 0.0),
        (x, None, dout, rstd, None, torch.float16, torch.float32, None, 0.0),
        (x, w, dout, rstd, rnd(m, n), torch.bfloat16, torch.bfloat16, torch.float16, 1.0),
        (rnd(2, 3, 4, n), rnd(4, n), rnd(2, 3, 4, n), torch.rand(2, 3, 4) + 0.5, None, None, torch.float32, None, 0.0),
    ]
    torch.library.opcheck(torch.ops.normkit.rmsnorm_bwd.default, cases[case])


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_opcheck_float64(direction):
    # The fake implementations take float64 (shapes and dtypes only).
    m, n = 4, 16
    grad = direction == "forward"
    x = torch.randn(2, m, n, dtype=torch.float64, requires_grad=grad)
    w = torch.randn(n, dtype=torch.float64, requires_grad=grad)
    if direction == "forward":
        r = torch.randn(2, m, n, dtype=torch.float32)
        torch.library.opcheck(torch.ops.normkit.rmsnorm_fwd.default,
                              _fwd_args(x, w, w.detach(), r, None, torch.float64, 1e-6, 1.0))
    else:
        args = (x, w, torch.randn(2, m, n, dtype=torch.float64), torch.rand(2, m) + 0.5, torch.randn(2, m, n),
                torch.float64, torch.float64, torch.float32, 0.0)
        torch.library.opcheck(torch.ops.normkit.rmsnorm_bwd.default, args)


def test_direct_and_dispatcher_paths_agree():
    x, w, r = rnd(5, 40), rnd(40), rnd(5, 40)
    with torch.no_grad():
        direct = rmsnorm(x, w, residual=r, prenorm=True)
    via_op = torch.ops.normkit.rmsnorm_fwd(x, w, None, r, None, None, 1e-6, 0.0, False, True)
    torch.testing.assert_close(direct[0], via_op[0], rtol=0, atol=0)
    torch.testing.assert_close(direct[1], via_op[1], rtol=0, atol=0)


# ---------------------------------------------------------------------------
# torch.compile


def _compiled_matches_eager(fn, backend, make_inputs):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    for m in (6, 11, 17):
        inputs = make_inputs(m)
        for t in inputs:
            if t.dim() >= 2:  # every tensor with M rows
                torch._dynamo.mark_dynamic(t, 0)
        eager_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        got, want = compiled(*inputs), fn(*eager_in)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
        for a, b in zip(inputs, eager_in):
            if a.requires_grad:
                torch.testing.assert_close(a.grad, b.grad)
    assert counter.frame_count == 1  # one graph for every M: no recompile, no graph break


def compiled_prenorm_matches_eager(norm):
    """norm: rmsnorm or layernorm (test_layernorm_cpu.py uses this too)."""
    torch._dynamo.reset()

    def fn(x, w, b, r):
        out, res_out = norm(x * 2, w, b, r, eps=1e-5, prenorm=True)
        return out.float() + res_out.float()

    def make(m):
        return [rnd(m, 64, dtype=torch.bfloat16).requires_grad_(), rnd(64).requires_grad_(),
                rnd(64).requires_grad_(), rnd(m, 64).requires_grad_()]

    _compiled_matches_eager(fn, "aot_eager", make)


def compiled_module_matches_eager(module):
    """module: a norm over the last 48 elements, under inductor."""
    torch._dynamo.reset()

    def fn(x):
        return module(x).relu()

    _compiled_matches_eager(fn, "inductor", lambda m: [rnd(m, 3, 48).requires_grad_()])


def test_compile_fullgraph_dynamic_m_aot_eager():
    compiled_prenorm_matches_eager(rmsnorm)


def test_compile_fullgraph_module_inductor():
    compiled_module_matches_eager(RMSNorm(48))


# ---------------------------------------------------------------------------
# RMSNorm module


@pytest.mark.parametrize("shape,normalized", [((4, 32), 32), ((2, 3, 8, 16), (8, 16))])
@pytest.mark.parametrize("eps", [None, 1e-5])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
# torch.nn.RMSNorm itself (the reference) warns that bf16 input and its fp32 weight
# miss its fused kernel (torch 2.15 on the CPU); nothing of ours.
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight:UserWarning")
def test_module_matches_torch(shape, normalized, eps, affine, dtype):
    ours = RMSNorm(normalized, eps=eps, elementwise_affine=affine)
    theirs = torch.nn.RMSNorm(normalized, eps=eps, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            theirs.weight.copy_(torch.randn_like(theirs.weight))
        ours.load_state_dict(theirs.state_dict())
    assert repr(ours).replace("RMSNorm", "") == repr(theirs).replace("RMSNorm", "")
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    x = rnd(*shape, dtype=dtype, scale=1e-3)  # small: eps=None must pick torch's epsilon
    got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype
    close(got, want, dtype=dtype, scale=2)


def test_module_reset_and_factory_kwargs():
    m = RMSNorm(8, dtype=torch.bfloat16)
    assert m.weight.dtype == torch.bfloat16 and torch.all(m.weight == 1)
    with torch.no_grad():
        m.weight.zero_()
    m.reset_parameters()
    assert torch.all(m.weight == 1)
    with pytest.raises(ValueError, match="input"):
        m(torch.randn(2, 9, dtype=torch.bfloat16))


# ---------------------------------------------------------------------------
# errors


@pytest.mark.parametrize("call,exc,words", [
    (lambda: rmsnorm(torch.randn(2, 8).to(torch.int32)), TypeError, "x: unsupported dtype"),
    (lambda: rmsnorm(torch.randn(2, 8), torch.randn(8, dtype=torch.complex64)), TypeError, "weight"),
    (lambda: rmsnorm(torch.randn(2, 8), torch.randn(7)), ValueError, "weight"),
    (lambda: rmsnorm(torch.randn(2, 8), torch.randn(3, 8)), ValueError, "per-head"),
    (lambda: rmsnorm(torch.randn(2, 8), torch.randn(8), torch.randn(4)), ValueError, "bias"),
    (lambda: rmsnorm(torch.randn(2, 8), residual=torch.randn(3, 8)), ValueError, "residual"),
    (lambda: rmsnorm(torch.randn(8, 2).t()), ValueError, "x: the last dimension must be contiguous"),
    (lambda: rmsnorm(torch.randn(2, 8), out_dtype=torch.int32), TypeError, "out_dtype"),
    (lambda: rmsnorm(torch.randn(2, 8), residual_dtype=torch.int64), TypeError, "residual_dtype"),
    (lambda: rmsnorm(torch.randn(2, 8), weight_offset=1.0), ValueError, "weight_offset"),
    (lambda: rmsnorm(torch.randn(2, 8), torch.randn(8, device="meta")), ValueError, "weight is on meta"),
    (lambda: rmsnorm(torch.tensor(1.0)), ValueError, "x: expected a tensor with at least one dimension"),
])
def test_bad_arguments_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_cpp_errors_arrive_as_normkit_error():
    assert issubclass(normkit.NormkitError, RuntimeError)
    with pytest.raises(normkit.NormkitError, match="eps"):
        rmsnorm(torch.randn(2, 8), eps=-1.0)


def test_lazy_names_on_the_package():
    assert normkit.rmsnorm is rmsnorm and normkit.RMSNorm is RMSNorm
    assert normkit.rmsnorm_fwd is rmsnorm_fwd and normkit.rmsnorm_bwd is rmsnorm_bwd
    with pytest.raises(AttributeError):
        normkit.not_a_name  # noqa: B018


# Long rows: the fallback's row sums run in blocks (norm_cpu.cpp's lane_sum), so
# their rounding error does not grow with N. One block of eight lanes over a row
# of N=262144 put rstd 6.3e-6 (relative) off float64 and outputs near zero (a bias
# cancelling the normalized term) 1.9e-5 off, beyond the GPU tests' 1e-5.
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_long_row_statistics_stay_accurate(op):
    from normkit.torch import layernorm_fwd

    n, m = 262144, 8
    x, w, b = rnd(m, n, dtype=torch.bfloat16), rnd(n, dtype=torch.bfloat16), rnd(n, dtype=torch.bfloat16)
    h = x.double()
    if op == "rmsnorm":
        out, _, rstd = rmsnorm_fwd(x, w, bias=b, eps=1e-6, store_rstd=True)
        want_rstd = torch.rsqrt(h.square().mean(-1) + 1e-6)
        y = h * want_rstd[:, None] * w.double() + b.double()
    else:
        out, _, mean, rstd = layernorm_fwd(x, w, b, eps=1e-6, store_rstd=True, store_mean=True)
        var, mu = torch.var_mean(h, dim=-1, correction=0)
        want_rstd = torch.rsqrt(var + 1e-6)
        assert (mean.double() - mu).abs().max().item() < 1e-6
        y = (h - mu[:, None]) * want_rstd[:, None] * w.double() + b.double()
    assert ((rstd.double() - want_rstd) / want_rstd).abs().max().item() < 1e-6
    # out is bf16: its rounding (2^-9 relative) plus 1e-5 absolute, as the GPU tests allow.
    err = (out.double() - y).abs() - (y.abs() * 2.0**-8 + 1e-5)
    assert err.max().item() <= 0, f"{int((err > 0).sum())} outputs outside the tolerance"
