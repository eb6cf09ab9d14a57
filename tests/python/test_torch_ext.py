"""normkit._torch_C, the eager path in C++: it is built where torch is, it gives
the same results as the custom ops (and as the Python path taken without it),
and its autograd node behaves like the custom op's (on CPU tensors). RMSNorm
first, then LayerNorm, which shares the implementation (src/torch/norm_torch.cpp)."""

import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit.torch import (  # noqa: E402
    _layernorm, _ops, layernorm, layernorm_bwd, layernorm_fwd, rmsnorm, rmsnorm_bwd, rmsnorm_fwd)


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


def _run_norm(norm, case, use_ext, monkeypatch, node=None):
    """Forward and backward of `norm` on a case, with or without the C++ eager path.

    node: the autograd node the C++ path records (checked present exactly when it ran).
    Returns (outputs, input grads, output grads fed in).
    """
    monkeypatch.setattr(_ops, "_ext", _ops._ext if use_ext else None)
    if not use_ext:  # what normkit.torch.rmsnorm / layernorm are without the extension
        norm = {rmsnorm: _ops._rmsnorm_py, layernorm: _layernorm._layernorm_py}[norm]
    x, w, b, r, kw = case
    kw = dict(kw)
    cols = kw.pop("_slice", None)
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b, r)]
    inputs = list(leaves)
    if cols is not None:
        inputs[0] = leaves[0][:, :cols]
        assert not inputs[0].is_contiguous()
    result = norm(*inputs, **kw)
    outs = list(result) if isinstance(result, tuple) else [result]
    if node is not None:
        name = outs[0].grad_fn.name()
        assert (node in name) == use_ext, name
    torch.manual_seed(1)
    grads_in = [torch.randn_like(o) for o in outs]
    torch.autograd.backward(outs, grads_in)
    return outs, [t.grad if t is not None else None for t in leaves], grads_in


def _run(case, use_ext, monkeypatch):
    return _run_norm(rmsnorm, case, use_ext, monkeypatch)[:2]


def _assert_same_results(cpp, py):
    """The C++ path's outputs and gradients equal the Python path's, bit for bit (None where None)."""
    for a, b in zip(cpp, py):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name", list(CASES))
def test_cpp_path_equals_python_path(name, monkeypatch):
    """Same kernels behind both paths, so the results must be identical, gradients included."""
    torch.manual_seed(0)
    case = CASES[name]()
    outs_cpp, grads_cpp = _run(case, True, monkeypatch)
    outs_py, grads_py = _run(case, False, monkeypatch)
    _assert_same_results(outs_cpp + grads_cpp, outs_py + grads_py)


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


@pytest.mark.parametrize("norm,match", [(rmsnorm, "double backward"),
                                        (layernorm, "normkit.layernorm: double backward")],
                         ids=["rmsnorm", "layernorm"])
def test_double_backward_is_refused_clearly(norm, match):
    x, w = rnd(3, 16).requires_grad_(), rnd(16).requires_grad_()
    with pytest.raises(RuntimeError, match=match):
        torch.autograd.grad(norm(x, w).sum(), (x, w), create_graph=True)


# A negative eps passes the argument checks; the operator's validation refuses it.
# The C++ entry points' trailing arguments: (weight_offset, store_rstd,
# store_residual_out, grad) and (prenorm, weight_offset) for RMSNorm, (store_stats,
# store_residual_out, grad) and (prenorm) for LayerNorm.
@pytest.mark.parametrize("call", [
    lambda x: _ops._ext.rmsnorm_fwd(x, None, None, None, None, None, -1.0, 0.0, False, False, False),
    lambda x: _ops._ext.rmsnorm(x, None, None, None, None, None, -1.0, False, 0.0),
    lambda x: _ops._ext.layernorm_fwd(x, None, None, None, None, None, -1.0, False, False, False),
    lambda x: _ops._ext.layernorm(x, None, None, None, None, None, -1.0, False),
], ids=["rmsnorm_fwd", "rmsnorm", "layernorm_fwd", "layernorm"])
def test_operator_errors_arrive_as_normkit_error(call):
    with pytest.raises(normkit.NormkitError, match="eps"):
        call(rnd(2, 8))


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



