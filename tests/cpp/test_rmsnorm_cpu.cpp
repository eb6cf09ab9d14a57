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
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace rmsref;

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
    return "rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " rows_inner=" + std::to_string(rows_inner) +
           " heads=" + std::to_string(heads) + " x=" + dtype_name(x) + " residual=" + opt_name(residual) +
           " residual_out=" + opt_name(residual_out) + " weight=" + opt_name(weight) + " bias=" + opt_name(bias) +
           " out=" + opt_name(out) + " offset=" + std::to_string(weight_offset) + " pads=" + std::to_string(in_pad) +
           "/" + std::to_string(in_pad_outer) + "/" + std::to_string(out_pad) + "/" + std::to_string(out_pad_outer);
  }
};

struct FwdRun {
  FwdCase c;
  RowShape s;
  Strided x, residual, out, residual_out;
  Buf weight, bias, rstd;
  RmsNormFwdArgs args;
};

// Not movable once args point into it: callers hold it by unique_ptr.
std::unique_ptr<FwdRun> setup_fwd(const FwdCase& c) {
  auto r = std::make_unique<FwdRun>();
  r->c = c;
  r->s = resolved(c.rows, c.n, c.rows_inner);
  std::mt19937_64 rng(c.seed);
  r->x = make_strided(c.x, r->s, c.in_pad, c.in_pad_outer);
  fill_rows(r->x, r->s, rng);
  RmsNormFwdArgs& a = r->args;
  a.shape = {c.rows, c.n, c.rows_inner};
  a.x = r->x.rows();
  if (c.residual) {
    r->residual = make_strided(*c.residual, r->s, c.in_pad + 1, c.in_pad_outer, c.broadcast_residual);
    fill_rows(r->residual, c.broadcast_residual ? RowShape{1, c.n, 1} : r->s, rng);
    a.residual = r->residual.rows();
  }
  r->out = make_strided(c.out.value_or(c.x), r->s, c.out_pad, c.out_pad_outer);
  a.out = r->out.rows();
  if (c.residual_out) {
    r->residual_out = make_strided(*c.residual_out, r->s, c.out_pad, c.out_pad_outer);
    a.residual_out = r->residual_out.rows();
  }
  // Gemma-style weights are stored as (w - 1): centre them on 0 when offset by 1.
  if (c.weight) r->weight = make_param(*c.weight, c.heads * c.n, rng, 1.0 - c.weight_offset, 0.5);
  if (c.bias) r->bias = make_param(*c.bias, c.heads * c.n, rng, 0.0, 0.5);
  a.weight = {c.weight ? r->weight.data() : nullptr, c.weight.value_or(kF32)};
  a.bias = {c.bias ? r->bias.data() : nullptr, c.bias.value_or(kF32)};
  a.heads = c.heads;
  r->rstd = Buf(kF32, c.rows);
  a.rstd = c.store_rstd ? static_cast<float*>(r->rstd.data()) : nullptr;
  a.eps = c.eps;
  a.weight_offset = c.weight_offset;
  return r;
}

void check_fwd(const FwdCase& c) {
  SCOPED_TRACE(c.describe());
  auto r = setup_fwd(c);
  const FwdRef ref = reference_fwd(r->s, r->x, c.residual ? &r->residual : nullptr, c.weight ? &r->weight : nullptr,
                                   c.bias ? &r->bias : nullptr, c.heads, c.eps, c.weight_offset);
  const std::vector<unsigned char> x_before = r->x.buf.bytes();
  ASSERT_NO_THROW(run_fwd(r->args));
  EXPECT_TRUE(close_rows("out", r->out, r->s, ref.out));
  EXPECT_TRUE(r->out.buf.untouched_except(r->out.row_mask(r->s)));
  if (c.residual_out) {
    EXPECT_TRUE(close_rows("residual_out", r->residual_out, r->s, ref.h));
    EXPECT_TRUE(r->residual_out.buf.untouched_except(r->residual_out.row_mask(r->s)));
  }
  if (c.store_rstd) {
    Values rv{ref.rstd, std::vector<double>(ref.rstd.size(), 0.0)};
    EXPECT_TRUE(close_buf("rstd", r->rstd, rv));
    EXPECT_TRUE(r->rstd.untouched_except(std::vector<bool>(c.rows, true)));
  } else {
    EXPECT_TRUE(r->rstd.untouched());
  }
  EXPECT_EQ(r->x.buf.bytes(), x_before) << "x was modified";
}

TEST(RmsNormCpuFwd, DtypeGridOddAndEvenN) {
  for (DType x : {kF16, kBF16, kF32})
    for (int w = 0; w < 3; ++w)
      for (std::int64_t n : kNs) {
        FwdCase c;
        c.x = x;
        c.n = n;
        c.rows = n > 1024 ? 3 : 7;
        c.weight = w == 0 ? std::optional<DType>(x) : w == 1 ? std::optional<DType>(kF32) : std::nullopt;
        c.seed = 100 + n + 7 * w + 31 * static_cast<int>(x);
        check_fwd(c);
      }
}

TEST(RmsNormCpuFwd, ResidualWithResidualOutInAnotherDtype) {
  for (DType x : {kF16, kBF16, kF32})
    for (std::int64_t n : {3, 1024, 4097}) {
      FwdCase c;
      c.x = x;
      c.n = n;
      c.residual = x == kF32 ? kBF16 : kF32;
      c.residual_out = x == kF16 ? kBF16 : kF32 == x ? kF16 : kF32;
      c.weight = kF32;
      check_fwd(c);
    }
}

