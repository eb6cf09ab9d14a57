// normkit._torch_C: the eager PyTorch path of RMSNorm and LayerNorm, in C++.
//
// One implementation serves both norms, parameterized by Kind (see NormTraits):
// LayerNorm adds the per-row mean to the stored statistics (forward output,
// saved tensor, backward input) and has no weight_offset; everything else (row
// layouts, argument checks, allocation, the autograd node, the GIL) is shared.
//
// Why it exists: most RMSNorm calls in training and serving are host-bound (a few
// thousand rows or fewer), so what a call costs is host time. Measured on the H200
// machine with scripts/host_profile.py (torch 2.11): one autograd.grad through a
// Python autograd.Function cost 94-135 us against 56-73 us for eager PyTorch, of
// which ~55 us is the autograd engine itself; the Python backward (allocating
// outputs, marshalling ~40 arguments, two binding calls) took 40-70 us of it. Here
// the forward allocates its outputs and records a C++ autograd node, and the
// backward runs in C++ on the engine's thread without ever taking the GIL.
//
// What stays in Python (python/normkit/torch): argument checks, which raise
// Python's error types and are shared with the fake implementations, and the
// torch.library custom ops that torch.compile traces. This module is the eager
// path only. A call whose rows cannot be described with two strides returns None,
// and the custom op (which copies such rows and logs it) takes the call. The public
// functions are C functions in front of this path (public_entry.cpp).
//
// Kernels are reached through normkit._C's C table (src/python/c_api.hpp), so the
// process keeps one normkit runtime. Bound with the pybind11 that torch ships,
// because the Tensor/dtype conversions live there; normkit._C, which must not
// depend on torch, uses nanobind.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "c_api.hpp"
#include "public_entry.hpp"
#include "plain_checks.hpp"
#include "tensor_glue.hpp"

namespace py = pybind11;

