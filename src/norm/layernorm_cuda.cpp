// The CUDA path of LayerNorm: RMSNorm's kernels with `center` (norm_cuda.hpp).
// LayerNorm's arguments are RMSNorm's without weight_offset, plus the mean.
#include "layernorm_cuda.hpp"

#include "norm_cuda.hpp"

namespace normkit::norm::detail {
namespace {

RmsNormFwdArgs as_norm_args(const LayerNormFwdArgs& a) {
  RmsNormFwdArgs r;
  r.shape = a.shape;
  r.x = a.x;
  r.residual = a.residual;
  r.out = a.out;
  r.residual_out = a.residual_out;
  r.weight = a.weight;
  r.bias = a.bias;
  r.heads = a.heads;
  r.rstd = a.rstd;
  r.eps = a.eps;
  r.weight_offset = 0.f;
  r.device = a.device;
  r.stream = a.stream;
  return r;
}

RmsNormBwdArgs as_norm_args(const LayerNormBwdArgs& a) {
  RmsNormBwdArgs r;
  r.shape = a.shape;
  r.x = a.x;
  r.dout = a.dout;
  r.dresidual_out = a.dresidual_out;
  r.dx = a.dx;
  r.dresidual = a.dresidual;
  r.weight = a.weight;
  r.heads = a.heads;
  r.rstd = a.rstd;
  r.dweight = a.dweight;
  r.dbias = a.dbias;
  r.workspace = a.workspace;
  r.workspace_bytes = a.workspace_bytes;
  r.weight_offset = 0.f;
  r.device = a.device;
  r.stream = a.stream;
  return r;
}

}  // namespace

void layernorm_fwd_cuda(const LayerNormFwdArgs& args, int device) {
  norm_fwd_cuda(as_norm_args(args), args.mean, kLayerNorm, device);
}

void layernorm_bwd_cuda(const LayerNormBwdArgs& args, int device, WorkspaceAllocator allocate, void* context) {
  norm_bwd_cuda(as_norm_args(args), args.mean, kLayerNorm, device, allocate, context);
}

std::size_t layernorm_bwd_workspace_bytes_cuda(const LayerNormBwdArgs& args, int device) {
  return norm_bwd_workspace_bytes_cuda(as_norm_args(args), kLayerNorm, device);
}

}  // namespace normkit::norm::detail
