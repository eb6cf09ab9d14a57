// Grouped backward rows (RowPlan::group_stages in the backward, norm_bwd_group_kernel,
// with_group_rows in rmsnorm_heuristics_group.cpp): NORMKIT_BACKWARD_PLAN's row=group,
// the slices, stages, weight slice and shared memory it asks for, where it cannot
// apply, the slot word, and its kernels compiled without spills (NVRTC).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "kernel_sweep_fixture.hpp"
#include "normkit/norm/params.cuh"
#include "normkit/runtime/config.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;
namespace rt = normkit::rt;

namespace {

std::int64_t slices(const RowPlan& p, std::int64_t n) { return n / p.vec / (std::int64_t{p.tpr} * p.split_items); }

}  // namespace

TEST(RmsNormPlan, BackwardGroupRowsOverrideParses) {
  const auto o = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=group,minb=3,stages=5");
  EXPECT_TRUE(o.group_rows);
  EXPECT_FALSE(o.bulk_rows);
  EXPECT_EQ(o.bulk_stages, 5);
  EXPECT_EQ(o.min_blocks, 3);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=group,stages=3"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=smem"), normkit::Error);
  EXPECT_EQ(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=group,dro=direct").dro_direct, 1);
  EXPECT_EQ(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=group,dro=stage").dro_direct, -1);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=group,dro=regs"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,dro=direct"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group,dro=direct"), normkit::Error);
}

// row=group's own shape: 256 threads, two vectors each, two CTAs an SM, as many stages
// (at most 8) as those CTAs' shared memory holds, the weight's slice beside them.
TEST(RmsNormPlan, BackwardGroupRowsShape) {
  const RowPlan p = planned_bwd(262144, f32, f32, false, false, "row=group").plan;
  ASSERT_GT(p.group_stages, 0) << p.str();
  EXPECT_EQ(p.vec, 4);
  EXPECT_EQ(p.tpr, 256);
  EXPECT_EQ(p.split_items, 2);
  EXPECT_EQ(p.min_blocks, 2);
  EXPECT_EQ(slices(p, 262144), 128);
  EXPECT_TRUE(p.weight_smem);
  EXPECT_FALSE(p.split);
  EXPECT_EQ(p.cluster, 1);
  // A stage: h and dout, 2048 fp32 each (16 KB); (113.5 - 2 - 8) KB / 16 = 6.
  EXPECT_EQ(p.group_stages, 6);
  EXPECT_EQ(p.smem_bytes, 6 * 16384 + 8192);
  // LayerNorm with dresidual_out: 24 KB a stage, 4 beside the weight.
  const RowPlan l = planned_bwd(262144, f32, f32, true, true, "row=group").plan;
  EXPECT_EQ(l.group_stages, 4);
  EXPECT_EQ(l.smem_bytes, 4 * 24576 + 8192 * (l.weight_smem ? 1 : 0));
  // bf16: 8-element vectors, so 4096 elements a slice, 32 slices at N=131072.
  const RowPlan b = planned_bwd(131072, bf16, bf16, true, false, "row=group,minb=1,ept=32").plan;
  ASSERT_GT(b.group_stages, 0) << b.str();
  EXPECT_EQ(b.vec, 8);
  EXPECT_EQ(b.split_items, 4);
  EXPECT_EQ(b.min_blocks, 1);
  EXPECT_EQ(slices(b, 131072), 16);
  EXPECT_EQ(b.group_stages, 6);  // 32 KB a stage beside the weight's 16 KB
  // stages= forced, w=global keeps the weight in global memory.
  const RowPlan f = planned_bwd(262144, f32, f32, false, false, "row=group,stages=4,w=global").plan;
  EXPECT_EQ(f.group_stages, 4);
  EXPECT_FALSE(f.weight_smem);
  EXPECT_EQ(f.smem_bytes, 4 * 16384);
  // dro=direct: dresidual_out skips the stages, so LayerNorm's with it holds six of 16 KB
  // beside the weight, as without it; without dresidual_out it changes nothing.
  const RowPlan d = planned_bwd(262144, f32, f32, true, true, "row=group,dro=direct").plan;
  EXPECT_TRUE(d.dro_direct);
  EXPECT_EQ(d.group_stages, 6);
  EXPECT_TRUE(d.weight_smem);
  EXPECT_EQ(d.smem_bytes, 6 * 16384 + 8192);
  EXPECT_NE(d.str().find(" dro_direct"), std::string::npos) << d.str();
  const RowPlan n = planned_bwd(262144, f32, f32, true, false, "row=group,dro=direct").plan;
  EXPECT_FALSE(n.dro_direct);
  EXPECT_EQ(n.group_stages, 6);
  EXPECT_FALSE(l.dro_direct);
}

