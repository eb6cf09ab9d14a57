// Argument validation of LayerNorm and of the in-place fused add (rules:
// layernorm_internal.hpp). The checks every norm shares are in norm_validate.hpp.
#include <initializer_list>
#include <utility>

#include "layernorm_internal.hpp"
#include "norm_validate.hpp"
#include "normkit/runtime/error.hpp"

namespace normkit::norm::detail {

void reject_fp64_on_gpu(const LayerNormFwdArgs& a) { reject_fp64_fwd("layernorm_fwd", a); }

void reject_fp64_on_gpu(const LayerNormBwdArgs& a) { reject_fp64_bwd("layernorm_bwd", a); }

LayerNormFwdArgs checked(const LayerNormFwdArgs& args) { return checked_fwd_common("layernorm_fwd", args); }

LayerNormBwdArgs checked(const LayerNormBwdArgs& args) {
  constexpr const char* op = "layernorm_bwd";
  const LayerNormBwdArgs a = checked_bwd_common(op, args);
  NK_CHECK(a.mean != nullptr, op, ": argument 'mean' is required but was not given (null data)");
  return a;
}

namespace {

// What both fused adds check: x and residual are each read and then overwritten
// in place, so each is an output (rows that do not overlap themselves), they must
// not share memory with each other, and weight/bias must not share memory with
// either (they would change while being read).
RowShape check_fused_add(const char* op, const FusedAddNormArgs& a) {
  const RowShape s = resolve_shape(op, a.shape);
  check_output(op, "x", a.x, s, true);
  check_output(op, "residual", a.residual, s, true);
  check_param(op, "weight", a.weight);
  check_param(op, "bias", a.bias);
  check_heads(op, a.heads, s, a.weight.present() || a.bias.present(), "weight or bias");
  check_eps(op, a.eps);
  NK_CHECK(!rows_overlap(a.x, a.residual, s), op,
           ": arguments 'x' and 'residual' overlap; both are overwritten in place (residual <- x + residual, "
           "x <- the normalized output), so they must be distinct memory");
  const std::int64_t count = a.heads * s.n;
  for (const auto& [name, param] : {std::pair{"weight", a.weight}, std::pair{"bias", a.bias}}) {
    NK_CHECK(!rows_overlap_param(a.x, param, count, s), op, ": argument '", name,
             "' overlaps 'x', which is overwritten in place");
    NK_CHECK(!rows_overlap_param(a.residual, param, count, s), op, ": argument '", name,
             "' overlaps 'residual', which is overwritten in place");
  }
  return s;
}

// The forward's arguments with out == x and residual_out == residual: the only
// aliasing the forward is written for (each row is read whole before it is
// stored), and exactly what an in-place fused add is.
template <class Fwd>
Fwd as_forward(const FusedAddNormArgs& a, const RowShape& s) {
  Fwd f;
  f.shape = s;
  f.x = a.x;
  f.residual = a.residual;
  f.out = a.x;
  f.residual_out = a.residual;
  f.weight = a.weight;
  f.bias = a.bias;
  f.heads = a.heads;
  f.eps = a.eps;
  f.device = a.device;
  f.stream = a.stream;
  return f;
}

}  // namespace

RmsNormFwdArgs fused_add_rmsnorm_args(const FusedAddNormArgs& args) {
  constexpr const char* op = "fused_add_rmsnorm";
  const RowShape s = check_fused_add(op, args);
  check_weight_offset(op, args.weight_offset, args.weight.present());
  RmsNormFwdArgs f = as_forward<RmsNormFwdArgs>(args, s);
  f.weight_offset = args.weight_offset;
  return f;
}

LayerNormFwdArgs fused_add_layernorm_args(const FusedAddNormArgs& args) {
  constexpr const char* op = "fused_add_layernorm";
  const RowShape s = check_fused_add(op, args);
  NK_CHECK(args.weight_offset == 0.f, op, ": argument 'weight_offset' is ", args.weight_offset,
           "; LayerNorm takes no weight offset (it must be 0)");
  return as_forward<LayerNormFwdArgs>(args, s);
}

}  // namespace normkit::norm::detail
