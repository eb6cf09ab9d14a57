// LayerNorm forward and backward on host data, through the public API with
// Device::cpu(): the CPU fallback against the float64 reference of
// rmsnorm_test_reference.hpp (centred), bitwise determinism across thread counts,
// and argument validation. Outputs start poisoned inside guard bytes, as in the
// RMSNorm tests. The fused add is in test_fused_add_cpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layernorm_internal.hpp"
#include "normkit/norm/layernorm.hpp"
#include "rmsnorm_test_fixtures.hpp"
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace rmsref;

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

struct Case {
  std::int64_t rows = 5, n = 64, rows_inner = 0, heads = 1;
  DType x = kBF16;
  std::optional<DType> residual, residual_out, weight, bias, out;  // forward
  std::optional<DType> dout, dresidual_out, dresidual, dbias;      // backward (weight shared)
  float eps = 1e-6f, weight_offset = 0.f;  // offset unused: LayerNorm has none (describe_layout prints it)
  std::int64_t in_pad = 0, in_pad_outer = 0, out_pad = 0, out_pad_outer = 0;
  std::uint64_t seed = 3;
  std::string describe() const {
    return describe_layout(*this) + " residual=" + opt_name(residual) + " residual_out=" + opt_name(residual_out) +
           " weight=" + opt_name(weight) + " bias=" + opt_name(bias) + " out=" + opt_name(out) +
           " dresidual_out=" + opt_name(dresidual_out) + " dbias=" + opt_name(dbias);
  }
};

struct FwdRun {
  RowShape s;
  Strided x, residual, out, residual_out;
  Buf weight, bias, mean, rstd;
  LayerNormFwdArgs args;
  std::vector<Output> outputs() const {
    return {{"out", &out.buf}, {"residual_out", &residual_out.buf}, {"mean", &mean}, {"rstd", &rstd}};
  }
};

std::unique_ptr<FwdRun> setup_fwd(const Case& c) {
  auto r = new_run<FwdRun>(c);
  const RowShape& s = r->s;
  LayerNormFwdArgs& a = r->args;
  std::mt19937_64 rng(c.seed);
  a.x = input_rows(r->x, c.x, s, rng, c.in_pad, c.in_pad_outer);
  if (c.residual) a.residual = input_rows(r->residual, *c.residual, s, rng, c.in_pad + 1, c.in_pad_outer);
  a.out = output_rows(r->out, c.out.value_or(c.x), s, c.out_pad, c.out_pad_outer);
  if (c.residual_out) a.residual_out = output_rows(r->residual_out, *c.residual_out, s, c.out_pad, c.out_pad_outer);
  if (c.weight) r->weight = make_param(*c.weight, c.heads * c.n, rng, 1.0, 0.5);
  if (c.bias) r->bias = make_param(*c.bias, c.heads * c.n, rng, 0.0, 0.5);
  a.weight = {c.weight ? r->weight.data() : nullptr, c.weight.value_or(kF32)};
  a.bias = {c.bias ? r->bias.data() : nullptr, c.bias.value_or(kF32)};
  r->mean = Buf(kF32, c.rows);
  r->rstd = Buf(kF32, c.rows);
  a.mean = static_cast<float*>(r->mean.data());
  a.rstd = static_cast<float*>(r->rstd.data());
  a.eps = c.eps;
  return r;
}

void check_fwd(const Case& c) {
  SCOPED_TRACE(c.describe());
  auto r = setup_fwd(c);
  const FwdRef ref = reference_fwd(r->s, r->x, if_given(c.residual, r->residual), if_given(c.weight, r->weight),
                                   if_given(c.bias, r->bias), c.heads, c.eps, 0.0, /*centred=*/true);
  ASSERT_NO_THROW(run_cpu(r->args));
  expect_rows_match("out", r->out, r->s, ref.out);
  if (c.residual_out) expect_rows_match("residual_out", r->residual_out, r->s, ref.h);
  // The mean's error is relative to the row's magnitude, not to the (small) mean.
  std::vector<double> mean_mag(ref.mean.size());
  for (std::int64_t row = 0; row < c.rows; ++row)
    for (std::int64_t i = 0; i < c.n; ++i) mean_mag[row] += 8 * ref.h.mag[row * c.n + i] / c.n;
  expect_buf_match("mean", r->mean, Values{ref.mean, mean_mag});
  expect_buf_match("rstd", r->rstd, Values{ref.rstd, std::vector<double>(ref.rstd.size(), 0.0)});
}

TEST(LayerNormCpuFwd, DtypeGridOddAndEvenN) {
  check_dtype_grid<Case>(300, [](Case c) {
    c.bias = c.weight;
    check_fwd(c);
  });
}

TEST(LayerNormCpuFwd, EveryDtypeCombination) {
  // x, weight, bias, out and residual/residual_out each in any of the three dtypes.
  for (DType x : kAllDtypes)
    for (DType w : kAllDtypes)
      for (DType b : kAllDtypes)
        for (DType o : kAllDtypes)
          for (DType res : kAllDtypes)
            check_fwd({.rows = 3, .n = 67, .x = x, .residual = res, .residual_out = w, .weight = w, .bias = b,
                       .out = o});
}

