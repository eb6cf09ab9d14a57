// NORMKIT_BACKWARD_PLAN's refill=early (RowPlan::early_refill, norm_bwd_bulk_kernel's
// EARLY_REFILL): the bulk ring's pass 1 keeps the row's h, dout and dresidual_out in
// registers so that its stage is refilled at the barrier of the row's sums instead of
// after pass 2. The override's parsing, where the plan takes it and where it refuses it
// (registers, dresidual_out of another width), and its kernels compiled without spills
// for sm_90a (NVRTC) on every branch of the kernel's row loop: one CTA, several rows a
// stage of a CTA barrier's rows and of one warp, a cluster, the shared and the pointer
// reads, with and without dresidual_out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>

#include "kernel_sweep_fixture.hpp"
#include "normkit/runtime/config.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;
namespace rt = normkit::rt;

TEST(RmsNormPlan, BackwardEarlyRefillOverrideParses) {
  const auto o = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,ept=32,refill=early");
  EXPECT_TRUE(o.early_refill);
  EXPECT_TRUE(o.bulk_rows);
  EXPECT_FALSE(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk").early_refill);
  // Only the bulk ring refills stages; only early is a value (late is the ring's own).
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "refill=early"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=group,refill=early"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,refill=late"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk,refill=early"), normkit::Error);
  try {
    rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "refill=early");
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("refill= applies to row=bulk only"), std::string::npos) << e.what();
  }
}

// Taken where the ring is planned, with registers for the held vectors (four registers
// each of h, dout and dresidual_out an item) beside the dw/db sums; the ring's shape is the one the
// override gives without refill=early. The plans of an unknown or the H200's memory class
// never take it by themselves (the H100's: test_memory_class_plans.cpp). The
// shapes are tests/python/test_backward_bulk_rows_gpu.py's (EARLY_REFILL_CASES), both
// norms.
TEST(RmsNormPlan, BackwardEarlyRefillWhereItApplies) {
  struct Case {
    std::int64_t n;
    DType x, w;
    const char* override_text;
  };
  for (const Case& c : {Case{16384, bf16, bf16, "row=bulk,ept=32"}, Case{16384, bf16, bf16, "row=bulk,cluster=2"},
                        Case{2048, bf16, bf16, "row=bulk,ept=16"}, Case{256, bf16, bf16, "row=bulk,ept=8"},
                        Case{65536, f32, f32, "row=bulk"}, Case{65536, bf16, f32, "row=bulk"},
                        Case{20000, f32, f32, "row=bulk"}, Case{262144, bf16, bf16, "row=bulk,reads=shared"}})
    for (const bool center : {false, true})
      for (const bool dro : {false, true}) {
      const std::string early = std::string(c.override_text) + ",refill=early";
      const RowPlan without = planned_bwd(c.n, c.x, c.w, center, dro, c.override_text).plan;
      const RowPlan with = planned_bwd(c.n, c.x, c.w, center, dro, early).plan;
      SCOPED_TRACE(early + " n=" + std::to_string(c.n) + " center=" + std::to_string(center) +
                   " dro=" + std::to_string(dro) + ": " + with.str());
      ASSERT_GE(with.bulk_stages, 2);
      // The sums (8 floats a vector of bf16, 4 of fp32; LayerNorm's two sets) and the
      // held words (4 a tensor) of every item beside ~56 other registers under the cap.
      const std::int64_t vec = 16 / dtype_size(c.x);
      const std::int64_t items = c.n / vec / (std::int64_t{without.cluster} * without.tpr);
      const std::int64_t cap = std::min<std::int64_t>(255, 65536 / (std::int64_t{without.threads()} * without.min_blocks));
      const bool refused = items * (vec * (center ? 2 : 1) + (dro ? 12 : 8)) > cap - 56;
      EXPECT_EQ(with.early_refill, !refused);
      EXPECT_EQ(with.str().find(" early_refill") != std::string::npos, !refused);
      EXPECT_FALSE(without.early_refill);
      // Only the refill differs.
      RowPlan same = with;
      same.early_refill = false;
      EXPECT_EQ(same.str(), without.str());
      EXPECT_FALSE(planned_bwd(c.n, c.x, c.w, center, dro, "").plan.early_refill);
    }
}

