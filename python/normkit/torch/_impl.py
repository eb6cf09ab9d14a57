"""Tensor -> normkit._C translation: checks, row layouts, output allocation.

Everything here runs eagerly on real tensors, except the ``check_*`` and
``*_meta`` functions, which only read metadata and so also serve the fake
(meta) implementations that torch.compile traces.
"""

import logging
import math
import os

import torch

from normkit import _C, NormkitError

# Names the C++ API takes. float64 exists for the CPU fallback only (float64
# verification such as gradcheck); the GPU kernels take the first three, and
# CUDA tensors in float64 are refused here, before C++ is called.
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}
_GPU_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32))

_log = logging.getLogger("normkit")
_logged = set()


def dtype_name(dtype, what, cuda=False):
    """The C++ name of `dtype`; TypeError naming `what` when the call (on CUDA if `cuda`) cannot take it."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        raise TypeError(f"{what}: unsupported dtype {dtype}; normkit supports torch.float16, "
                        "torch.bfloat16, torch.float32 and, on CPU only, torch.float64")
    if cuda and dtype not in _GPU_DTYPES:
        raise TypeError(f"{what}: {dtype} runs only on the CPU fallback; CUDA tensors take torch.float16, "
                        "torch.bfloat16 and torch.float32")
    return name


def _same_device(t, what, x):
    if t.device != x.device:
        raise ValueError(f"{what} is on {t.device} but x is on {x.device}; every tensor must be on x's device")


def _last_dim_contiguous(t, what):
    # Empty tensors are contiguous whatever their strides say.
    if t.stride(-1) != 1 and t.shape[-1] != 1 and t.numel() != 0:
        raise ValueError(f"{what}: the last dimension must be contiguous (stride 1), got stride {t.stride(-1)} "
                         f"for shape {tuple(t.shape)}; call .contiguous() on it first")


def _check_rows_like(t, what, x):
    """t must be a (..., N) tensor of x's shape, on x's device, in a supported dtype."""
    dtype_name(t.dtype, what, x.is_cuda)
    _same_device(t, what, x)
    if t.shape != x.shape:
        raise ValueError(f"{what}: expected shape {tuple(x.shape)} (x's shape), got {tuple(t.shape)}")
    _last_dim_contiguous(t, what)


def _param_heads(p, what, x):
    """Rows of a weight/bias: (N,) -> 1, (H, N) with x (..., H, N) -> H (per-head mode)."""
    dtype_name(p.dtype, what, x.is_cuda)
    _same_device(p, what, x)
    n = x.shape[-1]
    if p.dim() == 1:
        if p.shape[0] != n:
            raise ValueError(f"{what}: expected shape ({n},) to match x's last dimension, got {tuple(p.shape)}")
        return 1
    if p.dim() == 2:
        if x.dim() < 2 or p.shape[1] != n or x.shape[-2] != p.shape[0]:
            raise ValueError(f"{what}: a 2-D {what} (H, N) is per-head mode and needs x of shape (..., H, N); "
                             f"got {what} {tuple(p.shape)} and x {tuple(x.shape)}")
        return p.shape[0]
    raise ValueError(f"{what}: expected shape (N,) or (H, N), got {tuple(p.shape)}")


def check_fwd(x, weight, bias, residual, out_dtype, residual_dtype, weight_offset):
    """Validates forward arguments (metadata only); returns the number of heads."""
    cuda = x.is_cuda
    dtype_name(x.dtype, "x", cuda)
    if x.dim() == 0:
        raise ValueError("x: expected a tensor with at least one dimension, got a scalar")
    _last_dim_contiguous(x, "x")
    heads = 1
    if weight is not None:
        if weight.dim() == 1 and weight.dtype in (_GPU_DTYPES if cuda else _DTYPE_NAMES) \
                and weight.device == x.device \
                and weight.shape[0] == x.shape[-1]:
            pass  # the usual shared weight, checked in one step
        else:
            heads = _param_heads(weight, "weight", x)
    if bias is not None:
        bias_heads = _param_heads(bias, "bias", x)
        if weight is not None and bias.shape != weight.shape:
            raise ValueError(f"bias: expected weight's shape {tuple(weight.shape)}, got {tuple(bias.shape)}")
        heads = bias_heads
    if residual is not None:
        _check_rows_like(residual, "residual", x)
    if out_dtype is not None:
        dtype_name(out_dtype, "out_dtype", cuda)
    if residual_dtype is not None:
        dtype_name(residual_dtype, "residual_dtype", cuda)
    if weight_offset != 0.0 and weight is None:
        raise ValueError(f"weight_offset: {weight_offset} needs a weight (out = x_hat * (weight + weight_offset))")
    return heads


def _check_stat(t, what, x):
    """mean / rstd as the forward stores them: fp32, one value per row of x, on x's device."""
    _same_device(t, what, x)
    if t.dtype != torch.float32:
        raise TypeError(f"{what}: expected torch.float32 (as the forward stores it), got {t.dtype}")
    if t.numel() != math.prod(x.shape[:-1]):
        raise ValueError(f"{what}: expected one value per row of x ({math.prod(x.shape[:-1])}), "
                         f"got shape {tuple(t.shape)}")


