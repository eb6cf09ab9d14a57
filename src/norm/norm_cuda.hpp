// The CUDA path shared by RMSNorm and LayerNorm: one dispatch over the same
// kernels, which LayerNorm runs with `center` (h - mean(h) normalized; `mean`
// stored by the forward and read by the backward). LayerNorm's arguments are
// RMSNorm's with weight_offset 0 plus the mean.
#pragma once

#include <cstddef>

#include "normkit/norm/rmsnorm.hpp"

namespace normkit::norm::detail {

// Which norm a call is: names kernels and messages, and selects the centred kernels.
struct NormKind {
  bool center = false;
  const char* fwd_name = "rmsnorm_fwd";
  const char* bwd_name = "rmsnorm_bwd";
};
inline constexpr NormKind kRmsNorm{false, "rmsnorm_fwd", "rmsnorm_bwd"};
inline constexpr NormKind kLayerNorm{true, "layernorm_fwd", "layernorm_bwd"};

// Arguments checked, device data on CUDA ordinal `device`, asynchronous on
// args.stream. `mean`: the forward's output (may be null), the backward's input
// (required for LayerNorm).
void norm_fwd_cuda(const RmsNormFwdArgs& args, float* mean, const NormKind& kind, int device);
void norm_bwd_cuda(const RmsNormBwdArgs& args, const float* mean, const NormKind& kind, int device,
                   WorkspaceAllocator allocate, void* context);
std::size_t norm_bwd_workspace_bytes_cuda(const RmsNormBwdArgs& args, const NormKind& kind, int device);

}  // namespace normkit::norm::detail
