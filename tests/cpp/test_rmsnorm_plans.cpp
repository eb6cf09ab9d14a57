// The launch plans' rules (src/norm/rmsnorm_heuristics.cpp and rmsnorm_heuristics_bwd.cpp), checked on the plans
// alone: which rows take which kernel class, threads, clusters and CTAs per SM, per
// target. No compiler, no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

// The two-deep row pipeline of the backward row kernel is used where it measured
// faster (16-bit rows of one CTA of >= 256 threads with dw/db sums) and nowhere else.
// sm_100 where sm_90 takes plain register rows instead (with_plain16_rows: LayerNorm
// N <= 16384 without dresidual_out and <= 2048 with it, RMSNorm N=4097-8192 with dw
// alone; BackwardPlainSixteenBitRowsWhereMeasured).
TEST(RmsNormPlan, BackwardPrefetchOnlyForLongSixteenBitRowsOfOneCta) {
  for (std::int64_t n : {4096, 8192}) {
    for (DType x : {bf16, f16}) {
      for (bool dbias : {false, true}) {
        const RowPlan p = plan(n, x, true, dbias, "sm_100a", 8, true);
        // With db, N=8192 needs 1024 threads for register sums: they move to
        // shared memory (smem_sums), which the pipeline is not planned with.
        EXPECT_TRUE(p.row_sums) << n << " " << p.str();
        // Without db, N=4096 takes them as well (smem_sums32).
        EXPECT_EQ(p.smem_sums, dbias ? n == 8192 : n == 4096) << n << " " << p.str();
        // The pipeline: 16-byte vectors take the cp.async ring (async_rows), its
        // three stages of h and dout in shared memory; narrower ones the second
        // register set (prefetch).
        EXPECT_EQ(p.async_rows, !p.smem_sums) << n << " " << p.str();
        EXPECT_FALSE(p.prefetch) << n << " " << p.str();
        if (p.async_rows) {
          EXPECT_EQ(p.smem_bytes, 3 * n * 4) << n << " " << p.str();
        }
        EXPECT_EQ(p.cluster, 1) << n << " " << p.str();
        const RowPlan narrow = plan(n, x, true, dbias, "sm_100a", 4, true);
        EXPECT_EQ(narrow.prefetch, !narrow.smem_sums) << n << " " << narrow.str();
        EXPECT_FALSE(narrow.async_rows) << n << " " << narrow.str();
      }
    }
    RmsBwdSpec off = plain_bwd_spec(n);  // NORMKIT_ASYNC_ROWS=0: the register pipeline
    off.async_rows_allowed = false;
    off.smem_sums_allowed = false;  // (N=4096 takes shared-memory sums on sm_90 otherwise)
    EXPECT_TRUE(plan_bwd(off, 8, 100).prefetch) << n;
    EXPECT_FALSE(plan_bwd(off, 8, 100).async_rows) << n;
    EXPECT_FALSE(plan(n, f32, true, false, "sm_90a", 8, true).async_rows) << n;
    EXPECT_FALSE(plan(n, f32, true, false, "sm_90a", 8, true).prefetch) << n;
    EXPECT_FALSE(plan(n, bf16, false, false, "sm_90a").prefetch) << n;  // forward
    EXPECT_FALSE(plan(n, bf16, true, false, "sm_90a", 1, true).prefetch) << n;  // scalar rows
  }
  // Shorter rows (CTAs under 256 threads, several rows per CTA) take the ring for
  // LayerNorm and for RMSNorm with dresidual_out, not the register pipeline (it
  // spilled), with registers left for it; RMSNorm with h and dout alone keeps
  // the plain rows (it measured slower with the ring); longer rows (no register
  // sums) take neither.
  for (std::int64_t n : {256, 1024, 2048}) {
    RmsBwdSpec rms = plain_bwd_spec(n);
    EXPECT_FALSE(plan_bwd(rms, 8, 90).async_rows || plan_bwd(rms, 8, 90).prefetch) << n;
    rms.dresidual_out = bf16;
    RmsBwdSpec ln = plain_bwd_spec(n);
    ln.center = true;
    for (const RmsBwdSpec& s : {rms, ln}) {
      const RowPlan p = plan_bwd(s, 8, 100);
      EXPECT_TRUE(p.async_rows && !p.prefetch) << n << " " << p.str();
      EXPECT_EQ(p.smem_bytes, 3 * p.rows * n * 4) << n << " " << p.str();
      EXPECT_GE(65536 / (p.threads() * p.min_blocks), s.center ? 96 : 80) << n << " " << p.str();
    }
  }
  for (std::int64_t n : {16384, 32768, 131072}) {
    const RowPlan p = plan(n, bf16, true, false, "sm_90a", 8, true);
    EXPECT_FALSE(p.prefetch || p.async_rows) << n << " " << p.str();
  }
  // RMSNorm's rows of one 512-thread CTA with dresidual_out and dw alone (N=4097-8192)
  // take 32 columns a thread at 256 threads with the sums in shared memory on sm_90,
  // and plain register rows where shared-memory sums are off (both measured faster
  // than the ring); LayerNorm's, rows with db or without dresidual_out, and sm_80
  // keep the ring.
  for (std::int64_t n : {6144, 8192}) {
    RmsBwdSpec rms = plain_bwd_spec(n);
    rms.dresidual_out = bf16;
    const RowPlan sums = plan_bwd(rms, 8, 90);
    EXPECT_TRUE(sums.smem_sums && sums.row_sums && sums.threads() == 256) << n << " " << sums.str();
    EXPECT_EQ(sums.smem_bytes, n * 4 + weight_slice_bytes(sums, n, 2)) << n << " " << sums.str();
    rms.smem_sums_allowed = false;
    const RowPlan p = plan_bwd(rms, 8, 90);
    rms.smem_sums_allowed = true;
    EXPECT_TRUE(p.regs && p.row_sums && p.rows == 1 && p.threads() == 512) << n << " " << p.str();
    EXPECT_FALSE(p.async_rows || p.prefetch) << n << " " << p.str();
    EXPECT_TRUE(plan_bwd(rms, 8, 80).async_rows) << n;
    RmsBwdSpec ln = rms;
    ln.center = true;
    EXPECT_TRUE(plan_bwd(ln, 8, 90).async_rows) << n;
    EXPECT_TRUE(plan_bwd(plain_bwd_spec(n), 8, 100).async_rows) << n;
  }
  RmsBwdSpec rms_db = plain_bwd_spec(4096);
  rms_db.dresidual_out = bf16;
  rms_db.dbias = bf16;
  EXPECT_EQ(plan_bwd(rms_db, 8, 90).threads(), 512);
  EXPECT_TRUE(plan_bwd(rms_db, 8, 90).async_rows);
}

