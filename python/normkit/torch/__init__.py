"""PyTorch front end: RMSNorm as torch.library custom ops (namespace ``normkit``)
with autograd, fake implementations for torch.compile, and an nn.Module.

CPU tensors run the C++ CPU fallback, CUDA tensors the JIT-compiled kernels on
the tensor's device and current stream.
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("normkit.torch needs PyTorch (pip install torch); the rest of normkit works without it") from e

from ._modules import RMSNorm
from ._ops import rmsnorm, rmsnorm_bwd, rmsnorm_fwd

__all__ = ["rmsnorm", "rmsnorm_fwd", "rmsnorm_bwd", "RMSNorm"]
