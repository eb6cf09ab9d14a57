// NORMKIT_FORWARD_PLAN's row=bulk (RowPlan::bulk_stages, norm_fwd_bulk_kernel,
// with_bulk_rows in rmsnorm_heuristics_fwd.cpp): which calls take it, the cluster,
// threads, stages and shared memory it asks for (with and without a residual), the
// layout the kernel and the host share, the override's parsing, and its kernels
// compiled without spills.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_sweep_fixture.hpp"
#include "normkit/norm/params.cuh"
#include "normkit/runtime/config.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

namespace {

// A forward spec without a residual (x, weight and, for LayerNorm, bias of `w`),
// planned for sm_90 (or `arch`) under NORMKIT_FORWARD_PLAN=`override_text`.
RmsFwdSpec bulk_spec(std::int64_t n, DType x, std::optional<DType> w, bool center, const char* override_text,
                     int arch = 90, std::optional<DType> residual = std::nullopt) {
  RmsFwdSpec f = norm_fwd_spec(n, x, w.value_or(x), center, residual, true);
  f.weight = w;
  f.bias = center ? w : std::nullopt;
  f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", override_text);
  f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), arch);
  return f;
}

}  // namespace

TEST(RmsNormPlan, BulkRowsOverrideParses) {
  const auto o = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk,minb=2");
  EXPECT_TRUE(o.bulk_rows);
  EXPECT_EQ(o.smem_row, 0);
  EXPECT_TRUE(o.any());
  EXPECT_FALSE(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=smem").bulk_rows);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=ring"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=smem"), normkit::Error);
  // cluster= and stages= go with row=bulk in the forward.
  const auto shaped = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk,cluster=8,stages=3");
  EXPECT_EQ(shaped.cluster, 8);
  EXPECT_EQ(shaped.bulk_stages, 3);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "cluster=8"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "stages=3"), normkit::Error);
  // One stage: the forward's ring only.
  EXPECT_EQ(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk,stages=1").bulk_stages, 1);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,stages=1"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk,stages=0"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk,stages=9"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "stages=3"), normkit::Error);
}