// 16-bit rows that fit one CTA's registers but not with their dw/db sums keep
// the sums in shared memory (one fp32 per column and sum), within the budget;
// fp32 rows, rows beyond one CTA, calls without dw/db and few-rows calls do not.
TEST(RmsNormPlan, SharedMemorySumsForSixteenBitRowsBeyondRegisterSums) {
  for (const std::string target : {"sm_90a", "sm_80"}) {
    for (DType x : {bf16, f16}) {
      const RowPlan dw = plan(16384, x, true, false, target, 8, true);
      EXPECT_TRUE(dw.smem_sums && dw.row_sums && dw.regs && !dw.stash && !dw.split && !dw.prefetch) << dw.str();
      EXPECT_EQ(dw.cluster, 1) << dw.str();
      EXPECT_EQ(dw.rows, 1) << dw.str();
      EXPECT_EQ(dw.smem_bytes, 16384 * 4) << dw.str();
      EXPECT_LE(dw.min_blocks, 3) << dw.str();  // what 64 KB per CTA leaves room for
      // Two CTAs per SM on sm_90 (measured), not with dresidual_out (spilled).
      if (target == "sm_90a") {
        EXPECT_EQ(dw.min_blocks, 2) << dw.str();
      }
      RmsBwdSpec dro = plain_bwd_spec(16384, x);
      dro.dresidual_out = x;
      EXPECT_EQ(plan_bwd(dro, 8, arch_of(target)).min_blocks, 1) << plan_bwd(dro, 8, arch_of(target)).str();
      const RowPlan dwdb = plan(16384, x, true, true, target, 8, true);
      EXPECT_TRUE(dwdb.smem_sums) << dwdb.str();
      EXPECT_EQ(dwdb.smem_bytes, 2 * 16384 * 4) << dwdb.str();
      EXPECT_EQ(dwdb.min_blocks, 1) << dwdb.str();
    }
  }
  EXPECT_FALSE(plan(16384, f32, true, false, "sm_90a", 8, true).smem_sums);
  // Two CTAs: the stash (sm_90: a cluster with the sums in shared memory,
  // BackwardClusterRowsWhereMeasured).
  EXPECT_FALSE(plan(32768, bf16, true, false, "sm_100a", 8, true).smem_sums);
  EXPECT_FALSE(plan(16384, bf16, true, false, "sm_90a", 8, false).smem_sums);  // no dw/db
  EXPECT_FALSE(plan(16384, bf16, true, false, "sm_90a", 8, true, /*few_rows=*/true).smem_sums);
  EXPECT_FALSE(plan(4096, bf16, true, false, "sm_80", 8, true).smem_sums);  // register sums fit
  // sm_90 takes them where 32 columns a thread measured faster (smem_sums32): RMSNorm
  // N=4096 without dresidual_out (128 threads, five CTAs per SM).
  const RowPlan rms4096 = plan(4096, bf16, true, false, "sm_90a", 8, true);
  EXPECT_TRUE(rms4096.smem_sums && rms4096.threads() == 128 && rms4096.min_blocks == 5) << rms4096.str();
  EXPECT_FALSE(plan(16384, bf16, false, false, "sm_90a").smem_sums);         // forward
  // Turned off (NORMKIT_SMEM_SUMS=0): the column pass, as before the sums existed.
  // (Under row=regs: sm_90's bulk ring takes N=16384 by itself, bulk_backward_short_rows_ept.)
  RmsBwdSpec off = plain_bwd_spec(16384);
  off.smem_sums_allowed = false;
  off.plan_override = register_rows();
  EXPECT_FALSE(plan_bwd(off, 8, 90).smem_sums);
  EXPECT_FALSE(plan_bwd(off, 8, 90).row_sums);
  off.n = 32768;  // the pair of CTAs, whose sums are in registers (below)
  EXPECT_FALSE(plan_bwd(off, 8, 90).smem_sums);
  EXPECT_TRUE(plan_bwd(off, 8, 90).row_sums && plan_bwd(off, 8, 90).regs);
}

