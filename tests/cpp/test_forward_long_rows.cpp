// The forward's measured long-row and short fp32 shapes (measured_long_rows and
// measured_short_fp32_rows in
// rmsnorm_heuristics_fwd.cpp): elements a thread, CTA size and CTAs per SM where they
// measured faster than plan_rows' own, checked on the plans, then compiled for sm_90a
// without spills in each dtype and feature combination they are planned for.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "kernel_sweep_fixture.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

namespace {

struct LongRow {
  std::int64_t n;
  DType x;
  bool center, residual;
  int threads, min_blocks;  // the measured shape (tpr, min_blocks)
};
// bf16 rows at N=65536-131072 and LayerNorm fp32 with a residual at N=262144, and
// an N inside each rule's range that is not a power of two.
const LongRow kLongRows[] = {
    {131072, bf16, false, true, 512, 2},  {100000, bf16, false, true, 512, 2}, {65536, bf16, false, false, 512, 3},
    {50000, bf16, false, false, 512, 3},  {100000, bf16, false, false, 256, 4}, {100000, bf16, true, false, 256, 4},
    {262144, f32, true, true, 512, 2},    {200000, f32, true, true, 512, 2},
};

// Without the grouped rows, which the plans take first at some of these fp32 rows
// (test_forward_group_rows.cpp): the long-row rule is what remains where they do not apply.
RmsFwdSpec long_row_spec(const LongRow& r, DType x, bool stats) {
  RmsFwdSpec f = norm_fwd_spec(r.n, x, x, r.center, r.residual ? std::optional<DType>(x) : std::nullopt, stats);
  f.group_rows_allowed = false;
  return f;
}

}  // namespace

TEST(RmsNormPlan, MeasuredLongRowShapes) {
  for (const LongRow& r : kLongRows) {
    const RmsFwdSpec f = long_row_spec(r, r.x, false);
    const RowPlan p = plan_fwd(f, 16 / static_cast<int>(dtype_size(r.x)), 90);
    EXPECT_TRUE(p.regs && !p.smem_row) << r.n << " " << p.str();
    EXPECT_EQ(p.tpr, r.threads) << r.n << " center=" << r.center << " residual=" << r.residual << " " << p.str();
    EXPECT_EQ(p.min_blocks, r.min_blocks) << r.n << " " << p.str();
    // Not with a weight of another dtype.
    RmsFwdSpec other = f;
    other.weight = r.x == f32 ? bf16 : f32;
    if (r.center) other.bias = other.weight;
    const RowPlan po = plan_fwd(other, 16 / static_cast<int>(dtype_size(r.x)), 90);
    EXPECT_FALSE(po.tpr == r.threads && po.min_blocks == r.min_blocks) << "other weight " << r.n << " " << po.str();
  }
  // Rows the rules leave alone: RMSNorm bf16 with a residual at N=65536 and with a
  // bias, LayerNorm bf16 N=65536, RMSNorm fp32 with a residual at N=262144.
  RmsFwdSpec rms_res = norm_fwd_spec(65536, bf16, bf16, false, bf16, false);
  EXPECT_EQ(plan_fwd(rms_res, 8, 90).tpr, 1024);
  RmsFwdSpec rms_bias = norm_fwd_spec(131072, bf16, bf16, false, bf16, false);
  rms_bias.bias = bf16;
  EXPECT_NE(plan_fwd(rms_bias, 8, 90).min_blocks, 2);
  EXPECT_EQ(plan_fwd(norm_fwd_spec(65536, bf16, bf16, true, std::nullopt, false), 8, 90).tpr, 512);
  RmsFwdSpec rms_fp32_res = norm_fwd_spec(262144, f32, f32, false, f32, false);
  rms_fp32_res.group_rows_allowed = false;
  EXPECT_EQ(plan_fwd(rms_fp32_res, 4, 90).tpr, 1024);
}

