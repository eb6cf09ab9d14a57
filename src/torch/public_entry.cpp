// normkit.torch.rmsnorm and normkit.torch.layernorm themselves: C functions taking
// Python's vectorcall arguments (METH_FASTCALL | METH_KEYWORDS) that hand a plain
// call to the C++ path of norm_torch.cpp with no Python frame in between.
//
// Why: an eager decode call (M=1, N=4096 bf16 with a weight, no grad) cost ~8.5 us of
// host time on the H200 machine against issue 4's 5 us, ~1.5 us of it in the Python
// wrapper that normkit.torch.rmsnorm was (torch.compiler.is_compiling(), float() and
// bool() of the scalars, then pybind11's dispatch into _torch_C.rmsnorm). On the
// 2-core CPU machine (1x8 fp32 with a weight, no grad, 200k calls x 5 rounds, median of
// two runs each) the public call went from 1.36 to 1.00 us, below _torch_C.rmsnorm
// called directly through pybind11 with positional arguments (1.11 us), which does the
// same work once the arguments are bound: binding them here rather than in pybind11's
// dispatcher is the cheaper part, so this is not a pybind11 function.
//
// Only the common call is taken here. Everything else is passed, arguments unchanged,
// to the Python implementation that _set_fallback registered (normkit.torch._ops /
// _layernorm), the one slow path, which converts other argument types and raises the
// errors that name the argument: arguments of other types than float, int, bool,
// torch.dtype or None where those are expected, unknown or repeated keywords, too
// many arguments, torch.compiler's compiling flag set (export, a compile session),
// and every call the plain path hands back (tensor subclasses, modes, functorch, a
// failed check, rows that need a copy). Dynamo cannot trace a C function: normkit.torch
// registers the Python implementation as its polyfill (python/normkit/torch/_eager_entry.py).
#include "public_entry.hpp"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>

#include <exception>
#include <string>

#include "tensor_glue.hpp"

namespace py = pybind11;

namespace normkit::torch_entry {
namespace {

// Parameters in signature order; LayerNorm has all but weight_offset.
enum Param { kX, kWeight, kBias, kResidual, kOutDtype, kResidualDtype, kEps, kPrenorm, kWeightOffset, kParams };
constexpr const char* kParamNames[kParams] = {
    "x", "weight", "bias", "residual", "out_dtype", "residual_dtype", "eps", "prenorm", "weight_offset"};
// Interned: the keywords of a call site are interned too, so a pointer compare finds them.
PyObject* param_names[kParams] = {};

PyObject* normkit_error = nullptr;
RmsNormPlain rmsnorm_plain = nullptr;
LayerNormPlain layernorm_plain = nullptr;

// torch.compiler.is_compiling() outside Dynamo's tracing (which never calls a C function)
// is torch.compiler._is_compiling_flag: one dict lookup instead of a Python call. A torch
// without that flag gets is_compiling() called.
PyObject* compiler_dict = nullptr;
PyObject* compiling_flag = nullptr;
PyObject* is_compiling = nullptr;

bool compiling() {
  if (is_compiling != nullptr) {
    PyObject* r = PyObject_CallNoArgs(is_compiling);
    if (r == nullptr) {
      PyErr_Clear();
      return true;  // the Python implementation asks again and raises
    }
    const bool yes = r == Py_True;
    Py_DECREF(r);
    return yes;
  }
  return PyDict_GetItemWithError(compiler_dict, compiling_flag) == Py_True;
}

struct Entry {
  PyMethodDef def;
  int params;
  PyObject* fallback = nullptr;  // the Python implementation (owned)
  PyObject* doc = nullptr;       // owns the text def.ml_doc points into
};
Entry rms_entry{{"rmsnorm", nullptr, METH_FASTCALL | METH_KEYWORDS, nullptr}, kParams};
Entry ln_entry{{"layernorm", nullptr, METH_FASTCALL | METH_KEYWORDS, nullptr}, kWeightOffset};

int param_index(const Entry& e, PyObject* key) {
  for (int p = 0; p < e.params; ++p)
    if (key == param_names[p]) return p;
  // A keyword made at run time (a ** dict built from computed strings) is not interned.
  for (int p = 0; p < e.params; ++p) {
    const int c = PyUnicode_Compare(key, param_names[p]);
    if (c == 0) return p;
    if (c == -1 && PyErr_Occurred()) PyErr_Clear();
  }
  return -1;
}

// The arguments by parameter, as Python binds them; false for a call Python refuses
// (too many arguments, an unknown or repeated keyword), whose error the fallback raises.
bool bind(const Entry& e, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** slots) {
  if (nargs > e.params) return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) slots[i] = args[i];
  if (kwnames == nullptr) return true;
  const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const int p = param_index(e, PyTuple_GET_ITEM(kwnames, k));
    if (p < 0 || slots[p] != nullptr) return false;
    slots[p] = args[nargs + k];
  }
  return true;
}

