// normkit._C: bindings of the norm operators' public API (normkit/norm/*.hpp).
//
// Conversion only. The per-call entry points take flat positional arguments
// (addresses as ints, dtype names, strides in elements) because normkit.torch
// calls them on every forward/backward: no dicts, tuples or keyword parsing on
// that path. Every check lives in the C++ operator so that the C++ tests cover it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "normkit/norm/layernorm.hpp"
#include "normkit/norm/rmsnorm.hpp"
#include "normkit/norm/types.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

namespace nn = normkit::norm;

using Address = std::uintptr_t;

// Dtype of a tensor handed to an operator call. fp64 is accepted: the operator
// runs it on the CPU fallback and rejects it, naming the argument, on a GPU.
nn::DType dtype_arg(const char* name, const char* what) {
  if (auto t = nn::parse_dtype(name)) return *t;
  throw nb::value_error(
      (std::string(what) + ": unsupported dtype '" + name + "' (expected fp16, bf16, fp32 or fp64)").c_str());
}

// Dtype of a GPU kernel (precompilation and its CLI): fp64 has no kernel, so it
// is refused here, before anything is planned or compiled.
nn::DType kernel_dtype_arg(const char* name, const char* what) {
  const std::optional<nn::DType> t = nn::parse_dtype(name);
  if (t && *t != nn::DType::kFloat64) return *t;
  const std::string why = t ? "; fp64 runs only on the CPU fallback and has no GPU kernel" : "";
  throw nb::value_error(
      (std::string(what) + ": unsupported dtype '" + name + "' (expected fp16, bf16 or fp32" + why + ")").c_str());
}

// An absent optional tensor is address 0; its dtype name is then not looked at,
// so the caller may pass any placeholder.
nn::Rows rows_arg(Address data, const char* dtype, std::int64_t stride_outer, std::int64_t stride_inner,
                  const char* what) {
  nn::Rows r;
  if (data == 0) return r;
  r.data = reinterpret_cast<const void*>(data);
  r.dtype = dtype_arg(dtype, what);
  r.stride_outer = stride_outer;
  r.stride_inner = stride_inner;
  return r;
}

nn::Param param_arg(Address data, const char* dtype, const char* what) {
  nn::Param p;
  if (data == 0) return p;
  p.data = reinterpret_cast<const void*>(data);
  p.dtype = dtype_arg(dtype, what);
  return p;
}

// Negative: host data (CPU fallback); otherwise the CUDA ordinal the front end
// already knows, so the operator skips the pointer query.
nn::Device device_arg(int device) { return device < 0 ? nn::Device::cpu() : nn::Device::cuda(device); }

// What one norm has and the other has not: RMSNorm's weight offset, LayerNorm's
// mean. Both bindings take both, so that one argument list serves them; the one
// that does not apply must be left at 0.
void set_own(nn::RmsNormFwdArgs& a, Address mean, float weight_offset) {
  if (mean != 0) throw nb::value_error("rmsnorm_fwd: argument 'mean': RMSNorm computes no mean; pass 0");
  a.weight_offset = weight_offset;
}
void set_own(nn::RmsNormBwdArgs& a, Address mean, float weight_offset) {
  if (mean != 0) throw nb::value_error("rmsnorm_bwd: argument 'mean': RMSNorm takes no mean; pass 0");
  a.weight_offset = weight_offset;
}
template <class Args>
void set_layernorm_own(Args& a, Address mean, float weight_offset, const char* op) {
  if (weight_offset != 0.f)
    throw nb::value_error((std::string(op) + ": argument 'weight_offset': LayerNorm takes no weight offset; pass 0")
                              .c_str());
  a.mean = reinterpret_cast<decltype(a.mean)>(mean);
}
void set_own(nn::LayerNormFwdArgs& a, Address mean, float weight_offset) {
  set_layernorm_own(a, mean, weight_offset, "layernorm_fwd");
}
void set_own(nn::LayerNormBwdArgs& a, Address mean, float weight_offset) {
  set_layernorm_own(a, mean, weight_offset, "layernorm_bwd");
}

