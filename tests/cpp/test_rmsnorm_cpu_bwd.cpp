// RMSNorm backward on host data, through the public API with Device::cpu(): the
// CPU fallback against a float64 reference (rmsnorm_test_reference.hpp, which
// also states the tolerances), bitwise determinism across thread counts, and
// argument validation. Every output starts poisoned (0xFF: NaN in all three
// dtypes) inside guard bytes, so an element left unwritten fails the comparison
// and a write outside the rows fails the guard check.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "normkit/norm/rmsnorm.hpp"
#include "rmsnorm_test_fixtures.hpp"
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace rmsref;

// Cases name only the fields that differ from the defaults; GCC's -Wextra would
// flag every field a designated initializer leaves out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

struct BwdCase {
  std::int64_t rows = 5, n = 64, rows_inner = 0, heads = 1;
  DType x = kBF16;
  std::optional<DType> dout, dx, dresidual_out, dresidual, weight, dbias;
  float weight_offset = 0.f;
  std::int64_t in_pad = 0, in_pad_outer = 0, out_pad = 0, out_pad_outer = 0;
  std::uint64_t seed = 2;
  std::string describe() const {
    return describe_layout(*this) + " dout=" + opt_name(dout) + " dx=" + opt_name(dx) +
           " dresidual_out=" + opt_name(dresidual_out) + " dresidual=" + opt_name(dresidual) +
           " weight=" + opt_name(weight) + " dbias=" + opt_name(dbias);
  }
};

struct BwdRun {
  RowShape s;
  Strided x, dout, dresidual_out, dx, dresidual;
  Buf weight, dweight, dbias;
  std::vector<float> rstd;
  float no_rows = 0.f;  // a non-null rstd for an empty batch
  RmsNormBwdArgs args;
  std::vector<Output> outputs() const {
    return {{"dx", &dx.buf}, {"dresidual", &dresidual.buf}, {"dweight", &dweight}, {"dbias", &dbias}};
  }
};

std::unique_ptr<BwdRun> setup_bwd(const BwdCase& c) {
  auto r = new_run<BwdRun>(c);
  const RowShape& s = r->s;
  RmsNormBwdArgs& a = r->args;
  std::mt19937_64 rng(c.seed);
  a.x = input_rows(r->x, c.x, s, rng, c.in_pad, c.in_pad_outer);
  a.dout = input_rows(r->dout, c.dout.value_or(c.x), s, rng, c.in_pad + 2, c.in_pad_outer);
  if (c.dresidual_out)
    a.dresidual_out = input_rows(r->dresidual_out, *c.dresidual_out, s, rng, c.in_pad, c.in_pad_outer);
  a.dx = output_rows(r->dx, c.dx.value_or(c.x), s, c.out_pad, c.out_pad_outer);
  if (c.dresidual) a.dresidual = output_rows(r->dresidual, *c.dresidual, s, c.out_pad + 1, c.out_pad_outer);
  if (c.weight) {
    r->weight = make_weight(*c.weight, c.heads * c.n, rng, c.weight_offset);
    r->dweight = Buf(*c.weight, c.heads * c.n);
    a.weight = {r->weight.data(), *c.weight};
    a.dweight = r->dweight.data();
  }
  if (c.dbias) {
    r->dbias = Buf(*c.dbias, c.heads * c.n);
    a.dbias = {r->dbias.data(), *c.dbias};
  }
  // rstd as forward would have saved it for this x (eps 1e-6), rounded to fp32;
  // the reference uses the same fp32 values.
  for (std::int64_t row = 0; row < c.rows; ++row) {
    double ss = 0;
    for (std::int64_t i = 0; i < c.n; ++i) ss += r->x.at(s, row, i) * r->x.at(s, row, i);
    r->rstd.push_back(static_cast<float>(1.0 / std::sqrt(ss / c.n + 1e-6)));
  }
  a.rstd = r->rstd.empty() ? &r->no_rows : r->rstd.data();
  return r;
}

void check_bwd(const BwdCase& c) {
  SCOPED_TRACE(c.describe());
  auto r = setup_bwd(c);
  const BwdRef ref = reference_bwd(r->s, r->x, r->dout, if_given(c.dresidual_out, r->dresidual_out),
                                   if_given(c.weight, r->weight), r->rstd, c.heads, c.weight_offset);
  ASSERT_NO_THROW(run_bwd(r->args));
  expect_rows_match("dx", r->dx, r->s, ref.dx);
  if (c.dresidual) expect_rows_match("dresidual", r->dresidual, r->s, ref.dx);
  if (c.weight) expect_buf_match("dweight", r->dweight, ref.dw);
  if (c.dbias) expect_buf_match("dbias", r->dbias, ref.db);
}

TEST(RmsNormCpuBwd, DtypeGridOddAndEvenN) { check_dtype_grid<BwdCase>(200, check_bwd); }

TEST(RmsNormCpuBwd, DresidualOutAndDresidualInOtherDtypes) {
  for (DType x : kAllDtypes)
    for (std::int64_t n : {3, 1024, 4097})
      check_bwd({.n = n,
                 .x = x,
                 .dout = x == kF32 ? kBF16 : kF32,
                 .dx = x == kF16 ? kBF16 : kF16,
                 .dresidual_out = kF32,
                 .dresidual = x,
                 .weight = kF32});
}

