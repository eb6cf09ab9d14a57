// LayerNorm and the in-place fused residual add: the public C++ API of
// normkit_norm next to RMSNorm (rmsnorm.hpp), with the same conventions for
// rows, strides, dtypes, devices and errors.
//
// LayerNorm forward:
//   h        = x + residual                            (fp32; residual optional)
//   mean     = mean(h)                                 (fp32, one per row)
//   rstd     = 1 / sqrt(mean((h - mean)^2) + eps)      (fp32, one per row; two passes
//                                                       over the row, never E[h^2] - mean^2)
//   out      = (h - mean) * rstd * weight + bias       (computed in fp32)
//   residual_out = h                                   (stored in its own dtype)
//
// LayerNorm backward, given h (residual_out when a residual was added, else x),
// dout and the saved mean and rstd:
//   xhat = (h - mean) * rstd,  g = dout * weight
//   dx   = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual_out
//   dw   = sum_rows dout * xhat,  db = sum_rows dout   (per head in per-head mode)
//   dresidual = dx (in its own dtype)
// dw/db are summed in a fixed order: bitwise identical across runs.
//
// Fused add (what inference engines call once per layer), in place:
//   residual <- x + residual;  x <- norm(residual) * weight (+ bias)
// It is the forward with a residual whose outputs alias its inputs exactly
// (out == x, residual_out == residual: same pointers, dtypes and strides); any
// other overlap between x, residual, weight and bias is rejected. Each row is read
// whole before any of it is written, on the GPU and on the CPU alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normkit/norm/rmsnorm.hpp"
#include "normkit/norm/types.hpp"

namespace normkit::norm {

struct LayerNormFwdArgs {
  RowShape shape;
  Rows x;                  // required
  Rows residual;           // optional: h = x + residual
  Rows out;                // required
  Rows residual_out;       // optional: h stored (requires residual, or stores x itself)
  Param weight;            // optional, (heads, N)
  Param bias;              // optional, (heads, N), same heads as weight
  std::int64_t heads = 1;  // rows of weight/bias; per-head mode when > 1
  float* mean = nullptr;   // optional: M fp32 values
  float* rstd = nullptr;   // optional: M fp32 values
  float eps = 1e-6f;
  Device device;
  Stream stream = nullptr;
};

struct LayerNormBwdArgs {
  RowShape shape;
  Rows x;                  // h as saved by forward (residual_out if a residual was added)
  Rows dout;               // required
  Rows dresidual_out;      // optional: gradient flowing into residual_out, added to dx
  Rows dx;                 // required
  Rows dresidual;          // optional: receives dx in its own dtype
  Param weight;            // optional, (heads, N)
  std::int64_t heads = 1;
  const float* mean = nullptr;  // required: M fp32 values from forward
  const float* rstd = nullptr;  // required: M fp32 values from forward
  void* dweight = nullptr;      // required when weight is present: (heads, N) in weight's dtype
  Param dbias;                  // optional: (heads, N) in its dtype; db = sum of dout
  // Device data: scratch of layernorm_bwd_workspace_bytes() bytes (0 when that is 0),
  // 16-byte aligned (cudaMalloc and torch allocations are).
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Device device;
  Stream stream = nullptr;
};

void layernorm_fwd(const LayerNormFwdArgs& args);
void layernorm_bwd(const LayerNormBwdArgs& args);
// As rmsnorm_bwd(args, allocate, context): the workspace from `allocate` when
// args.workspace is null.
void layernorm_bwd(const LayerNormBwdArgs& args, WorkspaceAllocator allocate, void* context);
// Scratch the backward needs for these arguments on their device; 0 for host data.
std::size_t layernorm_bwd_workspace_bytes(const LayerNormBwdArgs& args);

// In-place fused add, for RMSNorm and LayerNorm (formulas above and in
// rmsnorm.hpp). Both x and residual are read and written: they must not overlap
// each other, nor weight or bias.
struct FusedAddNormArgs {
  RowShape shape;
  Rows x;                     // required; overwritten with the normalized output (x's dtype)
  Rows residual;              // required; overwritten with x + residual (residual's dtype)
  Param weight;               // optional, (heads, N)
  Param bias;                 // optional, (heads, N)
  std::int64_t heads = 1;
  float eps = 1e-6f;
  float weight_offset = 0.f;  // RMSNorm only (Gemma: 1.0); LayerNorm requires 0
  Device device;
  Stream stream = nullptr;
};

void fused_add_rmsnorm(const FusedAddNormArgs& args);
void fused_add_layernorm(const FusedAddNormArgs& args);

// Ahead-of-time compilation of LayerNorm's kernels, as rmsnorm_precompile
// (rmsnorm.hpp): every kernel layernorm_fwd / layernorm_bwd can use for
// 16-byte-aligned data of `variant` on `arch`. store_rstd: the forward stores
// mean and rstd (one kernel stores both).
struct LayerNormVariant : NormVariant {
  std::string describe() const;  // "layernorm_fwd n=4096 x=bf16 ..."
};

std::vector<PrecompiledKernel> layernorm_precompile(
    const LayerNormVariant& variant, const std::string& arch,
    const std::function<void(const PrecompiledKernel&)>& on_kernel = {});
std::size_t layernorm_precompile_count(const LayerNormVariant& variant, const std::string& arch);

}  // namespace normkit::norm
