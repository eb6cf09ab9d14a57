// normkit._torch_C's tensor glue: errors, dtypes, the device and stream of a call,
// and the row layouts a (..., N) tensor maps to (the C++ API's two-level rows,
// normkit/norm/types.hpp). Included by norm_torch.cpp (and by public_entry.cpp, for
// CallError); apart from it so that the autograd and binding code there reads on its own.
#pragma once

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "normkit/norm/types.hpp"

namespace normkit::torch_glue {

namespace nn = normkit::norm;
using at::Tensor;
using OptDtype = std::optional<at::ScalarType>;  // a dtype argument that may be absent

// An error from the operator; becomes normkit.NormkitError in Python (and a
// RuntimeError when raised inside the autograd engine's backward).
struct CallError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(const char* error) {
  if (error != nullptr) throw CallError(error);
}

inline nn::DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return nn::DType::kFloat16;
    case at::kBFloat16: return nn::DType::kBFloat16;
    case at::kFloat: return nn::DType::kFloat32;
    case at::kDouble: return nn::DType::kFloat64;
    default: throw CallError(std::string("normkit: unsupported dtype ") + c10::toString(t));
  }
}

// Device and stream of a call: the CPU fallback for host tensors, else the
// tensor's CUDA device and that device's current PyTorch stream.
inline void place(const Tensor& x, nn::Device& device, nn::Stream& stream) {
  if (!x.is_cuda()) {
    device = nn::Device::cpu();
    stream = nullptr;
    return;
  }
  const c10::Device d = x.device();
  device = nn::Device::cuda(d.index());
  stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(d).native_handle();
}

// Whether an eager call may take the C++ path, decided in C++ rather than in the
// Python wrapper: its tensors are torch.Tensor or nn.Parameter objects (not
// subclasses, whose __torch_function__ must see the call), with no dispatch mode,
// torch function mode or functorch transform active (those must see the custom
// op). The same tests in Python cost 0.75 us a call on the H200 machine
// (scripts/host_breakdown.py, 7514632), an eighth of the call. Dynamo never reaches
// this: it traces the Python implementation, registered as the public C functions'
// polyfill, and those hand calls made while torch.compiler's compiling flag is set to
// Python (public_entry.cpp).
inline bool plain_tensor_object(PyObject* o, bool none_ok) {
  return (none_ok && o == Py_None) || THPVariable_CheckExact(o);
}
inline bool no_mode_or_transform() {
  const c10::DispatchKeySet included = c10::impl::tls_local_dispatch_key_set().included_;
  return c10::impl::TorchDispatchModeTLS::stack_len() == 0 && at::impl::PythonTorchFunctionTLS::stack_len() == 0 &&
         !included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) &&
         !included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode);
}
// A plain tensor object (or None) as the C++ tensor it holds.
inline std::optional<Tensor> tensor_if(PyObject* o) {
  if (o == Py_None) return std::nullopt;
  return THPVariable_Unpack(o);
}

// A new contiguous tensor of `dtype` on `like`'s device, for the call's outputs.
// CUDA tensors on the current device take the device allocator (PyTorch's caching
// allocator, on the current stream, as at::empty) without the dispatcher and the
// device guard around it: at::empty of a 1 x 4096 tensor cost 2.8 us a call on the
// H200 machine (C++ loop, torch 2.11), the biggest part of an eager decode call
// after the launch itself (issue 4's 5 us budget). With this, an eager no-grad call
// (M=1, N=4096 bf16 with weight, 10000 calls a round, two alternating A/B runs on
// the H200 machine, 642253f -> 2f39bbe): RMSNorm 7.57 / 6.63 -> 5.70 / 6.30 us,
// LayerNorm 6.90 / 6.67 -> 6.80 / 6.21 us. Every element is written by the
// kernel, so the uninitialized-memory fill of deterministic mode is not needed.
// Other devices (and a CUDA tensor off the current device, whose allocation needs
// the guard) take at::empty.
inline Tensor new_tensor(const Tensor& like, at::IntArrayRef sizes, at::ScalarType dtype) {
  if (like.is_cuda()) {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    if (impl->getDevice() == like.device()) {
      return at::detail::empty_generic(sizes, c10::GetAllocator(c10::DeviceType::CUDA),
                                       c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype, c10::MemoryFormat::Contiguous);
    }
  }
  return at::empty(sizes, like.options().dtype(dtype).memory_format(c10::MemoryFormat::Contiguous));
}