TEST(RmsNormCpuFwd, ResidualOutWithoutResidualStoresX) {
  for (DType ro : {kF16, kBF16, kF32}) {
    FwdCase c;
    c.x = kBF16;
    c.residual_out = ro;
    c.weight = kBF16;
    c.n = 17;
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, BiasWithAndWithoutWeight) {
  for (DType x : {kF16, kBF16, kF32})
    for (bool with_weight : {true, false}) {
      FwdCase c;
      c.x = x;
      c.n = 1023;
      c.bias = x == kF32 ? kBF16 : kF32;
      if (with_weight) c.weight = x;
      check_fwd(c);
    }
}

TEST(RmsNormCpuFwd, OutDtypeDiffersFromX) {
  for (DType x : {kF16, kBF16, kF32})
    for (DType o : {kF16, kBF16, kF32}) {
      if (o == x) continue;
      FwdCase c;
      c.x = x;
      c.out = o;
      c.weight = kF32;
      c.n = 17;
      check_fwd(c);
    }
}

TEST(RmsNormCpuFwd, WeightOffsetOneAndZeroEps) {
  for (DType w : {kF16, kBF16, kF32}) {
    FwdCase c;
    c.weight = w;
    c.weight_offset = 1.f;
    c.n = 1023;
    check_fwd(c);
    c.eps = 0.f;
    c.residual = kBF16;
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, RstdNotRequestedIsNotWritten) {
  FwdCase c;
  c.store_rstd = false;
  c.weight = kF32;
  check_fwd(c);
}

TEST(RmsNormCpuFwd, PerHeadWeightAndBias) {
  for (DType x : {kF16, kBF16, kF32}) {
    FwdCase c;
    c.x = x;
    c.rows = 12;
    c.n = 17;
    c.heads = 4;
    c.rows_inner = 4;  // (T, H, D) with H == heads, the usual per-head layout
    c.weight = kF32;
    c.bias = x;
    check_fwd(c);
    c.weight.reset();  // per-head bias alone is allowed
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, RowStrides) {
  for (DType x : {kF16, kBF16, kF32}) {
    FwdCase c;
    c.x = x;
    c.rows = 9;
    c.n = 1023;
    c.in_pad = 5;
    c.out_pad = 3;
    c.residual = x;
    c.residual_out = kF32;
    c.weight = kBF16;
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, TwoLevelLayout) {
  // q = qkv[..., :H, :]: rows_inner = H, stride_outer != H * stride_inner.
  for (DType x : {kF16, kBF16, kF32}) {
    FwdCase c;
    c.x = x;
    c.rows = 24;
    c.rows_inner = 6;
    c.n = 64;
    c.in_pad_outer = 2 * 6 * 64;  // k and v after q in each token
    c.out_pad = 1;
    c.out_pad_outer = 7;
    c.residual = kF32;
    c.residual_out = x;
    c.weight = kF32;
    c.bias = kBF16;
    check_fwd(c);
  }
}

TEST(RmsNormCpuFwd, BroadcastResidualStrideZero) {
  FwdCase c;
  c.residual = kF32;
  c.broadcast_residual = true;
  c.residual_out = kF32;
  c.weight = kBF16;
  check_fwd(c);
}

TEST(RmsNormCpuFwd, EmptyInputWritesNothing) {
  FwdCase c;
  c.rows = 0;
  c.residual = kBF16;
  c.residual_out = kBF16;
  c.weight = kF32;
  c.bias = kF32;
  check_fwd(c);  // the guards of every (empty) output stay poisoned
}

TEST(RmsNormCpuFwd, InPlaceOutputsMayAliasInputs) {
  FwdCase c;
  c.rows = 6;
  c.n = 1023;
  c.residual = kBF16;
  c.weight = kF32;
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
  FwdCase c;
  c.rows = 1500;
  c.n = 257;
  c.residual = kBF16;
  c.residual_out = kF32;
  c.weight = kF32;
  std::vector<unsigned char> first;
  for (int threads : {1, 2, 3, 7, 16, 0}) {
    ForceThreads force(threads);
    auto r = setup_fwd(c);
    ASSERT_NO_THROW(run_fwd(r->args));
    if (first.empty())
      first = r->out.buf.bytes();
    else
      EXPECT_EQ(r->out.buf.bytes(), first) << "threads=" << threads;
  }
}

// ---------------------------------------------------------------------------
// Validation: each bad argument throws normkit::Error naming it; nothing written.

TEST(RmsNormCpuValidate, FwdBadArgumentsAreNamedAndNothingIsWritten) {
  FwdCase c;
  c.rows = 4;
  c.n = 8;
  c.x = kF32;
  c.residual = kF32;
  c.residual_out = kBF16;
  c.weight = kBF16;
  c.bias = kF32;
  auto r = setup_fwd(c);
  using A = RmsNormFwdArgs;
  const std::vector<std::pair<std::function<void(A&)>, std::string>> cases = {
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
  for (const auto& [mutate, needle] : cases) {
    expect_rejected(r, mutate, needle);
    EXPECT_TRUE(r->out.buf.untouched());
    EXPECT_TRUE(r->residual_out.buf.untouched());
    EXPECT_TRUE(r->rstd.untouched());
  }
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
