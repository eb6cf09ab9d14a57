// The CUDA path of LayerNorm, called by layernorm.cpp with checked arguments
// (layernorm_internal.hpp's checked()) whose tensors are device memory on CUDA
// ordinal `device` and none of them fp64 (rejected before these are called).
// Asynchronous on args.stream. The same shape as rmsnorm_internal.hpp's
// rmsnorm_*_cuda entry points.
#pragma once

#include <cstddef>

#include "normkit/norm/layernorm.hpp"

namespace normkit::norm::detail {

void layernorm_fwd_cuda(const LayerNormFwdArgs& args, int device);
// `allocate` (may be null) supplies the workspace when args.workspace is null.
void layernorm_bwd_cuda(const LayerNormBwdArgs& args, int device, WorkspaceAllocator allocate = nullptr,
                        void* context = nullptr);
std::size_t layernorm_bwd_workspace_bytes_cuda(const LayerNormBwdArgs& args, int device);

}  // namespace normkit::norm::detail
