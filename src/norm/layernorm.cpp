// Public entry points of LayerNorm and of the in-place fused add: validate, pick
// the backend from where the data lives, dispatch (as rmsnorm.cpp does for
// RMSNorm).
#include "normkit/norm/layernorm.hpp"

#include "layernorm_cuda.hpp"
#include "layernorm_internal.hpp"
#include "norm_dispatch.hpp"
#include "rmsnorm_internal.hpp"

namespace normkit::norm {

using detail::kHost;
using detail::resolve_device;

namespace {

int resolve_fwd_device(const LayerNormFwdArgs& a, const char* op) {
  return resolve_device(a.device, op,
                        {a.x.data, a.residual.data, a.out.data, a.residual_out.data, a.weight.data, a.bias.data,
                         a.mean, a.rstd},
                        {"x", "residual", "out", "residual_out", "weight", "bias", "mean", "rstd"});
}

int resolve_bwd_device(const LayerNormBwdArgs& a) {
  return resolve_device(a.device, "layernorm_bwd",
                        {a.x.data, a.dout.data, a.dresidual_out.data, a.dx.data, a.dresidual.data, a.weight.data,
                         a.mean, a.rstd, a.dweight, a.dbias.data},
                        {"x", "dout", "dresidual_out", "dx", "dresidual", "weight", "mean", "rstd", "dweight",
                         "dbias"});
}

// Checked arguments, resolved device.
void run_fwd(const LayerNormFwdArgs& a, int device) {
  if (device == kHost) {
    detail::layernorm_fwd_cpu(a);
  } else {
    detail::reject_fp64_on_gpu(a);
    detail::layernorm_fwd_cuda(a, device);
  }
}

}  // namespace

void layernorm_fwd(const LayerNormFwdArgs& args) {
  const LayerNormFwdArgs a = detail::checked(args);
  run_fwd(a, resolve_fwd_device(a, "layernorm_fwd"));
}

void layernorm_bwd(const LayerNormBwdArgs& args) { layernorm_bwd(args, nullptr, nullptr); }

void layernorm_bwd(const LayerNormBwdArgs& args, WorkspaceAllocator allocate, void* context) {
  const LayerNormBwdArgs a = detail::checked(args);
  const int device = resolve_bwd_device(a);
  if (device == kHost) {
    detail::layernorm_bwd_cpu(a);
  } else {
    detail::reject_fp64_on_gpu(a);
    detail::layernorm_bwd_cuda(a, device, allocate, context);
  }
}

std::size_t layernorm_bwd_workspace_bytes(const LayerNormBwdArgs& args) {
  const LayerNormBwdArgs a = detail::checked(args);
  const int device = resolve_bwd_device(a);
  if (device == kHost) return 0;
  detail::reject_fp64_on_gpu(a);
  return detail::layernorm_bwd_workspace_bytes_cuda(a, device);
}

// ---------------------------------------------------------------------------
// Fused add: the forward with out == x and residual_out == residual, run by the
// same backends (the RMSNorm kernels reject fp64 themselves).

void fused_add_rmsnorm(const FusedAddNormArgs& args) {
  const RmsNormFwdArgs a = detail::fused_add_rmsnorm_args(args);
  const int device = resolve_device(a.device, "fused_add_rmsnorm",
                                    {a.x.data, a.residual.data, a.weight.data, a.bias.data},
                                    {"x", "residual", "weight", "bias"});
  if (device == kHost) {
    detail::rmsnorm_fwd_cpu(a);
  } else {
    detail::rmsnorm_fwd_cuda(a, device);
  }
}

void fused_add_layernorm(const FusedAddNormArgs& args) {
  const LayerNormFwdArgs a = detail::fused_add_layernorm_args(args);
  run_fwd(a, resolve_fwd_device(a, "fused_add_layernorm"));
}

}  // namespace normkit::norm
