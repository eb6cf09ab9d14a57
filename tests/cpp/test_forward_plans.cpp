// The forward's rules for long rows (src/norm/rmsnorm_heuristics.cpp): elements a
// thread, CTA size, CTAs per SM, clusters, shared-memory parameters and the plan
// override, checked on the plans alone. No compiler, no GPU. (The other rules:
// test_rmsnorm_plans.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

// fp32 rows with a residual take 16 elements a thread on sm_90+ (32 spilled), over
// clusters up to 16 CTAs so that N=262144 keeps its row in registers (the in-place
// fused add needs it); sm_80 keeps 32 (no spills there). fp16 rows with fp32
// weights leave the pipeline in one CTA (it spilled); bf16 ones keep it.
TEST(RmsNormPlan, Fp32RowsWithResidualTakeSixteenElementsAThread) {
  auto fwd = [](std::int64_t n, DType x, bool residual, int arch, std::optional<DType> w = {}) {
    RmsFwdSpec f = plain_fwd_spec(n, x);
    if (residual) f.residual = f.residual_out = x;
    if (w) f.weight = *w;
    f.plan_override = register_rows("", "NORMKIT_FORWARD_PLAN");  // the register rows' rule: the bulk ring takes some by itself
    return plan_fwd(f, 8, arch);
  };
  for (std::int64_t n : {32768, 65536, 131072, 262144}) {
    const RowPlan p = fwd(n, f32, true, 90);
    EXPECT_TRUE(p.regs) << n << " " << p.str();
    EXPECT_EQ(p.cluster, n / 16384) << p.str();
    // without a residual: 32 elements a thread in two 512-thread CTAs per SM, up to
    // clusters of 8 (N=262144 in 1024-thread CTAs)
    EXPECT_EQ(fwd(n, f32, false, 90).cluster, n == 262144 ? 8 : n / 16384);
  }
  // Shorter rows keep 32 elements a thread, except RMSNorm's at N=16384 on sm_90
  // (with_forward_elems: 16, so 1024 threads).
  EXPECT_EQ(fwd(16384, f32, true, 90).tpr, 1024);
  EXPECT_EQ(fwd(16384, f32, true, 80).tpr, 512);
  EXPECT_EQ(fwd(32768, f32, true, 80).cluster, 1);
  EXPECT_EQ(fwd(32768, f32, true, 80).tpr, 1024);
  // fp16 rows whose weight is of another dtype leave the forward pipeline (spilled;
  // on sm_90 such rows with a weight take 64 elements a thread and no pipeline anyway).
  EXPECT_FALSE(fwd(32768, f16, false, 80, f32).prefetch);
  EXPECT_FALSE(fwd(32768, f16, false, 80, bf16).prefetch);
  EXPECT_TRUE(fwd(32768, f16, false, 80, f16).prefetch);
  EXPECT_TRUE(fwd(32768, bf16, false, 80, f32).prefetch);
  EXPECT_FALSE(fwd(32768, f16, false, 90).prefetch);  // sm_90: 64 elements a thread
}