namespace {

namespace nn = normkit::norm;
using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const normkit::capi::Table* api = nullptr;
PyObject* normkit_error = nullptr;  // normkit.NormkitError (a new reference kept for the process)

using namespace normkit::torch_glue;

// ---------------------------------------------------------------------------
// The two norms. Kind picks the C table's entries and argument structs; what the
// code below does differently for them is LayerNorm's mean (stored, saved and
// read next to rstd) and RMSNorm's weight_offset (LayerNorm has none).

enum class Kind { kRms, kLayer };
using Allocate = void* (*)(std::size_t bytes, void* context);

template <Kind K>
struct NormTraits;

template <>
struct NormTraits<Kind::kRms> {
  using FwdArgs = nn::RmsNormFwdArgs;
  using BwdArgs = nn::RmsNormBwdArgs;
  static constexpr const char* kName = "normkit.rmsnorm";
  static const char* fwd(const FwdArgs* a) { return api->rmsnorm_fwd(a); }
  static const char* bwd(const BwdArgs* a, Allocate allocate, void* context) {
    return api->rmsnorm_bwd(a, allocate, context);
  }
};

template <>
struct NormTraits<Kind::kLayer> {
  using FwdArgs = nn::LayerNormFwdArgs;
  using BwdArgs = nn::LayerNormBwdArgs;
  static constexpr const char* kName = "normkit.layernorm";
  static const char* fwd(const FwdArgs* a) { return api->layernorm_fwd(a); }
  static const char* bwd(const BwdArgs* a, Allocate allocate, void* context) {
    return api->layernorm_bwd(a, allocate, context);
  }
};

template <Kind K>
constexpr bool kHasMean = K == Kind::kLayer;
// Per-row fp32 statistics: rstd, and LayerNorm's mean before it.
template <Kind K>
constexpr std::size_t kStats = kHasMean<K> ? 2 : 1;

// ---------------------------------------------------------------------------
// Forward: out, residual_out (undefined unless stored), mean (LayerNorm only) and
// rstd (undefined unless stored).

struct FwdOptions {
  OptDtype out_dtype, residual_dtype;
  double eps = 1e-6;
  double weight_offset = 0.0;  // RMSNorm only; 0 for LayerNorm
  bool store_stats = false;    // rstd, and LayerNorm's mean
  bool store_residual_out = false;
};

struct FwdOut {
  Tensor out, residual_out, mean, rstd;
};

template <Kind K>
FwdOut forward_impl(const Tensor& x, const Tensor& weight_in, const Tensor& bias_in, const Tensor& residual,
                    const FwdOptions& o) {
  const auto plan = plan_rows<2>({&x, &residual});
  TORCH_INTERNAL_ASSERT(plan, "normkit: forward rows were not planned before the call");
  const std::int64_t n = x.size(-1), m = rows_of(x);
  FwdOut r;
  r.out = new_tensor(x, x.sizes(), o.out_dtype.value_or(x.scalar_type()));
  if (o.store_residual_out) {
    const at::ScalarType t = o.residual_dtype.value_or(residual.defined() ? residual.scalar_type() : x.scalar_type());
    r.residual_out = new_tensor(x, x.sizes(), t);
  }
  if (o.store_stats) {
    r.rstd = new_tensor(x, x.sizes().slice(0, x.dim() - 1), at::kFloat);
    if constexpr (kHasMean<K>) r.mean = new_tensor(x, x.sizes().slice(0, x.dim() - 1), at::kFloat);
  }
  if (m == 0 || n == 0) {
    // The mean (and LayerNorm's variance) over no elements is 0.
    if (o.store_stats && m) {
      r.rstd.fill_(o.eps > 0 ? 1.0 / std::sqrt(o.eps) : std::numeric_limits<double>::infinity());
      if constexpr (kHasMean<K>) r.mean.zero_();
    }
    return r;
  }
  const Tensor weight = contiguous_if(weight_in), bias = contiguous_if(bias_in);

  typename NormTraits<K>::FwdArgs a;
  a.shape = {m, n, plan->rows_inner};
  a.x = plan->rows(0, x);
  a.residual = plan->rows(1, residual);
  const std::int64_t out_outer = plan->rows_inner * n;
  a.out = nn::Rows{r.out.data_ptr(), dtype_of(r.out.scalar_type()), out_outer, n};
  if (r.residual_out.defined())
    a.residual_out = nn::Rows{r.residual_out.data_ptr(), dtype_of(r.residual_out.scalar_type()), out_outer, n};
  a.weight = param_of(weight);
  a.bias = param_of(bias);
  a.heads = weight.defined() && weight.dim() == 2 ? weight.size(0) : (bias.defined() && bias.dim() == 2 ? bias.size(0) : 1);
  a.rstd = o.store_stats ? r.rstd.data_ptr<float>() : nullptr;
  a.eps = static_cast<float>(o.eps);
  if constexpr (kHasMean<K>) {
    a.mean = o.store_stats ? r.mean.data_ptr<float>() : nullptr;
  } else {
    a.weight_offset = static_cast<float>(o.weight_offset);
  }
  place(x, a.device, a.stream);
  check(NormTraits<K>::fwd(&a));
  return r;
}

// ---------------------------------------------------------------------------
// Backward: dx, dweight (if weight), dbias (if dbias_dtype), dresidual (if
// dresidual_dtype); nullopt when the rows need a copy. mean: LayerNorm's (ignored
// for RMSNorm); weight_offset: RMSNorm's (ignored for LayerNorm).

template <Kind K>
std::optional<std::array<Tensor, 4>> backward_impl(const Tensor& x, const Tensor& weight_in, const Tensor& dout,
                                                   const Tensor& mean, const Tensor& rstd,
                                                   const Tensor& dresidual_out, OptDtype dx_dtype,
                                                   OptDtype dbias_dtype, OptDtype dresidual_dtype,
                                                   double weight_offset) {
  const auto plan = plan_rows<3>({&x, &dout, &dresidual_out});
  if (!plan) return std::nullopt;
  const std::int64_t n = x.size(-1), m = rows_of(x);
  const std::int64_t heads = weight_in.defined() && weight_in.dim() == 2 ? weight_in.size(0) : 1;
  Tensor dx = new_tensor(x, x.sizes(), dx_dtype.value_or(x.scalar_type()));
  Tensor dweight, dbias, dresidual;
  if (weight_in.defined()) dweight = new_tensor(x, weight_in.sizes(), weight_in.scalar_type());
  if (dbias_dtype) {
    dbias = weight_in.defined() && weight_in.dim() == 2 ? new_tensor(x, {heads, n}, *dbias_dtype)
                                                        : new_tensor(x, {n}, *dbias_dtype);
  }
  if (dresidual_dtype) dresidual = new_tensor(x, x.sizes(), *dresidual_dtype);
  if (m == 0 || n == 0) {
    if (dweight.defined()) dweight.zero_();
    if (dbias.defined()) dbias.zero_();
    return std::array<Tensor, 4>{dx, dweight, dbias, dresidual};
  }
  const Tensor weight = contiguous_if(weight_in);
  // One value per row, read as a flat array (a caller's view may be strided).
  const Tensor rstd_rows = contiguous_if(rstd);

  typename NormTraits<K>::BwdArgs a;
  a.shape = {m, n, plan->rows_inner};
  a.x = plan->rows(0, x);
  a.dout = plan->rows(1, dout);
  a.dresidual_out = plan->rows(2, dresidual_out);
  const std::int64_t out_outer = plan->rows_inner * n;
  a.dx = nn::Rows{dx.data_ptr(), dtype_of(dx.scalar_type()), out_outer, n};
  if (dresidual.defined())
    a.dresidual = nn::Rows{dresidual.data_ptr(), dtype_of(dresidual.scalar_type()), out_outer, n};
  a.weight = param_of(weight);
  a.heads = heads;
  a.rstd = rstd_rows.data_ptr<float>();
  a.dweight = dweight.defined() ? dweight.data_ptr() : nullptr;
  a.dbias = param_of(dbias);
  Tensor mean_rows;
  if constexpr (kHasMean<K>) {
    mean_rows = contiguous_if(mean);
    a.mean = mean_rows.data_ptr<float>();
  } else {
    a.weight_offset = static_cast<float>(weight_offset);
  }
  place(x, a.device, a.stream);
  // The workspace comes from PyTorch's caching allocator on the call's stream;
  // releasing it after the launch is stream-ordered, like any temporary.
  Tensor workspace;
  struct Scratch {
    Tensor* tensor;
    const Tensor* like;
  } scratch{&workspace, &x};
  auto allocate = [](std::size_t bytes, void* context) -> void* {
    auto* s = static_cast<Scratch*>(context);
    *s->tensor = new_tensor(*s->like, {static_cast<std::int64_t>(bytes)}, at::kByte);
    return s->tensor->data_ptr();
  };
  check(NormTraits<K>::bwd(&a, allocate, &scratch));
  return std::array<Tensor, 4>{dx, dweight, dbias, dresidual};
}

// Incoming gradients are whatever autograd produced (a sum's backward is an
// expand with stride 0 everywhere): the kernels need a unit-stride last dim.
Tensor grad_rows(const Tensor& g) {
  if (g.defined() && g.stride(-1) != 1 && g.size(-1) != 1 && g.numel() != 0) return g.contiguous();
  return g;
}

// ---------------------------------------------------------------------------
// Autograd: inputs (x, weight, bias, residual, options), outputs (out,
// residual_out, [mean,] rstd). The forward always stores the statistics, and
// residual_out when a residual is added: the backward's input h is residual_out
// then (as stored, like the kernel saw it), else x.

constexpr std::int64_t kNoDtype = -1;

std::int64_t dtype_code(const Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.scalar_type()) : kNoDtype; }
// x's dtype and the optional residual/bias dtypes (kNoDtype when absent), 8 bits each.
std::int64_t pack_dtypes(at::ScalarType x, std::int64_t residual, std::int64_t bias) {
  return static_cast<std::int64_t>(x) | (residual + 1) << 8 | (bias + 1) << 16;
}
OptDtype dtype_from(std::int64_t code) {
  return code == kNoDtype ? OptDtype{} : OptDtype{static_cast<at::ScalarType>(code)};
}

}  // namespace

