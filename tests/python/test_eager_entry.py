"""normkit.torch.rmsnorm / layernorm are C functions of normkit._torch_C
(src/torch/public_entry.cpp) that hand every call they do not take to the Python
implementation: same signature, docstring, results and errors as that Python
function, subclasses and modes still reach the custom op, torch.compile still sees
the custom ops (the Python function is the polyfill, registered whenever
torch._dynamo is imported), and `import normkit.torch` does not import torch._dynamo.
All on CPU tensors."""

import inspect
import os
import pickle
import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
import normkit.torch as nkt  # noqa: E402
from normkit.torch import _layernorm, _ops  # noqa: E402
from test_torch_ext import BAD_CALLS, LN_BAD_CALLS  # noqa: E402
from test_torch_modes import _RecordDispatch, _RecordFunctions  # noqa: E402

if _ops._ext is None:  # test_torch_ext fails for that; nothing here applies without the extension
    pytest.skip("normkit._torch_C is not built", allow_module_level=True)

PY = {"rmsnorm": _ops._rmsnorm_py, "layernorm": _layernorm._layernorm_py}
PUBLIC = {"rmsnorm": nkt.rmsnorm, "layernorm": nkt.layernorm}
NAMES = list(PUBLIC)


def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def python_calls(monkeypatch):
    """Counts the calls that reach the Python implementation (its _forward)."""
    calls = []
    for module in (_ops, _layernorm):
        real = module._forward

        def spy(*args, _real=real, **kwargs):
            calls.append(args)
            return _real(*args, **kwargs)
        monkeypatch.setattr(module, "_forward", spy)
    return calls


# ---------------------------------------------------------------------------
# What the public names are.


@pytest.mark.parametrize("name", NAMES)
def test_public_names_are_the_c_functions_with_the_python_signature_and_doc(name):
    fn, py = PUBLIC[name], PY[name]
    assert isinstance(fn, types.BuiltinFunctionType) and fn is getattr(_ops._ext, "public_" + name)
    assert getattr(normkit, name) is fn  # the lazy top-level name
    assert (fn.__name__, fn.__qualname__, fn.__module__) == (name, name, "normkit.torch")
    assert fn.__doc__ == py.__doc__ and "sqrt(" in fn.__doc__
    want = inspect.signature(py)
    got = inspect.signature(fn)
    assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in want.parameters.values()]
    assert py.__code__.co_name == name  # errors raised by Python's binding name it
    assert pickle.loads(pickle.dumps(fn)) is fn


# ---------------------------------------------------------------------------
# Results: the C entry's against the custom op's, bit for bit.

# (x, weight, bias, residual, kwargs); LayerNorm skips weight_offset.
CASES = {
    "x only": lambda: (rnd(5, 24), None, None, None, {}),
    "weight": lambda: (rnd(5, 24), rnd(24), None, None, {}),
    "weight, bias": lambda: (rnd(5, 24), rnd(24), rnd(24), None, {}),
    "residual": lambda: (rnd(5, 24), rnd(24), None, rnd(5, 24), {}),
    "residual prenorm": lambda: (rnd(5, 24), rnd(24), rnd(24), rnd(5, 24), {"prenorm": True}),
    "prenorm without residual": lambda: (rnd(5, 24), rnd(24), None, None, {"prenorm": True}),
    "out_dtype": lambda: (rnd(5, 24), rnd(24), None, None, {"out_dtype": torch.bfloat16}),
    "bf16, residual_dtype fp32": lambda: (rnd(5, 24, dtype=torch.bfloat16), rnd(24), None,
                                          rnd(5, 24, dtype=torch.bfloat16),
                                          {"residual_dtype": torch.float32, "prenorm": True}),
    "eps": lambda: (rnd(5, 24), rnd(24), None, None, {"eps": 0.25}),
    "weight_offset": lambda: (rnd(5, 24), rnd(24), None, None, {"weight_offset": 1.0}),
    "per-head": lambda: (rnd(3, 4, 16), rnd(4, 16), rnd(4, 16), None, {}),
}
PARAMS = {"rmsnorm": ["x", "weight", "bias", "residual", "out_dtype", "residual_dtype", "eps", "prenorm",
                      "weight_offset"]}