template <class Args>
Args bwd_args(std::int64_t rows, std::int64_t n, std::int64_t rows_inner,
              Address x, const char* x_dtype, std::int64_t x_so, std::int64_t x_si,
              Address dout, const char* dout_dtype, std::int64_t dout_so, std::int64_t dout_si,
              Address dres_out, const char* dres_out_dtype, std::int64_t dres_out_so, std::int64_t dres_out_si,
              Address dx, const char* dx_dtype, std::int64_t dx_so, std::int64_t dx_si,
              Address dres, const char* dres_dtype, std::int64_t dres_so, std::int64_t dres_si,
              Address weight, const char* weight_dtype, std::int64_t heads, Address mean, Address rstd,
              Address dweight, Address dbias, const char* dbias_dtype, float weight_offset,
              Address workspace, std::size_t workspace_bytes, int device, Address stream) {
  Args a;
  a.shape = {rows, n, rows_inner};
  a.x = rows_arg(x, x_dtype, x_so, x_si, "x");
  a.dout = rows_arg(dout, dout_dtype, dout_so, dout_si, "dout");
  a.dresidual_out = rows_arg(dres_out, dres_out_dtype, dres_out_so, dres_out_si, "dresidual_out");
  a.dx = rows_arg(dx, dx_dtype, dx_so, dx_si, "dx");
  a.dresidual = rows_arg(dres, dres_dtype, dres_so, dres_si, "dresidual");
  a.weight = param_arg(weight, weight_dtype, "weight");
  a.heads = heads;
  a.rstd = reinterpret_cast<const float*>(rstd);
  a.dweight = reinterpret_cast<void*>(dweight);
  a.dbias = param_arg(dbias, dbias_dtype, "dbias");
  set_own(a, mean, weight_offset);
  a.workspace = reinterpret_cast<void*>(workspace);
  a.workspace_bytes = workspace_bytes;
  a.device = device_arg(device);
  a.stream = reinterpret_cast<nn::Stream>(stream);
  return a;
}

// The forward binding of either norm: `call` on the arguments, without the GIL
// (host data runs the multithreaded CPU fallback, and a first GPU call may
// compile).
template <class Args>
auto fwd_binding(void (*call)(const Args&)) {
  return [call](std::int64_t rows, std::int64_t n, std::int64_t rows_inner,
                Address x, const char* x_dtype, std::int64_t x_so, std::int64_t x_si,
                Address res, const char* res_dtype, std::int64_t res_so, std::int64_t res_si,
                Address out, const char* out_dtype, std::int64_t out_so, std::int64_t out_si,
                Address res_out, const char* res_out_dtype, std::int64_t res_out_so, std::int64_t res_out_si,
                Address weight, const char* weight_dtype, Address bias, const char* bias_dtype, std::int64_t heads,
                Address mean, Address rstd, float eps, float weight_offset, int device, Address stream) {
    Args a;
    a.shape = {rows, n, rows_inner};
    a.x = rows_arg(x, x_dtype, x_so, x_si, "x");
    a.residual = rows_arg(res, res_dtype, res_so, res_si, "residual");
    a.out = rows_arg(out, out_dtype, out_so, out_si, "out");
    a.residual_out = rows_arg(res_out, res_out_dtype, res_out_so, res_out_si, "residual_out");
    a.weight = param_arg(weight, weight_dtype, "weight");
    a.bias = param_arg(bias, bias_dtype, "bias");
    a.heads = heads;
    a.rstd = reinterpret_cast<float*>(rstd);
    a.eps = eps;
    set_own(a, mean, weight_offset);
    a.device = device_arg(device);
    a.stream = reinterpret_cast<nn::Stream>(stream);
    nb::gil_scoped_release release;
    call(a);
  };
}

