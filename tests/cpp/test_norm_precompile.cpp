// Ahead-of-time compilation of LayerNorm (and RMSNorm, sharing the code): the
// kernels layernorm_precompile produces are exactly those the CUDA dispatch asks
// for in a LayerNorm call (its specs, with center), named layernorm_* but for the
// shared dw/db reduction. NVRTC only, no GPU.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "normkit/norm/layernorm.hpp"
#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/target.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_kernels.hpp"
#include "test_helpers.hpp"

using namespace normkit::norm;
using namespace normkit::norm::detail;

namespace {

constexpr DType bf16 = DType::kBFloat16;
constexpr DType f32 = DType::kFloat32;
constexpr DType f64 = DType::kFloat64;
constexpr const char* kArch = "sm_90a";

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const normkit::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The entries the dispatch compiles for calls of this variant on 16-byte-aligned
// data (norm_fwd_cuda / plan_backward with center), written out independently of
// the precompile code: the forward's and the backward's kernels for many and for
// few rows (the backward's on either memory class), each once.
std::vector<std::string> dispatch_entries(const NormVariant& v, bool center, bool smem_sums = true,
                                          bool async_rows = true, const std::string& fwd_plan = "",
                                          const std::string& bwd_plan = "",
                                          const std::vector<int>& memory_classes = {RowPlanInputs::kMemoryClasses[0],
                                                                                    RowPlanInputs::kMemoryClasses[1]}) {
  const int arch = normkit::rt::Target::parse(kArch).arch;
  if (!v.backward) {
    RmsFwdSpec s;
    s.n = v.n;
    s.x = v.x;
    s.residual = v.residual;
    s.residual_out = v.residual_out;
    s.weight = v.weight;
    s.bias = v.bias;
    s.out = v.out.value_or(v.x);
    s.store_rstd = v.store_rstd;
    s.center = center;
    s.plan_override = normkit::rt::parse_plan_override("NORMKIT_FORWARD_PLAN", fwd_plan);
    // Many rows, and few rows when that plan differs (early_params).
    std::vector<std::string> fwd;
    for (const bool few_rows : {false, true}) {
      s.few_rows = few_rows;
      s.plan = plan_fwd(s, 8, arch);
      const std::string entry = fwd_source(s).entry;
      if (fwd.empty() || fwd.front() != entry) fwd.push_back(entry);
    }
    return fwd;
  }
  std::vector<std::string> entries;
  // Either memory class's plans (an H200's, then an H100's: RowPlanInputs::slower_memory).
  for (const int memory_gbps : memory_classes)
  for (const bool few_rows : {false, true})
  for (const bool many_heads : {false, true}) {  // per-head calls: no wait in split rows
    RmsBwdSpec s;
    s.memory_gbps = memory_gbps;
    s.n = v.n;
    s.x = v.x;
    s.weight = v.weight;
    s.dout = v.dout.value_or(v.x);
    s.dresidual_out = v.residual;
    s.dx = v.out.value_or(v.x);
    s.dresidual = v.residual_out;
    s.dbias = v.bias;
    s.few_rows = few_rows;
    s.many_heads = many_heads;
    s.center = center;
    s.smem_sums_allowed = smem_sums;
    s.async_rows_allowed = async_rows;
    s.plan_override = normkit::rt::parse_plan_override("NORMKIT_BACKWARD_PLAN", bwd_plan);
    s.plan = plan_bwd(s, 8, arch);
    const RmsBwdSources k = bwd_sources(s);
    for (const std::optional<normkit::rt::KernelSource>& source :
         {std::optional(k.rows), k.row_dots, k.columns, k.param_reduce}) {
      if (!source) continue;
      bool seen = false;
      for (const std::string& e : entries) seen = seen || e == source->entry;
      if (!seen) entries.push_back(source->entry);
    }
  }
  return entries;
}

LayerNormVariant fwd_variant() {
  LayerNormVariant v;
  v.n = 4096;
  v.x = bf16;
  v.weight = f32;
  v.bias = f32;
  v.residual = bf16;
  v.residual_out = bf16;
  v.store_rstd = true;
  return v;
}

LayerNormVariant bwd_variant(std::int64_t n) {
  LayerNormVariant v;
  v.backward = true;
  v.n = n;
  v.x = bf16;
  v.weight = bf16;
  v.bias = bf16;      // dbias
  v.residual = bf16;  // dresidual_out (prenorm)
  return v;
}

class NormPrecompile : public nktest::FreshRuntime {};

}  // namespace