// Planned by itself on sm_90 where it measured faster (group_backward_rows_measured),
// written out as the H200 plan cases gave it: fp32 at N=262144 (dresidual_out read
// directly; LayerNorm bf16 with dresidual_out at N=131072 took them until the bulk ring
// overtook them, test_backward_bulk_rows.cpp); nowhere under another override, NORMKIT_GROUP_ROWS=0,
// sm_100, fp16, mixed dtypes, per-head weights, no dw, a separate dresidual.
TEST(RmsNormPlan, BackwardGroupRowsWhereMeasured) {
  auto measured = [](std::int64_t n, DType x, bool /*center*/, bool /*dro*/) {
    return x == f32 && n == 262144;
  };
  for (const DType x : {bf16, f32})
    for (std::int64_t n : {4096, 32768, 65536, 131072, 262144, 524288})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) {
          const std::string what = std::to_string(n) + (x == bf16 ? " bf16" : " fp32") + (center ? " ln" : " rms") +
                                   (dro ? " dro" : "");
          const RowPlan p = planned_bwd(n, x, x, center, dro, "").plan;
          EXPECT_EQ(p.group_stages > 0, measured(n, x, center, dro)) << what << " " << p.str();
          if (!measured(n, x, center, dro)) continue;
          // The shape row=group asks for; fp32's dresidual_out read directly (dro=direct).
          EXPECT_EQ(p.dro_direct, x == f32 && dro) << what << " " << p.str();
          const RowPlan forced =
              planned_bwd(n, x, x, center, dro, x == f32 && dro ? "row=group,dro=direct" : "row=group").plan;
          EXPECT_EQ(p.str(), forced.str()) << what;
          EXPECT_EQ(planned_bwd(n, x, x, center, dro, "row=regs").plan.group_stages, 0) << what;
          EXPECT_EQ(planned_bwd(n, x, x, center, dro, "", 100).plan.group_stages, 0) << what;
          EXPECT_EQ(planned_bwd(n, x, x == f32 ? bf16 : f32, center, dro, "").plan.group_stages, 0) << what;
          RmsBwdSpec b = planned_bwd(n, x, x, center, dro, "");
          b.group_rows_allowed = false;
          EXPECT_EQ(plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90).group_stages, 0) << what;
          b = planned_bwd(n, x, x, center, dro, "");
          b.many_heads = true;
          EXPECT_EQ(plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90).group_stages, 0) << what;
          b = planned_bwd(n, x, x, center, dro, "");
          b.weight = std::nullopt;
          b.dbias = std::nullopt;
          EXPECT_EQ(plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90).group_stages, 0) << what;
          b = planned_bwd(n, x, x, center, dro, "");
          b.dresidual = x;
          EXPECT_EQ(plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90).group_stages, 0) << what;
          if (x == bf16) {
            b = planned_bwd(n, f16, f16, center, dro, "");
            EXPECT_EQ(b.plan.group_stages, 0) << what << " as fp16";
          }
        }
}

