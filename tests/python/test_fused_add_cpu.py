"""normkit.torch fused_add_rmsnorm / fused_add_layernorm on CPU tensors: the in-place
semantics inference engines use (residual <- x + residual, x <- norm(residual), same
storage), the out-of-place form, Gemma's weight_offset, overlap errors, the mutating
custom ops under opcheck and torch.compile(fullgraph=True)."""

import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit.torch import fused_add_layernorm, fused_add_rmsnorm, layernorm, rmsnorm  # noqa: E402
from test_torch_cpu import FP, close, rnd  # noqa: E402

F = torch.nn.functional


def ref(kind, x, residual, weight, bias=None, eps=1e-6, weight_offset=0.0):
    """float64 (out, h)."""
    h = x.double() + residual.double()
    w = weight.double() + weight_offset if weight is not None else None
    if kind == "rms":
        y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)
        y = y * w if w is not None else y
    else:
        var, mean = torch.var_mean(h, dim=-1, correction=0, keepdim=True)
        y = (h - mean) * torch.rsqrt(var + eps)
        y = y * w if w is not None else y
    return (y + bias.double() if bias is not None else y), h


def run(kind, x, residual, weight, bias=None, eps=1e-6, weight_offset=0.0, **kw):
    if kind == "rms":
        return fused_add_rmsnorm(x, residual, weight, eps, weight_offset, bias=bias, **kw)
    assert weight_offset == 0.0
    return fused_add_layernorm(x, residual, weight, bias, eps, **kw)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


KINDS = ("rms", "ln")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FP)
@pytest.mark.parametrize("res_dtype", ["same", torch.float32])
@pytest.mark.parametrize("n", [1, 7, 256, 1000])
def test_in_place_semantics(kind, dtype, res_dtype, n):
    rd = dtype if res_dtype == "same" else res_dtype
    x, residual, w = rnd(5, n, dtype=dtype), rnd(5, n, dtype=rd), rnd(n, dtype=torch.float32)
    b = rnd(n, dtype=dtype) if kind == "ln" else None
    x0, r0 = x.clone(), residual.clone()
    x_ptr, r_ptr = x.data_ptr(), residual.data_ptr()
    assert run(kind, x, residual, w, b) is None
    y, h = ref(kind, x0, r0, w, b)
    assert x.data_ptr() == x_ptr and residual.data_ptr() == r_ptr  # same storage, updated in place
    assert x.dtype == dtype and residual.dtype == rd
    close(residual, h)
    close(x, y, scale=2)


@pytest.mark.parametrize("kind", KINDS)
def test_matches_the_out_of_place_norm(kind):
    x, residual, w = rnd(9, 300, dtype=torch.bfloat16), rnd(9, 300, dtype=torch.bfloat16), rnd(300)
    if kind == "rms":
        want = rmsnorm(x, w, residual=residual, prenorm=True)
    else:
        want = layernorm(x, w, residual=residual, prenorm=True)
    got = run(kind, x.clone(), residual.clone(), w, inplace=False)
    for g, e in zip(got, want):
        assert torch.equal(g, e)
    xi, ri = x.clone(), residual.clone()
    run(kind, xi, ri, w)
    # In place is the same computation, bit for bit.
    assert torch.equal(xi, want[0]) and torch.equal(ri, want[1])


def test_out_of_place_leaves_inputs_and_is_differentiable():
    x, residual, w = rnd(4, 32).requires_grad_(), rnd(4, 32).requires_grad_(), rnd(32).requires_grad_()
    x0, r0 = x.detach().clone(), residual.detach().clone()
    out, res_out = fused_add_rmsnorm(x, residual, w, 1e-6, inplace=False)
    assert torch.equal(x.detach(), x0) and torch.equal(residual.detach(), r0)
    (out.sum() + res_out.sum()).backward()
    assert x.grad is not None and w.grad is not None and residual.grad is not None


@pytest.mark.parametrize("dtype", FP)
def test_gemma_weight_offset(dtype):
    x, residual = rnd(6, 128, dtype=dtype), rnd(6, 128, dtype=dtype)
    w = rnd(128, dtype=dtype, scale=0.1)  # Gemma stores w - 1
    x0, r0 = x.clone(), residual.clone()
    fused_add_rmsnorm(x, residual, w, 1e-6, weight_offset=1.0)
    y, h = ref("rms", x0, r0, w, weight_offset=1.0)
    close(residual, h)
    close(x, y, scale=2)


