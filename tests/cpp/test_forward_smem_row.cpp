// NORMKIT_FORWARD_PLAN's row=smem (RowPlan::smem_row, norm_fwd_kernel's SMEM_ROW,
// with_smem_row in rmsnorm_heuristics_fwd.cpp): which plans take it, the dynamic
// shared memory and CTAs per SM it asks for, and its kernels compiled without spills.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kernel_sweep_fixture.hpp"
#include "normkit/runtime/config.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

namespace {

RmsFwdSpec smem_row_spec(std::int64_t n, DType x, bool center, bool residual, const char* override_text) {
  RmsFwdSpec f = norm_fwd_spec(n, x, x, center, residual ? std::optional<DType>(x) : std::nullopt, true);
  f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", override_text);
  f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 90);
  return f;
}

}  // namespace

// Only when asked, or where with_staged_rows measured it faster: LayerNorm's fp32
// rows with a residual at N=16385-131072 on sm_90 (256-thread CTAs up to 32768), but
// from N=32768 the bulk ring measured faster still and takes them (bulk_rows_measured).
TEST(RmsNormPlan, SmemRowOnlyWhenAskedOrMeasured) {
  for (const DType x : {bf16, f32})
    for (std::int64_t n : {256, 1024, 4096, 16384, 20000, 24576, 32768, 65536, 131072, 262144})
      for (const bool center : {false, true})
        for (const bool residual : {false, true})
          for (const bool stats : {false, true}) {
            RmsFwdSpec f = norm_fwd_spec(n, x, x, center, residual ? std::optional<DType>(x) : std::nullopt, stats);
            const RowPlan p = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 90);
            const bool measured = center && residual && x == f32 && n > 16384 && n < 32768;
            EXPECT_EQ(p.smem_row, measured) << n << " " << p.str();
            if (measured) {
              EXPECT_EQ(p.tpr, n <= 32768 ? 256 : 512) << n << " " << p.str();
              EXPECT_GE(p.min_blocks, 3) << p.str();
            }
            EXPECT_FALSE(plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 80).smem_row) << "sm_80 " << n;
          }
  // Not with a weight of another dtype, nor where a plan field is forced.
  RmsFwdSpec bf16_weight = norm_fwd_spec(65536, f32, bf16, true, f32, false);
  EXPECT_FALSE(plan_fwd(bf16_weight, 4, 90).smem_row);
  EXPECT_FALSE(smem_row_spec(65536, f32, true, true, "ept=16").plan.smem_row);
  // row=regs refuses it (and the grouped rows the plans take there by themselves) and
  // keeps the other measured rules: LayerNorm fp32 with a residual at N=262144 keeps
  // its measured long-row shape (32 elements, 512 threads).
  EXPECT_FALSE(smem_row_spec(65536, f32, true, true, "row=regs").plan.smem_row);
  RmsFwdSpec ungrouped = smem_row_spec(262144, f32, true, true, "");
  ungrouped.group_rows_allowed = false;
  EXPECT_EQ(smem_row_spec(262144, f32, true, true, "row=regs").plan.str(), plan_fwd(ungrouped, 4, 90).str());
}

// The slice's bytes (x, and the residual beside it) as dynamic shared memory, and as
// many CTAs per SM as 227 KB, 2048 threads and 40 registers a thread allow, unless
// minb= says otherwise.
TEST(RmsNormPlan, SmemRowAsksForTheSliceAndFillsTheSm) {
  // bf16 N=65536: 512 threads of 64 elements over a cluster of two, 64 KB each: three.
  RowPlan p = smem_row_spec(65536, bf16, false, false, "row=smem").plan;
  ASSERT_TRUE(p.smem_row) << p.str();
  EXPECT_EQ(p.tpr, 512);
  EXPECT_EQ(p.cluster, 2);
  EXPECT_EQ(p.smem_bytes, 65536);
  EXPECT_EQ(p.min_blocks, 3);
  EXPECT_FALSE(p.prefetch);
  // With a residual of x's dtype, twice the bytes.
  p = smem_row_spec(65536, bf16, true, true, "row=smem,cta=512").plan;
  ASSERT_TRUE(p.smem_row) << p.str();
  EXPECT_EQ(p.smem_bytes, 2 * (65536 / p.cluster) * 2);  // x and residual, bf16, the CTA's slice
  // 256 threads of 32 elements: 16 KB, six CTAs (40 registers a thread).
  p = smem_row_spec(65536, bf16, false, false, "row=smem,ept=32,cta=256").plan;
  ASSERT_TRUE(p.smem_row) << p.str();
  EXPECT_EQ(p.smem_bytes, 16384);
  EXPECT_EQ(p.min_blocks, 6);
  EXPECT_EQ(smem_row_spec(65536, bf16, false, false, "row=smem,ept=32,cta=256,minb=4").plan.min_blocks, 4);
  // The 1024-thread rows' shared-memory weights give way to it.
  RmsFwdSpec res = smem_row_spec(65536, bf16, false, true, "");
  ASSERT_TRUE(res.plan.params_smem) << res.plan.str();
  p = smem_row_spec(65536, bf16, false, true, "row=smem").plan;
  EXPECT_TRUE(p.smem_row && !p.params_smem) << p.str();
  // Rows in CTAs of several rows: every thread of the CTA has its entries.
  p = smem_row_spec(1024, bf16, false, false, "row=smem").plan;
  ASSERT_TRUE(p.smem_row) << p.str();
  EXPECT_EQ(p.smem_bytes, p.threads() * 2 * ((1024 + p.tpr * 8 - 1) / (p.tpr * 8)) * 8);
}