PARAMS["layernorm"] = PARAMS["rmsnorm"][:-1]


def _op_result(name, x, w, b, r, kw):
    """What the public call returns, from the custom op."""
    out_dtype, residual_dtype = kw.get("out_dtype"), kw.get("residual_dtype")
    eps, prenorm = kw.get("eps", 1e-6), kw.get("prenorm", False)
    makes_res = r is not None or (residual_dtype is not None and residual_dtype != x.dtype)
    if name == "rmsnorm":
        out, res_out, _ = torch.ops.normkit.rmsnorm_fwd(x, w, b, r, out_dtype, residual_dtype, eps,
                                                        kw.get("weight_offset", 0.0), False, makes_res)
    else:
        out, res_out, _, _ = torch.ops.normkit.layernorm_fwd(x, w, b, r, out_dtype, residual_dtype, eps, False,
                                                             makes_res)
    return (out, res_out if makes_res else x) if prenorm else out


def _as_list(result):
    return list(result) if isinstance(result, tuple) else [result]


def _assert_equal(got, want):
    assert type(got) is type(want)
    for a, b in zip(_as_list(got), _as_list(want)):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_eager_results_equal_the_custom_op(name, case, python_calls):
    x, w, b, r, kw = CASES[case]()
    if name == "layernorm" and "weight_offset" in kw:
        pytest.skip("LayerNorm has no weight_offset")
    fn = PUBLIC[name]
    want = _op_result(name, x, w, b, r, kw)
    with torch.no_grad():
        by_keyword = fn(x, weight=w, bias=b, residual=r, **kw)
        values = dict(zip(PARAMS[name], (x, w, b, r)), **kw)
        positional = fn(*[values.get(p, inspect.signature(fn).parameters[p].default) for p in PARAMS[name]])
        mixed = fn(x, w, b, r, **kw)
    for got in (by_keyword, positional, mixed):
        _assert_equal(got, want)
    if kw.get("prenorm") and r is None and "residual_dtype" not in kw:
        assert _as_list(by_keyword)[1] is x
    assert python_calls == []  # all of them taken by the C entry


@pytest.mark.parametrize("name", NAMES)
def test_autograd_through_the_c_entry_equals_the_custom_op(name):
    x, w, b, r = rnd(6, 40), rnd(40), rnd(40), rnd(6, 40)
    grads = []
    for use_op in (False, True):
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, b, r)]
        if use_op:
            store = dict(weight_offset=0.0, store_rstd=True) if name == "rmsnorm" else dict(store_stats=True)
            op = getattr(torch.ops.normkit, name + "_fwd")
            outs = op(*leaves, None, None, 1e-6, *store.values(), True)[:2]
        else:
            outs = PUBLIC[name](*leaves, prenorm=True)
            assert f"normkit::{'RmsNorm' if name == 'rmsnorm' else 'LayerNorm'}Function" in outs[0].grad_fn.name()
        torch.manual_seed(1)
        torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------
# Calls the C entry hands to the Python implementation: same results, same errors.


@pytest.mark.parametrize("name", NAMES)
def test_other_scalar_types_convert_as_before(name, python_calls):
    np = pytest.importorskip("numpy")
    x, w = rnd(4, 16), rnd(16)
    fn = PUBLIC[name]
    with torch.no_grad():
        want = fn(x, w, eps=0.5)
        _assert_equal(fn(x, w, eps=1), fn(x, w, eps=1.0))  # an int: converted in C
        assert python_calls == []
        for eps in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5)):
            _assert_equal(fn(x, w, eps=eps), want)
        _assert_equal(fn(x, w, prenorm=1), fn(x, w, prenorm=True))
        _assert_equal(fn(x, w, prenorm=np.bool_(False)), fn(x, w))
    assert len(python_calls) == 5  # the numpy scalars, the tensor, 1 and np.bool_ for prenorm
    with pytest.raises(OverflowError):
        fn(x, w, eps=10 ** 400)
    with torch.no_grad():
        _assert_equal(fn(x, w, eps="0.5"), want)  # float("0.5"), as the Python wrapper did
    with pytest.raises(TypeError):
        fn(x, w, out_dtype="float32")