namespace normkit {

// The autograd node of either norm. Self is the named node type (below), so that
// grad_fn reads CppNode<normkit::RmsNormFunction> / CppNode<normkit::LayerNormFunction>.
template <class Self, Kind K>
struct NormFunction : public torch::autograd::Function<Self> {
  static constexpr Kind kKind = K;

  // Absent optional inputs are passed as nullopt, not as undefined tensors: an
  // undefined tensor would count as a variable input, which autograd rejects.
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const std::optional<Tensor>& weight_arg,
                               const std::optional<Tensor>& bias_arg, const std::optional<Tensor>& residual_arg,
                               FwdOptions o) {
    const Tensor weight = opt(weight_arg), bias = opt(bias_arg), residual = opt(residual_arg);
    o.store_stats = true;
    o.store_residual_out = o.store_residual_out || residual.defined();
    FwdOut r = forward_impl<K>(x, weight, bias, residual, o);
    const Tensor& h = residual.defined() ? r.residual_out : x;
    if constexpr (kHasMean<K>) {
      ctx->save_for_backward({h, weight, r.mean, r.rstd});
      ctx->mark_non_differentiable({r.mean, r.rstd});
    } else {
      ctx->save_for_backward({h, weight, r.rstd});
      ctx->mark_non_differentiable({r.rstd});
    }
    // Few entries, not one per field: each is a hash-map insert on every forward.
    ctx->saved_data["dtypes"] = pack_dtypes(x.scalar_type(), dtype_code(residual), dtype_code(bias));
    ctx->saved_data["bias_heads"] = bias.defined() && bias.dim() == 2 ? bias.size(0) : std::int64_t{0};
    if constexpr (!kHasMean<K>) ctx->saved_data["weight_offset"] = o.weight_offset;
    // Unused outputs (residual_out without prenorm) then arrive undefined rather
    // than as zeros the kernel would have to read.
    ctx->set_materialize_grads(false);
    // residual_out is an output only when it was stored: (out, [mean,] rstd)
    // otherwise, so that no placeholder is allocated (the count may differ from
    // call to call).
    variable_list outs{r.out};
    outs.reserve(2 + kStats<K>);
    if (r.residual_out.defined()) outs.push_back(r.residual_out);
    if constexpr (kHasMean<K>) outs.push_back(r.mean);
    outs.push_back(r.rstd);
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!at::GradMode::is_enabled(), NormTraits<K>::kName,
                ": double backward (create_graph=True) is not supported; the backward kernel has no derivative "
                "of its own");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& h = saved[0];
    const Tensor& weight = saved[1];
    const Tensor mean = kHasMean<K> ? saved[2] : Tensor();
    const Tensor& rstd = saved.back();
    const std::int64_t dtypes = ctx->saved_data["dtypes"].toInt();
    const auto x_dtype = static_cast<at::ScalarType>(dtypes & 0xff);
    const OptDtype residual_dtype = dtype_from(((dtypes >> 8) & 0xff) - 1);
    const OptDtype bias_dtype = dtype_from(((dtypes >> 16) & 0xff) - 1);
    const std::int64_t bias_heads = ctx->saved_data["bias_heads"].toInt();
    double weight_offset = 0.0;
    if constexpr (!kHasMean<K>) weight_offset = ctx->saved_data["weight_offset"].toDouble();

