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
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace rmsref;

namespace {

struct BwdCase {
  std::int64_t rows = 5, n = 64, rows_inner = 0, heads = 1;
  DType x = kBF16;
  std::optional<DType> dout, dx, dresidual_out, dresidual, weight, dbias;
  float weight_offset = 0.f;
  std::int64_t in_pad = 0, in_pad_outer = 0, out_pad = 0, out_pad_outer = 0;
  std::uint64_t seed = 2;
  std::string describe() const {
    return "rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " rows_inner=" + std::to_string(rows_inner) +
           " heads=" + std::to_string(heads) + " x=" + dtype_name(x) + " dout=" + opt_name(dout) +
           " dx=" + opt_name(dx) + " dresidual_out=" + opt_name(dresidual_out) + " dresidual=" + opt_name(dresidual) +
           " weight=" + opt_name(weight) + " dbias=" + opt_name(dbias) + " offset=" + std::to_string(weight_offset);
  }
};

struct BwdRun {
  BwdCase c;
  RowShape s;
  Strided x, dout, dresidual_out, dx, dresidual;
  Buf weight, dweight, dbias;
  std::vector<float> rstd;
  float no_rows = 0.f;  // a non-null rstd for an empty batch
  RmsNormBwdArgs args;
};

std::unique_ptr<BwdRun> setup_bwd(const BwdCase& c) {
  auto r = std::make_unique<BwdRun>();
  r->c = c;
  r->s = resolved(c.rows, c.n, c.rows_inner);
  std::mt19937_64 rng(c.seed);
  RmsNormBwdArgs& a = r->args;
  a.shape = {c.rows, c.n, c.rows_inner};
  r->x = make_strided(c.x, r->s, c.in_pad, c.in_pad_outer);
  fill_rows(r->x, r->s, rng);
  r->dout = make_strided(c.dout.value_or(c.x), r->s, c.in_pad + 2, c.in_pad_outer);
  fill_rows(r->dout, r->s, rng);
  a.x = r->x.rows();
  a.dout = r->dout.rows();
  if (c.dresidual_out) {
    r->dresidual_out = make_strided(*c.dresidual_out, r->s, c.in_pad, c.in_pad_outer);
    fill_rows(r->dresidual_out, r->s, rng);
    a.dresidual_out = r->dresidual_out.rows();
  }
  r->dx = make_strided(c.dx.value_or(c.x), r->s, c.out_pad, c.out_pad_outer);
  a.dx = r->dx.rows();
  if (c.dresidual) {
    r->dresidual = make_strided(*c.dresidual, r->s, c.out_pad + 1, c.out_pad_outer);
    a.dresidual = r->dresidual.rows();
  }
  if (c.weight) {
    r->weight = make_param(*c.weight, c.heads * c.n, rng, 1.0 - c.weight_offset, 0.5);
    r->dweight = Buf(*c.weight, c.heads * c.n);
    a.weight = {r->weight.data(), *c.weight};
    a.dweight = r->dweight.data();
  }
  if (c.dbias) {
    r->dbias = Buf(*c.dbias, c.heads * c.n);
    a.dbias = {r->dbias.data(), *c.dbias};
  }
  a.heads = c.heads;
  a.weight_offset = c.weight_offset;
  // rstd as forward would have saved it for this x (eps 1e-6), rounded to fp32;
  // the reference uses the same fp32 values.
  for (std::int64_t row = 0; row < c.rows; ++row) {
    double ss = 0;
    for (std::int64_t i = 0; i < c.n; ++i) ss += r->x.at(r->s, row, i) * r->x.at(r->s, row, i);
    r->rstd.push_back(static_cast<float>(1.0 / std::sqrt(ss / c.n + 1e-6)));
  }
  a.rstd = r->rstd.empty() ? &r->no_rows : r->rstd.data();
  return r;
}

void check_bwd(const BwdCase& c) {
  SCOPED_TRACE(c.describe());
  auto r = setup_bwd(c);
  const BwdRef ref = reference_bwd(r->s, r->x, r->dout, c.dresidual_out ? &r->dresidual_out : nullptr,
                                   c.weight ? &r->weight : nullptr, r->rstd, c.heads, c.weight_offset);
  ASSERT_NO_THROW(run_bwd(r->args));
  EXPECT_TRUE(close_rows("dx", r->dx, r->s, ref.dx));
  EXPECT_TRUE(r->dx.buf.untouched_except(r->dx.row_mask(r->s)));
  if (c.dresidual) {
    EXPECT_TRUE(close_rows("dresidual", r->dresidual, r->s, ref.dx));
    EXPECT_TRUE(r->dresidual.buf.untouched_except(r->dresidual.row_mask(r->s)));
  }
  const std::vector<bool> all(static_cast<std::size_t>(c.heads * c.n), true);
  if (c.weight) {
    EXPECT_TRUE(close_buf("dweight", r->dweight, ref.dw));
    EXPECT_TRUE(r->dweight.untouched_except(all));
  }
  if (c.dbias) {
    EXPECT_TRUE(close_buf("dbias", r->dbias, ref.db));
    EXPECT_TRUE(r->dbias.untouched_except(all));
  }
}

TEST(RmsNormCpuBwd, DtypeGridOddAndEvenN) {
  for (DType x : {kF16, kBF16, kF32})
    for (int w = 0; w < 3; ++w)
      for (std::int64_t n : kNs) {
        BwdCase c;
        c.x = x;
        c.n = n;
        c.rows = n > 1024 ? 3 : 7;
        c.weight = w == 0 ? std::optional<DType>(x) : w == 1 ? std::optional<DType>(kF32) : std::nullopt;
        c.seed = 200 + n + 7 * w + 31 * static_cast<int>(x);
        check_bwd(c);
      }
}

TEST(RmsNormCpuBwd, DresidualOutAndDresidualInOtherDtypes) {
  for (DType x : {kF16, kBF16, kF32})
    for (std::int64_t n : {3, 1024, 4097}) {
      BwdCase c;
      c.x = x;
      c.n = n;
      c.dout = x == kF32 ? kBF16 : kF32;
      c.dx = x == kF16 ? kBF16 : kF16;
      c.dresidual_out = kF32;
      c.dresidual = x;
      c.weight = kF32;
      check_bwd(c);
    }
}

TEST(RmsNormCpuBwd, DbiasWithAndWithoutWeight) {
  for (DType x : {kF16, kBF16, kF32})
    for (bool with_weight : {true, false}) {
      BwdCase c;
      c.x = x;
      c.n = 1023;
      c.rows = 33;
      c.dbias = x == kF32 ? kBF16 : kF32;
      if (with_weight) c.weight = x;
      check_bwd(c);
    }
}

TEST(RmsNormCpuBwd, WeightOffsetOne) {
  for (DType w : {kF16, kBF16, kF32}) {
    BwdCase c;
    c.weight = w;
    c.weight_offset = 1.f;
    c.dbias = kF32;
    c.n = 17;
    check_bwd(c);
  }
}

TEST(RmsNormCpuBwd, PerHeadDweightAndDbias) {
  for (DType x : {kF16, kBF16, kF32}) {
    BwdCase c;
    c.x = x;
    c.rows = 40;
    c.rows_inner = 4;
    c.n = 17;
    c.heads = 4;
    c.weight = x == kF32 ? kBF16 : kF32;
    c.dbias = x;
    check_bwd(c);
    c.weight.reset();  // per-head dbias alone is allowed
    check_bwd(c);
  }
}

TEST(RmsNormCpuBwd, RowStridesAndTwoLevelLayout) {
  for (DType x : {kF16, kBF16, kF32}) {
    BwdCase c;
    c.x = x;
    c.rows = 9;
    c.n = 1023;
    c.in_pad = 5;
    c.out_pad = 3;
    c.dresidual_out = x;
    c.dresidual = kF32;
    c.weight = kBF16;
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
  for (DType w : {kBF16, kF32}) {
    BwdCase c;
    c.rows = 4096;
    c.n = 96;
    c.weight = w;
    c.dbias = w;
    c.heads = 2;
    check_bwd(c);
  }
}

TEST(RmsNormCpuBwd, EmptyInputZeroesParamGradsOnly) {
  // dx has no rows and stays untouched; a sum over no rows is zero.
  for (bool with_weight : {true, false}) {
    BwdCase c;
    c.rows = 0;
    c.dresidual_out = kBF16;
    c.dresidual = kBF16;
    c.dbias = kF32;
    if (with_weight) c.weight = kBF16;
    check_bwd(c);
  }
}

TEST(RmsNormCpuBwd, GradientsBitwiseIndependentOfThreadCount) {
  for (std::int64_t heads : {1, 4}) {
    BwdCase c;
    c.rows = 2000;
    c.n = 257;
    c.heads = heads;
    c.weight = kF32;
    c.dbias = kBF16;
    c.dresidual_out = kBF16;
    std::vector<unsigned char> dx, dw, db;
    for (int threads : {1, 2, 3, 7, 16, 0}) {
      SCOPED_TRACE("heads=" + std::to_string(heads) + " threads=" + std::to_string(threads));
      ForceThreads force(threads);
      auto r = setup_bwd(c);
      ASSERT_NO_THROW(run_bwd(r->args));
      if (threads == 1) {
        dx = r->dx.buf.bytes(), dw = r->dweight.bytes(), db = r->dbias.bytes();
        continue;
      }
      EXPECT_EQ(r->dweight.bytes(), dw);
      EXPECT_EQ(r->dbias.bytes(), db);
      EXPECT_EQ(r->dx.buf.bytes(), dx);
    }
  }
}

// ---------------------------------------------------------------------------
// Validation: each bad argument throws normkit::Error naming it; nothing written.

TEST(RmsNormCpuValidate, BwdBadArgumentsAreNamedAndNothingIsWritten) {
  BwdCase c;
  c.rows = 4;
  c.n = 8;
  c.dresidual_out = kF32;
  c.dresidual = kF32;
  c.weight = kBF16;
  c.dbias = kF32;
  auto r = setup_bwd(c);
  using A = RmsNormBwdArgs;
  const std::vector<std::pair<std::function<void(A&)>, std::string>> cases = {
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
  for (const auto& [mutate, needle] : cases) {
    expect_rejected(r, mutate, needle);
    EXPECT_TRUE(r->dx.buf.untouched());
    EXPECT_TRUE(r->dresidual.buf.untouched());
    EXPECT_TRUE(r->dweight.untouched());
    EXPECT_TRUE(r->dbias.untouched());
  }
}

}  // namespace