// Forward 16-bit rows with a weight, no residual, of 1024 threads or more at 32
// elements a thread (N >= 16385): 64 elements a thread in 512-thread CTAs, two per
// SM, clustered beyond N=32768, no pipeline, parameters from global memory;
// RMSNorm and LayerNorm, any weight dtype. Not rows with a residual or without a
// weight, fp32 rows, calls of few rows, sm_80 or 8-byte vectors; N=16384 keeps its
// 512-thread CTA of 32 elements a thread.
TEST(RmsNormPlan, LongSixteenBitForwardRowsTakeSixtyFourElementsAThread) {
  auto fwd = [](std::int64_t n, DType x, std::optional<DType> w, bool center = false, bool residual = false,
                int arch = 90, bool few_rows = false, int max_vec = 8) {
    RmsFwdSpec f = plain_fwd_spec(n, x);
    f.weight = w;
    if (center) f.bias = w;
    f.center = center;
    if (residual) f.residual = f.residual_out = x;
    f.few_rows = few_rows;
    return plan_fwd(f, max_vec, arch);
  };
  for (const bool center : {false, true}) {
    for (DType x : {bf16, f16}) {
      for (DType w : {x, f32, x == bf16 ? f16 : bf16}) {
        for (std::int64_t n : {32768, 40000, 65536, 131072, 262144}) {
          // With a weight of x's dtype, N=32769-131072 take the measured shapes of
          // test_forward_long_rows.cpp (RMSNorm) and N=65537-131072 (LayerNorm).
          if (w == x && n > (center ? 65536 : 32768) && n <= 131072) continue;
          // bf16 N=131072-262144 with 16-bit parameters: the bulk ring
          // (test_forward_bulk_rows.cpp).
          if (x == bf16 && w != f32 && n >= 131072) continue;
          const RowPlan p = fwd(n, x, w, center);
          const std::int64_t threads = n / 64;  // 8-element vectors, 8 a thread
          EXPECT_EQ(p.cluster, n == 40000 ? 2 : std::max<std::int64_t>(1, threads / 512)) << n << " " << p.str();
          EXPECT_EQ(p.tpr, 512) << n << " " << p.str();
          EXPECT_EQ(p.rows, 1) << n << " " << p.str();
          EXPECT_TRUE(p.regs && !p.prefetch && !p.params_smem && p.smem_bytes == 0) << n << " " << p.str();
          EXPECT_EQ(p.min_blocks, 2) << p.str();  // 64 registers a thread
        }
        // 32 elements a thread, as before; LayerNorm's with a weight of x's dtype 64
        // (with_forward_elems), so 256 threads.
        EXPECT_EQ(fwd(16384, x, w, center).tpr, center && w == x ? 256 : 512);
      }
    }
  }
  // LayerNorm storing mean and rstd (training) over a cluster: 1024-thread CTAs of 64
  // elements (512 spilled); without a cluster (N=32768) 512 as the others.
  // (N=131072 with a weight of x's dtype: the measured shape of test_forward_long_rows.cpp;
  // 131072 and 262144: the bulk ring, test_forward_bulk_rows.cpp.)
  for (std::int64_t n : {32768, 65536}) {
    RmsFwdSpec f = plain_fwd_spec(n, bf16);
    f.bias = bf16;
    f.center = true;
    f.store_rstd = true;
    const RowPlan p = plan_fwd(f, 8, 90);
    EXPECT_EQ(p.tpr, n == 32768 ? 512 : 1024) << n << " " << p.str();
    EXPECT_EQ(p.cluster, std::max<std::int64_t>(1, n / 65536)) << n << " " << p.str();
    EXPECT_EQ(p.min_blocks, n == 32768 ? 2 : 1) << n << " " << p.str();
    EXPECT_FALSE(p.prefetch || p.params_smem) << p.str();
    f.center = false;  // RMSNorm storing rstd: 512 threads
    EXPECT_EQ(plan_fwd(f, 8, 90).tpr, 512) << n;
  }
  // The others: 32 elements a thread, 1024-thread CTAs, four a row at N=131072 (with a
  // weight of x's dtype, RMSNorm's rows take test_forward_long_rows.cpp's shapes there).
  EXPECT_EQ(fwd(262144, f16, f16).cluster, 8);
  EXPECT_EQ(fwd(262144, f16, f16).tpr, 512);
  for (const RowPlan& other : {fwd(131072, bf16, {}), fwd(131072, bf16, bf16, false, false, 90, /*few_rows=*/true)}) {
    EXPECT_EQ(other.cluster, 4) << other.str();
    EXPECT_EQ(other.tpr, 1024) << other.str();
  }
  EXPECT_FALSE(fwd(131072, bf16, bf16, false, false, /*arch=*/80).regs);  // sm_80: two passes, as before
  EXPECT_EQ(fwd(131072, bf16, bf16, false, false, 90, false, /*max_vec=*/4).cluster, 4);  // 32 elements
}

