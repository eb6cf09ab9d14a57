// The backward rows that prefetch their next row into L2 (RowPlan::l2_next,
// norm_bwd_kernel's L2_NEXT): which plans take it by themselves, which plans
// NORMKIT_BACKWARD_PLAN's l2=next can give it to (rows loaded one at a time, 16-byte
// vectors of one element size, sm_90+), l2=off refusing it, and every such kernel
// compiled for sm_90a without spills, with weights of x's width and of the other.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kernel_sweep_fixture.hpp"
#include "rmsnorm_heuristics_bwd.hpp"
#include "normkit/runtime/config.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;
namespace rt = normkit::rt;

namespace {

RowPlan planned(std::int64_t n, DType x, bool center, bool dro, const std::string& override = "", int arch = 90,
                DType dout = DType::kFloat32, bool same_dout = true) {
  RmsBwdSpec b = norm_bwd_spec(n, x, x, center, dro);
  if (!same_dout) b.dout = dout;
  b.plan_override = register_rows(override);  // the register rows' feature, not the bulk ring
  return plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), arch);
}

}  // namespace

TEST(RmsNormPlan, BackwardL2NextRowOverride) {
  // Plain register rows (LayerNorm bf16 N=2048), shared-memory sums (RMSNorm bf16
  // N=16384), rows over a cluster (N=65536) and fp32 rows of one CTA.
  for (const auto& [n, x, center, dro] : {std::tuple{2048, bf16, true, false}, {16384, bf16, false, false},
                                          {65536, bf16, true, true}, {131072, f32, false, false},
                                          {3000, f32, false, true}, {3000, f32, true, false}}) {
    const RowPlan own = planned(n, x, center, dro);
    const RowPlan next = planned(n, x, center, dro, "l2=next");
    ASSERT_FALSE(own.prefetch || own.async_rows || own.split) << n << " " << own.str();
    EXPECT_TRUE(next.l2_next) << n << " " << next.str();
    // Nothing else of the plan moves.
    const RowPlan off = planned(n, x, center, dro, "l2=off");
    EXPECT_FALSE(off.l2_next);
    RowPlan same = next;
    same.l2_next = false;
    EXPECT_EQ(same.str(), off.str());
    EXPECT_EQ(own.str(), (own.l2_next ? next : off).str());
  }
  // Refused: rows that already keep the next row in flight (the register prefetch,
  // the cp.async ring), split rows, another architecture, x and dout of different
  // sizes (fp32 x, bf16 dout: 8-byte vectors of dout).
  RmsBwdSpec spec = norm_bwd_spec(2048, f32, f32, false, false);
  spec.plan_override = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l2=next");
  RowPlan prefetching = plan_bwd(spec, 4, 90);
  ASSERT_TRUE(prefetching.l2_next);
  prefetching.l2_next = false;
  prefetching.prefetch = true;
  RowPlanInputs inputs;
  inputs.n = 2048;
  inputs.backward = true;
  inputs.x_bytes = inputs.dout_bytes = 4;
  inputs.forced_l2_next = 1;
  EXPECT_FALSE(normkit::norm::detail::with_l2_next(prefetching, inputs).l2_next);
  prefetching.prefetch = false;
  EXPECT_TRUE(normkit::norm::detail::with_l2_next(prefetching, inputs).l2_next);
  const RowPlan ring = planned(1024, bf16, false, true, "l2=next");
  ASSERT_TRUE(ring.async_rows) << ring.str();
  EXPECT_FALSE(ring.l2_next);
  EXPECT_FALSE(planned(262144, bf16, true, false, "l2=next").l2_next);
  EXPECT_FALSE(planned(2048, bf16, true, false, "l2=next", 80).l2_next);
  EXPECT_FALSE(planned(16384, f32, false, false, "l2=next", 90, bf16, false).l2_next);
  // CTAs at 64 registers a thread spilled (but 512-thread CTAs over a cluster).
  EXPECT_FALSE(planned(8192, bf16, false, false, "l2=next").l2_next);
  EXPECT_FALSE(planned(16384, f32, true, false, "l2=next").l2_next);
  EXPECT_TRUE(planned(32768, f32, true, false, "l2=next").l2_next);
}