def test_rmsnorm_backward_reads_strided_rstd_as_rows():
    x, w, dout = rnd(3, 8), rnd(8), rnd(3, 8)
    _, _, rstd = rmsnorm_fwd(x, w, store_rstd=True)
    strided = torch.stack([rstd, torch.zeros_like(rstd)], dim=1)[:, 0]
    assert not strided.is_contiguous()
    got = _ops._ext.rmsnorm_bwd(x, w, dout, strided, None, None, None, None, 0.0)
    want = _ops._ext.rmsnorm_bwd(x, w, dout, rstd, None, None, None, None, 0.0)
    for a, b in zip(got[:2], want[:2]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------------------
# LayerNorm through the same C++ path.


class _Counting:
    """Stands in for normkit._torch_C, counting the calls of each entry point."""

    def __init__(self, ext):
        self._ext = ext
        self.calls = {}

    def __getattr__(self, name):
        fn = getattr(self._ext, name)

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return call


@pytest.fixture
def counting_ext(monkeypatch):
    ext = _Counting(_ops._ext)
    monkeypatch.setattr(_ops, "_ext", ext)
    return ext


def test_layernorm_eager_autograd_records_the_cpp_node():
    x, w, b = rnd(4, 32).requires_grad_(), rnd(32).requires_grad_(), rnd(32).requires_grad_()
    assert "normkit::LayerNormFunction" in layernorm(x, w, b).grad_fn.name()
    out, _, _, _ = layernorm_fwd(x, w, b)
    assert "normkit::LayerNormFunction" in out.grad_fn.name()
    with torch.no_grad():
        assert layernorm(x, w, b).grad_fn is None
    # RMSNorm's node keeps its name.
    assert "normkit::RmsNormFunction" in rmsnorm(x, w).grad_fn.name()


def test_layernorm_calls_take_the_cpp_path_on_cpu(counting_ext, monkeypatch):
    def slow_path(*args, **kwargs):
        raise AssertionError("plain layernorm calls should not reach the Python path")

    x, w, b, r = rnd(4, 32), rnd(32).requires_grad_(), rnd(32), rnd(4, 32)
    with monkeypatch.context() as m:
        m.setattr(_layernorm, "_forward", slow_path)
        out = layernorm(x, w, b)
        assert "normkit::LayerNormFunction" in out.grad_fn.name()
        out, res_out = layernorm(x, w, b, residual=r, prenorm=True)
        torch.testing.assert_close(res_out, x + r, rtol=0, atol=0)
        out, res_out = layernorm(x, prenorm=True)
        assert res_out is x
    # layernorm itself is C++ (_torch_C.public_layernorm), which calls none of these.
    assert counting_ext.calls == {}

    # layernorm_fwd / layernorm_bwd: the kernel through C++, not the Python impl nor the op.
    def no_python(*args, **kwargs):
        raise AssertionError("the C++ path should take this call")

    monkeypatch.setattr(_impl_module(), "layernorm_fwd_impl", no_python)
    monkeypatch.setattr(_impl_module(), "layernorm_bwd_impl", no_python)
    out, res_out, mean, rstd = layernorm_fwd(x, w.detach(), b, store_rstd=True, store_mean=True)
    assert res_out is x and mean.shape == rstd.shape == (4,)
    layernorm_bwd(x, w.detach(), rnd(4, 32), mean, rstd, has_bias=True)
    assert counting_ext.calls == {"layernorm_fwd": 1, "layernorm_bwd": 1}


def _impl_module():
    from normkit.torch import _impl
    return _impl


# As CASES, without weight_offset (LayerNorm has none).
LN_CASES = {
    "plain": lambda: (rnd(6, 40), rnd(40), rnd(40), None, {}),
    "no weight": lambda: (rnd(6, 40), None, None, None, {}),
    "bf16 x, fp32 weight, bias": lambda: (rnd(6, 40, dtype=torch.bfloat16), rnd(40), rnd(40), None, {}),
    "residual prenorm": lambda: (rnd(6, 40), rnd(40), None, rnd(6, 40), {"prenorm": True}),
    "residual, no prenorm": lambda: (rnd(6, 40), rnd(40), rnd(40), rnd(6, 40), {}),
    "fp16 residual_dtype fp32": lambda: (rnd(6, 40, dtype=torch.float16), rnd(40, dtype=torch.float16), None,
                                         rnd(6, 40, dtype=torch.float16),
                                         {"prenorm": True, "residual_dtype": torch.float32}),
    "per-head weight and bias": lambda: (rnd(3, 4, 16), rnd(4, 16), rnd(4, 16), None, {}),
    "per-head bias only": lambda: (rnd(3, 4, 16), None, rnd(4, 16), None, {}),
    "out_dtype": lambda: (rnd(6, 40), rnd(40), rnd(40), None, {"out_dtype": torch.bfloat16}),
    "float64": lambda: (rnd(6, 40, dtype=torch.float64), rnd(40, dtype=torch.float64), None, None, {}),
    "strided rows": lambda: (rnd(6, 64), rnd(40), rnd(40), None, {"_slice": 40}),
}


def _run_ln(case, use_ext, monkeypatch):
    return _run_norm(layernorm, case, use_ext, monkeypatch, node="normkit::LayerNormFunction")


@pytest.mark.parametrize("name", list(LN_CASES))
def test_layernorm_cpp_path_equals_custom_op_path(name, monkeypatch):
    """The C++ node and the custom op (the path without normkit._torch_C) run the same
    kernels: outputs and gradients must be bitwise equal."""
    torch.manual_seed(0)
    case = LN_CASES[name]()
    outs_cpp, grads_cpp, _ = _run_ln(case, True, monkeypatch)
    outs_py, grads_py, _ = _run_ln(case, False, monkeypatch)
    _assert_same_results(outs_cpp + grads_cpp, outs_py + grads_py)


@pytest.mark.parametrize("name", ["plain", "residual prenorm", "residual, no prenorm", "per-head weight and bias",
                                  "per-head bias only", "strided rows", "float64"])
def test_layernorm_cpp_autograd_matches_float64_reference(name, monkeypatch):
    torch.manual_seed(0)
    case = LN_CASES[name]()
    outs, grads, grads_in = _run_ln(case, True, monkeypatch)
    x, w, b, r, kw = case
    cols = kw.get("_slice")
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b, r)]
    h = leaves[0][:, :cols] if cols is not None else leaves[0]
    if r is not None:
        h = h + leaves[3]
    var, mean = torch.var_mean(h, dim=-1, correction=0, keepdim=True)
    y = (h - mean) * torch.rsqrt(var + 1e-6)
    y = y * leaves[1] if w is not None else y
    y = y + leaves[2] if b is not None else y
    ref_outs = [y, h] if kw.get("prenorm") else [y]
    torch.autograd.backward(ref_outs, [g.double() for g in grads_in])
    # The CPU fallback accumulates in fp32 whatever the dtype (float64 included).
    tol = dict(rtol=1e-4, atol=1e-4)
    for got, want in zip(outs, ref_outs):
        torch.testing.assert_close(got.double(), want.detach(), **tol)
    for got, leaf in zip(grads, leaves):
        if leaf is None:
            assert got is None
        else:
            torch.testing.assert_close(got.double(), leaf.grad, **tol)


