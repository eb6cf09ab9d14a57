// Grouped forward rows (RowPlan::group_stages, norm_fwd_group_kernel, with_group_rows
// and with_measured_group_rows in rmsnorm_heuristics_group.cpp): which calls take them,
// the slices, stages and shared memory they ask for, the slot word the kernel and the
// host tests share, NORMKIT_FORWARD_PLAN's row=group, and the kernels compiled
// without spills.
#include <gtest/gtest.h>

#include <cmath>
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

namespace {

// A forward spec (weight and LayerNorm's bias of `w`, a residual of `residual` with
// residual_out stored) planned for sm_90 (or `arch`) under NORMKIT_FORWARD_PLAN=`override_text`.
RmsFwdSpec group_spec(std::int64_t n, DType x, std::optional<DType> w, bool center, const char* override_text,
                      std::optional<DType> residual = std::nullopt, int arch = 90) {
  RmsFwdSpec f = norm_fwd_spec(n, x, w.value_or(x), center, residual, true);
  f.weight = w;
  f.bias = center ? w : std::nullopt;
  f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", override_text);
  f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), arch);
  return f;
}

std::int64_t slices(const RowPlan& p, std::int64_t n) { return n / p.vec / (std::int64_t{p.tpr} * p.split_items); }

float bits_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
unsigned float_bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST(RmsNormPlan, GroupRowsOverrideParses) {
  const auto o = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group,minb=3,stages=5");
  EXPECT_TRUE(o.group_rows);
  EXPECT_FALSE(o.bulk_rows);
  EXPECT_EQ(o.smem_row, 0);
  EXPECT_EQ(o.bulk_stages, 5);
  EXPECT_TRUE(o.any());
  EXPECT_TRUE(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group").any());
  // stages= below the four the lookahead needs (the backward's row=group:
  // test_backward_group_rows.cpp).
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group,stages=3"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group,cluster=4"), normkit::Error);
}

// Planned by itself on sm_90 where it measured faster (group_rows_measured), written
// out here as the H200 prototype's table gave it: fp32 only, and not LayerNorm without a
// residual, which the bulk ring over 16 CTAs in one stage took over (test_forward_bulk_rows.cpp).
TEST(RmsNormPlan, GroupRowsWhereMeasured) {
  // Both norms alike: center does not enter.
  auto measured = [](std::int64_t n, DType x, bool residual) { return x == f32 && n == 262144 && residual; };
  for (const DType x : {bf16, f32})
    for (std::int64_t n : {4096, 16384, 32768, 65536, 131072, 262144, 524288})
      for (const bool center : {false, true})
        for (const bool residual : {false, true}) {
          const auto r = residual ? std::optional<DType>(x) : std::nullopt;
          const RowPlan p = group_spec(n, x, x, center, "", r).plan;
          const std::string what = std::to_string(n) + (x == bf16 ? " bf16" : " fp32") + (center ? " ln" : " rms") +
                                   (residual ? " residual " : " ") + p.str();
          EXPECT_EQ(p.group_stages > 0, measured(n, x, residual)) << what;
          if (!measured(n, x, residual)) continue;
          EXPECT_EQ(p.bulk_stages, 0) << what;
          EXPECT_EQ(p.cluster, 1) << what;
          // None under row=regs, on sm_100, with a weight of another width, a residual
          // of another width, in calls of few rows, or where the host refuses it.
          EXPECT_EQ(group_spec(n, x, x, center, "row=regs", r).plan.group_stages, 0) << what;
          EXPECT_EQ(group_spec(n, x, x, center, "", r, 100).plan.group_stages, 0) << what;
          EXPECT_EQ(group_spec(n, x, bf16, center, "", r).plan.group_stages, 0) << what;
          if (residual) {
            EXPECT_EQ(group_spec(n, x, x, center, "", bf16).plan.group_stages, 0) << what;
          }
          RmsFwdSpec few = norm_fwd_spec(n, x, x, center, r, true);
          few.few_rows = true;
          EXPECT_EQ(plan_fwd(few, 4, 90).group_stages, 0) << what;
          RmsFwdSpec refused = norm_fwd_spec(n, x, x, center, r, true);
          refused.group_rows_allowed = false;
          const RowPlan without = plan_fwd(refused, 4, 90);
          EXPECT_EQ(without.group_stages, 0) << what;
          // Refused, the plan is the one the measured rule would otherwise leave: no
          // forced shape of the group's left behind.
          RmsFwdSpec regs = norm_fwd_spec(n, x, x, center, r, true);
          regs.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=regs");
          EXPECT_TRUE(without.bulk_stages > 0 || without.str() == plan_fwd(regs, 4, 90).str()) << without.str();
        }
  // Not without residual_out stored (the measured calls store it).
  RmsFwdSpec no_res_out = norm_fwd_spec(65536, f32, f32, false, f32, true);
  no_res_out.residual_out.reset();
  EXPECT_EQ(plan_fwd(no_res_out, 4, 90).group_stages, 0);
}

