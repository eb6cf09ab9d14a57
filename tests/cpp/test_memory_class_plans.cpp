// The plans that differ by the device's memory class (RowPlanInputs::slower_memory:
// an H100's ~3350 GB/s against an H200's ~4900, both sm_90 with 132 SMs): on the
// H100's class each such row takes the kernel that NORMKIT_*_PLAN measured there
// (rmsnorm_heuristics_bwd_bulk.cpp, rmsnorm_heuristics_fwd.cpp, evict_first_measured in
// rmsnorm_heuristics_bwd.cpp), and the H200's class (and an unknown bandwidth) keeps
// its own. No compiler, no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "normkit/runtime/runtime.hpp"
#include "rmsnorm_test_specs.hpp"

using namespace rmsnorm_test;

namespace {
constexpr int kH100Gbps = 3352;
constexpr int kH200Gbps = 4916;

bool has_option(const normkit::rt::KernelSource& k, const std::string& option) {
  return std::find(k.options.begin(), k.options.end(), option) != k.options.end();
}

// The row kernel's instantiation of `s` planned for a device of `gbps` (0: unknown),
// under NORMKIT_*_PLAN=`override_text` where given.
std::string bwd_kernel(RmsBwdSpec s, int gbps, const std::string& override_text = "") {
  s.memory_gbps = gbps;
  if (!override_text.empty()) s.plan_override = normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", override_text);
  s.plan = plan_bwd(s, 8, 90);
  return bwd_source(s).template_args;
}
// The forward's instantiation and its launch (RowPlan::sm_ctas is the launch's alone).
std::string fwd_kernel(RmsFwdSpec s, int gbps, const std::string& override_text = "") {
  s.memory_gbps = gbps;
  if (!override_text.empty()) s.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", override_text);
  s.plan = plan_fwd(s, 8, 90);
  return fwd_source(s).template_args + " sm_ctas=" + std::to_string(s.plan.sm_ctas) +
         " smem=" + std::to_string(s.plan.smem_bytes);
}
}  // namespace

TEST(MemoryClass, BandwidthFromClockAndBus) {
  EXPECT_EQ(normkit::rt::memory_gbps(2619000, 5120), 3352);  // H100 SXM
  EXPECT_EQ(normkit::rt::memory_gbps(3201000, 6144), 4916);  // H200
  EXPECT_EQ(normkit::rt::memory_gbps(0, 5120), 0);
  EXPECT_EQ(normkit::rt::memory_gbps(2619000, 0), 0);
  EXPECT_EQ(normkit::rt::memory_gbps(-1, 5120), 0);
  RowPlanInputs in;
  EXPECT_FALSE(in.slower_memory());  // unknown: the H200's plans
  in.memory_gbps = kH100Gbps;
  EXPECT_TRUE(in.slower_memory());
  in.memory_gbps = kH200Gbps;
  EXPECT_FALSE(in.slower_memory());
}

// LayerNorm bf16 backward without dresidual_out: two vectors a thread on the ring from
// N=512 (N=16384 included); at N=32768 and 65536 the ring over four and eight 512-thread
// CTAs, at N=131072 over sixteen of 256 two an SM.
TEST(MemoryClass, LayerNormBf16BackwardRows) {
  for (const std::int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
    const RmsBwdSpec s = norm_bwd_spec(n, bf16, bf16, true, false);
    const std::string h100 = bwd_kernel(s, kH100Gbps);
    EXPECT_EQ(h100, bwd_kernel(s, 0, "row=bulk,ept=16")) << n;
    EXPECT_NE(h100, bwd_kernel(s, kH200Gbps)) << n;
    EXPECT_EQ(bwd_kernel(s, kH200Gbps), bwd_kernel(s, 0)) << n;
  }
  const RmsBwdSpec s = norm_bwd_spec(32768, bf16, bf16, true, false);
  EXPECT_EQ(bwd_kernel(s, kH100Gbps), bwd_kernel(s, 0, "row=bulk,cluster=4"));
  EXPECT_EQ(bwd_kernel(s, kH200Gbps), bwd_kernel(s, 0, "row=bulk,cluster=8,cta=128,minb=3"));
  const RmsBwdSpec s64k = norm_bwd_spec(65536, bf16, bf16, true, false);
  EXPECT_EQ(bwd_kernel(s64k, kH100Gbps), bwd_kernel(s64k, 0, "row=bulk,cluster=8"));
  EXPECT_NE(bwd_kernel(s64k, kH100Gbps), bwd_kernel(s64k, kH200Gbps));
  const RmsBwdSpec s128k = norm_bwd_spec(131072, bf16, bf16, true, false);
  EXPECT_EQ(bwd_kernel(s128k, kH100Gbps), bwd_kernel(s128k, 0, "row=bulk,cluster=16,cta=256,minb=2"));
  EXPECT_NE(bwd_kernel(s128k, kH100Gbps), bwd_kernel(s128k, kH200Gbps));
  const RmsBwdSpec dro32k = norm_bwd_spec(32768, bf16, bf16, true, true);
  EXPECT_EQ(bwd_kernel(dro32k, kH100Gbps), bwd_kernel(dro32k, 0, "row=bulk,cluster=4,refill=early"));
  EXPECT_EQ(bwd_kernel(dro32k, kH200Gbps), bwd_kernel(dro32k, 0, "row=bulk,cluster=8,cta=256,minb=2"));
  // Not where it was not measured: N=256, RMSNorm's short rows, dresidual_out, N=262144.
  for (const RmsBwdSpec& o : {norm_bwd_spec(256, bf16, bf16, true, false), norm_bwd_spec(2048, bf16, bf16, false, false),
                              norm_bwd_spec(2048, bf16, bf16, true, true), norm_bwd_spec(262144, bf16, bf16, true, false)})
    EXPECT_EQ(bwd_kernel(o, kH100Gbps), bwd_kernel(o, kH200Gbps)) << o.n << " center " << o.center;
}

