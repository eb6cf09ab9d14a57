"""The fp32 references (RMSNorm, LayerNorm, the fused adds) and the agreement check made
before anything is timed.

A fast wrong answer must not become a row of the table: each implementation's
first call on the first input set is compared, output by output, with an fp32
reference computed from the same (rounded) inputs and with normkit's own
outputs. The error is max|a - b| over max|b| (relative to the tensor's largest
value, so that near-zero elements do not dominate and dW, a sum over M rows, is
judged on its own scale). The tolerance is a few units in the last place of the
dtype; two implementations that are each within it of the reference agree with
each other within twice it.

The in-place fused adds overwrite x and residual, and their timing cycles over
the shared input sets without restoring them, so each implementation's checked
call runs on fresh copies of input set 0 made before anything ran (the runner's
`pristine`), never on the sets themselves.

The reference functions are also what the `compile` peer compiles (the same
Python a user would write), which is why they live here.
"""

TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
DESCRIPTION = ("before timing, each implementation's first call on input set 0 is compared with an fp32 reference "
               "(tolerance per dtype) and with normkit's outputs (twice that); error = max|a - b| / max|b| per "
               "output; a row that disagrees is 'failed' and not timed; the in-place fused adds are checked on "
               "fresh copies of input set 0 (their timing then overwrites the sets, which is not re-initialized)")
OUTPUT_NAMES = {"fwd": ("out", "residual_out"), "bwd": ("dx", "dw")}
LAYERNORM_BWD_NAMES = ("dx", "dw", "db")


def output_names(case):
    """What an implementation returns for a case, in order: (out, residual_out) forward (the fused adds: the new
    x and the new residual), (dx, dw) backward, (dx, dw, db) for LayerNorm's."""
    if case.direction == "bwd" and case.op == "layernorm":
        return LAYERNORM_BWD_NAMES
    return OUTPUT_NAMES[case.direction]


def rmsnorm_ref(x, weight, eps):
    h = x.float()
    out = h * (h.square().mean(dim=-1, keepdim=True) + eps).rsqrt() * weight.float()
    return out.to(x.dtype)


def rmsnorm_residual_ref(x, residual, weight, eps):
    """(out, residual_out): out normalizes h = x + residual in fp32; residual_out is h in x's dtype."""
    h = x.float() + residual.float()
    out = h * (h.square().mean(dim=-1, keepdim=True) + eps).rsqrt() * weight.float()
    return out.to(x.dtype), h.to(x.dtype)


def _layernorm(h, weight, bias, eps):
    mean = h.mean(dim=-1, keepdim=True)
    centred = h - mean
    return centred * (centred.square().mean(dim=-1, keepdim=True) + eps).rsqrt() * weight.float() + bias.float()


def layernorm_ref(x, weight, bias, eps):
    """LayerNorm of x in fp32 (biased variance over the centred row), in x's dtype."""
    return _layernorm(x.float(), weight, bias, eps).to(x.dtype)


def layernorm_residual_ref(x, residual, weight, bias, eps):
    """(out, residual_out) as rmsnorm_residual_ref, for LayerNorm."""
    h = x.float() + residual.float()
    return _layernorm(h, weight, bias, eps).to(x.dtype), h.to(x.dtype)


def _forward_ref(case, x, w, b, r, eps):
    """(out, residual_out or None) of the case's operator on fp32 inputs."""
    if case.op in ("layernorm", "fused_add_layernorm"):
        return layernorm_residual_ref(x, r, w, b, eps) if r is not None else (layernorm_ref(x, w, b, eps), None)
    return rmsnorm_residual_ref(x, r, w, eps) if r is not None else (rmsnorm_ref(x, w, eps), None)


def reference(torch, case, inputs, eps):
    """fp32 outputs for one input set, in output_names(case) order (None where there is no such output).
    The fused adds' reference is the out-of-place one: their (new x, new residual) is (out, residual_out)."""
    # detach(): fp32 inputs would otherwise be the sets' own tensors, marked requires_grad below.
    x, w = inputs.x.detach().float(), inputs.w.detach().float()
    b = inputs.b.detach().float() if case.has_bias else None
    r = inputs.r.detach().float() if case.residual else None
    if case.direction == "fwd":
        with torch.no_grad():
            return _forward_ref(case, x, w, b, r, eps)
    leaves = [x.requires_grad_(), w.requires_grad_()] + ([b.requires_grad_()] if b is not None else [])
    with torch.enable_grad():
        out, h = _forward_ref(case, x, w, b, r.requires_grad_() if r is not None else None, eps)
        if case.residual:
            outputs, grads = (out, h), (inputs.dout.float(), inputs.dres.float())
        else:
            outputs, grads = (out,), (inputs.dout.float(),)
        return tuple(g.detach() for g in torch.autograd.grad(outputs, leaves, grads))


def relative_error(a, b):
    """max|a - b| / max|b| as a float (nan when either holds a NaN)."""
    a, b = a.float(), b.float()
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def _errors(outputs, expected, names):
    return {name: relative_error(a, b) for name, a, b in zip(names, outputs, expected) if b is not None}


def agreement(case, outputs, ref, normkit_outputs):
    """(check dict for the row, None or the reason the outputs are not accepted)."""
    names = output_names(case)
    tol = TOLERANCE[case.dtype]
    shape = (case.M, case.N)
    for name, out, exp in zip(names, outputs, ref):
        if exp is None:
            continue
        if out is None:
            return None, f"returned no {name}"
        if tuple(out.shape) != tuple(exp.shape):
            return None, f"{name} has shape {tuple(out.shape)}, expected {tuple(exp.shape)} (x is {shape})"
    check = {"tolerance": tol, "vs_reference": _errors(outputs, ref, names),
             "vs_normkit": _errors(outputs, normkit_outputs, names) if normkit_outputs is not None else None}
    for against, errors, limit in (("the fp32 reference", check["vs_reference"], tol),
                                   ("normkit", check["vs_normkit"] or {}, 2 * tol)):
        for name, err in errors.items():
            if not err <= limit:  # also catches NaN
                return check, f"disagrees with {against}: {name} relative error {err:.3g} > {limit:.3g}"
    return check, None
