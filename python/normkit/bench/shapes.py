"""The shapes a run measures, as a flat list of cases.

A case is everything that defines one measurement except the implementation,
so that every implementation of a case sees the same inputs and is compared
against the same copy. Sweep shapes hold M*N fixed (DESIGN §4: 2^27 on a GPU)
so that every N moves the same bytes; decode shapes are the small-M latency
cases, timed by CUDA-graph replay because a single call is shorter than the
host's launch overhead.
"""

import dataclasses

from .options import CPU_ELEMENTS, GPU_ELEMENTS, BenchUsageError

OP = "rmsnorm"
SWEEP = "sweep"
DECODE = "decode"


@dataclasses.dataclass(frozen=True)
class Case:
    dtype: str
    direction: str  # "fwd" or "bwd"
    residual: bool
    M: int
    N: int
    kind: str  # SWEEP or DECODE

    @property
    def label(self):
        return (f"{self.direction} {self.dtype} {self.M}x{self.N}"
                f"{' +residual' if self.residual else ''}{' (decode)' if self.kind == DECODE else ''}")


def sweep_elements(opts, gpu):
    return opts.elements or (GPU_ELEMENTS if gpu else CPU_ELEMENTS)


def cases(opts, gpu):
    """Sweep cases first (grouped as the plot's panels are), then decode cases."""
    elements = sweep_elements(opts, gpu)
    too_small = [n for n in opts.n if n > elements]
    if too_small:
        raise BenchUsageError(f"--elements: {elements} is smaller than N={too_small[0]} (M = elements / N "
                              "would be 0)")
    out = []
    for dtype in opts.dtypes:
        for direction in opts.directions:
            for residual in opts.residual:
                out.extend(Case(dtype, direction, residual, elements // n, n, SWEEP) for n in opts.n)
    for dtype in opts.dtypes:
        for direction in opts.directions:
            for residual in opts.residual:
                out.extend(Case(dtype, direction, residual, m, n, DECODE) for m, n in opts.decode_shapes)
    return out