// The in-place fused add (RmsFwdSpec::in_place) plans the same grouped rows and asks
// for the kernel's COOPERATIVE instantiation; every other kernel's source is unchanged.
TEST(RmsNormPlan, GroupRowsInPlace) {
  for (const bool center : {false, true}) {
    RmsFwdSpec f = group_spec(262144, f32, f32, center, "", f32);
    RmsFwdSpec in_place = f;
    in_place.in_place = true;
    in_place.plan = plan_fwd(in_place, 4, 90);
    ASSERT_GT(in_place.plan.group_stages, 0);
    EXPECT_EQ(in_place.plan.str(), f.plan.str());
    const std::string args = fwd_source(in_place).template_args;
    const std::string plain = fwd_source(f).template_args;
    EXPECT_EQ(args, plain.substr(0, plain.size() - 1) + ", true>");
    // Other plans: the flag does not enter their source.
    for (const char* other : {"row=regs", "row=bulk,cluster=16"}) {
      RmsFwdSpec o = group_spec(262144, f32, f32, center, other, f32);
      RmsFwdSpec o_in_place = o;
      o_in_place.in_place = true;
      EXPECT_EQ(fwd_source(o_in_place).template_args, fwd_source(o).template_args) << other;
    }
  }
}

// The measured shapes: CTA threads, vectors a thread, CTAs per SM, the stages that fit
// and whether the parameters' slices sit beside them.
TEST(RmsNormPlan, GroupRowsShape) {
  // RMSNorm fp32 with a residual N=262144: 256 threads x 2 vectors (8 KB of x, 8 of the
  // residual a stage), 128 slices, two CTAs an SM: (113.5 - 2 - 8) / 16 = 6 stages beside
  // the weight's 8 KB slice.
  RowPlan p = group_spec(262144, f32, f32, false, "", f32).plan;
  EXPECT_EQ(p.tpr, 256) << p.str();
  EXPECT_EQ(p.split_items, 2);
  EXPECT_EQ(p.min_blocks, 2);
  EXPECT_EQ(slices(p, 262144), 128);
  EXPECT_EQ(p.group_stages, 6);
  EXPECT_TRUE(p.params_smem);
  EXPECT_EQ(p.smem_bytes, 6 * 16384 + 8192);
  EXPECT_TRUE(p.regs);  // each row read once: the in-place add's guard passes
  // LayerNorm with a residual: two CTAs an SM too (row=group's own shape), whose
  // (113.5 - 2 - 16) / 16 = 5.97 hold five stages beside the 16 KB of weight and bias.
  p = group_spec(262144, f32, f32, true, "", f32).plan;
  EXPECT_EQ(p.min_blocks, 2) << p.str();
  EXPECT_TRUE(p.params_smem);
  EXPECT_EQ(p.group_stages, 5);
  EXPECT_EQ(p.smem_bytes, 5 * 16384 + 16384);
  EXPECT_EQ(p.str(), group_spec(262144, f32, f32, true, "row=group", f32).plan.str());
  // LayerNorm without one under row=group: 256 x 4 vectors (16 KB slices), 64 of them.
  p = group_spec(262144, f32, f32, true, "row=group,ept=16,minb=3").plan;
  EXPECT_EQ(p.split_items, 4) << p.str();
  EXPECT_EQ(slices(p, 262144), 64);
  EXPECT_EQ(p.group_stages, 4);
  // row=group with one CTA an SM of 512 threads (16 KB slices of x and of the residual):
  // (227 - 2 - 16) / 32 = 6 stages beside the weight's slice; NORMKIT_PARAMS_SMEM=0: 7.
  p = group_spec(65536, f32, f32, false, "row=group,cta=512,minb=1", f32).plan;
  EXPECT_EQ(slices(p, 65536), 16) << p.str();
  EXPECT_EQ(p.group_stages, 6);
  EXPECT_TRUE(p.params_smem);
  EXPECT_EQ(p.smem_bytes, 6 * 32768 + 16384);
  RmsFwdSpec no_params = norm_fwd_spec(65536, f32, f32, false, f32, true);
  no_params.params_smem_allowed = false;
  no_params.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group,cta=512,minb=1");
  const RowPlan q = plan_fwd(no_params, 4, 90);
  EXPECT_FALSE(q.params_smem) << q.str();
  EXPECT_EQ(q.group_stages, 7);  // 225 / 32
}

