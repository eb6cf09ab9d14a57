"""normkit and its peers, each called the way its users call it.

An implementation turns a case and its input sets into one callable per set;
each callable makes one call and returns the outputs the check compares, in
check.output_names order: (out, residual_out) forward, (dx, dw) backward, (dx,
dw, db) for LayerNorm's backward, (new x, new residual) for the in-place fused
adds. What a callable does is exactly what is timed, so everything else
(building an autograd graph, a forward pass that produces rstd, fp32 copies of a
weight for a library that takes only those) happens in `prepare`. `TIMED` says
in words what each operator and direction times, for the JSON (rows[].timed, and
meta.implementations[].timed for RMSNorm); None where the library has no such
call, which makes those rows `unsupported` with the reason.

The fused adds overwrite x and residual: their callables run on the shared sets
and leave them changed (the values drift from call to call, which does not
change the time of a bandwidth-bound kernel). The runner checks them on fresh
copies first.

Backward is timed as close to the backward alone as each library allows: normkit
and quack expose a backward function taking (x, weight, dout, rstd) and are timed
on it; the others only have autograd, so torch.autograd.grad on a retained graph
is timed (the autograd engine's host time is included, the forward is not).

Peers are imported only when asked for, and an import failure is a finding for
the report, never a crash: `load` raises and the caller records why.
"""

import functools
import importlib
import importlib.metadata

from . import check
from .options import FUSED_ADD_OPS, OPS

EPS = 1e-6


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _grad(torch, outputs, inputs, grads, count):
    return tuple(torch.autograd.grad(outputs, inputs, grads, retain_graph=True)[:count])


def autograd_backward(torch, forward, case, sets):
    """Per-set callables timing torch.autograd.grad through the case's forward, for x, weight (bias with
    LayerNorm) and residual, with dout (and dresidual_out for residual_out). forward is (x, weight, residual) ->
    (out, residual_out) for RMSNorm, (x, weight, bias, residual) -> ... for LayerNorm."""
    fns = []
    for s in sets:
        # detach(): fresh leaves on the sets' storage, so that the sets themselves stay plain tensors.
        x, w = s.x.detach().requires_grad_(), s.w.detach().requires_grad_()
        b = s.b.detach().requires_grad_() if case.has_bias else None
        r = s.r.detach().requires_grad_() if case.residual else None
        out, h = forward(x, w, b, r) if case.has_bias else forward(x, w, r)
        leaves = (x, w) if b is None else (x, w, b)
        if case.residual:
            fns.append(functools.partial(_grad, torch, (out, h), leaves + (r,), (s.dout, s.dres), len(leaves)))
        else:
            fns.append(functools.partial(_grad, torch, (out,), leaves, (s.dout,), len(leaves)))
    return fns


def composite(F, op, eps):
    """The in-place fused add as PyTorch ops (what runs without a fused kernel); returns (x, residual)."""
    if op == "fused_add_rmsnorm":
        def fused_add_rmsnorm_composite(x, residual, weight, bias):
            residual.add_(x)
            x.copy_(F.rms_norm(residual, (residual.shape[-1],), weight, eps))
            return x, residual
        return fused_add_rmsnorm_composite

    def fused_add_layernorm_composite(x, residual, weight, bias):
        residual.add_(x)
        x.copy_(F.layer_norm(residual, (residual.shape[-1],), weight, bias, eps))
        return x, residual
    return fused_add_layernorm_composite