// Forward rows of 1024 threads or more at 32 elements a thread (16: fp32 with a
// residual) take two 512-thread CTAs per SM where that measured faster: LayerNorm
// with a residual or fp32 rows, RMSNorm fp32 rows without one; up to clusters of 8
// (16 for fp32 with a residual), so N=262144 keeps 1024 threads. Not RMSNorm with a
// residual (slower), LayerNorm's 16-bit rows with fp32 parameters storing the
// statistics (spilled), calls of few rows, sm_80. LayerNorm's 16-bit rows with a
// residual at N=16384 (one 512-thread CTA) take two per SM with 16-bit parameters
// and no statistics.
TEST(RmsNormPlan, LongForwardRowsTakeTwoCtasPerSm) {
  auto fwd = [](std::int64_t n, DType x, bool center, std::optional<DType> res, DType w, bool stats = false,
                bool few_rows = false, int arch = 90) {
    RmsFwdSpec f = norm_fwd_spec(n, x, w, center, res, stats);
    f.few_rows = few_rows;
    f.plan_override = register_rows("", "NORMKIT_FORWARD_PLAN");  // the register rows' rule: the bulk ring takes some by itself
    return plan_fwd(f, 8, arch);
  };
  auto expect_two = [](const RowPlan& p, int cluster) {
    EXPECT_EQ(p.tpr, 512) << p.str();
    EXPECT_EQ(p.cluster, cluster) << p.str();
    EXPECT_EQ(p.min_blocks, 2) << p.str();
    EXPECT_TRUE(p.regs && !p.prefetch && !p.params_smem) << p.str();
  };
  for (std::int64_t n : {32768, 65536, 131072}) {
    const int c16 = static_cast<int>(n / 16384);  // 32 elements of 512 threads
    for (const bool stats : {false, true}) {
      expect_two(fwd(n, bf16, true, bf16, bf16, stats), c16);
      expect_two(fwd(n, f16, true, f32, f16, stats), c16);
      expect_two(fwd(n, f32, true, {}, f32, stats), c16);
      // LayerNorm fp32 with a residual: the bulk ring by itself (test_forward_bulk_rows.cpp)
      EXPECT_GT(plan_fwd(norm_fwd_spec(n, f32, f32, true, f32, stats), 8, 90).bulk_stages, 0) << n;
      expect_two(fwd(n, f32, false, {}, f32, stats), c16);
      // LayerNorm, 16-bit rows, fp32 parameters, statistics stored: 1024 threads
      EXPECT_EQ(fwd(n, bf16, true, bf16, f32, stats).tpr, stats ? 1024 : 512) << n;
      // RMSNorm with a residual: 1024 threads (bf16 N=131072: 512, test_forward_long_rows.cpp)
      EXPECT_EQ(fwd(n, bf16, false, bf16, bf16, stats).tpr, n == 131072 ? 512 : 1024) << n;
      EXPECT_EQ(fwd(n, f32, false, f32, f32, stats).tpr, 1024) << n;
    }
    EXPECT_EQ(fwd(n, f32, true, {}, f32, false, /*few_rows=*/true).tpr, 1024) << n;
    EXPECT_NE(fwd(n, f32, true, {}, f32, false, false, /*arch=*/80).tpr, 512) << n;
  }
  // N=262144: clusters of 16 of 512 threads (32 of fp32 with a residual) would be
  // over the limit; 1024 threads as before.
  EXPECT_EQ(fwd(262144, bf16, true, bf16, bf16).tpr, 1024);
  EXPECT_EQ(fwd(262144, f32, false, {}, f32).tpr, 1024);
  EXPECT_EQ(fwd(262144, f32, true, f32, f32).tpr, 512);  // measured: 32 elements (test_forward_long_rows.cpp)
  // LayerNorm 16-bit with a residual at N=16384: two 512-thread CTAs per SM.
  EXPECT_EQ(fwd(16384, bf16, true, bf16, bf16).min_blocks, 2);
  {  // not without a bias or without residual_out (they spilled at two CTAs per SM)
    RmsFwdSpec no_bias = norm_fwd_spec(16384, bf16, bf16, true, bf16, false);
    no_bias.bias.reset();
    EXPECT_EQ(plan_fwd(no_bias, 8, 90).min_blocks, 1);
    RmsFwdSpec no_residual_out = norm_fwd_spec(16384, bf16, bf16, true, bf16, false);
    no_residual_out.residual_out.reset();
    EXPECT_EQ(plan_fwd(no_residual_out, 8, 90).min_blocks, 1);
  }
  EXPECT_EQ(fwd(16384, f16, true, f32, f16).min_blocks, 2);
  EXPECT_EQ(fwd(16384, bf16, true, bf16, bf16, /*stats=*/true).min_blocks, 1);
  EXPECT_EQ(fwd(16384, bf16, true, bf16, f32).min_blocks, 1);
  EXPECT_EQ(fwd(16384, bf16, false, bf16, bf16).min_blocks, 1);  // RMSNorm
  EXPECT_EQ(fwd(16384, bf16, true, bf16, bf16).tpr, 512);
}