// row=group for any dtype, shaped by cta=, ept=, minb= and stages=, or refused.
TEST(RmsNormPlan, GroupRowsOverrideShape) {
  RowPlan p = group_spec(131072, bf16, bf16, false, "row=group").plan;
  EXPECT_EQ(p.tpr, 256) << p.str();
  EXPECT_EQ(p.split_items, 2);
  EXPECT_EQ(p.vec, 8);
  EXPECT_EQ(slices(p, 131072), 32);
  EXPECT_EQ(p.min_blocks, 2);
  EXPECT_EQ(p.group_stages, 8);  // (113.5 - 2 - 8) / 8 = 12 beside the weight's slice, at most 8
  EXPECT_TRUE(p.params_smem);
  p = group_spec(131072, bf16, bf16, false, "row=group,cta=512,ept=32,minb=1,stages=4").plan;
  EXPECT_EQ(p.tpr, 512) << p.str();
  EXPECT_EQ(p.split_items, 4);
  EXPECT_EQ(p.min_blocks, 1);
  EXPECT_EQ(p.group_stages, 4);
  // Refused: sm_80, a row the slices do not tile, more than 128 slices, 8-byte vectors,
  // fewer stages than four fit, an fp32 x beside a bf16 residual (8-byte items).
  auto unchanged = [](const RmsFwdSpec& f, const char* why) {
    EXPECT_EQ(f.plan.group_stages, 0) << why << ": " << f.plan.str();
  };
  unchanged(group_spec(131072, bf16, bf16, false, "row=group", std::nullopt, 80), "sm_80");
  unchanged(group_spec(100000, bf16, bf16, false, "row=group"), "N not a multiple of the slice");
  unchanged(group_spec(262144, f32, f32, false, "row=group,cta=64,ept=4"), "256 slices");
  unchanged(group_spec(262144, f32, f32, false, "row=group,ept=64,minb=4"), "64 KB slices, no four stages");
  unchanged(group_spec(65536, f32, f32, false, "row=group", bf16), "8-byte residual items");
  RmsFwdSpec narrow = group_spec(65536, bf16, bf16, false, "");
  narrow.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group");
  narrow.plan = plan_fwd(narrow, 4, 90);
  unchanged(narrow, "8-byte vectors");
}

// The slot word: never 0 (0 is "not yet published"), the moments back bit for bit,
// M2's sign bit the flag (M2 >= 0, or NaN).
TEST(RmsNormPlan, GroupSlotWord) {
  for (const float mean : {0.f, -3.5f, 1e30f, -0.f, std::nanf("")})
    for (const float m2 : {0.f, 2.25f, 1e-30f, 3e38f, std::nanf("")}) {
      const unsigned long long w = nk::group_slot_pack(float_bits(mean), float_bits(m2));
      EXPECT_NE(w, 0ull);
      EXPECT_EQ(nk::group_slot_mean_bits(w), float_bits(mean));
      EXPECT_EQ(nk::group_slot_m2_bits(w), float_bits(m2));
      EXPECT_EQ(std::isnan(bits_float(nk::group_slot_m2_bits(w))), std::isnan(m2));
    }
}

