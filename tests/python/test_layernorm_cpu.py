"""normkit.torch LayerNorm on CPU tensors (the C++ CPU fallback): values and
gradients against torch.nn.functional.layer_norm in float64, the custom ops
(opcheck), torch.compile(fullgraph=True), the LayerNorm module as a drop-in for
torch.nn.LayerNorm, and argument errors."""

import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit.torch import LayerNorm, layernorm, layernorm_bwd, layernorm_fwd  # noqa: E402
from test_torch_cpu import (  # noqa: E402
    FP, close, compiled_module_matches_eager, compiled_prenorm_matches_eager, rnd)

F = torch.nn.functional


def ref_fwd(x, weight=None, bias=None, residual=None, eps=1e-6):
    """float64: (out, h, mean, rstd), with torch's own layer_norm for out."""
    h = x.double() + (residual.double() if residual is not None else 0)
    var, mean = torch.var_mean(h, dim=-1, correction=0)
    w = weight.double() if weight is not None else None
    b = bias.double() if bias is not None else None
    if w is not None and w.dim() == 2:  # per-head: (..., H, N) * (H, N)
        y = (h - mean[..., None]) * torch.rsqrt(var + eps)[..., None] * w
        y = y + b if b is not None else y
    else:
        y = F.layer_norm(h, (h.shape[-1],), w, b, eps)
    return y, h, mean, torch.rsqrt(var + eps)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", FP)
@pytest.mark.parametrize("wdtype", [None, "same", torch.float32])
@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("m", [1, 5])
def test_forward_matches_reference(dtype, wdtype, n, m):
    x = rnd(m, n, dtype=dtype, scale=3.0)
    wd = dtype if wdtype == "same" else wdtype
    w = None if wdtype is None else rnd(n, dtype=wd)
    b = None if wdtype is None else rnd(n, dtype=wd)
    out, res_out, mean, rstd = layernorm_fwd(x, w, b, store_rstd=True, store_mean=True)
    y, _, mu, r = ref_fwd(x, w, b)
    assert out.dtype == dtype and out.shape == x.shape
    close(out, y)
    torch.testing.assert_close(mean.double(), mu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rstd.double(), r, rtol=1e-5, atol=0)
    assert res_out is x
    close(layernorm(x, w, b), y)


def test_variance_is_two_pass():
    # A large common offset: E[h^2] - mean^2 in fp32 would lose every digit of the variance.
    x = (torch.randn(4, 512, dtype=torch.float64) + 1e4).float()
    out = layernorm(x)
    y, *_ = ref_fwd(x)
    # fp32 mean of values ~1e4 carries ~1e-3 absolute error; E[h^2] - mean^2 would be off by ~100%.
    torch.testing.assert_close(out.double(), y, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", FP)
@pytest.mark.parametrize("res_dtype", [None, torch.float32, torch.bfloat16])
def test_residual_prenorm_and_dtypes(dtype, res_dtype):
    x = rnd(3, 4, 96, dtype=dtype)
    residual = rnd(3, 4, 96, dtype=torch.float16)
    w, b = rnd(96), rnd(96, dtype=torch.bfloat16)
    out, res_out = layernorm(x, w, b, residual, out_dtype=torch.float32, residual_dtype=res_dtype, eps=1e-5,
                             prenorm=True)
    y, h, _, _ = ref_fwd(x, w, b, residual, eps=1e-5)
    assert out.dtype == torch.float32 and res_out.dtype == (res_dtype or torch.float16)
    close(res_out, h)
    close(out, y, dtype=torch.float32, scale=10)


@pytest.mark.parametrize("with_bias", [False, True])
def test_per_head_weight(with_bias):
    x, w = rnd(3, 4, 16), rnd(4, 16)
    b = rnd(4, 16) if with_bias else None
    close(layernorm(x, w, b), ref_fwd(x, w, b)[0])


def test_strided_rows_and_empty_input():
    base = rnd(6, 3, 40)
    x, w = base[:, 1, :], rnd(40)  # rows 120 elements apart
    close(layernorm(x, w), ref_fwd(x, w)[0])
    for shape in [(0, 8), (2, 0, 8)]:
        out, _, mean, rstd = layernorm_fwd(torch.randn(shape), torch.randn(8), store_rstd=True, store_mean=True)
        assert out.shape == shape and mean.shape == shape[:-1] and rstd.shape == shape[:-1]


def ref_grads(x, w, b, residual, dout, dres_out=None, eps=1e-6):
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b, residual)]
    y, h, _, _ = ref_fwd(*leaves, eps=eps)
    loss = (y * dout.double()).sum()
    if dres_out is not None:
        loss = loss + (h * dres_out.double()).sum()
    loss.backward()
    return [t.grad if t is not None else None for t in leaves]


