"""normkit._torch_C, the eager path in C++: it is built where torch is, it gives
the same results as the custom ops (and as the Python path taken without it),
and its autograd node behaves like the custom op's (on CPU tensors)."""

import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit.torch import _ops, rmsnorm, rmsnorm_bwd, rmsnorm_fwd  # noqa: E402


def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_extension_is_built_and_shares_the_runtime():
    # The build had torch (requirements-dev.txt installs it first), so the eager
    # path must be the C++ one; it reaches the kernels through normkit._C's table.
    assert _ops._ext is not None, "normkit._torch_C was not built although torch is installed"
    assert type(normkit._C._c_api).__name__ == "PyCapsule"


def test_extension_is_used_only_under_the_torch_it_was_built_for(monkeypatch):
    from normkit import _torch_build

    assert _ops._load_ext() == (_ops._ext, "")
    monkeypatch.setattr(_torch_build, "TORCH_VERSION", "0.0.1")
    ext, why = _ops._load_ext()
    assert ext is None and "0.0.1" in why and torch.__version__ in why


def test_eager_autograd_records_the_cpp_node():
    x, w = rnd(4, 32).requires_grad_(), rnd(32).requires_grad_()
    assert "normkit::RmsNormFunction" in rmsnorm(x, w).grad_fn.name()
    with torch.no_grad():
        assert rmsnorm(x, w).grad_fn is None


# Every feature combination the autograd node handles, as (make inputs, call kwargs).
CASES = {
    "plain": lambda: (rnd(6, 40), rnd(40), None, None, {}),
    "no weight": lambda: (rnd(6, 40), None, None, None, {}),
    "bf16 x, fp32 weight, bias": lambda: (rnd(6, 40, dtype=torch.bfloat16), rnd(40), rnd(40), None, {}),
    "residual prenorm": lambda: (rnd(6, 40), rnd(40), None, rnd(6, 40), {"prenorm": True}),
    "fp16 residual_dtype fp32": lambda: (rnd(6, 40, dtype=torch.float16), rnd(40, dtype=torch.float16), None,
                                         rnd(6, 40, dtype=torch.float16),
                                         {"prenorm": True, "residual_dtype": torch.float32}),
    "per-head weight and bias": lambda: (rnd(3, 4, 16), rnd(4, 16), rnd(4, 16), None, {}),
    "per-head bias only": lambda: (rnd(3, 4, 16), None, rnd(4, 16), None, {}),
    "weight_offset, out_dtype": lambda: (rnd(6, 40), rnd(40), None, None,
                                         {"weight_offset": 1.0, "out_dtype": torch.bfloat16}),
    # x is a column slice of a wider leaf: rows 64 elements apart, no copy.
    "strided rows": lambda: (rnd(6, 64), rnd(40), None, None, {"_slice": 40}),
}


def _run(case, use_ext, monkeypatch):
    monkeypatch.setattr(_ops, "_ext", _ops._ext if use_ext else None)
    x, w, b, r, kw = case
    kw = dict(kw)
    cols = kw.pop("_slice", None)
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b, r)]
    inputs = list(leaves)
    if cols is not None:
        inputs[0] = leaves[0][:, :cols]
        assert not inputs[0].is_contiguous()
    result = rmsnorm(*inputs, **kw)
    outs = list(result) if isinstance(result, tuple) else [result]
    torch.manual_seed(1)
    grads_in = [torch.randn_like(o) for o in outs]
    torch.autograd.backward(outs, grads_in)
    return outs, [t.grad if t is not None else None for t in leaves]


