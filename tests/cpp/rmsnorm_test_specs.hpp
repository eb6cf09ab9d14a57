// Specs and plans shared by the RMSNorm/LayerNorm kernel tests (compile sweeps in
// test_rmsnorm_kernels.cpp, plan rules in test_rmsnorm_plans.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/runtime.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_kernels.hpp"

namespace rmsnorm_test {

using namespace normkit::norm;
using namespace normkit::norm::detail;
using normkit::rt::Target;

constexpr DType bf16 = DType::kBFloat16;
constexpr DType f16 = DType::kFloat16;
constexpr DType f32 = DType::kFloat32;

inline int arch_of(const std::string& target) { return Target::parse(target).arch; }

// A forward spec of x, weight and out all in `x`, no residual or bias.
inline RmsFwdSpec plain_fwd_spec(std::int64_t n, DType x) {
  RmsFwdSpec f;
  f.n = n;
  f.x = x;
  f.weight = x;
  f.out = x;
  return f;
}

// A forward spec of RMSNorm or (center) LayerNorm with a weight (and for LayerNorm a
// bias) of dtype `w`, a residual (and residual_out) of dtype `residual` or none, and
// the statistics stored or not; out in x's dtype.
inline RmsFwdSpec norm_fwd_spec(std::int64_t n, DType x, DType w, bool center, std::optional<DType> residual,
                                bool stats) {
  RmsFwdSpec f = plain_fwd_spec(n, x);
  f.weight = w;
  if (center) f.bias = w;
  f.center = center;
  f.residual = f.residual_out = residual;
  f.store_rstd = stats;
  return f;
}

// A backward spec of x, weight, dout and dx all in `x` (the plain training case).
inline RmsBwdSpec plain_bwd_spec(std::int64_t n, DType x = DType::kBFloat16) {
  RmsBwdSpec b;
  b.n = n;
  b.x = x;
  b.weight = x;
  b.dout = x;
  b.dx = x;
  return b;
}

// A backward spec of RMSNorm or (center) LayerNorm with a weight (and for LayerNorm a
// db) of dtype `w`, dresidual_out (dro) and a separate dresidual (dres) in x's dtype or
// none.
inline RmsBwdSpec norm_bwd_spec(std::int64_t n, DType x, DType w, bool center, bool dro, bool dres = false) {
  RmsBwdSpec b = plain_bwd_spec(n, x);
  b.weight = w;
  b.center = center;
  if (center) b.dbias = w;
  if (dro) b.dresidual_out = x;
  if (dres) b.dresidual = x;
  return b;
}

// norm_bwd_spec planned for sm_90 (or `arch`) under NORMKIT_BACKWARD_PLAN=`override_text`
// (16-byte vectors allowed).
inline RmsBwdSpec planned_bwd(std::int64_t n, DType x, DType w, bool center, bool dro,
                              const std::string& override_text, int arch = 90) {
  RmsBwdSpec b = norm_bwd_spec(n, x, w, center, dro);
  b.plan_override = normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", override_text);
  b.plan = plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), arch);
  return b;
}

// Dynamic shared memory a backward plan's weight slice takes (RowPlan::weight_smem;
// the kernel's W_ENTRY: one vector of the weight, rounded up to 16 bytes).
inline std::int64_t weight_slice_bytes(const RowPlan& p, std::int64_t n, std::int64_t weight_bytes) {
  if (!p.weight_smem) return 0;
  const std::int64_t slice = ((n + p.vec - 1) / p.vec + p.cluster - 1) / p.cluster;
  return slice * ((std::int64_t{p.vec} * weight_bytes + 15) / 16 * 16);
}

// NORMKIT_BACKWARD_PLAN (`variable`) = row=regs and then `override`: the register
// rows' own rules, where on sm_90 the bulk ring takes many long rows by itself
// (bulk_rows_measured, bulk_backward_rows_measured; test_forward_bulk_rows.cpp and
// test_backward_bulk_rows.cpp). In the forward row=regs also refuses the staged rows.
inline normkit::rt::PlanOverride register_rows(const std::string& override = "",
                                               const char* variable = "NORMKIT_BACKWARD_PLAN") {
  return normkit::rt::parse_plan_override(variable, override.empty() ? "row=regs" : "row=regs," + override);
}

inline RowPlan plan(std::int64_t n, DType x, bool backward, bool dbias, const std::string& target, int max_vec = 8,
             bool param_grads = false, bool few_rows = false) {
  RowPlanInputs in;
  in.few_rows = few_rows;
  in.n = n;
  in.max_vec = max_vec;
  in.x_bytes = static_cast<int>(dtype_size(x));
  in.dout_bytes = in.x_bytes;
  in.param_grads = param_grads;
  in.backward = backward;
  in.dbias = dbias;
  in.arch = arch_of(target);
  return plan_rows(in);
}

}  // namespace rmsnorm_test
