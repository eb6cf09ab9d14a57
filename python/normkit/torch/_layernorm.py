"""torch.library custom ops ``normkit::layernorm_fwd`` / ``normkit::layernorm_bwd`` and the public functions.

As the RMSNorm ops (_ops.py), with LayerNorm's mean saved next to rstd:

    layernorm_fwd(x, weight?, bias?, residual?, out_dtype?, residual_dtype?, eps,
                  store_stats, store_residual_out) -> (out, residual_out, mean, rstd)
    layernorm_bwd(x, weight?, dout, mean, rstd, dresidual_out?, dx_dtype?, dbias_dtype?,
                  dresidual_dtype?) -> (dx, dweight, dbias, dresidual)

Outputs not asked for are empty 1-D tensors. Autograd of the custom op is shared
with RMSNorm (_ops.save_for_backward / norm_grads). Eager calls take the C++ path
(normkit._torch_C, src/torch/norm_torch.cpp: checks, allocation, a C++ autograd
node, the launch) as RMSNorm's do, layernorm() itself being a C function
(_eager_entry.py); it hands a call to the Python function below when a check fails,
which then raises the error naming the argument, or when the rows need a copy,
which the custom op makes. Without normkit._torch_C, calls without a gradient go
to the kernel directly (no dispatcher), the rest through the custom op.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _eager_entry, _impl
from . import _ops
from ._ops import _direct_ok, _needs_grad, bwd_dtypes, bwd_result, norm_grads, save_for_backward


@torch.library.custom_op("normkit::layernorm_fwd", mutates_args=())
def _layernorm_fwd_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], residual: Optional[Tensor],
                      out_dtype: Optional[torch.dtype], residual_dtype: Optional[torch.dtype], eps: float,
                      store_stats: bool, store_residual_out: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _impl.layernorm_fwd_impl(x, weight, bias, residual, out_dtype, residual_dtype, eps, store_stats,
                                    store_residual_out)


@_layernorm_fwd_op.register_fake
def _layernorm_fwd_fake(x, weight, bias, residual, out_dtype, residual_dtype, eps, store_stats, store_residual_out):
    _impl.check_fwd(x, weight, bias, residual, out_dtype, residual_dtype, 0.0)
    return _impl.layernorm_fwd_meta(x, weight, bias, residual, out_dtype, residual_dtype, store_stats,
                                    store_residual_out)


@torch.library.custom_op("normkit::layernorm_bwd", mutates_args=())
def _layernorm_bwd_op(x: Tensor, weight: Optional[Tensor], dout: Tensor, mean: Tensor, rstd: Tensor,
                      dresidual_out: Optional[Tensor], dx_dtype: Optional[torch.dtype],
                      dbias_dtype: Optional[torch.dtype],
                      dresidual_dtype: Optional[torch.dtype]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _impl.layernorm_bwd_impl(x, weight, dout, mean, rstd, dresidual_out, dx_dtype, dbias_dtype,
                                    dresidual_dtype)


@_layernorm_bwd_op.register_fake
def _layernorm_bwd_fake(x, weight, dout, mean, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype):
    heads = _impl.check_bwd(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, mean)
    return _impl.bwd_meta(x, weight, heads, dx_dtype, dbias_dtype, dresidual_dtype)


def _setup_context(ctx, inputs, output):
    x, weight, bias, residual, _out_dtype, _residual_dtype, eps, store_stats, store_residual_out = inputs
    _out, residual_out, mean, rstd = output
    save_for_backward(ctx, x, weight, bias, residual, eps, 0.0, store_stats, store_residual_out, residual_out,
                      (mean, rstd))


def _stats(hf, eps):
    var, mean = torch.var_mean(hf, dim=-1, correction=0)
    return mean, torch.rsqrt(var + eps)


def _bwd(direct, h, weight, dout, stats, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, _weight_offset):
    args = (h, weight, dout, stats[0], stats[1], dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype)
    return _impl.layernorm_bwd_impl(*args) if direct else torch.ops.normkit.layernorm_bwd(*args)


def _backward(ctx, dout, dresidual_out, _dmean, _drstd):
    return (*norm_grads(ctx, dout, dresidual_out, _stats, _bwd), None, None, None, None, None)


_layernorm_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def _forward(x, weight, bias, residual, out_dtype, residual_dtype, eps, store_stats, store_residual_out, grad):
    """(out, residual_out, mean, rstd); the ones not stored are None or empty placeholders."""
    if _direct_ok(x, weight, bias, residual):
        ext = _ops._ext
        if ext is not None:
            result = ext.layernorm_fwd(x, weight, bias, residual, out_dtype, residual_dtype, float(eps), store_stats,
                                       store_residual_out, grad)
            if result is not None:
                return result
            # None: a check failed (raised here, naming the argument) or the rows
            # need a copy, which the custom op makes (and logs).
            _impl.check_fwd(x, weight, bias, residual, out_dtype, residual_dtype, 0.0)
        elif not grad:
            return _impl.layernorm_fwd_impl(x, weight, bias, residual, out_dtype, residual_dtype, eps, store_stats,
                                            store_residual_out, False)
    return torch.ops.normkit.layernorm_fwd(x, weight, bias, residual, out_dtype, residual_dtype, float(eps),
                                           store_stats, store_residual_out)


def layernorm_fwd(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                  residual: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
                  residual_dtype: Optional[torch.dtype] = None, eps: float = 1e-6, store_rstd: bool = False,
                  store_mean: bool = False) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """LayerNorm forward over the last dimension of x; returns (out, residual_out, mean, rstd).

        h = x + residual (fp32), mean = mean(h), rstd = 1 / sqrt(mean((h - mean)^2) + eps),
        out = (h - mean) * rstd * weight + bias  (in out_dtype, default x.dtype)

    The variance is taken over the centred row (two passes). Rows long enough to be
    spread over a cluster of CTAs take sums of h - h[..., 0] and of its square instead
    (one reduction: exact for any shift, stable in fp32 while h[..., 0] is within 4 std
    of the mean), reduced again around the mean found where it is not. Never
    E[h^2] - mean^2, which cancels for rows far from zero.
    residual_out is h in residual_dtype (default residual's dtype, else x's); it is x
    itself when there is no residual and no dtype change. mean and rstd (fp32, shape
    x.shape[:-1]) are returned when store_mean / store_rstd, else None. A 2-D weight
    (H, N) with x (..., H, N) is per-head mode. Differentiable.
    """
    grad = _needs_grad(x, weight, bias, residual)
    store_res = residual is not None or (residual_dtype is not None and residual_dtype != x.dtype)
    out, residual_out, mean, rstd = _forward(x, weight, bias, residual, out_dtype, residual_dtype, eps,
                                             store_rstd or store_mean or grad, store_res, grad)
    return (out, (residual_out if store_res else x), (mean if store_mean else None),
            (rstd if store_rstd else None))


def layernorm_bwd(x: Tensor, weight: Optional[Tensor], dout: Tensor, mean: Tensor, rstd: Tensor,
                  dresidual_out: Optional[Tensor] = None, has_bias: bool = False,
                  has_residual: bool = False) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """LayerNorm backward; returns (dx, dw, db, dresidual).

    x is h as the forward saw it (residual_out when a residual was added); mean and
    rstd the forward's. With xhat = (x - mean) * rstd and g = dout * weight:
        dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual_out   (in x's dtype)
        dw = sum over rows of dout * xhat (weight's dtype), db = sum over rows of dout
    db (if has_bias) has weight's dtype, else x's. dresidual (if has_residual) is dx,
    in dresidual_out's dtype when that differs from x's. Sums run in a fixed order:
    the results are bitwise reproducible.
    """
    db_dtype, dres_dtype = bwd_dtypes(x, weight, dresidual_out, has_bias, has_residual)
    args = (x, weight, dout, mean, rstd, dresidual_out, None, db_dtype, dres_dtype)
    result = None
    if not _needs_grad(x, weight, dout, mean, rstd, dresidual_out) and _direct_ok(x, weight, dout, mean, rstd,
                                                                                 dresidual_out):
        ext = _ops._ext
        if ext is not None:
            result = ext.layernorm_bwd(*args)
            if result is None:
                # raises naming the argument, unless the rows need a copy
                _impl.check_bwd(x, weight, dout, rstd, dresidual_out, None, db_dtype, dres_dtype, mean)
        else:
            result = _impl.layernorm_bwd_impl(*args)
    if result is None:
        result = torch.ops.normkit.layernorm_bwd(*args)
    return bwd_result(result, weight, has_bias, has_residual, dres_dtype)


def layernorm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
              residual: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
              residual_dtype: Optional[torch.dtype] = None, eps: float = 1e-6, prenorm: bool = False):
    """LayerNorm with autograd: out, or (out, residual_out) when prenorm.

        h = x + residual (fp32), out = (h - mean(h)) / sqrt(var(h) + eps) * weight + bias

    var is the biased variance of the row (as torch.nn.functional.layer_norm), taken
    over the centred row. See layernorm_fwd for dtypes and per-head mode. Gradients
    flow to x, weight, bias and residual (and from residual_out when prenorm).
    """
    # Reached as rmsnorm's Python function is (_ops.py): the calls the C entry hands over,
    # and torch.compile's tracing.
    grad = _needs_grad(x, weight, bias, residual)
    makes_res = residual is not None or (residual_dtype is not None and residual_dtype != x.dtype)
    # residual_out is written when returned, or when a residual makes it the
    # backward's input; otherwise that write is skipped.
    store_res = (prenorm and makes_res) or (grad and residual is not None)
    out, residual_out, _, _ = _forward(x, weight, bias, residual, out_dtype, residual_dtype, eps, grad, store_res,
                                       grad)
    if prenorm:
        return out, (residual_out if makes_res else x)
    return out


# As rmsnorm (_ops.py): normkit.torch.layernorm is normkit._torch_C.public_layernorm, which
# calls this function for every call it does not take itself.
_layernorm_py = layernorm
layernorm = _eager_entry.c_entry(_ops._ext, "layernorm", _layernorm_py)
