// Internal seams of LayerNorm and the fused add: validation (shared by every
// path) and the CPU fallback. The CUDA entry points are in layernorm_cuda.hpp.
// layernorm.cpp is the only caller of the backends.
#pragma once

#include "normkit/norm/layernorm.hpp"
#include "normkit/norm/rmsnorm.hpp"

namespace normkit::norm::detail {

// The rules of RMSNorm's checked() (rmsnorm_internal.hpp) without weight_offset;
// the backward also requires mean.
LayerNormFwdArgs checked(const LayerNormFwdArgs& args);
LayerNormBwdArgs checked(const LayerNormBwdArgs& args);

// The fused add as the forward it is: out aliases x and residual_out aliases
// residual exactly. Checks the FusedAddNormArgs under `op`'s name ('x' and
// 'residual' are both written: strides of outputs, and neither may overlap the
// other, weight or bias), then returns the forward's arguments, shape resolved.
RmsNormFwdArgs fused_add_rmsnorm_args(const FusedAddNormArgs& args);
LayerNormFwdArgs fused_add_layernorm_args(const FusedAddNormArgs& args);

// As rmsnorm's (rmsnorm_internal.hpp): names the first fp64 tensor.
void reject_fp64_on_gpu(const LayerNormFwdArgs& args);
void reject_fp64_on_gpu(const LayerNormBwdArgs& args);

// Host data, synchronous, multithreaded; args already checked (norm_cpu.cpp).
void layernorm_fwd_cpu(const LayerNormFwdArgs& args);
void layernorm_bwd_cpu(const LayerNormBwdArgs& args);

}  // namespace normkit::norm::detail