// Planned by itself on sm_90 where it measured faster (bulk_rows_measured), written
// out here as the H200 table gave it: (n, x, center, residual).
TEST(RmsNormPlan, BulkRowsWhereMeasured) {
  auto measured = [](std::int64_t n, DType x, bool center, bool residual) {
    if (n < 32768 || n > 262144) return false;
    if (x == bf16) return residual ? n == 262144 || (center && n == 131072) : n == 131072 || n == 262144;
    if (center) return n <= 131072 || (!residual && n == 262144);
    return residual ? n >= 32768 && n <= 131072 : n >= 65536;
  };
  // RMSNorm fp32 over 8 CTAs where that measured faster than the ring's own cluster,
  // and bf16 without a residual in several CTAs an SM (bulk_rows_measured_ctas).
  auto measured_ctas = [](std::int64_t n, DType x, bool center, bool residual) -> std::string {
    // LayerNorm: one stage where its weight and bias slices would not fit beside two.
    if (x == f32 && center && !residual) {
      if (n == 131072) return ",cta=256,minb=2,cluster=16,stages=1";
      if (n == 262144) return ",cta=512,minb=1,cluster=16,stages=1";
    }
    if (x == bf16 && center) {
      if (n == 131072) return residual ? ",cta=256,minb=2,cluster=16,stages=1" : ",cta=128,minb=3,cluster=16";
      if (n == 262144 && !residual) return ",cta=256,minb=2,cluster=16,stages=1";
    }
    if (x == f32 && !center && !residual && n == 65536) return ",cta=256,minb=2,cluster=8";
    if (x == f32 && !center && n <= (residual ? 65536 : 131072)) return ",cluster=8";
    if (x == bf16 && !center && !residual) return n == 131072 ? ",cta=128,minb=4,cluster=16" : ",cta=256,minb=2,cluster=16";
    return "";
  };
  for (const DType x : {bf16, f32})
    for (std::int64_t n : {256, 1024, 4096, 16384, 32768, 65536, 131072, 262144, 524288})
      for (const bool center : {false, true})
        for (const bool residual : {false, true}) {
          const auto r = residual ? std::optional<DType>(x) : std::nullopt;
          const RowPlan p = bulk_spec(n, x, x, center, "", 90, r).plan;
          EXPECT_EQ(p.bulk_stages > 0, measured(n, x, center, residual))
              << n << " " << (x == bf16 ? "bf16" : "fp32") << " center " << center << " residual " << residual << " "
              << p.str();
          if (!measured(n, x, center, residual)) continue;
          // The plan row=bulk asks for; none of it under row=regs, on sm_100, with
          // another override, a weight of another width, a residual of another width, in
          // calls of few rows.
          const std::string ctas = measured_ctas(n, x, center, residual);
          const std::string asked = "row=bulk" + ctas;
          EXPECT_EQ(p.str(), bulk_spec(n, x, x, center, asked.c_str(), 90, r).plan.str()) << n;
          if (x == f32 && !center && !ctas.empty()) {
            EXPECT_EQ(p.cluster, 8) << n;
          }
          if (x == bf16 && (!residual || center) && !ctas.empty()) {
            EXPECT_EQ(p.cluster, 16) << n;
            EXPECT_EQ(p.tpr * p.min_blocks, center && !residual && n == 131072 ? 384 : 512) << n << " " << p.str();
          }
          // LayerNorm's weight and bias slices in shared memory, beside two stages or one.
          if (center && !ctas.empty()) {
            EXPECT_TRUE(p.params_smem) << p.str();
            EXPECT_EQ(p.bulk_stages == 1, ctas.find("stages=1") != std::string::npos) << p.str();
          }
          EXPECT_EQ(bulk_spec(n, x, x, center, "row=regs", 90, r).plan.bulk_stages, 0) << n;
          EXPECT_EQ(bulk_spec(n, x, x, center, "", 100, r).plan.bulk_stages, 0) << n;
          EXPECT_EQ(bulk_spec(n, x, x, center, "cta=512", 90, r).plan.bulk_stages, 0) << n;
          EXPECT_EQ(bulk_spec(n, x, x == bf16 ? f32 : bf16, center, "", 90, r).plan.bulk_stages, 0) << n;
          if (x == bf16) {  // fp16 not measured
            EXPECT_EQ(bulk_spec(n, f16, f16, center, "", 90, residual ? std::optional<DType>(f16) : std::nullopt)
                          .plan.bulk_stages,
                      0)
                << n;
          }
          if (residual) {
            EXPECT_EQ(bulk_spec(n, x, x, center, "", 90, x == bf16 ? f32 : bf16).plan.bulk_stages, 0) << n;
          }
          RmsFwdSpec few = norm_fwd_spec(n, x, x, center, r, true);
          few.few_rows = true;
          EXPECT_EQ(plan_fwd(few, 16 / static_cast<int>(dtype_size(x)), 90).bulk_stages, 0) << n;
        }
}