@pytest.mark.parametrize("dtype", FP)
@pytest.mark.parametrize("wdtype", [None, "same", torch.float32])
@pytest.mark.parametrize("features", ["plain", "residual", "prenorm"])
def test_autograd_matches_reference(dtype, wdtype, features):
    m, n = 7, 80
    x = rnd(m, n, dtype=dtype).requires_grad_()
    wd = dtype if wdtype == "same" else wdtype
    w = None if wdtype is None else rnd(n, dtype=wd).requires_grad_()
    b = None if wdtype is None else rnd(n, dtype=wd).requires_grad_()
    r = rnd(m, n, dtype=torch.float32).requires_grad_() if features != "plain" else None
    dout = rnd(m, n, dtype=dtype)
    dres = rnd(m, n) if features == "prenorm" else None
    if features == "prenorm":
        out, res_out = layernorm(x, w, b, r, prenorm=True)
        torch.autograd.backward((out, res_out), (dout, dres.to(res_out.dtype)))
    else:
        layernorm(x, w, b, r).backward(dout)
    want = ref_grads(x, w, b, r, dout, dres)
    for got, ref in zip((x, w, b, r), want):
        if got is not None:
            close(got.grad, ref, dtype=got.dtype, scale=4 * (m ** 0.5 if got.dim() == 1 else 1))


def test_layernorm_bwd_function_and_determinism():
    m, n = 33, 100
    x, w, dout, dres = rnd(m, n), rnd(n), rnd(m, n), rnd(m, n)
    _, _, mean, rstd = layernorm_fwd(x, w, store_rstd=True, store_mean=True)
    dx, dw, db, dr = layernorm_bwd(x, w, dout, mean, rstd, dres, has_bias=True, has_residual=True)
    gx, gw, gb, _ = ref_grads(x, w, torch.zeros(n), None, dout)
    close(dx, gx + dres.double(), scale=2)
    close(dw, gw, scale=6)
    close(db, gb, scale=6)
    assert dr is dx
    again = layernorm_bwd(x, w, dout, mean, rstd, dres, has_bias=True, has_residual=True)
    for a, c in zip((dx, dw, db), again):
        assert torch.equal(a, c)


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64)


@pytest.mark.parametrize("case", ["plain", "affine", "residual_prenorm", "per_head"])
def test_gradcheck_float64(case):
    m, n = 3, 9
    if case == "per_head":
        x, w, b = _f64(2, 3, n), _f64(3, n), _f64(3, n)
        args, fn = (x, w, b), lambda x, w, b: layernorm(x, w, b)
    elif case == "residual_prenorm":
        args = (_f64(m, n), _f64(n), _f64(n), _f64(m, n))

        def fn(x, w, b, r):
            out, res = layernorm(x, w, b, r, prenorm=True)
            return out + res.sin()
    elif case == "affine":
        args, fn = (_f64(m, n), _f64(n), _f64(n)), lambda x, w, b: layernorm(x, w, b)
    else:
        args, fn = (_f64(m, n),), lambda x: layernorm(x)
    args = tuple(a.requires_grad_() for a in args)
    # mean and rstd are stored as fp32 whatever the compute type: float64 to ~1e-7.
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, rtol=1e-4)


def _fwd_args(x, w=None, b=None, r=None, out_dtype=None, res_dtype=None, eps=1e-6, stats=True, res=True):
    return (x, w, b, r, out_dtype, res_dtype, eps, stats, res)


