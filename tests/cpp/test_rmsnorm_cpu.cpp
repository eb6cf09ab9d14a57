// RMSNorm forward on host data, through the public API with Device::cpu(): the
// CPU fallback against a float64 reference (rmsnorm_test_reference.hpp, which
// also states the tolerances), its determinism, and argument validation.
// Every output starts poisoned (0xFF: NaN in all three dtypes) inside guard
// bytes, so an element left unwritten fails the comparison and a write outside
// the rows fails the guard check.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "normkit/norm/rmsnorm.hpp"
#include "rmsnorm_internal.hpp"
#include "rmsnorm_test_fixtures.hpp"
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace rmsref;

// Cases name only the fields that differ from the defaults; GCC's -Wextra would
// flag every field a designated initializer leaves out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

struct FwdCase {
  std::int64_t rows = 5, n = 64, rows_inner = 0, heads = 1;
  DType x = kBF16;
  std::optional<DType> residual, residual_out, weight, bias, out;
  bool store_rstd = true, broadcast_residual = false;
  float eps = 1e-6f, weight_offset = 0.f;
  std::int64_t in_pad = 0, in_pad_outer = 0, out_pad = 0, out_pad_outer = 0;
  std::uint64_t seed = 1;
  std::string describe() const {
    return describe_layout(*this) + " residual=" + opt_name(residual) + " residual_out=" + opt_name(residual_out) +
           " weight=" + opt_name(weight) + " bias=" + opt_name(bias) + " out=" + opt_name(out);
  }
};

struct FwdRun {
  RowShape s;
  Strided x, residual, out, residual_out;
  Buf weight, bias, rstd;
  RmsNormFwdArgs args;
  std::vector<Output> outputs() const {
    return {{"out", &out.buf}, {"residual_out", &residual_out.buf}, {"rstd", &rstd}};
  }
};

std::unique_ptr<FwdRun> setup_fwd(const FwdCase& c) {
  auto r = new_run<FwdRun>(c);
  const RowShape& s = r->s;
  RmsNormFwdArgs& a = r->args;
  std::mt19937_64 rng(c.seed);
  a.x = input_rows(r->x, c.x, s, rng, c.in_pad, c.in_pad_outer);
  if (c.residual)
    a.residual = input_rows(r->residual, *c.residual, s, rng, c.in_pad + 1, c.in_pad_outer, c.broadcast_residual);
  a.out = output_rows(r->out, c.out.value_or(c.x), s, c.out_pad, c.out_pad_outer);
  if (c.residual_out) a.residual_out = output_rows(r->residual_out, *c.residual_out, s, c.out_pad, c.out_pad_outer);
  if (c.weight) r->weight = make_weight(*c.weight, c.heads * c.n, rng, c.weight_offset);
  if (c.bias) r->bias = make_param(*c.bias, c.heads * c.n, rng, 0.0, 0.5);
  a.weight = {c.weight ? r->weight.data() : nullptr, c.weight.value_or(kF32)};
  a.bias = {c.bias ? r->bias.data() : nullptr, c.bias.value_or(kF32)};
  r->rstd = Buf(kF32, c.rows);
  a.rstd = c.store_rstd ? static_cast<float*>(r->rstd.data()) : nullptr;
  a.eps = c.eps;
  return r;
}

void check_fwd(const FwdCase& c) {
  SCOPED_TRACE(c.describe());
  auto r = setup_fwd(c);
  const FwdRef ref = reference_fwd(r->s, r->x, if_given(c.residual, r->residual), if_given(c.weight, r->weight),
                                   if_given(c.bias, r->bias), c.heads, c.eps, c.weight_offset);
  const std::vector<unsigned char> x_before = r->x.buf.bytes();
  ASSERT_NO_THROW(run_fwd(r->args));
  expect_rows_match("out", r->out, r->s, ref.out);
  if (c.residual_out) expect_rows_match("residual_out", r->residual_out, r->s, ref.h);
  if (c.store_rstd)
    expect_buf_match("rstd", r->rstd, Values{ref.rstd, std::vector<double>(ref.rstd.size(), 0.0)});
  else
    EXPECT_TRUE(r->rstd.untouched());
  EXPECT_EQ(r->x.buf.bytes(), x_before) << "x was modified";
}

TEST(RmsNormCpuFwd, DtypeGridOddAndEvenN) { check_dtype_grid<FwdCase>(100, check_fwd); }

