"""In-place fused residual add + norm, as inference engines call it once per layer.

    residual <- x + residual            (in residual's dtype)
    x        <- norm(residual) * weight (+ bias)   (in x's dtype)

Both tensors are overwritten in one pass (each row is read whole before any of it
is written) and nothing is returned: the semantics and argument order of vLLM's
``fused_add_rms_norm(input, residual, weight, epsilon)`` and FlashInfer's
``fused_add_rmsnorm(input, residual, weight, eps)``. The custom ops
``normkit::fused_add_rmsnorm`` / ``normkit::fused_add_layernorm`` declare
``mutates_args=("x", "residual")``, so torch.compile functionalizes them and CUDA
graphs capture them like any other kernel.

``inplace=False`` is the out-of-place form: it returns new tensors
``(out, residual_out)`` and leaves x and residual alone; it is
``rmsnorm/layernorm(x, weight, bias, residual, prenorm=True)`` and so is
differentiable. The in-place form has no autograd (it destroys its inputs).
"""

from typing import Optional

import torch
from torch import Tensor

from normkit import _C

from . import _impl
from ._layernorm import layernorm
from ._ops import _direct_ok, _needs_grad, rmsnorm


@torch.library.custom_op("normkit::fused_add_rmsnorm", mutates_args=("x", "residual"))
def _fused_add_rmsnorm_op(x: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                          weight_offset: float) -> None:
    _impl.fused_add_impl(_C.fused_add_rmsnorm, "fused_add_rmsnorm", x, residual, weight, bias, eps, weight_offset)


@_fused_add_rmsnorm_op.register_fake
def _fused_add_rmsnorm_fake(x, residual, weight, bias, eps, weight_offset):
    _impl.check_fused_add(x, residual, weight, bias, weight_offset)


@torch.library.custom_op("normkit::fused_add_layernorm", mutates_args=("x", "residual"))
def _fused_add_layernorm_op(x: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                            eps: float) -> None:
    _impl.fused_add_impl(_C.fused_add_layernorm, "fused_add_layernorm", x, residual, weight, bias, eps, 0.0)


@_fused_add_layernorm_op.register_fake
def _fused_add_layernorm_fake(x, residual, weight, bias, eps):
    _impl.check_fused_add(x, residual, weight, bias, 0.0)


def _refuse_grad(name, *tensors):
    if _needs_grad(*tensors):
        raise RuntimeError(f"{name}: the in-place form overwrites x and residual and has no autograd; call it "
                           "under torch.no_grad() (inference), or pass inplace=False for new, differentiable outputs")


def fused_add_rmsnorm(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float = 1e-6,
                      weight_offset: float = 0.0, bias: Optional[Tensor] = None, inplace: bool = True):
    """In place: residual <- x + residual; x <- residual * rstd * (weight + weight_offset) + bias,
    rstd = 1 / sqrt(mean(residual^2) + eps) over the last dimension, computed in fp32 from the
    unrounded sum. Returns None (vLLM's fused_add_rms_norm / FlashInfer's fused_add_rmsnorm).

    weight_offset=1.0 is Gemma's x_hat * (1 + w). A 2-D weight (H, N) with x (..., H, N) is
    per-head mode. x and residual must be distinct memory of the same shape (their dtypes may
    differ). inplace=False returns (out, residual_out) as new tensors instead (differentiable).
    """
    if not inplace:
        return rmsnorm(x, weight, bias, residual, eps=eps, prenorm=True, weight_offset=weight_offset)
    _refuse_grad("fused_add_rmsnorm", x, residual, weight, bias)
    if _direct_ok(x, residual, weight, bias):
        _impl.fused_add_impl(_C.fused_add_rmsnorm, "fused_add_rmsnorm", x, residual, weight, bias, float(eps),
                             float(weight_offset))
    else:
        torch.ops.normkit.fused_add_rmsnorm(x, residual, weight, bias, float(eps), float(weight_offset))
    return None


def fused_add_layernorm(x: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor] = None,
                        eps: float = 1e-6, inplace: bool = True):
    """In place: residual <- x + residual; x <- (residual - mean) * rstd * weight + bias,
    mean = mean(residual), rstd = 1 / sqrt(mean((residual - mean)^2) + eps) over the last
    dimension, computed in fp32 from the unrounded sum. Returns None.

    inplace=False returns (out, residual_out) as new tensors instead (differentiable).
    """
    if not inplace:
        return layernorm(x, weight, bias, residual, eps=eps, prenorm=True)
    _refuse_grad("fused_add_layernorm", x, residual, weight, bias)
    if _direct_ok(x, residual, weight, bias):
        _impl.fused_add_impl(_C.fused_add_layernorm, "fused_add_layernorm", x, residual, weight, bias, float(eps),
                             0.0)
    else:
        torch.ops.normkit.fused_add_layernorm(x, residual, weight, bias, float(eps))
    return None