@pytest.mark.parametrize("name", list(CASES))
def test_cpp_path_equals_python_path(name, monkeypatch):
    """Same kernels behind both paths, so the results must be identical, gradients included."""
    torch.manual_seed(0)
    case = CASES[name]()
    outs_cpp, grads_cpp = _run(case, True, monkeypatch)
    outs_py, grads_py = _run(case, False, monkeypatch)
    for a, b in zip(outs_cpp + grads_cpp, outs_py + grads_py):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_rmsnorm_fwd_and_bwd_functions_match_the_custom_ops():
    x, w, dout = rnd(5, 24), rnd(24), rnd(5, 24)
    out, res_out, rstd = rmsnorm_fwd(x, w, store_rstd=True)
    op_out, _, op_rstd = torch.ops.normkit.rmsnorm_fwd(x, w, None, None, None, None, 1e-6, 0.0, True, False)
    torch.testing.assert_close(out, op_out, rtol=0, atol=0)
    torch.testing.assert_close(rstd, op_rstd, rtol=0, atol=0)
    assert res_out is x
    dx, dw, db, dres = rmsnorm_bwd(x, w, dout, rstd, has_bias=True)
    op = torch.ops.normkit.rmsnorm_bwd(x, w, dout, rstd, None, None, torch.float32, None, 0.0)
    for a, b in zip((dx, dw, db), op[:3]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert dres is None


def test_backward_reads_a_strided_rstd_view_as_its_values():
    # rstd handed back as a column of a wider tensor: the C++ path once read it as
    # a flat array (wrong dx, no error); it must equal the contiguous call bitwise.
    x, w, dout = rnd(6, 64), rnd(64), rnd(6, 64)
    _, _, rstd = rmsnorm_fwd(x, w, store_rstd=True)
    wide = torch.zeros(6, 2)
    wide[:, 0] = rstd
    column = wide[:, 0]
    assert not column.is_contiguous()
    expected = rmsnorm_bwd(x, w, dout, rstd)
    got = rmsnorm_bwd(x, w, dout, column)
    for a, b in zip(expected[:2], got[:2]):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_rows_that_need_a_copy_take_the_custom_op():
    # Three separately strided leading dims: not expressible with two strides.
    base = rnd(4, 3, 5, 32)
    x = base[:, :2, :4].detach().requires_grad_()
    w = rnd(32).requires_grad_()
    y = rmsnorm(x, w)
    assert "normkit::RmsNormFunction" not in y.grad_fn.name()
    y.sum().backward()
    xc = x.detach().contiguous().requires_grad_()
    wc = w.detach().clone().requires_grad_()
    rmsnorm(xc, wc).sum().backward()
    torch.testing.assert_close(x.grad, xc.grad, rtol=0, atol=0)
    torch.testing.assert_close(w.grad, wc.grad, rtol=0, atol=0)


def test_double_backward_is_refused_clearly():
    x, w = rnd(3, 16).requires_grad_(), rnd(16).requires_grad_()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(rmsnorm(x, w).sum(), (x, w), create_graph=True)


def test_operator_errors_arrive_as_normkit_error():
    # A negative eps passes the argument checks; the operator's validation refuses it.
    with pytest.raises(normkit.NormkitError, match="eps"):
        _ops._ext.rmsnorm_fwd(rnd(2, 8), None, None, None, None, None, -1.0, 0.0, False, False, False)
    with pytest.raises(normkit.NormkitError, match="eps"):
        _ops._ext.rmsnorm(rnd(2, 8), None, None, None, None, None, -1.0, False, 0.0)


# rmsnorm_bwd's checks, likewise: (x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype).
def _bwd_args(**change):
    x = rnd(3, 8)
    args = dict(x=x, weight=rnd(8), dout=rnd(3, 8), rstd=torch.ones(3), dresidual_out=None, dx_dtype=None,
                dbias_dtype=None, dresidual_dtype=None)
    args.update(change)
    return args


BAD_BWD_CALLS = {
    "int x": dict(x=rnd(3, 8).to(torch.int32)),
    "weight length": dict(weight=rnd(7)),
    "dout shape": dict(dout=rnd(3, 7)),
    "dout dtype": dict(dout=rnd(3, 8).to(torch.int16)),
    "dout last dim": dict(dout=rnd(8, 3).t()),
    "dresidual_out shape": dict(dresidual_out=rnd(2, 8)),
    "rstd dtype": dict(rstd=torch.ones(3, dtype=torch.float16)),
    "rstd length": dict(rstd=torch.ones(4)),
    "rstd on meta": dict(rstd=torch.ones(3, device="meta")),
    "dbias_dtype": dict(dbias_dtype=torch.int32),
}


@pytest.mark.parametrize("name", list(BAD_BWD_CALLS))
def test_backward_fast_path_hands_bad_calls_back_to_python(name):
    a = _bwd_args(**BAD_BWD_CALLS[name])
    assert _ops._ext.rmsnorm_bwd(*a.values(), 0.0) is None
    with pytest.raises((TypeError, ValueError)):
        if a["dbias_dtype"] is not None:  # the public function derives dbias's dtype; the op takes one
            torch.ops.normkit.rmsnorm_bwd(*a.values(), 0.0)
        else:
            rmsnorm_bwd(a["x"], a["weight"], a["dout"], a["rstd"], a["dresidual_out"])


def test_gradient_with_other_strides_than_the_input():
    x, w = rnd(6, 32).requires_grad_(), rnd(32).requires_grad_()
    y = rmsnorm(x, w)
    dout = rnd(32, 6).t()  # last dim not unit-stride: made contiguous for the kernel
    (gx,) = torch.autograd.grad(y, (x,), dout)
    y2 = rmsnorm(x, w)
    (want,) = torch.autograd.grad(y2, (x,), dout.contiguous())
    torch.testing.assert_close(gx, want, rtol=0, atol=0)


# normkit.torch.rmsnorm's C++ fast path checks its arguments itself and hands a
# call back to Python (None) on anything the Python checks would refuse, so that
# Python raises the error naming the argument. Each case here is one such call.
BAD_CALLS = {
    "int x": lambda: (rnd(2, 8).to(torch.int32), None, None, None, None, None, 0.0),
    "complex weight": lambda: (rnd(2, 8), torch.randn(8, dtype=torch.complex64), None, None, None, None, 0.0),
    "weight length": lambda: (rnd(2, 8), rnd(7), None, None, None, None, 0.0),
    "per-head weight without heads": lambda: (rnd(2, 8), rnd(3, 8), None, None, None, None, 0.0),
    "3-d weight": lambda: (rnd(2, 3, 8), rnd(1, 3, 8), None, None, None, None, 0.0),
    "bias shape": lambda: (rnd(2, 8), rnd(8), rnd(4), None, None, None, 0.0),
    "bias vs weight shape": lambda: (rnd(2, 3, 8), rnd(3, 8), rnd(8), None, None, None, 0.0),
    "residual shape": lambda: (rnd(2, 8), None, None, rnd(3, 8), None, None, 0.0),
    "residual dtype": lambda: (rnd(2, 8), None, None, rnd(2, 8).to(torch.int16), None, None, 0.0),
    "residual last dim": lambda: (rnd(2, 8), None, None, rnd(8, 2).t(), None, None, 0.0),
    "x last dim": lambda: (rnd(8, 2).t(), None, None, None, None, None, 0.0),
    "out_dtype": lambda: (rnd(2, 8), None, None, None, torch.int32, None, 0.0),
    "residual_dtype": lambda: (rnd(2, 8), None, None, None, None, torch.int64, 0.0),
    "weight_offset without weight": lambda: (rnd(2, 8), None, None, None, None, None, 1.0),
    "weight on meta": lambda: (rnd(2, 8), torch.randn(8, device="meta"), None, None, None, None, 0.0),
    "scalar x": lambda: (torch.tensor(1.0), None, None, None, None, None, 0.0),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_fast_path_hands_bad_calls_back_to_python(name):
    x, w, b, r, out_dtype, residual_dtype, offset = BAD_CALLS[name]()
    assert _ops._ext.rmsnorm(x, w, b, r, out_dtype, residual_dtype, 1e-6, False, offset) is None
    with pytest.raises((TypeError, ValueError)):
        rmsnorm(x, w, b, r, out_dtype=out_dtype, residual_dtype=residual_dtype, weight_offset=offset)


def test_meta_tensors_go_to_the_custom_op():
    x = torch.randn(2, 8, device="meta")
    assert _ops._ext.rmsnorm(x, None, None, None, None, None, 1e-6, False, 0.0) is None
    assert rmsnorm(x).device.type == "meta"  # the fake implementation


def test_plain_calls_take_the_fast_path(monkeypatch):
    def slow_path(*args, **kwargs):
        raise AssertionError("plain rmsnorm calls should not reach the Python path")

    monkeypatch.setattr(_ops, "_forward", slow_path)
    x, w, r = rnd(4, 32), rnd(32).requires_grad_(), rnd(4, 32)
    out = rmsnorm(x, w)
    assert "normkit::RmsNormFunction" in out.grad_fn.name()
    out, res_out = rmsnorm(x, w, residual=r, prenorm=True)
    torch.testing.assert_close(res_out, x + r, rtol=0, atol=0)
    out, res_out = rmsnorm(x, prenorm=True)
    assert res_out is x
    with torch.no_grad():
        assert rmsnorm(x, w, weight_offset=1.0).grad_fn is None