// LayerNorm's synced kernel carries two chunk sums: two CTAs per SM (three
// spilled), and the device check that keeps its wait safe uses that count.
TEST(RmsNormPlan, CenteredSyncedPlanTakesTwoCtasPerSm) {
  RowPlanInputs in;
  in.n = 131072;
  in.max_vec = 8;
  in.x_bytes = 2;
  in.dout_bytes = 2;
  in.backward = true;
  in.arch = 90;
  const RowPlan rms = plan_rows(in);
  in.center = true;
  const RowPlan ln = plan_rows(in);
  ASSERT_TRUE(rms.synced && ln.synced) << rms.str() << " / " << ln.str();
  EXPECT_EQ(rms.min_blocks, 2);  // the timeout made three spill (kSyncedBlocks)
  EXPECT_EQ(ln.min_blocks, 2);
  const std::int64_t chunks = split_chunks(in.n, ln);
  EXPECT_TRUE(fit_to_device(ln, in.n, static_cast<int>((chunks + 1) / 2)).synced);
  EXPECT_FALSE(fit_to_device(ln, in.n, static_cast<int>((chunks + 1) / 2) - 1).synced);
}

// The forward pipeline (persistent rows, next row prefetched) only for 16-bit rows
// of 1024-thread CTAs (one per SM) whose epilogue leaves room for a second raw row: no residual,
// no LayerNorm centring, no bias (those spilled under 64 registers).
TEST(RmsNormPlan, ForwardPrefetchOnlyForLongPlainSixteenBitRows) {
  auto fwd = [](std::int64_t n, DType x, bool residual, bool center, bool bias, int max_vec = 8) {
    RowPlanInputs in;
    in.n = n;
    in.max_vec = max_vec;
    in.x_bytes = static_cast<int>(dtype_size(x));
    in.arch = 90;
    in.residual = residual;
    in.center = center;
    in.bias = bias;
    return plan_rows(in);
  };
  for (std::int64_t n : {32768, 65536, 131072, 262144}) {
    EXPECT_TRUE(fwd(n, bf16, false, false, false).prefetch) << n;
    EXPECT_TRUE(fwd(n, f16, false, false, false).prefetch) << n;
    EXPECT_FALSE(fwd(n, bf16, true, false, false).prefetch) << n;
    EXPECT_FALSE(fwd(n, bf16, false, true, false).prefetch) << n;
    EXPECT_FALSE(fwd(n, bf16, false, false, true).prefetch) << n;
    EXPECT_FALSE(fwd(n, f32, false, false, false).prefetch) << n;
    EXPECT_FALSE(fwd(n, bf16, false, false, false, 4).prefetch) << n;  // 8-byte vectors
  }
  // Several CTAs per SM already overlap one another's loads (N=16384: 512 threads,
  // measured slower with the pipeline).
  EXPECT_FALSE(fwd(4096, bf16, false, false, false).prefetch);
  EXPECT_FALSE(fwd(16384, bf16, false, false, false).prefetch);
}

