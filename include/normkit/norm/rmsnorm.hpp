// RMSNorm: the public C++ API of normkit_norm.
//
//   h        = x + residual                       (fp32; residual optional)
//   rstd     = 1 / sqrt(mean(h^2) + eps)          (fp32, one per row)
//   out      = h * rstd * (weight + weight_offset) + bias     (computed in fp32)
//   residual_out = h                              (stored in its own dtype)
//
// Backward, given h (the `x` of the backward: residual_out when a residual was
// added, else x), dout and the saved rstd:
//   xhat = h * rstd,  g = dout * (weight + weight_offset)
//   dx   = rstd * (g - xhat * mean(g * xhat)) + dresidual_out
//   dw   = sum_rows dout * xhat,  db = sum_rows dout   (per head in per-head mode)
//   dresidual = dx (in its own dtype)
// dw/db are accumulated in fp32 per CTA into a caller-provided workspace and then
// summed in a fixed order, so results are bitwise identical across runs.
//
// Computation is in fp32 (in double on the CPU fallback when any tensor is fp64,
// a dtype the GPU kernels reject). rstd is stored as fp32 either way.
//
// Pointers are raw device (or host, for the CPU fallback) pointers; the call is
// asynchronous on `stream` for device data and synchronous for host data.
// Arguments are validated before anything is written; errors name the argument.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "normkit/norm/types.hpp"

namespace normkit::norm {

struct RmsNormFwdArgs {
  RowShape shape;
  Rows x;                  // required
  Rows residual;           // optional: h = x + residual
  Rows out;                // required
  Rows residual_out;       // optional: h stored (requires residual, or stores x itself)
  Param weight;            // optional, (heads, N)
  Param bias;              // optional, (heads, N), same heads as weight
  std::int64_t heads = 1;  // rows of weight/bias; per-head mode when > 1
  float* rstd = nullptr;   // optional: M fp32 values
  float eps = 1e-6f;
  float weight_offset = 0.f;  // requires weight when non-zero (Gemma: 1.0)
  Device device;
  Stream stream = nullptr;
};

struct RmsNormBwdArgs {
  RowShape shape;
  Rows x;                  // h as saved by forward (residual_out if a residual was added)
  Rows dout;               // required
  Rows dresidual_out;      // optional: gradient flowing into residual_out, added to dx
  Rows dx;                 // required
  Rows dresidual;          // optional: receives dx in its own dtype
  Param weight;            // optional, (heads, N)
  std::int64_t heads = 1;
  const float* rstd = nullptr;  // required: M fp32 values from forward
  void* dweight = nullptr;      // required when weight is present: (heads, N) in weight's dtype
  Param dbias;                  // optional: (heads, N) in its dtype; db = sum of dout
  float weight_offset = 0.f;
  // Device data: scratch of rmsnorm_bwd_workspace_bytes() bytes (0 when that is 0),
  // 16-byte aligned (cudaMalloc and torch allocations are).
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Device device;
  Stream stream = nullptr;
};

void rmsnorm_fwd(const RmsNormFwdArgs& args);
void rmsnorm_bwd(const RmsNormBwdArgs& args);
// rmsnorm_bwd taking its scratch from `allocate` when args.workspace is null:
// `allocate(bytes, context)` is called at most once, with the bytes
// rmsnorm_bwd_workspace_bytes() would return, and only when they are non-zero;
// it returns memory that stays valid until the launched kernels have run
// (stream-ordered) or throws. One validation and one plan per call, where a size
// query and a call take two: the front ends' hot path.
using WorkspaceAllocator = void* (*)(std::size_t bytes, void* context);
void rmsnorm_bwd(const RmsNormBwdArgs& args, WorkspaceAllocator allocate, void* context);
// Scratch the backward needs for these arguments on their device: fp32 partial
// sums of dw/db, and for very long rows each row's dot product in column chunks.
// 0 for host data. Depends on the shape, dtypes and the device's SM count, never
// on the data.
std::size_t rmsnorm_bwd_workspace_bytes(const RmsNormBwdArgs& args);

// ---------------------------------------------------------------------------
// Ahead-of-time compilation (no GPU needed): the kernels a deployment will use,
// for one target, so that it can run with NORMKIT_RUN_ONLY=1.
//
// What a kernel is specialized on, the same for RMSNorm and LayerNorm (the same
// kernels, LayerNorm's centred): dtypes, the optional tensors present, N. Not
// weight_offset nor eps, which are launch arguments. Each operator has its own
// type (RmsNormVariant, LayerNormVariant in layernorm.hpp) so that a variant
// cannot be precompiled for the other operator by mistake.
struct NormVariant {
  bool backward = false;
  std::int64_t n = 0;
  DType x = DType::kBFloat16;          // forward x; backward h
  std::optional<DType> weight;         // absent: no weight
  std::optional<DType> bias;           // forward bias / backward dbias
  std::optional<DType> residual;       // forward: residual input; backward: dresidual_out
  std::optional<DType> residual_out;   // forward: residual_out; backward: dresidual
  std::optional<DType> out;            // forward out / backward dx; default: x
  std::optional<DType> dout;           // backward only; default: x
  bool store_rstd = true;              // forward only: rstd (LayerNorm: mean and rstd) stored
};

struct RmsNormVariant : NormVariant {
  std::string describe() const;  // "rmsnorm_fwd n=4096 x=bf16 ..."
};

struct PrecompiledKernel {
  std::string family;
  std::string template_args;
  std::string cache_key;
  int registers = -1;
  int spill_bytes = -1;  // stores + loads; -1 when ptxas gave no report
  bool from_cache = false;
};

// Compiles (or finds in the disk cache) every kernel `variant` can use on `arch`
// ("sm_90a", ...), for 16-byte-aligned data. `on_kernel` is called after each.
std::vector<PrecompiledKernel> rmsnorm_precompile(
    const RmsNormVariant& variant, const std::string& arch,
    const std::function<void(const PrecompiledKernel&)>& on_kernel = {});
// How many kernels rmsnorm_precompile(variant, arch) will produce (for progress bars).
std::size_t rmsnorm_precompile_count(const RmsNormVariant& variant, const std::string& arch);

}  // namespace normkit::norm