// bf16 and fp16 (16-bit rules), with and without the statistics stored.
TEST_F(RmsNormKernelSweep, MeasuredLongRowShapesCompileWithoutSpills) {
  int kernels = 0;
  for (const LongRow& r : kLongRows)
    for (const DType x : r.x == f32 ? std::vector<DType>{f32} : std::vector<DType>{bf16, f16})
      for (const bool stats : {false, true}) {
        RmsFwdSpec f = long_row_spec(r, x, stats);
        f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 90);
        ASSERT_EQ(f.plan.tpr, r.threads) << r.n << " " << f.plan.str();
        expect_fwd_clean(f, "sm_90a");
        ++kernels;
      }
  // Rows with a residual whose residual_out is not stored (inference without prenorm):
  // RMSNorm's rule holds (clean), LayerNorm fp32's does not apply (it spilled 40-60
  // bytes, normkit precompile sm_90a, N=200000 and 262144).
  for (const LongRow& r : kLongRows) {
    if (!r.residual) continue;
    for (const bool stats : {false, true}) {
      RmsFwdSpec f = long_row_spec(r, r.x, stats);
      f.residual_out.reset();
      f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(r.x)), 90);
      EXPECT_EQ(f.plan.tpr == r.threads && f.plan.min_blocks == r.min_blocks, r.x != f32) << r.n << " " << f.plan.str();
      expect_fwd_clean(f, "sm_90a");
      ++kernels;
    }
  }
  EXPECT_EQ(kernels, 28 + 8);
}

// The short fp32 rows' measured shapes (measured_short_fp32_rows): threads a row, CTA
// size (threads a row times rows a CTA) and CTAs per SM, at an N of each rule's range
// and one that is not a power of two; both norms unless the rule names one.
namespace {
struct ShortRow {
  std::int64_t n;
  bool center, residual;
  int tpr, cluster, min_blocks;
};
const ShortRow kShortFp32Rows[] = {
    {1024, false, true, 64, 1, 3},  {640, true, true, 64, 1, 4},     {2048, true, true, 256, 1, 6},
    {1500, false, true, 256, 1, 6}, {4096, true, false, 512, 1, 6}, {3800, true, false, 512, 1, 6},
    // RMSNorm with a residual at N=257-512: one vector a thread, two rows a CTA (Liger's shape).
    {512, false, true, 128, 1, 16}, {384, false, true, 128, 1, 16},
    // RMSNorm without one: one vector a thread, rows of 64-256 threads.
    {256, false, false, 64, 1, 16}, {512, false, false, 128, 1, 16}, {1024, false, false, 256, 1, 8},
};
}  // namespace

TEST(RmsNormPlan, MeasuredShortFp32Shapes) {
  for (const ShortRow& r : kShortFp32Rows) {
    const RmsFwdSpec f = norm_fwd_spec(r.n, f32, f32, r.center, r.residual ? std::optional<DType>(f32) : std::nullopt, false);
    const RowPlan p = plan_fwd(f, 4, 90);
    EXPECT_TRUE(p.regs) << r.n << " " << p.str();
    EXPECT_EQ(p.tpr, r.tpr) << r.n << " center=" << r.center << " residual=" << r.residual << " " << p.str();
    EXPECT_EQ(p.cluster, r.cluster) << r.n << " " << p.str();
    EXPECT_EQ(p.min_blocks, r.min_blocks) << r.n << " " << p.str();
  }
  // Measured on sm_90 only; LayerNorm without a residual not at N=3000 (slower: a
  // 512-thread CTA's 375 threads), RMSNorm not at all.
  EXPECT_NE(plan_fwd(norm_fwd_spec(2048, f32, f32, true, f32, false), 4, 100).min_blocks, 6);
  EXPECT_NE(plan_fwd(norm_fwd_spec(3000, f32, f32, true, std::nullopt, false), 4, 90).tpr, 512);
  EXPECT_NE(plan_fwd(norm_fwd_spec(4096, f32, f32, false, std::nullopt, false), 4, 90).min_blocks, 6);
  // LayerNorm with a residual at N=512 keeps 16 elements a thread (not measured at one).
  EXPECT_EQ(plan_fwd(norm_fwd_spec(512, f32, f32, true, f32, false), 4, 90).tpr, 32);
  // Outside the ranges: N=256 with a residual keeps 16 elements in 256-thread CTAs.
  const RowPlan p256 = plan_fwd(norm_fwd_spec(256, f32, f32, false, f32, false), 4, 90);
  EXPECT_EQ(p256.threads(), 256) << p256.str();
}

TEST_F(RmsNormKernelSweep, MeasuredShortFp32ShapesCompileWithoutSpills) {
  int kernels = 0;
  for (const ShortRow& r : kShortFp32Rows)
    for (const bool stats : {false, true}) {
      RmsFwdSpec f = norm_fwd_spec(r.n, f32, f32, r.center, r.residual ? std::optional<DType>(f32) : std::nullopt, stats);
      f.plan = plan_fwd(f, 4, 90);
      ASSERT_EQ(f.plan.tpr, r.tpr) << r.n << " " << f.plan.str();
      expect_fwd_clean(f, "sm_90a");
      ++kernels;
    }
  EXPECT_EQ(kernels, 22);
}
