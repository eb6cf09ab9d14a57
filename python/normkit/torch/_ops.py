"""torch.library custom ops ``normkit::rmsnorm_fwd`` / ``normkit::rmsnorm_bwd`` and the public functions.

The ops return a fixed tuple of tensors; an output that was not asked for is an
empty 1-D tensor, and which ones are present follows from the op's arguments
(never from numel, which is symbolic under torch.compile):

    rmsnorm_fwd(x, weight?, bias?, residual?, out_dtype?, residual_dtype?, eps,
                weight_offset, store_rstd, store_residual_out) -> (out, residual_out, rstd)
    rmsnorm_bwd(x, weight?, dout, rstd, dresidual_out?, dx_dtype?, dbias_dtype?,
                dresidual_dtype?, weight_offset) -> (dx, dweight, dbias, dresidual)

dweight is present iff weight is given, dbias iff dbias_dtype, dresidual iff
dresidual_dtype. The fake implementations only compute shapes and dtypes.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _eager_entry, _impl


def _load_ext():
    """(normkit._torch_C or None, why not). The eager path in C++ (src/torch/norm_torch.cpp) is
    built when torch is importable while normkit builds, and used only under that torch version:
    C++ extensions have no stable ABI across torch releases."""
    try:
        from normkit import _torch_build
    except ImportError:
        return None, "normkit was built without torch present"
    if _torch_build.TORCH_VERSION != torch.__version__:
        return None, f"it was built against torch {_torch_build.TORCH_VERSION}, this is torch {torch.__version__}"
    try:
        from normkit import _torch_C
    except ImportError as error:
        return None, str(error)
    return _torch_C, ""


_ext, _why_no_ext = _load_ext()
if _ext is None:
    _impl.log_once("torch_C", "normkit._torch_C is not used (%s); eager calls go through the normkit custom ops, "
                   "which cost more host time per call. Reinstall normkit with this torch installed "
                   "(pip install --no-build-isolation .) to build it.", _why_no_ext)

_FWD = "normkit::rmsnorm_fwd"
_BWD = "normkit::rmsnorm_bwd"


@torch.library.custom_op(_FWD, mutates_args=())
def _rmsnorm_fwd_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], residual: Optional[Tensor],
                    out_dtype: Optional[torch.dtype], residual_dtype: Optional[torch.dtype], eps: float,
                    weight_offset: float, store_rstd: bool,
                    store_residual_out: bool) -> Tuple[Tensor, Tensor, Tensor]:
    return _impl.rmsnorm_fwd_impl(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                                  store_rstd, store_residual_out)


@_rmsnorm_fwd_op.register_fake
def _rmsnorm_fwd_fake(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, store_rstd,
                      store_residual_out):
    _impl.check_fwd(x, weight, bias, residual, out_dtype, residual_dtype, weight_offset)
    return _impl.fwd_meta(x, weight, bias, residual, out_dtype, residual_dtype, store_rstd, store_residual_out)


@torch.library.custom_op(_BWD, mutates_args=())
def _rmsnorm_bwd_op(x: Tensor, weight: Optional[Tensor], dout: Tensor, rstd: Tensor,
                    dresidual_out: Optional[Tensor], dx_dtype: Optional[torch.dtype],
                    dbias_dtype: Optional[torch.dtype], dresidual_dtype: Optional[torch.dtype],
                    weight_offset: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _impl.rmsnorm_bwd_impl(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype,
                                  weight_offset)


@_rmsnorm_bwd_op.register_fake
def _rmsnorm_bwd_fake(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype,
                      weight_offset):
    heads = _impl.check_bwd(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype)
    return _impl.bwd_meta(x, weight, heads, dx_dtype, dbias_dtype, dresidual_dtype)


# ---------------------------------------------------------------------------
# Autograd of the forward op: gradients for x, weight, bias and residual.


def save_for_backward(ctx, x, weight, bias, residual, eps, weight_offset, store_stats, store_residual_out,
                      residual_out, stats):
    """What either norm's backward needs; `stats` are the forward's per-row fp32 outputs
    ((rstd,) for RMSNorm, (mean, rstd) for LayerNorm), saved when store_stats."""
    # The backward's input h is what the rows were normalized from: residual_out
    # when a residual was added (as stored, like the kernel saw it), else x.
    h_saved = residual is not None and store_residual_out
    ctx.save_for_backward(residual_out if h_saved else x, None if h_saved else residual, weight,
                          *(stats if store_stats else (None,) * len(stats)))
    ctx.x_dtype = x.dtype
    ctx.residual_dtype = residual.dtype if residual is not None else None
    ctx.bias_dtype = bias.dtype if bias is not None else None
    ctx.bias_heads = bias.shape[0] if bias is not None and bias.dim() == 2 else 0
    ctx.eps = eps
    ctx.weight_offset = weight_offset
    ctx.store_residual_out = store_residual_out
    ctx.mark_non_differentiable(*stats)
    # Unused outputs (residual_out without prenorm) then arrive as None rather
    # than as a tensor of zeros that the kernel would have to read.
    ctx.set_materialize_grads(False)


def _setup_context(ctx, inputs, output):
    (x, weight, bias, residual, _out_dtype, _residual_dtype, eps, weight_offset, store_rstd,
     store_residual_out) = inputs
    _out, residual_out, rstd = output
    save_for_backward(ctx, x, weight, bias, residual, eps, weight_offset, store_rstd, store_residual_out,
                      residual_out, (rstd,))


def _grad_rows(g):
    # Incoming gradients are whatever autograd produced (a sum's backward is an
    # expand with stride 0 everywhere): give the kernel a unit-stride last dim.
    if g.stride(-1) != 1 and g.shape[-1] != 1 and g.numel() != 0:
        g = g.contiguous()
    return g


def norm_grads(ctx, dout, dresidual_out, recompute_stats, run_bwd):
    """(grad x, grad weight, grad bias, grad residual) of either norm, from what
    save_for_backward kept. recompute_stats(h_fp32, eps) rebuilds the stats the
    forward did not store; run_bwd(direct, h, weight, dout, stats, dresidual_out,
    dx_dtype, dbias_dtype, dresidual_dtype, weight_offset) runs the backward, as
    the kernel itself (direct) or as the custom op (traced)."""
    h, residual, weight, *stats = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if residual is not None:
        # residual_out was not stored (direct op call): rebuild h in fp32.
        h = h.float() + residual.float()
    if stats[0] is None:
        stats = recompute_stats(h.float(), ctx.eps)
    if dout is None:
        dout = torch.zeros(h.shape, dtype=ctx.x_dtype, device=h.device)
    dout = _grad_rows(dout)
    if dresidual_out is not None and ctx.store_residual_out:
        dresidual_out = _grad_rows(dresidual_out)
    else:
        dresidual_out = None
    want_residual = ctx.residual_dtype is not None and needs[3]
    dresidual_dtype = ctx.residual_dtype if want_residual and ctx.residual_dtype != ctx.x_dtype else None
    # Per-head bias without a weight: the kernel keys heads on the weight, so
    # that (rare) dbias is summed here.
    kernel_db = ctx.bias_dtype is not None and needs[2] and not (weight is None and ctx.bias_heads)
    # Eager backward: the kernel directly (the op's dispatch costs more host time
    # than the kernel takes on small shapes). Traced backwards see the op.
    direct = not torch.is_grad_enabled() and _direct_ok(h, weight, dout, dresidual_out)
    dx, dweight, dbias, dresidual = run_bwd(direct, h, weight, dout, stats, dresidual_out, ctx.x_dtype,
                                            ctx.bias_dtype if kernel_db else None, dresidual_dtype,
                                            ctx.weight_offset)
    grad_bias = None
    if ctx.bias_dtype is not None and needs[2]:
        if kernel_db:
            grad_bias = dbias
        else:
            grad_bias = dout.float().reshape(-1, ctx.bias_heads, dout.shape[-1]).sum(0).to(ctx.bias_dtype)
    grad_residual = None
    if want_residual:
        grad_residual = dresidual if dresidual_dtype is not None else dx
    return (dx if needs[0] else None, dweight if weight is not None and needs[1] else None, grad_bias,
            grad_residual)


def _rms_stats(hf, eps):
    return (torch.rsqrt(hf.square().mean(dim=-1) + eps),)


def _rms_bwd(direct, h, weight, dout, stats, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, weight_offset):
    args = (h, weight, dout, stats[0], dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, weight_offset)
    return _impl.rmsnorm_bwd_impl(*args) if direct else torch.ops.normkit.rmsnorm_bwd(*args)


def _backward(ctx, dout, dresidual_out, _drstd):
    return (*norm_grads(ctx, dout, dresidual_out, _rms_stats, _rms_bwd), None, None, None, None, None, None)


_rmsnorm_fwd_op.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------
# Public functions (signatures of DESIGN §3).


def _needs_grad(*tensors):
    if not torch.is_grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in tensors)


_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_functorch_active = torch._C._are_functorch_transforms_active
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _direct_ok(x, *others):
    """Whether an eager call may skip the dispatcher (host overhead) and call the kernel itself.

    Only for plain CPU/CUDA tensors with no tracing, mode or transform active;
    everything else goes through the custom op.
    """
    if _is_compiling() or type(x) not in _PLAIN or not (x.is_cuda or x.is_cpu):
        return False
    for t in others:
        if t is not None and type(t) not in _PLAIN:
            return False
    return _dispatch_modes() == 0 and _function_modes() == 0 and not _functorch_active()


def _forward(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, store_rstd,
             store_residual_out, grad):
    """(out, residual_out, rstd); the ones not stored are None or empty placeholders."""
    if _direct_ok(x, weight, bias, residual):
        if _ext is not None:
            result = _ext.rmsnorm_fwd(x, weight, bias, residual, out_dtype, residual_dtype, float(eps),
                                      float(weight_offset), store_rstd, store_residual_out, grad)
            if result is not None:
                return result
            # None: a check failed (raised here, naming the argument) or the rows
            # need a copy, which the custom op makes (and logs).
            _impl.check_fwd(x, weight, bias, residual, out_dtype, residual_dtype, weight_offset)
        elif not grad:
            return _impl.rmsnorm_fwd_impl(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                                          store_rstd, store_residual_out, False)
    return torch.ops.normkit.rmsnorm_fwd(x, weight, bias, residual, out_dtype, residual_dtype, float(eps),
                                         float(weight_offset), store_rstd, store_residual_out)


def rmsnorm_fwd(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                residual: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
                residual_dtype: Optional[torch.dtype] = None, eps: float = 1e-6, store_rstd: bool = False,
                weight_offset: float = 0.0) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """RMSNorm forward over the last dimension of x; returns (out, residual_out, rstd).

        h = x + residual (fp32), rstd = 1 / sqrt(mean(h^2) + eps),
        out = h * rstd * (weight + weight_offset) + bias  (in out_dtype, default x.dtype)

    residual_out is h in residual_dtype (default residual's dtype, else x's); it
    is x itself when there is no residual and no dtype change. rstd (fp32, shape
    x.shape[:-1]) is returned when store_rstd, else None. A 2-D weight (H, N)
    with x (..., H, N) is per-head mode. Differentiable.
    """
    grad = _needs_grad(x, weight, bias, residual)
    store_res = residual is not None or (residual_dtype is not None and residual_dtype != x.dtype)
    out, residual_out, rstd = _forward(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                                       store_rstd or grad, store_res, grad)
    return out, (residual_out if store_res else x), (rstd if store_rstd else None)


def rmsnorm_bwd(x: Tensor, weight: Optional[Tensor], dout: Tensor, rstd: Tensor,
                dresidual_out: Optional[Tensor] = None, has_bias: bool = False, has_residual: bool = False,
                weight_offset: float = 0.0) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """RMSNorm backward; returns (dx, dw, db, dresidual).

    x is h as the forward saw it (residual_out when a residual was added), rstd
    the forward's. With xhat = x * rstd and g = dout * (weight + weight_offset):
        dx = rstd * (g - xhat * mean(g * xhat)) + dresidual_out   (in x's dtype)
        dw = sum over rows of dout * xhat (weight's dtype), db = sum over rows of dout
    db (if has_bias) has weight's dtype, else x's. dresidual (if has_residual) is dx,
    in dresidual_out's dtype when that differs from x's (then a separate tensor).
    """
    db_dtype, dres_dtype = bwd_dtypes(x, weight, dresidual_out, has_bias, has_residual)
    args = (x, weight, dout, rstd, dresidual_out, None, db_dtype, dres_dtype, float(weight_offset))
    result = None
    if not _needs_grad(x, weight, dout, rstd, dresidual_out) and _direct_ok(x, weight, dout, rstd, dresidual_out):
        if _ext is not None:
            result = _ext.rmsnorm_bwd(*args)
            if result is None:
                _impl.check_bwd(*args[:-1])  # raises naming the argument, unless rows need a copy
        else:
            result = _impl.rmsnorm_bwd_impl(*args)
    if result is None:
        result = torch.ops.normkit.rmsnorm_bwd(*args)
    return bwd_result(result, weight, has_bias, has_residual, dres_dtype)


def bwd_dtypes(x, weight, dresidual_out, has_bias, has_residual):
    """(dbias dtype, dresidual dtype) of the public backward functions (None: not computed,
    or for dresidual: dx itself): db in weight's dtype (x's without weight), dresidual
    separate only when dresidual_out's dtype differs from x's."""
    db_dtype = (weight.dtype if weight is not None else x.dtype) if has_bias else None
    dres_dtype = None
    if has_residual and dresidual_out is not None and dresidual_out.dtype != x.dtype:
        dres_dtype = dresidual_out.dtype
    return db_dtype, dres_dtype


def bwd_result(result, weight, has_bias, has_residual, dres_dtype):
    """The op's (dx, dweight, dbias, dresidual) as the public functions return them."""
    dx, dw, db, dres = result
    if has_residual:
        dres = dres if dres_dtype is not None else dx
    else:
        dres = None
    return dx, (dw if weight is not None else None), (db if has_bias else None), dres


def rmsnorm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
            residual: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
            residual_dtype: Optional[torch.dtype] = None, eps: float = 1e-6, prenorm: bool = False,
            weight_offset: float = 0.0):
    """RMSNorm with autograd: out, or (out, residual_out) when prenorm.

        h = x + residual (fp32), out = h / sqrt(mean(h^2) + eps) * (weight + weight_offset) + bias

    See rmsnorm_fwd for dtypes and per-head mode. Gradients flow to x, weight,
    bias and residual (and from residual_out when prenorm).
    """
    # With normkit._torch_C this runs only for the calls its C entry hands over (a failed
    # check, which raises below, rows that need a copy, a subclass, mode or transform, other
    # argument types), and under torch.compile, which traces it as that entry's polyfill.
    grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                        or (bias is not None and bias.requires_grad)
                                        or (residual is not None and residual.requires_grad))
    makes_res = residual is not None or (residual_dtype is not None and residual_dtype != x.dtype)
    # residual_out is written when returned, or when a residual makes it the
    # backward's input; otherwise that write is skipped.
    store_res = (prenorm and makes_res) or (grad and residual is not None)
    out, residual_out, _ = _forward(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                                    grad, store_res, grad)
    if prenorm:
        return out, (residual_out if makes_res else x)
    return out


# normkit.torch.rmsnorm is the C function normkit._torch_C.public_rmsnorm: a plain call goes
# from it to the C++ path with no Python frame, every other call to the function above
# (_eager_entry.py says why). That function keeps the name rmsnorm, which its errors name.
_rmsnorm_py = rmsnorm
rmsnorm = _eager_entry.c_entry(_ext, "rmsnorm", _rmsnorm_py)