class Impl:
    name = ""
    dist = None  # the distribution whose version is reported
    gpu_only = True
    # {op: {direction: what is timed, or None: the library has no such call}}; an op missing: none at all.
    TIMED = {}
    # {(op, direction): why there is no such call} where "the library has none" says too little.
    MISSING = {}

    def __init__(self, torch):
        self.torch = torch

    @property
    def timed(self):
        """RMSNorm's TIMED entry: meta.implementations[].timed (schema_version 1 has one per implementation)."""
        return dict(self.TIMED.get("rmsnorm", {"fwd": None, "bwd": None}))

    def timed_by_op(self):
        return {op: {"fwd": self.describe_op(op, "fwd"), "bwd": self.describe_op(op, "bwd")} for op in OPS}

    def describe_op(self, op, direction):
        return self.TIMED.get(op, {}).get(direction)

    def describe(self, case):
        return self.describe_op(case.op, case.direction)

    def load(self):
        """Imports what the implementation needs; returns its version. Raises on failure."""
        raise NotImplementedError

    def unsupported(self, case):
        """Why the implementation cannot run this case, or None."""
        if self.describe(case) is None:
            why = self.MISSING.get((case.op, case.direction))
            if why:
                return why
            if case.op == "rmsnorm":
                return f"no {case.direction} (the library has none)"
            return f"no {case.op} {case.direction} (the library has none)"
        return self.limits(case)

    def limits(self, case):
        """Why a call the library has cannot take this case (a residual, a dtype), or None."""
        return None

    def prepare(self, case, sets):
        if case.op == "rmsnorm":
            if case.direction == "fwd":
                return [functools.partial(self.forward, s.x, s.w, s.r) for s in sets]
            return self.backward(case, sets)
        if case.op == "layernorm":
            if case.direction == "fwd":
                return [functools.partial(self.ln_forward, s.x, s.w, s.b, s.r) for s in sets]
            return self.ln_backward(case, sets)
        return [functools.partial(self.fused_add, case.op, s.x, s.r, s.w, s.b) for s in sets]

    def forward(self, x, w, r):
        """RMSNorm: (out, residual_out or None) of one forward call, no grad."""
        raise NotImplementedError

    def backward(self, case, sets):
        raise NotImplementedError

    def ln_forward(self, x, w, b, r):
        """LayerNorm: (out, residual_out or None) of one forward call, no grad."""
        raise NotImplementedError

    def ln_backward(self, case, sets):
        raise NotImplementedError

    def fused_add(self, op, x, r, w, b):
        """One fused add (b is None for RMSNorm): (the new x, the new residual)."""
        raise NotImplementedError


class _RmsBwdApi(Impl):
    """Implementations with normkit's (and quack's, which normkit's mirrors)
    rmsnorm_fwd(..., store_rstd=True) / rmsnorm_bwd(h, w, dout, rstd, ...) pair,
    found on `self.rms_api`: the backward is timed the same way for both."""

    rms_api = None

    def backward(self, case, sets):
        fns = []
        for s in sets:
            _, h, rstd = self.rms_api.rmsnorm_fwd(s.x, s.w, residual=s.r, eps=EPS, store_rstd=True)
            fns.append(functools.partial(self._bwd, h, s.w, s.dout, rstd, s.dres, case.residual))
        return fns

    def _bwd(self, h, w, dout, rstd, dres, residual):
        dx, dw, _, _ = self.rms_api.rmsnorm_bwd(h, w, dout, rstd, dresidual_out=dres, has_residual=residual)
        return dx, dw


class Normkit(_RmsBwdApi):
    name = "normkit"
    dist = "normkit"
    gpu_only = False
    TIMED = {
        "rmsnorm": {"fwd": "normkit.torch.rmsnorm(x, weight[, residual, prenorm=True]) under no_grad",
                    "bwd": "normkit.torch.rmsnorm_bwd(h, weight, dout, rstd[, dresidual_out, has_residual=True]) "
                           "with h and rstd from rmsnorm_fwd(..., store_rstd=True)"},
        "layernorm": {"fwd": "normkit.torch.layernorm(x, weight, bias[, residual, prenorm=True]) under no_grad "
                             "(no mean or rstd stored)",
                      "bwd": "normkit.torch.layernorm_bwd(h, weight, dout, mean, rstd[, dresidual_out], "
                             "has_bias=True[, has_residual=True]) with h, mean and rstd from "
                             "layernorm_fwd(..., store_rstd=True, store_mean=True)"},
        "fused_add_rmsnorm": {"fwd": "normkit.torch.fused_add_rmsnorm(x, residual, weight, eps), in place, under "
                                     "no_grad", "bwd": None},
        "fused_add_layernorm": {"fwd": "normkit.torch.fused_add_layernorm(x, residual, weight, bias, eps), in "
                                       "place, under no_grad", "bwd": None},
    }

    def load(self):
        self.nk = self.rms_api = importlib.import_module("normkit.torch")
        return importlib.import_module("normkit").__version__

    def forward(self, x, w, r):
        if r is None:
            return self.nk.rmsnorm(x, w, eps=EPS), None
        return self.nk.rmsnorm(x, w, residual=r, eps=EPS, prenorm=True)

    def ln_forward(self, x, w, b, r):
        if r is None:
            return self.nk.layernorm(x, w, b, eps=EPS), None
        return self.nk.layernorm(x, w, b, residual=r, eps=EPS, prenorm=True)

    def ln_backward(self, case, sets):
        fns = []
        for s in sets:
            _, h, mean, rstd = self.nk.layernorm_fwd(s.x, s.w, s.b, residual=s.r, eps=EPS, store_rstd=True,
                                                     store_mean=True)
            fns.append(functools.partial(self._ln_bwd, h, s.w, s.dout, mean, rstd, s.dres, case.residual))
        return fns

    def _ln_bwd(self, h, w, dout, mean, rstd, dres, residual):
        dx, dw, db, _ = self.nk.layernorm_bwd(h, w, dout, mean, rstd, dresidual_out=dres, has_bias=True,
                                              has_residual=residual)
        return dx, dw, db

    def fused_add(self, op, x, r, w, b):
        if op == "fused_add_rmsnorm":
            self.nk.fused_add_rmsnorm(x, r, w, eps=EPS)
        else:
            self.nk.fused_add_layernorm(x, r, w, b, eps=EPS)
        return x, r