// Slices of at most 32 KB over the smallest cluster that gives them, 512 threads, and
// as many stages (up to eight) as 227 KB hold beside the parameters' slices.
TEST(RmsNormPlan, BulkRowsShape) {
  // bf16 N=262144 with a bf16 weight: 16 CTAs of 32 KB slices; (227 - 2 - 32) / 32 = 6 stages.
  RowPlan p = bulk_spec(262144, bf16, bf16, false, "row=bulk").plan;
  EXPECT_EQ(p.bulk_stages, 6) << p.str();
  EXPECT_EQ(p.cluster, 16);
  EXPECT_EQ(p.tpr, 512);
  EXPECT_EQ(p.rows, 1);
  EXPECT_EQ(p.vec, 8);
  EXPECT_EQ(p.min_blocks, 1);
  EXPECT_FALSE(p.prefetch || p.smem_row || p.early_params);
  EXPECT_TRUE(p.params_smem);
  EXPECT_EQ(p.smem_bytes, 6 * 32768 + 32768);
  // LayerNorm: weight and bias slices, five stages.
  p = bulk_spec(262144, bf16, bf16, true, "row=bulk").plan;
  EXPECT_EQ(p.bulk_stages, 5) << p.str();
  EXPECT_EQ(p.smem_bytes, 5 * 32768 + 2 * 32768);
  // N=65536 over 4 CTAs, N=16384 one CTA.
  EXPECT_EQ(bulk_spec(65536, bf16, bf16, false, "row=bulk").plan.cluster, 4);
  EXPECT_EQ(bulk_spec(16384, bf16, bf16, false, "row=bulk").plan.cluster, 1);
  // fp32 N=262144 needs 64 KB slices at 16 CTAs: (227 - 2 - 64) / 64 = 2 stages.
  p = bulk_spec(262144, f32, f32, false, "row=bulk").plan;
  EXPECT_EQ(p.cluster, 16);
  EXPECT_EQ(p.bulk_stages, 2) << p.str();
  // LayerNorm fp32 N=262144: weight and bias (128 KB) would leave one stage, so they
  // stay in global memory and three stages fit; likewise under NORMKIT_PARAMS_SMEM=0.
  p = bulk_spec(262144, f32, f32, true, "row=bulk").plan;
  EXPECT_FALSE(p.params_smem) << p.str();
  EXPECT_EQ(p.bulk_stages, 3);
  EXPECT_EQ(p.smem_bytes, 3 * 65536);
  RmsFwdSpec no_params = bulk_spec(262144, bf16, bf16, false, "");
  no_params.params_smem_allowed = false;
  no_params.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk");
  no_params.plan = plan_fwd(no_params, 8, 90);
  EXPECT_FALSE(no_params.plan.params_smem);
  EXPECT_EQ(no_params.plan.bulk_stages, 7);  // 225 / 32
  EXPECT_EQ(no_params.plan.smem_bytes, 7 * 32768);
  // No weight: the stages take it all (eight at most).
  EXPECT_EQ(bulk_spec(262144, bf16, std::nullopt, false, "row=bulk").plan.bulk_stages, 7);
  EXPECT_EQ(bulk_spec(8192, bf16, std::nullopt, false, "row=bulk").plan.bulk_stages, 8);
  // minb=2: half the shared memory each, fewer stages; cta= sets the threads.
  p = bulk_spec(262144, bf16, bf16, false, "row=bulk,minb=2").plan;
  EXPECT_EQ(p.min_blocks, 2);
  EXPECT_EQ(p.bulk_stages, 2) << p.str();  // (113.5 - 2 - 32) / 32
  EXPECT_TRUE(p.params_smem);
  p = bulk_spec(262144, bf16, bf16, true, "row=bulk,minb=2").plan;
  EXPECT_FALSE(p.params_smem);  // (113.5 - 2 - 64) / 32 is one stage
  EXPECT_EQ(p.bulk_stages, 3);
  EXPECT_EQ(bulk_spec(262144, bf16, bf16, false, "row=bulk,cta=256").plan.tpr, 256);
  // cluster= and stages= forced: N=262144 over 8 CTAs (64 KB slices, (225 - 64) / 64 = 2
  // stages with the weight), three stages (then without the weight's slice), a cluster
  // that does not divide the row's vectors (refused), more stages than fit (refused).
  p = bulk_spec(262144, bf16, bf16, false, "row=bulk,cluster=8").plan;
  EXPECT_EQ(p.cluster, 8) << p.str();
  EXPECT_EQ(p.bulk_stages, 2);
  EXPECT_TRUE(p.params_smem);
  p = bulk_spec(262144, bf16, bf16, false, "row=bulk,cluster=8,stages=3").plan;
  EXPECT_EQ(p.bulk_stages, 3) << p.str();
  EXPECT_FALSE(p.params_smem);
  EXPECT_EQ(p.smem_bytes, 3 * 65536);
  p = bulk_spec(262144, bf16, bf16, false, "row=bulk,stages=2").plan;
  EXPECT_EQ(p.cluster, 16);
  EXPECT_EQ(p.bulk_stages, 2);
  EXPECT_EQ(p.smem_bytes, 2 * 32768 + 32768);
  EXPECT_EQ(bulk_spec(20000, f32, f32, false, "row=bulk,cluster=16").plan.bulk_stages, 0);  // 5000 vectors
  EXPECT_EQ(bulk_spec(262144, bf16, bf16, false, "row=bulk,cluster=2,stages=2").plan.bulk_stages, 0);
  // Short slices take fewer threads (at least 64): N=2048 bf16 is 256 vectors.
  EXPECT_EQ(bulk_spec(2048, bf16, bf16, false, "row=bulk").plan.tpr, 256);
  EXPECT_EQ(bulk_spec(256, bf16, bf16, false, "row=bulk").plan.tpr, 64);
  // A bf16 residual doubles the stage: N=65536 over 8 CTAs (32 KB stages), N=262144
  // over 16 (64 KB: (227 - 2 - 32) / 64 = 3 stages).
  p = bulk_spec(65536, bf16, bf16, false, "row=bulk", 90, bf16).plan;
  EXPECT_EQ(p.cluster, 8) << p.str();
  EXPECT_EQ(p.bulk_stages, 6);
  EXPECT_EQ(p.smem_bytes, 6 * 32768 + 16384);
  p = bulk_spec(262144, bf16, bf16, false, "row=bulk", 90, bf16).plan;
  EXPECT_EQ(p.cluster, 16) << p.str();
  EXPECT_EQ(p.bulk_stages, 3);
  // fp32 x with an fp32 residual at N=262144: 128 KB stages leave one; refused.
  EXPECT_EQ(bulk_spec(262144, f32, f32, false, "row=bulk", 90, f32).plan.bulk_stages, 0);
}