// RMSNorm bf16 backward without dresidual_out at N=32768 and 65536: the ring over
// n / 8192 512-thread CTAs (the H200's class: two 256-thread CTAs an SM).
TEST(MemoryClass, RmsNormBf16BackwardLongRows) {
  for (const std::int64_t n : {32768, 65536}) {
    const RmsBwdSpec s = norm_bwd_spec(n, bf16, bf16, false, false);
    EXPECT_EQ(bwd_kernel(s, kH100Gbps), bwd_kernel(s, 0, "row=bulk,cluster=" + std::to_string(n / 8192))) << n;
    EXPECT_EQ(bwd_kernel(s, kH200Gbps),
              bwd_kernel(s, 0, "row=bulk,cluster=" + std::to_string(n / 8192) + ",cta=256,minb=2"))
        << n;
  }
  for (const RmsBwdSpec& o : {norm_bwd_spec(131072, bf16, bf16, false, false), norm_bwd_spec(65536, bf16, bf16, false, true),
                              norm_bwd_spec(2048, bf16, bf16, false, false), norm_bwd_spec(4096, bf16, bf16, false, true)})
    EXPECT_EQ(bwd_kernel(o, kH100Gbps), bwd_kernel(o, kH200Gbps)) << o.n << " dro " << o.dresidual_out.has_value();
}

// RMSNorm bf16 backward without dresidual_out at N=4096: one row a stage of the ring's
// 512-thread CTA on the H100's class (bulk_backward_short_rows_ept), the register rows
// on the H200's.
TEST(MemoryClass, RmsNormBf16BackwardShortRows) {
  const RmsBwdSpec s = norm_bwd_spec(4096, bf16, bf16, false, false);
  const std::string h100 = bwd_kernel(s, kH100Gbps);
  EXPECT_EQ(h100, bwd_kernel(s, 0, "row=bulk,ept=8"));
  EXPECT_NE(h100.find("norm_bwd_bulk_kernel<"), std::string::npos) << h100;
  EXPECT_EQ(bwd_kernel(s, kH200Gbps).find("norm_bwd_bulk_kernel<"), std::string::npos);
}

// refill=early on the H100's class (bulk_backward_early_refill_measured): LayerNorm bf16
// with dresidual_out N=32768, RMSNorm fp32 N=65536, RMSNorm bf16 N=16384, each the ring the
// plan already took with its stage refilled early; the H200's class and the neighbour
// rows keep the late refill.
TEST(MemoryClass, BackwardEarlyRefillRows) {
  struct Row {
    RmsBwdSpec spec;
    const char* forced;
  };
  for (const Row& r : {Row{norm_bwd_spec(32768, bf16, bf16, true, true), "row=bulk,cluster=4"},
                       Row{norm_bwd_spec(65536, f32, f32, false, false), "row=bulk"},
                       Row{norm_bwd_spec(16384, bf16, bf16, false, false), "row=bulk,ept=32"}}) {
    const std::string h100 = bwd_kernel(r.spec, kH100Gbps);
    EXPECT_EQ(h100, bwd_kernel(r.spec, 0, std::string(r.forced) + ",refill=early")) << r.spec.n;
    EXPECT_NE(h100, bwd_kernel(r.spec, 0, r.forced)) << r.spec.n;
    RmsBwdSpec h200 = r.spec;
    h200.memory_gbps = kH200Gbps;
    EXPECT_FALSE(plan_bwd(h200, 8, 90).early_refill) << r.spec.n;
    RmsBwdSpec sm100 = r.spec;
    sm100.memory_gbps = kH100Gbps;
    EXPECT_FALSE(plan_bwd(sm100, 8, 100).early_refill) << r.spec.n;
  }
  for (const RmsBwdSpec& o :
       {norm_bwd_spec(16384, bf16, bf16, true, true), norm_bwd_spec(65536, bf16, bf16, true, true),
        norm_bwd_spec(32768, bf16, bf16, true, false), norm_bwd_spec(32768, f32, f32, false, false),
        norm_bwd_spec(131072, f32, f32, false, false), norm_bwd_spec(65536, f32, f32, false, true),
        norm_bwd_spec(65536, f32, f32, true, false), norm_bwd_spec(8192, bf16, bf16, false, false),
        norm_bwd_spec(16384, bf16, bf16, true, false), norm_bwd_spec(2048, bf16, bf16, true, false),
        norm_bwd_spec(16384, f16, f16, false, false)}) {
    RmsBwdSpec s = o;
    s.memory_gbps = kH100Gbps;
    EXPECT_FALSE(plan_bwd(s, 8, 90).early_refill) << o.n << " center " << o.center << " x " << dtype_size(o.x);
  }
}