// Forward RMSNorm rows of 16-bit x and weight over a cluster of 1024-thread CTAs
// with a residual or in calls of few rows read the weight (and a 16-bit bias) from
// shared memory, at most 128 KB a CTA; not rows of one CTA (N=32768, which spilled with it), calls of few rows,
// LayerNorm or fp32 rows or fp32 parameters (slower or spilled on H200), nor with
// NORMKIT_PARAMS_SMEM=0.
TEST(RmsNormPlan, ForwardParamsInSharedMemoryOnlyForClusteredRows) {
  auto fwd = [](std::int64_t n, DType x, std::optional<DType> w, std::optional<DType> b, bool residual = false,
                bool center = false, bool allowed = true, bool few_rows = false) {
    RmsFwdSpec f = plain_fwd_spec(n, x);
    f.weight = w;
    f.bias = b;
    if (residual) f.residual = f.residual_out = x;
    f.center = center;
    f.params_smem_allowed = allowed;
    f.few_rows = few_rows;
    f.plan_override = register_rows("", "NORMKIT_FORWARD_PLAN");  // the register rows' rule: the bulk ring takes some by itself
    return plan_fwd(f, 8, 90);
  };
  // Rows without a residual: calls of few rows (the others take 64 elements a thread).
  const RowPlan bf = fwd(65536, bf16, bf16, {}, false, false, true, /*few_rows=*/true);
  EXPECT_TRUE(bf.params_smem && bf.prefetch) << bf.str();
  EXPECT_EQ(bf.smem_bytes, 65536 / 2 * 2) << bf.str();  // half the row's weight, bf16
  EXPECT_EQ(fwd(262144, bf16, bf16, bf16, false, false, true, true).smem_bytes, 262144 / 8 * 4)
      << "weight and bias, bf16";
  EXPECT_FALSE(fwd(65536, bf16, bf16, {}).params_smem);        // 64 elements a thread
  EXPECT_TRUE(fwd(262144, f16, f16, {}, true).params_smem);  // with a residual
  EXPECT_EQ(fwd(131072, bf16, bf16, bf16, true).smem_bytes, 131072 / 4 * 4);
  EXPECT_FALSE(fwd(262144, bf16, f32, f32).params_smem);    // fp32 parameters
  EXPECT_EQ(fwd(262144, bf16, f32, f32).smem_bytes, 0);
  EXPECT_FALSE(fwd(131072, bf16, bf16, bf16, false, true).params_smem);  // LayerNorm
  EXPECT_FALSE(fwd(131072, f32, f32, {}).params_smem);                   // fp32 rows
  EXPECT_FALSE(fwd(32768, bf16, bf16, {}).params_smem);  // one CTA a row
  EXPECT_FALSE(fwd(65536, bf16, {}, {}).params_smem);    // nothing to hold
  EXPECT_FALSE(fwd(65536, bf16, bf16, {}, false, false, /*allowed=*/false).params_smem);
  EXPECT_FALSE(fwd(8192, bf16, bf16, {}, false, false, true, /*few_rows=*/true).params_smem);
}