// ---------------------------------------------------------------------------
// Row layouts (the C++ API's two-level rows, normkit/norm/types.hpp). A (..., N)
// tensor with a unit-stride last dim whose leading dims merge into one strided
// dim works with any rows_inner (inner == 0 below); one that merges into two
// needs rows_inner = the inner size; more than two is not expressible.

struct Layout {
  std::int64_t inner = 0;  // 0: any rows_inner
  std::int64_t stride_outer = 0;
  std::int64_t stride_inner = 0;
};

inline std::optional<Layout> row_layout(const Tensor& t) {
  const std::int64_t n = t.size(-1);
  if (t.is_contiguous()) return Layout{0, 0, n};
  std::array<std::array<std::int64_t, 2>, 2> dims{};  // merged (size, stride), outermost first
  int count = 0;
  for (std::int64_t i = 0; i + 1 < t.dim(); ++i) {
    const std::int64_t size = t.size(i), stride = t.stride(i);
    if (size == 1) continue;
    if (count > 0 && dims[count - 1][1] == size * stride) {
      dims[count - 1] = {dims[count - 1][0] * size, stride};
    } else {
      if (count == 2) return std::nullopt;
      dims[count++] = {size, stride};
    }
  }
  if (count <= 1) return Layout{0, 0, count ? dims[0][1] : n};
  return Layout{dims[1][0], dims[0][1], dims[1][1]};
}

// One rows_inner for the row tensors of a call (undefined ones are skipped), or
// nullopt when a tensor is not expressible or two need different ones.
template <std::size_t K>
struct RowsPlan {
  std::int64_t rows_inner = 0;
  std::array<Layout, K> layouts{};

  nn::Rows rows(std::size_t i, const Tensor& t) const {
    if (!t.defined()) return {};
    const Layout& l = layouts[i];
    const std::int64_t outer = l.inner == 0 ? rows_inner * l.stride_inner : l.stride_outer;
    return nn::Rows{t.data_ptr(), dtype_of(t.scalar_type()), outer, l.stride_inner};
  }
};

template <std::size_t K>
std::optional<RowsPlan<K>> plan_rows(const std::array<const Tensor*, K>& tensors) {
  RowsPlan<K> plan;
  for (std::size_t i = 0; i < K; ++i) {
    if (!tensors[i]->defined()) continue;
    const std::optional<Layout> l = row_layout(*tensors[i]);
    if (!l) return std::nullopt;
    if (l->inner != 0) {
      if (plan.rows_inner != 0 && plan.rows_inner != l->inner) return std::nullopt;
      plan.rows_inner = l->inner;
    }
    plan.layouts[i] = *l;
  }
  return plan;
}

inline nn::Param param_of(const Tensor& t) {
  return t.defined() ? nn::Param{t.data_ptr(), dtype_of(t.scalar_type())} : nn::Param{};
}

inline std::int64_t rows_of(const Tensor& x) {
  std::int64_t m = 1;
  for (std::int64_t i = 0; i + 1 < x.dim(); ++i) m *= x.size(i);
  return m;
}

// Tensor::contiguous() is a dispatcher call even when it returns the tensor
// itself; is_contiguous() is a field read. Per call this is ~1 us of host time
// on the H200 machine, which is what a small-shape call costs in total.
inline Tensor contiguous_if(const Tensor& t) { return !t.defined() || t.is_contiguous() ? t : t.contiguous(); }

inline Tensor opt(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }

}  // namespace normkit::torch_glue