def check_bwd(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, mean=None):
    """Validates backward arguments (metadata only); returns the number of heads. mean: LayerNorm's."""
    cuda = x.is_cuda
    dtype_name(x.dtype, "x", cuda)
    if x.dim() == 0:
        raise ValueError("x: expected a tensor with at least one dimension, got a scalar")
    _last_dim_contiguous(x, "x")
    heads = _param_heads(weight, "weight", x) if weight is not None else 1
    _check_rows_like(dout, "dout", x)
    if dresidual_out is not None:
        _check_rows_like(dresidual_out, "dresidual_out", x)
    if mean is not None:
        _check_stat(mean, "mean", x)
    _check_stat(rstd, "rstd", x)
    for what, dtype in (("dx_dtype", dx_dtype), ("dbias_dtype", dbias_dtype), ("dresidual_dtype", dresidual_dtype)):
        if dtype is not None:
            dtype_name(dtype, what, cuda)
    return heads


def _absent(x, dtype=None):
    # Custom ops return a fixed number of tensors; an output that was not asked
    # for is an empty 1-D tensor (the caller knows from its flags which ones).
    return x.new_empty((0,), dtype=dtype or x.dtype)


def _rows_like(x, dtype):
    # empty_like with an explicit contiguous format: the cheapest allocation
    # (host overhead) and always contiguous, which the fake outputs mirror.
    return torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)


def _stat_meta(x, store, placeholders=True):
    # One fp32 value per row (mean, rstd), or a placeholder.
    if store:
        return x.new_empty(x.shape[:-1], dtype=torch.float32)
    return _absent(x, torch.float32) if placeholders else None


def fwd_meta(x, weight, bias, residual, out_dtype, residual_dtype, store_rstd, store_residual_out,
             placeholders=True):
    """Allocates (out, residual_out, rstd); outputs not asked for are empty placeholders, or None."""
    out = torch.empty_like(x, dtype=out_dtype, memory_format=torch.contiguous_format)
    if store_residual_out:
        res_dtype = residual_dtype or (residual.dtype if residual is not None else x.dtype)
        residual_out = _rows_like(x, res_dtype)
    else:
        residual_out = _absent(x) if placeholders else None
    return out, residual_out, _stat_meta(x, store_rstd, placeholders)


def layernorm_fwd_meta(x, weight, bias, residual, out_dtype, residual_dtype, store_stats, store_residual_out,
                       placeholders=True):
    """Allocates LayerNorm's (out, residual_out, mean, rstd), as fwd_meta."""
    out, residual_out, rstd = fwd_meta(x, weight, bias, residual, out_dtype, residual_dtype, store_stats,
                                       store_residual_out, placeholders)
    return out, residual_out, _stat_meta(x, store_stats, placeholders), rstd


