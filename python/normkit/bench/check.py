"""The reference RMSNorm and the agreement check made before anything is timed.

A fast wrong answer must not become a row of the table: each implementation's
first call on the first input set is compared, output by output, with an fp32
reference computed from the same (rounded) inputs and with normkit's own
outputs. The error is max|a - b| over max|b| (relative to the tensor's largest
value, so that near-zero elements do not dominate and dW, a sum over M rows, is
judged on its own scale). The tolerance is a few units in the last place of the
dtype; two implementations that are each within it of the reference agree with
each other within twice it.

The reference functions are also what the `compile` peer compiles (the same
Python a user would write), which is why they live here.
"""

TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
DESCRIPTION = ("before timing, each implementation's first call on input set 0 is compared with an fp32 reference "
               "(tolerance per dtype) and with normkit's outputs (twice that); error = max|a - b| / max|b| per "
               "output; a row that disagrees is 'failed' and not timed")
OUTPUT_NAMES = {"fwd": ("out", "residual_out"), "bwd": ("dx", "dw")}


def rmsnorm_ref(x, weight, eps):
    h = x.float()
    out = h * (h.square().mean(dim=-1, keepdim=True) + eps).rsqrt() * weight.float()
    return out.to(x.dtype)


def rmsnorm_residual_ref(x, residual, weight, eps):
    """(out, residual_out): out normalizes h = x + residual in fp32; residual_out is h in x's dtype."""
    h = x.float() + residual.float()
    out = h * (h.square().mean(dim=-1, keepdim=True) + eps).rsqrt() * weight.float()
    return out.to(x.dtype), h.to(x.dtype)


def reference(torch, case, inputs, eps):
    """fp32 outputs for one input set, in OUTPUT_NAMES order (None where there is no such output)."""
    # detach(): fp32 inputs would otherwise be the sets' own tensors, marked requires_grad below.
    x, w = inputs.x.detach().float(), inputs.w.detach().float()
    r = inputs.r.detach().float() if case.residual else None
    if case.direction == "fwd":
        with torch.no_grad():
            if case.residual:
                return rmsnorm_residual_ref(x, r, w, eps)
            return rmsnorm_ref(x, w, eps), None
    leaves = [x.requires_grad_(), w.requires_grad_()]
    with torch.enable_grad():
        if case.residual:
            out, h = rmsnorm_residual_ref(x, r.requires_grad_(), w, eps)
            outputs, grads = (out, h), (inputs.dout.float(), inputs.dres.float())
        else:
            outputs, grads = (rmsnorm_ref(x, w, eps),), (inputs.dout.float(),)
        dx, dw = torch.autograd.grad(outputs, leaves, grads)
    return dx.detach(), dw.detach()


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
    names = OUTPUT_NAMES[case.direction]
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