// fp32 forward rows the H100's class keeps in registers (row=regs) where the H200's
// takes the ring, and LayerNorm's with a residual at N=32768 on the ring in two
// 256-thread CTAs an SM.
TEST(MemoryClass, Fp32ForwardRows) {
  struct Row {
    std::int64_t n;
    bool center, residual;
  };
  for (const Row r : {Row{32768, true, false}, Row{65536, true, false}, Row{131072, true, false},
                      Row{32768, false, true}, Row{65536, false, true}, Row{65536, false, false},
                      Row{131072, false, false}}) {
    const RmsFwdSpec s = norm_fwd_spec(r.n, f32, f32, r.center, r.residual ? std::optional<DType>(f32) : std::nullopt, false);
    const std::string h100 = fwd_kernel(s, kH100Gbps);
    EXPECT_EQ(h100, fwd_kernel(s, 0, "row=regs")) << r.n << " " << r.center << r.residual;
    EXPECT_NE(h100, fwd_kernel(s, kH200Gbps)) << r.n << " " << r.center << r.residual;
    EXPECT_NE(h100.find("norm_fwd_kernel<"), std::string::npos) << h100;
  }
  const RmsFwdSpec ln_res = norm_fwd_spec(32768, f32, f32, true, f32, false);
  EXPECT_EQ(fwd_kernel(ln_res, kH100Gbps), fwd_kernel(ln_res, 0, "row=bulk,cluster=8,cta=256,minb=2"));
  // Left on the ring: LayerNorm with a residual N=65536, RMSNorm with one N=131072, and
  // bf16 rows.
  for (const RmsFwdSpec& o : {norm_fwd_spec(65536, f32, f32, true, f32, false),
                              norm_fwd_spec(131072, f32, f32, false, f32, false),
                              norm_fwd_spec(131072, bf16, bf16, false, std::nullopt, false)})
    EXPECT_EQ(fwd_kernel(o, kH100Gbps), fwd_kernel(o, kH200Gbps)) << o.n;
}