def bwd_meta(x, weight, heads, dx_dtype, dbias_dtype, dresidual_dtype):
    dx = _rows_like(x, dx_dtype or x.dtype)
    dweight = x.new_empty(weight.shape, dtype=weight.dtype) if weight is not None else _absent(x)
    if dbias_dtype is not None:
        n = x.shape[-1]
        dbias = x.new_empty((heads, n) if weight is not None and weight.dim() == 2 else (n,), dtype=dbias_dtype)
    else:
        dbias = _absent(x)
    dresidual = _rows_like(x, dresidual_dtype) if dresidual_dtype is not None else _absent(x)
    return dx, dweight, dbias, dresidual


# ---------------------------------------------------------------------------
# Row layouts. The C++ API addresses row r at
#     (r // rows_inner) * stride_outer + (r % rows_inner) * stride_inner.
# A tensor whose leading dims merge into one strided dim works with any
# rows_inner; one that merges into two works only with rows_inner = the inner
# size; more than two needs a copy.

_ANY = None


def _row_layout(t):
    """(rows_inner or _ANY, stride_outer, stride_inner), or None when not expressible."""
    n = t.shape[-1]
    if t.is_contiguous():
        return _ANY, 0, n
    dims = []  # merged (size, stride), outermost first
    shape, strides = t.shape, t.stride()
    for i in range(t.dim() - 1):
        size = shape[i]
        if size == 1:
            continue
        stride = strides[i]
        if dims and dims[-1][1] == size * stride:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    if len(dims) <= 1:
        return _ANY, 0, dims[0][1] if dims else n
    if len(dims) == 2:
        return dims[1][0], dims[0][1], dims[1][1]
    return None


def log_once(key, message, *args):
    """A warning on the "normkit" logger, once per process and key; NORMKIT_LOG=error (or off) silences it."""
    if key in _logged:
        return
    _logged.add(key)
    level = os.environ.get("NORMKIT_LOG", "warn").strip().lower()
    if level in ("off", "error", "none", "0"):
        return
    _log.warning("[normkit] " + message, *args)


def _log_copy_once(op, what, t, why):
    log_once((op, what, why), "%s: %s (shape %s, strides %s) %s; copying it to a contiguous tensor. "
             "Logged once; NORMKIT_LOG=error silences it.", op, what, tuple(t.shape), t.stride(), why)


def plan_rows(op, tensors):
    """Picks one rows_inner that every tensor of `tensors` ((name, tensor or None), ...) can use.

    Returns (rows_inner, [(tensor, stride_outer, stride_inner) or None, ...]); a
    tensor whose rows cannot be described, or that disagrees with the first
    two-level layout, is replaced by a contiguous copy (logged once).
    """
    layouts = []
    inner = _ANY
    for what, t in tensors:
        if t is None:
            layouts.append(None)
            continue
        lay = _row_layout(t)
        if lay is None:
            _log_copy_once(op, what, t, "has rows that are not expressible with two strides")
            t = t.contiguous()
            lay = (_ANY, 0, t.shape[-1])
        elif lay[0] is not _ANY:
            if inner is _ANY:
                inner = lay[0]
            elif lay[0] != inner:
                _log_copy_once(op, what, t, "has a row layout that differs from the other inputs'")
                t = t.contiguous()
                lay = (_ANY, 0, t.shape[-1])
        layouts.append((t, lay))
    rows_inner = 0 if inner is _ANY else inner
    planned = []
    for entry in layouts:
        if entry is None:
            planned.append(None)
            continue
        t, (lay_inner, so, si) = entry
        if lay_inner is _ANY:
            so = rows_inner * si
        planned.append((t, so, si))
    return rows_inner, planned