// Where it cannot apply the plan is the one without the override.
TEST(RmsNormPlan, BulkRowsNotWhereItCannotApply) {
  auto unchanged = [](const RmsFwdSpec& f, const char* why) {
    EXPECT_EQ(f.plan.bulk_stages, 0) << why << ": " << f.plan.str();
  };
  unchanged(bulk_spec(65536, bf16, bf16, false, "row=bulk", 80), "sm_80");
  unchanged(bulk_spec(4097, bf16, bf16, false, "row=bulk"), "odd N");
  // fp32 x takes 4-element vectors: a bf16 residual's are 8 bytes, not whole chunks.
  unchanged(bulk_spec(65536, f32, f32, false, "row=bulk", 90, bf16), "8-byte residual items");
  RmsFwdSpec narrow = bulk_spec(65536, bf16, bf16, false, "");
  narrow.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=bulk");
  narrow.plan = plan_fwd(narrow, 4, 90);  // 8-byte vectors (the data's alignment)
  unchanged(narrow, "8-byte vectors");
  // fp32 N=262144 under minb=4: a 64 KB slice leaves no room for two stages.
  unchanged(bulk_spec(262144, f32, f32, false, "row=bulk,minb=4"), "no two stages");
  // 32-thread CTAs: the cluster exchange needs two warps.
  unchanged(bulk_spec(65536, bf16, bf16, false, "row=bulk,cta=32"), "one warp");
}

// The host sizes the dynamic shared memory with the kernel's own layout function:
// the weight and bias slices only where both are whole 16-byte chunks.
TEST(RmsNormPlan, BulkRowsLayout) {
  const nk::BulkRowsLayout l = nk::bulk_rows_layout(2048, 8, 2, 0, 2, 2, 5);
  EXPECT_EQ(l.x_bytes, 32768u);
  EXPECT_EQ(l.slice_bytes, 32768u);
  EXPECT_EQ(l.weight_bytes, 32768u);
  EXPECT_EQ(l.params_bytes, 65536u);
  EXPECT_EQ(l.total_bytes, 5u * 32768u + 65536u);
  // fp32 x (4 elements a vector) and a bf16 weight: 3 vectors give 24 bytes, not whole chunks.
  const nk::BulkRowsLayout odd = nk::bulk_rows_layout(3, 4, 4, 0, 2, 0, 2);
  EXPECT_EQ(odd.params_bytes, 0u);
  EXPECT_EQ(odd.total_bytes, 2u * 48u);
  EXPECT_EQ(nk::bulk_rows_layout(16, 8, 2, 0, 0, 0, 3).params_bytes, 0u);  // no weight, no bias
  // A residual (fp32 beside bf16 x): each stage x's slice, then the residual's.
  const nk::BulkRowsLayout res = nk::bulk_rows_layout(1024, 8, 2, 4, 2, 0, 3);
  EXPECT_EQ(res.x_bytes, 16384u);
  EXPECT_EQ(res.slice_bytes, 16384u + 32768u);
  EXPECT_EQ(res.total_bytes, 3u * (16384u + 32768u) + 16384u);
}

