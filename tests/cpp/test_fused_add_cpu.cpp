// fused_add_rmsnorm / fused_add_layernorm on host data: residual <- x + residual
// and x <- norm(residual), in place, against the float64 reference; and the
// aliasing rules: x and residual may not share memory with each other or with
// weight/bias (rejected, naming them, before anything is written), while rows
// that interleave without sharing a byte are fine.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normkit/norm/layernorm.hpp"
#include "rmsnorm_test_fixtures.hpp"
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace rmsref;

namespace {

struct FusedRun {
  RowShape s;
  Strided x, residual;
  Buf weight, bias;
  FusedAddNormArgs args;
};

// x and residual padded differently, so that their row strides differ.
std::unique_ptr<FusedRun> setup(DType x, DType residual, std::optional<DType> weight, std::optional<DType> bias,
                           std::int64_t rows, std::int64_t n, float weight_offset, std::uint64_t seed) {
  auto r = std::make_unique<FusedRun>();
  r->s = resolved(rows, n, 0);
  std::mt19937_64 rng(seed);
  FusedAddNormArgs& a = r->args;
  a.shape = {rows, n, 0};
  a.x = input_rows(r->x, x, r->s, rng, 3, 0);
  a.residual = input_rows(r->residual, residual, r->s, rng, 0, 0);
  if (weight) {
    r->weight = make_weight(*weight, n, rng, weight_offset);
    a.weight = {r->weight.data(), *weight};
  }
  if (bias) {
    r->bias = make_param(*bias, n, rng, 0.0, 0.5);
    a.bias = {r->bias.data(), *bias};
  }
  a.weight_offset = weight_offset;
  a.device = Device::cpu();
  return r;
}

void check(bool layer, DType x, DType residual, std::optional<DType> weight, std::optional<DType> bias,
           std::int64_t n, float weight_offset = 0.f) {
  SCOPED_TRACE(std::string(layer ? "layernorm" : "rmsnorm") + " x=" + dtype_name(x) + " residual=" +
               dtype_name(residual) + " weight=" + opt_name(weight) + " bias=" + opt_name(bias) +
               " n=" + std::to_string(n) + " offset=" + std::to_string(weight_offset));
  auto r = setup(x, residual, weight, bias, 6, n, weight_offset, 7 + n);
  const FwdRef ref = reference_fwd(r->s, r->x, &r->residual, if_given(weight, r->weight), if_given(bias, r->bias),
                                   1, r->args.eps, weight_offset, layer);
  if (layer)
    ASSERT_NO_THROW(fused_add_layernorm(r->args));
  else
    ASSERT_NO_THROW(fused_add_rmsnorm(r->args));
  expect_rows_match("x (normalized in place)", r->x, r->s, ref.out);
  expect_rows_match("residual (x + residual in place)", r->residual, r->s, ref.h);
}

TEST(FusedAddCpu, RmsNormInPlace) {
  for (DType x : kAllDtypes)
    for (DType res : kAllDtypes)
      for (std::int64_t n : {1, 17, 1024, 4097}) check(false, x, res, kF32, std::nullopt, n);
}

TEST(FusedAddCpu, GemmaWeightOffset) {
  for (DType w : kAllDtypes) check(false, kBF16, kF32, w, std::nullopt, 1023, 1.f);
}

TEST(FusedAddCpu, LayerNormInPlace) {
  for (DType x : kAllDtypes)
    for (DType res : kAllDtypes)
      for (std::int64_t n : {1, 17, 1024, 4097}) check(true, x, res, kF32, x, n);
  check(true, kF16, kF16, std::nullopt, std::nullopt, 64);
}

TEST(FusedAddCpu, InterleavedRowsThatShareNoByteAreAccepted) {
  // x = buf[:, 0, :], residual = buf[:, 1, :]: the hulls overlap, no element does.
  const std::int64_t rows = 4, n = 8;
  std::vector<float> buf(rows * 2 * n, 1.f);
  FusedAddNormArgs a;
  a.shape = {rows, n, 0};
  a.x = Rows::strided(buf.data(), kF32, 2 * n);
  a.residual = Rows::strided(buf.data() + n, kF32, 2 * n);
  a.device = Device::cpu();
  ASSERT_NO_THROW(fused_add_rmsnorm(a));
  for (std::int64_t r = 0; r < rows; ++r) EXPECT_EQ(buf[r * 2 * n + n], 2.f);  // residual = 1 + 1
}

template <class Mutate>
void expect_rejected_untouched(bool layer, const Mutate& mutate, const std::string& needle) {
  SCOPED_TRACE(needle);
  auto r = setup(kF32, kF32, kF32, kF32, 4, 8, 0.f, 11);
  const auto x_before = r->x.buf.bytes(), res_before = r->residual.buf.bytes();
  FusedAddNormArgs a = r->args;
  mutate(*r, a);
  try {
    layer ? fused_add_layernorm(a) : fused_add_rmsnorm(a);
    ADD_FAILURE() << "the call was accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(r->x.buf.bytes(), x_before) << "x was written";
  EXPECT_EQ(r->residual.buf.bytes(), res_before) << "residual was written";
}

TEST(FusedAddCpu, OverlapsAndBadArgumentsAreNamedAndNothingIsWritten) {
  using A = FusedAddNormArgs;
  expect_rejected_untouched(false, [](FusedRun&, A& a) { a.residual = a.x; },
                            "fused_add_rmsnorm: arguments 'x' and 'residual' overlap");
  expect_rejected_untouched(true, [](FusedRun&, A& a) { a.residual.data = static_cast<const float*>(a.x.data) + 5; },
                            "fused_add_layernorm: arguments 'x' and 'residual' overlap");
  expect_rejected_untouched(false, [](FusedRun& r, A& a) { a.weight.data = r.x.buf.data(); },
                            "argument 'weight' overlaps 'x'");
  expect_rejected_untouched(true, [](FusedRun& r, A& a) { a.bias.data = r.residual.buf.data(); },
                            "argument 'bias' overlaps 'residual'");
  expect_rejected_untouched(false, [](FusedRun&, A& a) { a.residual.stride_inner = a.residual.stride_outer = 0; },
                            "argument 'residual': stride_inner (0)");
  expect_rejected_untouched(false, [](FusedRun&, A& a) { a.x.data = nullptr; }, "argument 'x' is required");
  expect_rejected_untouched(true, [](FusedRun&, A& a) { a.weight_offset = 1.f; },
                            "fused_add_layernorm: argument 'weight_offset' is 1; LayerNorm takes no weight offset");
  expect_rejected_untouched(false, [](FusedRun&, A& a) { a.weight_offset = 1.f, a.weight.data = nullptr; },
                            "fused_add_rmsnorm: argument 'weight_offset' is 1 but no weight was given");
  expect_rejected_untouched(false, [](FusedRun&, A& a) { a.eps = -1.f; }, "argument 'eps' must be finite and >= 0");
}

}  // namespace