// rmsnorm_bwd and rmsnorm_bwd_workspace_bytes (and LayerNorm's) take the same
// arguments (the query ignores the workspace), so that the caller builds them once.
template <class Args, class Finish>
auto bwd_binding(Finish finish) {
  return [finish](std::int64_t rows, std::int64_t n, std::int64_t rows_inner,
                  Address x, const char* x_dtype, std::int64_t x_so, std::int64_t x_si,
                  Address dout, const char* dout_dtype, std::int64_t dout_so, std::int64_t dout_si,
                  Address dres_out, const char* dres_out_dtype, std::int64_t dres_out_so,
                  std::int64_t dres_out_si, Address dx, const char* dx_dtype, std::int64_t dx_so,
                  std::int64_t dx_si, Address dres, const char* dres_dtype, std::int64_t dres_so,
                  std::int64_t dres_si, Address weight, const char* weight_dtype, std::int64_t heads,
                  Address mean, Address rstd, Address dweight, Address dbias, const char* dbias_dtype,
                  float weight_offset, Address workspace, std::size_t workspace_bytes, int device, Address stream) {
    const Args a =
        bwd_args<Args>(rows, n, rows_inner, x, x_dtype, x_so, x_si, dout, dout_dtype, dout_so, dout_si, dres_out,
                       dres_out_dtype, dres_out_so, dres_out_si, dx, dx_dtype, dx_so, dx_si, dres, dres_dtype,
                       dres_so, dres_si, weight, weight_dtype, heads, mean, rstd, dweight, dbias, dbias_dtype,
                       weight_offset, workspace, workspace_bytes, device, stream);
    // Host data runs the CPU fallback, a first GPU call may compile, and the
    // workspace query may ask the driver for the SM count: none needs the GIL.
    nb::gil_scoped_release release;
    return finish(a);
  };
}

// Both fused adds: x and residual overwritten in place.
auto fused_add_binding(void (*call)(const nn::FusedAddNormArgs&)) {
  return [call](std::int64_t rows, std::int64_t n, std::int64_t rows_inner,
                Address x, const char* x_dtype, std::int64_t x_so, std::int64_t x_si,
                Address res, const char* res_dtype, std::int64_t res_so, std::int64_t res_si,
                Address weight, const char* weight_dtype, Address bias, const char* bias_dtype, std::int64_t heads,
                float eps, float weight_offset, int device, Address stream) {
    nn::FusedAddNormArgs a;
    a.shape = {rows, n, rows_inner};
    a.x = rows_arg(x, x_dtype, x_so, x_si, "x");
    a.residual = rows_arg(res, res_dtype, res_so, res_si, "residual");
    a.weight = param_arg(weight, weight_dtype, "weight");
    a.bias = param_arg(bias, bias_dtype, "bias");
    a.heads = heads;
    a.eps = eps;
    a.weight_offset = weight_offset;
    a.device = device_arg(device);
    a.stream = reinterpret_cast<nn::Stream>(stream);
    nb::gil_scoped_release release;
    call(a);
  };
}

std::optional<nn::DType> optional_dtype(const std::optional<std::string>& name, const char* what) {
  if (!name || name->empty() || *name == "none") return std::nullopt;
  return kernel_dtype_arg(name->c_str(), what);
}

template <class Variant>
Variant variant_arg(bool backward, std::int64_t n, const std::string& x, const std::optional<std::string>& weight,
                    const std::optional<std::string>& bias, const std::optional<std::string>& residual,
                    const std::optional<std::string>& residual_out, const std::optional<std::string>& out,
                    const std::optional<std::string>& dout, bool store_rstd) {
  Variant v;
  v.backward = backward;
  v.n = n;
  v.x = kernel_dtype_arg(x.c_str(), "x");
  v.weight = optional_dtype(weight, "weight");
  v.bias = optional_dtype(bias, "bias");
  v.residual = optional_dtype(residual, "residual");
  v.residual_out = optional_dtype(residual_out, "residual_out");
  v.out = optional_dtype(out, "out");
  v.dout = optional_dtype(dout, "dout");
  v.store_rstd = store_rstd;
  return v;
}

// Thrown through the C++ precompile loop to stop it when the Python callback
// raised; the Python exception itself is kept aside and restored afterwards.
struct CallbackAborted {};