def test_layernorm_fwd_and_bwd_functions_match_the_custom_ops(counting_ext):
    x, w, b, r, dout = rnd(5, 24), rnd(24), rnd(24), rnd(5, 24), rnd(5, 24)
    out, res_out, mean, rstd = layernorm_fwd(x, w, b, r, store_rstd=True, store_mean=True)
    op = torch.ops.normkit.layernorm_fwd(x, w, b, r, None, None, 1e-6, True, True)
    for a, want in zip((out, res_out, mean, rstd), op):
        torch.testing.assert_close(a, want, rtol=0, atol=0)
    out, res_out, mean_none, rstd_only = layernorm_fwd(x, w, store_rstd=True)
    assert res_out is x and mean_none is None and rstd_only.shape == (5,)
    dres = rnd(5, 24, dtype=torch.bfloat16)
    h = res_out.to(torch.float32)
    dx, dw, db, dr = layernorm_bwd(h, w, dout, mean, rstd, dres.float(), has_bias=True, has_residual=True)
    op = torch.ops.normkit.layernorm_bwd(h, w, dout, mean, rstd, dres.float(), None, torch.float32, None)
    for a, want in zip((dx, dw, db), op[:3]):
        torch.testing.assert_close(a, want, rtol=0, atol=0)
    assert dr is dx
    assert counting_ext.calls == {"layernorm_fwd": 2, "layernorm_bwd": 1}


