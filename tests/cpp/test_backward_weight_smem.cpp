// The backward register rows reading their weight slice from shared memory
// (RowPlan::weight_smem, norm_bwd_kernel's W_SMEM): where the plans take it unasked
// (weight_smem_measured in rmsnorm_heuristics_bwd.cpp), NORMKIT_BACKWARD_PLAN's w=
// forcing it either way, and every planned kernel that takes it compiled for sm_90a
// without spills, powers of two and not.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernel_sweep_fixture.hpp"
#include "normkit/runtime/config.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;
namespace rt = normkit::rt;

namespace {

RowPlan planned(std::int64_t n, DType x, bool center, bool dro, const std::string& override = "", int arch = 90,
                std::optional<DType> weight = std::nullopt, bool few_rows = false) {
  RmsBwdSpec b = norm_bwd_spec(n, x, weight.value_or(x), center, dro);
  b.few_rows = few_rows;
  b.plan_override = register_rows(override);  // the register rows' feature, not the bulk ring
  return plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), arch);
}

}  // namespace

TEST(RmsNormPlan, BackwardWeightInSharedMemory) {
  // Measured faster: 16-bit rows, fp32 rows with dresidual_out.
  for (const std::int64_t n : {1024, 2048, 4096, 8192, 32768}) {
    EXPECT_TRUE(planned(n, bf16, false, true).weight_smem) << n;
    EXPECT_TRUE(planned(n, f32, false, true).weight_smem) << n;
  }
  EXPECT_TRUE(planned(1024, bf16, false, false).weight_smem);
  EXPECT_TRUE(planned(16384, bf16, true, true).weight_smem);
  EXPECT_TRUE(planned(32768, f32, true, true).weight_smem);
  // The slice takes dynamic shared memory: a bf16 N=4096 row of one CTA, 8 KB.
  const RowPlan own = planned(4096, bf16, false, true, "w=global");
  const RowPlan with = planned(4096, bf16, false, true);
  EXPECT_FALSE(own.weight_smem);
  EXPECT_EQ(with.smem_bytes - own.smem_bytes, 4096 * 2) << with.str();
  // Left out: RMSNorm fp32 without dresidual_out at N=2049-8192 (slower), LayerNorm
  // 16-bit rows of several a CTA and the 64-register CTAs that spilled, calls of few
  // rows, weights of another width, other architectures.
  EXPECT_TRUE(planned(2048, f32, false, false).weight_smem);
  EXPECT_FALSE(planned(4096, f32, false, false).weight_smem);
  EXPECT_FALSE(planned(8192, f32, false, false).weight_smem);
  EXPECT_FALSE(planned(1024, bf16, true, false).weight_smem);
  EXPECT_FALSE(planned(4096, bf16, true, false).weight_smem);  // spilled under NVRTC 13.2
  EXPECT_FALSE(planned(16384, f32, true, false).weight_smem);
  EXPECT_FALSE(planned(16384, bf16, false, false).weight_smem);
  EXPECT_FALSE(planned(6144, bf16, true, true).weight_smem);
  EXPECT_FALSE(planned(4096, bf16, false, true, "", 90, std::nullopt, true).weight_smem);
  EXPECT_FALSE(planned(4096, bf16, false, true, "", 90, f32).weight_smem);
  EXPECT_FALSE(planned(4096, bf16, false, true, "", 100).weight_smem);
  // w=smem forces it where the plan allows it (register rows); w=global refuses it.
  EXPECT_TRUE(planned(1024, bf16, true, false, "w=smem").weight_smem);
  EXPECT_FALSE(planned(1024, bf16, false, true, "w=global").weight_smem);
  EXPECT_FALSE(planned(262144, bf16, true, false, "w=smem").weight_smem);  // split rows
  // The long register rows over clusters of 8-16 CTAs take it, but LayerNorm 16-bit
  // without dresidual_out beyond N=16384.
  EXPECT_TRUE(planned(65536, bf16, false, true).weight_smem);
  EXPECT_TRUE(planned(262144, bf16, false, false).weight_smem);
  EXPECT_TRUE(planned(131072, f32, true, true).weight_smem);
  EXPECT_FALSE(planned(32768, bf16, true, false).weight_smem);
  EXPECT_FALSE(planned(65536, f32, true, false).weight_smem);
}

// bf16, fp16 and fp32, with and without dresidual_out, at the sweep's N and others.
TEST_F(RmsNormKernelSweep, BackwardWeightSmemRowsCompileWithoutSpills) {
  int kernels = 0;
  for (const bool center : {false, true})
    for (const DType x : {bf16, f16, f32})
      for (const bool dro : {false, true})
        for (const std::int64_t n : {256, 1024, 3000, 4096, 6144, 8192, 14336, 16384, 24576, 32768, 65536, 100000, 262144}) {
          RmsBwdSpec b = norm_bwd_spec(n, x, x, center, dro);
          b.plan = plan_bwd(b, 16 / static_cast<int>(dtype_size(x)), 90);
          if (!b.plan.weight_smem) continue;
          expect_bwd_clean(b, "sm_90a");
          ++kernels;
        }
  EXPECT_GE(kernels, 70);
}
