"""PyTorch front end: RMSNorm, LayerNorm and the in-place fused adds as torch.library
custom ops (namespace ``normkit``) with autograd, fake implementations for
torch.compile, and nn.Modules.

CPU tensors run the C++ CPU fallback, CUDA tensors the JIT-compiled kernels on
the tensor's device and current stream.
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("normkit.torch needs PyTorch (pip install torch); the rest of normkit works without it") from e

from ._fused_add import fused_add_layernorm, fused_add_rmsnorm
from ._layernorm import layernorm, layernorm_bwd, layernorm_fwd
from ._modules import LayerNorm, RMSNorm
from ._ops import rmsnorm, rmsnorm_bwd, rmsnorm_fwd

__all__ = ["rmsnorm", "rmsnorm_fwd", "rmsnorm_bwd", "RMSNorm", "layernorm", "layernorm_fwd", "layernorm_bwd",
           "LayerNorm", "fused_add_rmsnorm", "fused_add_layernorm"]