TEST_F(NormPrecompile, LayerNormCompilesTheDispatchsCentredKernels) {
  // N=32768: calls with few rows take another plan (register-resident rows in a cluster).
  std::set<std::string> compiled;
  for (const LayerNormVariant& v : {fwd_variant(), bwd_variant(4096), bwd_variant(32768)}) {
    SCOPED_TRACE(v.describe());
    const std::vector<std::string> expected = dispatch_entries(v, /*center=*/true);
    std::vector<std::string> reported;
    const std::vector<PrecompiledKernel> kernels =
        layernorm_precompile(v, kArch, [&](const PrecompiledKernel& k) { reported.push_back(k.template_args); });
    EXPECT_EQ(layernorm_precompile_count(v, kArch), kernels.size());
    std::vector<std::string> entries;
    for (const PrecompiledKernel& k : kernels) {
      entries.push_back(k.template_args);
      // The dw/db reduction has no centred form: one kernel, one cache entry, for both norms.
      if (k.family != "param_grad_reduce") {
        EXPECT_EQ(k.family.rfind("layernorm_", 0), 0u) << k.family;
      }
      // Compiled unless an earlier variant compiled it (the shared dw/db reduction).
      EXPECT_EQ(k.from_cache, !compiled.insert(k.template_args).second) << k.template_args;
      EXPECT_FALSE(k.cache_key.empty());
      EXPECT_EQ(k.spill_bytes, 0) << k.template_args;
    }
    EXPECT_EQ(entries, expected);
    EXPECT_EQ(reported, expected);  // the callback sees each kernel as it is done
    // A second run finds them all in the cache.
    for (const PrecompiledKernel& k : layernorm_precompile(v, kArch)) EXPECT_TRUE(k.from_cache) << k.family;
  }
}

// The long-row backward plans (split with a dot-product kernel, synced without
// dw/db) and the few-rows plans: counted without compiling.
TEST_F(NormPrecompile, LayerNormCountCoversEveryBackwardPlan) {
  for (const std::int64_t n : {256, 32768, 65536, 262144}) {
    for (const bool grads : {false, true}) {
      LayerNormVariant v = bwd_variant(n);
      if (!grads) v.weight = v.bias = std::nullopt;
      SCOPED_TRACE(v.describe());
      EXPECT_EQ(layernorm_precompile_count(v, kArch), dispatch_entries(v, true).size());
    }
  }
  LayerNormVariant fwd = fwd_variant();
  fwd.n = 262144;
  EXPECT_EQ(layernorm_precompile_count(fwd, kArch), 1u);
}

// The same variant for RMSNorm names the uncentred kernels: the operators share
// the implementation, not the kernels.
TEST_F(NormPrecompile, RmsNormNamesTheUncentredKernels) {
  RmsNormVariant rms;
  static_cast<NormVariant&>(rms) = bwd_variant(4096);
  const LayerNormVariant ln = bwd_variant(4096);
  EXPECT_EQ(rmsnorm_precompile_count(rms, kArch), dispatch_entries(rms, false).size());
  EXPECT_NE(dispatch_entries(rms, false), dispatch_entries(ln, true));
  EXPECT_EQ(rms.describe().rfind("rmsnorm_bwd n=4096 x=bf16 ", 0), 0u) << rms.describe();
  EXPECT_EQ(ln.describe().rfind("layernorm_bwd n=4096 x=bf16 ", 0), 0u) << ln.describe();
  EXPECT_EQ(fwd_variant().describe().rfind("layernorm_fwd ", 0), 0u);
}

// The plan switches (NORMKIT_SMEM_SUMS, NORMKIT_ASYNC_ROWS) reach the precompiled
// plans as they reach a call's: a cache built under them is the one a run under
// them (NORMKIT_RUN_ONLY=1) needs. bf16 N=12288 plans the shared-memory sums,
// N=4096 the cp.async ring, by default (N=16384 with dresidual_out: the bulk ring).
TEST_F(NormPrecompile, PlanSwitchesReachThePrecompiledPlans) {
  for (const std::int64_t n : {4096, 12288}) {
    RmsNormVariant v;
    static_cast<NormVariant&>(v) = bwd_variant(n);
    v.bias = std::nullopt;
    SCOPED_TRACE(v.describe());
    auto entries = [&] {
      std::vector<std::string> out;
      rmsnorm_precompile(v, kArch, [&](const PrecompiledKernel& k) { out.push_back(k.template_args); });
      return out;
    };
    const std::vector<std::string> on = entries();
    EXPECT_EQ(on, dispatch_entries(v, false));
    setenv("NORMKIT_SMEM_SUMS", "0", 1);
    setenv("NORMKIT_ASYNC_ROWS", "0", 1);
    normkit::rt::Runtime::instance().reload_config();
    const std::vector<std::string> off = entries();
    unsetenv("NORMKIT_SMEM_SUMS");
    unsetenv("NORMKIT_ASYNC_ROWS");
    normkit::rt::Runtime::instance().reload_config();
    EXPECT_EQ(off, dispatch_entries(v, false, false, false));
    EXPECT_NE(off, on);
  }
}

