"""The bytes a call must move: the numerator of every GB/s here.

Bandwidth is counted against the minimum traffic of the operation (each tensor
read or written once, DESIGN §4), never against what an implementation happens
to move, so that GB/s and the ratio to a copy compare implementations on equal
terms: extra traffic (a dW partial buffer, a second pass over x, statistics an
implementation stores though nothing asked for them) shows up as a lower GB/s
rather than being credited. Weight and bias have x's dtype (the benchmark's
setting); mean and rstd are fp32, one per row.

RMSNorm forward (inference: no grad, so no rstd is stored or counted):
    x read + out written + weight read
    with residual: + residual read + residual_out written
RMSNorm backward (x is h, what the rows were normalized from: residual_out with a residual):
    x read + dout read + dx written + weight read + rstd read + dw written
    with residual: + dresidual_out read (the gradient that reaches residual_out, as in a
    pre-norm transformer block); dresidual is dx itself, so it adds no write.
LayerNorm (weight and bias), by the same rules:
    forward: x read + out written + weight read + bias read (+ residual read + residual_out
    written); mean and rstd are not stored (inference), as rstd for RMSNorm
    backward: x read + dout read + dx written + weight read + mean read + rstd read
    + dw written + db written (+ dresidual_out read); the bias is not needed
fused_add_rmsnorm / fused_add_layernorm (in place, forward only, always a residual):
    x read + residual read + out written (into x) + residual_out written (into residual)
    + weight read (+ bias read for LayerNorm)
"""

import dataclasses

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
RSTD_BYTES = 4  # mean and rstd: fp32, one per row
OPS = ("rmsnorm", "layernorm", "fused_add_rmsnorm", "fused_add_layernorm")


@dataclasses.dataclass(frozen=True)
class Traffic:
    bytes: int
    formula: str  # e.g. "x M*N*2 + out M*N*2 + weight N*2"
    terms: tuple  # ((name, bytes), ...)


def traffic(direction, dtype, M, N, residual, op="rmsnorm"):
    """The Traffic of one call; weight and bias have x's dtype (the benchmark's setting)."""
    if op not in OPS:
        raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
    e = ELEMENT_BYTES[dtype]
    rows = ("M*N", M * N)
    vec = ("N", N)
    per_row = ("M", M)
    bias = op in ("layernorm", "fused_add_layernorm")
    if op.startswith("fused_add_"):
        if direction != "fwd" or not residual:
            raise ValueError(f"direction: {op} is forward only and always adds a residual, got {direction!r} "
                             f"with residual={residual}")
        parts = [("x", rows, e), ("residual", rows, e), ("out", rows, e), ("residual_out", rows, e),
                 ("weight", vec, e)]
        if bias:
            parts.append(("bias", vec, e))
    elif op == "layernorm" and direction == "fwd":
        parts = [("x", rows, e), ("out", rows, e), ("weight", vec, e), ("bias", vec, e)]
        if residual:
            parts += [("residual", rows, e), ("residual_out", rows, e)]
    elif op == "layernorm" and direction == "bwd":
        parts = [("x", rows, e), ("dout", rows, e), ("dx", rows, e), ("weight", vec, e),
                 ("mean", per_row, RSTD_BYTES), ("rstd", per_row, RSTD_BYTES), ("dw", vec, e), ("db", vec, e)]
        if residual:
            parts.append(("dresidual_out", rows, e))
    elif direction == "fwd":
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