    Tensor dout = grads[0].defined() ? grad_rows(grads[0]) : at::zeros(h.sizes(), h.options().dtype(x_dtype));
    Tensor dres_out = grads.size() == 2 + kStats<K> ? grad_rows(grads[1]) : Tensor();
    // needs_input_grad counts only the inputs that were present (see forward).
    const bool has_weight = weight.defined();
    auto needs = [&](int input) {
      const int edge = input - (input > 1 && !has_weight) - (input > 2 && !bias_dtype);
      return ctx->needs_input_grad(edge);
    };
    const bool want_residual = residual_dtype && needs(3);
    const OptDtype dres_dtype = want_residual && *residual_dtype != x_dtype ? residual_dtype : OptDtype{};
    // Per-head bias without a weight: the kernels key heads on the weight, so that
    // (rare) dbias is summed here.
    const bool want_bias = bias_dtype && needs(2);
    const bool kernel_db = want_bias && !(!weight.defined() && bias_heads);

    auto grads_out = backward_impl<K>(h, weight, dout, mean, rstd, dres_out, x_dtype,
                                      kernel_db ? bias_dtype : OptDtype{}, dres_dtype, weight_offset);
    if (!grads_out) {
      TORCH_WARN_ONCE(NormTraits<K>::kName,
                      " backward: the incoming gradient's rows do not share the layout of the saved input; "
                      "copying them to contiguous tensors (logged once)");
      dout = contiguous_if(dout);
      dres_out = contiguous_if(dres_out);
      grads_out = backward_impl<K>(contiguous_if(h), weight, dout, mean, rstd, dres_out, x_dtype,
                                   kernel_db ? bias_dtype : OptDtype{}, dres_dtype, weight_offset);
      TORCH_INTERNAL_ASSERT(grads_out, "normkit: contiguous rows were not planned");
    }
    auto& [dx, dweight, dbias, dresidual] = *grads_out;
    Tensor grad_bias;
    if (want_bias) {
      grad_bias = kernel_db ? dbias
                            : dout.to(at::kFloat).reshape({-1, bias_heads, dout.size(-1)}).sum(0).to(*bias_dtype);
    }
    Tensor grad_residual;
    if (want_residual) grad_residual = dres_dtype ? dresidual : dx;
    return {needs(0) ? dx : Tensor(), has_weight && needs(1) ? dweight : Tensor(),
            grad_bias, grad_residual, Tensor()};
  }
};

