// Every class of RMSNorm kernel the dispatcher can pick (multi-row CTAs for short
// rows, one CTA per row, clusters for long rows on sm_90+, the two-pass kernel for
// long rows without clusters, scalar access for odd N / unaligned data, every
// optional tensor, mixed dtypes) compiles through NVRTC for sm_80, sm_90a and
// sm_100a with zero local-memory spill bytes in the ptxas report. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "normkit/runtime/runtime.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_kernels.hpp"
#include "kernel_sweep_fixture.hpp"
#include "rmsnorm_test_specs.hpp"
#include "test_helpers.hpp"

using namespace normkit::norm;
using namespace normkit::norm::detail;
using normkit::rt::Target;
using namespace rmsnorm_test;

namespace {

struct FwdCase {
  std::int64_t n;
  DType x;
  std::optional<DType> residual, residual_out, weight, bias;
  DType out;
  bool rstd;
  int max_vec;
};

struct BwdCase {
  std::int64_t n;
  DType x;
  std::optional<DType> weight;
  DType dout;
  std::optional<DType> dresidual_out;
  DType dx;
  std::optional<DType> dresidual;
  bool dbias;
  int max_vec;
};

const std::vector<FwdCase> kFwd = {
    {256, bf16, {}, {}, bf16, {}, bf16, false, 8},                  // many rows per CTA
    {4096, bf16, bf16, f32, f32, bf16, bf16, true, 8},              // all features, fp32 weight
    {8192, f16, f16, f16, f16, f16, f32, true, 8},                  // out_dtype differs
    {32768, f32, {}, {}, f32, {}, f32, true, 8},                    // one CTA per row, fp32
    {131072, bf16, bf16, bf16, bf16, bf16, bf16, true, 8},          // cluster (sm_90+) / two-pass (sm_80)
    {65536, bf16, {}, {}, f32, {}, bf16, true, 8},                  // 64 elements a thread, fp32 weight
    {131072, bf16, {}, {}, {}, {}, bf16, true, 8},                  // pipelined rows (prefetch) in clusters
    {262144, f32, f32, f32, f32, f32, f32, true, 8},                // longest rows, fp32
    {1023, f16, f16, f32, bf16, f32, f16, true, 8},                 // odd N: scalar access
    {4096, bf16, {}, {}, f32, {}, bf16, false, 1},                  // unaligned data: scalar access
};

const std::vector<BwdCase> kBwd = {
    {256, bf16, bf16, bf16, {}, bf16, {}, true, 8},                 // many rows per CTA + dbias
    {4096, bf16, f32, bf16, bf16, bf16, f32, false, 8},             // fp32 weight, prenorm
    {8192, f32, {}, f32, {}, f32, {}, false, 8},                    // no weight
    {16384, f16, f16, f16, f16, f16, f16, true, 8},                 // all features
    {65536, bf16, bf16, bf16, {}, bf16, {}, false, 8},              // cluster (sm_90+) / two-pass
    {262144, bf16, f32, bf16, bf16, bf16, bf16, true, 8},           // two-pass everywhere
    {1023, f16, bf16, f16, {}, f16, {}, true, 8},                   // odd N
};

class RmsNormKernels : public nktest::FreshRuntime, public ::testing::WithParamInterface<std::string> {
 protected:
  void expect_clean(const normkit::rt::KernelSource& source, const std::string& what) {
    const std::string target = GetParam();
    auto k = rt().compile(source, Target::parse(target));
    EXPECT_GT(k->registers, 0) << what << " on " << target << " (no ptxas report)";
    EXPECT_EQ(k->spill_store_bytes, 0) << what << " on " << target << "\n" << k->ptxas_log;
    EXPECT_EQ(k->spill_load_bytes, 0) << what << " on " << target << "\n" << k->ptxas_log;
  }
};


}  // namespace

TEST_P(RmsNormKernels, ForwardVariantsCompileWithoutSpills) {
  for (const FwdCase& c : kFwd) {
    RmsFwdSpec s;
    s.n = c.n;
    s.x = c.x;
    s.residual = c.residual;
    s.residual_out = c.residual_out;
    s.weight = c.weight;
    s.bias = c.bias;
    s.out = c.out;
    s.store_rstd = c.rstd;
    s.plan = plan_fwd(s, c.max_vec, arch_of(GetParam()));
    expect_clean(fwd_source(s), "fwd n=" + std::to_string(c.n) + " " + s.plan.str());
  }
}