class Eager(Impl):
    name = "eager"
    dist = "torch"
    gpu_only = False
    TIMED = {
        "rmsnorm": {"fwd": "torch.nn.functional.rms_norm(x, (N,), weight, eps) under no_grad; with a residual "
                           "h = x + residual first (h is residual_out)",
                    "bwd": "torch.autograd.grad of F.rms_norm's output (and of h = x + residual) w.r.t. x, weight "
                           "(and residual) on a retained graph"},
        "layernorm": {"fwd": "torch.nn.functional.layer_norm(x, (N,), weight, bias, eps) under no_grad; with a "
                             "residual h = x + residual first (h is residual_out)",
                      "bwd": "torch.autograd.grad of F.layer_norm's output (and of h = x + residual) w.r.t. x, "
                             "weight, bias (and residual) on a retained graph"},
        "fused_add_rmsnorm": {"fwd": "residual.add_(x); x.copy_(F.rms_norm(residual, (N,), weight, eps)) under "
                                     "no_grad (the composite an engine runs without a fused kernel)", "bwd": None},
        "fused_add_layernorm": {"fwd": "residual.add_(x); x.copy_(F.layer_norm(residual, (N,), weight, bias, "
                                       "eps)) under no_grad", "bwd": None},
    }

    def load(self):
        self.F = importlib.import_module("torch.nn.functional")
        self._composite = {op: composite(self.F, op, EPS) for op in FUSED_ADD_OPS}
        return self.torch.__version__

    def forward(self, x, w, r):
        h = x if r is None else x + r
        return self.F.rms_norm(h, (h.shape[-1],), w, EPS), (None if r is None else h)

    def backward(self, case, sets):
        return autograd_backward(self.torch, self.forward, case, sets)

    def ln_forward(self, x, w, b, r):
        h = x if r is None else x + r
        return self.F.layer_norm(h, (h.shape[-1],), w, b, EPS), (None if r is None else h)

    def ln_backward(self, case, sets):
        return autograd_backward(self.torch, self.ln_forward, case, sets)

    def fused_add(self, op, x, r, w, b):
        return self._composite[op](x, r, w, b)


class Compile(Impl):
    name = "compile"
    dist = "torch"
    gpu_only = False
    TIMED = {
        "rmsnorm": {"fwd": "torch.compile(dynamic=False) of the fp32-math reference (normkit.bench.check) under "
                           "no_grad; compile time excluded",
                    "bwd": "torch.autograd.grad through the compiled reference (AOTAutograd's compiled backward) "
                           "on a retained graph"},
        "layernorm": {"fwd": "torch.compile(dynamic=False) of the fp32-math LayerNorm reference "
                             "(normkit.bench.check) under no_grad; compile time excluded",
                      "bwd": "torch.autograd.grad through the compiled reference (AOTAutograd's compiled backward) "
                             "on a retained graph"},
        "fused_add_rmsnorm": {"fwd": "torch.compile(dynamic=False) of eager's in-place composite (residual.add_(x); "
                                     "x.copy_(F.rms_norm(residual, ...))) under no_grad; compile time excluded",
                              "bwd": None},
        "fused_add_layernorm": {"fwd": "torch.compile(dynamic=False) of eager's in-place composite "
                                       "(residual.add_(x); x.copy_(F.layer_norm(residual, ...))) under no_grad; "
                                       "compile time excluded", "bwd": None},
    }

    def load(self):
        self.F = importlib.import_module("torch.nn.functional")
        return self.torch.__version__

    def prepare(self, case, sets):
        # One compile per case: dynamo's per-function recompile limit would otherwise make later
        # shapes fall back to eager silently. (The fused adds prepare twice per case: their checked
        # call's fresh copies, then the sets; both use the one compiled function.)
        if getattr(self, "_case", None) == case:
            return super().prepare(case, sets)
        self._case = None
        self.torch._dynamo.reset()
        if case.op == "rmsnorm":
            fn = check.rmsnorm_residual_ref if case.residual else check.rmsnorm_ref
        elif case.op == "layernorm":
            fn = check.layernorm_residual_ref if case.residual else check.layernorm_ref
        else:
            fn = composite(self.F, case.op, EPS)
        self._compiled = self.torch.compile(fn, dynamic=False)
        self._case = case
        return super().prepare(case, sets)

    def forward(self, x, w, r):
        if r is None:
            return self._compiled(x, w, EPS), None
        return self._compiled(x, r, w, EPS)

    def backward(self, case, sets):
        return autograd_backward(self.torch, self.forward, case, sets)

    def ln_forward(self, x, w, b, r):
        if r is None:
            return self._compiled(x, w, b, EPS), None
        return self._compiled(x, r, w, b, EPS)

    def ln_backward(self, case, sets):
        return autograd_backward(self.torch, self.ln_forward, case, sets)

    def fused_add(self, op, x, r, w, b):
        return self._compiled(x, r, w, b)