template <class Variant>
using PrecompileFn = std::vector<nn::PrecompiledKernel> (*)(const Variant&, const std::string&,
                                                            const std::function<void(const nn::PrecompiledKernel&)>&);
template <class Variant>
using PrecompileCountFn = std::size_t (*)(const Variant&, const std::string&);

// <op>_precompile, <op>_precompile_count and <op>_variant_describe of one norm
// ("rmsnorm", "layernorm"): the same arguments and results for both, only the
// variant type (which selects the kernels) differs. nanobind copies the names
// and docstrings, so they may be built here.
template <class Variant>
void def_precompile(nb::module_& m, const std::string& op, const std::string& title,
                    PrecompileFn<Variant> precompile, PrecompileCountFn<Variant> count) {
  m.def(
      (op + "_precompile").c_str(),
      [precompile](const std::string& arch, std::int64_t n, bool backward, const std::string& x,
                   const std::optional<std::string>& weight, const std::optional<std::string>& bias,
                   const std::optional<std::string>& residual, const std::optional<std::string>& residual_out,
                   const std::optional<std::string>& out, const std::optional<std::string>& dout, bool store_rstd,
                   nb::object callback) {
        const Variant v =
            variant_arg<Variant>(backward, n, x, weight, bias, residual, residual_out, out, dout, store_rstd);
        auto to_dict = [](const nn::PrecompiledKernel& k) {
          nb::dict d;
          d["family"] = k.family;
          d["template_args"] = k.template_args;
          d["cache_key"] = k.cache_key;
          d["registers"] = k.registers;
          d["spill_bytes"] = k.spill_bytes;
          d["from_cache"] = k.from_cache;
          return d;
        };
        std::optional<nb::python_error> callback_error;
        std::function<void(const nn::PrecompiledKernel&)> on_kernel;
        if (!callback.is_none()) {
          on_kernel = [&](const nn::PrecompiledKernel& k) {
            nb::gil_scoped_acquire acquire;
            try {
              callback(to_dict(k));
            } catch (nb::python_error& e) {
              // Stop the loop, but re-raise the callback's own exception (e.g.
              // KeyboardInterrupt) rather than whatever the C++ side would wrap it in.
              callback_error.emplace(std::move(e));
              throw CallbackAborted{};
            }
          };
        }
        std::vector<nn::PrecompiledKernel> kernels;
        try {
          nb::gil_scoped_release release;
          kernels = precompile(v, arch, on_kernel);
        } catch (...) {
          if (callback_error) throw std::move(*callback_error);
          throw;
        }
        nb::list result;
        for (const auto& k : kernels) result.append(to_dict(k));
        return result;
      },
      "arch"_a, "n"_a, "backward"_a, "x"_a, "weight"_a = nb::none(), "bias"_a = nb::none(),
      "residual"_a = nb::none(), "residual_out"_a = nb::none(), "out"_a = nb::none(), "dout"_a = nb::none(),
      "store_rstd"_a = true, "callback"_a = nb::none(),
      ("Compile (or find in the disk cache) every " + title +
       " kernel of one variant for an explicit target such as 'sm_90a' (no GPU needed). Dtype arguments are "
       "names; None (or 'none') means absent (out/dout: x's dtype). callback(dict) is called after each kernel; "
       "returns the list of those dicts (family, template_args, cache_key, registers, spill_bytes (-1: unknown), "
       "from_cache).")
          .c_str());
  m.def(
      (op + "_precompile_count").c_str(),
      [count](const std::string& arch, std::int64_t n, bool backward, const std::string& x,
              const std::optional<std::string>& weight, const std::optional<std::string>& bias,
              const std::optional<std::string>& residual, const std::optional<std::string>& residual_out,
              const std::optional<std::string>& out, const std::optional<std::string>& dout, bool store_rstd) {
        const Variant v =
            variant_arg<Variant>(backward, n, x, weight, bias, residual, residual_out, out, dout, store_rstd);
        nb::gil_scoped_release release;
        return count(v, arch);
      },
      "arch"_a, "n"_a, "backward"_a, "x"_a, "weight"_a = nb::none(), "bias"_a = nb::none(),
      "residual"_a = nb::none(), "residual_out"_a = nb::none(), "out"_a = nb::none(), "dout"_a = nb::none(),
      "store_rstd"_a = true,
      ("How many kernels " + op + "_precompile will produce for these arguments (for progress bars).").c_str());
  m.def(
      (op + "_variant_describe").c_str(),
      [](std::int64_t n, bool backward, const std::string& x, const std::optional<std::string>& weight,
         const std::optional<std::string>& bias, const std::optional<std::string>& residual,
         const std::optional<std::string>& residual_out, const std::optional<std::string>& out,
         const std::optional<std::string>& dout, bool store_rstd) {
        return variant_arg<Variant>(backward, n, x, weight, bias, residual, residual_out, out, dout, store_rstd)
            .describe();
      },
      "n"_a, "backward"_a, "x"_a, "weight"_a = nb::none(), "bias"_a = nb::none(), "residual"_a = nb::none(),
      "residual_out"_a = nb::none(), "out"_a = nb::none(), "dout"_a = nb::none(), "store_rstd"_a = true,
      ("One-line description of a " + title + " variant, as the C++ library writes it.").c_str());
}

}  // namespace