// Not where it cannot apply: scalar or 8-byte vectors (odd N, fp16 N=4100), residual
// items under 16 bytes, calls of few rows (their early parameters), rows whose plan is
// not register-resident.
TEST(RmsNormPlan, SmemRowNotWhereItCannotApply) {
  EXPECT_FALSE(smem_row_spec(4097, bf16, false, false, "row=smem").plan.smem_row);
  EXPECT_FALSE(smem_row_spec(4100, f16, false, false, "row=smem").plan.smem_row);
  RmsFwdSpec few = norm_fwd_spec(4096, bf16, bf16, false, std::nullopt, false);
  few.few_rows = true;
  few.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=smem");
  few.plan = plan_fwd(few, 8, 90);
  EXPECT_FALSE(few.plan.smem_row) << few.plan.str();
  // A residual whose items are not whole 16-byte chunks (fp32 x, bf16 residual: 8 bytes),
  // also where with_staged_rows would stage the row (LayerNorm fp32 N=65536).
  RmsFwdSpec narrow = norm_fwd_spec(65536, f32, f32, true, bf16, false);
  narrow.plan = plan_fwd(narrow, 4, 90);
  EXPECT_FALSE(narrow.plan.smem_row) << narrow.plan.str();
  // 256-thread CTAs at N=262144 need a cluster of 16: the plan is the two-pass kernel.
  const RowPlan two_pass = smem_row_spec(262144, bf16, false, false, "row=smem,cta=256").plan;
  EXPECT_FALSE(two_pass.regs);
  EXPECT_FALSE(two_pass.smem_row);
}

// The overrides measured on the H200 (scripts/plan_cases/forward-smem-row.txt), both
// norms, bf16 and fp32, with and without a residual, storing the statistics: no spills
// for sm_90a at the CTAs per SM each asks for.
TEST_F(RmsNormKernelSweep, SmemRowForwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const char* override_text : {"row=smem", "row=smem,cta=256", "row=smem,ept=32,cta=256", "row=smem,ept=32,cta=512"})
    for (const DType x : {bf16, f32})
      for (std::int64_t n : {1024, 16384, 32768, 65536, 131072, 262144})
        for (const bool center : {false, true})
          for (const bool residual : {false, true}) {
            const RmsFwdSpec f = smem_row_spec(n, x, center, residual, override_text);
            if (!f.plan.smem_row) continue;
            expect_fwd_clean(f, "sm_90a");
            ++kernels;
          }
  // with_staged_rows' own plans, with and without the statistics and residual_out stored
  // (from N=32768 with residual_out stored the bulk ring's, bulk_rows_measured).
  for (std::int64_t n : {20000, 32768, 65536, 131072})
    for (const bool stats : {false, true})
      for (const bool residual_out : {false, true}) {
        RmsFwdSpec f = norm_fwd_spec(n, f32, f32, true, f32, stats);
        if (!residual_out) f.residual_out.reset();
        f.plan = plan_fwd(f, 4, 90);
        if (n >= 32768 && residual_out) {
          EXPECT_GT(f.plan.bulk_stages, 0) << n << " " << f.plan.str();
          continue;
        }
        ASSERT_TRUE(f.plan.smem_row) << n;
        expect_fwd_clean(f, "sm_90a");
        ++kernels;
      }
  EXPECT_GE(kernels, 100);
}
