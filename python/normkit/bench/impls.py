"""normkit and its peers, each called the way its users call it.

An implementation turns a case and its input sets into one callable per set;
each callable makes one call and returns the outputs the check compares, in
check.OUTPUT_NAMES order: (out, residual_out) forward, (dx, dw) backward. What a
callable does is exactly what is timed, so everything else (building an autograd
graph, a forward pass that produces rstd, copies for in-place kernels) happens in
`prepare`. `timed` says in words what each direction times, for the JSON.

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

EPS = 1e-6


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _grad(torch, outputs, inputs, grads):
    g = torch.autograd.grad(outputs, inputs, grads, retain_graph=True)
    return g[0], g[1]


def autograd_backward(torch, forward, case, sets):
    """Per-set callables timing torch.autograd.grad through forward(x, weight, residual) -> (out, residual_out),
    for x, weight (and residual), with dout (and dresidual_out for residual_out)."""
    fns = []
    for s in sets:
        # detach(): fresh leaves on the sets' storage, so that the sets themselves stay plain tensors.
        x, w = s.x.detach().requires_grad_(), s.w.detach().requires_grad_()
        r = s.r.detach().requires_grad_() if case.residual else None
        out, h = forward(x, w, r)
        if case.residual:
            fns.append(functools.partial(_grad, torch, (out, h), (x, w, r), (s.dout, s.dres)))
        else:
            fns.append(functools.partial(_grad, torch, (out,), (x, w), (s.dout,)))
    return fns


class Impl:
    name = ""
    dist = None  # the distribution whose version is reported
    gpu_only = True
    timed = {"fwd": "", "bwd": None}  # None: the direction is not supported

    def __init__(self, torch):
        self.torch = torch

    def load(self):
        """Imports what the implementation needs; returns its version. Raises on failure."""
        raise NotImplementedError

    def unsupported(self, case):
        """Why the implementation cannot run this case, or None."""
        if self.timed.get(case.direction) is None:
            return f"no {case.direction} (the library has none)"
        return None

    def prepare(self, case, sets):
        if case.direction == "fwd":
            return [functools.partial(self.forward, s.x, s.w, s.r) for s in sets]
        return self.backward(case, sets)

    def forward(self, x, w, r):
        """(out, residual_out or None) of one forward call, no grad."""
        raise NotImplementedError

    def backward(self, case, sets):
        raise NotImplementedError


class Normkit(Impl):
    name = "normkit"
    dist = "normkit"
    gpu_only = False
    timed = {"fwd": "normkit.torch.rmsnorm(x, weight[, residual, prenorm=True]) under no_grad",
             "bwd": "normkit.torch.rmsnorm_bwd(h, weight, dout, rstd[, dresidual_out, has_residual=True]) "
                    "with h and rstd from rmsnorm_fwd(..., store_rstd=True)"}

    def load(self):
        self.nk = importlib.import_module("normkit.torch")
        return importlib.import_module("normkit").__version__

    def forward(self, x, w, r):
        if r is None:
            return self.nk.rmsnorm(x, w, eps=EPS), None
        return self.nk.rmsnorm(x, w, residual=r, eps=EPS, prenorm=True)

    def backward(self, case, sets):
        fns = []
        for s in sets:
            _, h, rstd = self.nk.rmsnorm_fwd(s.x, s.w, residual=s.r, eps=EPS, store_rstd=True)
            fns.append(functools.partial(self._bwd, h, s.w, s.dout, rstd, s.dres, case.residual))
        return fns

    def _bwd(self, h, w, dout, rstd, dres, residual):
        dx, dw, _, _ = self.nk.rmsnorm_bwd(h, w, dout, rstd, dresidual_out=dres, has_residual=residual)
        return dx, dw


class Eager(Impl):
    name = "eager"
    dist = "torch"
    gpu_only = False
    timed = {"fwd": "torch.nn.functional.rms_norm(x, (N,), weight, eps) under no_grad; with a residual "
                    "h = x + residual first (h is residual_out)",
             "bwd": "torch.autograd.grad of F.rms_norm's output (and of h = x + residual) w.r.t. x, weight "
                    "(and residual) on a retained graph"}

    def load(self):
        self.F = importlib.import_module("torch.nn.functional")
        return self.torch.__version__

    def forward(self, x, w, r):
        h = x if r is None else x + r
        return self.F.rms_norm(h, (h.shape[-1],), w, EPS), (None if r is None else h)

    def backward(self, case, sets):
        return autograd_backward(self.torch, self.forward, case, sets)


class Compile(Impl):
    name = "compile"
    dist = "torch"
    gpu_only = False
    timed = {"fwd": "torch.compile(dynamic=False) of the fp32-math reference (normkit.bench.check) under no_grad; "
                    "compile time excluded",
             "bwd": "torch.autograd.grad through the compiled reference (AOTAutograd's compiled backward) on a "
                    "retained graph"}

    def load(self):
        return self.torch.__version__

    def prepare(self, case, sets):
        # One compile per case: dynamo's per-function recompile limit would otherwise make later
        # shapes fall back to eager silently.
        self.torch._dynamo.reset()
        fn = check.rmsnorm_residual_ref if case.residual else check.rmsnorm_ref
        self._compiled = self.torch.compile(fn, dynamic=False)
        return super().prepare(case, sets)

    def forward(self, x, w, r):
        if r is None:
            return self._compiled(x, w, EPS), None
        return self._compiled(x, r, w, EPS)

    def backward(self, case, sets):
        return autograd_backward(self.torch, self.forward, case, sets)


class Quack(Impl):
    name = "quack"
    dist = "quack-kernels"
    timed = {"fwd": "quack.rmsnorm.rmsnorm_fwd(x, weight[, residual]) (out and residual_out; no rstd)",
             "bwd": "quack.rmsnorm.rmsnorm_bwd(h, weight, dout, rstd[, dresidual_out, has_residual=True]) "
                    "with h and rstd from rmsnorm_fwd(..., store_rstd=True); includes its dW partial sum"}

    def load(self):
        self.mod = importlib.import_module("quack.rmsnorm")
        return _version(self.dist)

    def forward(self, x, w, r):
        out, residual_out, _ = self.mod.rmsnorm_fwd(x, w, residual=r, eps=EPS)
        return out, (None if r is None else residual_out)

    def backward(self, case, sets):
        fns = []
        for s in sets:
            _, h, rstd = self.mod.rmsnorm_fwd(s.x, s.w, residual=s.r, eps=EPS, store_rstd=True)
            fns.append(functools.partial(self._bwd, h, s.w, s.dout, rstd, s.dres, case.residual))
        return fns

    def _bwd(self, h, w, dout, rstd, dres, residual):
        dx, dw, _, _ = self.mod.rmsnorm_bwd(h, w, dout, rstd, dresidual_out=dres, has_residual=residual)
        return dx, dw


class Liger(Impl):
    name = "liger"
    dist = "liger-kernel"
    timed = {"fwd": "LigerRMSNormFunction.apply (LigerFusedAddRMSNormFunction with a residual), casting_mode "
                    "llama, under no_grad",
             "bwd": "torch.autograd.grad through the same functions (in_place=False: dout is not overwritten) on "
                    "a retained graph"}

    def load(self):
        self.plain = importlib.import_module("liger_kernel.ops.rms_norm").LigerRMSNormFunction
        self.fused = importlib.import_module("liger_kernel.ops.fused_add_rms_norm").LigerFusedAddRMSNormFunction
        return _version(self.dist)

    def forward(self, x, w, r):
        # (offset, casting_mode, in_place): plain weight, fp32 rstd, and dout left intact.
        if r is None:
            return self.plain.apply(x, w, EPS, 0.0, "llama", False), None
        return self.fused.apply(x, r, w, EPS, 0.0, "llama", False)

    def backward(self, case, sets):
        return autograd_backward(self.torch, self.forward, case, sets)


class FlashInfer(Impl):
    name = "flashinfer"
    dist = "flashinfer-python"
    timed = {"fwd": "flashinfer.norm.rmsnorm(x, weight, eps); with a residual fused_add_rmsnorm(x, residual, "
                    "weight, eps), in place (residual += x; x = norm), on copies of the inputs made per set",
             "bwd": None}

    def load(self):
        self.mod = importlib.import_module("flashinfer.norm")
        return _version(self.dist)

    def prepare(self, case, sets):
        if not case.residual:
            return [functools.partial(self._plain, s.x, s.w) for s in sets]
        # In place: its own copies, so the shared inputs stay what the other implementations see.
        return [functools.partial(self._fused, s.x.clone(), s.r.clone(), s.w) for s in sets]

    def _plain(self, x, w):
        return self.mod.rmsnorm(x, w, EPS), None

    def _fused(self, x, r, w):
        self.mod.fused_add_rmsnorm(x, r, w, EPS)
        return x, r


ALL = (Normkit, Eager, Compile, Quack, Liger, FlashInfer)
BY_NAME = {cls.name: cls for cls in ALL}
