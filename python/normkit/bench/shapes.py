"""The shapes a run measures, as a flat list of cases.

A case is everything that defines one measurement except the implementation,
so that every implementation of a case sees the same inputs and is compared
against the same copy. Sweep shapes hold M*N fixed (DESIGN §4: 2^27 on a GPU)
so that every N moves the same bytes; decode shapes are the small-M latency
cases, timed by CUDA-graph replay because a single call is shorter than the
host's launch overhead.
"""

import dataclasses

from .options import CPU_ELEMENTS, FUSED_ADD_OPS, GPU_ELEMENTS, BenchUsageError

OP = "rmsnorm"  # the default operator (and the only one of schema_version 1 files written before --op)
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
    op: str = OP

    @property
    def fused_add(self):
        """In place (x and residual overwritten): the inputs drift across calls."""
        return self.op in FUSED_ADD_OPS

    @property
    def has_bias(self):
        return self.op in ("layernorm", "fused_add_layernorm")

    @property
    def label(self):
        return (f"{self.op} {self.direction} {self.dtype} {self.M}x{self.N}"
                f"{' +residual' if self.residual else ''}{' (decode)' if self.kind == DECODE else ''}")


def sweep_elements(opts, gpu):
    return opts.elements or (GPU_ELEMENTS if gpu else CPU_ELEMENTS)


def _variants(opts, op):
    """(direction, residual) pairs of an operator: the fused adds are forward only and always add a residual."""
    if op in FUSED_ADD_OPS:
        return [("fwd", True)] if "fwd" in opts.directions else []
    return [(direction, residual) for direction in opts.directions for residual in opts.residual]


def cases(opts, gpu):
    """Sweep cases first (per operator, grouped as the plot's panels are), then decode cases."""
    elements = sweep_elements(opts, gpu)
    too_small = [n for n in opts.n if n > elements]
    if too_small:
        raise BenchUsageError(f"--elements: {elements} is smaller than N={too_small[0]} (M = elements / N "
                              "would be 0)")
    out = []
    for op in opts.ops:
        for dtype in opts.dtypes:
            for direction, residual in _variants(opts, op):
                out.extend(Case(dtype, direction, residual, elements // n, n, SWEEP, op) for n in opts.n)
    for op in opts.ops:
        for dtype in opts.dtypes:
            for direction, residual in _variants(opts, op):
                out.extend(Case(dtype, direction, residual, m, n, DECODE, op) for m, n in opts.decode_shapes)
    return out