// LayerNorm backward with db on 16-bit rows of N=4096 (the cp.async ring's rows):
// on sm_90 and later 16 columns a thread, two 256-thread CTAs per SM with registers
// for both sums; sm_80, N=2048 and N=8192 keep their plans. Rows without
// dresidual_out, and with it up to N=2048, are checked on sm_100: sm_90 takes plain
// register rows there (with_plain16_rows, BackwardPlainSixteenBitRowsWhereMeasured).
TEST(RmsNormPlan, RingRowsWithDbiasTakeSixteenColumnsOnSm90AtN4096) {
  RmsBwdSpec ln = plain_bwd_spec(4096);
  ln.center = true;
  ln.dbias = bf16;
  // Without dresidual_out the register pipeline holds them; with it, the ring where
  // shared-memory sums are off (NORMKIT_SMEM_SUMS=0), else 256 threads of 16 columns
  // with the sums in shared memory, four CTAs per SM (with_plain16_rows; plan_rows'
  // own smem_sums32 is 128 threads of 32 columns, five CTAs per SM).
  const RowPlan p = plan_bwd(ln, 8, 100);
  EXPECT_TRUE(p.prefetch && !p.async_rows) << p.str();
  EXPECT_EQ(p.tpr, 256) << p.str();
  EXPECT_EQ(p.min_blocks, 2) << p.str();
  RmsBwdSpec ln_res = ln;
  ln_res.dresidual_out = bf16;
  ln_res.plan_override = register_rows();  // sm_90's bulk ring takes these rows by itself
  const RowPlan sums = plan_bwd(ln_res, 8, 90);
  EXPECT_TRUE(sums.smem_sums && sums.threads() == 256 && sums.min_blocks == 4 && !sums.async_rows) << sums.str();
  EXPECT_EQ(sums.smem_bytes, 2 * 4096 * 4 + weight_slice_bytes(sums, 4096, 2)) << sums.str();
  ln_res.smem_sums_allowed = false;
  const RowPlan r = plan_bwd(ln_res, 8, 90);
  EXPECT_TRUE(r.async_rows && !r.prefetch) << r.str();
  EXPECT_EQ(r.tpr, 256) << r.str();
  EXPECT_EQ(r.min_blocks, 2) << r.str();
  EXPECT_EQ(plan_bwd(ln, 8, 80).tpr, 512) << plan_bwd(ln, 8, 80).str();
  ln.n = 2048;
  EXPECT_EQ(plan_bwd(ln, 8, 100).tpr, 256) << plan_bwd(ln, 8, 100).str();  // 8 columns, as before
  EXPECT_EQ(plan_bwd(ln, 8, 100).min_blocks, 3) << plan_bwd(ln, 8, 100).str();
  // N=513-1024 without dresidual_out: four 32-thread rows of 32 columns a CTA of the
  // ring, four CTAs per SM (ln_rows32); with it, sm_80, or an fp16 dout beside fp32 x,
  // 128 threads of 8.
  for (std::int64_t n : {768, 1024}) {
    ln.n = n;
    const RowPlan rows32 = plan_bwd(ln, 8, 100);
    EXPECT_TRUE(rows32.tpr == 32 && rows32.rows == 4 && rows32.async_rows && rows32.min_blocks == 4) << n << " "
                                                                                                         << rows32.str();
    EXPECT_EQ(plan_bwd(ln, 8, 80).tpr, 128) << n;
    RmsBwdSpec res = ln;
    res.dresidual_out = bf16;
    EXPECT_EQ(plan_bwd(res, 8, 100).tpr, 128) << n;
  }
  ln.n = 512;
  EXPECT_EQ(plan_bwd(ln, 8, 100).tpr, 64) << plan_bwd(ln, 8, 100).str();
  ln.n = 8192;
  EXPECT_TRUE(plan_bwd(ln, 8, 100).smem_sums) << plan_bwd(ln, 8, 100).str();
}

// RMSNorm's 16-bit backward rows without dresidual_out take more CTAs per SM on
// sm_90 than the register estimate gives (measured; ptxas fits them without spills,
// RmsNormKernelSweep): seven 128-thread CTAs of register rows, two 512-thread CTAs
// of the ring (64 registers). sm_80 and rows with dresidual_out keep the estimate.
TEST(RmsNormPlan, RmsNormSixteenBitBackwardRowsTakeMoreCtasOnSm90) {
  for (std::int64_t n : {256, 512, 1024, 2048}) {
    const RowPlan p = plan_bwd(plain_bwd_spec(n), 8, 90);
    EXPECT_EQ(p.threads(), 128) << n << " " << p.str();
    EXPECT_EQ(p.min_blocks, 7) << n << " " << p.str();
    EXPECT_LT(plan_bwd(plain_bwd_spec(n), 8, 80).min_blocks, 7) << n;
    RmsBwdSpec res = plain_bwd_spec(n);
    res.dresidual_out = bf16;
    EXPECT_LT(plan_bwd(res, 8, 90).min_blocks, 7) << n;
  }
  RmsBwdSpec ring4096 = plain_bwd_spec(4096);  // the ring where shared-memory sums are off
  ring4096.smem_sums_allowed = false;
  const RowPlan p4096 = plan_bwd(ring4096, 8, 90);  // measured no faster with 4
  EXPECT_TRUE(p4096.async_rows) << p4096.str();
  EXPECT_EQ(p4096.min_blocks, 3) << p4096.str();
  // sm_100, which shares the rule: sm_90 takes plain rows there (with_plain16_rows).
  const RowPlan p8192 = plan_bwd(plain_bwd_spec(8192), 8, 100);
  EXPECT_TRUE(p8192.async_rows) << p8192.str();
  EXPECT_EQ(p8192.min_blocks, 2) << p8192.str();
}