// NORMKIT_FORWARD_PLAN's fields replace the forward plan's own choices: elements per
// thread (threads per row follow), most threads per CTA (a longer row takes a
// cluster), min_blocks, and the pipeline turned off; the backward ignores them.
TEST(RmsNormPlan, ForwardPlanOverrideReplacesItsFields) {
  RmsFwdSpec f = plain_fwd_spec(131072, f32);
  f.plan_override = register_rows("", "NORMKIT_FORWARD_PLAN");  // the bulk ring takes this row by itself
  const RowPlan base = plan_fwd(f, 8, 90);
  EXPECT_EQ(base.tpr, 512);
  EXPECT_EQ(base.cluster, 8);
  EXPECT_EQ(base.min_blocks, 2);
  f.plan_override.cta_threads = 1024;
  const RowPlan wide = plan_fwd(f, 8, 90);
  EXPECT_EQ(wide.tpr, 1024) << wide.str();
  EXPECT_EQ(wide.cluster, 4) << wide.str();
  EXPECT_EQ(wide.min_blocks, 1) << wide.str();
  f.plan_override.cta_threads = 512;
  const RowPlan cta = plan_fwd(f, 8, 90);
  EXPECT_EQ(cta.tpr, 512) << cta.str();
  EXPECT_EQ(cta.cluster, 8) << cta.str();
  f.plan_override.elems_per_thread = 64;
  const RowPlan ept = plan_fwd(f, 8, 90);  // 131072 / 4 / 16 vectors = 2048 threads
  EXPECT_EQ(ept.cluster, 4) << ept.str();
  f.plan_override.min_blocks = 3;
  EXPECT_EQ(plan_fwd(f, 8, 90).min_blocks, 3);

  RmsFwdSpec plain = plain_fwd_spec(131072, bf16);
  plain.weight.reset();  // no weight: the pipeline
  EXPECT_TRUE(plan_fwd(plain, 8, 90).prefetch);
  plain.plan_override.no_prefetch = true;
  EXPECT_FALSE(plan_fwd(plain, 8, 90).prefetch);
}

// early=1: weight and bias loaded with the row in calls of many rows too, where the
// plan is register rows of <= 256 threads without the pipeline; one CTA per SM's
// registers as calls of few rows have unless minb= says otherwise. The backward's
// override has no such key.
TEST(RmsNormPlan, ForwardEarlyParamsOverride) {
  EXPECT_TRUE(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "early=1,ept=16").early_params);
  EXPECT_TRUE(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "early=1").any());
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "early=0"), normkit::Error);
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "early=1"), normkit::Error);
  RmsFwdSpec f = plain_fwd_spec(512, f32);
  f.residual = f.residual_out = f32;
  const RowPlan own = plan_fwd(f, 4, 90);
  EXPECT_FALSE(own.early_params) << own.str();
  f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "early=1,ept=16");
  const RowPlan early = plan_fwd(f, 4, 90);
  EXPECT_TRUE(early.early_params) << early.str();
  EXPECT_EQ(early.min_blocks, 1) << early.str();
  f.plan_override.min_blocks = 3;
  EXPECT_EQ(plan_fwd(f, 4, 90).min_blocks, 3);
  // 1024-thread rows (bf16 N=32768) keep their epilogue.
  RmsFwdSpec wide = plain_fwd_spec(32768, bf16);
  wide.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "early=1");
  EXPECT_FALSE(plan_fwd(wide, 8, 90).early_params);
}