// The forward rows where Liger-Kernel had led on the H100 (measured_slower_memory_rows):
// the H100's class takes the measured NORMKIT_FORWARD_PLAN (CTAs an SM included), the
// H200's class keeps its own, and the N beside them (not measured) keep theirs.
TEST(MemoryClass, ForwardRowsLigerLed) {
  struct Row {
    RmsFwdSpec spec;
    const char* plan;
  };
  for (const Row& r : {Row{norm_fwd_spec(256, f32, f32, false, f32, false), "ept=2"},
                       Row{norm_fwd_spec(2048, f32, f32, false, f32, false), "ept=4"},
                       Row{norm_fwd_spec(4096, f32, f32, false, f32, false), "ept=8,occ=2"},
                       Row{norm_fwd_spec(8192, f32, f32, false, f32, false), "ept=16,occ=2"},
                       Row{norm_fwd_spec(2048, f32, f32, false, std::nullopt, false), "occ=2"},
                       Row{norm_fwd_spec(8192, f32, f32, false, std::nullopt, false), "ept=16,occ=2"},
                       Row{norm_fwd_spec(16384, f32, f32, false, std::nullopt, false), "ept=16,cta=1024"},
                       Row{norm_fwd_spec(256, bf16, bf16, false, std::nullopt, false), "ept=8"},
                       Row{norm_fwd_spec(16384, f32, f32, true, std::nullopt, false), "cta=256"},
                       Row{norm_fwd_spec(32768, bf16, bf16, false, std::nullopt, false), "ept=32,cta=1024"},
                       Row{norm_fwd_spec(4096, bf16, bf16, true, std::nullopt, false), "ept=16"}}) {
    const std::string h100 = fwd_kernel(r.spec, kH100Gbps);
    EXPECT_EQ(h100, fwd_kernel(r.spec, 0, r.plan)) << r.spec.n << " " << r.plan;
    EXPECT_NE(h100, fwd_kernel(r.spec, kH200Gbps)) << r.spec.n << " " << r.plan;
  }
  for (const RmsFwdSpec& o : {norm_fwd_spec(1024, f32, f32, false, f32, false),
                              norm_fwd_spec(16384, f32, f32, false, f32, false),
                              norm_fwd_spec(512, bf16, bf16, false, std::nullopt, false),
                              norm_fwd_spec(8192, f32, f32, true, std::nullopt, false)})
    EXPECT_EQ(fwd_kernel(o, kH100Gbps), fwd_kernel(o, kH200Gbps)) << o.n;
  // NORMKIT_FORWARD_PLAN's occ= alone keeps the measured shape beside it, its own cap
  // over the shape's (RMSNorm fp32 N=16384: one 1024-thread CTA a row, no cap of its own).
  RmsFwdSpec wide = norm_fwd_spec(16384, f32, f32, false, std::nullopt, false);
  EXPECT_EQ(fwd_kernel(wide, kH100Gbps, "occ=2"), fwd_kernel(wide, 0, "ept=16,cta=1024,occ=2"));
  RmsFwdSpec capped = norm_fwd_spec(8192, f32, f32, false, std::nullopt, false);
  EXPECT_EQ(fwd_kernel(capped, kH100Gbps, "occ=3"), fwd_kernel(capped, 0, "ept=16,occ=3"));
}

// The backward row kernel's stores evict-first (-DNK_PLAN_STORE_CACHE=1) on the H100's class
// without dresidual_out where a thread has more than 64 registers, not with it, not in the forward, not on the H200's class, not
// under a forced plan field, not in calls of few rows.
TEST(MemoryClass, EvictFirstStores) {
  auto rows = [](RmsBwdSpec s, int gbps, const std::string& override_text = "") {
    s.memory_gbps = gbps;
    if (!override_text.empty())
      s.plan_override = normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", override_text);
    s.plan = plan_bwd(s, 8, 90);
    return bwd_sources(s);
  };
  for (const std::int64_t n : {1024, 4096, 8192, 32768, 131072}) {
    for (const bool center : {false, true}) {
      for (const DType x : {bf16, f32}) {
        const RmsBwdSpec s = norm_bwd_spec(n, x, x, center, false);
        const RmsBwdSources h100 = rows(s, kH100Gbps);
        RmsBwdSpec planned = s;
        planned.memory_gbps = kH100Gbps;
        const RowPlan p = plan_bwd(planned, 8, 90);
        // Every bf16 row measured; fp32 rows of 64 registers a thread are left plain.
        const bool roomy = std::int64_t{p.threads()} * p.min_blocks < 1024;
        EXPECT_TRUE(x == f32 || roomy) << n << " " << center << " " << p.str();
        EXPECT_EQ(has_option(h100.rows, "-DNK_PLAN_STORE_CACHE=1"), roomy) << n << " " << center << " " << p.str();
        if (h100.param_reduce) {
          EXPECT_TRUE(h100.param_reduce->options.empty());
        }
        EXPECT_FALSE(has_option(rows(s, kH200Gbps).rows, "-DNK_PLAN_STORE_CACHE=1")) << n;
        EXPECT_FALSE(has_option(rows(s, 0).rows, "-DNK_PLAN_STORE_CACHE=1")) << n;
        EXPECT_FALSE(has_option(rows(s, kH100Gbps, "row=regs").rows, "-DNK_PLAN_STORE_CACHE=1")) << n;
        EXPECT_FALSE(has_option(rows(norm_bwd_spec(n, x, x, center, true), kH100Gbps).rows, "-DNK_PLAN_STORE_CACHE=1"))
            << n;
        RmsBwdSpec few = s;
        few.few_rows = true;
        EXPECT_FALSE(has_option(rows(few, kH100Gbps).rows, "-DNK_PLAN_STORE_CACHE=1")) << n;
      }
    }
  }
  RmsFwdSpec f = plain_fwd_spec(4096, bf16);
  f.memory_gbps = kH100Gbps;
  f.plan = plan_fwd(f, 8, 90);
  EXPECT_FALSE(f.plan.evict_first);
  EXPECT_TRUE(fwd_source(f).options.empty());
}
