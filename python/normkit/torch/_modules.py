"""torch.nn modules backed by normkit kernels."""

import numbers

import torch
from torch.nn import init

from ._layernorm import layernorm
from ._ops import rmsnorm


def _normalized_shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (normalized_shape,)
    return tuple(int(d) for d in normalized_shape)


def _flat_rows(norm, x, params, call):
    """call(x2, *params2) over the last len(normalized_shape) dims of x, flattened
    to one row dimension (the kernels normalize the last dimension only)."""
    shape = norm.normalized_shape
    k = len(shape)
    if x.dim() < k or tuple(x.shape[x.dim() - k:]) != shape:
        raise ValueError(f"input: expected shape (*, {', '.join(map(str, shape))}) "
                         f"for normalized_shape={shape}, got {tuple(x.shape)}")
    if k == 1:
        return call(x, *params)
    flat = [p.reshape(-1) if p is not None else None for p in params]
    return call(x.flatten(x.dim() - k), *flat).view(x.shape)


class RMSNorm(torch.nn.Module):
    """Drop-in for torch.nn.RMSNorm (same constructor, parameter, state dict and repr).

        y = x / sqrt(mean(x^2) + eps) * weight

    over the last len(normalized_shape) dimensions. eps=None uses the machine
    epsilon of the computation dtype (fp32 for 16-bit inputs), as torch does.
    The output has x's dtype; weight may be fp32 with 16-bit inputs.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x):
        eps = self.eps
        if eps is None:
            # torch computes 16-bit inputs in fp32 and takes that type's epsilon.
            eps = torch.finfo(torch.promote_types(x.dtype, torch.float32)).eps
        return _flat_rows(self, x, (self.weight,), lambda rows, w: rmsnorm(rows, w, eps=eps))

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(torch.nn.Module):
    """Drop-in for torch.nn.LayerNorm (same constructor, parameters, state dict keys and repr).

        y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias

    over the last len(normalized_shape) dimensions, var biased, computed in fp32
    (the variance over the centred row). The output has x's dtype; weight and
    bias may be fp32 with 16-bit inputs.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, **factory))
            if bias:
                self.bias = torch.nn.Parameter(torch.empty(self.normalized_shape, **factory))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, x):
        eps = self.eps
        return _flat_rows(self, x, (self.weight, self.bias), lambda rows, w, b: layernorm(rows, w, b, eps=eps))

    def extra_repr(self):
        # torch's own text, which changes between releases (2.15 added bias=).
        return torch.nn.LayerNorm.extra_repr(self)