void register_norm_bindings(nb::module_& m) {
  m.def("norm_dtype_size", [](const char* name) { return nn::dtype_size(dtype_arg(name, "dtype")); }, "dtype"_a);
  m.def(
      "norm_dtype_name", [](const char* name) { return std::string(nn::dtype_name(kernel_dtype_arg(name, "dtype"))); },
      "dtype"_a,
      "Canonical short name (fp16, bf16, fp32) of a GPU kernel dtype alias, as precompilation takes it; "
      "ValueError if unsupported (fp64 included: it runs only on the CPU fallback).");

#define NK_FWD_ARG_NAMES                                                                                       \
  "rows"_a, "n"_a, "rows_inner"_a, "x"_a, "x_dtype"_a, "x_stride_outer"_a, "x_stride_inner"_a, "residual"_a,    \
      "residual_dtype"_a, "residual_stride_outer"_a, "residual_stride_inner"_a, "out"_a, "out_dtype"_a,          \
      "out_stride_outer"_a, "out_stride_inner"_a, "residual_out"_a, "residual_out_dtype"_a,                     \
      "residual_out_stride_outer"_a, "residual_out_stride_inner"_a, "weight"_a, "weight_dtype"_a, "bias"_a,     \
      "bias_dtype"_a, "heads"_a, "mean"_a, "rstd"_a, "eps"_a, "weight_offset"_a, "device"_a, "stream"_a
  m.def("rmsnorm_fwd", fwd_binding<nn::RmsNormFwdArgs>(&nn::rmsnorm_fwd), NK_FWD_ARG_NAMES,
        "RMSNorm forward on raw addresses (0 = absent). Row r of each tensor starts at element "
        "(r // rows_inner) * stride_outer + (r % rows_inner) * stride_inner (rows_inner 0: rows). "
        "device < 0: host data (CPU fallback), else the CUDA ordinal; stream: CUstream as int. "
        "mean must be 0 (LayerNorm's argument). Internal: normkit.torch is the caller.");
  m.def("layernorm_fwd", fwd_binding<nn::LayerNormFwdArgs>(&nn::layernorm_fwd), NK_FWD_ARG_NAMES,
        "LayerNorm forward on raw addresses; rmsnorm_fwd's conventions, with mean (M fp32 values, 0 = not "
        "stored) and weight_offset 0.");
#undef NK_FWD_ARG_NAMES

#define NK_BWD_ARG_NAMES                                                                                        \
  "rows"_a, "n"_a, "rows_inner"_a, "x"_a, "x_dtype"_a, "x_stride_outer"_a, "x_stride_inner"_a, "dout"_a,         \
      "dout_dtype"_a, "dout_stride_outer"_a, "dout_stride_inner"_a, "dresidual_out"_a, "dresidual_out_dtype"_a, \
      "dresidual_out_stride_outer"_a, "dresidual_out_stride_inner"_a, "dx"_a, "dx_dtype"_a, "dx_stride_outer"_a, \
      "dx_stride_inner"_a, "dresidual"_a, "dresidual_dtype"_a, "dresidual_stride_outer"_a,                      \
      "dresidual_stride_inner"_a, "weight"_a, "weight_dtype"_a, "heads"_a, "mean"_a, "rstd"_a, "dweight"_a,      \
      "dbias"_a, "dbias_dtype"_a, "weight_offset"_a, "workspace"_a, "workspace_bytes"_a, "device"_a, "stream"_a

  m.def("rmsnorm_bwd", bwd_binding<nn::RmsNormBwdArgs>([](const nn::RmsNormBwdArgs& a) { nn::rmsnorm_bwd(a); }),
        NK_BWD_ARG_NAMES,
        "RMSNorm backward on raw addresses (0 = absent); same conventions as rmsnorm_fwd. "
        "dweight has weight's dtype; workspace: rmsnorm_bwd_workspace_bytes() bytes of device memory.");
  m.def("rmsnorm_bwd_workspace_bytes",
        bwd_binding<nn::RmsNormBwdArgs>(
            [](const nn::RmsNormBwdArgs& a) { return nn::rmsnorm_bwd_workspace_bytes(a); }),
        NK_BWD_ARG_NAMES,
        "Bytes of scratch rmsnorm_bwd needs for these arguments (rmsnorm_bwd's arguments; the workspace "
        "ones are ignored).");
  m.def("layernorm_bwd",
        bwd_binding<nn::LayerNormBwdArgs>([](const nn::LayerNormBwdArgs& a) { nn::layernorm_bwd(a); }),
        NK_BWD_ARG_NAMES,
        "LayerNorm backward on raw addresses; rmsnorm_bwd's conventions, with mean required and "
        "weight_offset 0.");
  m.def("layernorm_bwd_workspace_bytes",
        bwd_binding<nn::LayerNormBwdArgs>(
            [](const nn::LayerNormBwdArgs& a) { return nn::layernorm_bwd_workspace_bytes(a); }),
        NK_BWD_ARG_NAMES, "Bytes of scratch layernorm_bwd needs for these arguments.");
#undef NK_BWD_ARG_NAMES

#define NK_FUSED_ADD_ARG_NAMES                                                                                 \
  "rows"_a, "n"_a, "rows_inner"_a, "x"_a, "x_dtype"_a, "x_stride_outer"_a, "x_stride_inner"_a, "residual"_a,    \
      "residual_dtype"_a, "residual_stride_outer"_a, "residual_stride_inner"_a, "weight"_a, "weight_dtype"_a,   \
      "bias"_a, "bias_dtype"_a, "heads"_a, "eps"_a, "weight_offset"_a, "device"_a, "stream"_a
  m.def("fused_add_rmsnorm", fused_add_binding(&nn::fused_add_rmsnorm), NK_FUSED_ADD_ARG_NAMES,
        "In place: residual <- x + residual, x <- rmsnorm(residual) (rmsnorm_fwd's conventions; x and "
        "residual must not overlap).");
  m.def("fused_add_layernorm", fused_add_binding(&nn::fused_add_layernorm), NK_FUSED_ADD_ARG_NAMES,
        "In place: residual <- x + residual, x <- layernorm(residual) (weight_offset must be 0).");
#undef NK_FUSED_ADD_ARG_NAMES

  // --- ahead-of-time compilation (no GPU) ------------------------------------
  // store_rstd: the forward stores rstd (LayerNorm: mean and rstd).
  def_precompile<nn::RmsNormVariant>(m, "rmsnorm", "RMSNorm", &nn::rmsnorm_precompile, &nn::rmsnorm_precompile_count);
  def_precompile<nn::LayerNormVariant>(m, "layernorm", "LayerNorm", &nn::layernorm_precompile,
                                       &nn::layernorm_precompile_count);
}
