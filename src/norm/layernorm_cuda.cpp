// Placeholder for the LayerNorm CUDA kernels (declared in layernorm_cuda.hpp):
// until they land, a LayerNorm call on device data fails with this error. The
// CPU fallback and the fused RMSNorm add (which runs RMSNorm's kernels) work.
#include "layernorm_cuda.hpp"

#include "normkit/runtime/error.hpp"

namespace normkit::norm::detail {

namespace {
[[noreturn]] void not_built(const char* op) {
  NK_THROW(op, ": LayerNorm CUDA kernels are not built yet (the CPU fallback serves host data)");
}
}  // namespace

void layernorm_fwd_cuda(const LayerNormFwdArgs&, int) { not_built("layernorm_fwd"); }
void layernorm_bwd_cuda(const LayerNormBwdArgs&, int, WorkspaceAllocator, void*) { not_built("layernorm_bwd"); }
std::size_t layernorm_bwd_workspace_bytes_cuda(const LayerNormBwdArgs&, int) { not_built("layernorm_bwd"); }

}  // namespace normkit::norm::detail
