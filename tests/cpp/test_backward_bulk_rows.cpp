// NORMKIT_BACKWARD_PLAN's row=bulk (RowPlan::bulk_stages in the backward,
// norm_bwd_bulk_kernel, with_bulk_backward_rows in rmsnorm_heuristics_bwd_bulk.cpp): the
// override's parsing, which calls take it, the cluster, threads, stages, weight slice
// and shared memory it asks for, where it cannot apply, and its kernels compiled
// without spills for sm_90a (NVRTC).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "kernel_sweep_fixture.hpp"
#include "normkit/norm/params.cuh"
#include "normkit/runtime/config.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;
namespace rt = normkit::rt;

namespace {

}  // namespace

TEST(RmsNormPlan, BackwardBulkRowsOverrideParses) {
  const auto o = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,stages=3,cluster=8");
  EXPECT_TRUE(o.bulk_rows);
  EXPECT_EQ(o.bulk_stages, 3);
  EXPECT_EQ(o.cluster, 8);
  EXPECT_TRUE(o.any());
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=smem"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "stages=3"), normkit::Error);
  // cluster= alone keeps its backward meaning (register rows over a cluster).
  EXPECT_EQ(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "cluster=4").cluster, 4);
}

// Planned by itself on sm_90 where it measured faster (bulk_backward_rows_measured),
// written out here as the H200 table gave it: (n, x, center, dresidual_out).
TEST(RmsNormPlan, BackwardBulkRowsWhereMeasured) {
  auto long_rows = [](std::int64_t n, DType x, bool center, bool dro) {
    if (n < 16384 || n > 262144) return false;
    if (x == bf16) {
      // With dresidual_out at N=16384 on the shared reads (shared_reads_planned);
      // LayerNorm's at N=131072 since session 42's H100 calls (its grouped rows before).
      if (center) return true;
      // RMSNorm with it at N=131072 over 16 CTAs since 794f92d's H200 call (c01ed0a).
      return dro ? n >= 131072 || n == 16384 : n >= 32768;
    }
    if (n > 131072) return false;  // fp32 N=262144: two stages do not fit
    if (center) return !dro || n == 131072;
    return n >= (dro ? 131072 : 65536);
  };
  // Short bf16 rows (bulk_backward_short_rows_ept): the ept= they measured fastest at.
  auto short_ept = [](std::int64_t n, DType x, bool center, bool dro) {
    if (x != bf16 || n < 256 || n > 16384 || (n & (n - 1)) != 0) return 0;
    if (n == 16384) return !center && !dro ? 32 : 0;
    if (center) return dro ? 16 : n >= 512 ? 32 : 0;
    if (dro) return n >= 1024 && n <= 4096 ? 16 : 0;
    return n == 8192 ? 16 : 0;
  };
  auto measured = [&](std::int64_t n, DType x, bool center, bool dro) {
    return long_rows(n, x, center, dro) || short_ept(n, x, center, dro) > 0;
  };
  // Several CTAs an SM where they measured faster (bulk_backward_measured_ctas):
  // cta=, minb=, cluster= as row=bulk would take them, or "" for the ring's own;
  // LayerNorm with dresidual_out at N=131072 the ring's own CTAs in two stages.
  auto ctas = [](std::int64_t n, DType x, bool center, bool dro) -> std::string {
    if (x != bf16) return "";
    if (center && !dro && n == 16384) return ",cta=128,minb=3,cluster=4";
    if (center && !dro && n == 32768) return ",cta=128,minb=3,cluster=8";
    if (center && dro && n == 32768) return ",cta=256,minb=2,cluster=8";
    if (center && dro && n == 65536) return ",cta=128,minb=3,cluster=16";
    if (center && dro && n == 131072) return ",cluster=16,stages=2";
    if (!center && !dro && n >= 32768 && n <= 131072) return ",cta=256,minb=2,cluster=" + std::to_string(n / 8192);
    return "";
  };
  for (const DType x : {bf16, f32})
    for (std::int64_t n : {256, 512, 1024, 2048, 3072, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) {
          const RowPlan p = planned_bwd(n, x, x, center, dro, "").plan;
          EXPECT_EQ(p.bulk_stages > 0, measured(n, x, center, dro))
              << n << " " << (x == bf16 ? "bf16" : "fp32") << " center " << center << " dro " << dro << " " << p.str();
          if (!measured(n, x, center, dro)) continue;
          // The plan row=bulk asks for; none of it elsewhere: row=regs, sm_100, calls of
          // few rows, another override, a weight of another width, a separate dresidual,
          // no dw.
          const int ept = short_ept(n, x, center, dro);
          const std::string asked = (ept ? "row=bulk,ept=" + std::to_string(ept) : "row=bulk") + ctas(n, x, center, dro);
          EXPECT_EQ(p.str(), planned_bwd(n, x, x, center, dro, asked).plan.str()) << n;
          if (ctas(n, x, center, dro).find("cta=") != std::string::npos) {
            EXPECT_GT(p.min_blocks, 1) << n << " " << p.str();
            // Not where the ring refuses them: 8-byte vectors keep the plan's own rows,
            // not these CTAs.
            const RowPlan narrow = plan_bwd(norm_bwd_spec(n, x, x, center, dro), 4, 90);
            EXPECT_EQ(narrow.bulk_stages, 0) << n;
            EXPECT_FALSE(narrow.tpr == p.tpr && narrow.min_blocks == p.min_blocks && narrow.cluster == p.cluster)
                << n << " " << narrow.str();
          }
          if (ept) {
            EXPECT_EQ(p.rows, 512 / p.tpr) << n << " " << p.str();  // whole rows a stage
          }
          EXPECT_EQ(planned_bwd(n, x, x, center, dro, "row=regs").plan.bulk_stages, 0) << n;
          EXPECT_EQ(planned_bwd(n, x, x, center, dro, "", 100).plan.bulk_stages, 0) << n;
          EXPECT_EQ(planned_bwd(n, x, x, center, dro, "cta=512").plan.bulk_stages, 0) << n;
          EXPECT_EQ(planned_bwd(n, x, x == bf16 ? f32 : bf16, center, dro, "").plan.bulk_stages, 0) << n;
          if (x == bf16) {
            EXPECT_EQ(planned_bwd(n, f16, f16, center, dro, "").plan.bulk_stages, 0) << n;  // not measured
          }
          RmsBwdSpec few = norm_bwd_spec(n, x, x, center, dro);
          few.few_rows = true;
          EXPECT_EQ(plan_bwd(few, 16 / static_cast<int>(dtype_size(x)), 90).bulk_stages, 0) << n;
          RmsBwdSpec dres = norm_bwd_spec(n, x, x, center, true, /*dres=*/true);
          EXPECT_EQ(plan_bwd(dres, 16 / static_cast<int>(dtype_size(x)), 90).bulk_stages, 0) << n;
          if (ept) {  // per-head weights: a group's rows not consecutive
            RmsBwdSpec heads = norm_bwd_spec(n, x, x, center, dro);
            heads.many_heads = true;
            EXPECT_EQ(plan_bwd(heads, 8, 90).bulk_stages, 0) << n;
          }
          RmsBwdSpec no_grads = norm_bwd_spec(n, x, x, center, dro);
          no_grads.weight.reset();
          no_grads.dbias.reset();
          EXPECT_EQ(plan_bwd(no_grads, 16 / static_cast<int>(dtype_size(x)), 90).bulk_stages, 0) << n;
        }
}

TEST(RmsNormPlan, BackwardBulkRowsShape) {
  // bf16 N=262144: h and dout 64 KB a CTA over 16 CTAs; the weight's 32 KB slice beside
  // (227 - 2 - 32) / 64 = 3 stages; 512 threads, four vectors each, 32 dw sums.
  RowPlan p = planned_bwd(262144, bf16, bf16, false, false, "row=bulk").plan;
  EXPECT_EQ(p.bulk_stages, 3) << p.str();
  EXPECT_EQ(p.cluster, 16);
  EXPECT_EQ(p.tpr, 512);
  EXPECT_EQ(p.vec, 8);
  EXPECT_TRUE(p.weight_smem);
  EXPECT_TRUE(p.row_sums && p.regs);
  EXPECT_FALSE(p.prefetch || p.stash || p.split || p.smem_sums || p.async_rows || p.l2_next);
  EXPECT_EQ(p.smem_bytes, 3 * 65536 + 32768);
  // With dresidual_out: 96 KB stages, two, the weight beside them.
  p = planned_bwd(262144, bf16, bf16, true, true, "row=bulk").plan;
  EXPECT_EQ(p.bulk_stages, 2) << p.str();
  EXPECT_TRUE(p.weight_smem);
  EXPECT_EQ(p.smem_bytes, 2 * 98304 + 32768);
  // N=65536 over 4 CTAs; fp32 N=65536 (64 KB stages) over 8.
  EXPECT_EQ(planned_bwd(65536, bf16, bf16, false, false, "row=bulk").plan.cluster, 4);
  EXPECT_EQ(planned_bwd(65536, f32, f32, true, false, "row=bulk").plan.cluster, 8);
  // stages= and cluster=: more stages than fit beside the weight leave it in global memory.
  p = planned_bwd(262144, bf16, bf16, false, false, "row=bulk,stages=3").plan;
  EXPECT_TRUE(p.weight_smem) << p.str();
  EXPECT_EQ(planned_bwd(131072, bf16, bf16, false, false, "row=bulk,stages=2").plan.bulk_stages, 2);
  p = planned_bwd(262144, bf16, bf16, false, false, "row=bulk,cluster=16,stages=2").plan;
  EXPECT_EQ(p.bulk_stages, 2);
  EXPECT_EQ(p.smem_bytes, 2 * 65536 + 32768);
  // A bf16 weight with fp32 h: 4 vectors of 8 bytes; whole chunks over a slice of
  // 16384 elements (fp32 N=262144 over 16, 128 KB stages: one stage, refused).
  EXPECT_EQ(planned_bwd(262144, f32, f32, false, false, "row=bulk").plan.bulk_stages, 0);
  p = planned_bwd(131072, f32, bf16, false, false, "row=bulk").plan;
  EXPECT_EQ(p.cluster, 16) << p.str();
  EXPECT_TRUE(p.weight_smem);
}

TEST(RmsNormPlan, BackwardBulkRowsNotWhereItCannotApply) {
  auto refused = [](const RmsBwdSpec& b, const char* why) {
    EXPECT_EQ(b.plan.bulk_stages, 0) << why << ": " << b.plan.str();
  };
  refused(planned_bwd(65536, bf16, bf16, false, false, "row=bulk", 80), "sm_80");
  refused(planned_bwd(4097, bf16, bf16, false, false, "row=bulk"), "odd N");
  RmsBwdSpec mixed = norm_bwd_spec(65536, f32, f32, false, false);
  mixed.dout = bf16;  // dout narrower than h
  mixed.plan_override = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk");
  mixed.plan = plan_bwd(mixed, 4, 90);
  refused(mixed, "dout of another size");
  // The sums beside ~56 other registers under the cap: 1024 threads (64 registers) keep
  // 8 floats, so fp32 N=65536 over 8 CTAs of two vectors a thread (RMSNorm's dw alone)
  // and not bf16 N=262144 (2 x 8 floats); 128 threads of LayerNorm bf16 N=65536 over 4
  // CTAs hold 16 vectors, 2 x 128 sums, beyond 255 registers.
  EXPECT_EQ(planned_bwd(65536, f32, f32, false, false, "row=bulk,cta=1024").plan.bulk_stages, 3);
  refused(planned_bwd(262144, bf16, bf16, false, false, "row=bulk,cta=1024"), "16 sums at 64 registers");
  refused(planned_bwd(65536, bf16, bf16, true, false, "row=bulk,cta=128"), "sums beyond registers");
  refused(planned_bwd(262144, bf16, bf16, true, false, "row=bulk,minb=2"), "64 sums at 64 registers");
  refused(planned_bwd(262144, bf16, bf16, false, false, "row=bulk,stages=5"), "five stages do not fit");
  refused(planned_bwd(20000, f32, f32, false, false, "row=bulk,cluster=16"), "5000 vectors over 16");
}

// Short rows (the CTA's 512 threads, or cta=, at least twice the row's vectors): a
// stage of several whole rows, one vector a thread unless ept= asks for more, the
// row's threads a power of two (idle ones past N=1536's 192 vectors), the CTA's
// thread count kept; the shared memory counts stages * rows row slices.
TEST(RmsNormPlan, BackwardBulkShortRowsTakeSeveralRowsAStage) {
  struct Case {
    std::int64_t n;
    DType x;
    const char* override_text;
    int tpr, rows;
  };
  for (const Case& c : {Case{1024, bf16, "row=bulk", 128, 4}, Case{256, bf16, "row=bulk", 32, 16},
                        Case{2048, bf16, "row=bulk", 256, 2}, Case{1024, bf16, "row=bulk,ept=16", 64, 8},
                        Case{1024, bf16, "row=bulk,ept=32,cta=256", 32, 8}, Case{1536, bf16, "row=bulk", 256, 2},
                        Case{1024, f32, "row=bulk", 256, 2}, Case{4096, bf16, "row=bulk,cta=1024", 512, 2},
                        Case{4096, bf16, "row=bulk", 512, 1}})
    for (const bool center : {false, true})
      for (const bool dro : {false, true}) {
        const RowPlan p = planned_bwd(c.n, c.x, c.x, center, dro, c.override_text).plan;
        SCOPED_TRACE(std::string(c.override_text) + " n=" + std::to_string(c.n) + " " + p.str());
        if (center && c.tpr * c.rows == 1024) {
          // 1024 threads leave 64 registers: not LayerNorm's 2 x 8 sums beside ~56 others.
          EXPECT_EQ(p.bulk_stages, 0);
          continue;
        }
        EXPECT_GE(p.bulk_stages, 2);
        EXPECT_EQ(p.tpr, c.tpr);
        EXPECT_EQ(p.rows, c.rows);
        EXPECT_EQ(p.cluster, 1);
        const int vec = 16 / static_cast<int>(dtype_size(c.x));
        const int slice_bytes = static_cast<int>(c.n) * static_cast<int>(dtype_size(c.x)) * (dro ? 3 : 2);
        const int weight_bytes = p.weight_smem ? static_cast<int>(c.n * dtype_size(c.x)) : 0;
        EXPECT_EQ(p.smem_bytes, p.bulk_stages * p.rows * slice_bytes + weight_bytes) << vec;
        EXPECT_LE(p.smem_bytes, 227 * 1024 - 2 * 1024);
      }
}

// The GPU test's shapes (tests/python/test_backward_bulk_rows_gpu.py) take it.
TEST(RmsNormPlan, BackwardBulkRowsPlansTheGpuTestShapes) {
  for (const char* override_text : {"row=bulk", "row=bulk,cta=256", "row=bulk,stages=2"})
    for (const auto& [n, x, w] : {std::tuple{262144, bf16, bf16}, std::tuple{65536, f32, f32},
                                  std::tuple{65536, bf16, f32}, std::tuple{20000, f32, f32},
                                  std::tuple{4096, bf16, bf16}, std::tuple{2048, bf16, bf16}})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) {
          const RowPlan p = planned_bwd(n, x, w, center, dro, override_text).plan;
          EXPECT_GE(p.bulk_stages, 2) << override_text << " n=" << n << " center=" << center << " dro=" << dro
                                      << " " << p.str();
        }
  // test_backward_bulk_short_rows: several rows a stage where the CTA's threads are at
  // least twice the row's vectors.
  for (const char* override_text : {"row=bulk", "row=bulk,ept=16", "row=bulk,cta=256,minb=2"})
    for (const auto& [n, x] :
         {std::tuple{256, bf16}, std::tuple{1024, bf16}, std::tuple{1536, bf16}, std::tuple{1024, f32}})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) {
          const RowPlan p = planned_bwd(n, x, x, center, dro, override_text).plan;
          EXPECT_GE(p.bulk_stages, 2) << override_text << " n=" << n << " " << p.str();
          const std::int64_t cta = std::string(override_text).find("cta=256") != std::string::npos ? 256 : 512;
          const std::int64_t nv = n / (16 / static_cast<std::int64_t>(dtype_size(x)));
          EXPECT_EQ(p.rows > 1, cta >= 2 * nv) << override_text << " n=" << n << " " << p.str();
        }
}

