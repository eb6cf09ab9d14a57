"""normkit._torch_C's public entry points (normkit.torch.rmsnorm, layernorm) decide
in C++ whether a call is plain: tensor subclasses, dispatch modes, torch function
modes and functorch transforms must reach the custom op instead (on CPU tensors)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from normkit.torch import _ops, layernorm, rmsnorm  # noqa: E402


def rnd(*shape):
    return torch.randn(*shape, dtype=torch.float32)


class _RecordDispatch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _RecordFunctions(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


def _ext_call(name, x, w):
    if name == "rmsnorm":
        return _ops._ext.rmsnorm(x, w, None, None, None, None, 1e-6, False, 0.0)
    return _ops._ext.layernorm(x, w, None, None, None, None, 1e-6, False)


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm"])
def test_modes_transforms_and_subclasses_reach_the_custom_op(name):
    # The C++ entry itself declines (None) calls that a dispatch mode, a torch
    # function mode, a functorch transform or a tensor subclass must see, and the
    # public call then goes through the custom op, which they do see.
    fn = {"rmsnorm": rmsnorm, "layernorm": layernorm}[name]
    x, w = rnd(4, 32), rnd(32)
    assert _ext_call(name, x, w) is not None
    expected = fn(x, w)
    for mode in (_RecordDispatch, _RecordFunctions):
        with mode() as seen:
            assert _ext_call(name, x, w) is None
            torch.testing.assert_close(fn(x, w), expected)
        assert any(f"normkit.{name}_fwd" in op for op in seen.ops), (mode.__name__, seen.ops)
    declined = []

    def per_row(t):
        declined.append(_ext_call(name, t, w) is None)
        return fn(t, w)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        out = torch.func.vmap(per_row)(x.reshape(2, 2, 32))
    assert declined == [True]
    torch.testing.assert_close(out.reshape(4, 32), expected)
    sub = x.as_subclass(_Subclass)
    assert _ext_call(name, sub, w) is None
    assert _ext_call(name, x, w.as_subclass(_Subclass)) is None
    assert type(fn(sub, w)) is _Subclass
    assert _ext_call(name, x, torch.nn.Parameter(w)) is not None  # Parameter is plain