TEST(RmsNormCpuBwd, DbiasWithAndWithoutWeight) {
  for (DType x : kAllDtypes)
    for (bool with_weight : {true, false})
      check_bwd({.rows = 33,
                 .n = 1023,
                 .x = x,
                 .weight = with_weight ? std::optional<DType>(x) : std::nullopt,
                 .dbias = x == kF32 ? kBF16 : kF32});
}

TEST(RmsNormCpuBwd, WeightOffsetOne) {
  for (DType w : kAllDtypes) check_bwd({.n = 17, .weight = w, .dbias = kF32, .weight_offset = 1.f});
}

TEST(RmsNormCpuBwd, PerHeadDweightAndDbias) {
  for (DType x : kAllDtypes) {
    BwdCase c{.rows = 40, .n = 17, .rows_inner = 4, .heads = 4, .x = x, .weight = x == kF32 ? kBF16 : kF32, .dbias = x};
    check_bwd(c);
    c.weight.reset();  // per-head dbias alone is allowed
    check_bwd(c);
  }
}

TEST(RmsNormCpuBwd, RowStridesAndTwoLevelLayout) {
  for (DType x : kAllDtypes) {
    BwdCase c{.rows = 9,
              .n = 1023,
              .x = x,
              .dresidual_out = x,
              .dresidual = kF32,
              .weight = kBF16,
              .in_pad = 5,
              .out_pad = 3};
    check_bwd(c);
    c.rows = 24;
    c.rows_inner = 6;
    c.n = 64;
    c.in_pad_outer = 2 * 6 * 64;
    c.out_pad_outer = 9;
    c.dbias = kF32;
    check_bwd(c);
  }
}

TEST(RmsNormCpuBwd, ManyRowsDweightWithinSqrtMTolerance) {
  // Enough rows for many fixed row blocks, so that the block partials and their
  // in-order sum are exercised.
  for (DType w : {kBF16, kF32}) check_bwd({.rows = 4096, .n = 96, .heads = 2, .weight = w, .dbias = w});
}

TEST(RmsNormCpuBwd, EmptyInputZeroesParamGradsOnly) {
  // dx has no rows and stays untouched; a sum over no rows is zero.
  for (bool with_weight : {true, false})
    check_bwd({.rows = 0,
               .dresidual_out = kBF16,
               .dresidual = kBF16,
               .weight = with_weight ? std::optional<DType>(kBF16) : std::nullopt,
               .dbias = kF32});
}

TEST(RmsNormCpuBwd, GradientsBitwiseIndependentOfThreadCount) {
  for (std::int64_t heads : {1, 4}) {
    SCOPED_TRACE("heads=" + std::to_string(heads));
    const BwdCase c{.rows = 2000, .n = 257, .heads = heads, .dresidual_out = kBF16, .weight = kF32, .dbias = kBF16};
    expect_bitwise_across_thread_counts(
        [&] { return setup_bwd(c); },
        [](const BwdRun& r) {
          return std::vector<Output>{{"dweight", &r.dweight}, {"dbias", &r.dbias}, {"dx", &r.dx.buf}};
        });
  }
}

// ---------------------------------------------------------------------------
// Validation: each bad argument throws normkit::Error naming it; nothing written.

TEST(RmsNormCpuValidate, BwdBadArgumentsAreNamedAndNothingIsWritten) {
  auto r = setup_bwd({.rows = 4, .n = 8, .dresidual_out = kF32, .dresidual = kF32, .weight = kBF16, .dbias = kF32});
  using A = RmsNormBwdArgs;
  const Rejections<A> cases = {
      {[](A& a) { a.shape.n = 0; }, "rmsnorm_bwd: argument 'shape.n' must be >= 1"},
      {[](A& a) { a.rstd = nullptr; }, "rmsnorm_bwd: argument 'rstd' is required"},
      {[](A& a) { a.dweight = nullptr; }, "argument 'dweight' is required when a weight is given"},
      {[](A& a) { a.weight.data = nullptr; }, "argument 'dweight' was given but no weight was given"},
      {[](A& a) { a.x.data = nullptr; }, "argument 'x' is required"},
      {[](A& a) { a.dout.data = nullptr; }, "argument 'dout' is required"},
      {[](A& a) { a.dx.data = nullptr; }, "argument 'dx' is required"},
      {[](A& a) { a.dresidual.stride_inner = 4; }, "argument 'dresidual': stride_inner (4) must be >= n (8)"},
      {[](A& a) { a.shape.rows_inner = 2, a.dx.stride_outer = 12; }, "argument 'dx': stride_outer (12)"},
      {[](A& a) { a.dout.stride_inner = -1; }, "argument 'dout': stride_inner must be >= 0"},
      {[](A& a) { a.dresidual_out.dtype = static_cast<DType>(5); }, "argument 'dresidual_out': invalid dtype"},
      {[](A& a) { a.dbias.dtype = static_cast<DType>(5); }, "argument 'dbias': invalid dtype"},
      {[](A& a) { a.heads = 3; }, "argument 'heads' (3) must divide shape.rows (4)"},
      {[](A& a) { a.heads = 2, a.weight.data = nullptr, a.dweight = nullptr, a.dbias.data = nullptr; },
       "argument 'heads' is 2 but no weight or dbias was given"},
      {[](A& a) { a.weight_offset = 1.f, a.weight.data = nullptr, a.dweight = nullptr; },
       "rmsnorm_bwd: argument 'weight_offset' is 1 but no weight was given"},
      {[](A& a) { a.weight_offset = INFINITY; }, "argument 'weight_offset' must be finite"},
  };
  expect_each_rejected_before_writing(r, cases);
}

}  // namespace