TEST(RmsNormCpuFwd, ResidualWithResidualOutInAnotherDtype) {
  for (DType x : kAllDtypes)
    for (std::int64_t n : {3, 1024, 4097})
      check_fwd({.n = n,
                 .x = x,
                 .residual = x == kF32 ? kBF16 : kF32,
                 .residual_out = x == kF16 ? kBF16 : (x == kF32 ? kF16 : kF32),
                 .weight = kF32});
}

TEST(RmsNormCpuFwd, ResidualOutWithoutResidualStoresX) {
  for (DType ro : kAllDtypes) check_fwd({.n = 17, .x = kBF16, .residual_out = ro, .weight = kBF16});
}

TEST(RmsNormCpuFwd, BiasWithAndWithoutWeight) {
  for (DType x : kAllDtypes)
    for (bool with_weight : {true, false})
      check_fwd({.n = 1023,
                 .x = x,
                 .weight = with_weight ? std::optional<DType>(x) : std::nullopt,
                 .bias = x == kF32 ? kBF16 : kF32});
}

TEST(RmsNormCpuFwd, OutDtypeDiffersFromX) {
  for (DType x : kAllDtypes)
    for (DType o : kAllDtypes)
      if (o != x) check_fwd({.n = 17, .x = x, .weight = kF32, .out = o});
}