@pytest.mark.parametrize("case", range(5))
def test_opcheck_forward(case):
    m, n = 5, 24
    grad = case % 2 == 0
    x = rnd(m, n).requires_grad_(grad)
    w = rnd(n).requires_grad_(grad)
    b = rnd(n, dtype=torch.bfloat16).requires_grad_(grad)
    r = rnd(m, n, dtype=torch.float16).requires_grad_(grad)
    cases = [
        _fwd_args(x, w, b),
        _fwd_args(x, None, None, None, stats=False, res=False),
        _fwd_args(x, w, b, r, torch.bfloat16, torch.float32, 1e-5),
        _fwd_args(rnd(2, 3, 4, n).requires_grad_(grad), rnd(4, n).requires_grad_(grad), res=False),
        _fwd_args(x[:, :n // 2].detach().requires_grad_(grad), w[:n // 2].detach(), stats=False, res=False),
    ]
    torch.library.opcheck(torch.ops.normkit.layernorm_fwd.default, cases[case])


@pytest.mark.parametrize("case", range(3))
def test_opcheck_backward(case):
    m, n = 6, 32
    x, w, dout = rnd(m, n), rnd(n), rnd(m, n, dtype=torch.bfloat16)
    mean, rstd = torch.randn(m), torch.rand(m) + 0.5
    cases = [
        (x, w, dout, mean, rstd, None, None, None, None),
        (x, None, dout, mean, rstd, None, torch.float16, torch.float32, None),
        (x, w, dout, mean, rstd, rnd(m, n), torch.bfloat16, torch.bfloat16, torch.float16),
    ]
    torch.library.opcheck(torch.ops.normkit.layernorm_bwd.default, cases[case])


def test_compile_fullgraph_dynamic_m_aot_eager():
    compiled_prenorm_matches_eager(layernorm)


def test_compile_fullgraph_module_inductor():
    compiled_module_matches_eager(LayerNorm(48))


@pytest.mark.parametrize("shape,normalized", [((4, 32), 32), ((4, 32), (32,)), ((2, 3, 8, 16), (8, 16))])
@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_module_is_a_drop_in_for_torch(shape, normalized, affine, bias, dtype):
    theirs = torch.nn.LayerNorm(normalized, elementwise_affine=affine, bias=bias)
    ours = LayerNorm(normalized, elementwise_affine=affine, bias=bias)
    if affine:
        with torch.no_grad():
            for p in theirs.parameters():
                p.copy_(torch.randn_like(p))
        ours.load_state_dict(theirs.state_dict())  # same keys both ways
        theirs.load_state_dict(ours.state_dict())
    assert ours.eps == theirs.eps == 1e-5
    assert repr(ours) == repr(theirs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    x = rnd(*shape, dtype=dtype, scale=2.0)
    got = ours(x)
    want = theirs.to(dtype)(x) if dtype != torch.float32 else theirs(x)
    assert got.dtype == dtype
    close(got, want, dtype=dtype, scale=2)


def test_module_reset_and_factory_kwargs():
    m = LayerNorm(8, dtype=torch.bfloat16)
    assert m.weight.dtype == m.bias.dtype == torch.bfloat16
    with torch.no_grad():
        m.weight.zero_()
        m.bias.fill_(3)
    m.reset_parameters()
    assert torch.all(m.weight == 1) and torch.all(m.bias == 0)
    with pytest.raises(ValueError, match="input"):
        m(torch.randn(2, 9, dtype=torch.bfloat16))


@pytest.mark.parametrize("call,exc,words", [
    (lambda: layernorm(torch.randn(2, 8).to(torch.int32)), TypeError, "x: unsupported dtype"),
    (lambda: layernorm(torch.randn(2, 8), torch.randn(7)), ValueError, "weight"),
    (lambda: layernorm(torch.randn(2, 8), torch.randn(8), torch.randn(4)), ValueError, "bias"),
    (lambda: layernorm(torch.randn(2, 8), residual=torch.randn(3, 8)), ValueError, "residual"),
    (lambda: layernorm(torch.randn(8, 2).t()), ValueError, "x: the last dimension must be contiguous"),
    (lambda: layernorm_bwd(torch.randn(2, 8), None, torch.randn(2, 8), torch.randn(3), torch.rand(2)),
     ValueError, "mean"),
])
def test_bad_arguments_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_cpp_errors_arrive_as_normkit_error():
    with pytest.raises(normkit.NormkitError, match="eps"):
        layernorm(torch.randn(2, 8), eps=-1.0)


def test_lazy_names_on_the_package():
    assert normkit.layernorm is layernorm and normkit.LayerNorm is LayerNorm
    assert normkit.layernorm_fwd is layernorm_fwd and normkit.layernorm_bwd is layernorm_bwd