TEST_P(RmsNormKernels, BackwardVariantsCompileWithoutSpills) {
  for (const BwdCase& c : kBwd) {
   for (const bool few_rows : {false, true})
   for (const bool many_heads : {false, true}) {  // split rows wait (one head) or take the dot kernel
    RmsBwdSpec s;
    s.few_rows = few_rows;
    s.many_heads = many_heads;
    s.n = c.n;
    s.x = c.x;
    s.weight = c.weight;
    s.dout = c.dout;
    s.dresidual_out = c.dresidual_out;
    s.dx = c.dx;
    s.dresidual = c.dresidual;
    if (c.dbias) s.dbias = c.weight.value_or(c.x);
    s.plan = plan_bwd(s, c.max_vec, arch_of(GetParam()));
    // Every kernel the call launches: row kernel, column pass, partials reduction.
    const RmsBwdSources k = bwd_sources(s);
    const std::string what = "bwd n=" + std::to_string(c.n) + " " + s.plan.str();
    expect_clean(k.rows, what);
    EXPECT_EQ(k.columns.has_value(), !s.plan.row_sums && (c.weight || c.dbias)) << what;
    if (k.columns) expect_clean(*k.columns, what + " (columns)");
    EXPECT_EQ(k.row_dots.has_value(), s.plan.split && !s.plan.synced && !s.plan.wait_dots) << what;
    // Split rows with dw/db wait (one kernel) where measured faster: fp32, N <= 131072
    // (these are RMSNorm rows; 16-bit LayerNorm rows: test_rmsnorm_plans.cpp).
    EXPECT_EQ(s.plan.wait_dots, s.plan.split && !s.plan.synced && !many_heads && c.x == f32 && c.n <= 131072)
        << what;
    EXPECT_EQ(s.plan.synced, s.plan.split && !c.weight && !c.dbias) << what;
    if (k.row_dots) expect_clean(*k.row_dots, what + " (row dots)");
    EXPECT_EQ(k.param_reduce.has_value(), c.weight || c.dbias) << what;
   }
  }
  for (const ParamReduceSpec& r : {ParamReduceSpec{bf16, bf16}, ParamReduceSpec{f32, {}}, ParamReduceSpec{{}, f16}})
    expect_clean(param_reduce_source(r), "param_grad_reduce");
}

INSTANTIATE_TEST_SUITE_P(Targets, RmsNormKernels, ::testing::Values("sm_80", "sm_90a", "sm_100a"),
                         [](const auto& info) { return info.param; });

// The H200 test grid's row lengths x dtypes x weight dtypes, forward and backward,
// as the dispatcher plans them for aligned data on sm_90a: none may spill.
// LayerNorm runs the same kernels with CENTER (a second reduction in the forward,
// the mean(g) sums in the backward): every plan of the grid's row lengths, with
// weight and bias (dw and db) and with weight alone, compiles without spills on
// sm_90a, sm_80 and sm_100a.
TEST_F(RmsNormKernelSweep, LayerNormKernelsCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_80", "sm_100a"}) {
    for (std::int64_t n : {192, 1024, 4096, 8192, 32768, 65536, 131072, 262144}) {
      for (DType x : {bf16, f16, f32}) {
        // Forward: with a residual and fp32 parameters, and without a residual with
        // parameters in x's dtype (the rows the forward pipeline takes).
        for (const bool residual : {true, false}) {
          RmsFwdSpec f = plain_fwd_spec(n, x);
          if (residual) {
            f.residual = x;
            f.residual_out = x;
            f.weight = f32;
          }
          f.bias = f.weight;
          f.store_rstd = true;
          f.center = true;
          f.plan = plan_fwd(f, 8, arch_of(target));
          expect_fwd_clean(f, target);
          ++kernels;
        }
        // The backward's sweep: bf16 and fp32 (sm_100a caught the stash's column
        // kernel spilling 12 bytes, LayerNorm bf16 N=32768 with dw alone).
        if (x == f16) continue;
        // Parameter gradients: none, dw alone (LayerNorm without bias: bf16 N=4096
        // spilled 32 bytes in the cp.async ring at three CTAs per SM), dw and db.
        for (const int grads : {0, 1, 2}) {
          RmsBwdSpec b = plain_bwd_spec(n, x);  // weight in x's dtype: dw alone
          if (grads == 0) b.weight.reset();
          if (grads == 2) {
            b.weight = f32;
            b.dbias = f32;
          }
          b.center = true;
          b.plan = fit_to_device(plan_bwd(b, 8, arch_of(target)), n, 132);
          kernels += expect_bwd_clean(b, target);
        }
      }
    }
  }
  EXPECT_GT(kernels, 40);
}