TEST(RmsNormCpuFwd, WeightOffsetOneAndZeroEps) {
  for (DType w : kAllDtypes) {
    FwdCase c{.n = 1023, .weight = w, .weight_offset = 1.f};
    check_fwd(c);
    c.eps = 0.f;
    c.residual = kBF16;
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, RstdNotRequestedIsNotWritten) { check_fwd({.weight = kF32, .store_rstd = false}); }

TEST(RmsNormCpuFwd, PerHeadWeightAndBias) {
  for (DType x : kAllDtypes) {
    // (T, H, D) with H == heads, the usual per-head layout
    FwdCase c{.rows = 12, .n = 17, .rows_inner = 4, .heads = 4, .x = x, .weight = kF32, .bias = x};
    check_fwd(c);
    c.weight.reset();  // per-head bias alone is allowed
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, RowStrides) {
  for (DType x : kAllDtypes)
    check_fwd({.rows = 9,
               .n = 1023,
               .x = x,
               .residual = x,
               .residual_out = kF32,
               .weight = kBF16,
               .in_pad = 5,
               .out_pad = 3});
}

TEST(RmsNormCpuFwd, TwoLevelLayout) {
  // q = qkv[..., :H, :]: rows_inner = H, stride_outer != H * stride_inner.
  for (DType x : kAllDtypes)
    check_fwd({.rows = 24,
               .n = 64,
               .rows_inner = 6,
               .x = x,
               .residual = kF32,
               .residual_out = x,
               .weight = kF32,
               .bias = kBF16,
               .in_pad_outer = 2 * 6 * 64,  // k and v after q in each token
               .out_pad = 1,
               .out_pad_outer = 7});
}

TEST(RmsNormCpuFwd, BroadcastResidualStrideZero) {
  check_fwd({.residual = kF32, .residual_out = kF32, .weight = kBF16, .broadcast_residual = true});
}

TEST(RmsNormCpuFwd, EmptyInputWritesNothing) {
  // the guards of every (empty) output stay poisoned
  check_fwd({.rows = 0, .residual = kBF16, .residual_out = kBF16, .weight = kF32, .bias = kF32});
}

TEST(RmsNormCpuFwd, InPlaceOutputsMayAliasInputs) {
  const FwdCase c{.rows = 6, .n = 1023, .residual = kBF16, .weight = kF32};
  auto r = setup_fwd(c);
  const FwdRef ref = reference_fwd(r->s, r->x, &r->residual, &r->weight, nullptr, 1, c.eps, 0.0);
  RmsNormFwdArgs a = r->args;
  a.out = a.x;                  // normalized output over x
  a.residual_out = a.residual;  // fused add updates the residual stream
  ASSERT_NO_THROW(run_fwd(a));
  EXPECT_TRUE(close_rows("out (in x)", r->x, r->s, ref.out));
  EXPECT_TRUE(close_rows("residual_out (in residual)", r->residual, r->s, ref.h));
}

TEST(RmsNormCpuFwd, ResultsIndependentOfThreadCount) {
  const FwdCase c{.rows = 1500, .n = 257, .residual = kBF16, .residual_out = kF32, .weight = kF32};
  const auto out_only = [](const FwdRun& r) { return std::vector<Output>{{"out", &r.out.buf}}; };
  expect_bitwise_across_thread_counts([&] { return setup_fwd(c); }, out_only);
}

// ---------------------------------------------------------------------------
// Validation: each bad argument throws normkit::Error naming it; nothing written.

TEST(RmsNormCpuValidate, FwdBadArgumentsAreNamedAndNothingIsWritten) {
  auto r =
      setup_fwd({.rows = 4, .n = 8, .x = kF32, .residual = kF32, .residual_out = kBF16, .weight = kBF16, .bias = kF32});
  using A = RmsNormFwdArgs;
  const Rejections<A> cases = {
      {[](A& a) { a.shape.n = 0; }, "rmsnorm_fwd: argument 'shape.n' must be >= 1, got 0"},
      {[](A& a) { a.shape.rows = -1; }, "argument 'shape.rows' must be >= 0"},
      {[](A& a) { a.shape.rows_inner = 3; }, "argument 'shape.rows_inner' (3) must divide shape.rows (4)"},
      {[](A& a) { a.shape.rows_inner = -2; }, "argument 'shape.rows_inner' must be >= 0"},
      {[](A& a) { a.x.data = nullptr; }, "argument 'x' is required"},
      {[](A& a) { a.out.data = nullptr; }, "argument 'out' is required"},
      {[](A& a) { a.shape.rows_inner = 2, a.out.stride_inner = 5; },
       "rmsnorm_fwd: argument 'out': stride_inner (5) must be >= n (8)"},
      {[](A& a) { a.shape.rows_inner = 2, a.out.stride_inner = 8, a.out.stride_outer = 10; },
       "argument 'out': stride_outer (10) must be >= (shape.rows_inner - 1) * stride_inner + n = 16"},
      {[](A& a) { a.residual_out.stride_inner = 0; }, "argument 'residual_out': stride_inner (0) must be >= n (8)"},
      {[](A& a) { a.x.stride_inner = -8; }, "argument 'x': stride_inner must be >= 0"},
      {[](A& a) { a.residual.stride_outer = -1; }, "argument 'residual': stride_outer must be >= 0"},
      {[](A& a) { a.x.stride_inner = std::int64_t{1} << 62; }, "argument 'x': stride_outer"},
      {[](A& a) { a.x.dtype = static_cast<DType>(7); }, "argument 'x': invalid dtype"},
      {[](A& a) { a.out.dtype = static_cast<DType>(9); }, "argument 'out': invalid dtype"},
      {[](A& a) { a.weight.dtype = static_cast<DType>(4); }, "argument 'weight': invalid dtype"},
      {[](A& a) { a.heads = 0; }, "argument 'heads' must be >= 1"},
      {[](A& a) { a.heads = 3; }, "argument 'heads' (3) must divide shape.rows (4)"},
      {[](A& a) { a.heads = 2, a.weight.data = nullptr, a.bias.data = nullptr; },
       "argument 'heads' is 2 but no weight or bias was given"},
      {[](A& a) { a.weight_offset = 1.f, a.weight.data = nullptr; },
       "rmsnorm_fwd: argument 'weight_offset' is 1 but no weight was given"},
      {[](A& a) { a.weight_offset = NAN; }, "argument 'weight_offset' must be finite"},
      {[](A& a) { a.eps = -1.f; }, "argument 'eps' must be finite and >= 0"},
      {[](A& a) { a.eps = INFINITY; }, "argument 'eps' must be finite and >= 0"},
  };
  expect_each_rejected_before_writing(r, cases);
}

TEST(RmsNormCpuValidate, DefaultsResolvedByChecked) {
  RmsNormFwdArgs a;
  float x = 1.f, out = 0.f;
  a.shape = {1, 1, 0};
  a.x = {&x, kF32, 0, 0};
  a.out = {&out, kF32, 0, 0};
  EXPECT_EQ(detail::checked(a).shape.rows_inner, 1);
  a.shape = {0, 4, 0};  // empty batch: still a usable divisor
  EXPECT_EQ(detail::checked(a).shape.rows_inner, 1);
}

}  // namespace
