// Argument validation of RMSNorm (rules: rmsnorm_internal.hpp). The checks every
// norm shares are in norm_validate.hpp; RMSNorm adds weight_offset. Every check
// runs before any backend is called, so a rejected call writes nothing.
#include "norm_validate.hpp"
#include "rmsnorm_internal.hpp"

namespace normkit::norm::detail {

void reject_fp64_on_gpu(const RmsNormFwdArgs& a) { reject_fp64_fwd("rmsnorm_fwd", a); }

void reject_fp64_on_gpu(const RmsNormBwdArgs& a, const char* op) { reject_fp64_bwd(op, a); }

RmsNormFwdArgs checked(const RmsNormFwdArgs& args) {
  constexpr const char* op = "rmsnorm_fwd";
  const RmsNormFwdArgs a = checked_fwd_common(op, args);
  check_weight_offset(op, a.weight_offset, a.weight.present());
  return a;
}

RmsNormBwdArgs checked(const RmsNormBwdArgs& args) {
  constexpr const char* op = "rmsnorm_bwd";
  const RmsNormBwdArgs a = checked_bwd_common(op, args);
  check_weight_offset(op, a.weight_offset, a.weight.present());
  return a;
}

}  // namespace normkit::norm::detail