TEST(RmsNormPlan, BackwardEarlyRefillRefusedWhereItCannotApply) {
  // RMSNorm bf16 N=262144 with dresidual_out over 16 CTAs: four items of 8 sums and 12
  // held registers (80) beside ~56 others exceed 128 (without it, 4 x 16 fit).
  const RowPlan dro = planned_bwd(262144, bf16, bf16, false, true, "row=bulk,refill=early").plan;
  EXPECT_GE(dro.bulk_stages, 2) << dro.str();
  EXPECT_FALSE(dro.early_refill) << dro.str();
  EXPECT_TRUE(planned_bwd(262144, bf16, bf16, false, false, "row=bulk,refill=early").plan.early_refill);
  // dresidual_out of another width than h's (fp32 beside bf16 rows).
  RmsBwdSpec wide = norm_bwd_spec(2048, bf16, bf16, true, true);
  wide.dresidual_out = f32;
  wide.plan_override = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,ept=16,refill=early");
  wide.plan = plan_bwd(wide, 8, 90);
  EXPECT_GE(wide.plan.bulk_stages, 2) << wide.plan.str();
  EXPECT_FALSE(wide.plan.early_refill) << wide.plan.str();
  // LayerNorm bf16 N=16384 on one 512-thread CTA: four items of 2 x 8 sums and 8 held
  // registers each (96) beside ~56 others exceed 128.
  const RowPlan ln = planned_bwd(16384, bf16, bf16, true, false, "row=bulk,ept=32,refill=early").plan;
  EXPECT_GE(ln.bulk_stages, 2) << ln.str();
  EXPECT_FALSE(ln.early_refill) << ln.str();
  // No ring (sm_80), so nothing to refill.
  const RowPlan sm80 = planned_bwd(16384, bf16, bf16, false, false, "row=bulk,ept=32,refill=early", 80).plan;
  EXPECT_EQ(sm80.bulk_stages, 0) << sm80.str();
  EXPECT_FALSE(sm80.early_refill) << sm80.str();
}

TEST_F(RmsNormKernelSweep, BackwardEarlyRefillCompilesWithoutSpills) {
  int kernels = 0;
  // (n, x, w, override): one CTA of one row a stage, rows of 128 and of 32 threads
  // several a stage, clusters on the pointer reads (fp32, and an fp32 weight beside
  // bf16 rows) and on the shared reads, uneven slices (fp32 N=20000), fp16.
  for (const auto& [n, x, w, override_text] :
       {std::tuple{16384, bf16, bf16, "row=bulk,ept=32,refill=early"},
        std::tuple{2048, bf16, bf16, "row=bulk,ept=16,refill=early"},
        std::tuple{256, bf16, bf16, "row=bulk,ept=8,refill=early"},
        std::tuple{65536, f32, f32, "row=bulk,refill=early"}, std::tuple{65536, bf16, f32, "row=bulk,refill=early"},
        std::tuple{262144, bf16, bf16, "row=bulk,reads=shared,refill=early"},
        std::tuple{20000, f32, f32, "row=bulk,refill=early"}, std::tuple{8192, f16, f16, "row=bulk,ept=16,refill=early"},
        std::tuple{16384, bf16, bf16, "row=bulk,cluster=2,refill=early"}})
    for (const bool center : {false, true})
      for (const bool dro : {false, true}) {
        const RmsBwdSpec b = planned_bwd(n, x, w, center, dro, override_text);
        // Where the sums leave no registers for the held vectors the ring refills late
        // (BackwardEarlyRefillWhereItApplies): not this test's kernels.
        if (!b.plan.early_refill) continue;
        kernels += expect_bwd_clean(b, "sm_90a");
      }
  // LayerNorm bf16 with dresidual_out at N=32768 over four CTAs (the H100 class's own ring).
  kernels += expect_bwd_clean(planned_bwd(32768, bf16, bf16, true, true, "row=bulk,cluster=4,refill=early"), "sm_90a");
  EXPECT_GE(kernels, 25);
}