// occ=: at most that many CTAs per SM, by dynamic shared memory the kernel leaves
// unused; the rest of the plan is its own. Forward only, 1-8.
TEST(RmsNormPlan, ForwardSmCtasOverride) {
  EXPECT_EQ(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "occ=1").sm_ctas, 1);
  EXPECT_TRUE(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "occ=2").any());
  for (const char* bad : {"occ=0", "occ=9", "occ=x"})
    EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", bad), normkit::Error) << bad;
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "occ=1"), normkit::Error);
  RmsFwdSpec f = plain_fwd_spec(16384, f32);
  const RowPlan own = plan_fwd(f, 4, 90);
  EXPECT_EQ(own.sm_ctas, 0) << own.str();
  for (int occ = 1; occ <= 8; ++occ) {
    f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "occ=" + std::to_string(occ));
    const RowPlan capped = plan_fwd(f, 4, 90);
    EXPECT_EQ(capped.sm_ctas, occ) << capped.str();
    EXPECT_EQ(capped.smem_bytes, sm_ctas_smem_bytes(occ)) << capped.str();
    EXPECT_EQ(capped.tpr, own.tpr) << capped.str();
    EXPECT_EQ(capped.prefetch, own.prefetch) << capped.str();
    EXPECT_NE(capped.str().find(" occ=" + std::to_string(occ)), std::string::npos) << capped.str();
    // occ CTAs fit the SM's 228 KB with 1 KB reserved and up to 1 KB static each; occ + 1 do not.
    const std::int64_t sm = 228 * 1024, bytes = sm_ctas_smem_bytes(occ);
    EXPECT_LE(occ * (bytes + 2048), sm) << occ;
    EXPECT_GT((occ + 1) * (bytes + 1024), sm) << occ;
    EXPECT_EQ(bytes % 128, 0) << occ;
  }
  // A plan that has its own shared memory keeps the larger of the two.
  RmsFwdSpec staged = plain_fwd_spec(16384, f32);
  staged.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "row=smem,occ=8");
  const RowPlan smem_row = plan_fwd(staged, 4, 90);
  EXPECT_TRUE(smem_row.smem_row) << smem_row.str();
  EXPECT_GE(smem_row.smem_bytes, 16384 * 4 / 2) << smem_row.str();
}

// occ= with l1=max: the padding is against the smallest sm_90 carveout that holds occ=
// CTAs (with their reserve and static part) and not occ= + 1, and the plan asks for that
// carveout in a percent the driver rounds up to it, not past it. Only with occ=; not on
// other archs (the whole SM's padding there).
TEST(RmsNormPlan, ForwardSmCtasWithinTheSmallestCarveout) {
  EXPECT_TRUE(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "occ=2,l1=max").l1_max);
  for (const char* bad : {"l1=max", "occ=2,l1=min"})
    EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", bad), normkit::Error) << bad;
  EXPECT_THROW(normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", "l1=max"), normkit::Error);
  for (int occ = 1; occ <= 8; ++occ) {
    for (const int own : {0, 20000, 60000}) {
      const CarveoutShare share = sm_ctas_in_carveout(occ, own);
      if (occ * (own + 2048) > 228 * 1024) {  // no carveout holds them: the whole SM's padding
        EXPECT_EQ(share.carveout_percent, -1) << occ << " " << own;
        continue;
      }
      ASSERT_GE(share.carveout_percent, 0) << occ << " " << own;
      // The carveout the percent rounds up to: the first supported size at or above it.
      const double asked_kb = share.carveout_percent * kSm90SharedPerSmKb / 100.0;
      std::int64_t kb = 0;
      for (const int c : kSm90CarveoutsKb)
        if (kb == 0 && c >= asked_kb) kb = c;
      const std::int64_t carveout = kb * 1024, bytes = share.smem_bytes;
      EXPECT_GE(bytes, own) << occ;
      EXPECT_LE(occ * (bytes + 2048), carveout) << occ << " " << own;
      EXPECT_GT((occ + 1) * (bytes + 1024), carveout) << occ << " " << own;
      if (bytes != own) {
        EXPECT_EQ(bytes % 128, 0) << occ;
      }
      // Never more than the whole SM's padding.
      EXPECT_LE(bytes, std::max<std::int64_t>(own, sm_ctas_smem_bytes(occ))) << occ;
    }
  }
  EXPECT_EQ(sm_ctas_in_carveout(1, 0).carveout_percent, 3);  // 8 KB
  EXPECT_EQ(sm_ctas_in_carveout(4, 0).carveout_percent, 14);  // 32 KB: 4 x 5 KB do not fit 16

  RmsFwdSpec f = plain_fwd_spec(16384, f32);
  f.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", "occ=2,l1=max");
  const RowPlan capped = plan_fwd(f, 4, 90);
  EXPECT_EQ(capped.sm_ctas, 2) << capped.str();
  EXPECT_EQ(capped.carveout_percent, 3) << capped.str();
  EXPECT_LT(capped.smem_bytes, 8 * 1024) << capped.str();
  EXPECT_NE(capped.str().find(" carveout=3%"), std::string::npos) << capped.str();
  const RowPlan other_arch = plan_fwd(f, 4, 100);
  EXPECT_EQ(other_arch.carveout_percent, -1) << other_arch.str();
  EXPECT_EQ(other_arch.smem_bytes, sm_ctas_smem_bytes(2)) << other_arch.str();
}