def test_layernorm_backward_reads_strided_stats_as_rows():
    x, w, dout = rnd(3, 8), rnd(8), rnd(3, 8)
    _, _, mean, rstd = layernorm_fwd(x, w, store_rstd=True, store_mean=True)
    strided = [torch.stack([s, torch.zeros_like(s)], dim=1)[:, 0] for s in (mean, rstd)]
    got = _ops._ext.layernorm_bwd(x, w, dout, *strided, None, None, None, None)
    want = _ops._ext.layernorm_bwd(x, w, dout, mean, rstd, None, None, None, None)
    for a, b in zip(got[:2], want[:2]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_layernorm_rows_that_need_a_copy_take_the_custom_op(counting_ext):
    base = rnd(4, 3, 5, 32)
    x = base[:, :2, :4].detach().requires_grad_()
    w, b = rnd(32).requires_grad_(), rnd(32).requires_grad_()
    y = layernorm(x, w, b)
    # The C entry handed it to the Python function, whose C++ forward handed it back (None).
    assert counting_ext.calls == {"layernorm_fwd": 1}
    assert "normkit::LayerNormFunction" not in y.grad_fn.name()
    y.sum().backward()
    xc = x.detach().contiguous().requires_grad_()
    wc, bc = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    layernorm(xc, wc, bc).sum().backward()
    for a, want in ((x.grad, xc.grad), (w.grad, wc.grad), (b.grad, bc.grad)):
        torch.testing.assert_close(a, want, rtol=0, atol=0)


def test_layernorm_gradient_with_other_strides_than_the_input():
    x, w = rnd(6, 32).requires_grad_(), rnd(32).requires_grad_()
    dout = rnd(32, 6).t()
    (gx,) = torch.autograd.grad(layernorm(x, w), (x,), dout)
    (want,) = torch.autograd.grad(layernorm(x, w), (x,), dout.contiguous())
    torch.testing.assert_close(gx, want, rtol=0, atol=0)


# LayerNorm's forward checks, handed back to Python, which raises naming the
# argument: (x, weight, bias, residual, out_dtype, residual_dtype), the argument.
LN_BAD_CALLS = {
    "int x": (lambda: (rnd(2, 8).to(torch.int32), None, None, None, None, None), "x"),
    "complex weight": (lambda: (rnd(2, 8), torch.randn(8, dtype=torch.complex64), None, None, None, None),
                       "weight"),
    "weight length": (lambda: (rnd(2, 8), rnd(7), None, None, None, None), "weight"),
    "per-head weight without heads": (lambda: (rnd(2, 8), rnd(3, 8), None, None, None, None), "weight"),
    "bias shape": (lambda: (rnd(2, 8), rnd(8), rnd(4), None, None, None), "bias"),
    "bias vs weight shape": (lambda: (rnd(2, 3, 8), rnd(3, 8), rnd(8), None, None, None), "bias"),
    "residual shape": (lambda: (rnd(2, 8), None, None, rnd(3, 8), None, None), "residual"),
    "residual dtype": (lambda: (rnd(2, 8), None, None, rnd(2, 8).to(torch.int16), None, None), "residual"),
    "residual last dim": (lambda: (rnd(2, 8), None, None, rnd(8, 2).t(), None, None), "residual"),
    "x last dim": (lambda: (rnd(8, 2).t(), None, None, None, None, None), "x"),
    "out_dtype": (lambda: (rnd(2, 8), None, None, None, torch.int32, None), "out_dtype"),
    "residual_dtype": (lambda: (rnd(2, 8), None, None, None, None, torch.int64), "residual_dtype"),
    "weight on meta": (lambda: (rnd(2, 8), torch.randn(8, device="meta"), None, None, None, None), "weight"),
    "scalar x": (lambda: (torch.tensor(1.0), None, None, None, None, None), "x"),
}


@pytest.mark.parametrize("name", list(LN_BAD_CALLS))
def test_layernorm_fast_path_hands_bad_calls_back_to_python(name):
    make, what = LN_BAD_CALLS[name]
    x, w, b, r, out_dtype, residual_dtype = make()
    assert _ops._ext.layernorm(x, w, b, r, out_dtype, residual_dtype, 1e-6, False) is None
    assert _ops._ext.layernorm_fwd(x, w, b, r, out_dtype, residual_dtype, 1e-6, True, False, False) is None
    with pytest.raises((TypeError, ValueError), match=f"^{what}[: ]"):
        layernorm(x, w, b, r, out_dtype=out_dtype, residual_dtype=residual_dtype)
    with pytest.raises((TypeError, ValueError), match=f"^{what}[: ]"):
        layernorm_fwd(x, w, b, r, out_dtype=out_dtype, residual_dtype=residual_dtype)


def _ln_bwd_args(**change):
    args = dict(x=rnd(3, 8), weight=rnd(8), dout=rnd(3, 8), mean=torch.zeros(3), rstd=torch.ones(3),
                dresidual_out=None, dx_dtype=None, dbias_dtype=None, dresidual_dtype=None)
    args.update(change)
    return args


LN_BAD_BWD_CALLS = {
    "int x": (dict(x=rnd(3, 8).to(torch.int32)), "x"),
    "weight length": (dict(weight=rnd(7)), "weight"),
    "dout shape": (dict(dout=rnd(3, 7)), "dout"),
    "dout dtype": (dict(dout=rnd(3, 8).to(torch.int16)), "dout"),
    "dout last dim": (dict(dout=rnd(8, 3).t()), "dout"),
    "dresidual_out shape": (dict(dresidual_out=rnd(2, 8)), "dresidual_out"),
    "mean dtype": (dict(mean=torch.zeros(3, dtype=torch.float16)), "mean"),
    "mean length": (dict(mean=torch.zeros(4)), "mean"),
    "mean on meta": (dict(mean=torch.zeros(3, device="meta")), "mean"),
    "rstd dtype": (dict(rstd=torch.ones(3, dtype=torch.float16)), "rstd"),
    "rstd length": (dict(rstd=torch.ones(4)), "rstd"),
    "dbias_dtype": (dict(dbias_dtype=torch.int32), "dbias_dtype"),
}


@pytest.mark.parametrize("name", list(LN_BAD_BWD_CALLS))
def test_layernorm_backward_fast_path_hands_bad_calls_back_to_python(name):
    change, what = LN_BAD_BWD_CALLS[name]
    a = _ln_bwd_args(**change)
    assert _ops._ext.layernorm_bwd(*a.values()) is None
    with pytest.raises((TypeError, ValueError), match=f"^{what}[: ]"):
        if a["dbias_dtype"] is not None:  # the public function derives dbias's dtype; the op takes one
            torch.ops.normkit.layernorm_bwd(*a.values())
        else:
            layernorm_bwd(a["x"], a["weight"], a["dout"], a["mean"], a["rstd"], a["dresidual_out"])


def test_layernorm_meta_tensors_go_to_the_custom_op():
    x = torch.randn(2, 8, device="meta")
    assert _ops._ext.layernorm(x, None, None, None, None, None, 1e-6, False) is None
    assert layernorm(x).device.type == "meta"


def test_layernorm_empty_rows():
    x = rnd(0, 8).requires_grad_()
    w = rnd(8).requires_grad_()
    out = layernorm(x, w)
    assert out.shape == (0, 8)
    out.sum().backward()
    assert torch.equal(w.grad, torch.zeros(8))
    _, _, mean, rstd = layernorm_fwd(rnd(3, 0), store_rstd=True, store_mean=True, eps=0.25)
    assert torch.equal(mean, torch.zeros(3)) and torch.equal(rstd, torch.full((3,), 2.0))