@pytest.mark.parametrize("name", NAMES)
def test_binding_errors_are_pythons(name):
    fn, x = PUBLIC[name], rnd(2, 8)
    calls = [lambda: fn(), lambda: fn(x, epsilon=1e-6), lambda: fn(x, None, weight=None),
             lambda: fn(*[x] + [None] * len(PARAMS[name])), lambda: fn(x, **{"".join(["e", "p", "s"]): 1e-6,
                                                                          "x" * 3: 1})]
    for call in calls:
        with pytest.raises(TypeError, match=f"^{name}\\(\\) "):
            call()
    with torch.no_grad():  # a keyword made at run time is still the parameter
        _assert_equal(fn(x, **{"".join(["e", "p", "s"]): 0.5}), fn(x, eps=0.5))


# The argument each BAD_CALLS case of test_torch_ext gets wrong, which its error names first.
RMS_BAD_ARGUMENT = {
    "int x": "x", "complex weight": "weight", "weight length": "weight", "per-head weight without heads": "weight",
    "3-d weight": "weight", "bias shape": "bias", "bias vs weight shape": "bias", "residual shape": "residual",
    "residual dtype": "residual", "residual last dim": "residual", "x last dim": "x", "out_dtype": "out_dtype",
    "residual_dtype": "residual_dtype", "weight_offset without weight": "weight_offset", "weight on meta": "weight",
    "scalar x": "x",
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_rmsnorm_bad_calls_raise_the_python_error(case):
    x, w, b, r, out_dtype, residual_dtype, offset = BAD_CALLS[case]()
    kw = dict(out_dtype=out_dtype, residual_dtype=residual_dtype, weight_offset=offset)
    with pytest.raises((TypeError, ValueError)) as python_error:
        _ops._rmsnorm_py(x, w, b, r, **kw)
    with pytest.raises(type(python_error.value)) as error:
        nkt.rmsnorm(x, w, b, r, **kw)
    assert str(error.value) == str(python_error.value)
    what = RMS_BAD_ARGUMENT[case]
    assert str(error.value).startswith((what + ":", what + " ")), (case, str(error.value))


@pytest.mark.parametrize("case", list(LN_BAD_CALLS))
def test_layernorm_bad_calls_name_the_argument(case):
    make, what = LN_BAD_CALLS[case]
    x, w, b, r, out_dtype, residual_dtype = make()
    with pytest.raises((TypeError, ValueError), match=f"^{what}[: ]"):
        nkt.layernorm(x, w, b, r, out_dtype=out_dtype, residual_dtype=residual_dtype)


@pytest.mark.parametrize("name", NAMES)
def test_operator_errors_are_normkit_errors(name):
    with pytest.raises(normkit.NormkitError, match="eps"):
        PUBLIC[name](rnd(2, 8), eps=-1.0)


class _Seen(torch.Tensor):
    ops = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.ops.append(str(func))
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("name", NAMES)
def test_subclasses_and_modes_reach_the_custom_op(name):
    fn, x, w = PUBLIC[name], rnd(4, 32), rnd(32)
    want = fn(x, w)
    for mode in (_RecordDispatch, _RecordFunctions):
        with mode() as seen:
            got = fn(x, weight=w)
        assert torch.equal(got, want)
        assert any(f"normkit.{name}_fwd" in op for op in seen.ops), (mode.__name__, seen.ops)
    _Seen.ops.clear()
    got = fn(x.as_subclass(_Seen), w)
    assert type(got) is _Seen and torch.equal(got.as_subclass(torch.Tensor), want)
    assert any(f"normkit.{name}_fwd" in op for op in _Seen.ops), _Seen.ops


def test_compiling_flag_sends_calls_to_python(monkeypatch, python_calls):
    # torch.compiler.is_compiling() is true outside Dynamo's tracing too (export, and the
    # compile session in recent torch): the Python implementation then takes the call.
    if not hasattr(torch.compiler, "_is_compiling_flag"):
        pytest.skip("this torch has no torch.compiler._is_compiling_flag")
    x, w = rnd(4, 32), rnd(32)
    with torch.no_grad():
        want = nkt.rmsnorm(x, w)
        assert python_calls == []
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
        assert torch.equal(nkt.rmsnorm(x, w), want)
        nkt.layernorm(x, w)
    assert len(python_calls) == 2


# ---------------------------------------------------------------------------
# torch.compile and import order, in fresh interpreters.

_COMPILE = """
import sys, torch
{before}
import normkit.torch as nkt
{after}
graphs = []
def backend(gm, example_inputs):
    graphs.append(gm)
    return gm.forward
def f(x, w, b, r):
    out, res = nkt.rmsnorm(x, w, residual=r, prenorm=True)
    return nkt.layernorm(out, w, b, eps=1e-5) + res
x, w, b, r = torch.randn(4, 32), torch.randn(32), torch.randn(32), torch.randn(4, 32)
got = torch.compile(f, backend=backend, fullgraph=True)(x, w, b, r)
assert torch.equal(got, f(x, w, b, r))
# Dynamo records the op packets (normkit.rmsnorm_fwd), AOT graphs their overloads (.default).
targets = {{str(n.target).replace(".default", "") for g in graphs for n in g.graph.nodes if n.op == "call_function"}}
assert {{"normkit.rmsnorm_fwd", "normkit.layernorm_fwd"}} <= targets, targets
assert not any(type(finder).__name__ == "_AfterDynamoImport" for finder in sys.meta_path)
print("ok")
"""


def _run_python(code):
    env = dict(os.environ)
    # The normkit under test, wherever it was installed.
    root = os.path.dirname(os.path.dirname(normkit.__file__))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("order", ["normkit first", "dynamo first"])
def test_compile_sees_the_custom_ops_whichever_is_imported_first(order):
    before, after = "", ""
    if order == "dynamo first":
        before = "import torch._dynamo"
    else:
        # A lookup without an import (find_spec) must not use up the hook.
        after = ("assert 'torch._dynamo' not in sys.modules\n"
                 "import importlib.util; assert importlib.util.find_spec('torch._dynamo') is not None\n"
                 "assert 'torch._dynamo' not in sys.modules")
    result = _run_python(_COMPILE.format(before=before, after=after))
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-4000:]