// float(o) for the types whose conversion runs no Python code; others (a numpy scalar,
// a tensor, a bool) go to the fallback, which calls float() on them as before.
bool as_double(PyObject* o, double& out) {
  if (o == nullptr) return true;
  if (PyFloat_CheckExact(o)) {
    out = PyFloat_AS_DOUBLE(o);
    return true;
  }
  if (!PyLong_CheckExact(o)) return false;
  out = PyLong_AsDouble(o);
  if (out == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();  // too large for a double: float() raises it in the fallback
    return false;
  }
  return true;
}
bool as_bool(PyObject* o, bool& out) {
  if (o == nullptr) return true;
  if (o != Py_True && o != Py_False) return false;
  out = o == Py_True;
  return true;
}
bool as_dtype(PyObject* o, OptDtype& out) {
  if (o == nullptr || o == Py_None) return true;
  if (!THPDtype_Check(o)) return false;
  out = reinterpret_cast<THPDtype*>(o)->scalar_type;
  return true;
}
py::handle tensor_or_none(PyObject* o) { return o != nullptr ? o : Py_None; }

template <bool kRms>
PyObject* entry(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  Entry& e = kRms ? rms_entry : ln_entry;
  PyObject* a[kParams] = {};
  OptDtype out_dtype, residual_dtype;
  double eps = 1e-6, weight_offset = 0.0;
  bool prenorm = false;
  if (bind(e, args, nargs, kwnames, a) && a[kX] != nullptr && as_dtype(a[kOutDtype], out_dtype) &&
      as_dtype(a[kResidualDtype], residual_dtype) && as_double(a[kEps], eps) && as_bool(a[kPrenorm], prenorm) &&
      as_double(a[kWeightOffset], weight_offset) && !compiling()) {
    try {
      py::object out;
      if constexpr (kRms) {
        out = rmsnorm_plain(a[kX], tensor_or_none(a[kWeight]), tensor_or_none(a[kBias]),
                            tensor_or_none(a[kResidual]), out_dtype, residual_dtype, eps, prenorm, weight_offset);
      } else {
        out = layernorm_plain(a[kX], tensor_or_none(a[kWeight]), tensor_or_none(a[kBias]),
                              tensor_or_none(a[kResidual]), out_dtype, residual_dtype, eps, prenorm);
      }
      if (!out.is_none()) return out.release().ptr();
    } catch (const torch_glue::CallError& error) {
      PyErr_SetString(normkit_error, error.what());
      return nullptr;
    } catch (py::error_already_set& error) {
      error.restore();
      return nullptr;
    } catch (const std::exception&) {
      torch::translate_exception_to_python(std::current_exception());
      return nullptr;
    }
  }
  if (e.fallback == nullptr) {
    PyErr_Format(PyExc_RuntimeError, "normkit._torch_C.public_%s: no Python implementation was registered "
                 "(normkit.torch does that on import)", e.def.ml_name);
    return nullptr;
  }
  return PyObject_Vectorcall(e.fallback, args, nargs, kwnames);
}

template <bool kRms>
PyCFunction as_cfunction() {
  // METH_FASTCALL | METH_KEYWORDS functions are stored as a PyCFunction and called with
  // their own signature; the cast through void(*)() says so to -Wcast-function-type.
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&entry<kRms>));
}

// Registers `fallback` as the Python implementation of public_<name>, and `doc` as its
// __doc__ ("name(signature)\n--\n\n" first, which becomes __text_signature__).
void set_fallback(const std::string& name, py::object fallback, py::str doc) {
  Entry* e = name == "rmsnorm" ? &rms_entry : name == "layernorm" ? &ln_entry : nullptr;
  if (e == nullptr) throw py::value_error("_set_fallback: no C entry named " + name);
  const char* text = PyUnicode_AsUTF8(doc.ptr());
  if (text == nullptr) throw py::error_already_set();
  // __doc__ reads ml_doc on each access, so it may change after the function exists.
  Py_XSETREF(e->doc, doc.release().ptr());
  e->def.ml_doc = text;
  Py_XSETREF(e->fallback, fallback.release().ptr());
}

PyObject* intern(const char* s) {
  PyObject* o = PyUnicode_InternFromString(s);
  if (o == nullptr) throw py::error_already_set();
  return o;
}

}  // namespace

void add_public_entries(py::module_& m, PyObject* error, RmsNormPlain rmsnorm, LayerNormPlain layernorm) {
  normkit_error = error;
  rmsnorm_plain = rmsnorm;
  layernorm_plain = layernorm;
  for (int p = 0; p < kParams; ++p) param_names[p] = intern(kParamNames[p]);
  py::module_ compiler = py::module_::import("torch.compiler");
  compiler_dict = py::object(compiler.attr("__dict__")).release().ptr();
  compiling_flag = intern("_is_compiling_flag");
  if (PyDict_GetItemWithError(compiler_dict, compiling_flag) == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    is_compiling = py::object(compiler.attr("is_compiling")).release().ptr();
  }
  rms_entry.def.ml_meth = as_cfunction<true>();
  ln_entry.def.ml_meth = as_cfunction<false>();
  // __module__ normkit.torch, where they are public: pickle finds them there by name.
  const py::str module_name("normkit.torch");
  for (Entry* e : {&rms_entry, &ln_entry}) {
    PyObject* fn = PyCFunction_NewEx(&e->def, nullptr, module_name.ptr());
    if (fn == nullptr) throw py::error_already_set();
    m.add_object(("public_" + std::string(e->def.ml_name)).c_str(), py::reinterpret_steal<py::object>(fn));
  }
  m.def("_set_fallback", &set_fallback, py::arg("name"), py::arg("fallback"), py::arg("doc"),
        "Registers the Python implementation that public_<name> calls for every call it does not take itself, "
        "and its docstring (normkit.torch does this on import).");
}

}  // namespace normkit::torch_entry
