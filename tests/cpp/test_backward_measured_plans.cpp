// The backward plans' measured rules for rows over a cluster (plan_cluster_rows) and
// for 16-bit rows of one CTA as plain register rows (with_plain16_rows), in
// src/norm/rmsnorm_heuristics_bwd.cpp, checked on the plans alone (the other plan
// rules: test_rmsnorm_plans.cpp). No compiler, no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>

#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

// Backward rows in registers over a cluster (plan_cluster_rows): fp32 rows with dw
// (LayerNorm: dw and db) from N=32768, in 512-thread CTAs two per SM up to 16 CTAs,
// then 1024-thread CTAs, LayerNorm's with dresidual_out (and at 1024 threads all of
// LayerNorm's) with the sums in shared memory; 16-bit rows at two vectors a thread
// with the sums in shared memory (RMSNorm with and without dresidual_out up to
// N=262144, LayerNorm without it up to 131072, with it at N=32768-65536 one CTA per
// SM). NORMKIT_SMEM_SUMS=0
// keeps the sums in registers where those measured (or no cluster). Not on sm_80 or
// sm_100, not with a separate dresidual, not in calls of few rows, not fp32
// N=262144, not under overrides of ept=/cta=.
TEST(RmsNormPlan, BackwardClusterRowsWhereMeasured) {
  auto spec = [](std::int64_t n, DType x, bool center, bool dro) {
    RmsBwdSpec s = plain_bwd_spec(n, x);
    s.center = center;
    if (center) s.dbias = x;
    if (dro) s.dresidual_out = x;
    s.plan_override = register_rows();  // the bulk ring takes most of these rows by itself
    return s;
  };
  struct Want {
    RmsBwdSpec spec;
    int cluster, threads, min_blocks;
    bool smem_sums;
  };
  for (const Want& w : {Want{spec(32768, f32, false, false), 8, 512, 2, false},
                        Want{spec(65536, f32, false, true), 16, 512, 2, false},
                        Want{spec(131072, f32, false, false), 16, 1024, 1, false},
                        Want{spec(131072, f32, true, false), 16, 512, 1, true},
                        Want{spec(131072, f32, true, true), 16, 1024, 1, true},
                        Want{spec(32768, f32, true, false), 8, 512, 2, false},
                        Want{spec(32768, f32, true, true), 8, 512, 2, true},
                        Want{spec(65536, f32, true, true), 16, 512, 2, true},
                        Want{spec(32768, bf16, false, true), 2, 1024, 1, true},
                        Want{spec(262144, bf16, false, true), 16, 1024, 1, true},
                        Want{spec(32768, bf16, true, false), 4, 512, 2, true},
                        Want{spec(131072, bf16, true, false), 16, 512, 2, true},
                        Want{spec(32768, bf16, true, true), 4, 512, 1, true},
                        Want{spec(65536, bf16, true, true), 8, 512, 1, true}}) {
    const RowPlan p = plan_bwd(w.spec, 8, 90);
    EXPECT_TRUE(p.regs && p.row_sums && !p.stash && !p.split && !p.prefetch) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.cluster, w.cluster) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.threads(), w.threads) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.min_blocks, w.min_blocks) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.smem_sums, w.smem_sums) << w.spec.n << " " << p.str();
    // One fp32 sum per column of the CTA's slice, per sum.
    if (w.smem_sums) {
      EXPECT_EQ(p.smem_bytes, (w.spec.center ? 2 : 1) * w.spec.n / w.cluster * 4 +
                                  weight_slice_bytes(p, w.spec.n, static_cast<int>(dtype_size(*w.spec.weight))))
          << p.str();
    }
    for (const int arch : {80, 100}) {
      const RowPlan other = plan_bwd(w.spec, 8, arch);
      EXPECT_FALSE(other.cluster > 2 && other.regs) << arch << " " << w.spec.n << " " << other.str();
    }
    RmsBwdSpec few = w.spec;
    few.few_rows = true;
    EXPECT_FALSE(plan_bwd(few, 8, 90).cluster == w.cluster && plan_bwd(few, 8, 90).regs && w.cluster > 8);
    RmsBwdSpec dres = w.spec;
    dres.dresidual = w.spec.x;
    EXPECT_FALSE(plan_bwd(dres, 8, 90).regs && plan_bwd(dres, 8, 90).cluster > 2) << plan_bwd(dres, 8, 90).str();
  }
  // RMSNorm's 16-bit rows with dw alone at two vectors a thread: clusters of 4-16
  // 512-thread CTAs two per SM, 16 of 1024 threads at N=262144, two of 1024 at
  // N=32768; with NORMKIT_SMEM_SUMS=0 the 512-thread clusters with the sums in
  // registers.
  for (const auto& [n, cluster, threads] : {std::tuple{32768L, 4, 512}, {65536L, 8, 512}, {131072L, 16, 512},
                                            {262144L, 16, 1024}}) {
    RmsBwdSpec s = spec(n, bf16, false, false);
    for (const bool smem : {true, false}) {
      s.smem_sums_allowed = smem;
      const RowPlan p = plan_bwd(s, 8, 90);
      if (n == 32768 && smem) {  // two 1024-thread CTAs with the sums in shared memory
        EXPECT_TRUE(p.cluster == 2 && p.threads() == 1024 && p.min_blocks == 1 && p.smem_sums) << p.str();
        continue;
      }
      EXPECT_TRUE(p.regs && p.row_sums && !p.prefetch && p.cluster == cluster && p.threads() == threads &&
                  p.min_blocks == 1024 / threads && p.smem_sums == smem)
          << n << " " << p.str();
    }
  }
  // NORMKIT_SMEM_SUMS=0: LayerNorm fp32 with dresidual_out one CTA per SM with the
  // next row prefetched (N <= 65536), 16-bit rows with dresidual_out a cluster of
  // eight at one vector (N=32768); none where the sums spilled in registers.
  RmsBwdSpec off = spec(65536, f32, true, true);
  off.smem_sums_allowed = false;
  RowPlan p = plan_bwd(off, 8, 90);
  EXPECT_TRUE(p.cluster == 16 && p.min_blocks == 1 && p.prefetch && !p.smem_sums) << p.str();
  for (const bool center : {false, true}) {
    off = spec(32768, bf16, center, true);
    off.smem_sums_allowed = false;
    p = plan_bwd(off, 8, 90);
    EXPECT_TRUE(p.cluster == 8 && p.threads() == 512 && p.min_blocks == 2 && !p.smem_sums) << p.str();
  }
  for (RmsBwdSpec s : {spec(131072, f32, true, true), spec(65536, bf16, false, true), spec(32768, bf16, true, false)}) {
    s.smem_sums_allowed = false;
    EXPECT_FALSE(plan_bwd(s, 8, 90).regs && plan_bwd(s, 8, 90).cluster > 2) << s.n << " " << plan_bwd(s, 8, 90).str();
  }
  for (const RmsBwdSpec& s : {spec(131072, bf16, true, true), spec(262144, bf16, true, false),
                              spec(262144, f32, false, false)}) {
    p = plan_bwd(s, 8, 90);
    EXPECT_FALSE(p.regs && p.cluster > 2) << s.n << " " << p.str();
  }
  // NORMKIT_BACKWARD_PLAN's cluster= forces such rows (sm_90 and later), prefetch
  // unless prefetch=0, 512 threads unless cta=.
  RmsBwdSpec forced = spec(65536, bf16, false, false);
  forced.plan_override.cluster = 16;
  p = plan_bwd(forced, 8, 90);
  EXPECT_TRUE(p.regs && p.row_sums && p.cluster == 16 && p.threads() == 512 && p.prefetch) << p.str();
  forced.plan_override.no_prefetch = true;
  forced.plan_override.cta_threads = 1024;
  p = plan_bwd(forced, 8, 100);
  EXPECT_TRUE(p.regs && p.cluster == 16 && p.threads() == 1024 && !p.prefetch) << p.str();
  EXPECT_FALSE(plan_bwd(forced, 8, 80).cluster == 16);
}