// Shared-memory dw/db sums: the backward plans that take them compile without
// spills (RMSNorm and LayerNorm, with and without db and dresidual_out).
TEST_F(RmsNormKernelSweep, SharedMemorySumsBackwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_80"}) {
    for (std::int64_t n : {8192, 16384}) {
      for (const bool center : {false, true}) {
        for (const bool residual : {false, true}) {
          RmsBwdSpec b = plain_bwd_spec(n);
          if (center) b.dbias = f32;
          if (residual) b.dresidual_out = bf16;
          b.center = center;
          b.plan_override = register_rows();  // sm_90's bulk ring takes some by itself
          b.plan = fit_to_device(plan_bwd(b, 8, arch_of(target)), n, 132);
          // N=8192 without db keeps its sums in registers, except RMSNorm's with
          // dresidual_out on sm_90 (test_backward_plan_kernels.cpp)
          if (!b.plan.smem_sums) continue;
          kernels += expect_bwd_clean(b, target);
        }
      }
    }
  }
  // per target: 16384 x {rms, ln} and 8192 x ln, each x residual; sm_90a's RMSNorm
  // N=8192 with dresidual_out, less its LayerNorm rows without dresidual_out (plain
  // register rows there: with_plain16_rows)
  EXPECT_EQ(kernels, 2 * 3 * 2 + 1 - 2);
  // Scalar rows (odd N) with db, whose sums take shared memory: their addresses
  // cost registers the estimate first left out (80 at three CTAs per SM spilled
  // 16-32 bytes, N=4097, every target).
  for (const std::string target : {"sm_90a", "sm_80", "sm_100a"}) {
    for (const DType w : {bf16, f32}) {
      for (const bool center : {false, true}) {
        RmsBwdSpec b = plain_bwd_spec(4097);
        b.weight = w;
        b.dbias = w;
        b.center = center;
        b.plan = fit_to_device(plan_bwd(b, 1, arch_of(target)), 4097, 132);
        EXPECT_TRUE(b.plan.smem_sums) << b.plan.str();
        expect_bwd_clean(b, target);
      }
    }
  }
}