TEST(LayerNormCpuFwd, LargeOffsetNeedsTwoPasses) {
  // Rows centred far from 0: one-pass E[h^2] - mean^2 would lose the variance.
  Case c{.rows = 4, .n = 1024, .x = kF32, .weight = kF32};
  auto r = setup_fwd(c);
  for (std::int64_t i = 0; i < r->x.buf.elems(); ++i)
    r->x.buf.set(i, static_cast<double>(static_cast<float>(r->x.buf.get(i) + 4096.0)));
  const FwdRef ref = reference_fwd(r->s, r->x, nullptr, &r->weight, nullptr, 1, c.eps, 0.0, true);
  ASSERT_NO_THROW(run_cpu(r->args));
  Values loose = ref.out;
  // 5e-3 absolute: the fp32 mean of values ~4096 is off by ~1e-3; E[h^2] - mean^2
  // would be off by ~1 in a variance of ~1.
  for (double& m : loose.mag) m = 500;
  EXPECT_TRUE(close_rows("out", r->out, r->s, loose));
}

TEST(LayerNormCpuFwd, PerHeadRowStridesTwoLevelLayoutAndN1) {
  for (DType x : kAllDtypes) {
    check_fwd({.rows = 12, .n = 17, .rows_inner = 4, .heads = 4, .x = x, .weight = kF32, .bias = x});
    check_fwd({.rows = 24, .n = 64, .rows_inner = 6, .x = x, .residual = kF32, .residual_out = x,
               .weight = kF32, .bias = kBF16, .in_pad_outer = 2 * 6 * 64, .out_pad = 1, .out_pad_outer = 7});
    check_fwd({.rows = 9, .n = 1, .x = x, .residual = x, .residual_out = kF32, .weight = x, .bias = x,
               .in_pad = 3});
  }
}

TEST(LayerNormCpuFwd, EmptyInputWritesNothing) {
  check_fwd({.rows = 0, .residual = kBF16, .residual_out = kBF16, .weight = kF32, .bias = kF32});
}

TEST(LayerNormCpuFwd, ResultsIndependentOfThreadCount) {
  const Case c{.rows = 1500, .n = 257, .residual = kBF16, .residual_out = kF32, .weight = kF32, .bias = kF32};
  expect_bitwise_across_thread_counts([&] { return setup_fwd(c); },
                                      [](const FwdRun& r) { return r.outputs(); });
}

// ---------------------------------------------------------------------------
// Backward

struct BwdRun {
  RowShape s;
  Strided x, dout, dresidual_out, dx, dresidual;
  Buf weight, dweight, dbias;
  std::vector<float> mean, rstd;
  float no_rows = 0.f;
  LayerNormBwdArgs args;
  std::vector<Output> outputs() const {
    return {{"dx", &dx.buf}, {"dresidual", &dresidual.buf}, {"dweight", &dweight}, {"dbias", &dbias}};
  }
};

std::unique_ptr<BwdRun> setup_bwd(const Case& c) {
  auto r = new_run<BwdRun>(c);
  const RowShape& s = r->s;
  LayerNormBwdArgs& a = r->args;
  std::mt19937_64 rng(c.seed);
  a.x = input_rows(r->x, c.x, s, rng, c.in_pad, c.in_pad_outer);
  a.dout = input_rows(r->dout, c.dout.value_or(c.x), s, rng, c.in_pad + 2, c.in_pad_outer);
  if (c.dresidual_out)
    a.dresidual_out = input_rows(r->dresidual_out, *c.dresidual_out, s, rng, c.in_pad, c.in_pad_outer);
  a.dx = output_rows(r->dx, c.out.value_or(c.x), s, c.out_pad, c.out_pad_outer);
  if (c.dresidual) a.dresidual = output_rows(r->dresidual, *c.dresidual, s, c.out_pad + 1, c.out_pad_outer);
  if (c.weight) {
    r->weight = make_param(*c.weight, c.heads * c.n, rng, 1.0, 0.5);
    r->dweight = Buf(*c.weight, c.heads * c.n);
    a.weight = {r->weight.data(), *c.weight};
    a.dweight = r->dweight.data();
  }
  if (c.dbias) {
    r->dbias = Buf(*c.dbias, c.heads * c.n);
    a.dbias = {r->dbias.data(), *c.dbias};
  }
  // mean and rstd as the forward would have saved them for this x, rounded to fp32.
  const FwdRef stats = reference_fwd(s, r->x, nullptr, nullptr, nullptr, 1, 1e-6, 0.0, true);
  for (std::int64_t row = 0; row < c.rows; ++row) {
    r->mean.push_back(static_cast<float>(stats.mean[row]));
    r->rstd.push_back(static_cast<float>(stats.rstd[row]));
  }
  a.mean = r->mean.empty() ? &r->no_rows : r->mean.data();
  a.rstd = r->rstd.empty() ? &r->no_rows : r->rstd.data();
  return r;
}