TEST_F(RmsNormKernelSweep, BackwardBulkRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const char* override_text :
       {"row=bulk", "row=bulk,cta=1024", "row=bulk,cta=256", "row=bulk,stages=2", "row=bulk,minb=2"})
    for (const auto& [n, x, w] : {std::tuple{262144, bf16, bf16}, std::tuple{131072, bf16, f32},
                                  std::tuple{65536, f32, f32}, std::tuple{65536, f16, f16},
                                  std::tuple{20000, f32, f32}, std::tuple{4096, bf16, bf16},
                                  std::tuple{16384, bf16, bf16}, std::tuple{16384, f16, f16}})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) {
          const RmsBwdSpec b = planned_bwd(n, x, w, center, dro, override_text);
          if (b.plan.bulk_stages == 0) continue;
          kernels += expect_bwd_clean(b, "sm_90a");
        }
  // The plans' own several CTAs an SM (bulk_backward_measured_ctas), under their
  // tighter register caps, with a weight of either 16-bit dtype.
  for (const auto& [n, center, dro] : {std::tuple{16384, true, false}, std::tuple{32768, true, false},
                                       std::tuple{32768, true, true}, std::tuple{65536, true, true},
                                       std::tuple{32768, false, false},
                                       std::tuple{65536, false, false}, std::tuple{131072, false, false}})
    for (const DType w : {bf16, f16}) {
      const RmsBwdSpec b = planned_bwd(n, bf16, w, center, dro, "");
      ASSERT_GT(b.plan.min_blocks, 1) << n << " " << b.plan.str();
      ASSERT_GT(b.plan.bulk_stages, 0) << n << " " << b.plan.str();
      kernels += expect_bwd_clean(b, "sm_90a");
    }
  // Without a weight (RMSNorm: no dw, nothing to reduce), and with a separate dresidual.
  RmsBwdSpec plain = planned_bwd(131072, bf16, bf16, false, false, "row=bulk");
  plain.weight.reset();
  plain.plan = plan_bwd(plain, 8, 90);
  ASSERT_GT(plain.plan.bulk_stages, 0) << plain.plan.str();
  kernels += expect_bwd_clean(plain, "sm_90a");
  RmsBwdSpec dres = norm_bwd_spec(65536, bf16, bf16, true, true, true);
  dres.plan_override = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk");
  dres.plan = plan_bwd(dres, 8, 90);
  ASSERT_GT(dres.plan.bulk_stages, 0) << dres.plan.str();
  kernels += expect_bwd_clean(dres, "sm_90a");
  EXPECT_GE(kernels, 72);
}