// The kernels of the override for the sweep's long rows and a few others, both
// norms, bf16, fp16 and fp32 x with weights of each dtype (and none), outputs of
// another dtype, with and without the statistics: no spills for sm_90a.
TEST_F(RmsNormKernelSweep, BulkRowsForwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const char* override_text :
       {"row=bulk", "row=bulk,minb=2", "row=bulk,cta=1024", "row=bulk,stages=3", "row=bulk,cluster=16"})
    for (const DType x : {bf16, f16, f32})
      for (std::int64_t n : {2048, 16384, 65536, 131072, 200000, 262144})
        for (const bool center : {false, true}) {
          RmsFwdSpec f = bulk_spec(n, x, x, center, override_text);
          if (f.plan.bulk_stages == 0) continue;
          expect_fwd_clean(f, "sm_90a");
          ++kernels;
        }
  for (const std::optional<DType> w : {std::optional<DType>(), std::optional<DType>(f32), std::optional<DType>(bf16)})
    for (const DType x : {bf16, f32})
      for (const bool center : {false, true})
        for (const bool stats : {false, true}) {
          RmsFwdSpec f = bulk_spec(131072, x, w, center, "row=bulk");
          f.store_rstd = stats;
          f.out = x == bf16 ? f32 : bf16;
          ASSERT_GT(f.plan.bulk_stages, 0) << f.plan.str();
          expect_fwd_clean(f, "sm_90a");
          ++kernels;
        }
  // The plans' own several CTAs an SM (bulk_rows_measured_ctas): RMSNorm without a
  // residual, bf16 with a weight of either 16-bit dtype and fp32, rstd stored or not, a
  // 16-bit or fp32 output; LayerNorm with its bias: bf16 at N=131072 (three CTAs an SM;
  // with a residual two, one stage) and 262144 (two, one stage), fp32 at N=131072 (two,
  // one stage) and 262144 (one of 512, one stage).
  for (const auto& [n, x, center, residual] :
       {std::tuple{131072, bf16, false, false}, std::tuple{262144, bf16, false, false},
        std::tuple{65536, f32, false, false}, std::tuple{131072, bf16, true, false}, std::tuple{131072, bf16, true, true},
        std::tuple{262144, bf16, true, false}, std::tuple{131072, f32, true, false}, std::tuple{262144, f32, true, false}})
    for (const DType w : x == f32 ? std::vector<DType>{f32} : std::vector<DType>{bf16, f16})
      for (const bool stats : {false, true})
        for (const DType out : {bf16, f32}) {
          RmsFwdSpec f = bulk_spec(n, x, w, center, "", 90, residual ? std::optional<DType>(x) : std::nullopt);
          f.store_rstd = stats;
          f.out = out;
          f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 90);
          ASSERT_GT(f.plan.bulk_stages, 0) << n << " " << f.plan.str();
          ASSERT_TRUE(f.plan.min_blocks > 1 || f.plan.bulk_stages == 1) << n << " " << f.plan.str();
          expect_fwd_clean(f, "sm_90a");
          ++kernels;
        }
  // With a residual (of x's dtype, and fp32 beside 16-bit x), residual_out stored or not.
  for (const DType x : {bf16, f32})
    for (const DType r : {bf16, f32})
      for (std::int64_t n : {16384, 65536, 131072, 262144})
        for (const bool center : {false, true})
          for (const bool residual_out : {false, true}) {
            if (x == f32 && r == bf16) continue;  // 8-byte residual items: not planned
            RmsFwdSpec f = bulk_spec(n, x, x, center, "row=bulk", 90, r);
            if (!residual_out) f.residual_out.reset();
            if (f.plan.bulk_stages == 0) continue;
            expect_fwd_clean(f, "sm_90a");
            ++kernels;
          }
  // sm_100a: the plan is the same there (arch >= 90); a few of the long rows.
  for (const DType x : {bf16, f32})
    for (const bool center : {false, true})
      for (const std::optional<DType> r : {std::optional<DType>(), std::optional<DType>(x)}) {
        RmsFwdSpec f = bulk_spec(131072, x, x, center, "row=bulk", 100, r);
        ASSERT_GT(f.plan.bulk_stages, 0) << f.plan.str();
        expect_fwd_clean(f, "sm_100a");
        ++kernels;
      }
  EXPECT_GE(kernels, 136);
}