def _raw_stream(device_index):
    return torch._C._cuda_getCurrentRawStream(device_index)


def _device_of(x):
    """(C++ device argument, stream): -1 for host data, else the CUDA ordinal."""
    index = x.get_device()
    if index >= 0:
        if not x.is_cuda:
            raise ValueError(f"x: normkit runs on CPU and CUDA tensors, got a tensor on {x.device}")
        return index, _raw_stream(index)
    if not x.is_cpu:
        raise ValueError(f"x: normkit runs on CPU and CUDA tensors, got a tensor on {x.device}")
    return -1, 0


def _flat(t):
    # One value per row, contiguous; is_contiguous() is a field read where
    # contiguous() is a dispatcher call (host time on every backward).
    t = t.reshape(-1)
    return t if t.is_contiguous() else t.contiguous()


def _ptr(t):
    return 0 if t is None else t.data_ptr()


def _name(t):
    return "" if t is None else _DTYPE_NAMES[t.dtype]


# ---------------------------------------------------------------------------


def _fwd_impl(c_fwd, op, x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, store_stats,
              store_residual_out, placeholders, with_mean):
    """The forward of either norm through `c_fwd` (_C.rmsnorm_fwd or _C.layernorm_fwd).

    Returns (out, residual_out, mean, rstd); mean is None unless with_mean, and
    the outputs not stored are empty placeholders or, with placeholders=False, None.
    """
    # Every eager forward runs this: the common case (contiguous rows, no
    # residual) takes as few Python steps as possible.
    heads = check_fwd(x, weight, bias, residual, out_dtype, residual_dtype, weight_offset)
    device, stream = _device_of(x)
    out, residual_out, rstd = fwd_meta(x, weight, bias, residual, out_dtype, residual_dtype, store_stats,
                                       store_residual_out, placeholders)
    mean = _stat_meta(x, store_stats, placeholders) if with_mean else None
    n = x.shape[-1]
    m = x.numel() // n if n else math.prod(x.shape[:-1])
    if m == 0 or n == 0:
        if store_stats and m:
            # The mean and variance over no elements are 0.
            rstd.fill_(1.0 / math.sqrt(eps) if eps > 0 else math.inf)
            if mean is not None:
                mean.zero_()
        return out, residual_out, mean, rstd
    w_ptr = b_ptr = 0
    w_name = b_name = ""
    if weight is not None:
        if not weight.is_contiguous():
            weight = weight.contiguous()
        w_ptr, w_name = weight.data_ptr(), _DTYPE_NAMES[weight.dtype]
    if bias is not None:
        if not bias.is_contiguous():
            bias = bias.contiguous()
        b_ptr, b_name = bias.data_ptr(), _DTYPE_NAMES[bias.dtype]
    if residual is None and x.is_contiguous():
        rows_inner, x_so, x_si = 0, 0, n
        r_ptr, r_name, r_so, r_si = 0, "", 0, 0
    else:
        rows_inner, (xs, rs) = plan_rows(op, (("x", x), ("residual", residual)))
        x, x_so, x_si = xs
        if rs is None:
            r_ptr, r_name, r_so, r_si = 0, "", 0, 0
        else:
            res, r_so, r_si = rs
            r_ptr, r_name = res.data_ptr(), _DTYPE_NAMES[res.dtype]
    o_so = rows_inner * n
    if store_residual_out:
        ro_ptr, ro_name = residual_out.data_ptr(), _DTYPE_NAMES[residual_out.dtype]
    else:
        ro_ptr, ro_name = 0, ""
    c_fwd(m, n, rows_inner,
          x.data_ptr(), _DTYPE_NAMES[x.dtype], x_so, x_si,
          r_ptr, r_name, r_so, r_si,
          out.data_ptr(), _DTYPE_NAMES[out.dtype], o_so, n,
          ro_ptr, ro_name, o_so, n,
          w_ptr, w_name, b_ptr, b_name, heads,
          mean.data_ptr() if store_stats and with_mean else 0, rstd.data_ptr() if store_stats else 0,
          eps, weight_offset, device, stream)
    return out, residual_out, mean, rstd