// Decode calls (few rows) at N=4096 and 8192 on sm_90 (with_decode_rows): 16-bit
// N=4096 rows over 256 threads of two vectors; fp32 rows and N=8192 over a cluster
// of CTAs of two vectors a thread (a row's slice of RMSNorm 128 threads, two rows'
// slices a CTA; LayerNorm's 256) in calls of up to kDecodeRows rows, with and without a
// residual. Not for calls of many rows, other N, sm_80/sm_100, weights of another
// dtype, or under NORMKIT_FORWARD_PLAN.
TEST(RmsNormPlan, DecodeRowsWhereMeasured) {
  struct Want {
    std::int64_t n;
    DType x;
    bool center;
    int tpr, cta_threads, cluster;  // tpr: the threads of a row's slice in one CTA
  };
  for (const Want& w : {Want{4096, bf16, false, 256, 256, 1}, Want{4096, bf16, true, 256, 256, 1},
                        Want{8192, bf16, false, 128, 256, 8}, Want{8192, bf16, true, 256, 256, 4},
                        Want{4096, f32, false, 128, 256, 4}, Want{4096, f32, true, 256, 256, 2},
                        Want{8192, f32, false, 128, 256, 8}, Want{8192, f32, true, 256, 256, 4}}) {
    for (const bool residual : {false, true}) {
      RmsFwdSpec f = norm_fwd_spec(w.n, w.x, w.x, w.center, residual ? std::optional<DType>(w.x) : std::nullopt,
                                   false);
      f.few_rows = true;
      f.decode_rows = true;
      const RowPlan p = plan_fwd(f, 8, 90);
      EXPECT_TRUE(p.regs && p.rows == w.cta_threads / w.tpr) << w.n << " " << p.str();
      EXPECT_EQ(p.tpr, w.tpr) << w.n << " " << p.str();
      EXPECT_EQ(p.cluster, w.cluster) << w.n << " " << p.str();
      EXPECT_EQ(p.threads(), w.cta_threads) << w.n << " " << p.str();
      RmsFwdSpec many = f;
      many.few_rows = false;
      RmsFwdSpec forced = f;
      forced.plan_override.min_blocks = 1;
      // Calls of few rows beyond kDecodeRows: 16-bit N=4096 rows alike, no clusters.
      RmsFwdSpec more = f;
      more.decode_rows = false;
      const RowPlan m = plan_fwd(more, 8, 90);
      EXPECT_EQ(m.cluster, 1) << w.n << " " << m.str();
      if (w.cluster == 1) {
        EXPECT_TRUE(m.tpr == w.tpr && m.threads() == w.cta_threads) << w.n << " " << m.str();
      }
      RmsFwdSpec other_weight = f;
      other_weight.weight = w.x == f32 ? bf16 : f32;
      for (const RmsFwdSpec& s : {many, forced, other_weight}) {
        const RowPlan q = plan_fwd(s, 8, 90);
        EXPECT_FALSE(q.tpr == w.tpr && q.cluster == w.cluster && q.threads() == w.cta_threads)
            << w.n << " " << q.str();
      }
      for (const int arch : {80, 100}) {
        const RowPlan q = plan_fwd(f, 8, arch);
        EXPECT_FALSE(q.tpr == w.tpr && q.cluster == w.cluster && q.threads() == w.cta_threads)
            << arch << " " << w.n << " " << q.str();
      }
    }
  }
  RmsFwdSpec other_n = plain_fwd_spec(2048, bf16);
  other_n.few_rows = true;
  RmsFwdSpec many_n = plain_fwd_spec(2048, bf16);
  EXPECT_EQ(plan_fwd(other_n, 8, 90).tpr, plan_fwd(many_n, 8, 90).tpr);
}