class Quack(_RmsBwdApi):
    name = "quack"
    dist = "quack-kernels"
    TIMED = {
        "rmsnorm": {"fwd": "quack.rmsnorm.rmsnorm_fwd(x, weight[, residual]) (out and residual_out; no rstd)",
                    "bwd": "quack.rmsnorm.rmsnorm_bwd(h, weight, dout, rstd[, dresidual_out, has_residual=True]) "
                           "with h and rstd from rmsnorm_fwd(..., store_rstd=True); includes its dW partial sum"},
        "layernorm": {"fwd": "quack.rmsnorm.layernorm_fwd(x, weight, bias, eps) with fp32 copies of weight and "
                             "bias (it takes fp32 ones only); no residual form",
                      "bwd": "quack.rmsnorm.layernorm_bwd(x, weight, dout, rstd, mean, has_bias=True) with the "
                             "fp32 weight, and rstd and mean from layernorm_fwd(..., return_rstd=True, "
                             "return_mean=True); includes its dW/dB partial sums (dw, db in fp32)"},
    }
    MISSING = {(op, "fwd"): "no in-place fused add in quack (its out-of-place rmsnorm_fwd(residual=) is timed in "
                            "the rmsnorm rows with a residual)" for op in ("fused_add_rmsnorm", "fused_add_layernorm")}

    def load(self):
        self.mod = self.rms_api = importlib.import_module("quack.rmsnorm")
        return _version(self.dist)

    def limits(self, case):
        if case.op == "layernorm" and case.residual:
            return "quack.rmsnorm.layernorm_fwd / layernorm_bwd have no residual"
        return None

    def forward(self, x, w, r):
        out, residual_out, _ = self.mod.rmsnorm_fwd(x, w, residual=r, eps=EPS)
        return out, (None if r is None else residual_out)

    def prepare(self, case, sets):
        if case.op == "layernorm" and case.direction == "fwd":
            f32 = self.torch.float32
            return [functools.partial(self._ln_fwd, s.x, s.w.to(f32), s.b.to(f32)) for s in sets]
        return super().prepare(case, sets)

    def _ln_fwd(self, x, w32, b32):
        return self.mod.layernorm_fwd(x, w32, b32, eps=EPS), None

    def ln_backward(self, case, sets):
        f32 = self.torch.float32
        fns = []
        for s in sets:
            w32 = s.w.to(f32)
            _, rstd, mean = self.mod.layernorm_fwd(s.x, w32, s.b.to(f32), eps=EPS, return_rstd=True,
                                                   return_mean=True)
            fns.append(functools.partial(self._ln_bwd, s.x, w32, s.dout, rstd, mean))
        return fns

    def _ln_bwd(self, x, w32, dout, rstd, mean):
        return self.mod.layernorm_bwd(x, w32, dout, rstd, mean, has_bias=True)