struct RmsNormFunction : NormFunction<RmsNormFunction, Kind::kRms> {};
struct LayerNormFunction : NormFunction<LayerNormFunction, Kind::kLayer> {};

}  // namespace normkit

namespace {
using normkit::LayerNormFunction;
using normkit::RmsNormFunction;

// ---------------------------------------------------------------------------
// Python entry points. Host tensors run the multithreaded CPU fallback, so the GIL
// is let go for them. The whole of normkit.torch.rmsnorm / layernorm for the common
// call, argument checks included (plain_checks.hpp); None sends the call back to
// Python (see norm_call below).

bool requires_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

// The forward of all entry points, on a call the checks accepted: (out,
// residual_out, mean, rstd), undefined where not stored (the statistics only
// when o.store_stats, mean only for LayerNorm), through the autograd node when
// `grad`. Host tensors let the GIL go.
template <class Node>
FwdOut run_forward(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                   const std::optional<Tensor>& residual, const FwdOptions& o, bool grad) {
  constexpr Kind K = Node::kKind;
  std::optional<py::gil_scoped_release> nogil;
  if (!x.is_cuda()) nogil.emplace();
  if (!grad) return forward_impl<K>(x, opt(weight), opt(bias), opt(residual), o);
  const variable_list v = Node::apply(x, weight, bias, residual, o);
  FwdOut r;
  r.out = v[0];
  if (v.size() == 2 + kStats<K>) r.residual_out = v[1];
  if (o.store_stats) {
    r.rstd = v.back();
    if constexpr (kHasMean<K>) r.mean = v[v.size() - 2];
  }
  return r;
}

template <class Node>
py::object norm_call(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                     const std::optional<Tensor>& residual, OptDtype out_dtype, OptDtype residual_dtype, double eps,
                     bool prenorm, double weight_offset) {
  const Tensor w = opt(weight), b = opt(bias), r = opt(residual);
  if (!plain_forward_call(x, w, b, r, out_dtype, residual_dtype, weight_offset) || !plan_rows<2>({&x, &r}))
    return py::none();
  const bool grad = at::GradMode::is_enabled() &&
                    (x.requires_grad() || requires_grad(w) || requires_grad(b) || requires_grad(r));
  const bool makes_residual = r.defined() || (residual_dtype && *residual_dtype != x.scalar_type());
  // residual_out is written when returned, or when a residual makes it the
  // backward's input; otherwise that write is skipped.
  const FwdOptions o{out_dtype, residual_dtype, eps, weight_offset, false,
                     (prenorm && makes_residual) || (grad && r.defined())};
  const FwdOut outs = run_forward<Node>(x, weight, bias, residual, o, grad);
  if (!prenorm) return py::cast(outs.out);
  return py::make_tuple(outs.out, makes_residual ? outs.residual_out : x);
}

template <class Node>
py::object fwd_call(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                    const std::optional<Tensor>& residual, OptDtype out_dtype, OptDtype residual_dtype, double eps,
                    double weight_offset, bool store_stats, bool store_residual_out, bool grad) {
  const Tensor w = opt(weight), b = opt(bias), r = opt(residual);
  if (!plain_forward_call(x, w, b, r, out_dtype, residual_dtype, weight_offset) || !plan_rows<2>({&x, &r}))
    return py::none();
  const FwdOptions o{out_dtype, residual_dtype, eps, weight_offset, store_stats, store_residual_out};
  const FwdOut outs = run_forward<Node>(x, weight, bias, residual, o, grad);
  if constexpr (kHasMean<Node::kKind>) return py::make_tuple(outs.out, outs.residual_out, outs.mean, outs.rstd);
  return py::make_tuple(outs.out, outs.residual_out, outs.rstd);
}

template <Kind K>
py::object bwd_call(const Tensor& x, const std::optional<Tensor>& weight, const Tensor& dout, const Tensor& mean,
                    const Tensor& rstd, const std::optional<Tensor>& dresidual_out, OptDtype dx_dtype,
                    OptDtype dbias_dtype, OptDtype dresidual_dtype, double weight_offset) {
  if (!plain_backward_call(x, opt(weight), dout, mean, rstd, opt(dresidual_out), dx_dtype, dbias_dtype,
                           dresidual_dtype, kHasMean<K>))
    return py::none();
  std::optional<std::array<Tensor, 4>> outs;
  {
    std::optional<py::gil_scoped_release> nogil;
    if (!x.is_cuda()) nogil.emplace();
    outs = backward_impl<K>(x, opt(weight), dout, mean, rstd, opt(dresidual_out), dx_dtype, dbias_dtype,
                            dresidual_dtype, weight_offset);
  }
  if (!outs) return py::none();
  return py::make_tuple((*outs)[0], (*outs)[1], (*outs)[2], (*outs)[3]);
}

// normkit.torch.rmsnorm / layernorm (public_entry.cpp) pass their tensors as Python
// objects and the call is found plain here (plain_tensor_object,
// no_mode_or_transform in tensor_glue.hpp), not in Python.
template <class Node>
py::object public_call(py::handle x, py::handle weight, py::handle bias, py::handle residual, OptDtype out_dtype,
                       OptDtype residual_dtype, double eps, bool prenorm, double weight_offset) {
  if (!plain_tensor_object(x.ptr(), false) || !plain_tensor_object(weight.ptr(), true) ||
      !plain_tensor_object(bias.ptr(), true) || !plain_tensor_object(residual.ptr(), true) || !no_mode_or_transform())
    return py::none();
  return norm_call<Node>(THPVariable_Unpack(x.ptr()), tensor_if(weight.ptr()), tensor_if(bias.ptr()),
                         tensor_if(residual.ptr()), out_dtype, residual_dtype, eps, prenorm, weight_offset);
}

// The bound signatures: RMSNorm's take weight_offset, LayerNorm's take mean.

py::object rmsnorm(py::handle x, py::handle weight, py::handle bias, py::handle residual, OptDtype out_dtype,
                   OptDtype residual_dtype, double eps, bool prenorm, double weight_offset) {
  return public_call<RmsNormFunction>(x, weight, bias, residual, out_dtype, residual_dtype, eps, prenorm,
                                      weight_offset);
}

py::object layernorm(py::handle x, py::handle weight, py::handle bias, py::handle residual, OptDtype out_dtype,
                     OptDtype residual_dtype, double eps, bool prenorm) {
  return public_call<LayerNormFunction>(x, weight, bias, residual, out_dtype, residual_dtype, eps, prenorm, 0.0);
}

py::object rmsnorm_fwd(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                       const std::optional<Tensor>& residual, OptDtype out_dtype, OptDtype residual_dtype, double eps,
                       double weight_offset, bool store_rstd, bool store_residual_out, bool grad) {
  return fwd_call<RmsNormFunction>(x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset,
                                   store_rstd, store_residual_out, grad);
}

py::object layernorm_fwd(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                         const std::optional<Tensor>& residual, OptDtype out_dtype, OptDtype residual_dtype,
                         double eps, bool store_stats, bool store_residual_out, bool grad) {
  return fwd_call<LayerNormFunction>(x, weight, bias, residual, out_dtype, residual_dtype, eps, 0.0, store_stats,
                                     store_residual_out, grad);
}

py::object rmsnorm_bwd(const Tensor& x, const std::optional<Tensor>& weight, const Tensor& dout, const Tensor& rstd,
                       const std::optional<Tensor>& dresidual_out, OptDtype dx_dtype, OptDtype dbias_dtype,
                       OptDtype dresidual_dtype, double weight_offset) {
  return bwd_call<Kind::kRms>(x, weight, dout, Tensor(), rstd, dresidual_out, dx_dtype, dbias_dtype,
                              dresidual_dtype, weight_offset);
}

py::object layernorm_bwd(const Tensor& x, const std::optional<Tensor>& weight, const Tensor& dout,
                         const Tensor& mean, const Tensor& rstd, const std::optional<Tensor>& dresidual_out,
                         OptDtype dx_dtype, OptDtype dbias_dtype, OptDtype dresidual_dtype) {
  return bwd_call<Kind::kLayer>(x, weight, dout, mean, rstd, dresidual_out, dx_dtype, dbias_dtype, dresidual_dtype,
                                0.0);
}

}  // namespace