// LayerNorm's forward rows over a cluster take one row a CTA (shifted moments decide
// on one row's sums per cluster), also where NORMKIT_FORWARD_PLAN's cta= is below the
// 256 threads that would hold two slices (RMSNorm keeps two rows' slices a CTA).
TEST(RmsNormPlan, LayerNormForwardClusterRowsOneRowPerCta) {
  for (const bool few_rows : {false, true}) {
    for (const bool center : {false, true}) {
      RmsFwdSpec f = norm_fwd_spec(8192, bf16, bf16, center, std::nullopt, false);
      f.few_rows = few_rows;
      f.plan_override.elems_per_thread = 8;
      f.plan_override.cta_threads = 128;
      const RowPlan p = plan_fwd(f, 8, 90);
      EXPECT_EQ(p.cluster, 8) << p.str();
      EXPECT_EQ(p.tpr, 128) << p.str();
      EXPECT_EQ(p.rows, center ? 1 : 2) << p.str();
    }
  }
}

// with_forward_elems (rmsnorm_heuristics_fwd.cpp): the elements a thread measured
// faster than plan_rows' 32 on sm_90, for bandwidth calls with a weight of x's dtype
// and 16-byte vectors; everything else keeps plan_rows' own.
TEST(RmsNormPlan, MeasuredForwardElementsPerThread) {
  struct Call {
    std::int64_t n;
    DType x;
    bool center, residual;
    int expect_threads;  // tpr: N / elements a thread
  };
  const Call calls[] = {
      {256, bf16, false, true, 32},    {2048, bf16, true, true, 256},  {4096, bf16, false, true, 128},
      {8192, bf16, false, false, 512}, {8192, bf16, true, false, 256}, {16384, bf16, true, false, 256},
      {16384, bf16, false, false, 512}, {512, f32, true, false, 32},   {1024, f32, true, false, 32},
      {8192, f32, true, false, 512},   {4096, f32, false, true, 256},  {16384, f32, false, true, 1024},
      {16384, f32, true, true, 512},
  };
  for (const Call& c : calls) {
    RmsFwdSpec f = plain_fwd_spec(c.n, c.x);
    f.center = c.center;
    if (c.center) f.bias = c.x;
    if (c.residual) f.residual = f.residual_out = c.x;
    EXPECT_EQ(plan_fwd(f, 16 / dtype_size(c.x), 90).tpr, c.expect_threads)
        << c.n << " center=" << c.center << " residual=" << c.residual << " x bytes=" << dtype_size(c.x);
    // Not on sm_80, nor with a weight of another dtype, nor in calls of few rows: 32 a thread.
    const int own = static_cast<int>(std::max<std::int64_t>(1, c.n / 32));
    EXPECT_EQ(plan_fwd(f, 16 / dtype_size(c.x), 80).tpr, std::min(own, 1024)) << c.n;
    RmsFwdSpec other_weight = f;
    other_weight.weight = c.x == f32 ? bf16 : f32;
    if (c.center) other_weight.bias = other_weight.weight;
    if (!(c.x != f32 && c.n == 16384 && !c.residual)) {  // 16-bit N=16384 keeps 512 (above)
      EXPECT_EQ(plan_fwd(other_weight, 16 / dtype_size(c.x), 90).tpr, std::min(own, 1024)) << c.n;
    }
  }
}
