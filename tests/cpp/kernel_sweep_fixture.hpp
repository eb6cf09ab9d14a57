// The kernel sweeps' fixture: compiles planned specs through NVRTC in a fresh
// runtime and expects zero local-memory spill bytes in the ptxas report.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "normkit/runtime/runtime.hpp"
#include "rmsnorm_kernels.hpp"
#include "test_helpers.hpp"

namespace rmsnorm_test {

class RmsNormKernelSweep : public nktest::FreshRuntime {
 protected:
  // NORMKIT_TEST_SWEEP_CACHE_DIR: one disk cache for every sweep (the Makefile's test
  // targets give one per NVRTC), so a kernel that several sweeps plan compiles once per
  // run instead of once per sweep; the cache key holds the NVRTC version, the target
  // and the source, and its entries keep the ptxas spill counts checked here.
  void SetUp() override {
    FreshRuntime::SetUp();
    if (const char* shared = std::getenv("NORMKIT_TEST_SWEEP_CACHE_DIR"); shared != nullptr && *shared != '\0') {
      setenv("NORMKIT_CACHE_DIR", shared, 1);
      fresh();
    }
  }
  // Compiles a planned forward spec for `target` and expects no spills.
  void expect_fwd_clean(const normkit::norm::detail::RmsFwdSpec& f, const std::string& target) {
    const normkit::rt::KernelSource source = normkit::norm::detail::fwd_source(f);
    auto kf = rt().compile(source, normkit::rt::Target::parse(target));
    EXPECT_EQ(kf->spill_store_bytes + kf->spill_load_bytes, 0)
        << target << " fwd n=" << f.n << " " << f.plan.str() << " " << source.template_args;
    EXPECT_EQ(source.family.rfind(f.center ? "layernorm_fwd" : "rmsnorm_fwd", 0), 0u) << source.family;
  }
  // Compiles every kernel a planned backward spec launches (row, dot, column
  // kernels) for `target`, expects no spills; returns how many it compiled.
  int expect_bwd_clean(const normkit::norm::detail::RmsBwdSpec& b, const std::string& target) {
    const normkit::norm::detail::RmsBwdSources sources = normkit::norm::detail::bwd_sources(b);
    int compiled = 0;
    for (const std::optional<normkit::rt::KernelSource>& k :
         {std::optional(sources.rows), sources.row_dots, sources.columns}) {
      if (!k) continue;
      auto kb = rt().compile(*k, normkit::rt::Target::parse(target));
      EXPECT_EQ(kb->spill_store_bytes + kb->spill_load_bytes, 0)
          << target << " bwd n=" << b.n << " " << b.plan.str() << " " << k->template_args;
      EXPECT_EQ(k->family.rfind(b.center ? "layernorm_bwd" : "rmsnorm_bwd", 0), 0u) << k->family;
      ++compiled;
    }
    return compiled;
  }
};

}  // namespace rmsnorm_test
