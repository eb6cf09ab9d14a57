// Argument checks shared by every norm operator (declared in norm_validate.hpp).
// Every check runs before any backend is called, so a rejected call writes
// nothing.
#include "norm_validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "normkit/runtime/error.hpp"

namespace normkit::norm::detail {
namespace {

// fp64 is valid here: this validation is shared by every path, and the CPU
// fallback takes it. The GPU path rejects it separately (reject_fp64).
bool valid_dtype(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

void check_dtype(const char* op, const char* name, DType t) {
  NK_CHECK(valid_dtype(t), op, ": argument '", name, "': invalid dtype value ", static_cast<int>(t),
           " (expected fp16, bf16, fp32 or fp64)");
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

}  // namespace

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

void check_eps(const char* op, float eps) {
  NK_CHECK(std::isfinite(eps) && eps >= 0.f, op, ": argument 'eps' must be finite and >= 0, got ", eps);
}

void check_weight_offset(const char* op, float offset, bool has_weight) {
  NK_CHECK(std::isfinite(offset), op, ": argument 'weight_offset' must be finite, got ", offset);
  NK_CHECK(offset == 0.f || has_weight, op, ": argument 'weight_offset' is ", offset, " but no weight was given");
}

// ---------------------------------------------------------------------------
// Overlap between tensors a call writes: exact, row by row, so that views that
// interleave (x = buf[:, 0], residual = buf[:, 1]) are accepted.

namespace {

using Span = std::pair<std::uintptr_t, std::uintptr_t>;  // bytes [first, second)

Span span_of(const void* data, std::int64_t first_elem, std::int64_t count, DType t) {
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const auto size = static_cast<std::uintptr_t>(dtype_size(t));
  return {base + static_cast<std::uintptr_t>(first_elem) * size,
          base + static_cast<std::uintptr_t>(first_elem + count) * size};
}

std::int64_t row_start(const Rows& t, const RowShape& s, std::int64_t r) {
  return (r / s.rows_inner) * t.stride_outer + (r % s.rows_inner) * t.stride_inner;
}

// The byte spans of every row of `t`, sorted.
std::vector<Span> row_spans(const Rows& t, const RowShape& s) {
  std::vector<Span> spans;
  spans.reserve(static_cast<std::size_t>(s.rows));
  for (std::int64_t r = 0; r < s.rows; ++r) spans.push_back(span_of(t.data, row_start(t, s, r), s.n, t.dtype));
  std::sort(spans.begin(), spans.end());
  return spans;
}

// With strides >= 0 (checked first) row 0 starts lowest and row rows-1 ends
// highest: the hull of all rows in O(1), so tensors far apart cost no row walk.
Span hull(const Rows& t, const RowShape& s) {
  return {span_of(t.data, 0, 0, t.dtype).first, span_of(t.data, row_start(t, s, s.rows - 1), s.n, t.dtype).second};
}

bool intersect(const Span& a, const Span& b) { return a.first < b.second && b.first < a.second; }

// Whether any span of `a` meets any span of `b` (both sorted by start).
bool spans_meet(const std::vector<Span>& a, const std::vector<Span>& b) {
  std::size_t j = 0;
  for (const Span& sa : a) {
    // A span of b that ends before sa starts ends before every later span of a
    // starts too (a is sorted by start): skip it for good.
    while (j < b.size() && b[j].second <= sa.first) ++j;
    for (std::size_t k = j; k < b.size() && b[k].first < sa.second; ++k)
      if (intersect(sa, b[k])) return true;
  }
  return false;
}

}  // namespace

bool rows_overlap(const Rows& a, const Rows& b, const RowShape& s) {
  if (!a.present() || !b.present() || s.rows == 0 || !intersect(hull(a, s), hull(b, s))) return false;
  return spans_meet(row_spans(a, s), row_spans(b, s));
}

bool rows_overlap_param(const Rows& a, const Param& p, std::int64_t count, const RowShape& s) {
  if (!a.present() || !p.present() || s.rows == 0) return false;
  const Span param = span_of(p.data, 0, count, p.dtype);
  if (!intersect(hull(a, s), param)) return false;
  return spans_meet(row_spans(a, s), {param});
}

}  // namespace normkit::norm::detail