TEST_F(RmsNormKernelSweep, BackwardBulkShortRowsCompileWithoutSpills) {
  int kernels = 0;
  // The plans' own (""; bulk_backward_short_rows_ept) and the overrides the GPU tests run.
  for (const char* override_text : {"", "row=bulk", "row=bulk,ept=16", "row=bulk,ept=32", "row=bulk,ept=32,cta=256",
                                    "row=bulk,cta=256,minb=2"})
    for (const auto& [n, x] : {std::tuple{256, bf16}, std::tuple{1024, bf16}, std::tuple{1536, bf16},
                               std::tuple{8192, bf16}, std::tuple{16384, bf16}, std::tuple{2048, f16},
                               std::tuple{1024, f32}})
      for (const bool center : {false, true})
        for (const bool dro : {false, true}) {
          const RmsBwdSpec b = planned_bwd(n, x, x, center, dro, override_text);
          if (b.plan.bulk_stages == 0) continue;
          kernels += expect_bwd_clean(b, "sm_90a");
        }
  EXPECT_GE(kernels, 100);
}

// RowPlan::shared_reads (norm_bwd_bulk_kernel's SHARED_READS, shared_reads_planned in
// rmsnorm_heuristics_bwd_bulk.cpp): the bulk rings over a cluster where it measured faster
// (LayerNorm; RMSNorm over 16 CTAs), not the one-CTA or short rows or RMSNorm over
// 2-8 CTAs; reads=shared / reads=pointer force it either way where the weight's slice
// is beside the stages, and nothing without one.
TEST(RmsNormPlan, BackwardBulkSharedReadsWhereMeasured) {
  const auto o = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,reads=shared");
  EXPECT_EQ(o.shared_reads, 1);
  EXPECT_TRUE(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "reads=pointer").any());
  EXPECT_EQ(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "reads=pointer").shared_reads, -1);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "reads=global"), normkit::Error);
  EXPECT_THROW(rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "reads=shared"), normkit::Error);

  struct Case {
    std::int64_t n;
    bool center, dro, shared;
  };
  for (const Case& c : {Case{32768, true, false, true}, Case{65536, true, false, true}, Case{131072, true, false, true},
                        Case{262144, true, false, true}, Case{65536, true, true, true}, Case{262144, true, true, true},
                        Case{262144, false, false, true}, Case{32768, false, false, false},
                        Case{65536, false, false, false}, Case{131072, false, false, true},
                        Case{16384, true, false, true}, Case{2048, true, false, false},
                        Case{8192, false, false, false}, Case{16384, true, true, true},
                        Case{16384, false, true, true}, Case{2048, true, true, true},
                        Case{4096, true, true, true}, Case{8192, true, true, true},
                        Case{1024, true, true, false}}) {
    const RowPlan p = planned_bwd(c.n, bf16, bf16, c.center, c.dro, "").plan;
    ASSERT_GT(p.bulk_stages, 0) << c.n << " " << p.str();
    EXPECT_EQ(p.shared_reads, c.shared) << c.n << " center " << c.center << " " << p.str();
    EXPECT_EQ(p.shared_reads, p.str().find(" shared_reads") != std::string::npos) << p.str();
    EXPECT_TRUE(planned_bwd(c.n, bf16, bf16, c.center, c.dro, "row=bulk,reads=shared").plan.shared_reads) << c.n;
    EXPECT_FALSE(planned_bwd(c.n, bf16, bf16, c.center, c.dro, "row=bulk,reads=pointer").plan.shared_reads) << c.n;
  }
  // Without a weight (no dw) there is no slice beside the stages: never.
  RmsBwdSpec no_w = norm_bwd_spec(65536, bf16, bf16, true, false);
  no_w.weight.reset();
  no_w.dbias.reset();
  no_w.plan_override = rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "row=bulk,reads=shared");
  const RowPlan p = plan_bwd(no_w, 8, 90);
  EXPECT_GT(p.bulk_stages, 0) << p.str();
  EXPECT_FALSE(p.weight_smem || p.shared_reads) << p.str();
}