void check_bwd(const Case& c) {
  SCOPED_TRACE(c.describe());
  auto r = setup_bwd(c);
  const BwdRef ref = reference_bwd(r->s, r->x, r->dout, if_given(c.dresidual_out, r->dresidual_out),
                                   if_given(c.weight, r->weight), r->rstd, c.heads, 0.0, &r->mean);
  ASSERT_NO_THROW(run_cpu(r->args));
  expect_rows_match("dx", r->dx, r->s, ref.dx);
  if (c.dresidual) expect_rows_match("dresidual", r->dresidual, r->s, ref.dx);
  if (c.weight) expect_buf_match("dweight", r->dweight, ref.dw);
  if (c.dbias) expect_buf_match("dbias", r->dbias, ref.db);
}

TEST(LayerNormCpuBwd, DtypeGridOddAndEvenN) {
  check_dtype_grid<Case>(400, [](Case c) {
    c.dbias = c.weight.value_or(kF32);
    check_bwd(c);
  });
}

TEST(LayerNormCpuBwd, EveryDtypeCombination) {
  for (DType x : kAllDtypes)
    for (DType w : kAllDtypes)
      for (DType d : kAllDtypes)
        for (DType res : kAllDtypes)
          check_bwd({.rows = 3, .n = 67, .x = x, .weight = w, .out = d, .dout = d, .dresidual_out = res,
                     .dresidual = res, .dbias = w});
}

TEST(LayerNormCpuBwd, PerHeadStridesAndN1) {
  for (DType x : kAllDtypes) {
    check_bwd({.rows = 40, .n = 17, .rows_inner = 4, .heads = 4, .x = x, .weight = kF32, .dbias = x});
    check_bwd({.rows = 24, .n = 64, .rows_inner = 6, .x = x, .weight = kBF16, .dresidual_out = x,
               .dresidual = kF32, .dbias = kF32, .in_pad_outer = 2 * 6 * 64, .out_pad_outer = 9});
    check_bwd({.rows = 7, .n = 1, .x = x, .weight = x, .dbias = x});
  }
}

TEST(LayerNormCpuBwd, ManyRowsDweightWithinSqrtMTolerance) {
  check_bwd({.rows = 4099, .n = 96, .x = kBF16, .weight = kF32, .dbias = kF32});
}

TEST(LayerNormCpuBwd, EmptyBatchZeroesDweightAndDbias) { check_bwd({.rows = 0, .weight = kF32, .dbias = kBF16}); }

TEST(LayerNormCpuBwd, BitwiseIdenticalAcrossThreadCounts) {
  const Case c{.rows = 2000, .n = 129, .x = kBF16, .weight = kF32, .dresidual_out = kF32, .dresidual = kF32,
               .dbias = kF32};
  expect_bitwise_across_thread_counts([&] { return setup_bwd(c); }, [](const BwdRun& r) { return r.outputs(); });
}

// ---------------------------------------------------------------------------
// Validation: the shared rules (RMSNorm's tests cover each of them) under
// LayerNorm's names, and LayerNorm's own: mean.

TEST(LayerNormCpuValidate, BadArgumentsAreNamedAndNothingIsWritten) {
  auto f = setup_fwd({.rows = 4, .n = 8, .x = kF32, .residual = kF32, .residual_out = kBF16, .weight = kBF16,
                      .bias = kF32});
  using F = LayerNormFwdArgs;
  expect_each_rejected_before_writing(
      f, Rejections<F>{
             {[](F& a) { a.shape.n = 0; }, "layernorm_fwd: argument 'shape.n' must be >= 1, got 0"},
             {[](F& a) { a.out.data = nullptr; }, "layernorm_fwd: argument 'out' is required"},
             {[](F& a) { a.residual_out.stride_inner = 0; }, "argument 'residual_out': stride_inner (0)"},
             {[](F& a) { a.heads = 3; }, "layernorm_fwd: argument 'heads' (3) must divide shape.rows (4)"},
             {[](F& a) { a.eps = NAN; }, "layernorm_fwd: argument 'eps' must be finite and >= 0"},
         });
  auto b = setup_bwd({.rows = 4, .n = 8, .x = kF32, .weight = kF32, .dbias = kF32});
  using B = LayerNormBwdArgs;
  expect_each_rejected_before_writing(
      b, Rejections<B>{
             {[](B& a) { a.mean = nullptr; }, "layernorm_bwd: argument 'mean' is required"},
             {[](B& a) { a.rstd = nullptr; }, "layernorm_bwd: argument 'rstd' is required"},
             {[](B& a) { a.dweight = nullptr; }, "layernorm_bwd: argument 'dweight' is required"},
             {[](B& a) { a.dx.data = nullptr; }, "layernorm_bwd: argument 'dx' is required"},
         });
}

TEST(LayerNormCpuValidate, Fp64IsRejectedForTheGpuByName) {
  auto f = setup_fwd({.rows = 2, .n = 8, .x = kF32, .weight = kF32});
  LayerNormFwdArgs a = f->args;
  a.bias = {a.weight.data, DType::kFloat64};
  try {
    detail::reject_fp64_on_gpu(a);
    ADD_FAILURE() << "accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layernorm_fwd: argument 'bias' is fp64"), std::string::npos) << e.what();
  }
}

}  // namespace
