"""normkit.torch.rmsnorm and layernorm as C functions of normkit._torch_C
(src/torch/public_entry.cpp), and what torch.compile needs to see through them.

An eager call then reaches the C++ path with no Python frame in between: the Python
wrapper they were cost ~1.5 us of the ~8.5 us of host time of an eager decode call on
the H200 machine (issue 4's budget is 5 us). The Python function stays, as the C
function's slow path: the C function calls it, with the arguments unchanged, for every
call it does not take itself, so behaviour and errors have one implementation.

Dynamo cannot trace a C function; the Python implementation is registered as its
polyfill (torch.compiler.substitute_in_graph), so compiled graphs hold the custom ops.
That needs torch._dynamo, whose import costs about a second, so it is never imported
here: the polyfills are registered at once when torch._dynamo is already imported, else
right after it is (a sys.meta_path finder that wraps the loader of torch._dynamo, and
removes itself once that has run).
"""

import inspect
import sys

from . import _impl

_DYNAMO = "torch._dynamo"
_pending = []  # (C function, Python implementation), to register when torch._dynamo is imported


def c_entry(ext, name, python_fn):
    """normkit.torch's `name`: normkit._torch_C.public_<name> with python_fn as its slow path and
    polyfill, or python_fn itself without the extension."""
    if ext is None:
        return python_fn
    c_fn = getattr(ext, "public_" + name)
    ext._set_fallback(name, python_fn, _doc(name, python_fn))
    if _DYNAMO in sys.modules:
        _register(c_fn, python_fn)
    else:
        _pending.append((c_fn, python_fn))
        if not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterDynamoImport())
    return c_fn


def _doc(name, fn):
    # "name(signature)\n--\n\n" is how a C function states its signature: it becomes
    # __text_signature__ (inspect.signature, help()), and __doc__ is the rest. Annotations
    # cannot be stated there.
    sig = inspect.signature(fn)
    sig = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                      return_annotation=sig.empty)
    return f"{name}{sig}\n--\n\n{fn.__doc__}"


def _register(c_fn, python_fn):
    dynamo = sys.modules[_DYNAMO]
    try:
        # A second import of normkit.torch (importlib.reload) finds its C functions, which
        # are the same objects, registered already; Dynamo refuses a second polyfill.
        rules = sys.modules.get(_DYNAMO + ".trace_rules")
        if id(c_fn) in getattr(rules, "_polyfilled_function_ids", ()):
            return
        dynamo.substitute_in_graph(c_fn, skip_signature_check=True)(python_fn)
    except Exception as e:  # eager calls do not need it; only compiled code calling it does
        _impl.log_once(("polyfill", c_fn.__name__), "normkit.torch.%s cannot be traced by torch.compile "
                       "(registering its polyfill failed: %s: %s); compiled code calling it breaks the graph",
                       c_fn.__name__, type(e).__name__, e)


def _register_pending():
    while _pending:
        _register(*_pending.pop(0))


class _AfterDynamoImport:
    """A sys.meta_path finder that has the other finders find torch._dynamo and wraps the
    loader they return, so that the pending polyfills are registered once it has run."""

    def __init__(self):
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name != _DYNAMO or self._finding:
            return None
        # A finder may itself ask importlib to find the name: that must not come back here.
        self._finding = True
        try:
            spec = None
            for finder in sys.meta_path:
                find_spec = getattr(finder, "find_spec", None) if finder is not self else None
                if find_spec is not None:
                    spec = find_spec(name, path, target)
                    if spec is not None:
                        break
        finally:
            self._finding = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisterAfterExec(spec.loader, self)
        return spec


class _RegisterAfterExec:
    """The loader of torch._dynamo, which registers the pending polyfills after the module has run.
    Only find_spec's one spec holds it; the module itself keeps its own loader."""

    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        # Not before: an import that fails leaves the finder in place for the next one.
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        _register_pending()