// 16-bit backward rows of one CTA as plain register rows on sm_90 (with_plain16_rows):
// LayerNorm without dresidual_out up to N=16384 (and at N=1536-3072 that are
// multiples of 512) and with it up to 8192 (from 2048 with the sums in shared memory;
// NORMKIT_SMEM_SUMS=0 keeps N=2048's register sums and plans no more), RMSNorm with
// dw alone at N=4097-8192, each at the shape measured; not on sm_80/sm_100, not for
// other N between powers of two, N < 256, calls of few rows, a separate dresidual,
// fp32 rows, or when NORMKIT_BACKWARD_PLAN forces any part of the plan.
TEST(RmsNormPlan, BackwardPlainSixteenBitRowsWhereMeasured) {
  // Under row=regs: sm_90's bulk ring takes many of these rows by itself
  // (bulk_backward_short_rows_ept, test_backward_bulk_rows.cpp).
  auto spec = [](std::int64_t n, bool center, bool dro) {
    RmsBwdSpec s = plain_bwd_spec(n, bf16);
    s.center = center;
    if (center) s.dbias = bf16;
    if (dro) s.dresidual_out = bf16;
    s.plan_override = register_rows();
    return s;
  };
  auto plain = [](const RowPlan& p, bool smem_sums = false) {
    return p.regs && p.row_sums && !p.async_rows && !p.prefetch && p.cluster == 1 && p.smem_sums == smem_sums;
  };
  struct Want {
    RmsBwdSpec spec;
    int threads, columns, min_blocks;  // columns: a thread's, tpr * columns = N
    bool smem_sums = false;
  };
  for (const Want& w :
       {Want{spec(256, true, false), 128, 16, 6}, Want{spec(512, true, false), 128, 16, 6},
        Want{spec(1024, true, false), 128, 32, 4}, Want{spec(1536, true, false), 128, 24, 4},
        Want{spec(3072, true, false), 128, 24, 4}, Want{spec(4096, true, false), 128, 32, 4},
        Want{spec(8192, true, false), 256, 32, 2}, Want{spec(16384, true, false), 512, 32, 1},
        Want{spec(256, true, true), 128, 16, 6}, Want{spec(1024, true, true), 128, 16, 6},
        Want{spec(2048, true, true), 128, 16, 8, true}, Want{spec(4096, true, true), 256, 16, 4, true},
        Want{spec(8192, true, true), 512, 16, 2, true}, Want{spec(8192, false, false), 512, 16, 2}}) {
    const RowPlan p = plan_bwd(w.spec, 8, 90);
    EXPECT_TRUE(plain(p, w.smem_sums)) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.threads(), w.threads) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.tpr * w.columns, w.spec.n) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.min_blocks, w.min_blocks) << w.spec.n << " " << p.str();
    for (const int arch : {80, 100}) {
      const RowPlan other = plan_bwd(w.spec, 8, arch);
      EXPECT_FALSE(plain(other, w.smem_sums) && other.min_blocks == w.min_blocks && other.threads() == w.threads &&
                   other.tpr == p.tpr)
          << arch << " " << w.spec.n << " " << other.str();
    }
    RmsBwdSpec few = w.spec;
    few.few_rows = true;
    RmsBwdSpec dres = w.spec;
    dres.dresidual = bf16;
    RmsBwdSpec forced = w.spec;
    forced.plan_override.no_prefetch = true;
    RmsBwdSpec odd = w.spec;
    odd.n = w.spec.n - 8;  // whole vectors, not a power of two
    for (const RmsBwdSpec& s : {few, dres, forced, odd}) {
      const RowPlan q = plan_bwd(s, 8, 90);
      EXPECT_FALSE(q.min_blocks == w.min_blocks && q.threads() == w.threads && q.tpr == p.tpr && plain(q, w.smem_sums))
          << s.n << " " << q.str();
    }
  }
  // Not planned: RMSNorm with dresidual_out (N=2048) or outside N=4097-8192, LayerNorm
  // with dresidual_out beyond N=8192, N < 256, N=5120, fp32 rows. Their plans keep the ring,
  // the shared-memory sums or the register sums of plan_rows.
  for (const RmsBwdSpec& s : {spec(2048, false, true), spec(4096, false, false), spec(16384, false, false),
                              spec(16384, true, true), spec(128, true, false), spec(5120, true, false),
                              spec(2560, true, false)}) {
    const RowPlan p = plan_bwd(s, 8, 90);
    EXPECT_TRUE(p.async_rows || p.smem_sums || p.prefetch || p.min_blocks == 7 || p.tpr < 16) << s.n << " " << p.str();
  }
  for (const auto& [n, planned] : {std::pair{2048L, true}, {4096L, false}}) {
    RmsBwdSpec s = spec(n, true, true);
    s.smem_sums_allowed = false;
    const RowPlan p = plan_bwd(s, 8, 90);
    EXPECT_EQ(plain(p) && !p.smem_sums && p.threads() == 128 && p.min_blocks == 6, planned) << n << " " << p.str();
  }
  RmsBwdSpec f32_rows = spec(4096, true, false);
  f32_rows.x = f32_rows.dout = f32_rows.dx = f32;
  f32_rows.weight = f32_rows.dbias = f32;
  EXPECT_NE(plan_bwd(f32_rows, 8, 90).min_blocks, 4) << plan_bwd(f32_rows, 8, 90).str();
}
