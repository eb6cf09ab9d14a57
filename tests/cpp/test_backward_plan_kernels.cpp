// The backward plan rules measured on sm_90 (rmsnorm_heuristics.cpp), compiled for
// every dtype pairing they take: each kernel they plan must compile through NVRTC
// with zero local-memory spill bytes, and each rule must still apply where its
// comment says (a count per test). No GPU needed.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "kernel_sweep_fixture.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace normkit::norm;
using namespace normkit::norm::detail;
using namespace rmsnorm_test;

// LayerNorm's fp32 backward rows with db of 16 columns a thread over a pair of
// 512-thread CTAs (N in 8193..16384: the dw and db sums in registers; on sm_90
// without dresidual_out 8 columns at 1024 threads, the test below), with a weight
// of either dtype, dresidual_out and dresidual or not, an odd N's partly empty last
// items (N=10000), without spills on sm_90a and sm_100a (ptxas: 95-122 registers).
TEST_F(RmsNormKernelSweep, Fp32LayerNormBackwardPairsCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a"})
  for (std::int64_t n : {10000, 16384}) {
    for (DType w : {f32, bf16}) {
      for (const bool dro : {false, true}) {
        for (const bool dres : {false, true}) {
          RmsBwdSpec b = plain_bwd_spec(n, f32);
          b.weight = w;
          b.dbias = w;
          b.center = true;
          if (dro) b.dresidual_out = f32;
          if (dres) b.dresidual = f32;
          b.plan = plan_bwd(b, 8, arch_of(target));
          EXPECT_EQ(b.plan.cluster, 2) << b.plan.str();
          EXPECT_TRUE(b.plan.regs && b.plan.row_sums && !b.plan.stash) << b.plan.str();
          kernels += expect_bwd_clean(b, target);
        }
      }
    }
  }
  EXPECT_EQ(kernels, 2 * 2 * 2 * 2 * 2);
}