// fp32 backward rows in registers take the CTAs per SM measured on sm_90 (more than
// the register estimate gives; ptxas fits them without spills, RmsNormKernelSweep),
// LayerNorm N=4096 with db and dresidual_out at 16 columns a thread; sm_80 keeps the
// estimate.
TEST(RmsNormPlan, Fp32BackwardRowsTakeTheMeasuredCtasOnSm90) {
  auto ln = [](std::int64_t n, bool dro) {
    RmsBwdSpec s = plain_bwd_spec(n, f32);
    s.center = true;
    s.dbias = f32;
    if (dro) s.dresidual_out = f32;
    s.plan_override = register_rows();  // the bulk ring takes N=16384-131072 by itself
    return s;
  };
  auto rms_dro = [](std::int64_t n) {
    RmsBwdSpec s = plain_bwd_spec(n, f32);
    s.dresidual_out = f32;
    return s;
  };
  struct Want {
    RmsBwdSpec spec;
    int threads, min_blocks;
  };
  for (const Want& w : {Want{ln(1024, false), 128, 6}, Want{ln(2048, false), 256, 3}, Want{ln(4096, false), 512, 2},
                        Want{ln(2048, true), 256, 3}, Want{ln(4096, true), 256, 2}, Want{rms_dro(1024), 128, 4},
                        Want{rms_dro(2048), 128, 4}, Want{rms_dro(4096), 256, 2}}) {
    const RowPlan p = plan_bwd(w.spec, 4, 90);
    EXPECT_EQ(p.threads(), w.threads) << w.spec.n << " " << p.str();
    EXPECT_EQ(p.min_blocks, w.min_blocks) << w.spec.n << " " << p.str();
    const RowPlan p80 = plan_bwd(w.spec, 4, 80);
    EXPECT_TRUE(p80.min_blocks != w.min_blocks || p80.threads() != w.threads) << w.spec.n << " " << p80.str();
  }
  // fp32 rows of 8193-16384 columns: a pair of CTAs, sums in registers (not the
  // stash), of 1024 threads at 8 columns a thread; LayerNorm with dresidual_out
  // (it spilled there) of 512 threads at 16. sm_80, without clusters, and 16-bit dout
  // keep theirs.
  for (std::int64_t n : {10000, 16384}) {
    const RowPlan rms = plan_bwd(plain_bwd_spec(n, f32), 4, 90);
    EXPECT_TRUE(rms.cluster == 2 && rms.tpr == 1024 && rms.regs && rms.row_sums) << n << " " << rms.str();
    EXPECT_EQ(plan_bwd(rms_dro(n), 4, 90).tpr, 1024) << n;
    for (const bool dro : {false, true}) {
      const RowPlan p = plan_bwd(ln(n, dro), 4, 90);
      EXPECT_EQ(p.cluster, 2) << n << " " << p.str();
      EXPECT_EQ(p.tpr, dro ? 512 : 1024) << n << " " << p.str();
      EXPECT_TRUE(p.regs && p.row_sums && !p.stash && !p.split) << n << " " << p.str();
      EXPECT_FALSE(plan_bwd(ln(n, dro), 4, 80).regs && plan_bwd(ln(n, dro), 4, 80).cluster == 2) << n;
    }
  }
  RmsBwdSpec bf16_dout = ln(16384, false);
  bf16_dout.dout = bf16;
  EXPECT_FALSE(plan_bwd(bf16_dout, 4, 90).regs) << plan_bwd(bf16_dout, 4, 90).str();  // the stash
  // N=32768 takes a cluster of eight (plan_cluster_rows, the test below), not a pair.
  EXPECT_EQ(plan_bwd(ln(32768, false), 4, 90).cluster, 8) << plan_bwd(ln(32768, false), 4, 90).str();
}