def rmsnorm_fwd_impl(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset, store_rstd,
                     store_residual_out, placeholders=True):
    """out = h * rstd * (weight + weight_offset) + bias with h = x + residual, rstd = 1/sqrt(mean(h^2) + eps).

    Returns (out, residual_out, rstd); the ones not stored are empty placeholders
    (what the custom op returns) or, with placeholders=False, None.
    """
    out, residual_out, _, rstd = _fwd_impl(_C.rmsnorm_fwd, "rmsnorm_fwd", x, weight, bias, residual, out_dtype,
                                           residual_dtype, eps, weight_offset, store_rstd, store_residual_out,
                                           placeholders, False)
    return out, residual_out, rstd


def layernorm_fwd_impl(x, weight, bias, residual, out_dtype, residual_dtype, eps, store_stats, store_residual_out,
                       placeholders=True):
    """out = (h - mean) * rstd * weight + bias with h = x + residual, mean = mean(h),
    rstd = 1/sqrt(mean((h - mean)^2) + eps). Returns (out, residual_out, mean, rstd), as rmsnorm_fwd_impl."""
    return _fwd_impl(_C.layernorm_fwd, "layernorm_fwd", x, weight, bias, residual, out_dtype, residual_dtype, eps,
                     0.0, store_stats, store_residual_out, placeholders, True)


def _bwd_impl(c_bwd, c_workspace, op, x, weight, dout, mean, rstd, dresidual_out, dx_dtype, dbias_dtype,
              dresidual_dtype, weight_offset):
    """The backward of either norm through `c_bwd` / `c_workspace` (_C.rmsnorm_* or _C.layernorm_*);
    mean is LayerNorm's (None for RMSNorm). Returns (dx, dweight, dbias, dresidual)."""
    heads = check_bwd(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, mean)
    device, stream = _device_of(x)
    dx, dweight, dbias, dresidual = bwd_meta(x, weight, heads, dx_dtype, dbias_dtype, dresidual_dtype)
    n = x.shape[-1]
    m = math.prod(x.shape[:-1])
    if m == 0 or n == 0:
        dweight.zero_()
        dbias.zero_()
        return dx, dweight, dbias, dresidual
    if weight is not None and not weight.is_contiguous():
        weight = weight.contiguous()
    rstd = _flat(rstd)
    mean_ptr = 0 if mean is None else _flat(mean).data_ptr()
    rows_inner, (xs, ds, rs) = plan_rows(op, (("x", x), ("dout", dout),
                                                          ("dresidual_out", dresidual_out)))
    x, x_so, x_si = xs
    dout, d_so, d_si = ds
    dres_out, r_so, r_si = rs if rs is not None else (None, 0, 0)
    o_so = rows_inner * n
    dres = dresidual if dresidual_dtype is not None else None
    db = dbias if dbias_dtype is not None else None
    args = [m, n, rows_inner,
            x.data_ptr(), _DTYPE_NAMES[x.dtype], x_so, x_si,
            dout.data_ptr(), _DTYPE_NAMES[dout.dtype], d_so, d_si,
            _ptr(dres_out), _name(dres_out), r_so, r_si,
            dx.data_ptr(), _DTYPE_NAMES[dx.dtype], o_so, n,
            _ptr(dres), _name(dres), o_so, n,
            _ptr(weight), _name(weight), heads, mean_ptr, rstd.data_ptr(),
            _ptr(dweight) if weight is not None else 0, _ptr(db), _name(db), weight_offset]
    workspace, workspace_bytes = 0, 0
    if device >= 0:
        workspace_bytes = c_workspace(*args, 0, 0, device, stream)
        if workspace_bytes:
            buffer = torch.empty(workspace_bytes, dtype=torch.uint8, device=x.device)
            workspace = buffer.data_ptr()
    c_bwd(*args, workspace, workspace_bytes, device, stream)
    return dx, dweight, dbias, dresidual