@pytest.mark.parametrize("kind", KINDS)
def test_per_head_and_strided_views(kind):
    buf_x, buf_r = rnd(4, 3, 16), rnd(4, 3, 16)
    x, residual = buf_x[:, :2, :], buf_r[:, 1:, :]  # (4, 2, 16) views, rows not contiguous
    w = rnd(2, 16)
    x0, r0, bx, br = x.clone(), residual.clone(), buf_x.clone(), buf_r.clone()
    run(kind, x, residual, w)
    y, h = ref(kind, x0, r0, w)
    close(residual, h)
    close(x, y, scale=2)
    assert torch.equal(buf_x[:, 2, :], bx[:, 2, :]) and torch.equal(buf_r[:, 0, :], br[:, 0, :])


def test_rows_needing_a_copy_are_written_back():
    x = rnd(3, 4, 5, 8).permute(2, 0, 1, 3)[..., :]  # three non-mergeable leading dims
    residual = rnd(5, 3, 4, 8)
    x0, r0 = x.clone(), residual.clone()
    fused_add_rmsnorm(x, residual, None)
    y, h = ref("rms", x0, r0, None)
    close(residual, h)
    close(x, y, scale=2)


def test_interleaved_views_do_not_overlap_but_aliases_do():
    buf = rnd(6, 2, 32)
    fused_add_rmsnorm(buf[:, 0], buf[:, 1], None)  # rows interleave, no byte shared: accepted
    t = rnd(6, 32)
    with pytest.raises(normkit.NormkitError, match="'x' and 'residual' overlap"):
        fused_add_rmsnorm(t, t, None)
    with pytest.raises(normkit.NormkitError, match="'x' and 'residual' overlap"):
        fused_add_layernorm(t[1:], t[:-1], None)
    w = rnd(32)
    x = rnd(6, 32)
    with pytest.raises(normkit.NormkitError, match="'weight' overlaps 'x'"):
        fused_add_rmsnorm(x, rnd(6, 32), x[2])


def test_in_place_refuses_autograd():
    x = rnd(2, 8).requires_grad_()
    with pytest.raises(RuntimeError, match="no autograd"):
        fused_add_rmsnorm(x, rnd(2, 8), None)
    with torch.no_grad():
        fused_add_rmsnorm(x.detach(), rnd(2, 8), None)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: fused_add_rmsnorm(rnd(2, 8), rnd(3, 8), None), ValueError, "residual"),
    (lambda: fused_add_rmsnorm(rnd(2, 8), None, None), ValueError, "residual"),
    (lambda: fused_add_rmsnorm(rnd(2, 8), rnd(2, 8), rnd(7)), ValueError, "weight"),
    (lambda: fused_add_rmsnorm(rnd(2, 8), rnd(2, 8), None, weight_offset=1.0), ValueError, "weight_offset"),
    (lambda: fused_add_layernorm(rnd(2, 8), rnd(2, 8), rnd(8), rnd(4)), ValueError, "bias"),
])
def test_bad_arguments_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_empty_input():
    x, residual = torch.empty(0, 8), torch.empty(0, 8)
    fused_add_layernorm(x, residual, rnd(8))


@pytest.mark.parametrize("case", range(4))
def test_opcheck(case):
    m, n = 5, 24
    x, residual = rnd(m, n, dtype=torch.bfloat16), rnd(m, n)
    w, b = rnd(n), rnd(n, dtype=torch.bfloat16)
    cases = [
        (torch.ops.normkit.fused_add_rmsnorm.default, (x, residual, w, None, 1e-6, 0.0)),
        (torch.ops.normkit.fused_add_rmsnorm.default, (rnd(2, 3, n), rnd(2, 3, n), rnd(3, n), None, 1e-5, 1.0)),
        (torch.ops.normkit.fused_add_layernorm.default, (x, residual, w, b, 1e-6)),
        (torch.ops.normkit.fused_add_layernorm.default, (rnd(m, n), rnd(m, n), None, None, 1e-6)),
    ]
    op, args = cases[case]
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_mutating_op(backend):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()

    def layer(x, residual, w, b):
        # One decoder step's shape: norm in place, then use both tensors.
        fused_add_rmsnorm(x, residual, w, 1e-6, weight_offset=1.0)
        y = x * 2
        fused_add_layernorm(y, residual, w, b, 1e-5)
        return y + 1

    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(layer, fullgraph=True, backend=counter)
    for m in (6, 11, 17):
        x, residual, w, b = rnd(m, 64, dtype=torch.bfloat16), rnd(m, 64), rnd(64), rnd(64)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(residual, 0)
        xe, re = x.clone(), residual.clone()
        got = compiled(x, residual, w, b)
        want = layer(xe, re, w, b)
        torch.testing.assert_close(got, want)
        # The mutations are visible to the caller, as in eager.
        torch.testing.assert_close(x, xe)
        torch.testing.assert_close(residual, re)
    assert counter.frame_count == 1


def test_lazy_names_on_the_package():
    assert normkit.fused_add_rmsnorm is fused_add_rmsnorm
    assert normkit.fused_add_layernorm is fused_add_layernorm