def test_import_does_not_import_dynamo():
    result = _run_python("import sys, torch\n"
                         "assert 'torch._dynamo' not in sys.modules, 'torch imports torch._dynamo itself'\n"
                         "import normkit.torch as nkt\n"
                         "assert 'torch._dynamo' not in sys.modules\n"
                         "x = torch.randn(2, 8)\n"
                         "nkt.rmsnorm(x); nkt.layernorm(x); nkt.rmsnorm(x.as_subclass(torch.nn.Parameter))\n"
                         "assert 'torch._dynamo' not in sys.modules\n"
                         "print('ok')")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-4000:]


def test_compile_in_this_process_sees_the_custom_ops():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x, w):
        return nkt.rmsnorm(x, w) + nkt.layernorm(x, w)

    import torch._dynamo  # after normkit.torch in this process, unless another test imported it first

    x, w = rnd(4, 32), rnd(32)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, backend=backend, fullgraph=True)(x, w), f(x, w))
    targets = {str(n.target).replace(".default", "") for g in graphs for n in g.graph.nodes if n.op == "call_function"}
    assert {"normkit.rmsnorm_fwd", "normkit.layernorm_fwd"} <= targets, targets


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_export_sees_the_custom_ops(strict):
    # Non-strict export runs the C function on fake tensors (handed to Python); strict
    # export traces with Dynamo (the polyfill).
    class Block(torch.nn.Module):
        def forward(self, x, w, r):
            out, res = nkt.rmsnorm(x, w, residual=r, prenorm=True)
            return nkt.layernorm(out, w) + res

    x, w, r = rnd(4, 32), rnd(32), rnd(4, 32)
    program = torch.export.export(Block(), (x, w, r), strict=strict)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"normkit.rmsnorm_fwd.default", "normkit.layernorm_fwd.default"} <= targets, targets
    assert torch.equal(program.module()(x, w, r), Block()(x, w, r))