TEST(RmsNormPlan, BackwardL2NextWhereMeasured) {
  // Faster on the H200 (l2_next_measured): 16-bit rows over a cluster without
  // dresidual_out, LayerNorm's with it, LayerNorm 16-bit rows of one CTA at
  // N=4097-16384 without it, LayerNorm fp32 over a cluster without it.
  for (const std::int64_t n : {32768, 65536, 131072}) {
    EXPECT_TRUE(planned(n, bf16, false, false).l2_next) << n;
    EXPECT_TRUE(planned(n, bf16, true, false).l2_next) << n;
  }
  EXPECT_TRUE(planned(32768, bf16, true, true).l2_next);
  EXPECT_TRUE(planned(65536, bf16, true, true).l2_next);
  EXPECT_TRUE(planned(8192, bf16, true, false).l2_next);
  EXPECT_TRUE(planned(16384, bf16, true, false).l2_next);
  EXPECT_TRUE(planned(32768, f32, true, false).l2_next);
  // Slower or not measured: short rows, RMSNorm 16-bit with dresidual_out, fp32 rows
  // with it, RMSNorm bf16 N=16384's shared-memory sums, the fp32 cluster with
  // shared-memory sums, short LayerNorm fp32 rows, calls of few rows, sm_100.
  for (const std::int64_t n : {256, 1024, 2048, 4096})
    for (const DType x : {bf16, f32})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) EXPECT_FALSE(planned(n, x, center, dro).l2_next) << n;
  for (const std::int64_t n : {8192, 16384, 32768, 65536, 131072}) {
    EXPECT_FALSE(planned(n, bf16, false, true).l2_next) << n;
    EXPECT_FALSE(planned(n, f32, false, true).l2_next) << n;
    EXPECT_FALSE(planned(n, f32, true, true).l2_next) << n;
  }
  EXPECT_FALSE(planned(16384, bf16, false, false).l2_next);
  EXPECT_FALSE(planned(16384, bf16, true, true).l2_next);
  EXPECT_FALSE(planned(131072, f32, true, false).l2_next);
  EXPECT_FALSE(planned(16384, f32, false, false).l2_next);
  EXPECT_FALSE(planned(65536, bf16, false, false, "", 100).l2_next);
  RmsBwdSpec few = norm_bwd_spec(65536, bf16, bf16, false, false);
  few.few_rows = true;
  EXPECT_FALSE(plan_bwd(few, 8, 90).l2_next);
}

TEST(RmsNormPlan, BackwardL2NextKeyIsChecked) {
  EXPECT_EQ(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l2=next").l2_next, 1);
  EXPECT_EQ(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l2=off").l2_next, -1);
  EXPECT_TRUE(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l2=off").any());
  try {
    rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l2=1");
    FAIL() << "l2=1 accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("l2='1' is not next or off"), std::string::npos) << e.what();
  }
  // The forward's L2 prefetch measured slower everywhere (docs/perf/h200-2026-12-01b.md).
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "l2=next"), normkit::Error);
}

// bf16, fp16 and fp32, with and without dresidual_out, LayerNorm and RMSNorm, at
// the sweep's N and others: every plan l2=next applies to compiles clean.
TEST_F(RmsNormKernelSweep, BackwardL2NextRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const bool center : {false, true})
    for (const DType x : {bf16, f16, f32})
      for (const DType w : {x, x == f32 ? bf16 : f32})  // weights of x's dtype and of the other width
      for (const bool dro : {false, true})
        for (const std::int64_t n : {256, 1024, 2048, 3000, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 40000, 65536, 100000, 131072}) {
          RmsBwdSpec b = norm_bwd_spec(n, x, w, center, dro);
          b.plan_override = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l2=next");
          b.plan = plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90);
          if (!b.plan.l2_next) continue;
          expect_bwd_clean(b, "sm_90a");
          ++kernels;
        }
  EXPECT_GE(kernels, 120);
}

