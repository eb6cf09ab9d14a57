// Internal seams of the RMSNorm operator: validation (shared by every path), the
// CPU fallback and the CUDA path. rmsnorm.cpp is the only caller of the backends.
#pragma once

#include <cstddef>

#include "normkit/norm/rmsnorm.hpp"

namespace normkit::norm::detail {

// Returns a copy with defaults resolved (shape.rows_inner == 0 -> rows) after
// checking every argument; throws normkit::Error naming the offending argument.
// Rules:
//  - shape.n >= 1, shape.rows >= 0, rows_inner >= 1 divides rows; heads >= 1 and
//    divides rows (per-head: batch row r uses param row r % heads).
//  - required tensors present (fwd: x, out; bwd: x, dout, dx, rstd; dweight iff
//    weight); heads > 1 needs a weight (or bias in forward); weight_offset != 0
//    needs a weight; eps finite and >= 0.
//  - strides >= 0. Inputs may use stride 0 (broadcast). Outputs must not overlap
//    themselves: stride_inner >= n when rows_inner > 1 and stride_outer >=
//    (rows_inner - 1) * stride_inner + n when rows > rows_inner.
//  - residual_out without residual stores x (prenorm without a residual).
RmsNormFwdArgs checked(const RmsNormFwdArgs& args);
RmsNormBwdArgs checked(const RmsNormBwdArgs& args);

// Element offset of batch row r in `t` for the (resolved) shape.
inline std::int64_t row_offset(const Rows& t, const RowShape& s, std::int64_t r) {
  return (r / s.rows_inner) * t.stride_outer + (r % s.rows_inner) * t.stride_inner;
}

// Host data, synchronous, multithreaded; args already checked. fp32 accumulation,
// or double throughout when any tensor of the call is fp64 (CPU-only dtype).
void rmsnorm_fwd_cpu(const RmsNormFwdArgs& args);
void rmsnorm_bwd_cpu(const RmsNormBwdArgs& args);

// Throws normkit::Error naming the first fp64 tensor of the call: the GPU kernels
// exist for fp16, bf16 and fp32 only. Called first by each CUDA entry point below
// (checked() accepts fp64, which the CPU fallback takes). `op` names the public
// function in the message.
void reject_fp64_on_gpu(const RmsNormFwdArgs& args);
void reject_fp64_on_gpu(const RmsNormBwdArgs& args, const char* op = "rmsnorm_bwd");

// Device data on CUDA ordinal `device`, asynchronous on args.stream; args checked.
void rmsnorm_fwd_cuda(const RmsNormFwdArgs& args, int device);
// `allocate` (may be null) supplies the workspace when args.workspace is null.
void rmsnorm_bwd_cuda(const RmsNormBwdArgs& args, int device, WorkspaceAllocator allocate = nullptr,
                      void* context = nullptr);
std::size_t rmsnorm_bwd_workspace_bytes_cuda(const RmsNormBwdArgs& args, int device);

}  // namespace normkit::norm::detail