// Forward calls of few rows (decode) spread their rows over the SMs, one row a CTA,
// where a row already takes >= 128 threads; many rows keep several rows a CTA.
TEST(RmsNormPlan, FewRowForwardCallsTakeOneRowPerCta) {
  // (sm_100: on sm_90 N=4096 decode rows take their own threads, DecodeRowsWhereMeasured.)
  for (const DType x : {bf16, f32}) {
    const RowPlan many = plan(4096, x, false, false, "sm_100a");
    const RowPlan few = plan(4096, x, false, false, "sm_100a", 8, false, /*few_rows=*/true);
    EXPECT_EQ(few.tpr, many.tpr) << few.str();
    EXPECT_GE(few.tpr, 128) << few.str();
    EXPECT_GT(many.rows, 1) << many.str();
    EXPECT_EQ(few.rows, 1) << few.str();
  }
  // Rows of < 128 threads keep several a CTA; backward calls are unchanged.
  EXPECT_GT(plan(1024, bf16, false, false, "sm_90a", 8, false, true).rows, 1);
  EXPECT_EQ(plan(2048, bf16, true, false, "sm_90a", 8, true, true).rows,
            plan(2048, bf16, true, false, "sm_90a", 8, true, false).rows);
}

TEST(RmsNormPlan, LongRowsUseClustersOnlyWhereTheTargetHasThem) {
  EXPECT_GT(plan(262144, bf16, false, false, "sm_90a").cluster, 1);
  EXPECT_TRUE(plan(262144, bf16, false, false, "sm_90a").regs);
  EXPECT_EQ(plan(262144, bf16, false, false, "sm_80").cluster, 1);
  // Backward: short rows keep dw/db sums in the row kernel's registers; rows too
  // long for one CTA's registers keep their slice of h and dout in shared memory
  // across a cluster (the stash: up to 2 CTAs with dw/db, 4 without, dw/db from
  // the column pass) on sm_90; longer rows, and rows beyond one CTA's registers
  // without clusters, are split into column chunks (no cluster, dw/db in the
  // dx kernel).
  EXPECT_TRUE(plan(4096, bf16, true, false, "sm_90a").row_sums);
  EXPECT_TRUE(plan(4096, bf16, true, false, "sm_90a").regs);
  EXPECT_FALSE(plan(4096, bf16, true, false, "sm_90a").stash);
  // 16-bit rows with dw alone up to N=32768: a pair of 512-thread CTAs holding 32
  // columns a thread and their dw sums in registers (sm_100; sm_90 takes a cluster
  // of two 1024-thread CTAs at 16 columns, plan_cluster_rows); not with db; with
  // dresidual_out the same cluster on sm_90 (LayerNorm's: four, one CTA per SM), the
  // stash beyond.
  for (const DType x : {bf16, f16}) {
    EXPECT_EQ(plan(32768, x, true, false, "sm_90a", 8, true).cluster, 2);
    const RowPlan pair = plan(32768, x, true, false, "sm_100a", 8, true);
    EXPECT_TRUE(pair.regs && pair.row_sums && !pair.stash && !pair.split) << pair.str();
    EXPECT_EQ(pair.cluster, 2) << pair.str();
    EXPECT_EQ(pair.tpr, 512) << pair.str();
    EXPECT_TRUE(plan(32768, x, true, true, "sm_90a", 8, true).stash);  // with db
    RmsBwdSpec res = plain_bwd_spec(32768, x);
    res.dresidual_out = x;
    EXPECT_EQ(plan_bwd(res, 8, 90).cluster, 2) << plan_bwd(res, 8, 90).str();
    EXPECT_TRUE(plan_bwd(res, 8, 100).stash) << plan_bwd(res, 8, 100).str();
    res.center = true;
    EXPECT_EQ(plan_bwd(res, 8, 90).cluster, 4) << plan_bwd(res, 8, 90).str();
  }
  for (const auto& [n, x, grads] : {std::tuple{32768L, bf16, false}, {32768L, f32, false}}) {
    const RowPlan p = plan(n, x, true, false, "sm_90a", 8, grads);
    EXPECT_TRUE(p.stash) << n << " " << p.str();
    EXPECT_FALSE(p.regs || p.split || p.row_sums) << n << " " << p.str();
    EXPECT_LE(p.smem_bytes, 72 * 1024) << n << " " << p.str();
    EXPECT_GE(p.min_blocks, 3) << n << " " << p.str();
    EXPECT_LE(p.cluster, grads ? 2 : 4) << n << " " << p.str();
  }
  for (const auto& [n, x, grads, target] :
       {std::tuple{131072L, bf16, false, "sm_90a"}, {262144L, bf16, true, "sm_100a"}, {32768L, f32, true, "sm_100a"},
        {262144L, f32, false, "sm_90a"}, {262144L, bf16, true, "sm_80"}, {32768L, bf16, false, "sm_80"}}) {
    const RowPlan p = plan(n, x, true, false, target, 8, grads);
    EXPECT_TRUE(p.split) << n << " " << target << " " << p.str();
    EXPECT_TRUE(p.row_sums) << n << " " << p.str();
    EXPECT_EQ(p.cluster, 1) << n << " " << p.str();
    // Four vectors a thread (two with db where the sums stay in registers, below).
    EXPECT_EQ(p.split_items, 4) << n << " " << p.str();
    // Without dw/db: one kernel that waits for the row's chunk sums, if the device
    // holds a row's chunks at once; else the two split kernels.
    EXPECT_EQ(p.synced, !grads) << n << " " << p.str();
    if (p.synced) {
      EXPECT_TRUE(fit_to_device(p, n, 132).synced) << n << " " << p.str();
      const int too_few = static_cast<int>((split_chunks(n, p) - 1) / p.min_blocks);
      const RowPlan small = fit_to_device(p, n, too_few);
      EXPECT_FALSE(small.synced) << n << " " << small.str();
      EXPECT_LE(small.min_blocks, p.min_blocks);
      EXPECT_TRUE(fit_to_device(p, n, too_few + 1).synced) << n;
    }
  }
  // With db two vectors a thread (two sums in registers); rows that wait keep the
  // sums in shared memory and take four.
  EXPECT_EQ(plan(262144, bf16, true, true, "sm_90a", 8, true).split_items, 2);
  EXPECT_EQ(plan(65536, f32, true, true, "sm_90a", 8, true).split_items, 4);
  RmsBwdSpec db_heads = plain_bwd_spec(262144);
  db_heads.dbias = bf16;
  db_heads.many_heads = true;
  EXPECT_EQ(plan_bwd(db_heads, 8, 90).split_items, 2);
  // With dw/db the dx kernel's CTAs exchange the chunk sums (wait_dots: no dot
  // kernel) where a part's chunks fit the device at once and the call has one head,
  // as measured: fp32 rows up to N=131072 (N=262144 lost with it), and 16-bit
  // LayerNorm rows beyond N=131072 with 16-bit weights, four vectors a thread (not
  // with fp32 weights: they spilled; not sm_100 rows with dresidual_out).
  for (const auto& [n, x, dbias] : {std::tuple{131072L, bf16, false}, {262144L, f32, true}, {65536L, f16, true}}) {
    EXPECT_FALSE(plan(n, x, true, dbias, "sm_90a", 8, true).wait_dots) << n;
  }
  RmsBwdSpec ln = plain_bwd_spec(262144);
  ln.center = true;
  ln.dbias = bf16;
  ln.plan_override = register_rows();  // the split rows' rule: the bulk ring takes these rows by itself
  EXPECT_TRUE(plan_bwd(ln, 8, 90).wait_dots);
  EXPECT_EQ(plan_bwd(ln, 8, 90).split_items, 4);
  ln.dresidual_out = bf16;
  EXPECT_TRUE(plan_bwd(ln, 8, 90).wait_dots);
  EXPECT_FALSE(plan_bwd(ln, 8, 100).wait_dots);
  RmsBwdSpec ln_wide_weight = ln;
  ln_wide_weight.weight = f32;
  ln_wide_weight.dbias = f32;
  EXPECT_FALSE(plan_bwd(ln_wide_weight, 8, 90).wait_dots);
  RmsBwdSpec ln_131072 = ln;
  ln_131072.n = 131072;
  EXPECT_FALSE(plan_bwd(ln_131072, 8, 90).wait_dots);
  RmsBwdSpec rms_dro = plain_bwd_spec(262144);
  rms_dro.dresidual_out = bf16;
  EXPECT_FALSE(plan_bwd(rms_dro, 8, 90).wait_dots);
  for (const auto& [n, x, dbias] :
       {std::tuple{131072L, f32, true}, {65536L, f32, true}, {65539L, f32, true}, {32768L, f32, true}}) {
    const RowPlan p = plan(n, x, true, dbias, "sm_90a", 8, true);
    EXPECT_TRUE(p.split && p.wait_dots && !p.synced) << n << " " << p.str();
    EXPECT_TRUE(fit_to_device(p, n, 132).wait_dots) << n;
    const int too_few = static_cast<int>((split_chunks(n, p) - 1) / p.min_blocks);
    EXPECT_FALSE(fit_to_device(p, n, too_few).wait_dots) << n;
    EXPECT_TRUE(fit_to_device(p, n, too_few + 1).wait_dots) << n;
    RmsBwdSpec heads = plain_bwd_spec(n, x);
    if (dbias) heads.dbias = x;
    heads.many_heads = true;
    EXPECT_FALSE(plan_bwd(heads, 8, 90).wait_dots) << n;
    EXPECT_FALSE(plan(n, x, true, dbias, "sm_90a", 8, false).wait_dots) << n;  // no dw/db: the synced kernel
  }
  // Few rows with dw/db (host-bound calls) on sm_90: register-resident rows in a
  // cluster with the sums in registers (two launches), up to 8 CTAs; without
  // dw/db, without clusters or beyond 8 CTAs, the plans above.
  auto few = [](std::int64_t n, DType x, bool dbias, bool grads, const std::string& target) {
    return plan(n, x, true, dbias, target, 8, grads, /*few_rows=*/true);
  };
  for (const auto& [n, x, dbias, cluster] : {std::tuple{32768L, bf16, false, 4}, {32768L, bf16, true, 8},
                                             {32768L, f32, false, 4}, {65536L, f16, false, 8}, {16384L, bf16, false, 2}}) {
    const RowPlan p = few(n, x, dbias, true, "sm_90a");
    EXPECT_TRUE(p.regs && p.row_sums && !p.stash && !p.split) << n << " " << p.str();
    EXPECT_EQ(p.cluster, cluster) << n << " " << p.str();
    EXPECT_EQ(p.tpr, 512) << n << " " << p.str();
  }
  EXPECT_TRUE(few(32768, bf16, false, false, "sm_90a").stash);  // no dw/db: the stash is one launch already
  EXPECT_TRUE(few(32768, bf16, false, true, "sm_80").split);
  EXPECT_TRUE(few(131072, bf16, false, true, "sm_90a").split);
  EXPECT_EQ(few(4096, bf16, false, true, "sm_90a").str(), plan(4096, bf16, true, false, "sm_90a", 8, true).str());
  EXPECT_EQ(split_chunks(131072, plan(131072, bf16, true, false, "sm_90a")), 16);
  // The stash's size is what the kernel lays out (RowStash in rmsnorm_bwd.cuh).
  EXPECT_EQ(stash_bytes(131072, 8, 8, 2, 2), 16384 * 4);
  EXPECT_EQ(stash_bytes(100, 4, 1, 4, 2), 100 * 6);
  EXPECT_FALSE(plan(262144, bf16, false, false, "sm_80").regs);
  EXPECT_GT(plan(256, bf16, false, false, "sm_90a").rows, 1);
  EXPECT_EQ(plan(1023, f16, false, false, "sm_90a").vec, 1);
  EXPECT_EQ(plan(4096, bf16, false, false, "sm_90a").vec, 8);
  EXPECT_EQ(plan(4096, f32, false, false, "sm_90a").vec, 4);
  EXPECT_EQ(plan(4096, bf16, false, false, "sm_90a", 2).vec, 2);
}