// The shapes tests/python/test_forward_group_rows_gpu.py runs under row=group overrides
// are planned grouped (else that test would check another kernel).
TEST(RmsNormPlan, GroupRowsPlansTheGpuTestShapes) {
  struct Shape {
    const char* override_text;
    DType x;
    std::optional<DType> w;
    std::int64_t n;
    std::optional<DType> residual;
  };
  for (const Shape& s : {Shape{"row=group", f32, f32, 262144, std::nullopt}, Shape{"row=group", bf16, bf16, 131072, std::nullopt},
                         Shape{"row=group", f16, f32, 65536, std::nullopt}, Shape{"row=group", bf16, std::nullopt, 32768, std::nullopt},
                         Shape{"row=group", f32, bf16, 32768, std::nullopt},
                         Shape{"row=group,minb=3,ept=16", f32, f32, 262144, std::nullopt},
                         Shape{"row=group,minb=3,ept=16", bf16, bf16, 131072, std::nullopt},
                         Shape{"row=group,cta=512,minb=1", f32, f32, 65536, std::nullopt},
                         Shape{"row=group", f32, f32, 262144, f32}, Shape{"row=group", f32, f32, 32768, f32},
                         Shape{"row=group", bf16, bf16, 131072, bf16}, Shape{"row=group", bf16, bf16, 65536, f32},
                         Shape{"row=group", f32, f32, 32768, std::nullopt}})
    for (const bool center : {false, true}) {
      RmsFwdSpec f = group_spec(s.n, s.x, s.w, center, s.override_text, s.residual);
      EXPECT_GT(f.plan.group_stages, 0) << s.override_text << " n=" << s.n << " " << f.plan.str();
    }
}

// The kernels: both norms, bf16, fp16 and fp32 x, weights of each dtype and none,
// outputs of another dtype, with and without the statistics and a residual, under the
// override's shapes and the measured plans: no spills for sm_90a (and sm_100a).
TEST_F(RmsNormKernelSweep, GroupRowsForwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const char* override_text : {"", "row=group", "row=group,minb=3,ept=16", "row=group,cta=512,minb=1",
                                    "row=group,minb=1,ept=32"})
    for (const DType x : {bf16, f16, f32})
      for (std::int64_t n : {32768, 65536, 131072, 262144})
        for (const bool center : {false, true})
          for (const bool residual : {false, true}) {
            RmsFwdSpec f = group_spec(n, x, x, center, override_text, residual ? std::optional<DType>(x) : std::nullopt);
            if (f.plan.group_stages == 0) continue;
            expect_fwd_clean(f, "sm_90a");
            ++kernels;
          }
  for (const std::optional<DType> w : {std::optional<DType>(), std::optional<DType>(f32), std::optional<DType>(bf16)})
    for (const DType x : {bf16, f32})
      for (const bool center : {false, true})
        for (const bool stats : {false, true}) {
          RmsFwdSpec f = group_spec(65536, x, w, center, "row=group", x == bf16 ? std::optional<DType>(f32) : std::nullopt);
          f.store_rstd = stats;
          f.out = x == bf16 ? f32 : bf16;
          ASSERT_GT(f.plan.group_stages, 0) << f.plan.str();
          expect_fwd_clean(f, "sm_90a");
          ++kernels;
        }
  // The in-place fused add's kernels (residual and residual_out of x's dtype).
  for (const char* override_text : {"", "row=group", "row=group,minb=3,ept=16"})
    for (const DType x : {bf16, f32})
      for (const bool center : {false, true}) {
        RmsFwdSpec f = group_spec(x == f32 ? 262144 : 131072, x, x, center, override_text, x);
        f.in_place = true;
        f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 90);
        if (f.plan.group_stages == 0) continue;
        ASSERT_NE(fwd_source(f).template_args.find(", true>"), std::string::npos);
        expect_fwd_clean(f, "sm_90a");
        ++kernels;
      }
  for (const bool center : {false, true}) {
    RmsFwdSpec f = group_spec(262144, f32, f32, center, "", f32, 100);
    f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=group");
    f.plan = plan_fwd(f, 4, 100);
    ASSERT_GT(f.plan.group_stages, 0);
    expect_fwd_clean(f, "sm_100a");
    ++kernels;
  }
  EXPECT_GT(kernels, 60);
}