// fp32 rows with dw whose 8 columns a thread take two 1024-thread CTAs (N in
// 8193..16384): a cluster of two 1024-thread CTAs, 64 registers. RMSNorm with and
// without dresidual_out, LayerNorm (dw and db) without it; weights of either
// dtype, without a separate dresidual, N=10000's partly empty last items. sm_90a only: sm_100a
// spilled some of them (16-72 bytes) and keeps 512 threads.
TEST_F(RmsNormKernelSweep, Fp32WidePairBackwardRowsCompileWithoutSpills) {
  int kernels = 0;
  const std::string target = "sm_90a";
  for (std::int64_t n : {10000, 16384}) {
    for (DType w : {f32, bf16}) {
      for (const bool center : {false, true}) {
        for (const bool dro : {false, true}) {
          for (const bool dres : {false, true}) {
            RmsBwdSpec b = norm_bwd_spec(n, f32, w, center, dro, dres);
            b.plan_override = register_rows();  // the pair's rule: the bulk ring takes some by itself
            b.plan = plan_bwd(b, 8, arch_of(target));
            // Spilled at 1024 threads (with dresidual since the pair reduces through
            // row_sums_walk): keep the 512 threads of 16 columns.
            if ((center && dro) || dres) {
              EXPECT_EQ(b.plan.tpr, 512) << b.plan.str();
              continue;
            }
            EXPECT_EQ(b.plan.cluster, 2) << b.plan.str();
            EXPECT_EQ(b.plan.tpr, 1024) << b.plan.str();
            EXPECT_TRUE(b.plan.regs && b.plan.row_sums && !b.plan.stash) << b.plan.str();
            EXPECT_EQ(plan_bwd(b, 8, 100).tpr, 512) << plan_bwd(b, 8, 100).str();
            kernels += expect_bwd_clean(b, target);
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, 2 * 2 * 3);  // N x weight x (RMSNorm with and without dro, LayerNorm without)
}

// RMSNorm's 16-bit rows with dw alone: with dresidual_out at N in 4097..8192, 32
// columns a thread at 256 threads with the sums in shared memory; without it at N in
// 8193..16384, their 512-thread rows of shared-memory sums two CTAs per SM. 16-bit
// and fp32 weights, dresidual of either width, N=6000 and 12000's partly empty last
// items; sm_90a and sm_100a.
TEST_F(RmsNormKernelSweep, RmsNormSharedMemorySumRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a"}) {
    for (DType x : {bf16, f16}) {
      for (DType w : {x, f32}) {
        for (std::int64_t n : {6000, 8192}) {
          for (std::optional<DType> dres : {std::optional<DType>(), std::optional<DType>(x), std::optional<DType>(f32)}) {
            RmsBwdSpec b = plain_bwd_spec(n, x);
            b.weight = w;
            b.dresidual_out = x;
            b.dresidual = dres;
            b.plan = plan_bwd(b, 8, arch_of(target));
            EXPECT_TRUE(b.plan.smem_sums && b.plan.threads() == 256) << n << " " << b.plan.str();
            kernels += expect_bwd_clean(b, target);
          }
        }
        for (std::int64_t n : {12000, 16384}) {
          RmsBwdSpec b = plain_bwd_spec(n, x);
          b.weight = w;
          // sm_90's bulk ring takes bf16 N=16384 with a bf16 weight by itself
          // (bulk_backward_short_rows_ept): these rows under row=regs there.
          if (target == "sm_90a" && x == bf16 && w == x && n == 16384) b.plan_override = register_rows();
          b.plan = plan_bwd(b, 8, arch_of(target));
          EXPECT_TRUE(b.plan.smem_sums && b.plan.threads() == 512 && b.plan.min_blocks == 2) << n << " " << b.plan.str();
          kernels += expect_bwd_clean(b, target);
        }
      }
    }
  }
  EXPECT_EQ(kernels, 2 * 2 * 2 * (2 * 3 + 2));
}

// smem_sums32's other rows: RMSNorm without dresidual_out at N in 2049..4096 and
// LayerNorm with db and dresidual_out there, at 128 threads of 32 columns with the
// sums in shared memory, five CTAs per SM (sm_90's LayerNorm at N=4096: with_plain16_rows'
// 256 threads of 16 columns, four per SM); and ln_rows32's LayerNorm rows of N in
// 513..1024 without dresidual_out, four 32-thread rows a CTA. 16-bit and fp32
// weights (and bias), dresidual of either width, N=3000 and 768's partly empty items;
// sm_90a and sm_100a.
TEST_F(RmsNormKernelSweep, ThirtyTwoColumnBackwardRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a"}) {
    for (DType x : {bf16, f16}) {
      for (DType w : {x, f32}) {
        for (std::int64_t n : {3000, 4096}) {
          for (std::optional<DType> dres : {std::optional<DType>(), std::optional<DType>(x), std::optional<DType>(f32)}) {
            RmsBwdSpec rms = plain_bwd_spec(n, x);
            rms.weight = w;
            rms.dresidual = dres;
            RmsBwdSpec ln = rms;
            ln.center = true;
            ln.dbias = w;
            ln.dresidual_out = x;
            for (RmsBwdSpec b : {rms, ln}) {
              b.plan_override = register_rows();  // sm_90's bulk ring takes some by itself
              b.plan = plan_bwd(b, 8, arch_of(target));
              // sm_90's LayerNorm N=4096 without a separate dresidual: 256 threads of 16
              // columns, four CTAs per SM (with_plain16_rows).
              const bool plain16 = target == "sm_90a" && n == 4096 && b.center && !dres;
              EXPECT_TRUE(b.plan.smem_sums && b.plan.threads() == (plain16 ? 256 : 128) &&
                          b.plan.min_blocks == (plain16 ? 4 : 5))
                  << n << " " << b.plan.str();
              kernels += expect_bwd_clean(b, target);
            }
          }
        }
        for (std::int64_t n : {768, 1024}) {
          for (std::optional<DType> dres : {std::optional<DType>(), std::optional<DType>(f32)}) {
            RmsBwdSpec b = plain_bwd_spec(n, x);
            b.weight = w;
            b.dbias = w;
            b.center = true;
            b.dresidual = dres;
            b.plan_override = register_rows();  // sm_90's bulk ring takes some by itself
            b.plan = plan_bwd(b, 8, arch_of(target));
            // sm_90's N=1024 without a separate dresidual: the same rows without the
            // ring (with_plain16_rows).
            const bool plain16 = target == "sm_90a" && n == 1024 && !dres;
            EXPECT_TRUE(b.plan.tpr == 32 && b.plan.rows == 4 && b.plan.async_rows != plain16)
                << n << " " << b.plan.str();
            kernels += expect_bwd_clean(b, target);
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, 2 * 2 * 2 * (2 * 3 * 2 + 2 * 2));
}

// Backward rows in registers over a cluster (plan_cluster_rows): fp32 rows with dw
// (LayerNorm: and db) at N=32768-131072, RMSNorm's 16-bit rows at N=32768-262144,
// LayerNorm's without dresidual_out up to 131072 and with it at 32768, their sums in
// registers or shared memory as planned, weights of either dtype, without spills on
// sm_90a (the only target they are planned for). Not planned (they spilled): a
// separate dresidual output, and N that leaves a thread's last vectors partly empty
// (N=20000, 40000).
TEST_F(RmsNormKernelSweep, BackwardClusterRowsCompileWithoutSpills) {
  int kernels = 0;
  for (std::int64_t n : {20000, 32768, 40000, 65536, 131072, 262144}) {
    for (DType x : {bf16, f32}) {
      for (DType w : {x, x == f32 ? bf16 : f32}) {
        for (const bool center : {false, true}) {
          for (const bool dro : {false, true}) {
            for (const bool dres : {false, true}) {
              RmsBwdSpec b = norm_bwd_spec(n, x, w, center, dro, dres);
              b.plan_override = register_rows();  // the clusters' rule: the bulk ring takes many by itself
              b.plan = plan_bwd(b, 8, 90);
              const bool whole = n % 32768 == 0;
              const bool planned = whole && !dres &&
                                   (x == f32 ? n < 262144 : center ? n <= (dro ? 65536 : 131072) : true);
              // (RMSNorm bf16 N=32768: two 1024-thread CTAs, apart from the pair by their sums' place.)
              const bool cluster_rows = b.plan.cluster > 2 || (b.plan.cluster == 2 && b.plan.smem_sums);
              EXPECT_EQ(cluster_rows && b.plan.regs && !b.plan.stash && !b.plan.split, planned)
                  << n << " " << b.plan.str();
              if (!planned) continue;
              kernels += expect_bwd_clean(b, "sm_90a");
            }
          }
        }
      }
    }
  }
  // fp32: 3 N x 2 weights x 2 norms x 2 dro; bf16: RMSNorm 4 N x 2 weights x 2 dro,
  // LayerNorm without dro 3 N x 2 weights, with it N=32768 and 65536 x 2 weights.
  EXPECT_EQ(kernels, 24 + 16 + 6 + 4);
}

// NORMKIT_BACKWARD_PLAN=[ept=..,|cluster=..,]cta=..,minb=..,prefetch=0,sums=smem on `s`.
static void force_smem_sums(RmsBwdSpec& s, int ept, int cluster, int cta, int minb) {
  s.plan_override = {};
  s.plan_override.elems_per_thread = ept;
  s.plan_override.cluster = cluster;
  s.plan_override.cta_threads = cta;
  s.plan_override.min_blocks = minb;
  s.plan_override.no_prefetch = true;
  s.plan_override.smem_sums = true;
}

// NORMKIT_BACKWARD_PLAN's sums=smem: cluster rows with their dw/db sums in shared
// memory (one fp32 per column of the CTA's slice), which let 16-bit LayerNorm rows
// hold two vectors a thread (in registers they spilled 284-452 bytes). The forced
// plans of scripts/plan_cases/backward-cluster-smem-sums.txt, without spills on
// sm_90a.
TEST_F(RmsNormKernelSweep, ForcedClusterRowsWithSharedMemorySumsCompileWithoutSpills) {
  struct Case {
    std::int64_t n;
    DType x;
    int cluster, cta, minb;
    bool center, dro;
  };
  int kernels = 0;
  for (const Case& c : {Case{32768, bf16, 4, 512, 2, true, false}, Case{65536, bf16, 8, 512, 2, true, false},
                        Case{131072, bf16, 16, 512, 2, true, false}, Case{262144, bf16, 16, 1024, 1, true, false},
                        Case{65536, bf16, 8, 512, 2, false, true}, Case{262144, bf16, 16, 1024, 1, false, true},
                        Case{131072, f32, 16, 1024, 1, true, true}, Case{131072, f32, 16, 1024, 1, false, false}}) {
    RmsBwdSpec b = norm_bwd_spec(c.n, c.x, c.x, c.center, c.dro);
    force_smem_sums(b, 0, c.cluster, c.cta, c.minb);
    b.plan = plan_bwd(b, 8, 90);
    EXPECT_TRUE(b.plan.regs && b.plan.smem_sums && !b.plan.prefetch && b.plan.cluster == c.cluster) << b.plan.str();
    // One fp32 sum per column of the CTA's slice, per sum.
    EXPECT_EQ(b.plan.smem_bytes,
              (c.center ? 2 : 1) * c.n / c.cluster * 4 + weight_slice_bytes(b.plan, c.n, dtype_size(c.x)))
        << b.plan.str();
    kernels += expect_bwd_clean(b, "sm_90a");
  }
  EXPECT_EQ(kernels, 8);
}

// 16-bit rows of one CTA as plain register rows (with_plain16_rows) at the shapes
// measured, with weights (and bias) of either dtype, without spills on sm_90a. Other
// N between powers of two than LayerNorm's 1536 and 3072 are not planned so
// (BackwardPlainSixteenBitRowsWhereMeasured): threads' partly empty last vectors spilled.
TEST_F(RmsNormKernelSweep, PlainSixteenBitBackwardRowsCompileWithoutSpills) {
  struct Case {
    std::int64_t n;
    bool center, dro;
    int tpr, threads, min_blocks;
    bool smem_sums = false;
  };
  int kernels = 0;
  for (const Case& c :
       {Case{256, true, false, 16, 128, 6}, Case{512, true, false, 32, 128, 6}, Case{1024, true, false, 32, 128, 4},
        Case{1536, true, false, 64, 128, 4}, Case{2048, true, false, 64, 128, 4}, Case{3072, true, false, 128, 128, 4},
        Case{4096, true, false, 128, 128, 4}, Case{8192, true, false, 256, 256, 2},
        Case{16384, true, false, 512, 512, 1}, Case{256, true, true, 16, 128, 6}, Case{1024, true, true, 64, 128, 6},
        Case{2048, true, true, 128, 128, 8, true}, Case{4096, true, true, 256, 256, 4, true},
        Case{8192, true, true, 512, 512, 2, true}, Case{8192, false, false, 512, 512, 2}}) {
    for (const DType w : {bf16, f32}) {
      RmsBwdSpec b = norm_bwd_spec(c.n, bf16, w, c.center, c.dro);
      b.plan_override = register_rows();  // the bulk ring takes many of these rows by itself
      b.plan = plan_bwd(b, 8, 90);
      EXPECT_TRUE(b.plan.regs && b.plan.row_sums && !b.plan.async_rows && !b.plan.prefetch && b.plan.cluster == 1)
          << c.n << " " << b.plan.str();
      EXPECT_EQ(b.plan.smem_sums, c.smem_sums) << c.n << " " << b.plan.str();
      EXPECT_EQ(b.plan.tpr, c.tpr) << c.n << " " << b.plan.str();
      EXPECT_EQ(b.plan.threads(), c.threads) << c.n << " " << b.plan.str();
      EXPECT_EQ(b.plan.min_blocks, c.min_blocks) << c.n << " " << b.plan.str();
      kernels += expect_bwd_clean(b, "sm_90a");
    }
  }
  EXPECT_EQ(kernels, 30);
}

// NORMKIT_BACKWARD_PLAN's sums=smem without cluster=: LayerNorm's 16-bit register rows
// of one CTA with their dw and db sums in shared memory, at the CTAs per SM that ptxas
// sm_90a fits without spills (64-80 registers where the sums in registers took 80-145),
// the cases of scripts/plan_cases/backward-plain-smem-sums.txt and, at N=16384 one CTA
// per SM, backward-plain-smem-sums-16k.txt. Spilled, so not there:
// ept=32,cta=512,minb=2 at N=16384 (276 bytes; 520 with dresidual_out), and with
// dresidual_out ept=32,cta=256,minb=3 at N=8192 (244).
TEST_F(RmsNormKernelSweep, PlainRowsWithSharedMemorySumsCompileWithoutSpills) {
  struct Case {
    std::int64_t n;
    bool dro;
    int ept, cta, minb;
  };
  int kernels = 0;
  for (const bool dro : {false, true}) {
    for (const Case& c : {Case{1024, dro, 16, 64, 12}, Case{2048, dro, 16, 128, 8}, Case{4096, dro, 16, 256, 4},
                          Case{4096, dro, 32, 128, 6}, Case{8192, dro, 16, 512, 2}, Case{16384, dro, 16, 1024, 1},
                          Case{16384, dro, 32, 512, 1}}) {
      RmsBwdSpec b = plain_bwd_spec(c.n, bf16);
      b.center = true;
      b.dbias = bf16;
      // RMSNorm (one sum) at the shapes of the GPU test's entries too.
      if (c.n == 2048 || c.n == 8192 || c.n == 16384) {
        RmsBwdSpec rms = plain_bwd_spec(c.n, bf16);
        if (c.dro) rms.dresidual_out = bf16;
        force_smem_sums(rms, c.ept, 0, c.cta, c.minb);
        rms.plan = plan_bwd(rms, 8, 90);
        EXPECT_TRUE(rms.plan.smem_sums && rms.plan.min_blocks == c.minb) << rms.plan.str();
        kernels += expect_bwd_clean(rms, "sm_90a");
      }
      if (c.dro) b.dresidual_out = bf16;
      force_smem_sums(b, c.ept, 0, c.cta, c.minb);
      b.plan = plan_bwd(b, 8, 90);
      EXPECT_TRUE(b.plan.regs && b.plan.row_sums && b.plan.smem_sums && b.plan.rows == 1 && b.plan.cluster == 1 &&
                  !b.plan.prefetch && !b.plan.async_rows)
          << c.n << " " << b.plan.str();
      EXPECT_EQ(b.plan.smem_bytes, 2 * c.n * 4 + weight_slice_bytes(b.plan, c.n, 2)) << b.plan.str();
      EXPECT_EQ(b.plan.min_blocks, c.minb) << b.plan.str();
      kernels += expect_bwd_clean(b, "sm_90a");
    }
  }
  EXPECT_EQ(kernels, 14 + 8);
}
