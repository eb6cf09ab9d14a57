// Public entry points of RMSNorm: validate, pick the backend from where the data
// lives, dispatch. Ahead-of-time compilation is in norm_precompile.cpp.
#include "normkit/norm/rmsnorm.hpp"

#include "norm_dispatch.hpp"
#include "rmsnorm_internal.hpp"

namespace normkit::norm {

using detail::kHost;
using detail::resolve_device;

void rmsnorm_fwd(const RmsNormFwdArgs& args) {
  const RmsNormFwdArgs a = detail::checked(args);
  const int device = resolve_device(a.device, "rmsnorm_fwd",
                                    {a.x.data, a.residual.data, a.out.data, a.residual_out.data, a.weight.data,
                                     a.bias.data, a.rstd},
                                    {"x", "residual", "out", "residual_out", "weight", "bias", "rstd"});
  if (device == kHost) {
    detail::rmsnorm_fwd_cpu(a);
  } else {
    detail::rmsnorm_fwd_cuda(a, device);
  }
}

namespace {
int resolve_bwd_device(const RmsNormBwdArgs& a) {
  return resolve_device(a.device, "rmsnorm_bwd",
                        {a.x.data, a.dout.data, a.dresidual_out.data, a.dx.data, a.dresidual.data, a.weight.data,
                         a.rstd, a.dweight, a.dbias.data},
                        {"x", "dout", "dresidual_out", "dx", "dresidual", "weight", "rstd", "dweight", "dbias"});
}
}  // namespace

void rmsnorm_bwd(const RmsNormBwdArgs& args) { rmsnorm_bwd(args, nullptr, nullptr); }

void rmsnorm_bwd(const RmsNormBwdArgs& args, WorkspaceAllocator allocate, void* context) {
  const RmsNormBwdArgs a = detail::checked(args);
  const int device = resolve_bwd_device(a);
  if (device == kHost) {
    detail::rmsnorm_bwd_cpu(a);
  } else {
    detail::rmsnorm_bwd_cuda(a, device, allocate, context);
  }
}

std::size_t rmsnorm_bwd_workspace_bytes(const RmsNormBwdArgs& args) {
  const RmsNormBwdArgs a = detail::checked(args);
  const int device = resolve_bwd_device(a);
  return device == kHost ? 0 : detail::rmsnorm_bwd_workspace_bytes_cuda(a, device);
}

}  // namespace normkit::norm