// Where row=group cannot apply, the plan is the one without it.
TEST(RmsNormPlan, BackwardGroupRowsWhereNot) {
  auto grouped = [](RmsBwdSpec b, int arch = 90) {
    b.plan = plan_bwd(b, 16 / static_cast<int>(dtype_size(b.x)), arch);
    return b.plan.group_stages > 0;
  };
  RmsBwdSpec base = planned_bwd(262144, f32, f32, false, false, "row=group");
  EXPECT_TRUE(grouped(base));
  RmsBwdSpec s = base;
  EXPECT_FALSE(grouped(s, 80)) << "sm_80 has no bulk copy";
  s = base;
  s.many_heads = true;
  EXPECT_FALSE(grouped(s)) << "per-head weights";
  s = base;
  s.group_rows_allowed = false;
  EXPECT_FALSE(grouped(s)) << "NORMKIT_GROUP_ROWS=0";
  s = base;
  s.dout = bf16;  // 8 bytes a vector beside fp32 h's 16: not a whole 16-byte chunk
  EXPECT_FALSE(grouped(s)) << "dout narrower than h";
  s = base;
  s.x = bf16;  // 16-byte vectors of h, 32 of fp32 dout: fine
  EXPECT_TRUE(grouped(s)) << "h narrower than dout";
  s = base;
  s.dresidual_out = bf16;  // 8 bytes a vector: not a whole 16-byte chunk
  EXPECT_FALSE(grouped(s)) << "bf16 dresidual_out beside fp32 h";
  s = base;
  s.n = 262144 + 4096;  // not a multiple of the slice
  EXPECT_FALSE(grouped(s)) << "N not a multiple of the slice";
  s = planned_bwd(262144 * 4, f32, f32, false, false, "row=group");
  EXPECT_EQ(s.plan.group_stages, 0) << "512 slices, more than a warp's slots";
  s = planned_bwd(262144, f32, f32, false, false, "row=group,minb=8");
  EXPECT_EQ(s.plan.group_stages, 0) << "four stages do not fit an eighth of the SM";
}

// A slot word is never zero (a zeroed slot means "not yet"), and keeps the sum's bits.
TEST(RmsNormPlan, BackwardGroupSlotWord) {
  for (const float v : {0.f, -0.f, 1.f, -3.5f, 1e-30f, -1e30f}) {
    unsigned bits;
    std::memcpy(&bits, &v, 4);
    const unsigned long long w = nk::group_sum_slot(bits);
    EXPECT_NE(w, 0ull);
    EXPECT_EQ(static_cast<unsigned>(w), bits);
  }
}

// The kernels: both norms, bf16, fp16 and fp32, with and without dresidual_out, weights
// of each dtype and none, dx of another dtype, under row=group's shapes (dresidual_out
// staged or read directly): no spills for
// sm_90a (and sm_100a).
TEST_F(RmsNormKernelSweep, GroupRowsBackwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const char* override_text : {"row=group", "row=group,minb=1,ept=32", "row=group,cta=512,minb=1",
                                    "row=group,minb=3,ept=16", "row=group,w=global", "row=group,dro=direct"})
    for (const DType x : {bf16, f16, f32})
      for (std::int64_t n : {32768, 131072, 262144})
        for (const bool center : {false, true})
          for (const bool dro : {false, true}) {
            RmsBwdSpec b = planned_bwd(n, x, x, center, dro, override_text);
            if (b.plan.group_stages == 0) continue;
            kernels += expect_bwd_clean(b, "sm_90a");
          }
  for (const bool center : {false, true})
    for (const DType x : {bf16, f32}) {
      RmsBwdSpec b = planned_bwd(65536, x, x, center, false, "row=group");
      b.weight = std::nullopt;
      b.dbias = std::nullopt;
      b.dx = x == bf16 ? f32 : bf16;
      b.dresidual = x;
      b.plan = plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90);
      ASSERT_GT(b.plan.group_stages, 0) << b.plan.str();
      kernels += expect_bwd_clean(b, "sm_90a");
      b = planned_bwd(65536, x, x == bf16 ? f32 : bf16, center, true, "row=group");
      ASSERT_GT(b.plan.group_stages, 0) << b.plan.str();
      kernels += expect_bwd_clean(b, "sm_90a");
      b = planned_bwd(262144, x, x, center, true, "row=group", 100);
      ASSERT_GT(b.plan.group_stages, 0) << b.plan.str();
      kernels += expect_bwd_clean(b, "sm_100a");
    }
  EXPECT_GT(kernels, 100);
}