class Liger(Impl):
    name = "liger"
    dist = "liger-kernel"
    TIMED = {
        "rmsnorm": {"fwd": "LigerRMSNormFunction.apply (LigerFusedAddRMSNormFunction with a residual), casting_mode "
                           "llama, under no_grad",
                    "bwd": "torch.autograd.grad through the same functions (in_place=False: dout is not "
                           "overwritten) on a retained graph"},
        "layernorm": {"fwd": "LigerLayerNormFunction.apply(x, weight, bias, eps) under no_grad (it also writes mean "
                             "and rstd); no residual form",
                      "bwd": "torch.autograd.grad through LigerLayerNormFunction w.r.t. x, weight, bias on a "
                             "retained graph"},
        "fused_add_rmsnorm": {"fwd": "LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, 'llama', "
                                     "False) under no_grad: out of place (new out and residual_out; Liger has no "
                                     "in-place form), same bytes", "bwd": None},
    }
    MISSING = {("fused_add_layernorm", "fwd"): "no fused add LayerNorm in Liger-Kernel"}

    def load(self):
        self.plain = importlib.import_module("liger_kernel.ops.rms_norm").LigerRMSNormFunction
        self.fused = importlib.import_module("liger_kernel.ops.fused_add_rms_norm").LigerFusedAddRMSNormFunction
        try:
            self.layer = importlib.import_module("liger_kernel.ops.layer_norm").LigerLayerNormFunction
        except ImportError:  # RMSNorm still runs; its LayerNorm rows say why not
            self.layer = None
        return _version(self.dist)

    def limits(self, case):
        if case.op == "layernorm" and case.residual:
            return "LigerLayerNormFunction has no residual add"
        if case.op == "layernorm" and self.layer is None:
            return "liger_kernel.ops.layer_norm.LigerLayerNormFunction could not be imported"
        return None

    def forward(self, x, w, r):
        # (offset, casting_mode, in_place): plain weight, fp32 rstd, and dout left intact.
        if r is None:
            return self.plain.apply(x, w, EPS, 0.0, "llama", False), None
        return self.fused.apply(x, r, w, EPS, 0.0, "llama", False)

    def backward(self, case, sets):
        return autograd_backward(self.torch, self.forward, case, sets)

    def ln_forward(self, x, w, b, r):
        return self.layer.apply(x, w, b, EPS), None

    def ln_backward(self, case, sets):
        return autograd_backward(self.torch, self.ln_forward, case, sets)

    def fused_add(self, op, x, r, w, b):
        return self.fused.apply(x, r, w, EPS, 0.0, "llama", False)


class FlashInfer(Impl):
    name = "flashinfer"
    dist = "flashinfer-python"
    TIMED = {
        "rmsnorm": {"fwd": "flashinfer.norm.rmsnorm(x, weight, eps); with a residual fused_add_rmsnorm(x, residual, "
                           "weight, eps), in place (residual += x; x = norm), on copies of the inputs made per set",
                    "bwd": None},
        "layernorm": {"fwd": "flashinfer.norm.layernorm(x, gamma, beta, eps) with fp32 copies of weight and bias "
                             "(it takes bf16 x and fp32 gamma, beta only); no residual form", "bwd": None},
        "fused_add_rmsnorm": {"fwd": "flashinfer.norm.fused_add_rmsnorm(x, residual, weight, eps), in place",
                              "bwd": None},
    }
    MISSING = {("fused_add_layernorm", "fwd"): "no fused add LayerNorm in flashinfer.norm"}

    def load(self):
        self.mod = importlib.import_module("flashinfer.norm")
        return _version(self.dist)

    def limits(self, case):
        if case.op == "layernorm" and case.residual:
            return "flashinfer.norm.layernorm has no residual add"
        if case.op == "layernorm" and case.dtype != "bf16":
            return "flashinfer.norm.layernorm takes bf16 x only"
        return None

    def prepare(self, case, sets):
        if case.op == "layernorm":
            f32 = self.torch.float32
            return [functools.partial(self._layernorm, s.x, s.w.to(f32), s.b.to(f32)) for s in sets]
        if case.op != "rmsnorm":
            return super().prepare(case, sets)
        if not case.residual:
            return [functools.partial(self._plain, s.x, s.w) for s in sets]
        # In place: its own copies, so the shared inputs stay what the other implementations see.
        return [functools.partial(self._fused, s.x.clone(), s.r.clone(), s.w) for s in sets]

    def _plain(self, x, w):
        return self.mod.rmsnorm(x, w, EPS), None

    def _fused(self, x, r, w):
        self.mod.fused_add_rmsnorm(x, r, w, EPS)
        return x, r

    def _layernorm(self, x, w32, b32):
        return self.mod.layernorm(x, w32, b32, EPS), None

    def fused_add(self, op, x, r, w, b):
        return self._fused(x, r, w)


ALL = (Normkit, Eager, Compile, Quack, Liger, FlashInfer)
BY_NAME = {cls.name: cls for cls in ALL}
