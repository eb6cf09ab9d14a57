// The generated instantiations of the norm kernels (RMSNorm, and LayerNorm: the
// same kernels with `center`): a spec (everything the binary depends on) ->
// KernelSource for the runtime. Shared by the CUDA dispatch and ahead-of-time
// precompilation so both name exactly the same kernels.
#pragma once

#include <optional>
#include <string>

#include "normkit/norm/types.hpp"
#include "normkit/runtime/config.hpp"
#include "normkit/runtime/kernel.hpp"
#include "rmsnorm_heuristics.hpp"

namespace normkit::norm::detail {

struct RmsFwdSpec {
  RowPlan plan;
  std::int64_t n = 0;
  DType x = DType::kBFloat16;
  std::optional<DType> residual, residual_out, weight, bias;
  DType out = DType::kBFloat16;
  bool store_rstd = false;  // rstd (and LayerNorm's mean) stored
  bool center = false;      // LayerNorm: h - mean(h) normalized (the kernels' CENTER)
  bool few_rows = false;    // a call of few rows (kFewRowsForwardElements): latency, not bandwidth
  bool decode_rows = false; // and of at most kDecodeRows rows (RowPlanInputs::decode_rows)
  bool params_smem_allowed = true;  // RowPlanInputs::params_smem_allowed (NORMKIT_PARAMS_SMEM)
  bool group_rows_allowed = true;   // RowPlanInputs::group_rows_allowed
  // out over x and residual_out over the residual (the fused add): grouped rows take
  // norm_fwd_group_kernel's COOPERATIVE instantiation, launched cooperatively.
  bool in_place = false;
  rt::PlanOverride plan_override;  // NORMKIT_FORWARD_PLAN (RowPlanInputs::forced_*)
  int memory_gbps = 0;             // RowPlanInputs::memory_gbps (the device's)
};

struct RmsBwdSpec {
  RowPlan plan;
  std::int64_t n = 0;
  DType x = DType::kBFloat16;   // h
  std::optional<DType> weight;  // dweight partials when present
  DType dout = DType::kBFloat16;
  std::optional<DType> dresidual_out;
  DType dx = DType::kBFloat16;
  std::optional<DType> dresidual;
  std::optional<DType> dbias;   // dbias summed (in this dtype) when present
  bool few_rows = false;        // plan for a call of few rows (RowPlanInputs::few_rows)
  bool center = false;          // LayerNorm
  bool smem_sums_allowed = true;  // RowPlanInputs::smem_sums_allowed (NORMKIT_SMEM_SUMS)
  bool async_rows_allowed = true;  // RowPlanInputs::async_rows_allowed (NORMKIT_ASYNC_ROWS)
  bool many_heads = false;         // RowPlanInputs::many_heads (per-head weights)
  bool group_rows_allowed = true;  // RowPlanInputs::group_rows_allowed
  rt::PlanOverride plan_override;  // NORMKIT_BACKWARD_PLAN (RowPlanInputs::forced_*)
  int memory_gbps = 0;             // RowPlanInputs::memory_gbps (the device's)
};

// Column-wise dw/db pass used when the row kernel is not register-resident.
struct RmsBwdColumnSpec {
  std::int64_t n = 0;
  int vec = 1;
  DType x = DType::kBFloat16;
  DType dout = DType::kBFloat16;
  bool dweight = false;
  bool dbias = false;
  bool center = false;
};
inline constexpr int kColumnThreads = 256;

struct ParamReduceSpec {
  std::optional<DType> dweight, dbias;
};

// Launch plans for a spec's dtypes (its `plan` field is not read) on data whose
// alignment allows `max_vec`-element vectors, for compute capability `arch` x 10.
RowPlan plan_fwd(const RmsFwdSpec& spec, int max_vec, int arch);
RowPlan plan_bwd(const RmsBwdSpec& spec, int max_vec, int arch);

// Every kernel one backward call launches (spec.plan set): the row kernel (after
// the dot-product kernel for split plans), the column pass when the row kernel
// does not sum dw/db, and the final reduction of
// the partials when there is a dweight or dbias. The CUDA dispatch and
// ahead-of-time compilation both take their kernels from here.
struct RmsBwdSources {
  rt::KernelSource rows;
  std::optional<rt::KernelSource> row_dots;  // split plans: the rows' dot products in column chunks
  std::optional<rt::KernelSource> columns;
  std::optional<rt::KernelSource> param_reduce;
};
RmsBwdSources bwd_sources(const RmsBwdSpec& spec);

rt::KernelSource fwd_source(const RmsFwdSpec& spec);
rt::KernelSource bwd_source(const RmsBwdSpec& spec);
rt::KernelSource bwd_column_source(const RmsBwdColumnSpec& spec);
rt::KernelSource param_reduce_source(const ParamReduceSpec& spec);

// Registers the embedded device headers of normkit_norm with the runtime (idempotent).
void ensure_device_headers();

}  // namespace normkit::norm::detail
