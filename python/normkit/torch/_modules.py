"""torch.nn modules backed by normkit kernels."""

import numbers

import torch
from torch.nn import init

from ._ops import rmsnorm


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
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
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
        k = len(self.normalized_shape)
        if x.dim() < k or tuple(x.shape[x.dim() - k:]) != self.normalized_shape:
            raise ValueError(f"input: expected shape (*, {', '.join(map(str, self.normalized_shape))}) "
                             f"for normalized_shape={self.normalized_shape}, got {tuple(x.shape)}")
        eps = self.eps
        if eps is None:
            # torch computes 16-bit inputs in fp32 and takes that type's epsilon.
            eps = torch.finfo(torch.promote_types(x.dtype, torch.float32)).eps
        if k == 1:
            return rmsnorm(x, self.weight, eps=eps)
        weight = self.weight.reshape(-1) if self.weight is not None else None
        out = rmsnorm(x.flatten(x.dim() - k), weight, eps=eps)
        return out.view(x.shape)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