// NORMKIT_BACKWARD_PLAN's fields replace the backward plan's own choices: columns per
// thread (threads per row follow; a row beyond the CTA takes the planner's choice
// for rows too long for one CTA), most threads per CTA, min_blocks, and the pipelines (register
// prefetch and the cp.async ring) turned off; the forward ignores them.
TEST(RmsNormPlan, BackwardPlanOverrideReplacesItsFields) {
  RmsBwdSpec b = plain_bwd_spec(4096, bf16);
  b.smem_sums_allowed = false;  // the ring's rows, not smem_sums32's
  const RowPlan base = plan_bwd(b, 8, 90);
  EXPECT_EQ(base.tpr, 256) << base.str();  // 16 columns a thread
  EXPECT_TRUE(base.async_rows) << base.str();
  b.plan_override.elems_per_thread = 8;
  const RowPlan ept = plan_bwd(b, 8, 90);
  EXPECT_EQ(ept.tpr, 512) << ept.str();
  b.plan_override.cta_threads = 256;  // 512 threads of 8 columns do not fit: the planner's next choice
  const RowPlan cta = plan_bwd(b, 8, 90);
  EXPECT_LE(cta.threads(), 256) << cta.str();
  // Fewer threads than a row of 32 columns a thread needs: shared-memory sums, one
  // row a CTA (the CTA's rows would add to the same sums), N=2048 at 64 threads.
  RmsBwdSpec narrow = plain_bwd_spec(2048, bf16);
  narrow.center = true;
  narrow.dbias = bf16;
  narrow.plan_override.elems_per_thread = 8;
  narrow.plan_override.cta_threads = 128;
  const RowPlan sums = plan_bwd(narrow, 8, 90);
  EXPECT_TRUE(sums.smem_sums && sums.tpr == 64 && sums.rows == 1) << sums.str();
  b.plan_override = {};
  b.plan_override.min_blocks = 3;
  EXPECT_EQ(plan_bwd(b, 8, 90).min_blocks, 3);
  b.plan_override = {};
  b.plan_override.no_prefetch = true;
  const RowPlan plain = plan_bwd(b, 8, 90);
  EXPECT_FALSE(plain.async_rows || plain.prefetch) << plain.str();
  EXPECT_EQ(plain.smem_bytes, weight_slice_bytes(plain, b.n, 2)) << plain.str();
  // The forward takes NORMKIT_FORWARD_PLAN's fields only: these do not reach it.
  RmsFwdSpec f = plain_fwd_spec(4096, bf16);
  const RowPlan fwd = plan_fwd(f, 8, 90);
  EXPECT_EQ(plan_fwd(f, 8, 90).str(), fwd.str());
}