// The shapes tests/python/test_forward_bulk_rows_gpu.py runs under each of its
// overrides are planned as the ring it means to test (torch's allocations are
// 256-byte aligned: 16-byte vectors), with the clusters and stages its ids name.
TEST(RmsNormPlan, BulkRowsPlansTheGpuTestShapes) {
  struct Shape {
    DType x;
    std::optional<DType> w;
    std::int64_t n;
    int cluster;
  };
  const Shape shapes[] = {{bf16, bf16, 262144, 16}, {f32, f32, 262144, 16}, {f16, f32, 65536, 4},
                          {bf16, bf16, 200000, 8},  {f32, bf16, 20000, 4},  {bf16, std::nullopt, 2048, 1}};
  for (const char* override_text : {"row=bulk", "row=bulk,minb=2", "row=bulk,cta=1024"})
    for (const Shape& s : shapes)
      for (const bool center : {false, true}) {
        const std::string what = std::string(override_text) + " n=" + std::to_string(s.n);
        const RowPlan p = bulk_spec(s.n, s.x, s.w, center, override_text).plan;
        // fp32 N=262144's 64 KB slices leave no two stages for two CTAs an SM, and N=200000's
        // seven vectors a thread are more registers than two CTAs an SM leave: the Python
        // test leaves those pairings out.
        if (std::string(override_text) == "row=bulk,minb=2" && (s.x == f32 ? s.n == 262144 : s.n == 200000)) {
          EXPECT_EQ(p.bulk_stages, 0) << what;
          continue;
        }
        EXPECT_GE(p.bulk_stages, 2) << what << " " << p.str();
        EXPECT_EQ(p.cluster, s.cluster) << what;
      }
  // The slice of fp32 N=20000 over 4 CTAs is 1250 vectors: 512 threads own 3, 2 or 2.
  const RowPlan partial = bulk_spec(20000, f32, bf16, false, "row=bulk").plan;
  EXPECT_NE(1250 % partial.threads(), 0);
  // The residual shapes (x, residual): bf16 N=262144 over 16 CTAs, bf16 with fp32 N=65536,
  // fp32 N=32768, bf16 N=4096 in one CTA; under minb=2 too, but N=262144 (its 64 KB
  // stages leave no two for two CTAs an SM, and the Python test leaves it out).
  for (const char* override_text : {"row=bulk", "row=bulk,minb=2"})
    for (const auto& [x, r, n] : {std::tuple{bf16, bf16, 262144}, std::tuple{bf16, f32, 65536},
                                  std::tuple{f32, f32, 32768}, std::tuple{bf16, bf16, 4096}})
      for (const bool center : {false, true}) {
        const int stages = bulk_spec(n, x, x, center, override_text, 90, r).plan.bulk_stages;
        if (std::string(override_text) == "row=bulk,minb=2" && n == 262144) {
          EXPECT_EQ(stages, 0);
          continue;
        }
        EXPECT_GE(stages, 2) << override_text << " n=" << n;
      }
  // Per-head rows (N=16384, one CTA) and the 8-byte-aligned weight's rows (fp32 N=65536).
  EXPECT_GE(bulk_spec(16384, bf16, bf16, true, "row=bulk").plan.bulk_stages, 2);
  EXPECT_GE(bulk_spec(65536, f32, bf16, true, "row=bulk").plan.bulk_stages, 2);
}
