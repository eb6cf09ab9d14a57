"""The bytes an RMSNorm call must move: the numerator of every GB/s here.

Bandwidth is counted against the minimum traffic of the operation (each tensor
read or written once, DESIGN §4), never against what an implementation happens
to move, so that GB/s and the ratio to a copy compare implementations on equal
terms: extra traffic (a dW partial buffer, a second pass over x) shows up as a
lower GB/s rather than being credited.

Forward (no grad, so no rstd is stored):
    x read + out written + weight read
    with residual: + residual read + residual_out written
Backward (x is h, what the rows were normalized from: residual_out with a residual):
    x read + dout read + dx written + weight read + rstd read (fp32, one per row) + dw written
    with residual: + dresidual_out read (the gradient that reaches residual_out, as in a
    pre-norm transformer block); dresidual is dx itself, so it adds no write.
"""

import dataclasses

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
RSTD_BYTES = 4


@dataclasses.dataclass(frozen=True)
class Traffic:
    bytes: int
    formula: str  # e.g. "x M*N*2 + out M*N*2 + weight N*2"
    terms: tuple  # ((name, bytes), ...)


def traffic(direction, dtype, M, N, residual):
    """The Traffic of one call; the weight has x's dtype (the benchmark's setting)."""
    e = ELEMENT_BYTES[dtype]
    rows = ("M*N", M * N)
    vec = ("N", N)
    per_row = ("M", M)
    if direction == "fwd":
        parts = [("x", rows, e), ("out", rows, e), ("weight", vec, e)]
        if residual:
            parts += [("residual", rows, e), ("residual_out", rows, e)]
    elif direction == "bwd":
        parts = [("x", rows, e), ("dout", rows, e), ("dx", rows, e), ("weight", vec, e),
                 ("rstd", per_row, RSTD_BYTES), ("dw", vec, e)]
        if residual:
            parts.append(("dresidual_out", rows, e))
    else:
        raise ValueError(f"direction: expected 'fwd' or 'bwd', got {direction!r}")
    terms = tuple((name, count * size) for name, (_, count), size in parts)
    formula = " + ".join(f"{name} {symbol}*{size}" for name, (symbol, _), size in parts)
    return Traffic(sum(b for _, b in terms), formula, terms)
