// Argument checks shared by every norm operator (RMSNorm, LayerNorm, fused add).
// The argument structs of the operators name their common fields alike (x,
// residual, out, ..., heads, eps), so the whole forward and backward checks are
// written once, as templates over the struct, and each operator adds only what is
// its own (RMSNorm: weight_offset; LayerNorm: mean). Messages name the argument as
// the C++ caller spells it ('out', 'shape.rows_inner') because that is what they
// must fix; `op` names the public function.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "normkit/norm/types.hpp"
#include "normkit/runtime/error.hpp"

namespace normkit::norm::detail {

// shape.n >= 1, rows >= 0; rows_inner 0 resolved to rows (1 for an empty batch)
// and required to divide rows.
RowShape resolve_shape(const char* op, RowShape s);
// An input: dtype valid, strides >= 0 and addressable; absent only if !required.
void check_rows(const char* op, const char* name, const Rows& t, const RowShape& s, bool required);
// An output: as an input, and its rows must not overlap each other.
void check_output(const char* op, const char* name, const Rows& t, const RowShape& s, bool required);
void check_param(const char* op, const char* name, const Param& p);
void check_heads(const char* op, std::int64_t heads, const RowShape& s, bool has_param, const char* params);
void check_eps(const char* op, float eps);
void check_weight_offset(const char* op, float offset, bool has_weight);

// Named tensors of one call, for the GPU's fp64 check.
struct Named {
  const char* name;
  bool present;
  DType dtype;
};
void reject_fp64(const char* op, std::initializer_list<Named> tensors);

// Whether two tensors share a byte (exactly, row by row: rows that interleave
// without sharing a byte do not overlap). Strides must already be checked.
bool rows_overlap(const Rows& a, const Rows& b, const RowShape& s);
bool rows_overlap_param(const Rows& a, const Param& p, std::int64_t count, const RowShape& s);

// The checks every forward shares, in this order: shape, x, residual, out,
// residual_out, weight, bias, heads, eps. Returns the args with the shape resolved.
template <class Args>
Args checked_fwd_common(const char* op, const Args& args) {
  Args a = args;
  a.shape = resolve_shape(op, args.shape);
  check_rows(op, "x", a.x, a.shape, true);
  check_rows(op, "residual", a.residual, a.shape, false);
  check_output(op, "out", a.out, a.shape, true);
  check_output(op, "residual_out", a.residual_out, a.shape, false);
  check_param(op, "weight", a.weight);
  check_param(op, "bias", a.bias);
  check_heads(op, a.heads, a.shape, a.weight.present() || a.bias.present(), "weight or bias");
  check_eps(op, a.eps);
  return a;
}

// The checks every backward shares: shape, x, dout, dresidual_out, dx, dresidual,
// weight, dbias, rstd, dweight (iff weight), heads.
template <class Args>
Args checked_bwd_common(const char* op, const Args& args) {
  Args a = args;
  a.shape = resolve_shape(op, args.shape);
  check_rows(op, "x", a.x, a.shape, true);
  check_rows(op, "dout", a.dout, a.shape, true);
  check_rows(op, "dresidual_out", a.dresidual_out, a.shape, false);
  check_output(op, "dx", a.dx, a.shape, true);
  check_output(op, "dresidual", a.dresidual, a.shape, false);
  check_param(op, "weight", a.weight);
  check_param(op, "dbias", a.dbias);
  NK_CHECK(a.rstd != nullptr, op, ": argument 'rstd' is required but was not given (null data)");
  if (a.weight.present())
    NK_CHECK(a.dweight != nullptr, op, ": argument 'dweight' is required when a weight is given (null data)");
  else
    NK_CHECK(a.dweight == nullptr, op, ": argument 'dweight' was given but no weight was given");
  check_heads(op, a.heads, a.shape, a.weight.present() || a.dbias.present(), "weight or dbias");
  return a;
}

template <class Args>
void reject_fp64_fwd(const char* op, const Args& a) {
  reject_fp64(op, {{"x", a.x.present(), a.x.dtype},
                   {"residual", a.residual.present(), a.residual.dtype},
                   {"out", a.out.present(), a.out.dtype},
                   {"residual_out", a.residual_out.present(), a.residual_out.dtype},
                   {"weight", a.weight.present(), a.weight.dtype},
                   {"bias", a.bias.present(), a.bias.dtype}});
}

template <class Args>
void reject_fp64_bwd(const char* op, const Args& a) {
  reject_fp64(op, {{"x", a.x.present(), a.x.dtype},
                   {"dout", a.dout.present(), a.dout.dtype},
                   {"dresidual_out", a.dresidual_out.present(), a.dresidual_out.dtype},
                   {"dx", a.dx.present(), a.dx.dtype},
                   {"dresidual", a.dresidual.present(), a.dresidual.dtype},
                   {"weight", a.weight.present(), a.weight.dtype},
                   {"dbias", a.dbias.present(), a.dbias.dtype}});
}

}  // namespace normkit::norm::detail
