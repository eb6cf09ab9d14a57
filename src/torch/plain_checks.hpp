// The eager entry's yes/no checks of a call (normkit._torch_C): whether the plain
// C++ path may take it. A call that fails any of them goes back to Python, which
// raises the error that names the argument (normkit.torch's check_fwd / check_bwd):
// keep the two in step (tests/python/test_torch_ext.py runs every bad-argument case
// through both).
#pragma once

#include "tensor_glue.hpp"

namespace normkit::torch_glue {

inline bool supported(at::ScalarType t, bool cuda) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || (!cuda && t == at::kDouble);
}
inline bool unit_stride_rows(const Tensor& t) { return t.stride(-1) == 1 || t.size(-1) == 1 || t.numel() == 0; }

// x itself: CUDA or host, at least one dimension, a supported dtype, unit-stride rows.
inline bool plain_rows(const Tensor& x) {
  const bool cuda = x.is_cuda();
  return (cuda || x.is_cpu()) && x.dim() > 0 && supported(x.scalar_type(), cuda) && unit_stride_rows(x);
}
// A (..., N) tensor shaped, placed and typed like the rows x.
inline bool rows_like(const Tensor& t, const Tensor& x) {
  return !t.defined() || (supported(t.scalar_type(), x.is_cuda()) && t.device() == x.device() &&
                          t.sizes() == x.sizes() && unit_stride_rows(t));
}
// A weight or bias: (N,), or (H, N) with x (..., H, N).
inline bool param_fits(const Tensor& p, const Tensor& x) {
  if (!p.defined()) return true;
  if (!supported(p.scalar_type(), x.is_cuda()) || p.device() != x.device()) return false;
  const std::int64_t n = x.size(-1);
  if (p.dim() == 1) return p.size(0) == n;
  return p.dim() == 2 && x.dim() >= 2 && p.size(1) == n && x.size(-2) == p.size(0);
}
inline bool dtype_fits(OptDtype t, const Tensor& x) { return !t || supported(*t, x.is_cuda()); }
// mean / rstd as the forward stores them: fp32, one value per row of x, on x's device.
inline bool stat_fits(const Tensor& s, const Tensor& x) {
  return s.defined() && s.device() == x.device() && s.scalar_type() == at::kFloat && s.numel() == rows_of(x);
}

inline bool plain_forward_call(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r, OptDtype out_dtype,
                        OptDtype residual_dtype, double weight_offset) {
  if (!plain_rows(x) || !param_fits(w, x) || !param_fits(b, x) || !rows_like(r, x)) return false;
  if (w.defined() && b.defined() && b.sizes() != w.sizes()) return false;
  if (!dtype_fits(out_dtype, x) || !dtype_fits(residual_dtype, x)) return false;
  return weight_offset == 0.0 || w.defined();
}

// mean: LayerNorm's; undefined (and not checked) for RMSNorm.
inline bool plain_backward_call(const Tensor& x, const Tensor& w, const Tensor& dout, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dresidual_out, OptDtype dx_dtype, OptDtype dbias_dtype,
                         OptDtype dresidual_dtype, bool with_mean) {
  if (!plain_rows(x) || !param_fits(w, x) || !dout.defined() || !rows_like(dout, x) || !rows_like(dresidual_out, x))
    return false;
  if (!stat_fits(rstd, x) || (with_mean && !stat_fits(mean, x))) return false;
  return dtype_fits(dx_dtype, x) && dtype_fits(dbias_dtype, x) && dtype_fits(dresidual_dtype, x);
}

}  // namespace normkit::torch_glue
