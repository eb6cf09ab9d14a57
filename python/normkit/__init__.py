"""normkit: GPU normalization kernels on a small JIT CUDA runtime.

Importing normkit loads neither the CUDA driver nor NVRTC (nor torch): the
runtime opens them on first GPU use, so ``import normkit`` works on any machine
and only a GPU call reports what is missing.
"""

import os as _os
import sys as _sys

from . import _C
from ._C import NormkitError, cache_dir, counters, reset_counters

__version__ = "0.1.0"

__all__ = ["__version__", "NormkitError", "counters", "reset_counters", "cache_dir"]

# Where NVIDIA's pip wheels put libnvrtc, relative to a site-packages directory.
# cuda_nvrtc/lib is the CUDA 12 wheel layout, cu13/lib and cu12/lib the newer one.
_NVRTC_WHEEL_SUBDIRS = (
    ("nvidia", "cuda_nvrtc", "lib"),
    ("nvidia", "cu13", "lib"),
    ("nvidia", "cu12", "lib"),
)


def _nvrtc_wheel_dirs():
    # Only os.path checks: importing the nvidia packages would be slower and
    # could itself load CUDA libraries.
    dirs = []
    for entry in _sys.path:
        base = _os.path.abspath(entry or _os.curdir)
        for parts in _NVRTC_WHEEL_SUBDIRS:
            candidate = _os.path.join(base, *parts)
            if candidate not in dirs and _os.path.isdir(candidate):
                dirs.append(candidate)
    return dirs


_C.add_nvrtc_search_dirs(_nvrtc_wheel_dirs())

# The PyTorch front end, imported on first use so that `import normkit` never
# imports torch.
_TORCH_NAMES = frozenset(("rmsnorm", "rmsnorm_fwd", "rmsnorm_bwd", "RMSNorm", "layernorm", "layernorm_fwd",
                          "layernorm_bwd", "LayerNorm", "fused_add_rmsnorm", "fused_add_layernorm"))


def __getattr__(name):
    if name in _TORCH_NAMES:
        from . import torch as _normkit_torch

        return getattr(_normkit_torch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