// NORMKIT_MEMORY_GBPS names the memory class a compile-only target plans for, as a call
// on a device plans under it: RMSNorm bf16's backward at N=32768 takes two 256-thread
// CTAs an SM on an H200's class and a cluster of four 512-thread CTAs on an H100's.
TEST_F(NormPrecompile, MemoryGbpsNamesOneClass) {
  RmsNormVariant v;
  static_cast<NormVariant&>(v) = bwd_variant(32768);
  v.bias = std::nullopt;
  v.residual = std::nullopt;
  auto entries = [&](const char* gbps) {
    setenv("NORMKIT_MEMORY_GBPS", gbps, 1);
    normkit::rt::Runtime::instance().reload_config();
    std::vector<std::string> out;
    for (const PrecompiledKernel& k : rmsnorm_precompile(v, kArch)) out.push_back(k.template_args);
    unsetenv("NORMKIT_MEMORY_GBPS");
    normkit::rt::Runtime::instance().reload_config();
    return out;
  };
  const std::vector<std::string> h100 = entries("3352"), h200 = entries("4916");
  EXPECT_EQ(h100, dispatch_entries(v, false, true, true, "", "", {3352}));
  EXPECT_EQ(h200, dispatch_entries(v, false, true, true, "", "", {0}));
  EXPECT_NE(h100, h200);
  EXPECT_EQ(rmsnorm_precompile_count(v, kArch), dispatch_entries(v, false).size());
}

// A cache precompiled under NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN holds the
// kernels of the plans those force, as a call under them plans (it ignored them).
TEST_F(NormPrecompile, PlanOverridesReachThePrecompiledPlans) {
  struct Case {
    const char* variable;
    const char* plan;
    bool backward;
    std::int64_t n;
  };
  for (const Case& c : {Case{"NORMKIT_BACKWARD_PLAN", "row=bulk,cta=256,minb=2,cluster=4", true, 32768},
                        Case{"NORMKIT_FORWARD_PLAN", "ept=16,cta=512", false, 8192}}) {
    LayerNormVariant v = c.backward ? bwd_variant(c.n) : fwd_variant();
    v.n = c.n;
    SCOPED_TRACE(std::string(c.variable) + "=" + c.plan + " " + v.describe());
    auto entries = [&] {
      std::vector<std::string> out;
      layernorm_precompile(v, kArch, [&](const PrecompiledKernel& k) { out.push_back(k.template_args); });
      return out;
    };
    const std::vector<std::string> own = entries();
    setenv(c.variable, c.plan, 1);
    normkit::rt::Runtime::instance().reload_config();
    const std::vector<std::string> forced = entries();
    unsetenv(c.variable);
    normkit::rt::Runtime::instance().reload_config();
    const std::string fwd_plan = c.backward ? "" : c.plan;
    const std::string bwd_plan = c.backward ? c.plan : "";
    EXPECT_EQ(forced, dispatch_entries(v, true, true, true, fwd_plan, bwd_plan));
    EXPECT_NE(forced, own);
  }
}

TEST_F(NormPrecompile, ErrorsNameTheOperatorAndArgument) {
  LayerNormVariant v = fwd_variant();
  v.n = 0;
  EXPECT_EQ(error_of([&] { layernorm_precompile_count(v, kArch); })
                .rfind("layernorm_precompile: argument 'n' must be >= 1, got 0", 0),
            0u);
  v = bwd_variant(4096);
  v.dout = f64;
  EXPECT_EQ(error_of([&] { layernorm_precompile(v, kArch); })
                .rfind("layernorm_precompile: argument 'dout' is fp64; float64 runs only on the CPU fallback", 0),
            0u);
  RmsNormVariant r;
  r.n = 256;
  r.weight = f64;
  EXPECT_EQ(error_of([&] { rmsnorm_precompile_count(r, kArch); })
                .rfind("rmsnorm_precompile: argument 'weight' is fp64", 0),
            0u);
}