// The cp.async ring (RowPlan::async_rows) for rows of CTAs under 256 threads and
// several rows per CTA, as planned for LayerNorm and RMSNorm with dresidual_out,
// and for one wide row: no spills at the CTAs per SM the plan allows, 16-bit
// dtypes, dw alone and dw with db, dresidual written or not.
TEST_F(RmsNormKernelSweep, AsyncRowsBackwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_80"}) {
    for (std::int64_t n : {256, 1024, 2048, 4096}) {
      for (DType x : {bf16, f16}) {
        for (const bool center : {false, true}) {
          for (const bool dbias : {false, true}) {
            RmsBwdSpec b = plain_bwd_spec(n, x);
            if (dbias) b.dbias = x;
            b.dresidual_out = x;
            if (dbias) b.dresidual = f32;  // both residual gradients' dtypes, once each
            b.center = center;
            b.smem_sums_allowed = false;  // LayerNorm N=4096 takes them on sm_90 (smem_sums32)
            b.plan_override = register_rows();  // sm_90's bulk ring takes some by itself
            b.plan = fit_to_device(plan_bwd(b, 8, arch_of(target)), n, 132);
            // sm_90's LayerNorm rows with dresidual_out alone up to N=2048 take plain
            // register rows instead (with_plain16_rows; their kernels:
            // PlainSixteenBitBackwardRowsCompileWithoutSpills).
            if (target == "sm_90a" && center && !dbias && n <= 2048) {
              EXPECT_FALSE(b.plan.async_rows) << target << " n=" << n << " " << b.plan.str();
              continue;
            }
            EXPECT_TRUE(b.plan.async_rows) << target << " n=" << n << " " << b.plan.str();
            kernels += expect_bwd_clean(b, target);
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, 2 * 4 * 2 * 2 * 2 - 3 * 2);
}

// Calls of few rows with a residual keep both rows raw (RAW_RES) and load weight
// and bias with the row (up to 256 bytes a thread: fp32 LayerNorm parameters):
// those paths, with parameters in x's dtype and in fp32, for both norms, without
// spills.
TEST_F(RmsNormKernelSweep, FewRowsResidualForwardCompilesWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_80", "sm_100a"})
  for (std::int64_t n : {1024, 4096, 8192}) {
    for (DType x : {bf16, f32}) {
      for (DType residual : {x, f32}) {
        for (DType param : x == f32 ? std::vector<DType>{f32} : std::vector<DType>{x, f32}) {
          for (const bool center : {false, true}) {
            RmsFwdSpec f = plain_fwd_spec(n, x);
            f.residual = residual;
            f.residual_out = residual;
            f.weight = param;
            if (center) f.bias = param;
            f.center = center;
            f.few_rows = true;
            f.plan = plan_fwd(f, 8, arch_of(target));
            EXPECT_TRUE(f.plan.early_params) << n << " " << f.plan.str();
            expect_fwd_clean(f, target);
            ++kernels;
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, 108);
}

// Forward rows with a residual in CTAs under 1024 threads issue all of their loads
// before storing residual_out (norm_fwd_kernel's BATCH_LOADS: 16-bit x and residual,
// or several rows a CTA), and backward rows with dresidual_out load it before the
// reduction (DRO_EARLY: fp32 rows, 16-bit rows from N=8192): both norms, residuals
// in x's dtype and in fp32, odd N, without spills.
TEST_F(RmsNormKernelSweep, ResidualRowsLoadingAtOnceCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_80"})
  for (std::int64_t n : {256, 1000, 4096, 8192, 16384}) {
    for (DType x : {bf16, f32}) {
      for (DType residual : {x, f32}) {
        for (const bool center : {false, true}) {
          RmsFwdSpec f = plain_fwd_spec(n, x);
          f.residual = f.residual_out = residual;
          f.center = center;
          if (center) f.bias = x;
          f.plan = plan_fwd(f, 8, arch_of(target));
          expect_fwd_clean(f, target);
          RmsBwdSpec b = plain_bwd_spec(n, x);
          b.dresidual_out = residual;
          if (residual != x) b.dresidual = residual;
          b.center = center;
          if (center) b.dbias = x;
          b.plan = fit_to_device(plan_bwd(b, 8, arch_of(target)), n, 132);
          kernels += 1 + expect_bwd_clean(b, target);
        }
      }
    }
  }
  // The autograd backward of bf16 rows with an fp32 residual stream: h (residual_out)
  // and weight in fp32, dout and dx in bf16 (the stash at N=16384 spilled 8 bytes).
  for (const std::string target : {"sm_90a", "sm_80"}) {
    RmsBwdSpec b = plain_bwd_spec(16384, f32);
    b.dout = b.dx = bf16;
    b.dresidual_out = b.dresidual = f32;
    b.plan = fit_to_device(plan_bwd(b, 8, arch_of(target)), 16384, 132);
    kernels += expect_bwd_clean(b, target);
  }
  EXPECT_GE(kernels, 160);
}

// fp32 rows with a residual, forward, from N=32768 (1024-thread CTAs; LayerNorm's
// 512 up to N=131072): 16 elements a thread over clusters of up to 16 CTAs on sm_90+
// (32 spilled 16-72 bytes), and
// fp16 rows with fp32 weights outside the pipeline at N=32768 (it spilled 12):
// both norms, bias and rstd or not, without spills on every target.
TEST_F(RmsNormKernelSweep, LongRowForwardSpillCasesCompileClean) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a", "sm_80"})
  for (std::int64_t n : {32768, 65536, 131072, 262144}) {
    for (const bool center : {false, true}) {
      for (const bool with_bias : {false, true}) {
        RmsFwdSpec f = plain_fwd_spec(n, f32);
        f.residual = f.residual_out = f32;
        if (with_bias) f.bias = f32;
        f.center = center;
        f.store_rstd = with_bias;  // the training forward stores the statistics
        // The register rows' rules (row=regs: on sm_90 the bulk ring and the staged rows
        // take some of these rows by themselves, test_forward_bulk_rows.cpp).
        f.plan_override = register_rows("", "NORMKIT_FORWARD_PLAN");
        f.plan = plan_fwd(f, 8, arch_of(target));
        if (target != "sm_80") {
          // LayerNorm's take 512-thread CTAs (two per SM) up to clusters of 16; with a
          // bias at N=262144 on sm_90, 32 elements a thread (test_forward_long_rows.cpp).
          const bool long32 = center && with_bias && n == 262144 && target == "sm_90a";
          const std::int64_t cta = long32 || (center && n <= 131072) ? 512 : 1024;
          EXPECT_EQ(f.plan.cluster, n / (long32 ? 32 : 16) / cta) << n << " " << f.plan.str();
        }
        if (f.plan.regs || target == "sm_80") {
          expect_fwd_clean(f, target);
          ++kernels;
        }
      }
    }
  }
  EXPECT_EQ(kernels, 48);
  for (const std::string target : {"sm_90a", "sm_100a"}) {
    RmsFwdSpec f = plain_fwd_spec(32768, f16);
    f.weight = f32;
    f.plan = plan_fwd(f, 8, arch_of(target));
    EXPECT_FALSE(f.plan.prefetch) << f.plan.str();
    expect_fwd_clean(f, target);
  }
}

// Forward RMSNorm rows over a cluster with the weight (and bias) in shared memory
// (RowPlan::params_smem): the pipeline's plain rows, residuals of either dtype,
// bias, fp16, rstd stored or not, without spills on sm_90a and sm_100a.
TEST_F(RmsNormKernelSweep, ForwardParamsInSharedMemoryCompileWithoutSpills) {
  struct Case {
    DType x;
    std::optional<DType> residual;
    bool bias;
  };
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a"})
  for (std::int64_t n : {65536, 262144}) {
    for (const Case& c : {Case{bf16, {}, false}, Case{bf16, bf16, false}, Case{bf16, f32, false},
                          Case{f16, f16, true}, Case{bf16, {}, true}, Case{f16, {}, false},
                          Case{bf16, bf16, true}, Case{f16, f32, true}}) {
      RmsFwdSpec f = plain_fwd_spec(n, c.x);
      f.residual = c.residual;
      f.residual_out = c.residual;
      f.weight = c.x;
      if (c.bias) f.bias = c.x;
      f.few_rows = !c.residual;  // the others take 64 elements a thread without it
      f.plan = plan_fwd(f, 8, arch_of(target));
      EXPECT_TRUE(f.plan.params_smem) << n << " " << f.plan.str();
      for (const bool rstd : {false, true}) {
        f.store_rstd = rstd;
        expect_fwd_clean(f, target);
        ++kernels;
      }
    }
  }
  EXPECT_EQ(kernels, 64);
}

// Forward 16-bit rows of 64 elements a thread in 512-thread CTAs (no residual, with a
// weight, N > 16384 on sm_90+; clusters beyond N=32768; LayerNorm storing mean and
// rstd over a cluster in 1024-thread CTAs): RMSNorm and LayerNorm with a bias, weights
// of x's dtype, the other 16-bit dtype and fp32, statistics stored or not, partly
// empty last items (N=40000), without spills on sm_90a and sm_100a.
TEST_F(RmsNormKernelSweep, SixtyFourElementForwardRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a"})
  for (std::int64_t n : {32768, 40000, 65536, 131072, 262144}) {
    for (DType x : {bf16, f16}) {
      for (DType w : {x, f32, x == bf16 ? f16 : bf16}) {
        if ((n == 40000 || n == 32768 || n == 262144) && w != f32) continue;
        for (const bool center : {false, true}) {
          for (const bool stats : {false, true}) {
            // Weights of x's dtype on sm_90 at N=65536-131072 (LayerNorm: 131072) take the
            // measured long-row shapes (test_forward_long_rows.cpp compiles those).
            if (target == "sm_90a" && w == x && (n == 131072 || (n == 65536 && !center))) continue;
            // bf16 with 16-bit parameters at N=131072 on sm_90: the bulk ring
            // (bulk_rows_measured; BulkRowsForwardCompilesWithoutSpills compiles it).
            if (target == "sm_90a" && x == bf16 && w != f32 && n == 131072) continue;
            RmsFwdSpec f = norm_fwd_spec(n, x, w, center, {}, stats);
            f.plan = plan_fwd(f, 8, arch_of(target));
            const std::int64_t threads = n == 40000 ? 1024 : n / 64;  // padded to a power of two
            const std::int64_t cta = center && stats && threads > 512 ? 1024 : 512;
            EXPECT_EQ(f.plan.threads(), cta) << n << " " << f.plan.str();
            EXPECT_EQ(f.plan.cluster, std::max<std::int64_t>(1, threads / cta)) << n << " " << f.plan.str();
            EXPECT_EQ(f.plan.min_blocks, 1024 / cta) << n << " " << f.plan.str();
            expect_fwd_clean(f, target);
            ++kernels;
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, 2 * 2 * 2 * 2 * (2 * 3 + 3 * 1) - 16);
}

TEST_F(RmsNormKernelSweep, IssueGridCompilesWithoutSpillsOnSm90a) {
  const std::string target = "sm_90a";
  int kernels = 0;
  for (std::int64_t n : {192, 256, 760, 1024, 1128, 4096, 32768, 131072, 262144}) {
    for (DType x : {bf16, f16, f32}) {
      // weight: same dtype as x, fp32 (the mixed-precision training case), none
      for (std::optional<DType> w : {std::optional<DType>(x), std::optional<DType>(f32), std::optional<DType>()}) {
        RmsFwdSpec f = plain_fwd_spec(n, x);
        f.weight = w;
        f.store_rstd = true;
        for (const bool few_rows : {false, true}) {  // few rows: weight loaded with the row (early_params)
          f.few_rows = few_rows;
          f.plan = plan_fwd(f, 8, arch_of(target));
          expect_fwd_clean(f, target);
        }
        for (const bool few_rows : {false, true}) {  // the grid's M=1/199 calls and its M=8192 ones
          RmsBwdSpec b = plain_bwd_spec(n, x);
          b.weight = w;
          b.few_rows = few_rows;
          b.plan = plan_bwd(b, 8, arch_of(target));  // as the dispatcher plans it
          if (few_rows && b.plan.str() == [&] {
                RmsBwdSpec many = b;
                many.few_rows = false;
                return plan_bwd(many, 8, arch_of(target)).str();
              }())
            continue;  // the same kernels as without
          kernels += expect_bwd_clean(b, target);
        }
        ++kernels;
      }
    }
  }
  EXPECT_GT(kernels, 100);
}

// Forward rows of 32 elements a thread (16: fp32 with a residual) that take two
// 512-thread CTAs per SM instead of one 1024-thread CTA (N >= 32768 up to clusters
// of 8, 16 for fp32 rows with a residual): LayerNorm with a residual or fp32 rows,
// RMSNorm's fp32 rows without one; LayerNorm's 16-bit rows with a residual in one
// 512-thread CTA (N=16384) at two per SM. Every weight dtype, residual dtype and
// statistics choice the rules take (the ones they leave spilled), N=40000's partly
// empty last items, on sm_90a and sm_100a.
TEST_F(RmsNormKernelSweep, TwoCtaForwardRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const std::string target : {"sm_90a", "sm_100a"})
  for (std::int64_t n : {16384, 32768, 40000, 65536, 131072}) {
    for (DType x : {bf16, f16, f32}) {
      for (DType w : {x, f32, x == bf16 ? f16 : bf16}) {
        for (std::optional<DType> res : {std::optional<DType>(), std::optional<DType>(x), std::optional<DType>(f32)}) {
          if (x != f32 && !res) continue;  // 64 elements a thread (the test above)
          if (res == x && x == f32) continue;
          for (const bool center : {false, true}) {
            for (const bool stats : {false, true}) {
              RmsFwdSpec f = norm_fwd_spec(n, x, w, center, res, stats);
              f.plan_override = register_rows("", "NORMKIT_FORWARD_PLAN");  // the rule's rows, bulk ring refused
              f.plan = plan_fwd(f, 8, arch_of(target));
              if (f.plan.threads() != 512 || f.plan.min_blocks != 2) continue;
              EXPECT_TRUE(f.plan.regs && !f.plan.prefetch && !f.plan.params_smem) << n << " " << f.plan.str();
              expect_fwd_clean(f, target);
              ++kernels;
            }
          }
        }
      }
    }
  }
  // The rules' kernels: a rule that stops applying shows here. 272, and 8 of RMSNorm's
  // 16-bit rows with a residual at N=131072 on sm_90 (test_forward_long_rows.cpp).
  EXPECT_EQ(kernels, 280);
}

// Decode calls' own plans at N=4096 and 8192 on sm_90 (with_decode_rows): RMSNorm and
// LayerNorm, bf16 and fp32, with and without a residual, statistics stored or not
// (a training step of few rows), without spills on sm_90a.
TEST_F(RmsNormKernelSweep, DecodeRowsCompileWithoutSpills) {
  int kernels = 0;
  for (std::int64_t n : {4096, 8192}) {
    for (const DType x : {bf16, f32}) {
      for (const bool center : {false, true}) {
        for (const bool residual : {false, true}) {
          for (const bool stats : {false, true}) {
            RmsFwdSpec f =
                norm_fwd_spec(n, x, x, center, residual ? std::optional<DType>(x) : std::nullopt, stats);
            f.few_rows = true;
            f.decode_rows = true;
            f.plan = plan_fwd(f, 8, 90);
            EXPECT_TRUE(f.plan.threads() == 256 && (x == bf16 && n == 4096 ? f.plan.cluster == 1 : f.plan.cluster > 1))
                << n << " " << f.plan.str();
            expect_fwd_clean(f, "sm_90a");
            ++kernels;
          }
        }
      }
    }
  }
  // LayerNorm over 128-thread CTAs of a cluster (NORMKIT_FORWARD_PLAN=ept=8,cta=128),
  // one row a CTA: NVRTC refused it with two (shifted moments' static_assert).
  for (std::int64_t n : {4096, 8192}) {
    RmsFwdSpec f = norm_fwd_spec(n, bf16, bf16, true, std::nullopt, false);
    f.few_rows = true;
    f.plan_override.elems_per_thread = 8;
    f.plan_override.cta_threads = 128;
    f.plan = plan_fwd(f, 8, 90);
    EXPECT_TRUE(f.plan.cluster > 1 && f.plan.rows == 1) << f.plan.str();
    expect_fwd_clean(f, "sm_90a");
    ++kernels;
  }
  EXPECT_EQ(kernels, 34);
}

// with_forward_elems' plans (rmsnorm_heuristics_fwd.cpp) at the ends of each of its
// ranges: RMSNorm and LayerNorm, 16-bit and fp32, with and without a residual,
// statistics stored or not, without spills on sm_90a.
TEST_F(RmsNormKernelSweep, MeasuredForwardElementsCompileWithoutSpills) {
  int kernels = 0;
  for (const DType x : {bf16, f16, f32}) {
    for (std::int64_t n : {256, 512, 2048, 4096, 8192, 16384}) {
      for (const bool center : {false, true}) {
        for (const bool residual : {false, true}) {
          for (const bool stats : {false, true}) {
            RmsFwdSpec f =
                norm_fwd_spec(n, x, x, center, residual ? std::optional<DType>(x) : std::nullopt, stats);
            f.plan = plan_fwd(f, 16 / static_cast<int>(dtype_size(x)), 90);
            RmsFwdSpec own = f;
            own.plan = plan_fwd(own, 16 / static_cast<int>(dtype_size(x)), 80);  // plan_rows' 32 a thread
            if (f.plan.tpr == own.plan.tpr) continue;
            expect_fwd_clean(f, "sm_90a");
            ++kernels;
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, 68);  // the rules' kernels (with measured_short_fp32_rows'): a rule that stops applying shows here
}