def rmsnorm_bwd_impl(x, weight, dout, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype,
                     weight_offset):
    """dx = rstd * (g - xhat * mean(g * xhat)) + dresidual_out with xhat = x * rstd, g = dout * (weight + offset);
    dweight = sum_rows dout * xhat, dbias = sum_rows dout (per head in per-head mode)."""
    return _bwd_impl(_C.rmsnorm_bwd, _C.rmsnorm_bwd_workspace_bytes, "rmsnorm_bwd", x, weight, dout, None, rstd,
                     dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, weight_offset)


def layernorm_bwd_impl(x, weight, dout, mean, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype):
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual_out with xhat = (x - mean) * rstd,
    g = dout * weight; dweight = sum_rows dout * xhat, dbias = sum_rows dout."""
    return _bwd_impl(_C.layernorm_bwd, _C.layernorm_bwd_workspace_bytes, "layernorm_bwd", x, weight, dout, mean,
                     rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype, 0.0)


def check_fused_add(x, residual, weight, bias, weight_offset):
    """Validates a fused add's arguments (metadata only); returns the number of heads."""
    if residual is None:
        raise ValueError("residual: the fused add needs a residual tensor (it is updated in place)")
    return check_fwd(x, weight, bias, residual, None, None, weight_offset)


def _writable(rows_inner, stride_outer, stride_inner, n, m):
    """Whether rows with this layout are a valid output for the C++ API (norm_validate's check_output)."""
    if rows_inner > 1 and stride_inner < n:
        return False
    return m <= rows_inner or stride_outer >= (rows_inner - 1) * stride_inner + n


def fused_add_impl(c_fused_add, op, x, residual, weight, bias, eps, weight_offset):
    """In place: residual <- x + residual, x <- norm(residual) through `c_fused_add`
    (_C.fused_add_rmsnorm or _C.fused_add_layernorm). Rows that two strides cannot
    describe are computed on contiguous copies and copied back (logged once)."""
    heads = check_fused_add(x, residual, weight, bias, weight_offset)
    device, stream = _device_of(x)
    n = x.shape[-1]
    if x.numel() == 0:
        return
    if weight is not None and not weight.is_contiguous():
        weight = weight.contiguous()
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    m = x.numel() // n
    rows_inner, ((xs, x_so, x_si), (rs, r_so, r_si)) = plan_rows(op, (("x", x), ("residual", residual)))
    if not (_writable(rows_inner or m, x_so, x_si, n, m) and _writable(rows_inner or m, r_so, r_si, n, m)):
        # Both are written: the C++ API takes output rows ordered outer over inner
        # (a permuted view is not); compute on contiguous copies instead.
        _log_copy_once(op, "x/residual", x, "has rows in an order the kernels cannot write in place")
        rows_inner, xs, rs = 0, x.contiguous(), residual.contiguous()
        x_so = x_si = r_so = r_si = n
    c_fused_add(m, n, rows_inner,
                xs.data_ptr(), _DTYPE_NAMES[xs.dtype], x_so, x_si,
                rs.data_ptr(), _DTYPE_NAMES[rs.dtype], r_so, r_si,
                _ptr(weight), _name(weight), _ptr(bias), _name(bias), heads, eps, weight_offset, device, stream)
    if xs is not x:
        x.copy_(xs)
    if rs is not residual:
        residual.copy_(rs)


__all__ = ["NormkitError", "check_fwd", "check_bwd", "fwd_meta", "layernorm_fwd_meta", "bwd_meta",
           "rmsnorm_fwd_impl", "rmsnorm_bwd_impl", "layernorm_fwd_impl", "layernorm_bwd_impl", "check_fused_add", "fused_add_impl", "dtype_name"]
