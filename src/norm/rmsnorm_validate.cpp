// Argument validation shared by every RMSNorm path (rules: rmsnorm_internal.hpp).
// Every check runs before any backend is called, so a rejected call writes
// nothing. Messages name the argument as the C++ caller spells it ('out',
// 'shape.rows_inner', 'weight_offset') because that is what they must fix.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "normkit/runtime/error.hpp"
#include "rmsnorm_internal.hpp"

namespace normkit::norm::detail {
namespace {

// fp64 is valid here: this validation is shared by every path, and the CPU
// fallback takes it. The GPU path rejects it separately (reject_fp64_on_gpu).
bool valid_dtype(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

void check_dtype(const char* op, const char* name, DType t) {
  NK_CHECK(valid_dtype(t), op, ": argument '", name, "': invalid dtype value ", static_cast<int>(t),
           " (expected fp16, bf16, fp32 or fp64)");
}

// Named tensors of one call, for the GPU's fp64 check.
struct Named {
  const char* name;
  bool present;
  DType dtype;
};

void reject_fp64(const char* op, std::initializer_list<Named> tensors) {
  for (const Named& t : tensors)
    NK_CHECK(!t.present || t.dtype != DType::kFloat64, op, ": argument '", t.name,
             "' is fp64; float64 runs only on the CPU fallback (the GPU kernels take fp16, bf16 and fp32)");
}

RowShape resolve_shape(const char* op, RowShape s) {
  NK_CHECK(s.n >= 1, op, ": argument 'shape.n' must be >= 1, got ", s.n);
  NK_CHECK(s.rows >= 0, op, ": argument 'shape.rows' must be >= 0, got ", s.rows);
  NK_CHECK(s.rows_inner >= 0, op, ": argument 'shape.rows_inner' must be >= 0 (0 means shape.rows), got ",
           s.rows_inner);
  // 0 means "a single row stride"; an empty batch still gets a usable divisor.
  if (s.rows_inner == 0) s.rows_inner = s.rows > 0 ? s.rows : 1;
  NK_CHECK(s.rows % s.rows_inner == 0, op, ": argument 'shape.rows_inner' (", s.rows_inner,
           ") must divide shape.rows (", s.rows, ")");
  return s;
}

void check_heads(const char* op, std::int64_t heads, const RowShape& s, bool has_param, const char* params) {
  NK_CHECK(heads >= 1, op, ": argument 'heads' must be >= 1, got ", heads);
  NK_CHECK(s.rows % heads == 0, op, ": argument 'heads' (", heads, ") must divide shape.rows (", s.rows,
           "): batch row r uses parameter row r % heads");
  NK_CHECK(heads == 1 || has_param, op, ": argument 'heads' is ", heads, " but no ", params,
           " was given (per-head mode needs a (heads, n) parameter)");
}

// Largest element offset any row touches must be addressable in bytes; a stride
// product that overflows int64 would otherwise wrap into some unrelated address.
void check_addressable(const char* op, const char* name, const Rows& t, const RowShape& s) {
  if (s.rows == 0) return;
  std::int64_t a = 0, b = 0, last = 0, bytes = 0;
  const bool overflow = __builtin_mul_overflow(s.rows / s.rows_inner - 1, t.stride_outer, &a) ||
                        __builtin_mul_overflow(s.rows_inner - 1, t.stride_inner, &b) ||
                        __builtin_add_overflow(a, b, &last) || __builtin_add_overflow(last, s.n - 1, &last) ||
                        __builtin_mul_overflow(last, static_cast<std::int64_t>(dtype_size(t.dtype)), &bytes);
  NK_CHECK(!overflow, op, ": argument '", name, "': stride_outer (", t.stride_outer, ") and stride_inner (",
           t.stride_inner, ") address elements beyond the 64-bit byte range");
}

void check_rows(const char* op, const char* name, const Rows& t, const RowShape& s, bool required) {
  if (!t.present()) {
    NK_CHECK(!required, op, ": argument '", name, "' is required but was not given (null data)");
    return;
  }
  check_dtype(op, name, t.dtype);
  NK_CHECK(t.stride_inner >= 0, op, ": argument '", name, "': stride_inner must be >= 0, got ", t.stride_inner);
  NK_CHECK(t.stride_outer >= 0, op, ": argument '", name, "': stride_outer must be >= 0, got ", t.stride_outer);
  check_addressable(op, name, t, s);
}

// An output whose rows overlap would be written twice, by different threads or
// CTAs, with an undefined result; inputs may overlap (stride 0 broadcasts).
void check_output(const char* op, const char* name, const Rows& t, const RowShape& s, bool required) {
  check_rows(op, name, t, s, required);
  // An empty batch writes nothing, whatever strides a framework gave its empty tensor.
  if (!t.present() || s.rows == 0) return;
  if (s.rows_inner > 1)
    NK_CHECK(t.stride_inner >= s.n, op, ": argument '", name, "': stride_inner (", t.stride_inner, ") must be >= n (",
             s.n, ") when shape.rows_inner (", s.rows_inner, ") > 1, or its rows would overlap");
  if (s.rows > s.rows_inner) {
    const std::int64_t need = (s.rows_inner - 1) * t.stride_inner + s.n;
    NK_CHECK(t.stride_outer >= need, op, ": argument '", name, "': stride_outer (", t.stride_outer,
             ") must be >= (shape.rows_inner - 1) * stride_inner + n = ", need, ", or its rows would overlap");
  }
}

void check_param(const char* op, const char* name, const Param& p) {
  if (p.present()) check_dtype(op, name, p.dtype);
}

void check_weight_offset(const char* op, float offset, bool has_weight) {
  NK_CHECK(std::isfinite(offset), op, ": argument 'weight_offset' must be finite, got ", offset);
  NK_CHECK(offset == 0.f || has_weight, op, ": argument 'weight_offset' is ", offset, " but no weight was given");
}

}  // namespace

void reject_fp64_on_gpu(const RmsNormFwdArgs& a) {
  reject_fp64("rmsnorm_fwd", {{"x", a.x.present(), a.x.dtype},
                              {"residual", a.residual.present(), a.residual.dtype},
                              {"out", a.out.present(), a.out.dtype},
                              {"residual_out", a.residual_out.present(), a.residual_out.dtype},
                              {"weight", a.weight.present(), a.weight.dtype},
                              {"bias", a.bias.present(), a.bias.dtype}});
}

void reject_fp64_on_gpu(const RmsNormBwdArgs& a, const char* op) {
  reject_fp64(op, {{"x", a.x.present(), a.x.dtype},
                   {"dout", a.dout.present(), a.dout.dtype},
                   {"dresidual_out", a.dresidual_out.present(), a.dresidual_out.dtype},
                   {"dx", a.dx.present(), a.dx.dtype},
                   {"dresidual", a.dresidual.present(), a.dresidual.dtype},
                   {"weight", a.weight.present(), a.weight.dtype},
                   {"dbias", a.dbias.present(), a.dbias.dtype}});
}

RmsNormFwdArgs checked(const RmsNormFwdArgs& args) {
  constexpr const char* op = "rmsnorm_fwd";
  RmsNormFwdArgs a = args;
  a.shape = resolve_shape(op, args.shape);
  check_rows(op, "x", a.x, a.shape, true);
  check_rows(op, "residual", a.residual, a.shape, false);
  check_output(op, "out", a.out, a.shape, true);
  check_output(op, "residual_out", a.residual_out, a.shape, false);
  check_param(op, "weight", a.weight);
  check_param(op, "bias", a.bias);
  check_heads(op, a.heads, a.shape, a.weight.present() || a.bias.present(), "weight or bias");
  NK_CHECK(std::isfinite(a.eps) && a.eps >= 0.f, op, ": argument 'eps' must be finite and >= 0, got ", a.eps);
  check_weight_offset(op, a.weight_offset, a.weight.present());
  return a;
}

RmsNormBwdArgs checked(const RmsNormBwdArgs& args) {
  constexpr const char* op = "rmsnorm_bwd";
  RmsNormBwdArgs a = args;
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
  check_weight_offset(op, a.weight_offset, a.weight.present());
  return a;
}

}  // namespace normkit::norm::detail
