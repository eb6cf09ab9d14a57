// normkit.torch.rmsnorm / layernorm as C functions of normkit._torch_C (public_entry.cpp),
// in front of the plain-call path of norm_torch.cpp.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include "tensor_glue.hpp"

namespace normkit::torch_entry {

using torch_glue::OptDtype;

// The plain-call paths of norm_torch.cpp (_torch_C.rmsnorm / layernorm): the result, or
// None for a call they do not take. Passed in rather than declared here so that they keep
// internal linkage next to the templates they instantiate.
using RmsNormPlain = pybind11::object (*)(pybind11::handle x, pybind11::handle weight, pybind11::handle bias,
                                          pybind11::handle residual, OptDtype out_dtype, OptDtype residual_dtype,
                                          double eps, bool prenorm, double weight_offset);
using LayerNormPlain = pybind11::object (*)(pybind11::handle x, pybind11::handle weight, pybind11::handle bias,
                                            pybind11::handle residual, OptDtype out_dtype, OptDtype residual_dtype,
                                            double eps, bool prenorm);

// Adds public_rmsnorm, public_layernorm and _set_fallback to the module. normkit_error:
// normkit.NormkitError, which the operator's errors become.
void add_public_entries(pybind11::module_& m, PyObject* normkit_error, RmsNormPlain rmsnorm,
                        LayerNormPlain layernorm);

}  // namespace normkit::torch_entry