PYBIND11_MODULE(_torch_C, m) {
  m.doc() = "normkit's eager PyTorch path in C++ (internal; use normkit.torch)";
  py::module_ core = py::module_::import("normkit._C");
  py::object capsule = core.attr("_c_api");
  api = static_cast<const normkit::capi::Table*>(PyCapsule_GetPointer(capsule.ptr(), normkit::capi::kCapsuleName));
  if (api == nullptr) throw py::error_already_set();
  if (api->version != normkit::capi::kVersion || api->fwd_args_size != sizeof(nn::RmsNormFwdArgs) ||
      api->bwd_args_size != sizeof(nn::RmsNormBwdArgs) || api->ln_fwd_args_size != sizeof(nn::LayerNormFwdArgs) ||
      api->ln_bwd_args_size != sizeof(nn::LayerNormBwdArgs)) {
    throw py::import_error("normkit._torch_C was built against another normkit._C (C table version " +
                           std::to_string(api->version) + "); reinstall normkit");
  }
  normkit_error = py::object(core.attr("NormkitError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CallError& e) {
      PyErr_SetString(normkit_error, e.what());
    }
  });

  m.def("rmsnorm", &rmsnorm, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("residual"),
        py::arg("out_dtype"), py::arg("residual_dtype"), py::arg("eps"), py::arg("prenorm"), py::arg("weight_offset"),
        "normkit.torch.rmsnorm for plain calls (checks included): out, or (out, residual_out) when prenorm. "
        "None when a check fails, the rows need a copy, a tensor is a subclass or a mode or functorch transform "
        "is active: normkit.torch then takes the call (and raises).");
  m.def("rmsnorm_fwd", &rmsnorm_fwd, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("residual"),
        py::arg("out_dtype"), py::arg("residual_dtype"), py::arg("eps"), py::arg("weight_offset"),
        py::arg("store_rstd"), py::arg("store_residual_out"), py::arg("grad"),
        "RMSNorm forward; (out, residual_out or None, rstd or None), with a C++ autograd node when grad. "
        "None when a check fails or the rows need a copy (normkit.torch then takes the call, and raises).");
  m.def("rmsnorm_bwd", &rmsnorm_bwd, py::arg("x"), py::arg("weight"), py::arg("dout"), py::arg("rstd"),
        py::arg("dresidual_out"), py::arg("dx_dtype"), py::arg("dbias_dtype"), py::arg("dresidual_dtype"),
        py::arg("weight_offset"),
        "RMSNorm backward; (dx, dweight, dbias, dresidual), absent ones None. None when a check fails or the "
        "rows need a copy (normkit.torch then takes the call, and raises).");
  m.def("layernorm", &layernorm, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("residual"),
        py::arg("out_dtype"), py::arg("residual_dtype"), py::arg("eps"), py::arg("prenorm"),
        "normkit.torch.layernorm for plain calls (checks included): out, or (out, residual_out) when prenorm. "
        "None when a check fails, the rows need a copy, a tensor is a subclass or a mode or functorch transform "
        "is active: normkit.torch then takes the call (and raises).");
  m.def("layernorm_fwd", &layernorm_fwd, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("residual"),
        py::arg("out_dtype"), py::arg("residual_dtype"), py::arg("eps"), py::arg("store_stats"),
        py::arg("store_residual_out"), py::arg("grad"),
        "LayerNorm forward; (out, residual_out or None, mean or None, rstd or None), with a C++ autograd node "
        "when grad. None when a check fails or the rows need a copy (normkit.torch then takes the call, and "
        "raises).");
  m.def("layernorm_bwd", &layernorm_bwd, py::arg("x"), py::arg("weight"), py::arg("dout"), py::arg("mean"),
        py::arg("rstd"), py::arg("dresidual_out"), py::arg("dx_dtype"), py::arg("dbias_dtype"),
        py::arg("dresidual_dtype"),
        "LayerNorm backward; (dx, dweight, dbias, dresidual), absent ones None. None when a check fails or the "
        "rows need a copy (normkit.torch then takes the call, and raises).");
  normkit::torch_entry::add_public_entries(m, normkit_error, &rmsnorm, &layernorm);
}
